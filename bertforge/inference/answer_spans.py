"""Extractive question answering below the tasks: a passage's windows (Google's sliding windows of
run_squad.py) and the answer spans back from the start and end logits, for fine-tuning, evaluation, the
pipelines and the server alike.

They follow Google's run_squad.py, but map tokens to the passage through character offsets instead of its
whitespace-word bookkeeping: the windows are the same (BERT's basic tokenizer splits on whitespace first, so
tokenizing the whole passage gives the same tokens as tokenizing word by word), and an answer is the passage
slice between its first token's start and last token's end.
"""

import logging
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer

from ..core.errors import BertforgeError
from ..text.layout import layout
from .batches import LazyRows, doc_spans, max_context_window
from .windows import encode_long

log = logging.getLogger(__name__)


@dataclass
class SquadExample:
    id: str
    question: str
    context: str
    answer_texts: list[str]  # gold answers; empty when unanswerable
    answer_starts: list[int]  # character offsets in context, one per answer
    is_impossible: bool = False


# ---------------------------------------------------------------------------------------------------------
# Featurisation: Google's sliding windows

@dataclass
class SquadWindow:
    """One model input: [CLS] question [SEP] a window of the passage [SEP] (RoBERTa's <s> question </s></s> ...)."""
    example_index: int
    input_ids: np.ndarray
    token_type_ids: np.ndarray
    offsets: np.ndarray  # [L, 2] character span of each token in the passage; -1 outside the passage
    is_max_context: np.ndarray  # [L] bool: this is the window in which the token is scored
    start_position: int = 0  # the first answer's tokens, or 0 ([CLS]) when unanswerable or not in this window
    end_position: int = 0


@dataclass
class _Passage:
    """One example's part of its windows: the passage's tokens (shared by the questions on it), the question's,
    the spans, each token's best window, the first answer's tokens, and where its windows start."""
    example_index: int
    ids: np.ndarray
    offsets: np.ndarray
    query: list[int]
    spans: list[tuple[int, int]]
    best: np.ndarray
    answer: tuple[int, int] | None
    first: int


class SquadWindows(LazyRows):
    """Google's windows of examples (a sequence of SquadWindow), each made when it is read: what is kept is per
    example its passage's tokens and their best windows, linear in the passages, never a window's arrays
    beyond its use (a 1 MB context has thousands of windows). `lengths`: each window's tokens; `rows()`:
    the windows as the model inputs of pipelines (inference.batches.LazyRows). `pair`: the tokenizer's layout of a
    pair, the question "A" and the window "B" among special token ids, each with its segment (text.layout.layout)."""

    def __init__(self, passages: list[_Passage], pair: list[tuple], context_tokens: list[int]):
        self.passages, self.pair, self.context_tokens = passages, pair, context_tokens
        self.passage_of = np.repeat(np.arange(len(passages)), [len(p.spans) for p in passages]).astype(np.int64)
        specials = len(pair) - 2
        super().__init__([len(p.query) + specials + length for p in passages for _, length in p.spans], self.window)

    def window(self, w: int) -> SquadWindow:
        """Window w (from 0), made now."""
        p = self.passages[self.passage_of[w]]
        k = w - p.first
        s, length = p.spans[k]
        texts = {"A": p.query, "B": p.ids[s:s + length]}
        pieces = [texts[part] if part in texts else [part] for part, _ in self.pair]
        sizes = [len(piece) for piece in pieces]
        c0 = sum(sizes[:[part for part, _ in self.pair].index("B")])  # where the passage begins in the input
        size = sum(sizes)
        window = SquadWindow(
            example_index=p.example_index,
            input_ids=np.concatenate(pieces).astype(np.int32),
            token_type_ids=np.repeat([segment for _, segment in self.pair], sizes).astype(np.int8),
            offsets=np.full((size, 2), -1, dtype=np.int32),
            is_max_context=np.zeros(size, dtype=bool),
        )
        window.offsets[c0:c0 + length] = p.offsets[s:s + length]
        window.is_max_context[c0:c0 + length] = p.best[s:s + length] == k
        if p.answer is not None and s <= p.answer[0] <= p.answer[1] < s + length:
            window.start_position = int(p.answer[0] - s + c0)
            window.end_position = int(p.answer[1] - s + c0)
        return window

    def rows(self) -> LazyRows:
        def row(w: int) -> dict:
            window = self[w]
            return {"input_ids": window.input_ids.tolist(), "token_type_ids": window.token_type_ids.tolist()}
        return LazyRows(self.lengths, row)


def featurize(examples: list[SquadExample], tokenizer, max_length: int = 384, doc_stride: int = 128,
              max_query_length: int = 64) -> list[SquadWindow]:
    """Cut every example into Google's windows, in example order.

    `tokenizer` is a BertTokenizer (or a `tokenizers.Tokenizer`). Answer positions come from the first
    gold answer, as Google trains on; a window that does not hold all of it points at [CLS].
    """
    return list(squad_windows(examples, tokenizer, max_length, doc_stride, max_query_length))


def squad_windows(examples: list[SquadExample], tokenizer, max_length: int = 384, doc_stride: int = 128,
                  max_query_length: int = 64) -> SquadWindows:
    """featurize's windows, made when read (see SquadWindows): linear in the passages' tokens however long."""
    # A private copy with truncation and padding off, whatever the caller switched on in theirs
    # (Hugging Face's callable tokenizer leaves them on after a call).
    backend = Tokenizer.from_str(getattr(tokenizer, "backend_tokenizer", tokenizer).to_str())
    backend.no_truncation()
    backend.no_padding()
    pair = layout(backend, getattr(tokenizer, "cls_token", "[CLS]"), pair=True)
    specials = len(pair) - 2
    if max_length - max_query_length - specials < 1:
        raise BertforgeError(f"max_length {max_length} leaves no room for the passage after a "
                             f"{max_query_length}-token question and {specials} special tokens")
    if doc_stride < 1:
        raise BertforgeError(f"doc_stride must be at least 1, not {doc_stride}")

    contexts = list(dict.fromkeys(ex.context for ex in examples))
    context_index = {c: i for i, c in enumerate(contexts)}
    passages = [(ids.astype(np.int32), offsets.astype(np.int32)) for ids, offsets in encode_long(backend, contexts)]
    questions = [e.ids[:max_query_length]
                 for e in backend.encode_batch([ex.question for ex in examples], add_special_tokens=False)]

    parts, first = [], 0
    for i, ex in enumerate(examples):
        ids, offsets = passages[context_index[ex.context]]
        query = questions[i]
        spans = doc_spans(len(ids), max_length - len(query) - specials, doc_stride)
        if not spans:
            continue
        answer = None
        if ex.answer_texts:
            start, end = ex.answer_starts[0], ex.answer_starts[0] + len(ex.answer_texts[0])
            answer = (int(np.searchsorted(offsets[:, 1], start, side="right")),  # first token ending after it
                      int(np.searchsorted(offsets[:, 0], end, side="left") - 1))  # last token starting before
        parts.append(_Passage(i, ids, offsets, query, spans, max_context_window(len(ids), spans), answer, first))
        first += len(spans)
    context_tokens = [len(passages[context_index[ex.context]][0]) for ex in examples]
    return SquadWindows(parts, pair, context_tokens)


# ---------------------------------------------------------------------------------------------------------
# Post-processing: logits back to answer text

@dataclass
class SquadPredictions:
    predictions: dict[str, str]  # id -> answer text ("" for no answer)
    nbest: dict[str, list[dict]]  # id -> [{text, offsets, probability, start_logit, end_logit}], best first
    null_odds: dict[str, float] = field(default_factory=dict)  # v2: null score minus best span score
    best_spans: dict[str, str] = field(default_factory=dict)  # v2: the answer at any threshold above null_odds


def span_candidates(windows: list[SquadWindow], start_logits, end_logits, n_best: int,
                    max_answer_length: int) -> tuple[list[tuple], tuple]:
    """An example's answer spans over its windows, in Google's order: (score, start logit, end logit, first char,
    end char) from each window's n best starts and ends, a span starting in its best window only; and the
    smallest [CLS] score over the windows, with its two logits."""
    candidates, null = [], (np.inf, 0.0, 0.0)
    for window, start, end in zip(windows, start_logits, end_logits):
        n = len(window.input_ids)
        s_logit = np.asarray(start[:n], dtype=np.float64)
        e_logit = np.asarray(end[:n], dtype=np.float64)
        if s_logit[0] + e_logit[0] < null[0]:
            null = (s_logit[0] + e_logit[0], s_logit[0], e_logit[0])
        # stable sorts keep Google's order among equal scores
        top_s = np.argsort(-s_logit, kind="stable")[:n_best]
        top_e = np.argsort(-e_logit, kind="stable")[:n_best]
        s, t = top_s[:, None], top_e[None, :]
        ok = ((window.offsets[s, 0] >= 0) & (window.offsets[t, 0] >= 0) & window.is_max_context[s]
              & (t >= s) & (t - s < max_answer_length))
        i, j = np.nonzero(ok)  # start rank, then end rank: Google's nested loops
        s, t = top_s[i], top_e[j]
        candidates += zip((s_logit[s] + e_logit[t]).tolist(), s_logit[s].tolist(), e_logit[t].tolist(),
                          window.offsets[s, 0].tolist(), window.offsets[t, 1].tolist())
    return candidates, null


def postprocess(examples: list[SquadExample], windows: list[SquadWindow], start_logits, end_logits,
                version_2: bool = False, n_best: int = 20, max_answer_length: int = 30,
                null_threshold: float = 0.0) -> SquadPredictions:
    """Google's write_predictions. start_logits/end_logits: one row per window ([N, L] array or a list of
    1-D arrays), at least as long as the window; padding beyond it is ignored."""
    by_example = defaultdict(list)
    for w, window in enumerate(windows):
        by_example[window.example_index].append(w)

    out = SquadPredictions({}, {})
    for e, ex in enumerate(examples):
        if not by_example[e]:  # a passage without tokens
            out.predictions[ex.id], out.nbest[ex.id] = "", []
            if version_2:
                out.null_odds[ex.id] = np.inf
            continue
        mine = by_example[e]
        candidates, null = span_candidates([windows[w] for w in mine], [start_logits[w] for w in mine],
                                           [end_logits[w] for w in mine], n_best, max_answer_length)
        if version_2:  # the null candidate goes last, so it loses ties
            candidates.append((float(null[0]), float(null[1]), float(null[2]), 0, 0))
        candidates.sort(key=lambda c: c[0], reverse=True)

        best, seen = [], set()
        for _, start_logit, end_logit, first, last in candidates:
            if len(best) >= n_best:
                break
            text = ex.context[first:last]
            if text in seen:
                continue
            seen.add(text)
            best.append({"text": text, "offsets": [first, last], "start_logit": start_logit, "end_logit": end_logit})
        if version_2 and "" not in seen:
            best.append({"text": "", "offsets": [0, 0], "start_logit": float(null[1]), "end_logit": float(null[2])})
        if best:  # v1 may have no span at all
            total = np.array([b["start_logit"] + b["end_logit"] for b in best])
            probs = np.exp(total - total.max())
            for b, p in zip(best, probs / probs.sum()):
                b["probability"] = float(p)
        out.nbest[ex.id] = best

        span = next((b for b in best if b["text"]), None)
        if not version_2:
            out.predictions[ex.id] = span["text"] if span else ""
            continue
        # with no span to offer at all, the question is unanswered at any threshold
        diff = float(null[0] - span["start_logit"] - span["end_logit"]) if span else np.inf
        out.null_odds[ex.id] = diff
        out.best_spans[ex.id] = span["text"] if span else ""
        out.predictions[ex.id] = "" if diff > null_threshold else out.best_spans[ex.id]
    return out
