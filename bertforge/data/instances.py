"""Google's ``create_instances_from_document``: sentence pairs for masked-LM + next-sentence prediction.

An instance is two token ranges of the corpus, A and B, later laid out as ``[CLS] A [SEP] B [SEP]``.
Per document, as Google's code does:

- the target length is ``max_seq_length - 3``, or with probability ``short_seq_prob`` a random length in
  ``[2, max_seq_length - 3]``, drawn once per document (per dupe pass);
- whole sentences accumulate into a chunk until it reaches the target or the document ends;
- A is the chunk's first ``a_end`` sentences, ``a_end`` uniform in ``[1, len(chunk) - 1]`` (1 for one sentence);
- B is the rest of the chunk, or (always for a one-sentence chunk, else with probability 0.5) "random next":
  sentences of another document (up to 10 tries to avoid this one), from a random sentence on, until
  ``target - len(A)`` tokens are reached or that document ends; the chunk's sentences after A then start
  the next chunk ("put back");
- the pair is truncated to ``max_seq_length - 3`` tokens, one token at a time from the longer of A and B
  (B on a tie), from its front or back with probability 0.5 each.

Ranges rather than token lists keep this fast and memory-bounded: A and B are always contiguous in the
corpus, before and after truncation.
"""

import bisect
from collections import Counter
from dataclasses import dataclass, fields

import numpy as np


class Draws:
    """Uniform random numbers from a numpy Generator, fetched in blocks.

    Google's loop makes a few draws per instance; a scalar Generator call costs microseconds, a list pop
    a fraction of that. ``randint`` is inclusive, as Python's ``random.randint`` that Google uses.
    """

    def __init__(self, rng: np.random.Generator, block: int = 1 << 14):
        self.rng, self.block = rng, block
        self._values, self._next = [], 0

    def random(self) -> float:
        if self._next == len(self._values):
            self._values, self._next = self.rng.random(self.block).tolist(), 0
        self._next += 1
        return self._values[self._next - 1]

    def randint(self, low: int, high: int) -> int:
        return low + int(self.random() * (high - low + 1))


@dataclass
class Spans:
    """Instances as token ranges of ``Corpus.tokens``: A is ``[a_start, a_end)``, B is ``[b_start, b_end)``.

    ``document`` is the document A comes from; ``is_random_next`` is the NSP label (B from another document).
    """

    a_start: np.ndarray
    a_end: np.ndarray
    b_start: np.ndarray
    b_end: np.ndarray
    is_random_next: np.ndarray
    document: np.ndarray

    def __len__(self) -> int:
        return len(self.a_start)

    def __getitem__(self, rows) -> "Spans":
        return Spans(*(getattr(self, f.name)[rows] for f in fields(self)))


def iter_spans(corpus, documents, max_seq_length: int, short_seq_prob: float, draws: Draws,
               block_size: int = 1 << 15, counts=None, progress=None):
    """Google's instances for each document of ``documents`` in that order, yielded in blocks of ``Spans``.

    ``documents`` (an array of document numbers) is also the pool random-next B is drawn from, so held-out
    documents never leak into training pairs. ``counts`` (a Counter) gets ``documents``,
    ``short_target_documents`` and ``forced_random_next`` (one-sentence chunks, whose B must be random);
    ``progress`` (a tqdm bar) is advanced by each document's tokens.
    """
    counts = Counter() if counts is None else counts
    sent_off, doc_off = corpus.sentence_offsets, corpus.document_offsets
    max_num_tokens = max_seq_length - 3
    rows = []
    for d in map(int, documents):
        offs = sent_off[doc_off[d]:doc_off[d + 1] + 1].tolist()  # this document's sentence boundaries
        n = len(offs) - 1
        target = max_num_tokens
        if draws.random() < short_seq_prob:
            target = draws.randint(2, max_num_tokens)
            counts["short_target_documents"] += 1
        i = 0
        while i < n:
            # The chunk ends at the first sentence that reaches the target, or at the document's end.
            c_end = min(bisect.bisect_left(offs, offs[i] + target, i + 1), n)
            a_end = i + (draws.randint(1, c_end - i - 1) if c_end - i >= 2 else 1)
            forced = c_end - i == 1
            if forced or draws.random() < 0.5:
                counts["forced_random_next"] += forced
                target_b = target - (offs[a_end] - offs[i])
                for _ in range(10):
                    r = int(documents[draws.randint(0, len(documents) - 1)])
                    if r != d:
                        break
                r_first, r_last = int(doc_off[r]), int(doc_off[r + 1])
                b = draws.randint(r_first, r_last - 1)
                b_end = min(max(int(sent_off.searchsorted(sent_off[b] + target_b)), b + 1), r_last)
                rows.append((offs[i], offs[a_end], int(sent_off[b]), int(sent_off[b_end]), 1, d))
                i = a_end  # put back the chunk's unused sentences
            else:
                rows.append((offs[i], offs[a_end], offs[a_end], offs[c_end], 0, d))
                i = c_end
            if len(rows) == block_size:
                yield _spans(rows)
                rows = []
        counts["documents"] += 1
        if progress is not None:
            progress.update(offs[-1] - offs[0])
    if rows:
        yield _spans(rows)


def _spans(rows) -> Spans:
    a = np.array(rows, dtype=np.int64)
    return Spans(a[:, 0], a[:, 1], a[:, 2], a[:, 3], a[:, 4].astype(bool), a[:, 5])


def truncate_pairs(spans: Spans, max_num_tokens: int, rng: np.random.Generator) -> Spans:
    """Google's ``truncate_seq_pair`` for all instances at once.

    Removing one token at a time from the longer side (B on a tie) fixes how many tokens each side loses;
    only front versus back is random, so each side's front count is Binomial(n, 0.5), the same
    distribution as Google's coin per token.
    """
    la, lb = spans.a_end - spans.a_start, spans.b_end - spans.b_start
    excess = np.maximum(la + lb - max_num_tokens, 0)
    first = np.minimum(excess, np.abs(la - lb))  # from the longer side until both are equal
    rest = excess - first  # then alternately, B first
    cut_a = np.where(la > lb, first, 0) + rest // 2
    cut_b = np.where(la > lb, 0, first) + rest - rest // 2
    front_a, front_b = rng.binomial(cut_a, 0.5), rng.binomial(cut_b, 0.5)
    return Spans(spans.a_start + front_a, spans.a_end - (cut_a - front_a),
                 spans.b_start + front_b, spans.b_end - (cut_b - front_b),
                 spans.is_random_next, spans.document)


def assemble(tokens: np.ndarray, spans: Spans, cls_id: int, sep_id: int) -> tuple[np.ndarray, np.ndarray]:
    """``[CLS] A [SEP] B [SEP]`` for every instance, concatenated: ``(ids, offsets [n + 1])``."""
    la, lb = spans.a_end - spans.a_start, spans.b_end - spans.b_start
    one = np.ones_like(la)
    starts = np.stack([-one, spans.a_start, -2 * one, spans.b_start, -2 * one], axis=1).ravel()
    index = ragged_arange(starts, np.stack([one, la, one, lb, one], axis=1).ravel())
    ids = tokens[np.maximum(index, 0)]
    ids[index == -1] = cls_id
    ids[index == -2] = sep_id
    return ids, np.concatenate([[0], np.cumsum(la + lb + 3)])


def special_positions(lengths: np.ndarray, a_lengths: np.ndarray, width: int) -> np.ndarray:
    """[n, width] bool: the [CLS] and two [SEP] of each ``[CLS] A [SEP] B [SEP]`` row, and its padding."""
    cols = np.arange(width)
    return (cols == 0) | (cols == a_lengths[:, None] + 1) | (cols >= lengths[:, None] - 1)


def ragged_arange(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """``concatenate([arange(s, s + n) for s, n in zip(starts, lengths)])`` without the Python loop."""
    ends = np.cumsum(lengths)
    return np.repeat(starts - (ends - lengths), lengths) + np.arange(ends[-1] if len(ends) else 0)


def to_padded(flat: np.ndarray, lengths: np.ndarray, width: int, fill) -> np.ndarray:
    """Rows of a ragged array (``flat`` holds the rows back to back) as a ``[len(lengths), width]`` matrix."""
    out = np.full((len(lengths), width), fill, dtype=flat.dtype)
    out[np.arange(width) < lengths[:, None]] = flat
    return out


def iter_full_rows(corpus, documents, max_seq_length: int, cls_id: int, sep_id: int, block_size: int = 1 << 15,
                   counts=None, progress=None):
    """RoBERTa's FULL-SENTENCES rows ``[CLS] s1 s2 ... [SEP]`` for ``--no-nsp``, yielded in blocks of
    ``(ids, offsets [n + 1])``.

    The sentences of ``documents`` (in that order) are packed greedily into rows of ``max_seq_length - 2``
    tokens: a sentence that does not fit in what is left of a row starts the next one, and is cut into
    row-sized pieces only when it is longer than a whole row. Where a row runs from one document into the
    next, a [SEP] separates them (it takes one token of the row). ``counts`` gets ``documents``,
    ``document_joins`` and ``split_sentences``; ``progress`` is advanced by each document's tokens.
    """
    counts = Counter() if counts is None else counts
    capacity = max_seq_length - 2
    sent_off, doc_off, tokens = corpus.sentence_offsets, corpus.document_offsets, corpus.tokens
    cls, sep = np.array([cls_id], tokens.dtype), np.array([sep_id], tokens.dtype)
    rows, row, used = [], [], 0  # row: token arrays between [CLS] and the final [SEP]; used: their length

    def close():
        nonlocal row, used
        if row:
            rows.append(np.concatenate([cls, *row, sep]))
        row, used = [], 0

    for d in map(int, documents):
        offs = sent_off[doc_off[d]:doc_off[d + 1] + 1].tolist()
        for s, e in zip(offs[:-1], offs[1:]):
            join = bool(row) and s == offs[0]  # the row already holds the previous document
            if used + join + (e - s) > capacity:
                close()
                join = False
                if e - s > capacity:  # longer than a row: whole rows of it, the rest starts the next row
                    counts["split_sentences"] += 1
                    while e - s > capacity:
                        rows.append(np.concatenate([cls, tokens[s:s + capacity], sep]))
                        s += capacity
            if join:
                row.append(sep)
                counts["document_joins"] += 1
            row.append(tokens[s:e])
            used += join + (e - s)
            if len(rows) >= block_size:
                yield _rows(rows)
                rows = []
        counts["documents"] += 1
        if progress is not None:
            progress.update(offs[-1] - offs[0])
    close()
    if rows:
        yield _rows(rows)


def _rows(rows) -> tuple[np.ndarray, np.ndarray]:
    return np.concatenate(rows), np.concatenate([[0], np.cumsum([len(r) for r in rows])])
