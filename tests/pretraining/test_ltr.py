"""Causal (left-to-right) self-attention: `is_decoder: true`, as `pretrain --objective ltr` writes it."""

import torch
import transformers

from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.bert import BertForPreTraining, BertModel
from bertforge.model.architectures.task_heads import BertForSequenceClassification

transformers.logging.set_verbosity_error()


def tiny(**kw) -> BertConfig:
    return BertConfig.from_name("tiny", vocab_size=100, is_decoder=True, **kw)


def batch(seed=0, padded=True):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, 100, (3, 12), generator=g)
    mask = torch.ones_like(ids)
    if padded:
        mask[1, 8:] = 0
        mask[2, 5:] = 0
    return ids, mask


def test_a_position_does_not_see_its_right():
    torch.manual_seed(0)
    for dropout, padded in [(0.0, False), (0.0, True), (0.1, False), (0.1, True)]:
        model = BertModel(tiny(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout))
        model.train(dropout > 0)  # with dropout: the written-out attention path, same noise for both calls
        ids, mask = batch(padded=padded)
        changed = ids.clone()
        changed[:, 4:] = (changed[:, 4:] + 7) % 95 + 5  # every token from position 4 on
        outs = []
        for x in (ids, changed):
            torch.manual_seed(1)
            outs.append(model(x, attention_mask=mask).last_hidden_state)
        assert torch.allclose(outs[0][:, :4], outs[1][:, :4], atol=1e-6), (dropout, padded)
        assert not torch.allclose(outs[0][0, 4:], outs[1][0, 4:], atol=1e-3)


def test_bidirectional_model_sees_its_right():
    model = BertModel(BertConfig.from_name("tiny", vocab_size=100)).eval()
    ids, mask = batch(padded=False)
    changed = ids.clone()
    changed[:, -1] = 5
    a, b = model(ids).last_hidden_state, model(changed).last_hidden_state
    assert not torch.allclose(a[:, 0], b[:, 0], atol=1e-4)


def test_reference_with_is_decoder_agrees(tmp_path):
    torch.manual_seed(0)
    ours = BertForPreTraining(tiny()).eval()
    ours.save_pretrained(tmp_path)
    ref = transformers.BertModel.from_pretrained(tmp_path).eval()
    assert ref.config.is_decoder
    ids, mask = batch()
    with torch.no_grad():
        mine = ours.bert(ids, attention_mask=mask).last_hidden_state
        theirs = ref(input_ids=ids, attention_mask=mask).last_hidden_state
    real = mask.bool()
    assert torch.allclose(mine[real], theirs[real], atol=1e-5)
    assert BertForPreTraining.from_pretrained(tmp_path).config.is_decoder  # the constraint survives a reload


def test_pooling_reads_the_last_real_token():
    """A causal [CLS] sees only itself, so a left-to-right model pools its last real token: the reference's
    pooler applied there; a classifier's output then depends on the whole input, not on its padding."""
    torch.manual_seed(0)
    model = BertForSequenceClassification(tiny(hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)).eval()
    ids, mask = batch()
    last = mask.sum(1) - 1
    with torch.no_grad():
        out = model.bert(ids, attention_mask=mask)
        expected = model.bert.pooler(out.last_hidden_state[torch.arange(3), last])
        assert torch.allclose(out.pooler_output, expected, atol=1e-6)
        logits = model(ids, attention_mask=mask).logits
        for row in range(3):
            alone = model(ids[row, : last[row] + 1][None]).logits[0]
            assert torch.allclose(logits[row], alone, atol=1e-5), row
        changed = ids.clone()
        changed[torch.arange(3), last] = 5
        assert not torch.allclose(model(changed, attention_mask=mask).logits, logits, atol=1e-4)
