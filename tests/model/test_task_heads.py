"""The task heads' own behaviour; each head's outputs, losses and gradients against the reference's are checked
with the encoder's in test_bert.py."""

import torch

from bertforge.model.config import BertConfig
from bertforge.model.task_heads import BertForQuestionAnswering
from tests.model.test_bert import MINI, max_diff, pair_batch, perturb


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
