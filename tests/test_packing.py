"""Packing: rows grouped by length for mask-free attention, and the maps between padded and packed layouts."""

import torch
import torch.nn.functional as F

import bertforge.model as bf
from bertforge.config import BertConfig
from bertforge.packing import Packing
from tests.test_model import MINI, VOCAB, max_diff, perturb


def ragged_mask() -> torch.Tensor:
    mask = torch.ones(5, 9, dtype=torch.long)
    mask[0, 4:] = 0  # 4 real tokens
    mask[1, :2] = 0  # 7, left padding
    mask[2, [1, 5, 6, 7, 8]] = 0  # 4, with a hole
    mask[3, 7:] = 0  # 7
    return mask  # row 4: 9


def test_groups_hold_rows_of_equal_length_in_packed_order():
    mask = ragged_mask()
    packing = Packing.from_attention_mask(mask)
    assert packing.groups == [(2, 4), (2, 7), (1, 9)]
    assert sorted(packing.indices.tolist()) == mask.flatten().nonzero().squeeze(1).tolist()
    start = 0
    for rows, tokens in packing.groups:  # each group: whole rows, each row's tokens in column order
        part = packing.indices[start:start + rows * tokens].view(rows, tokens)
        assert all(len(set((r // 9).tolist())) == 1 for r in part)
        assert torch.all(part.diff(dim=1) > 0)
        start += rows * tokens
    assert packing.attention_cells(heads=3) == 3 * (2 * 16 + 2 * 49 + 81)


def test_pack_split_unpack_and_index_agree():
    mask = ragged_mask()
    packing = Packing.from_attention_mask(mask)
    x = torch.randn(5, 9, 6) * mask[..., None]
    packed = packing.pack(x)
    assert torch.equal(packing.unpack(packed), x)
    blocks = packing.split(packed)
    assert [tuple(b.shape) for b in blocks] == [(2, 4, 6), (2, 7, 6), (1, 9, 6)]
    assert torch.equal(torch.cat([b.flatten(0, 1) for b in blocks]), packed)
    positions = torch.tensor([9 * 4 + 8, 0, 9 * 1 + 2, 9 * 2 + 4])
    assert torch.equal(packed[packing.packed_index(positions)], x.flatten(0, 1)[positions])
    assert packing.packed_index(torch.tensor([9 * 2 + 1])) is None  # a hole is padding
    assert Packing.from_attention_mask(torch.ones(2, 3)) is None


def test_attention_written_out_equals_sdpa():
    q, k, v = torch.randn(3, 2, 4, 5, 8).unbind(0)
    keep_all = torch.ones(2 * 4, 5, 5)
    assert max_diff(bf.attend(q, k, v, keep_all), F.scaled_dot_product_attention(q, k, v)) <= 1e-6


def test_training_path_on_padded_rows_equals_each_row_alone():
    """The dropout path (masks sliced per length group) with dropout so small it keeps everything: each row of
    a ragged batch gives the outputs of that row alone in eval."""
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
