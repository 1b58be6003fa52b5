"""Your own tagged words: fine-tuned, predicted, scored, and read by transformers' token-classification pipeline."""

import itertools
import json

import numpy as np
import pytest

from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.model.architectures.task_heads import BertForTokenClassification
from bertforge.tasks import make_family
from tests.conftest import fine_tune, one_line_error, write_jsonl

PEOPLE = [["Alice", "Smith"], ["Bob"], ["Maria", "Garcia"], ["Chen", "Wei"], ["Omar"], ["Ines", "Costa"]]
PLACES = [["Paris"], ["New", "York"], ["Berlin"], ["Lima"]]
VERBS = [["lives", "in"], ["flew", "to"], ["works", "in"]]


def tagged(person, verb, place) -> dict:
    return {"tokens": person + verb + place + ["."],
            "tags": ["B-PER"] + ["I-PER"] * (len(person) - 1) + ["O"] * len(verb)
            + ["B-LOC"] + ["I-LOC"] * (len(place) - 1) + ["O"]}


@pytest.fixture(scope="module")
def fine_tuned(tiny_model, tmp_path_factory):
    folder = tmp_path_factory.mktemp("ner")
    rows = [tagged(p, VERBS[i % 3], c) for i, (p, c) in enumerate(itertools.product(PEOPLE, PLACES))]
    train, dev = write_jsonl(folder / "train.jsonl", rows), write_jsonl(folder / "dev.jsonl", rows[::5])
    test = write_jsonl(folder / "test.jsonl", [{"tokens": ["Bob", "flew", "to", "Lima", "."]}])
    return fine_tune("token-classification", tiny_model, folder / "run", "--train", train, "--dev", dev,
                     "--test", test, "--epochs", 10, "--batch-size", 8)


def test_fine_tunes_with_the_training_tag_set(fine_tuned):
    results = json.loads((fine_tuned / "eval_results.json").read_text())
    assert {"accuracy", "precision", "recall", "f1"} <= set(results)  # BIO tags: entity F1 beside word accuracy
    first, best = results["history"][0], max(results["history"], key=lambda m: m["f1"])
    assert best["f1"] > first["f1"] and best["accuracy"] > first["accuracy"]  # it learns the hand-written rows
    config = BertForTokenClassification.from_pretrained(fine_tuned / "best").config
    assert config.id2label == dict(enumerate(["B-LOC", "B-PER", "I-LOC", "I-PER", "O"]))


def test_predict_agrees_with_the_transformers_pipeline(fine_tuned, capsys):
    """transformers tags every token; bertforge gives each word its first piece's tag: on those tokens they agree."""
    transformers = pytest.importorskip("transformers")
    texts = ["Maria Garcia flew to Berlin .", "Omar works in New York .", "Ada Lovelace lives in Turin ."]
    capsys.readouterr()
    assert main(["predict", "token-classification", "--model", str(fine_tuned / "best"),
                 *[flag for t in texts for flag in ("--text", t)], "--no-progress"]) == 0
    ours = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["words"] for p in ours] == [t.split() for t in texts]
    assert ours[0]["tags"] == ["B-PER", "I-PER", "O", "O", "B-LOC", "O"]
    pipe = transformers.pipeline("token-classification", model=str(fine_tuned / "best"), device="cpu")
    for text, prediction in zip(texts, ours):
        by_start = {e["start"]: e["entity"] for e in pipe(text)}  # tokens tagged O are left out
        starts = itertools.accumulate((len(w) + 1 for w in prediction["words"][:-1]), initial=0)
        assert prediction["tags"] == [by_start.get(s, "O") for s in starts]


def test_a_test_file_is_predicted_as_json_lines(fine_tuned, tmp_path):
    """By fine-tuning, with the best model, and by predict: a CSV with its words in a text."""
    (tmp_path / "test.csv").write_text("id,words\n1,Bob flew to Lima .\n")
    assert main(["predict", "token-classification", "--model", str(fine_tuned / "best"), "--test",
                 str(tmp_path / "test.csv"), "--tokens-column", "words", "--out", str(tmp_path / "preds"),
                 "--no-progress"]) == 0
    written = (tmp_path / "preds" / "test_predictions.jsonl").read_text()
    assert [json.loads(line)["words"] for line in written.splitlines()] == [["Bob", "flew", "to", "Lima", "."]]
    assert (fine_tuned / "test_predictions.jsonl").read_text() == written
    results = json.loads((fine_tuned / "eval_results.json").read_text())
    assert results["test_predictions"] == str(fine_tuned / "test_predictions.jsonl")


def test_any_tag_set_from_csv(tokenizer, tmp_path):
    """Parts of speech, space-separated in CSV cells: not entity tags, so accuracy alone picks the best epoch."""
    (tmp_path / "pos.csv").write_text("words,pos\nthe cat sat,DET NOUN VERB\ndogs bark,NOUN VERB\n")
    family = make_family("token-classification", options={"train": tmp_path / "pos.csv", "tokens_column": "words",
                                                          "tags_column": "pos"})
    split = family.read("train", tokenizer)
    assert family.labels == ["DET", "NOUN", "VERB"] and family.best_metric == "accuracy"
    assert [(s.words, s.tags) for s in split.examples] == [(["the", "cat", "sat"], ["DET", "NOUN", "VERB"]),
                                                           (["dogs", "bark"], ["NOUN", "VERB"])]
    gold = [np.eye(3)[np.maximum(row, 0)] for row in map(np.array, split.encoded["labels"])]  # on first pieces
    assert family.score(split, {"logits": gold}) == {"accuracy": 1.0}
    nouns = [np.tile(np.eye(3)[1], (len(row), 1)) for row in split.encoded["labels"]]
    assert family.score(split, {"logits": nouns}) == {"accuracy": 2 / 5}


@pytest.mark.parametrize("rows, message", [
    ([{"words": ["a"], "tags": ["O"]}],
     "train.jsonl:1: no column 'tokens' (see --tokens-column; the columns are words, tags)"),
    ([{"tokens": ["a", "b"], "tags": ["O"]}, {"tokens": ["New", "York"], "tags": ["B-LOC"]}],
     "train.jsonl:1: 1 tags ('tags') for 2 words ('tokens')"),
    ([{"tokens": [], "tags": []}], "train.jsonl:1: 'tokens' must be a non-empty list of texts"),
    ([{"tokens": ["a", 1.5], "tags": ["O", "O"]}], "train.jsonl:1: 'tokens' must be a non-empty list of texts"),
])
def test_bad_rows_are_one_line_errors(tokenizer, tmp_path, rows, message):
    family = make_family("token-classification", options={"train": write_jsonl(tmp_path / "train.jsonl", rows)})
    with pytest.raises(BertforgeError) as e:
        family.read("train", tokenizer)
    one_line_error(e, message)


def test_a_dev_tag_unseen_in_training_is_named(tokenizer, tmp_path):
    train = write_jsonl(tmp_path / "train.jsonl", [{"tokens": ["Bob", "ran"], "tags": ["B-PER", "O"]}])
    dev = write_jsonl(tmp_path / "dev.jsonl", [{"tokens": ["in", "Lima"], "tags": ["O", "B-LOC"]}])
    family = make_family("token-classification", options={"train": train, "dev": dev})
    family.read("train", tokenizer)
    with pytest.raises(BertforgeError) as e:
        family.read("dev", tokenizer)
    one_line_error(e, "dev.jsonl:1: tag 'B-LOC' is not among the training split's (B-PER, O)")
