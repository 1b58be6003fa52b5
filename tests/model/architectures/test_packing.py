"""Packing: the maps between padded and packed layouts, and the training path on packed rows."""

import pytest
import torch

import bertforge.model.architectures.bert as bf
from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.packing import DropoutNoise, DropoutSite, Packing
from tests.model.architectures.test_bert import MINI, VOCAB, max_diff, perturb


def ragged_mask() -> torch.Tensor:
    mask = torch.ones(5, 9, dtype=torch.long)
    mask[0, 4:] = 0  # right padding
    mask[1, :2] = 0  # left padding
    mask[2, [1, 5, 6, 7, 8]] = 0  # a hole, and padding at the end
    mask[3, 7:] = 0
    return mask  # row 4 has no padding


def test_pack_unpack_and_index_agree():
    mask = ragged_mask()
    packing = Packing.from_attention_mask(mask)
    x = torch.randn(5, 9, 6) * mask[..., None]
    packed = packing.pack(x)
    assert packed.shape == (int(mask.sum()), 6)
    assert torch.equal(packing.unpack(packed), x)
    positions = torch.tensor([9 * 4 + 8, 0, 9 * 1 + 2, 9 * 2 + 4])
    assert torch.equal(packed[packing.packed_index(positions)], x.flatten(0, 1)[positions])
    assert packing.packed_index(torch.tensor([9 * 2 + 1])) is None  # a hole is padding
    assert Packing.from_attention_mask(torch.ones(2, 3)) is None


def test_training_path_on_padded_rows_equals_each_row_alone():
    """The dropout path (attention written out with the padding as a bias, masks drawn per pass) with dropout
    so small it keeps everything: each row of a ragged batch gives the outputs of that row alone in eval."""
    torch.manual_seed(0)
    config = BertConfig(**{**MINI, "hidden_dropout_prob": 1e-12, "attention_probs_dropout_prob": 1e-12})
    model = perturb(bf.BertModel(config))
    mask = ragged_mask()
    ids = torch.randint(5, VOCAB, mask.shape, generator=torch.Generator().manual_seed(1))
    positions = (mask.cumsum(1) - 1).clamp(min=0)
    with torch.no_grad():
        batched = model.train()(ids, mask, position_ids=positions).last_hidden_state
        model.eval()
        for row in range(len(ids)):
            real = mask[row].bool()
            alone = model(ids[row, real][None]).last_hidden_state[0]
            assert max_diff(batched[row, real], alone) <= 1e-5, row


def test_dropout_sites_are_counted_from_the_model():
    """Each pass draws one mask per DropoutSite module; a site that takes none, or one too many, fails the pass."""
    torch.manual_seed(0)
    config = BertConfig(**{**MINI, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1})
    model = bf.BertModel(config).train()
    ids = torch.randint(5, VOCAB, (2, 6))
    sites = sum(isinstance(m, DropoutSite) for m in model.modules())
    assert sites == 3 * MINI["num_hidden_layers"] + 1  # embeddings, then per layer: probs, two outputs
    model(ids)  # every site takes its mask
    model.encoder.unused = DropoutSite("hidden")
    with pytest.raises(RuntimeError, match="hidden dropout sites took a mask"):
        model(ids)
    del model.encoder.unused
    noise = DropoutNoise.of(model, (2, 6), 2, 6, ids.device)
    for _ in range(2 * MINI["num_hidden_layers"] + 1):
        noise.take("hidden")
    with pytest.raises(RuntimeError, match="more hidden dropout sites"):
        noise.take("hidden")


@pytest.mark.parametrize("p", [0.1, 0.5, 1.0])
def test_dropout_keeps_each_element_with_probability_1_minus_p_scaled(p):
    torch.manual_seed(0)
    noise = DropoutNoise({"hidden": 1}, {"hidden": (400, 500)}, {"hidden": p}, "cpu")
    keep = noise.take("hidden")
    assert keep.mask.dtype == torch.bool  # a byte an element, as autograd keeps it for the backward pass
    x = torch.randn(400, 500, requires_grad=True)
    dropped = keep.apply(x)
    kept = dropped != 0
    assert kept.float().mean().item() == pytest.approx(1 - p, abs=0.005)
    if p < 1:
        torch.testing.assert_close(dropped[kept], x[kept] / (1 - p))
    dropped.sum().backward()
    torch.testing.assert_close(x.grad, keep.mask / (1 - p) if p < 1 else torch.zeros_like(x))
    residual = torch.randn(400, 500)
    torch.testing.assert_close(keep.add(residual, x.detach()), residual + keep.apply(x.detach()))


def test_dropout_masks_are_drawn_as_each_layer_runs():
    """No layer's mask exists before it runs: when layer i starts, exactly the sites before it took theirs."""
    config = BertConfig(**{**MINI, "hidden_dropout_prob": 0.1, "attention_probs_dropout_prob": 0.1})
    model = bf.BertModel(config).train()
    seen = []
    for layer in model.encoder.layer:
        layer.register_forward_pre_hook(lambda _, args: seen.append(dict(args[1].noise.taken)))
    model(torch.randint(5, VOCAB, (2, 6)))
    assert seen == [{"hidden": 1 + 2 * i, "attention": i} for i in range(MINI["num_hidden_layers"])]
