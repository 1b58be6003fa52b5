"""The task heads' own behaviour; each head's outputs, losses and gradients against the reference's are checked
with the encoder's in test_bert.py."""

import pytest
import torch

from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.task_heads import BertForQuestionAnswering, ranking_loss
from tests.model.architectures.test_bert import MINI, max_diff, pair_batch, perturb

F = torch.nn.functional


def test_question_answering_ignores_padding():
    """Padding positions are never answers: lowest logits, and a loss equal to each row's loss alone."""
    torch.manual_seed(0)
    model = perturb(BertForQuestionAnswering(BertConfig(**MINI))).eval()
    batch = pair_batch([(6, 12), (4, 3)])
    real = batch["attention_mask"].bool()
    starts, ends = torch.tensor([8, 5]), torch.tensor([10, 6])
    with torch.no_grad():
        padded = model(**batch, start_positions=starts, end_positions=ends)
        alone = [model(**{k: v[row, real[row]][None] for k, v in batch.items()},
                       start_positions=starts[row, None], end_positions=ends[row, None]).loss for row in range(2)]
    assert torch.all(padded.start_logits[~real] == torch.finfo(torch.float32).min)
    assert torch.all(padded.end_logits[~real] == torch.finfo(torch.float32).min)
    assert max_diff(padded.loss, sum(alone) / 2) <= 1e-5


def by_hand(logits, labels, groups):
    """Each group of several rows with relevance: cross-entropy between softmax(logits) and the relevance
    normalised to sum 1; each other row: binary cross-entropy; the mean over both."""
    terms = []
    for g in dict.fromkeys(groups.tolist()):
        rows = (groups == g).nonzero().flatten()
        rel = labels[rows]
        if len(rows) > 1 and rel.sum() > 0:
            terms.append(-(rel / rel.sum() * F.log_softmax(logits[rows, 0], 0)).sum())
        else:
            terms += [F.binary_cross_entropy_with_logits(logits[r, 0], labels[r]) for r in rows]
    return torch.stack(terms).mean()


def test_ranking_loss_is_its_definition():
    torch.manual_seed(0)
    logits = torch.randn(9, 1, requires_grad=True)
    # a query of 3 passages (one relevant), one of 2 with graded relevance, one alone, two with nothing relevant
    labels = torch.tensor([0, 1, 0, 0.5, 1, 1, 0, 0, 0.3])
    groups = torch.tensor([7, 7, 7, 2, 2, 4, 5, 5, 9])
    mine, reference = ranking_loss(logits, labels, groups), by_hand(logits, labels, groups)
    assert mine.item() == pytest.approx(reference.item(), rel=1e-6)
    (grad,) = torch.autograd.grad(mine, logits)
    (expected,) = torch.autograd.grad(by_hand(logits, labels, groups), logits)
    assert torch.allclose(grad, expected, atol=1e-7)


def test_one_relevant_passage_is_the_softmax_cross_entropy_of_its_query():
    """The common case: the loss of each query is -log softmax(logits)[relevant], whatever the rows' order."""
    torch.manual_seed(1)
    logits = torch.randn(8, 1)
    labels = torch.tensor([0, 0, 1, 0, 1, 0, 0, 0.0])
    groups = torch.tensor([0, 1, 0, 1, 1, 0, 1, 0])  # two queries, their rows interleaved
    first = F.cross_entropy(logits[[0, 2, 5, 7], 0][None], torch.tensor([1]))
    second = F.cross_entropy(logits[[1, 3, 4, 6], 0][None], torch.tensor([2]))
    assert ranking_loss(logits, labels, groups).item() == pytest.approx(((first + second) / 2).item(), rel=1e-6)
    # shifting one query's logits changes nothing: only the order within a query is learned
    shifted = logits + 5 * (groups == 1).float()[:, None]
    assert ranking_loss(shifted, labels, groups).item() == pytest.approx(ranking_loss(logits, labels, groups).item(),
                                                                          rel=1e-5)
