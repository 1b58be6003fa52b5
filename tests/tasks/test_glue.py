import re
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from bertforge.core.errors import BertforgeError
from bertforge.model.architectures.config import BertConfig
from bertforge.tasks.glue import (
    GLUE_TASKS, GlueFamily, encode_glue, glue_task, load_glue_from_datasets, read_glue, write_glue_submission
)
from tests.conftest import require_shared


@pytest.fixture(scope="module")
def glue_dir():
    return require_shared("data", "glue")


# The README's counts for the GLUE files shipped in ../shared (train / dev / test).
COUNTS = {"sst2": (67_349, 872, 1_821), "cola": (8_551, 1_043, 1_063), "mrpc": (3_668, 408, 1_725),
          "stsb": (5_749, 1_500, 1_379)}


@pytest.mark.parametrize("task", COUNTS)
def test_real_counts(glue_dir, task):
    for split, count in zip(("train", "dev", "test"), COUNTS[task]):
        examples = read_glue(task, glue_dir, split)
        assert len(examples) == count
        labels = {e.label for e in examples}
        if split == "test":
            assert labels == {None} and examples[5].guid == "test-5"
        elif task == "stsb":
            assert all(0.0 <= y <= 5.0 for y in labels)
        else:
            assert labels == {0, 1}
        assert all((e.text_b is None) == (GLUE_TASKS[task].text_b is None) for e in examples)


def test_real_quirks(glue_dir):
    mrpc = read_glue("mrpc", glue_dir, "dev")  # byte-order mark before the header
    assert mrpc[0].label == 1 and mrpc[0].text_b.startswith('"The foodservice pie business')  # unbalanced quote kept
    cola = read_glue("cola", glue_dir, "dev")  # no header, no final newline
    assert (cola[-1].text_a, cola[-1].label) == ("John talked to Bill about himself.", 1)
    stsb = read_glue("stsb", glue_dir, "dev")
    assert stsb[267].text_b == 'a woman is standing by a pillar where "u2" is written.' and stsb[267].label == 4.2


def test_task_table():
    assert set(GLUE_TASKS) == {"cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"}
    assert glue_task("stsb").num_labels == 1 and glue_task("mnli").num_labels == 3
    assert "dev_mismatched" in glue_task("mnli").splits
    with pytest.raises(BertforgeError, match="unknown GLUE task 'sst-2': expected one of cola, sst2"):
        glue_task("sst-2")
    with pytest.raises(BertforgeError, match="GLUE mnli has no split 'dev'"):
        read_glue("mnli", "/nowhere", "dev")


def _write(tmp_path, folder, split, text):
    path = tmp_path / folder / f"{split}.tsv"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _error(task, tmp_path, split) -> str:
    with pytest.raises(BertforgeError) as e:
        read_glue(task, tmp_path, split)
    assert "\n" not in str(e.value)
    return str(e.value)


def test_reads_headered_and_headerless_files(tmp_path):
    _write(tmp_path, "MNLI", "dev_matched", "index\tsentence1\tsentence2\tgold_label\n0\tA\tB\tneutral\n\n")
    assert [(e.text_a, e.text_b, e.label) for e in read_glue("mnli", tmp_path, "dev_matched")] == [("A", "B", 2)]
    _write(tmp_path, "CoLA", "train", "src\t0\t*\tBad it is.\nsrc\t1\t\tGood.")
    assert [(e.text_a, e.label) for e in read_glue("cola", tmp_path, "train")] == [("Bad it is.", 0), ("Good.", 1)]


def test_bad_rows_name_file_and_line(tmp_path):
    path = _write(tmp_path, "SST-2", "dev", "sentence\tlabel\nfine\t1\nno label here\n")
    assert _error("sst2", tmp_path, "dev") == f"{path}:3: expected 2 columns, found 1"
    path = _write(tmp_path, "SST-2", "train", "sentence\tlabel\nfine\t2\n")
    assert _error("sst2", tmp_path, "train") == f"{path}:2: label '2' is not one of 0, 1"
    path = _write(tmp_path, "RTE", "train", "index\tsentence1\tsentence2\tlabel\n0\ta\tb\tcontradiction\n")
    assert _error("rte", tmp_path, "train") == (
        f"{path}:2: label 'contradiction' is not one of entailment, not_entailment")
    path = _write(tmp_path, "STS-B", "train", "index\tsentence1\tsentence2\tscore\n0\ta\tb\thigh\n")
    assert _error("stsb", tmp_path, "train") == f"{path}:2: score 'high' is not a number"
    path = _write(tmp_path, "CoLA", "dev", "src\t1\t\tGood.\nsrc\t0\tBad.\n")
    assert _error("cola", tmp_path, "dev") == f"{path}:2: expected 4 columns, found 3"
    path = _write(tmp_path, "QQP", "train", "id\tquestion1\tis_duplicate\n")
    assert _error("qqp", tmp_path, "train") == f"{path}:1: header lacks column 'question2'"


def test_empty_and_missing_splits_name_the_file(tmp_path):
    path = _write(tmp_path, "SST-2", "dev", "sentence\tlabel\n")
    assert _error("sst2", tmp_path, "dev") == f"{path}: no examples"
    path = _write(tmp_path, "SST-2", "test", "")
    assert _error("sst2", tmp_path, "test") == f"{path}: empty file"
    assert re.fullmatch(rf"{re.escape(str(tmp_path / 'WNLI' / 'train.tsv'))}: no such file .*",
                        _error("wnli", tmp_path, "train"))


def test_encode_pairs_and_singles(glue_dir, tokenizer):
    examples = read_glue("mrpc", glue_dir, "dev")[:16]
    features = encode_glue(examples, tokenizer, max_length=40)
    assert set(features) == {"input_ids", "token_type_ids", "attention_mask", "labels"}
    assert features["labels"] == [e.label for e in examples]
    for ids, types in zip(features["input_ids"], features["token_type_ids"]):
        assert len(ids) <= 40 and ids[0] == tokenizer.cls_token_id and ids.count(tokenizer.sep_token_id) == 2
        second = ids.index(tokenizer.sep_token_id) + 1  # segment B starts after the first [SEP]
        assert types == [0] * second + [1] * (len(ids) - second)
    assert any(len(ids) == 40 for ids in features["input_ids"])  # some pairs were truncated

    test = encode_glue(read_glue("sst2", glue_dir, "test")[:4], tokenizer, max_length=128)
    assert "labels" not in test and all(set(t) == {0} for t in test["token_type_ids"])
    assert tokenizer.decode(test["input_ids"][0], skip_special_tokens=True) == "uneasy mishmash of styles and genres."


def test_submission_file(tmp_path):
    write_glue_submission("mnli", [1, 0, 2], tmp_path / "MNLI-m.tsv")
    assert (tmp_path / "MNLI-m.tsv").read_text() == "index\tprediction\n0\tentailment\n1\tcontradiction\n2\tneutral\n"
    write_glue_submission("stsb", [4.25, 0.1], tmp_path / "STS-B.tsv")
    assert (tmp_path / "STS-B.tsv").read_text() == "index\tprediction\n0\t4.250\n1\t0.100\n"


def test_datasets_is_optional(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` fail
    with pytest.raises(BertforgeError, match="needs the `datasets` package"):
        load_glue_from_datasets("sst2", "train")


def test_datasets_labels_follow_the_files_order(monkeypatch):
    calls = []

    class Split(list):
        features = {"label": SimpleNamespace(names=["entailment", "neutral", "contradiction"])}

    def load_dataset(path, name, split):
        calls.append((path, name, split))
        return Split([{"premise": "p", "hypothesis": "h", "label": y} for y in (0, 2, -1)])

    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=load_dataset))
    examples = load_glue_from_datasets("mnli", "dev_matched")
    assert calls == [("nyu-mll/glue", "mnli", "validation_matched")]
    assert [(e.text_a, e.text_b, e.label) for e in examples] == [("p", "h", 1), ("p", "h", 0), ("p", "h", None)]


def test_model_labels_are_read_in_the_task_order():
    """A model's label names, in any order or case, are the task's; other names stay the model's own, in its
    order; the submission file keeps the files' values."""
    family = GlueFamily("mnli", None, 128)
    family.use_model_labels(BertConfig.from_name("tiny", id2label={0: "ENTAILMENT", 1: "neutral", 2: "contradiction"}))
    assert family.labels == ["contradiction", "entailment", "neutral"]
    outputs = {"logits": [np.array([3.0, 2.0, 1.0]), np.array([0.0, 0.0, 5.0])]}  # entailment, contradiction
    assert [d["label"] for d in family.describe(None, outputs)] == ["entailment", "contradiction"]
    assert family.predictions(outputs).tolist() == [1, 0]
    sst2 = GlueFamily("sst2", None, 128)
    assert sst2.labels == ["negative", "positive"]
    sst2.use_model_labels(BertConfig.from_name("tiny", id2label={0: "bad", 1: "good"}))
    assert sst2.labels == ["bad", "good"] and sst2.order is None
    assert sst2.describe(None, {"logits": [np.array([0.0, 1.0])]})[0]["label"] == "good"


def test_a_data_folder_holding_the_splits_is_read_as_given_whatever_its_name(tmp_path):
    """--data DIR with train.tsv and dev.tsv in it is read there, not from DIR/../QNLI/, however DIR is named;
    a parent folder in download_glue_data.py's layout still reads its task's folder."""
    mine = tmp_path / "my-data"
    mine.mkdir()
    (mine / "train.tsv").write_text("index\tquestion\tsentence\tlabel\n0\tQ?\tA.\tentailment\n")
    (mine / "dev.tsv").write_text("index\tquestion\tsentence\tlabel\n0\tQ2?\tA2.\tnot_entailment\n")
    assert [(e.text_a, e.label) for e in read_glue("qnli", mine, "dev")] == [("Q2?", 1)]
    family = GlueFamily("qnli", mine, 32)
    assert family.glue.path(family.data, "train") == mine / "train.tsv"
    _write(tmp_path, "QNLI", "dev", "index\tquestion\tsentence\tlabel\n0\tQ3?\tA3.\tentailment\n")
    assert [e.text_a for e in read_glue("qnli", tmp_path, "dev")] == ["Q3?"]
