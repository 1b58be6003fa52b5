"""Your own data: CSV/TSV/JSON-lines files with any labels, fine-tuned, predicted, and read by transformers."""

import csv
import json

import pytest

from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from bertforge.tasks import make_family
from bertforge.tasks.glue import read_glue
from tests.conftest import require_shared

NAMES = {0: "negative", 1: "positive"}


def sst2_csv(path, split, n, column="review", label="sentiment"):
    """SST-2 examples rewritten as a CSV with string labels and column names of one's own."""
    examples = read_glue("sst2", require_shared("data", "glue"), split)[:n]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["id", column, label])
        writer.writerows([i, e.text_a, NAMES[e.label]] for i, e in enumerate(examples))
    return examples


def finetune_csv(tiny_model, tmp_path):
    sst2_csv(tmp_path / "train.csv", "train", 48)
    sst2_csv(tmp_path / "dev.csv", "dev", 24)
    out = tmp_path / "run"
    assert main(["finetune", "text-classification", "--model", str(tiny_model), "--train", str(tmp_path / "train.csv"),
                 "--dev", str(tmp_path / "dev.csv"), "--text-column", "review", "--label-column", "sentiment",
                 "--out", str(out), "--epochs", "1", "--batch-size", "8", "--lr", "1e-3", "--no-progress"]) == 0
    return out


def test_string_labels_fine_tune_predict_and_load_in_transformers(tiny_model, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = finetune_csv(tiny_model, tmp_path)
    results = json.loads((out / "eval_results.json").read_text())
    assert results["task"] == "text-classification" and {"accuracy", "macro_f1"} <= set(results)
    model = BertForSequenceClassification.from_pretrained(out / "best")
    assert model.config.id2label == NAMES and model.config.label2id == {"negative": 0, "positive": 1}
    card = (out / "best" / "README.md").read_text()
    assert f"- data: train `{tmp_path / 'train.csv'}`, dev `{tmp_path / 'dev.csv'}`, 48 training examples" in card

    texts = ["a gripping , beautiful film .", "dull and far too long .", "it was fine ."]
    capsys.readouterr()
    flags = [flag for t in texts for flag in ("--text", t)]
    assert main(["predict", "text-classification", "--model", str(out / "best"), *flags, "--batch-size", "2"]) == 0
    ours = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["input"] for p in ours] == [{"text": t} for t in texts]
    theirs = transformers.pipeline("text-classification", model=str(out / "best"), device="cpu")(texts)
    assert [p["label"] for p in ours] == [t["label"] for t in theirs]
    for p, t in zip(ours, theirs):
        assert p["probabilities"][t["label"]] == pytest.approx(t["score"], abs=1e-5)


def test_pairs_from_tsv_and_scores_from_json_lines(tokenizer, tmp_path):
    rows = [("a man plays a guitar .", "a person plays music .", 4.2), ("a cat sleeps .", "the stock fell .", 0.1),
            ("two dogs run .", "dogs are running .", 3.9), ("it rains .", "it is sunny .", 1.0)] * 4
    with open(tmp_path / "train.jsonl", "w") as f:
        f.writelines(json.dumps({"text": a, "text_pair": b, "label": y}) + "\n" for a, b, y in rows)
    scores = make_family("regression", options={"train": tmp_path / "train.jsonl", "text_pair_column": "text_pair"})
    split = scores.read("train", tokenizer)
    assert [e.label for e in split.examples] == [y for _, _, y in rows]
    assert split.encoded["token_type_ids"][0].count(1) > 0  # the second text is segment B
    (tmp_path / "pairs.tsv").write_text("q1\tq2\tsame\nhow old are you\twhat is your age\tyes\nhi\tbye\tno\n")
    pairs = make_family("text-pair-classification", options={"train": tmp_path / "pairs.tsv", "text_column": "q1",
                                                               "text_pair_column": "q2", "label_column": "same"})
    split = pairs.read("train", tokenizer)
    assert pairs.labels == ["no", "yes"] and [e.label for e in split.examples] == [1, 0]


@pytest.mark.parametrize("content, options, message", [
    ("text,label\nfine,pos\n", {"label_column": "sentiment"}, r"train\.csv:2: no column 'sentiment'"),
    ("text,label\nfine,pos\nextra,neg,x\n", {}, r"train\.csv:3: expected 2 columns"),
    ("text,label\n", {}, r"train\.csv: no examples"),
])
def test_bad_rows_name_the_file_and_line(tokenizer, tmp_path, content, options, message):
    (tmp_path / "train.csv").write_text(content)
    family = make_family("text-classification", options={"train": tmp_path / "train.csv", **options})
    with pytest.raises(BertforgeError, match=message):
        family.read("train", tokenizer)


def test_a_dev_label_unseen_in_training_is_named(tokenizer, tmp_path):
    (tmp_path / "train.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    (tmp_path / "dev.csv").write_text("text,label\nmeh,neutral\n")
    family = make_family("text-classification", options={"train": tmp_path / "train.csv", "dev": tmp_path / "dev.csv"})
    family.read("train", tokenizer)
    unseen = r"dev\.csv:2: label 'neutral' is not among the training split's \(neg, pos\)"
    with pytest.raises(BertforgeError, match=unseen):
        family.read("dev", tokenizer)


def test_numbers_and_their_texts_are_one_class(tokenizer, tmp_path):
    """1, "1", 1.0 and "1.0" are one class in JSON lines, CSV and a model's labels alike."""
    rows = [("a", 1), ("b", "1"), ("c", 1.0), ("d", "1.0"), ("e", 0), ("f", "0.0"), ("g", 2.5), ("h", "2.50")]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps({"text": t, "label": y}) + "\n" for t, y in rows))
    (tmp_path / "dev.csv").write_text("text,label\nx,1.0\ny, 0\nz,2.5\n")
    family = make_family("text-classification", options={"train": tmp_path / "train.jsonl",
                                                          "dev": tmp_path / "dev.csv"})
    assert [e.label for e in family.read("train", tokenizer).examples] == [1, 1, 1, 1, 0, 0, 2, 2]
    assert family.labels == ["0", "1", "2.5"]
    assert [e.label for e in family.read("dev", tokenizer).examples] == [1, 0, 2]
    family.labels = ["0.0", "1.0", "2.5"]  # a model's labels, written before labels were read this way
    assert [e.label for e in family.read("dev", tokenizer).examples] == [1, 0, 2]


def test_missing_files_are_one_line(tiny_model, tmp_path, capsys):
    assert main(["finetune", "text-classification", "--model", str(tiny_model), "--out", str(tmp_path / "r")]) == 2
    assert "text-classification needs --train FILE" in capsys.readouterr().err
    assert main(["finetune", "sst2", "--model", str(tiny_model), "--out", str(tmp_path / "r")]) == 2
    assert "sst2 reads its splits from a folder: give --data" in capsys.readouterr().err
