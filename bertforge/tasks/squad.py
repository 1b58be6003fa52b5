"""SQuAD v1.1 and v2.0: reading, predictions written as the official scripts read them, the split by article,
and the task family. The windows of a passage and the answer spans back from the logits are answer_spans.py's
(the pipelines and the server use them too); the official metrics are tasks/metrics.py's."""

import logging
import re
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError, where
from ..inference.answer_spans import SquadExample, SquadPredictions, featurize, postprocess
from ..core.io import read_json, rounded, write_json
from .base import HeadClass, Split, TaskFamily, find_file
from .metrics import squad_metrics

log = logging.getLogger(__name__)


# ---------------------------------------------------------------------------------------------------------
# Reading

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
