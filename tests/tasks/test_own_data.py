"""Your own data's sources: files, a --data folder, and Hugging Face `datasets` data sets (offline: written by
save_to_disk, or local data files), with their one-line errors."""

import json
import sys

import pytest

from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.model.architectures.task_heads import BertForTokenClassification
from bertforge.tasks import make_family
from bertforge.tasks.own_data import label_order
from tests.conftest import fine_tune, one_line_error


@pytest.fixture
def datasets(monkeypatch, tmp_path):
    """The `datasets` package in offline mode, caching under tmp_path: nothing touches the network."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    datasets = pytest.importorskip("datasets")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    return datasets


SENTIMENT = ["negative", "positive"]


def saved_dataset(datasets, folder):
    """A DatasetDict with a ClassLabel column, as the hub's data sets have, written by save_to_disk."""
    features = datasets.Features({"sentence": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=SENTIMENT)})
    splits = {"train": (["a joy", "a mess", "moving", "dull"], [1, 0, 1, 0]),
              "validation": (["lovely", "awful"], [1, 0]), "test": (["fine", "bad"], [-1, -1])}
    datasets.DatasetDict({name: datasets.Dataset.from_dict({"sentence": texts, "label": labels}, features=features)
                          for name, (texts, labels) in splits.items()}).save_to_disk(folder)
    return folder


def test_label_order():
    assert label_order(["b", "a", "b"]) == ["a", "b"]
    assert label_order(["10", "9", "-1"]) == ["-1", "9", "10"]  # numbers sort as numbers


def test_a_dataset_saved_to_disk_gives_its_splits_with_class_names(datasets, tokenizer, tmp_path):
    folder = saved_dataset(datasets, tmp_path / "reviews")
    family = make_family("text-classification", options={"dataset": str(folder), "text_column": "sentence"})
    train = family.read("train", tokenizer)
    assert family.labels == SENTIMENT  # the class names, not their ids
    assert [(e.text_a, e.label) for e in train.examples] == [("a joy", 1), ("a mess", 0), ("moving", 1), ("dull", 0)]
    assert [e.text_a for e in family.read("dev", tokenizer).examples] == ["lovely", "awful"]  # validation is dev
    assert [e.label for e in family.read("test", tokenizer).examples] == [None, None]


def test_a_dataset_of_local_files(datasets, tokenizer, tmp_path):
    """A folder of data files goes through load_dataset, which finds the splits by file name (dev is validation)."""
    (tmp_path / "qa").mkdir()
    context = "The Lys flows through Ghent."
    for split, question in (("train", "What flows through Ghent?"), ("dev", "Which river?")):
        row = {"q": question, "context": context, "answers": {"text": ["The Lys"], "answer_start": [0]}}
        (tmp_path / "qa" / f"{split}.jsonl").write_text(json.dumps(row) + "\n")
    family = make_family("question-answering", options={"dataset": str(tmp_path / "qa"), "question_column": "q"})
    dev = family.read("dev", tokenizer).examples
    assert [(e.question, e.answer_texts, e.answer_starts) for e in dev] == [("Which river?", ["The Lys"], [0])]


@pytest.mark.parametrize("progress", [True, False])
def test_no_progress_silences_the_bars_of_datasets(datasets, tokenizer, tmp_path, capfd, progress):
    """load_dataset draws bars as it prepares the splits; --no-progress (progress=False) keeps them off, and the
    setting is restored after."""
    (tmp_path / "reviews").mkdir()
    for split in ("train", "dev"):
        (tmp_path / "reviews" / f"{split}.jsonl").write_text(json.dumps({"text": "fine", "label": "pos"}) + "\n")
    family = make_family("text-classification", options={"dataset": str(tmp_path / "reviews"), "progress": progress})
    family.read("dev", tokenizer)
    assert ("split" in capfd.readouterr().err) == progress
    assert datasets.is_progress_bar_enabled()


def test_finetune_evaluate_and_predict_a_dataset_with_class_label_tags(datasets, tiny_model, tmp_path, capsys):
    """A token-classification data set as the hub's NER sets are: words, and tags stored as class ids."""
    tags = datasets.ClassLabel(names=["O", "B-PER", "I-PER"])
    features = datasets.Features({"tokens": datasets.Sequence(datasets.Value("string")),
                                  "ner_tags": datasets.Sequence(tags)})
    rows = {"tokens": [["Ada", "Lovelace", "wrote", "notes"], ["Alan", "slept"]] * 4,
            "ner_tags": [[1, 2, 0, 0], [1, 0]] * 4}
    data = datasets.Dataset.from_dict(rows, features=features)
    datasets.DatasetDict({"train": data, "validation": data, "test": data.select([1])}).save_to_disk(
        tmp_path / "people")
    flags = ["--dataset", str(tmp_path / "people"), "--tags-column", "ner_tags", "--no-progress"]
    out = fine_tune("token-classification", tiny_model, tmp_path / "run", *flags, "--epochs", 1, "--batch-size", 4)
    assert BertForTokenClassification.from_pretrained(out / "best").config.id2label == {0: "B-PER", 1: "I-PER", 2: "O"}
    assert json.loads((out / "args.json").read_text())["extra"]["family_options"]["dataset"] == str(tmp_path / "people")
    capsys.readouterr()
    assert main(["evaluate", "token-classification", "--model", str(out / "best"), *flags]) == 0
    last_epoch = json.loads((out / "eval_results.json").read_text())["history"][-1]
    assert json.loads(capsys.readouterr().out) == pytest.approx(last_epoch)  # the validation split, as in training
    assert main(["predict", "token-classification", "--model", str(out / "best"), *flags, "--out",
                 str(tmp_path / "preds")]) == 0
    predicted = [json.loads(line) for line in (tmp_path / "preds" / "test_predictions.jsonl").read_text().splitlines()]
    assert [p["words"] for p in predicted] == [["Alan", "slept"]]


def test_dataset_errors_are_one_line(datasets, tokenizer, tmp_path):
    folder = saved_dataset(datasets, tmp_path / "reviews")
    family = make_family("text-classification", options={"dataset": str(folder)})  # the column is "sentence"
    with pytest.raises(BertforgeError) as e:
        family.read("train", tokenizer)
    assert one_line_error(e, "reviews[train][0]: no column 'text' (see --text-column; the columns are sentence, label)")
    datasets.DatasetDict({"train": datasets.Dataset.from_dict({"text": ["a"], "label": ["x"]})}).save_to_disk(
        tmp_path / "train-only")
    family = make_family("text-classification", options={"dataset": str(tmp_path / "train-only")})
    with pytest.raises(BertforgeError) as e:
        family.read("dev", tokenizer)
    one_line_error(e, "train-only: no validation or dev or valid split (it has train)")
    with pytest.raises(BertforgeError) as e:  # offline: the hub is not asked
        make_family("text-classification", options={"dataset": "no-such/dataset:cfg"}).read("train", tokenizer)
    one_line_error(e, "--dataset no-such/dataset:cfg: ")
    with pytest.raises(BertforgeError) as e:
        make_family("text-classification", options={"dataset": f"{folder}:plain_text"}).read("train", tokenizer)
    one_line_error(e, "a folder written by save_to_disk has no configurations")
    with pytest.raises(BertforgeError) as e:
        make_family("text-classification", options={"dataset": str(folder), "train": "train.csv"})
    one_line_error(e, "--dataset: give a data set or files")


def test_without_the_datasets_package(tiny_model, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets raises ImportError
    assert main(["finetune", "text-classification", "--model", str(tiny_model), "--dataset", "glue:sst2",
                 "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("--dataset needs the `datasets` package: pip install 'bertforge[datasets]'")
    assert "\n" not in err


def test_files_from_a_data_folder(tokenizer, tmp_path):
    (tmp_path / "train.tsv").write_text("text\tlabel\ngood\tpos\nbad\tneg\n")
    (tmp_path / "dev.jsonl").write_text('{"text": "fine", "label": "pos"}\n')
    family = make_family("text-classification", tmp_path)
    assert [e.label for e in family.read("train", tokenizer).examples] == [1, 0]
    assert [e.label for e in family.read("dev", tokenizer).examples] == [1]
    with pytest.raises(BertforgeError) as e:
        family.read("test", tokenizer)
    one_line_error(e, "no test file (looked for test.csv, test.tsv, test.jsonl, test.json)")


def test_another_familys_options_are_refused(tmp_path):
    """`finetune sst2 --train x.csv` would silently read SST-2 instead: an option of another task is an error."""
    with pytest.raises(BertforgeError, match=r"sst2 does not take --tags-column, --train: those are other tasks'"):
        make_family("sst2", tmp_path, options={"train": "x.csv", "tags_column": "ner", "text_column": "text"})
    # every family's defaults (all parsed flags, nothing given) are no choice of the user's
    assert make_family("sst2", tmp_path, options={"train": None, "text_column": "text"}).task == "sst2"


PIQA = [{"goal": "To dry wet shoes,", "sol1": "stuff them with newspaper.", "sol2": "fill them with water."},
        {"goal": "To cool a drink fast,", "sol1": "put it near the oven.", "sol2": "put it in ice with salt."},
        {"goal": "To open a stuck jar lid,", "sol1": "run it under hot water.", "sol2": "put it in the freezer."}]
PIQA_FLAGS = {"question_column": "goal", "choices_columns": ["sol1", "sol2"]}


def piqa_files(folder, labels: str, name="train"):
    """PIQA's layout: the records in NAME.jsonl without labels, their labels in NAME-labels.lst, a line each."""
    data, label_file = folder / f"{name}.jsonl", folder / f"{name}-labels.lst"
    data.write_text("".join(json.dumps(r) + "\n" for r in PIQA))
    label_file.write_text(labels)
    return data, label_file


def test_labels_from_a_file_of_their_own_pair_with_each_split(tokenizer, tmp_path):
    train, train_labels = piqa_files(tmp_path, "0\n1\n0\n")
    dev, dev_labels = piqa_files(tmp_path, "1\r\n1\r\n0\r\n\r\n", "valid")  # CRLF, a blank line at the end
    family = make_family("multiple-choice", options={"train": train, "train_labels": train_labels, "dev": dev,
                                                     "dev_labels": dev_labels, **PIQA_FLAGS})
    examples = family.read("train", tokenizer).examples
    assert [e.label for e in examples] == [0, 1, 0]
    assert [e.endings for e in examples] == [[r["sol1"], r["sol2"]] for r in PIQA]
    assert [e.label for e in family.read("dev", tokenizer).examples] == [1, 1, 0]
    # a labels file's labels are those of the family's --label-column: classes of text classification too
    texts = make_family("text-classification", tmp_path, options={"train_labels": train_labels, "text_column": "goal"})
    assert [e.label for e in texts.read("train", tokenizer).examples] == [0, 1, 0]  # classes "0", "1" in order


@pytest.mark.parametrize("labels, message", [
    ("0\n1\n", r"train-labels.lst: 2 labels for the 3 records of \S*train.jsonl"),
    ("0\n1\n0\n1\n", r"train-labels.lst: 4 labels for the 3 records of \S*train.jsonl"),
    ("0\n2\n0\n", r"train.jsonl:2 \(label: \S*train-labels.lst:2\): label '2' is not among the choices .* index 0..1"),
    ("0\n\n1\n", r"train-labels.lst:2: the label is empty \(the label of \S*train.jsonl:2\)"),
])
def test_labels_file_errors_are_one_line_naming_the_files(tokenizer, tmp_path, labels, message):
    train, train_labels = piqa_files(tmp_path, labels)
    family = make_family("multiple-choice", options={"train": train, "train_labels": train_labels, **PIQA_FLAGS})
    with pytest.raises(BertforgeError, match=message) as e:
        family.read("train", tokenizer)
    one_line_error(e)


def test_labels_files_only_where_a_family_has_labels(tmp_path):
    with pytest.raises(BertforgeError, match="token-classification does not take --train-labels"):
        make_family("token-classification", options={"train": "x.jsonl", "train_labels": "y.lst"})
    with pytest.raises(BertforgeError, match="a labels file goes with a file .* not with --dataset"):
        make_family("multiple-choice", options={"dataset": "piqa", "dev_labels": "valid-labels.lst"})


def test_finetune_multiple_choice_on_piqa_layout(tiny_model, tmp_path, capsys):
    train, train_labels = piqa_files(tmp_path, "0\n1\n0\n")
    dev, dev_labels = piqa_files(tmp_path, "0\n1\n0\n", "valid")
    run = fine_tune("multiple-choice", tiny_model, tmp_path / "run", "--train", train, "--train-labels", train_labels,
                    "--dev", dev, "--dev-labels", dev_labels, "--question-column", "goal",
                    "--choices-columns", "sol1", "sol2", "--epochs", 1, "--batch-size", 2)
    results = json.loads((run / "eval_results.json").read_text())
    assert 0 <= results["accuracy"] <= 1 and results["train_examples"] == 3
    assert json.loads((run / "args.json").read_text())["extra"]["family_options"]["train_labels"] == str(train_labels)
