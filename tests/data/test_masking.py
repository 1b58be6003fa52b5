import numpy as np
import pytest
import torch

from bertforge.data.masking import continuation_table, mask_batch, word_starts

MASK, VOCAB = 103, 30522


def pair_batch(rng, B=512, L=128):
    """Rows [CLS] A [SEP] B [SEP] + padding: ids, special mask, lengths."""
    lengths = rng.integers(5, L + 1, B)
    a_len = rng.integers(1, lengths - 3)
    ids = rng.integers(1000, VOCAB, (B, L))
    cols = np.arange(L)
    special = (cols == 0) | (cols == a_len[:, None] + 1) | (cols >= lengths[:, None] - 1)
    ids[:, 0] = 101
    ids[special & (cols > 0) & (cols < lengths[:, None])] = 102
    ids[cols >= lengths[:, None]] = 0
    return ids, special, lengths


def test_counts_labels_and_specials():
    rng = np.random.default_rng(1)
    ids, special, lengths = pair_batch(rng)
    masked, positions, labels = mask_batch(ids.astype(np.uint16), special, rng, VOCAB, MASK, lengths=lengths)
    valid = labels != -100
    # Google: min(max_predictions, max(1, round(len * p))) with Python 3 rounding (half to even).
    expected = [min(20, max(1, round(n * 0.15))) for n in lengths.tolist()]
    assert valid.sum(1).tolist() == expected
    rows = np.arange(len(ids))[:, None]
    assert not special[rows, positions][valid].any()  # never [CLS], [SEP] or padding
    assert (labels[valid] == ids[rows, positions][valid]).all()  # labels are the original tokens
    assert (np.diff(np.where(valid, positions, 10**6 + np.arange(20)), axis=1) > 0).all()  # increasing, padding after
    assert (positions[~valid] == 0).all()
    changed = masked != ids
    chosen = np.zeros_like(changed)
    chosen[np.nonzero(valid)[0], positions[valid]] = True
    assert not (changed & ~chosen).any()  # only chosen positions change
    assert masked.dtype == np.uint16


def test_replacement_proportions():
    rng = np.random.default_rng(2)
    ids, special, lengths = pair_batch(rng, B=4096)
    masked, positions, labels = mask_batch(ids, special, rng, VOCAB, MASK, lengths=lengths)
    valid = labels != -100
    new = masked[np.arange(len(ids))[:, None], positions][valid]
    is_mask, kept = new == MASK, new == labels[valid]
    assert abs(is_mask.mean() - 0.8) < 0.01
    assert abs(kept.mean() - 0.1) < 0.01
    assert abs((~is_mask & ~kept).mean() - 0.1) < 0.01


def test_cap_and_short_rows():
    ids = np.full((2, 512), 7)
    special = np.zeros((2, 512), bool)
    special[:, 0] = special[:, -1] = True
    _, _, labels = mask_batch(ids, special, np.random.default_rng(0), VOCAB, MASK, max_predictions=80,
                              lengths=np.array([512, 6]))
    assert (labels != -100).sum(1).tolist() == [77, 1]  # round(76.8) = 77 <= 80; max(1, round(0.9)) = 1


def test_whole_word_masking_keeps_words_together():
    vocab = {"[PAD]": 0, "[CLS]": 1, "[SEP]": 2, "[MASK]": 3, "a": 4, "##b": 5, "##c": 6, "d": 7}
    table = continuation_table(vocab)
    rng = np.random.default_rng(3)
    # Words: a ##b ##c | d | a ##b | d ... repeated; a leading ##b right after [CLS] starts a word.
    row = [1, 5, 4, 5, 6, 7, 4, 5, 7, 4, 5, 6, 7, 7, 4, 5, 2]
    ids = np.array([row] * 2000)
    special = np.isin(ids, [1, 2])
    starts = word_starts(ids, table)
    _, positions, labels = mask_batch(ids, special, rng, len(vocab), 3, whole_word_starts=starts)
    words = [[1], [2, 3, 4], [5], [6, 7], [8], [9, 10, 11], [12], [13], [14, 15]]
    k = round(len(row) * 0.15)
    for pos, lab in zip(positions, labels):
        chosen = set(pos[lab != -100].tolist())
        assert 1 <= len(chosen) <= k
        for word in words:
            assert chosen.isdisjoint(word) or chosen.issuperset(word)


def test_torch_inputs_and_generator_are_deterministic():
    ids, special, lengths = pair_batch(np.random.default_rng(4), B=8)
    ids_t, special_t = torch.from_numpy(ids), torch.from_numpy(special)
    lengths_t = torch.from_numpy(lengths)
    out1 = mask_batch(ids_t, special_t, torch.Generator().manual_seed(5), VOCAB, MASK, lengths=lengths_t)
    out2 = mask_batch(ids_t, special_t, torch.Generator().manual_seed(5), VOCAB, MASK, lengths=lengths_t)
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.int64 for t in out1)
    assert all(torch.equal(a, b) for a, b in zip(out1, out2))
    assert torch.equal(ids_t, torch.from_numpy(ids))  # the input is not modified
    assert out1[1].shape == (8, 20)


@pytest.mark.parametrize("L", [6, 40])
def test_rows_shorter_than_max_predictions(L):
    ids = np.arange(3 * L).reshape(3, L) + 1000
    special = np.zeros((3, L), bool)
    special[:, [0, L - 1]] = True
    _, positions, labels = mask_batch(ids, special, np.random.default_rng(0), VOCAB, MASK, max_predictions=80)
    assert positions.shape == labels.shape == (3, 80)
    assert ((labels != -100).sum(1) == min(80, max(1, round(L * 0.15)))).all()
