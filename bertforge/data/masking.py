"""Masked-LM masking: Google's ``create_masked_lm_predictions``, vectorised over a batch.

Used twice: by ``bertforge data create`` for static masking (each instance masked once per dupe pass),
and by the trainer for dynamic masking (data created with ``--no-mask``, re-masked every time a batch
is drawn, as RoBERTa does)::

    masked_ids, positions, labels = mask_batch(batch["input_ids"], batch["special_tokens_mask"],
                                               generator, vocab_size, mask_token_id,
                                               lengths=batch["attention_mask"].sum(1))

Per row, the rule is Google's: ``num_to_predict = min(max_predictions, max(1, round(length * masked_lm_prob)))``
where ``length`` counts [CLS] and [SEP] (Python 3 rounding, half to even). Candidates are all positions not
in ``special_mask``, grouped into words when ``whole_word_starts`` is given; the words are taken in random
order, skipping a word that would overshoot ``num_to_predict`` (so whole-word masking may predict fewer).
Each chosen position becomes [MASK] with probability 0.8, else stays itself with probability 0.5, else
becomes a uniformly random vocabulary id (any id, as Google draws from the whole vocabulary); its label is
always the original token.
"""

import sys

import numpy as np


def continuation_table(vocab: dict) -> np.ndarray:
    """Bool array over token ids: True for WordPiece continuation pieces (``##...``)."""
    table = np.zeros(max(vocab.values()) + 1, dtype=bool)
    for token, i in vocab.items():
        table[i] = token.startswith("##")
    return table


def word_starts(input_ids, is_continuation: np.ndarray) -> np.ndarray:
    """``whole_word_starts`` for :func:`mask_batch`: True where a token is not a ``##`` continuation."""
    return ~is_continuation[_numpy(input_ids)]


def mask_batch(input_ids, special_mask, rng, vocab_size: int, mask_token_id: int, *,
               masked_lm_prob: float = 0.15, max_predictions: int = 20, whole_word_starts=None, lengths=None):
    """Mask a batch of token rows the way Google's ``create_pretraining_data.py`` masks one instance.

    input_ids: [B, L] token ids (torch tensor or numpy array; rows may be padded).
    special_mask: [B, L] bool, True where a position may never be masked ([CLS], [SEP], padding).
    rng: ``np.random.Generator`` or ``torch.Generator`` (the result is a deterministic function of its state).
    whole_word_starts: optional [B, L] bool, True where a word starts; a word is that piece and the
        non-starting pieces after it (see :func:`word_starts`). A piece right after a special position
        always starts a word. None masks pieces independently.
    lengths: optional [B] real row lengths (including [CLS]/[SEP]) that set ``num_to_predict``;
        None means every row is L long (no padding).

    Returns ``(masked_ids [B, L], mlm_positions [B, max_predictions], mlm_labels [B, max_predictions])``:
    positions in increasing order, padded with position 0 and label -100. Torch inputs give torch
    tensors (int64, on the input's device), numpy inputs numpy arrays; ``masked_ids`` keeps the input dtype.
    """
    torch = sys.modules.get("torch")  # tensors exist only once torch is loaded: numpy inputs do not load it
    as_torch = torch is not None and isinstance(input_ids, torch.Tensor)
    ids = _numpy(input_ids)
    candidate = ~_numpy(special_mask).astype(bool)
    if torch is not None and isinstance(rng, torch.Generator):
        rng = np.random.default_rng(int(torch.randint(2**62, (1,), generator=rng)))
    B, L = ids.shape
    row_len = np.full(B, L) if lengths is None else _numpy(lengths)
    num_to_predict = np.minimum(max_predictions, np.maximum(1, np.rint(row_len * masked_lm_prob))).astype(np.int64)

    chosen = _choose(candidate, whole_word_starts, num_to_predict, rng)
    masked_ids, positions, labels = _mask_chosen(ids, chosen, rng, vocab_size, mask_token_id, max_predictions)
    if as_torch:
        device = input_ids.device
        return (torch.from_numpy(masked_ids).to(device), torch.from_numpy(positions).to(device),
                torch.from_numpy(labels).to(device))
    return masked_ids, positions, labels


def _choose(candidate, whole_word_starts, num_to_predict, rng) -> np.ndarray:
    """[B, L] bool: the positions to predict, whole words in a random order while they fit each row's count."""
    B, L = candidate.shape
    after_special = np.ones_like(candidate)
    after_special[:, 1:] = ~candidate[:, :-1]
    starts = candidate if whole_word_starts is None else candidate & (_numpy(whole_word_starts) | after_special)
    cols = np.arange(L)
    word_start_col = np.maximum.accumulate(np.where(starts, cols, 0), axis=1)  # valid at candidate positions
    # At each word's start column, the word's number of pieces.
    word_len = np.bincount((np.arange(B)[:, None] * L + word_start_col)[candidate], minlength=B * L).reshape(B, L)

    # Shuffle the words: sort start columns by a random key (non-starts last, with a length that never fits).
    order = np.argsort(np.where(starts, rng.random((B, L), dtype=np.float32), 2.0), axis=1)
    sorted_len = np.take_along_axis(np.where(starts, word_len, L + 1), order, axis=1)
    taken = np.zeros((B, L), bool)
    count = np.zeros(B, np.int64)
    for j in range(int(starts.sum(1).max(initial=0))):
        if (count >= num_to_predict).all():
            break
        fits = count + sorted_len[:, j] <= num_to_predict
        taken[:, j] = fits
        count += np.where(fits, sorted_len[:, j], 0)
    start_taken = np.zeros((B, L), bool)
    np.put_along_axis(start_taken, order, taken, axis=1)
    return candidate & np.take_along_axis(start_taken, word_start_col, axis=1)


def _mask_chosen(ids, chosen, rng, vocab_size: int, mask_token_id: int, max_predictions: int):
    """The chosen positions replaced (80% [MASK], 10% kept, 10% a random token), and each row's positions and
    original tokens listed in column order, padded with position 0 and label -100."""
    B = len(ids)
    rows, cols_m = np.nonzero(chosen)  # row by row, columns increasing
    original = ids[rows, cols_m]
    n = len(rows)
    replacement = np.where(rng.random(n) < 0.8, mask_token_id,
                           np.where(rng.random(n) < 0.5, original, rng.integers(0, vocab_size, n)))
    masked_ids = ids.copy()
    masked_ids[rows, cols_m] = replacement

    per_row = chosen.sum(1)
    slot = np.arange(n) - np.repeat(np.cumsum(per_row) - per_row, per_row)
    positions = np.zeros((B, max_predictions), np.int64)
    labels = np.full((B, max_predictions), -100, np.int64)
    positions[rows, slot] = cols_m
    labels[rows, slot] = original
    return masked_ids, positions, labels


def _numpy(x) -> np.ndarray:
    torch = sys.modules.get("torch")
    return x.detach().cpu().numpy() if torch is not None and isinstance(x, torch.Tensor) else np.asarray(x)
