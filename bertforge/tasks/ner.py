"""Named-entity recognition on CoNLL-2003: reading, first-piece featurisation, predictions back to words, and
the task family."""

import bisect
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError, where
from ..core.io import atomic_path, read_text
from .base import HeadClass, Split, TaskFamily
from .metrics import entities, ner_metrics, split_tag

log = logging.getLogger("bertforge")


@dataclass
class NerSentence:
    words: list[str]
    tags: list[str]


def iob1_to_iob2(tags: list[str]) -> list[str]:
    """Rewrite tags so that every entity begins with B- (IOB1 uses B- only between same-type neighbours)."""
    out = ["O"] * len(tags)
    for kind, start, end in entities(tags):
        out[start:end] = [f"B-{kind}"] + [f"I-{kind}"] * (end - start - 1)
    return out


def read_conll(path, to_iob2: bool = False, encoding: str = "utf-8") -> list[NerSentence]:
    """Sentences of a CoNLL file: one word per line, word first and tag last (CoNLL-2003: word POS chunk NER),
    blank lines between sentences, -DOCSTART- lines between documents. Every line has the first line's width."""
    sentences, words, tags, columns = [], [], [], None
    for line_no, line in enumerate(read_text(path, encoding).split("\n"), 1):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            if words:
                sentences.append(NerSentence(words, tags))
                words, tags = [], []
            continue
        columns = columns or len(fields)
        if len(fields) != columns or columns < 2:
            raise BertforgeError(f"{where(path, line_no)}: expected {max(columns, 2)} columns "
                                 f"(word first, tag last), found {len(fields)}")
        try:
            split_tag(fields[-1])
        except ValueError as e:
            raise BertforgeError(f"{where(path, line_no)}: {e}") from None
        words.append(fields[0])
        tags.append(fields[-1])
    if words:
        sentences.append(NerSentence(words, tags))
    if not sentences:
        raise BertforgeError(f"{path}: no sentences")
    if to_iob2:
        for s in sentences:
            s.tags = iob1_to_iob2(s.tags)
    return sentences


def label_list(sentences: list[NerSentence]) -> list[str]:
    """O, then B- and I- for every entity type seen (both, so IOB1 files lacking some B- tags still fit)."""
    kinds = sorted({split_tag(t)[1] for s in sentences for t in s.tags} - {""})
    return ["O"] + [f"{prefix}-{kind}" for kind in kinds for prefix in "BI"]


def _word_ids(words: list[str], offsets) -> list[int]:
    """Per token of " ".join(words), the index of its word; -1 for [CLS] and [SEP] (empty spans)."""
    starts = list(itertools.accumulate((len(w) + 1 for w in words[:-1]), initial=0))
    return [bisect.bisect_right(starts, s) - 1 if e > s else -1 for s, e in offsets]


def _first_pieces(word_ids: list[int]):
    """(token position, word index) of the first piece of each word."""
    previous = -1
    for t, w in enumerate(word_ids):
        if w != -1 and w != previous:
            yield t, w
        previous = w


def _split_words(pieces, budget: int) -> list[tuple[int, int]]:
    """(first word, end word) spans of at most budget pieces each (a longer single word stands alone)."""
    spans, start, used = [], 0, 0
    for w, n in enumerate(pieces):
        if used + n > budget and w > start:
            spans.append((start, w))
            start, used = w, 0
        used += n
    return spans + [(start, len(pieces))]


def encode_ner(sentences: list[NerSentence], tokenizer, label_to_id: dict[str, int], max_length: int,
               split_long: bool = True) -> dict[str, list]:
    """One feature per sentence: tag ids on the first piece of each word, -100 on the other tokens.

    Sentences longer than max_length tokens are split at word boundaries (or, with split_long=False,
    truncated; their cut words are then predicted as O), with one warning that counts them. Besides
    the model inputs, each feature has "sentence_index" and "word_ids" (per token, its word in the
    sentence, -1 for special tokens) for predictions_to_words.
    """
    budget = max_length - 2  # [CLS] and [SEP]
    # Tokens never cross the spaces between words, so a token's offset tells its word.
    full = tokenizer([" ".join(s.words) for s in sentences], truncation=False, return_offsets_mapping=True)
    rows, again = [], []  # rows: ((sentence, first word, end word), encoding, its row); again: spans to redo
    for i, s in enumerate(sentences):
        word_ids = _word_ids(s.words, full["offset_mapping"][i])
        pieces = np.bincount([w for w in word_ids if w >= 0], minlength=len(s.words))
        if pieces.sum() <= budget:
            rows.append(((i, 0, len(s.words)), full, i))
        else:
            again += [(i, a, b) for a, b in (_split_words(pieces, budget) if split_long else [(0, len(s.words))])]
    if again:
        action = "split at word boundaries" if split_long else "truncated (their last words will be predicted O)"
        long = len({i for i, _, _ in again})
        log.warning(f"{long} of {len(sentences)} sentences are longer than {max_length} tokens: {action}")
        part = tokenizer([" ".join(sentences[i].words[a:b]) for i, a, b in again], truncation=True,
                         max_length=max_length, return_offsets_mapping=True)
        rows = sorted(rows + [(span, part, k) for k, span in enumerate(again)], key=lambda row: row[0])

    inputs = ("input_ids", "token_type_ids", "attention_mask")
    features = {k: [] for k in (*inputs, "labels", "sentence_index", "word_ids")}
    for (i, a, b), enc, k in rows:
        for key in inputs:
            features[key].append(enc[key][k])
        word_ids = [w + a if w >= 0 else -1 for w in _word_ids(sentences[i].words[a:b], enc["offset_mapping"][k])]
        labels = [-100] * len(word_ids)
        for t, w in _first_pieces(word_ids):
            tag = sentences[i].tags[w]
            if tag not in label_to_id:
                raise BertforgeError(f"tag {tag!r} is not in the label list ({', '.join(label_to_id)})")
            labels[t] = label_to_id[tag]
        features["labels"].append(labels)
        features["sentence_index"].append(i)
        features["word_ids"].append(word_ids)
    return features


def predictions_to_words(sentences: list[NerSentence], features: dict[str, list], predictions,
                         labels: list[str]) -> list[list[str]]:
    """Tags per word from per-token label ids (predictions[feature][token], e.g. the argmax of the logits):
    each word takes its first piece's prediction; words no feature covers (truncated) get O."""
    tags = [["O"] * len(s.words) for s in sentences]
    for i, word_ids, pred in zip(features["sentence_index"], features["word_ids"], predictions):
        for t, w in _first_pieces(word_ids):
            tags[i][w] = labels[int(pred[t])]
    return tags


def write_conll(path, sentences: list[NerSentence], predicted: list[list[str]]) -> None:
    """`word gold predicted` lines, a blank line after each sentence: the input conlleval reads."""
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for s, guesses in zip(sentences, predicted, strict=True):
            for word, gold, guess in zip(s.words, s.tags, guesses, strict=True):
                f.write(f"{word} {gold} {guess}\n")
            f.write("\n")


class NerFamily(TaskFamily):
    """CoNLL-2003 NER: a tag per word, predicted on its first piece; entity-level F1."""

    names = ("conll2003", "ner")
    model_class = HeadClass("BertForTokenClassification")
    per_token_outputs = ("logits",)
    targets = {"labels": -100}
    best_metric = "f1"
    eval_splits = ("valid", "test")
    files = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}
    text_fields = {"sentence": str}

    def __init__(self, task: str, data: Path | None, max_length: int):
        super().__init__(task, data, max_length)
        # Without data the labels are the fine-tuned model's (see use_model_labels).
        self.labels = label_list(read_conll(self.path("train"))) if data else None

    def path(self, split):
        return self.data / self.files[split] if self.data.is_dir() else self.data

    def read(self, split: str, tokenizer, limit=None) -> Split:
        return self.encode(split, read_conll(self.path(split))[:limit], tokenizer)

    def encode(self, name: str, sentences: list, tokenizer) -> Split:
        label_to_id = {label: i for i, label in enumerate(self.labels)}
        return Split(name, sentences, encode_ner(sentences, tokenizer, label_to_id, self.max_length))

    def example(self, record: dict, guid: str) -> NerSentence:
        words = record["sentence"].split()
        return NerSentence(words, [self.labels[0]] * len(words))  # placeholder tags: encode_ner wants one per word

    def loss_units(self, batch: dict) -> int:
        return int((batch["labels"] != -100).sum())

    def tags(self, split: Split, outputs):
        predictions = [logits.argmax(-1) for logits in outputs["logits"]]
        return predictions_to_words(split.examples, split.encoded, predictions, self.labels)

    def score(self, split: Split, outputs) -> dict:
        m = ner_metrics([s.tags for s in split.examples], self.tags(split, outputs))
        prefix = "" if split.name == "valid" else f"{split.name}_"
        return {f"{prefix}{k}": v for k, v in m.items() if k != "per_type"}

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"conll_{split.name}_predictions.txt"
        write_conll(path, split.examples, self.tags(split, outputs))
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        return [{"words": s.words, "tags": tags} for s, tags in zip(split.examples, self.tags(split, outputs))]
