"""Your own questions with answers in a passage, on SQuAD's windows, post-processing and official metric
(squad.py).

The splits are your own data's (own_data.py), with a question (--question-column), a passage (--context-column)
and the answers (--answers-column) as the Hugging Face squad data sets hold them, {"text": [...],
"answer_start": [...]}: each answer's text and its character offset in the passage (in a CSV or TSV cell, that
object as JSON). Empty lists mean the question has no answer in the passage: a training split holding such
questions makes the model SQuAD v2.0's kind, which may answer nothing, and its config.json says so
(`version_2_with_negative`), for evaluate and predict.
"""

import json
from pathlib import Path

from ..core.errors import BertforgeError
from .base import Split
from .own_data import SOURCES, OwnData
from ..inference.answer_spans import SquadExample
from .squad import SquadFamily

VERSION_2 = "version_2_with_negative"  # the config.json entry, named as Google's and Hugging Face's run_squad flag


def answers_of(value, context: str, location: str, column: str) -> tuple[list[str], list[int]]:
    """The answers' texts and starts, each text checked to be where its start says in the context."""
    if isinstance(value, str):  # a CSV or TSV cell
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    texts, starts = (value.get("text"), value.get("answer_start")) if isinstance(value, dict) else (None, None)
    if not (isinstance(texts, list) and isinstance(starts, list) and len(texts) == len(starts)):
        raise BertforgeError(f'{location}: {column!r} must be {{"text": [...], "answer_start": [...]}}, one start '
                             f"per text (empty lists: no answer)")
    for text, start in zip(texts, starts):
        if not isinstance(text, str) or not text.strip() or not isinstance(start, int) or isinstance(start, bool):
            raise BertforgeError(f"{location}: answer {text!r} at {start!r}: expected a non-empty text and the "
                                 f"character offset where it starts in the context")
        if context[start:start + len(text)] != text:
            raise BertforgeError(f"{location}: answer {text!r} is not at answer_start {start} in the context "
                                 f"(which reads {context[start:start + len(text)]!r} there)")
    return texts, starts


class QuestionAnsweringFamily(OwnData, SquadFamily):
    names = ("question-answering",)
    option_defaults = {**SOURCES, "question_column": "question", "context_column": None, "answers_column": "answers",
                       "null_threshold": 0.0}

    def __init__(self, task: str, data: Path | None, max_length: int, question_column="question",
                 context_column=None, answers_column="answers", null_threshold=0.0, **sources):
        super().__init__(task, data, max_length, null_threshold=null_threshold)
        self.use_sources(**sources)
        self.columns = (question_column, context_column or "context", answers_column)

    def read(self, split: str, tokenizer, limit=None) -> Split:
        question, context, answers = self.columns
        labelled = split != "test"
        examples = []
        for i, (location, record) in enumerate(self.records(split, {
                "--question-column": question, "--context-column": context,
                "--answers-column": answers if labelled else None})):
            for column in (question, context):
                if not isinstance(record[column], str) or not record[column].strip():
                    raise BertforgeError(f"{location}: {column!r} must be a non-empty text")
            texts, starts = (answers_of(record[answers], record[context], location, answers) if labelled
                             else ([], []))
            examples.append(SquadExample(f"{split}-{i}", record[question], record[context], texts, starts, not texts))
        if split == "train":  # before any example is cut off by `limit`
            self.version_2 = any(e.is_impossible for e in examples)
        return self.encode(split, examples[:limit], tokenizer)

    def config_entries(self) -> dict:
        return {VERSION_2: self.version_2}

    def use_model_labels(self, config) -> None:
        self.version_2 = bool(config.extra.get(VERSION_2, False))
