"""SQuAD v1.1 and v2.0: reading, Google's windowed featurisation, span post-processing, the official metrics.

Featurisation and post-processing follow Google's run_squad.py, but map tokens to the passage through
character offsets instead of its whitespace-word bookkeeping: the windows are the same (BERT's basic
tokenizer splits on whitespace first, so tokenizing the whole passage gives the same tokens as tokenizing
word by word), and an answer is the passage slice between its first token's start and last token's end.
"""

import logging
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer

from ..errors import BertforgeError, where
from ..inference import LazyRows, doc_spans, max_context_window
from ..windows import encode_long
from ..io import read_json, rounded, write_json
from .base import HeadClass, Split, TaskFamily, find_file
from .metrics import squad_metrics

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------
# Reading

@dataclass
class SquadExample:
    id: str
    question: str
    context: str
    answer_texts: list[str]  # gold answers; empty when unanswerable
    answer_starts: list[int]  # character offsets in context, one per answer
    is_impossible: bool = False


def _get(obj, key, kind, path, loc):
    if not isinstance(obj, dict) or key not in obj:
        raise BertforgeError(f"{where(path)}: {loc} has no '{key}' field (not a SQuAD file?)")
    if not isinstance(obj[key], kind) or isinstance(obj[key], bool):
        expected = " or ".join(k.__name__ for k in (kind if isinstance(kind, tuple) else (kind,)))
        raise BertforgeError(f"{where(path)}: {loc}.{key} is {type(obj[key]).__name__}, expected {expected}")
    return obj[key]


def _locate(context: str, text: str, start: int) -> int | None:
    """Where the answer text is: at its given start, else its occurrence nearest to it, else None."""
    if not text.strip():
        return None
    if 0 <= start and context.startswith(text, start):
        return start
    found = [m.start() for m in re.finditer(re.escape(text), context)]
    return min(found, key=lambda s: abs(s - start)) if found else None


def read_squad(path) -> list[SquadExample]:
    """Every question of a SQuAD v1.1 or v2.0 JSON file, in file order.

    An answer whose text is not at its answer_start is moved to the nearest place the text occurs in the
    passage; one that occurs nowhere is dropped, and a question left without answers is skipped, as
    Google's run_squad skips it ("Could not find answer"). All three are counted in one logged line.
    """
    path = Path(path)
    data = read_json(path)
    examples, skipped, dropped, moved, total = [], 0, 0, 0, 0
    for a, article in enumerate(_get(data, "data", list, path, "the top level")):
        for p, paragraph in enumerate(_get(article, "paragraphs", list, path, f"data[{a}]")):
            loc = f"data[{a}].paragraphs[{p}]"
            context = _get(paragraph, "context", str, path, loc)
            for q, qa in enumerate(_get(paragraph, "qas", list, path, loc)):
                qloc = f"{loc}.qas[{q}]"
                qid = _get(qa, "id", (str, int), path, qloc)
                question = _get(qa, "question", str, path, qloc)
                answers = _get(qa, "answers", list, path, qloc)
                total += 1
                texts, starts = [], []
                if not qa.get("is_impossible", False):
                    for n, answer in enumerate(answers):
                        text = _get(answer, "text", str, path, f"{qloc}.answers[{n}]")
                        given = _get(answer, "answer_start", int, path, f"{qloc}.answers[{n}]")
                        start = _locate(context, text, given)
                        if start is None:
                            dropped += 1
                            continue
                        texts.append(text)
                        starts.append(start)
                        moved += start != given
                    if answers and not texts:
                        skipped += 1
                        continue
                examples.append(SquadExample(str(qid), question, context, texts, starts, not texts))
    if dropped or moved:
        log.warning("%s: %d answers not found in their context (skipped %d of %d questions as left without "
                    "an answer), %d answers moved to where their text occurs", path, dropped, skipped, total, moved)
    return examples


# ---------------------------------------------------------------------------------------------------------
# Featurisation: Google's sliding windows

@dataclass
class SquadWindow:
    """One model input: [CLS] question [SEP] a window of the passage [SEP]."""
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
    the windows as the model inputs of pipelines (inference.LazyRows)."""

    def __init__(self, passages: list[_Passage], cls: int, sep: int, context_tokens: list[int]):
        self.passages, self.cls, self.sep, self.context_tokens = passages, cls, sep, context_tokens
        self.passage_of = np.repeat(np.arange(len(passages)), [len(p.spans) for p in passages]).astype(np.int64)
        super().__init__([len(p.query) + 3 + length for p in passages for _, length in p.spans], self.window)

    def window(self, w: int) -> SquadWindow:
        """Window w (from 0), made now."""
        p = self.passages[self.passage_of[w]]
        k = w - p.first
        s, length = p.spans[k]
        c0 = len(p.query) + 2  # where the passage begins in the input
        size = c0 + length + 1
        ids = np.concatenate([[self.cls], p.query, [self.sep], p.ids[s:s + length], [self.sep]]).astype(np.int32)
        window = SquadWindow(
            example_index=p.example_index,
            input_ids=ids,
            token_type_ids=(np.arange(size) >= c0).astype(np.int8),
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
    if max_length - max_query_length - 3 < 1:
        raise BertforgeError(f"max_length {max_length} leaves no room for the passage after a "
                             f"{max_query_length}-token question and 3 special tokens")
    if doc_stride < 1:
        raise BertforgeError(f"doc_stride must be at least 1, not {doc_stride}")
    # A private copy with truncation and padding off, whatever the caller switched on in theirs
    # (Hugging Face's callable tokenizer leaves them on after a call).
    backend = Tokenizer.from_str(getattr(tokenizer, "backend_tokenizer", tokenizer).to_str())
    backend.no_truncation()
    backend.no_padding()

    contexts = list(dict.fromkeys(ex.context for ex in examples))
    context_index = {c: i for i, c in enumerate(contexts)}
    passages = [(ids.astype(np.int32), offsets.astype(np.int32)) for ids, offsets in encode_long(backend, contexts)]
    questions = [e.ids[:max_query_length]
                 for e in backend.encode_batch([ex.question for ex in examples], add_special_tokens=False)]

    parts, first = [], 0
    for i, ex in enumerate(examples):
        ids, offsets = passages[context_index[ex.context]]
        query = questions[i]
        spans = doc_spans(len(ids), max_length - len(query) - 3, doc_stride)
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
    return SquadWindows(parts, backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]"), context_tokens)


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


def write_predictions(directory, result: SquadPredictions) -> None:
    """predictions.json, nbest_predictions.json and, for v2, null_odds.json (the official --na-prob-file)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    files = {"predictions.json": result.predictions, "nbest_predictions.json": result.nbest}
    if result.null_odds:
        files["null_odds.json"] = result.null_odds
    for name, content in files.items():
        write_json(directory / name, content, ensure_ascii=False)


# ---------------------------------------------------------------------------------------------------------
# Train and dev files from one file, split by article: the squad-split command

def squad_counts(data: dict, path) -> dict[str, int]:
    """Articles, questions and unanswerable questions (v2.0's is_impossible) of a SQuAD file's contents."""
    articles = _get(data, "data", list, path, "the top level")
    questions = [qa for a, article in enumerate(articles)
                 for p, paragraph in enumerate(_get(article, "paragraphs", list, path, f"data[{a}]"))
                 for qa in _get(paragraph, "qas", list, path, f"data[{a}].paragraphs[{p}]")]
    return {"articles": len(articles), "questions": len(questions),
            "unanswerable": sum(isinstance(qa, dict) and qa.get("is_impossible") is True for qa in questions)}


def split_by_article(data: dict, train_fraction: float = 0.5, seed: int = 0, path="SQuAD data") -> tuple[dict, dict]:
    """A SQuAD file's contents as a train and a dev part: whole articles (so every question stays with its
    passages), the first `train_fraction` of them (rounded) in a shuffle by `seed` for training, the rest for
    evaluation, each part in file order."""
    articles = _get(data, "data", list, path, "the top level")
    n_train = round(train_fraction * len(articles))
    if not 0 < n_train < len(articles):
        raise BertforgeError(f"{where(path)}: a train fraction of {train_fraction} of {len(articles)} articles "
                             f"leaves one part empty")
    order = np.random.default_rng(seed).permutation(len(articles))
    return tuple({**data, "data": [articles[i] for i in sorted(part)]} for part in (order[:n_train], order[n_train:]))


# ---------------------------------------------------------------------------------------------------------
# The task family


class SquadFamily(TaskFamily):
    """Span extraction: start and end scores over each window's tokens; v2.0 may answer nothing."""

    names = ("squad", "squad_v1", "squad_v2")
    model_class = HeadClass("BertForQuestionAnswering")
    output_keys = ("start_logits", "end_logits")
    per_token_outputs = ("start_logits", "end_logits")
    targets = {"start_positions": None, "end_positions": None}
    default_max_length = 384
    best_metric = "f1"
    labels = ["start", "end"]
    text_fields = {"question": str, "context": str}
    option_defaults = {"null_threshold": 0.0}

    def __init__(self, task: str, data: Path | None, max_length: int, doc_stride=128, max_query_length=64,
                 null_threshold=0.0):
        super().__init__(task, data, max_length)
        self.version_2 = task == "squad_v2"
        self.doc_stride, self.max_query_length, self.null_threshold = doc_stride, max_query_length, null_threshold

    @classmethod
    def add_arguments(cls, parser) -> None:
        parser.add_argument("--null-threshold", type=float, default=0.0,
                            help="squad_v2 (and question-answering trained with unanswerable questions): answer "
                                 "nothing where the null score beats the best span's by more than this "
                                 "(eval_results' best_f1_thresh is the dev set's best value)")

    def path(self, split):
        if self.data.is_file():
            return self.data
        version = "2.0" if self.version_2 else "1.1"
        return find_file(self.data, (f"{split}-v{version}*.json",), f"SQuAD v{version} {split}")

    def read(self, split: str, tokenizer, limit=None) -> Split:
        return self.encode(split, read_squad(self.path(split))[:limit], tokenizer)

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        windows = featurize(examples, tokenizer, self.max_length, self.doc_stride, self.max_query_length)
        encoded = {"input_ids": [w.input_ids.tolist() for w in windows],
                   "token_type_ids": [w.token_type_ids.tolist() for w in windows],
                   "attention_mask": [[1] * len(w.input_ids) for w in windows],
                   "start_positions": [w.start_position for w in windows],
                   "end_positions": [w.end_position for w in windows]}
        return Split(name, examples, encoded, {"windows": windows})

    def example(self, record: dict, guid: str) -> SquadExample:
        return SquadExample(guid, record["question"], record["context"], [], [])

    def head_config(self) -> dict:
        return {}  # two outputs, start and end, whatever the labels

    def use_model_labels(self, config) -> None:
        pass

    def result(self, split: Split, outputs) -> "SquadPredictions":
        return postprocess(split.examples, split.extra["windows"], outputs["start_logits"], outputs["end_logits"],
                           version_2=self.version_2, null_threshold=self.null_threshold)

    def score(self, split: Split, outputs) -> dict:
        result = self.result(split, outputs)
        return squad_metrics(split.examples, result.predictions, result.null_odds or None, self.version_2,
                             result.best_spans or None)

    def write(self, split: Split, outputs, folder: Path) -> Path:
        write_predictions(folder, self.result(split, outputs))
        return folder / "predictions.json"

    def describe(self, split: Split, outputs) -> list[dict]:
        result = self.result(split, outputs)
        described = []
        for ex in split.examples:
            answer = result.predictions[ex.id]
            best = next((b for b in result.nbest[ex.id] if b["text"] == answer), None)  # None: v1 found no span
            start, end = best["offsets"] if answer else (None, None)
            described.append({"answer": answer, "start": start, "end": end,
                              "probability": rounded(best["probability"]) if best else None})
            if self.version_2:
                described[-1]["no_answer"] = not answer
        return described
