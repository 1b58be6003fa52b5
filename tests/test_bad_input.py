"""Bad input and faults across the commands, by cause: each case exits with the stated code, says one line on
stderr naming the culprit, prints no traceback, and (where data could be lost) leaves earlier output intact."""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from itertools import islice
from pathlib import Path

import numpy as np
import torch
import pytest

from bertforge.cli import main
from bertforge.data.create import create_pretraining_data
from bertforge.pretraining.demo import module_documents
from bertforge.text.wordpiece import train_vocab

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("bad-input")
    (root / "corpus").mkdir()
    for name, text in islice(module_documents(), 30):
        (root / "corpus" / f"{name}.txt").write_text(text, encoding="utf-8")
    train_vocab([root / "corpus"], vocab_size=1500, out_dir=root / "vocab")
    create_pretraining_data([root / "corpus"], root / "vocab", root / "data", max_seq_length=64, max_predictions=10,
                            dupe_factor=1, eval_docs=3, seed=1)
    return root


def one_line_error(capsys, code, argv, *words):
    """main(argv) exits `code`, with one line on stderr (besides progress bars) that holds every word."""
    assert main([str(a) for a in argv]) == code
    printed = capsys.readouterr().err
    said = [line for line in printed.splitlines() if line.startswith("bertforge")]
    assert len(said) == 1 and "Traceback" not in printed, printed
    err = said[0]
    for word in words:
        assert word in err, err
    return err


def snapshot(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# 1. Numeric options are range-checked by their type, for every command

@pytest.mark.parametrize("argv, flag", [
    (["pretrain", "--data", "d", "--out", "o", "--batch-size", "0"], "--batch-size"),
    (["pretrain", "--data", "d", "--out", "o", "--batch-size", "-4"], "--batch-size"),
    (["pretrain", "--data", "d", "--out", "o", "--grad-accum", "0"], "--grad-accum"),
    (["pretrain", "--data", "d", "--out", "o", "--keep", "0"], "--keep"),
    (["pretrain", "--data", "d", "--out", "o", "--lr", "-1"], "--lr"),
    (["pretrain", "--data", "d", "--out", "o", "--warmup", "2.5"], "--warmup"),
    (["pretrain", "--data", "d", "--out", "o", "--lr", "nan"], "--lr"),
    (["finetune", "sst2", "--model", "m", "--data", "d", "--out", "o", "--batch-size", "0"], "--batch-size"),
    (["finetune", "sst2", "--model", "m", "--data", "d", "--out", "o", "--epochs", "0"], "--epochs"),
    (["finetune", "sst2", "--model", "m", "--data", "d", "--out", "o", "--max-length", "0"], "--max-length"),
    (["finetune", "sst2", "--model", "m", "--data", "d", "--out", "o", "--max-train-examples", "0"],
     "--max-train-examples"),
    (["predict", "sst2", "--model", "m", "--text", "x", "--batch-size", "0"], "--batch-size"),
    (["evaluate", "sst2", "--model", "m", "--data", "d", "--batch-size", "x"], "--batch-size"),
    (["tokenizer", "train", "--files", "f", "--out", "o", "--vocab-size", "-5"], "--vocab-size"),
    (["tokenizer", "train", "--files", "f", "--out", "o", "--min-frequency", "-1"], "--min-frequency"),
    (["data", "create", "--input", "i", "--vocab", "v", "--out", "o", "--max-seq-length", "100000"],
     "--max-seq-length"),
    (["data", "create", "--input", "i", "--vocab", "v", "--out", "o", "--masked-lm-prob", "1"], "--masked-lm-prob"),
    (["data", "create", "--input", "i", "--vocab", "v", "--out", "o", "--dupe-factor", "0"], "--dupe-factor"),
    (["features", "--model", "m", "--input", "i", "--out", "o.npz", "--stride", "0"], "--stride"),
    (["embed", "c.txt", "--model", "m", "--out", "o", "--shard-rows", "0"], "--shard-rows"),
    (["embed", "c.txt", "--model", "m", "--out", "o", "--batch-tokens", "-1"], "--batch-tokens"),
    (["embed", "c.txt", "--model", "m", "--out", "o", "--dimensions", "0"], "--dimensions"),
    (["search", "d", "a query", "--top-k", "0"], "--top-k"),
    (["search", "d", "a query", "--rescore", "-1"], "--rescore"),
    (["squad-split", "f.json", "--out", "o", "--train-fraction", "1"], "--train-fraction"),
    (["evaluate", "sst2", "--model", "m", "--data", "d", "--device", "cuda:99"], "--device"),
    (["suite", "--model", "m", "--data", "d", "--out", "o", "--device", "cuda:99"], "--device"),
    (["demo", "--out", "o", "--device", "cuda:99"], "--device"),
    (["serve", "m", "--port", "70000"], "--port"),
    (["serve", "m", "--max-batch-tokens", "0"], "--max-batch-tokens"),
    (["serve", "m", "--max-concurrent", "-1"], "--max-concurrent"),
    (["serve", "m", "--max-length", "0"], "--max-length"),
    (["serve", "m", "--max-input-tokens", "0"], "--max-input-tokens"),
    (["serve", "m", "--max-client-batch", "0"], "--max-client-batch"),
    (["serve", "m", "--max-wait-ms", "-2"], "--max-wait-ms"),
    (["serve", "m", "--threads", "0"], "--threads"),
    (["serve", "m", "--device", "cuda:99"], "--device"),
])
def test_numeric_options(capsys, argv, flag):
    one_line_error(capsys, 2, argv, f"argument {flag}")


def test_a_vocabulary_smaller_than_the_alphabet_and_an_empty_corpus(corpus, tmp_path, capsys):
    one_line_error(capsys, 2, ["tokenizer", "train", "--files", corpus / "corpus", "--out", tmp_path / "v",
                               "--vocab-size", "20"], "--vocab-size 20", "alphabet")
    (tmp_path / "blank.txt").write_text("  \n\t\n")
    one_line_error(capsys, 2, ["tokenizer", "train", "--files", tmp_path / "blank.txt", "--out", tmp_path / "v"],
                   "blank.txt", "no text")


# 2. Output paths are checked before any work; a full disk is said so; nothing earlier is lost

def test_output_paths(corpus, tmp_path, capsys):
    a_file = tmp_path / "taken"
    a_file.write_text("x")
    one_line_error(capsys, 2, ["data", "create", "--input", corpus / "corpus", "--vocab", corpus / "vocab",
                               "--out", a_file], "--out", "is a file")
    one_line_error(capsys, 2, ["tokenizer", "train", "--files", corpus / "corpus", "--out", a_file], "is a file")
    one_line_error(capsys, 2, ["pretrain", "--data", corpus / "data", "--out", corpus / "data"], "is also the input")
    (tmp_path / "dir.npz").mkdir()
    one_line_error(capsys, 2, ["features", "--model", "m", "--input", a_file, "--out", tmp_path / "dir.npz"], "--out",
                   "is a folder")
    assert main(["plot", str(tmp_path / "nowhere"), "--out", str(tmp_path / "new" / "deeper" / "c.png")]) == 2
    assert "no metrics log" in capsys.readouterr().err


def full_disk(argv, limit: int) -> subprocess.CompletedProcess:
    """The command run with a file-size limit (a full disk as a writer sees it: writes fail with EFBIG)."""
    code = ("import resource, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
            f"resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit})); "
            "from bertforge.cli import main; sys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *map(str, argv)], env=ENV, capture_output=True, text=True,
                          timeout=300)


def test_a_full_disk_leaves_the_previous_data_and_says_so(corpus, tmp_path):
    out = tmp_path / "data"
    shutil.copytree(corpus / "data", out)
    before = snapshot(out)
    done = full_disk(["data", "create", "--input", corpus / "corpus", "--vocab", corpus / "vocab", "--out", out,
                      "--max-seq-length", "64", "--dupe-factor", "2", "--seed", "7"], 20_000)
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert "no space left" in done.stderr.strip().splitlines()[-1]  # (progress bars above it)
    assert snapshot(out) == before and not list(tmp_path.glob(".data.partial"))


def test_a_full_disk_while_checkpointing_keeps_the_last_checkpoint(corpus, tmp_path):
    run = tmp_path / "run"
    argv = ["pretrain", "--data", corpus / "data", "--config", "tiny", "--out", run, "--steps", "2",
            "--batch-size", "4", "--save-every", "1", "--eval-every", "0", "--no-progress"]
    done = full_disk(argv, 600_000)  # room for a few small files, not for a checkpoint's weights
    assert done.returncode in (1, 2) and "Traceback" not in done.stderr, done.stderr
    assert "no space left" in done.stderr.strip().splitlines()[-1]
    assert not list(run.glob("step-*")) and not list(run.glob(".step-*"))


def test_the_submission_file_is_atomic(tmp_path):
    from bertforge.tasks.glue import write_glue_submission

    path = tmp_path / "SST-2_test.tsv"
    write_glue_submission("sst2", [0, 1], path)
    before = path.read_bytes()
    with pytest.raises(Exception):
        write_glue_submission("sst2", [0, 7], path)  # a label id the task has not: fails while writing
    assert path.read_bytes() == before and [p.name for p in tmp_path.iterdir()] == [path.name]


def wait_for(path: Path, proc: subprocess.Popen):
    while not path.exists():
        assert proc.poll() is None, "the first writer ended before the second started"
        time.sleep(0.05)


def test_a_second_writer_of_one_folder_is_refused_and_harms_nothing(corpus, tmp_path, capsys):
    """Two `data create` (or two `pretrain`) on one --out: the second is a one-line error and the first ends well."""
    out, run = tmp_path / "data", tmp_path / "run"
    create = ["data", "create", "--input", corpus / "corpus", "--vocab", corpus / "vocab", "--out", out,
              "--max-length", "64", "--seed", "9", "--no-progress"]
    first = subprocess.Popen([sys.executable, "-m", "bertforge", *map(str, create), "--dupe-factor", "30"], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(tmp_path / ".data.partial", first)
    one_line_error(capsys, 2, [*create, "--dupe-factor", "1"], f"--out {out}", "another process is writing it")
    assert first.wait(timeout=300) == 0 and json.loads((out / "index.json").read_text())["dupe_factor"] == 30

    train = ["pretrain", "--data", out, "--config", "tiny", "--out", run, "--batch-size", "4", "--eval-every", "0",
             "--no-progress"]
    first = subprocess.Popen([sys.executable, "-m", "bertforge", *map(str, train), "--steps", "100000"], env=ENV,
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_for(run / "metrics.jsonl", first)
    one_line_error(capsys, 2, [*train, "--steps", "2", "--overwrite"], f"--out {run}", "another process is writing it")
    first.send_signal(signal.SIGTERM)  # the first run stops as it would alone: a checkpoint to resume from
    assert first.wait(timeout=60) == 130 and list(run.glob("step-*/training_state.pt"))
    assert main([str(a) for a in [*train, "--steps", "2", "--overwrite"]]) == 0  # free again once it ended


def test_killing_data_create_never_harms_the_previous_data(corpus, tmp_path):
    """Killed at random moments over several runs, the earlier data folder is byte for byte as it was."""
    out = tmp_path / "data"
    shutil.copytree(corpus / "data", out)
    before = snapshot(out)
    rng = np.random.default_rng(0)
    for delay in rng.uniform(0.5, 4.0, size=4):
        proc = subprocess.Popen([sys.executable, "-m", "bertforge", "data", "create", "--input", str(corpus / "corpus"),
                                 "--vocab", str(corpus / "vocab"), "--out", str(out), "--dupe-factor", "3",
                                 "--seed", "9"], env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        if proc.returncode == 0:  # it finished first: the new data replaced the old as a whole
            before = snapshot(out)
        assert snapshot(out) == before
    assert main(["data", "create", "--input", str(corpus / "corpus"), "--vocab", str(corpus / "vocab"),
                 "--out", str(out), "--dupe-factor", "1", "--seed", "9"]) in (0, None)
    assert not list(tmp_path.glob(".data.partial"))  # a later run clears what a killed one left


# 3. Shard contents are checked when a data folder is opened

def damaged_copy(corpus, tmp_path, damage):
    data = tmp_path / "data"
    shutil.copytree(corpus / "data", data)
    damage(data)
    return data


def poke(path, offset_from_end, value):
    array = np.load(path)
    array.reshape(-1)[-offset_from_end] = value
    np.save(path, array)


@pytest.mark.parametrize("damage, words", [
    (lambda d: poke(d / "shard-00000.tokens.npy", 3, 1499 + 100), ["shard-00000.tokens.npy: row", "vocabulary"]),
    (lambda d: poke(d / "shard-00000.nsp_labels.npy", 1, 7), ["nsp_labels.npy: row", "0 or 1"]),
    (lambda d: poke(d / "shard-00000.mlm_positions.npy", 1, 900), ["mlm_positions.npy: row", "outside its row"]),
    (lambda d: (d / "shard-00000.offsets.npy").write_bytes(b"\x93NUMPY garbage"), ["offsets.npy", "corrupted"]),
    (lambda d: (d / "index.json").write_text(json.dumps({k: v for k, v in json.loads(
        (d / "index.json").read_text()).items() if k != "max_predictions"})), ["index.json", "max_predictions"]),
    (lambda d: (d / "index.json").write_text((d / "index.json").read_text().replace('"masked": true',
                                                                                   '"masked": false')),
     ["[MASK] in data whose index.json says it is not masked"]),
])
def test_damaged_shards(corpus, tmp_path, capsys, damage, words):
    data = damaged_copy(corpus, tmp_path, damage)
    one_line_error(capsys, 2, ["pretrain", "--data", data, "--config", "tiny", "--out", tmp_path / "run",
                               "--steps", "1", "--no-progress"], *words)


# 4. Lengths beyond what the storage or the model holds

def test_lengths_beyond_the_model(corpus, tmp_path, capsys, tiny_model):
    create_pretraining_data([corpus / "corpus"], corpus / "vocab", tmp_path / "long", max_seq_length=600,
                            dupe_factor=1, seed=1)
    one_line_error(capsys, 2, ["pretrain", "--data", tmp_path / "long", "--config", "tiny", "--out", tmp_path / "r",
                               "--steps", "1", "--no-progress"], "rows of 600 tokens", "512 positions")
    one_line_error(capsys, 2, ["predict", "sst2", "--model", tiny_model, "--text", "fine", "--max-length", "1000"],
                   "--max-length 1000", "512 positions")


# 5. Text that is not Unicode

def test_unpaired_surrogates(tmp_path, capsys):
    assert main(["tokenizer", "encode", "--vocab", "v", "caf\udce9"]) == 2
    assert "argument 5 (caf\\udce9) is not valid UTF-8" in capsys.readouterr().err
    (tmp_path / "a.jsonl").write_text('{"sentence": "ok"}\n{"sentence": "bad \\ud800 text"}\n')
    from bertforge.core.errors import BertforgeError
    from bertforge.core.io import read_json_lines

    with pytest.raises(BertforgeError, match=r"a\.jsonl:2: a string holds an unpaired surrogate"):
        read_json_lines(tmp_path / "a.jsonl")


# 6. Run folders and resume

def pretrain_argv(corpus, run, *extra, steps=2):
    return ["pretrain", "--data", corpus / "data", "--config", "tiny", "--out", run, "--steps", str(steps),
            "--batch-size", "4", "--eval-every", "0", "--save-every", "1", "--log-every", "1", "--no-progress", *extra]


def test_run_folders(corpus, tmp_path, capsys):
    run = tmp_path / "run"
    one_line_error(capsys, 2, pretrain_argv(corpus, run, "--resume"), "nothing to resume")
    assert main([str(a) for a in pretrain_argv(corpus, run)]) == 0
    capsys.readouterr()
    weights = (run / "final" / "model.safetensors").read_bytes()
    one_line_error(capsys, 2, pretrain_argv(corpus, run), "holds an earlier run", "--resume", "--overwrite")
    assert (run / "final" / "model.safetensors").read_bytes() == weights
    # a half-deleted checkpoint (no COMPLETE marker) is not resumed from
    (run / "step-0000002" / "COMPLETE").unlink()
    assert main([str(a) for a in pretrain_argv(corpus, run, "--resume", steps=3)]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]  # continued from step 1, the last complete checkpoint
    # a torn last line (a kill while logging) does not stop --resume
    with open(run / "metrics.jsonl", "a") as f:
        f.write('{"step": 4, "lo')
    assert main([str(a) for a in pretrain_argv(corpus, run, "--resume", steps=4)]) == 0
    assert main([str(a) for a in pretrain_argv(corpus, run, "--overwrite")]) == 0
    capsys.readouterr()
    assert sorted(p.name for p in run.glob("step-*")) == ["step-0000001", "step-0000002"]


def test_an_interrupted_finetune_exits_130_writes_no_results_and_resumes(tmp_path, tiny_model):
    from tests.conftest import require_shared

    data = require_shared("data", "glue", "SST-2")
    run = tmp_path / "run"
    argv = [sys.executable, "-m", "bertforge", "finetune", "sst2", "--model", str(tiny_model), "--data", str(data),
            "--out", str(run), "--max-train-examples", "4000", "--max-eval-examples", "16", "--batch-size", "4",
            "--epochs", "1", "--log-every", "1", "--no-progress"]
    proc = subprocess.Popen(argv, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 180
    while (not (run / "metrics.jsonl").exists() or len((run / "metrics.jsonl").read_text().splitlines()) < 3) \
            and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert err.strip().splitlines()[-1].startswith("bertforge: stopped at step") and "--resume" in err
    assert not (run / "eval_results.json").exists()
    stopped = int(sorted(run.glob("step-*"))[-1].name[5:])
    resumed = subprocess.run([*argv[:-5], "--max-train-examples", str(4 * (stopped + 2)), "--batch-size", "4",
                              "--epochs", "1", "--no-progress", "--resume"], env=ENV, capture_output=True, text=True,
                             timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    results = json.loads((run / "eval_results.json").read_text())
    assert len(results["history"]) == 1
    before = json.loads((run / "args.json").read_text())["resumed"][-1]["wall_s_before"]
    assert 0 < before < results["wall_time_s"]  # the interrupted part's time is counted


# 7. The wrong model for the job

def test_the_wrong_model_for_the_job(tmp_path, capsys, tiny_model):
    import torch

    from bertforge import BertConfig, BertForTokenClassification, BertTokenizer

    ner = tmp_path / "ner"
    torch.manual_seed(0)
    BertForTokenClassification(BertConfig.from_name("tiny", vocab_size=30522).with_labels(["O", "B-PER", "I-PER"])) \
        .save_pretrained(ner, BertTokenizer.from_pretrained(tiny_model))
    one_line_error(capsys, 2, ["predict", "sst2", "--model", ner, "--text", "fine"],
                   "BertForTokenClassification", "sst2 needs a BertForSequenceClassification")
    one_line_error(capsys, 2, ["predict", "conll2003", "--model", tiny_model, "--text", "fine"],
                   "a BertForPreTraining model", "conll2003 needs a BertForTokenClassification")
    untrained = tmp_path / "untrained"
    shutil.copytree(tiny_model, untrained)
    config = json.loads((untrained / "config.json").read_text())
    del config["architectures"]
    (untrained / "config.json").write_text(json.dumps(config))
    one_line_error(capsys, 2, ["predict", "sst2", "--model", untrained, "--text", "fine"],
                   "no trained classifier", "fine-tune it first")


def test_a_vocabulary_larger_than_the_embedding_table(tmp_path, capsys, tiny_model):
    """A model folder whose vocab.txt (30522 tokens) outgrows its embedding table (1000 rows): refused when the
    tokenizer is loaded beside the model (predict, pipeline) and by convert, which writes nothing."""
    import torch

    from bertforge import BertConfig, BertForSequenceClassification, BertTokenizer, pipeline
    from bertforge.core.errors import BertforgeError

    folder = tmp_path / "small-table"
    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig.from_name("tiny", vocab_size=1000))
    model.save_pretrained(folder, BertTokenizer.from_pretrained(tiny_model))
    words = ["vocab.txt", "30522 tokens", "1000 rows"]
    one_line_error(capsys, 2, ["predict", "sst2", "--model", folder, "--text", "fine"], *words)
    with pytest.raises(BertforgeError, match="30522 tokens, more than the 1000 rows"):
        pipeline("text-classification", model=folder)
    torch.save(model.state_dict(), folder / "pytorch_model.bin")
    (folder / "model.safetensors").unlink()
    one_line_error(capsys, 2, ["convert", folder, tmp_path / "out"], *words)
    (folder / "config.json").unlink()  # no config to compare with: the weights' table itself
    one_line_error(capsys, 2, ["convert", folder, tmp_path / "out"], "30522 tokens", "1000 rows",
                   "pytorch_model.bin")
    assert not (tmp_path / "out").exists()


def test_export_and_convert_never_write_over_another_model(tmp_path, capsys, tiny_model):
    """A destination holding another model is refused (unchanged) unless --overwrite, which replaces it as a whole:
    no file of the old model is left beside the new one. A folder holding other files is never replaced."""
    pytest.importorskip("onnxruntime")
    import torch
    from safetensors.torch import load_file

    from bertforge import BertConfig, BertForSequenceClassification, BertTokenizer

    pickled = tmp_path / "pickled"
    shutil.copytree(tiny_model, pickled)
    torch.save(load_file(pickled / "model.safetensors"), pickled / "pytorch_model.bin")
    (pickled / "model.safetensors").unlink()
    other, mixed = tmp_path / "other", tmp_path / "mixed"
    BertForSequenceClassification(BertConfig.from_name("tiny", vocab_size=30522)).save_pretrained(
        other, BertTokenizer.from_pretrained(tiny_model))
    shutil.copytree(other, mixed)
    (mixed / "notes.txt").write_text("mine")
    before, mixed_before = snapshot(other), snapshot(mixed)
    for argv in (["export", "onnx", tiny_model, other], ["convert", pickled, other]):
        one_line_error(capsys, 2, argv, f"OUT {other}: holds another model", "--overwrite")
        one_line_error(capsys, 2, [*argv[:-1], mixed, "--overwrite"], f"OUT {mixed}: holds other files", "notes.txt")
        assert snapshot(other) == before and snapshot(mixed) == mixed_before
    assert main(["export", "onnx", str(tiny_model), str(other), "--overwrite"]) == 0
    assert "model.safetensors" not in {p.name for p in other.iterdir()} and (other / "model.onnx").is_file()
    assert (other / "config.json").read_bytes() == (tiny_model / "config.json").read_bytes()
    assert main(["convert", str(pickled), str(other), "--overwrite"]) == 0
    assert sorted(p.name for p in other.iterdir()) == sorted(p.name for p in tiny_model.iterdir())
    assert not (tmp_path / ".other.partial").exists() and not (tmp_path / ".other.old").exists()


@pytest.mark.parametrize("name, content, words", [
    ("train.csv", "text,label\ngood,1\nbad,\n", ["train.csv:3", "the label is empty"]),
    ("train.csv", "text,label\ngood,1\nbad,NaN\n", ["train.csv:3", "label 'NaN' is not a class"]),
    ("train.jsonl", '{"text": "good", "label": 1}\n{"text": "bad", "label": NaN}\n', ["train.jsonl:2", "nan is not"]),
    ("train.jsonl", '{"text": "good", "label": 1}\n{"text": "bad", "label": null}\n',
     ["train.jsonl:2", "'label' must be a text or a number"]),
    ("train.csv", "text,label\ngood,pos\nbad,pos\n", ["train.csv: the training split has a single class (pos)"]),
    ("train.jsonl", '{"text": "good", "label": 1}\n{"text": "bad", "label": "1.0"}\n',
     ["train.jsonl: the training split has a single class (1)"]),
])
def test_own_labels_are_read_as_meant(tiny_model, tmp_path, capsys, name, content, words):
    """A label that is missing (empty, NaN, null) is named by file:line; a training split of one class (1 and "1.0"
    being one) is refused; nothing is written."""
    (tmp_path / name).write_text(content)
    one_line_error(capsys, 2, ["finetune", "text-classification", "--model", tiny_model, "--train", tmp_path / name,
                               "--dev", tmp_path / name, "--out", tmp_path / "run", "--no-progress"], *words)
    assert not (tmp_path / "run").exists()


def test_a_single_tag_and_a_long_csv_field(tiny_model, tmp_path, capsys):
    (tmp_path / "tags.jsonl").write_text('{"tokens": ["a", "b"], "tags": ["O", "O"]}\n')
    one_line_error(capsys, 2, ["finetune", "token-classification", "--model", tiny_model, "--train",
                               tmp_path / "tags.jsonl", "--out", tmp_path / "run"], "tags.jsonl", "single tag (O)")
    assert not (tmp_path / "run").exists()
    from bertforge.core.io import read_records

    long = "word " * 60_000  # 300,000 characters: over the csv module's default field limit of 131,072
    (tmp_path / "long.csv").write_text(f"text,label\n{long},pos\n")
    assert [r["text"] for _, r in read_records(tmp_path / "long.csv")] == [long]


@pytest.mark.parametrize("file, change, words", [
    ("tokenizer.json", lambda d: d["added_tokens"].append({"content": "[NEW]"}), ["added_tokens[5]", '"id"']),
    ("tokenizer.json", lambda d: d["added_tokens"].append({"id": "x", "content": "[NEW]"}), ["added_tokens[5]"]),
    ("tokenizer_config.json", lambda d: d.update(model_max_length="lots"), ["model_max_length 'lots'"]),
    ("tokenizer_config.json", lambda d: d.update(model_max_length="256"), None),
])
def test_tokenizer_files_with_odd_values(tmp_path, tiny_model, file, change, words):
    from bertforge import BertTokenizer
    from bertforge.core.errors import BertforgeError

    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json"):
        shutil.copyfile(tiny_model / name, folder / name)
    content = json.loads((folder / file).read_text())
    change(content)
    (folder / file).write_text(json.dumps(content))
    if words is None:
        assert BertTokenizer.from_pretrained(folder).model_max_length == 256
        return
    with pytest.raises(BertforgeError) as excinfo:
        BertTokenizer.from_pretrained(folder)
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith(str(folder / file)), message
    assert all(word in message for word in words), message


@pytest.mark.parametrize("opset, problem", [("5", "at least 14"), ("99", "at most 20"), ("x", "whole number")])
def test_export_opsets_out_of_range(tmp_path, capsys, tiny_model, opset, problem):
    one_line_error(capsys, 2, ["export", "onnx", tiny_model, tmp_path / "onnx", "--opset", opset], "argument --opset",
                   problem)
    assert list(tmp_path.iterdir()) == []
    from bertforge.core.errors import BertforgeError
    from bertforge.inference.export import export_onnx

    pytest.importorskip("onnxruntime")
    with pytest.raises(BertforgeError, match="opset 5: the export writes ONNX operator sets 14 to 20"):
        export_onnx(tiny_model, tmp_path / "onnx", opset=5)
    assert list(tmp_path.iterdir()) == []


# 8. The same input gives the same output: vocabulary, data and pre-training, in any process

def test_vocabulary_data_and_pretraining_repeat_byte_for_byte(corpus, tmp_path):
    """Two processes with other hash seeds: the same vocab.txt and tokenizer.json (also from the files in another
    order: a vocabulary is learnt from counts), the same shards, the same losses (the library trainer gave three
    vocabularies in three runs). The data's documents follow the order of --input, as in Google's code."""
    files = sorted(str(p) for p in (corpus / "corpus").glob("*.txt"))
    runs = []
    for seed, order in (("1", files), ("2", files[::-1])):
        out = tmp_path / f"run-{seed}"
        env = {**ENV, "PYTHONHASHSEED": seed}
        for argv in (["tokenizer", "train", "--input", *order, "--vocab-size", "1200", "--out", out / "vocab",
                      "--no-progress"],
                     ["data", "create", "--input", *files, "--vocab", out / "vocab", "--out", out / "data",
                      "--max-seq-length", "64", "--dupe-factor", "2", "--eval-docs", "2", "--seed", "3",
                      "--no-progress"],
                     ["pretrain", "--data", out / "data", "--config", "tiny", "--out", out / "pt", "--steps", "3",
                      "--batch-size", "4", "--log-every", "1", "--eval-every", "3", "--no-progress"]):
            subprocess.run([sys.executable, "-m", "bertforge", *map(str, argv)], env=env, check=True,
                           capture_output=True)
        losses = [json.loads(line).get("loss") for line in (out / "pt" / "metrics.jsonl").read_text().splitlines()]
        runs.append((snapshot(out / "vocab"), snapshot(out / "data"), losses))
    (vocab_1, data_1, losses_1), (vocab_2, data_2, losses_2) = runs
    assert vocab_1 == vocab_2 and len(vocab_1[Path("vocab.txt")].splitlines()) == 1200
    assert data_1.keys() == data_2.keys() and data_1 == data_2
    assert losses_1 == losses_2 and len([x for x in losses_1 if x is not None]) == 3


# 9. Messages that name the real problem

def test_messages_name_the_real_problem(corpus, tmp_path, capsys):
    one_line_error(capsys, 2, ["pretrain", "--data", corpus / "corpus", "--config", "tiny", "--out", tmp_path / "r",
                               "--steps", "1"], "index.json", "bertforge data create")
    one_line_error(capsys, 2, ["data", "create", "--input", corpus / "corpus", "--vocab", corpus / "vocab",
                               "--out", tmp_path / "d", "--eval-docs", "1000"], "--eval-docs 1000", "documents")


def test_the_pickle_refusal_names_what_exists(tmp_path, capsys, tiny_model):
    import torch

    folder = tmp_path / "pickled"
    shutil.copytree(tiny_model, folder)
    weights = folder / "model.safetensors"
    from safetensors.torch import load_file

    torch.save(load_file(weights), folder / "pytorch_model.bin")
    weights.unlink()
    err = one_line_error(capsys, 2, ["info", folder], "pytorch_model.bin", "bertforge convert")
    assert "--trust-pickle" not in err


@pytest.mark.parametrize("change, words", [
    ({"num_hidden_layers": 1}, ["num_hidden_layers 1, the weights have 2 layers"]),
    ({"intermediate_size": 100}, ["intermediate.dense.", "(intermediate_size 100)",
                                  "config.json does not describe these weights"]),
    ({"num_hidden_layers": -1}, ["num_hidden_layers must be a whole number of at least 1"]),
    ({"num_labels": 10**9, "id2label": None}, ["config.json: num_labels 1000000000 is over"]),
    ({"max_position_embeddings": 10**9}, ["config.json: max_position_embeddings 1000000000 is over"]),
])
def test_info_checks_the_config_against_the_weights(tmp_path, capsys, tiny_model, change, words):
    folder = tmp_path / "model"
    shutil.copytree(tiny_model, folder)
    config = json.loads((folder / "config.json").read_text())
    config = {**config, **change}
    if config["id2label"] is None:  # labels given by their number alone
        del config["id2label"], config["label2id"]
    (folder / "config.json").write_text(json.dumps(config))
    one_line_error(capsys, 2, ["info", folder], *words)


# Hostile model folders: every file a model folder is read from passes one rule (core.io.model_file), so a FIFO
# or a link to /dev/zero where a file should be, or JSON nested without end, is a one-line error from every
# command and from pipeline(), never a hang, a memory bomb or a traceback. Each runs in its own process, under a
# time limit and an address-space cap, so that a regression fails the test instead of the machine.

PIPELINE = ("import sys, bertforge\ntry:\n    bertforge.pipeline('sentence-embedding', model=sys.argv[1])\n"
            "except bertforge.BertforgeError as e:\n    print('bertforge: error:', e, file=sys.stderr)\n"
            "    sys.exit(2)\n")
ADDRESS_SPACE = 3 * 2**30  # importing torch reserves about 1.2 GB of it


def bounded(argv: list, seconds: float = 120) -> tuple[int, str]:
    """(exit code, stderr) of a Python process run under the limits; a hang fails the test."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))
    try:
        done = subprocess.run([sys.executable, *map(str, argv)], env=ENV, capture_output=True, text=True,
                              timeout=seconds, preexec_fn=limit)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{argv} still running after {seconds} s")
    return done.returncode, done.stderr


def sentence_folder(tiny_model, folder: Path) -> Path:
    from bertforge.model.formats.sentence_folder import write_sentence_folder

    shutil.copytree(tiny_model, folder)
    write_sentence_folder(folder, "mean")
    return folder


@pytest.mark.parametrize("make, words", [
    (lambda f: f.symlink_to("/dev/zero"), "resolves to /dev/zero, outside the model folder"),
    (os.mkfifo, "a FIFO, not a regular file"),
])
def test_a_pooling_config_that_is_no_file_is_refused_at_once(tiny_model, tmp_path, make, words):
    folder = sentence_folder(tiny_model, tmp_path / "st")
    pooling = folder / "1_Pooling" / "config.json"
    pooling.unlink()
    make(pooling)
    for argv in (["-c", PIPELINE, folder], ["-m", "bertforge", "info", folder],
                 ["-m", "bertforge", "serve", folder, "--port", "0"]):
        code, err = bounded(argv)
        said = [line for line in err.splitlines() if line.startswith("bertforge")]
        assert code == 2 and len(said) == 1 and "Traceback" not in err, (argv, err)
        assert str(pooling) in said[0] and words in said[0], said


@pytest.mark.parametrize("name", ["tokenizer.json", "config.json", "1_Pooling/config.json"])
def test_json_nested_without_end_is_one_line_from_every_command(tiny_model, tmp_path, capsys, name):
    from bertforge import BertforgeError, pipeline

    folder = sentence_folder(tiny_model, tmp_path / "st")
    (folder / name).write_text("[" * 100_000 + "]" * 100_000)
    words = [str(folder / name), "nested more than 100 levels deep"]
    with pytest.raises(BertforgeError) as excinfo:
        pipeline("sentence-embedding", model=folder)
    assert all(word in str(excinfo.value) for word in words), excinfo.value
    for argv in (["info", folder], ["predict", "text-classification", "--model", folder, "--text", "a film"],
                 ["serve", folder, "--port", "0"]):
        if (argv[0], name) in (("info", "tokenizer.json"),  # info takes the casing from tokenizer_config.json
                               ("predict", "1_Pooling/config.json")):  # a classifier pools no sentence vector
            continue
        one_line_error(capsys, 2, argv, *words)


def test_a_weights_link_to_another_models_file_is_refused(tiny_model, tmp_path, capsys):
    """The same rule as a shard index naming a file outside the folder: a model is read from its own folder."""
    folder = tmp_path / "m"
    shutil.copytree(tiny_model, folder)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").symlink_to(tiny_model / "model.safetensors")
    one_line_error(capsys, 2, ["info", folder], str(folder / "model.safetensors"), "outside the model folder")


# A ModernBERT folder broken one field or tensor at a time: every command refuses it in one line naming the file,
# by the rules its architecture's registry entry declares (config schema, parameter list), before a model is built.

def modernbert_broken(tmp_path_factory, config=None, weights=None) -> Path:
    from safetensors.torch import load_file, save_file

    from tests.conftest import modernbert_folder

    folder = modernbert_folder(tmp_path_factory.mktemp("modernbert"), "ModernBertForSequenceClassification")
    if config:
        path = folder / "config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **config}))
    if weights:
        tensors = load_file(folder / "model.safetensors")
        weights(tensors)
        save_file({k: v.contiguous() for k, v in tensors.items()}, folder / "model.safetensors")
    return folder


def no_last_layer(tensors):
    for key in [k for k in tensors if k.startswith("model.layers.3.")]:
        del tensors[key]


@pytest.mark.parametrize("config, weights, file, words", [
    ({"rope_parameters": ["full_attention"]}, None, "config.json", "rope_parameters must be an object"),
    ({"norm_eps": "abc"}, None, "config.json", "norm_eps must be a number above 0"),
    ({"attention_dropout": 5.0}, None, "config.json", "attention_dropout must be a number from 0 to 1, not 5.0"),
    ({"global_attn_every_n_layers": 0, "layer_types": None}, None, "config.json", "global_attn_every_n_layers must"),
    (None, no_last_layer, "model.safetensors", "layer 3 not in the weights"),
    (None, lambda t: t.update({"model.embeddings.norm.weight": t["model.embeddings.norm.weight"].to(torch.int8)}),
     "model.safetensors", "embeddings.norm.weight holds int8 values"),
])
def test_a_broken_modernbert_folder_is_one_line_in_every_command(tmp_path_factory, tmp_path, capsys, config,
                                                                 weights, file, words):
    from bertforge import BertforgeError, pipeline

    folder = modernbert_broken(tmp_path_factory, config, weights)
    with pytest.raises(BertforgeError) as excinfo:
        pipeline("text-classification", model=folder)
    assert str(folder / file) in str(excinfo.value) and words in str(excinfo.value), excinfo.value
    (tmp_path / "train.csv").write_text("text,label\ngood,pos\nbad,neg\n")
    for argv in (["info", folder], ["serve", folder, "--port", "0"],
                 ["finetune", "text-classification", "--model", folder, "--train", tmp_path / "train.csv",
                  "--dev", tmp_path / "train.csv", "--out", tmp_path / "run", "--no-progress"]):
        one_line_error(capsys, 2, argv, str(folder / file), words)
    assert not (tmp_path / "run").exists()


def test_ten_billion_layers_are_refused_at_once_within_the_memory_cap(tmp_path_factory):
    """The layer count is checked before ModernBERT's layer pattern is built from it (it once hung `info` and
    took memory without bound)."""
    folder = modernbert_broken(tmp_path_factory, {"num_hidden_layers": 10**10, "layer_types": None})
    for argv in (["-m", "bertforge", "info", folder], ["-c", PIPELINE, folder],
                 ["-m", "bertforge", "serve", folder, "--port", "0"]):
        code, err = bounded(argv, seconds=60)
        said = [line for line in err.splitlines() if line.startswith("bertforge")]
        assert code == 2 and len(said) == 1 and "Traceback" not in err, (argv, err)
        assert "num_hidden_layers 10000000000 is over 256" in said[0], said
