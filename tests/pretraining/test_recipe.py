"""Pre-training recipe options: objectives, dynamic masking rate, schedules, the time budget, the presets."""

import json
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch
import transformers

from bertforge.cli import main
from bertforge.data.create import create_pretraining_data
from bertforge.training.optim import schedule_factor
from bertforge.pretraining.pretrain import PretrainJob
from bertforge.core.flags import duration as parse_duration
from bertforge.pretraining.recipe import resolve
from bertforge.text.tokenizer import BertTokenizer
from bertforge.inference.runtime import native_bf16
from tests.pretraining.test_pretrain import ENV, data_dir  # noqa: F401 (a fixture)


@pytest.fixture(scope="module")
def root(data_dir):  # noqa: F811 (the imported fixture)
    """test_pretrain's corpus and vocabulary, with its unmasked pairs and two more kinds of data."""
    root = data_dir.parent
    common = dict(max_seq_length=64, max_predictions=10, dupe_factor=1, eval_docs=4, seed=1)
    create_pretraining_data([root / "corpus"], root / "vocab", root / "rows", mask=False, nsp=False, **common)
    create_pretraining_data([root / "corpus"], root / "vocab", root / "static", **common)
    (root / "pairs").symlink_to(data_dir)
    return root


def cli(data, out, *extra):
    return ["pretrain", "--data", str(data), "--config", "tiny", "--out", str(out), "--batch-size", "8",
            "--seed", "3", "--eval-every", "0", "--log-every", "1", "--no-progress", "--lr", "1e-3", *extra]


def rows(run):
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def test_parse_duration():
    assert [parse_duration(t) for t in ("90s", "45m", "4h", "1h30m", "2.5", "1d")] == [90, 2700, 14400, 5400, 2.5,
                                                                                      86400]


def test_schedules_end_at_zero():
    for shape in ("linear", "one-cycle"):
        assert schedule_factor(shape, 1.0, 0.1) == 0 and schedule_factor(shape, 0.1, 0.1) == pytest.approx(1)
        values = [schedule_factor(shape, p / 100, 0.1) for p in range(10, 101)]
        assert values == sorted(values, reverse=True)  # decays from the end of the warm-up on
    assert schedule_factor("linear", 0.0, 0.1) == 0 and schedule_factor("one-cycle", 0.0, 0.1) == pytest.approx(1 / 25)


@pytest.mark.parametrize("argv, words", [
    (["--time-budget", "ten minutes"], ["--time-budget", "duration"]),
    (["--time-budget", "5y"], ["--time-budget", "duration"]),
    (["--mask-prob", "1.5"], ["--mask-prob", "above 0 and below 1"]),
    (["--mask-prob", "0"], ["--mask-prob", "above 0 and below 1"]),
    (["--objective", "nsp"], ["--objective", "invalid choice"]),
])
def test_bad_flags_are_one_line(root, tmp_path, capsys, argv, words):
    assert main(cli(root / "rows", tmp_path / "run", *argv)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(w in err for w in words), err


@pytest.mark.parametrize("data, argv, words", [
    ("rows", ["--objective", "mlm+nsp"], ["--objective mlm+nsp", "single segments"]),
    ("static", ["--objective", "ltr"], ["--objective ltr", "statically masked", "--no-mask"]),
    ("static", ["--mask-prob", "0.3"], ["--mask-prob", "statically masked", "--no-mask"]),
    ("static", ["--recipe", "budget"], ["--mask-prob", "statically masked"]),
    ("rows", ["--time-budget", "5s", "--warmup", "10"], ["--warmup", "fraction"]),
    ("rows", ["--init-from", "m", "--output-bias", "unigram"], ["--output-bias unigram", "--init-from"]),
])
def test_data_that_cannot_serve_the_objective_is_one_line(root, tmp_path, capsys, data, argv, words):
    assert main(cli(root / data, tmp_path / "run", "--steps", "2", *argv)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(w in err for w in words), err


def test_objectives_and_their_losses(root, tmp_path):
    assert main(cli(root / "pairs", tmp_path / "paper", "--steps", "2")) == 0
    assert {"mlm_loss", "nsp_loss"} <= set(rows(tmp_path / "paper")[0])
    for data, objective in [("pairs", "mlm"), ("rows", None)]:
        run = tmp_path / f"{data}-{objective}"
        assert main(cli(root / data, run, "--steps", "2", *(["--objective", objective] if objective else []))) == 0
        r = rows(run)[0]
        assert "nsp_loss" not in r and r["loss"] == r["mlm_loss"]
        assert json.loads((run / "args.json").read_text())["extra"]["objective"] == "mlm"


def test_ltr_predicts_next_tokens_and_saves_a_causal_model(root, tmp_path):
    tokenizer = BertTokenizer.from_pretrained(root / "rows")
    task = PretrainJob(root / "rows", tokenizer, 8, seed=0, objective="ltr")
    b = task.batch(0, 0, 1)
    real = b["attention_mask"].bool()
    assert (b["labels"][:, :-1][real[:, 1:]] == b["input_ids"][:, 1:][real[:, 1:]]).all()
    assert (b["input_ids"] != tokenizer.mask_token_id).all()
    run = tmp_path / "ltr"
    assert main(cli(root / "rows", run, "--steps", "3", "--objective", "ltr", "--eval-every", "3",
                    "--eval-rows", "8")) == 0
    assert json.loads((run / "final" / "config.json").read_text())["is_decoder"] is True
    ref = transformers.BertForPreTraining.from_pretrained(run / "final")
    assert ref.config.is_decoder


def test_mask_prob_masks_that_share(root):
    tokenizer = BertTokenizer.from_pretrained(root / "rows")
    for p in (0.15, 0.4):
        task = PretrainJob(root / "rows", tokenizer, 64, seed=0, mask_prob=p)
        b = task.batch(0, 0, 1)
        share = float((b["labels"] != -100).sum() / b["attention_mask"].sum())
        assert share == pytest.approx(p, abs=0.02)


def test_masks_are_drawn_for_the_global_batch_and_held_out_masks_ignore_the_batch_size(root):
    """Each process keeps its rows of the global batch masked at once: two processes see one's masks; the
    held-out rows' masks are the same whatever the training batch size, so that runs compare."""
    tokenizer = BertTokenizer.from_pretrained(root / "rows")
    job = PretrainJob(root / "rows", tokenizer, 8, seed=0, mask_prob=0.3)
    whole = job.batch(5, 0, 1)
    halves = [job.batch(5, rank, 2) for rank in (0, 1)]
    for k in ("input_ids", "labels"):
        width = max(h[k].shape[1] for h in halves)
        joined = torch.cat([torch.nn.functional.pad(h[k], (0, width - h[k].shape[1]), value=-100 if k == "labels"
                                                    else tokenizer.pad_token_id) for h in halves])
        assert torch.equal(joined, whole[k][:, :width])
    assert not torch.equal(job.batch(6, 0, 1)["labels"], whole["labels"])  # another step, other masks
    held_out = [[b["labels"] for b in PretrainJob(root / "rows", tokenizer, size, seed=0).held_out()]
                for size in (8, 32)]
    assert all(torch.equal(a, b) for a, b in zip(*held_out)) and len(held_out[0]) == len(held_out[1])


def test_budget_recipe_and_explicit_flags_win(root, tmp_path):
    run = tmp_path / "budget"
    assert main(cli(root / "rows", run, "--steps", "4", "--recipe", "budget", "--lr", "5e-4")) == 0
    args = json.loads((run / "args.json").read_text())
    assert (args["lr"], args["schedule"], args["extra"]["recipe"], args["extra"]["mask_prob"]) == \
        (5e-4, "one-cycle", "budget", 0.3)
    assert args["extra"]["dropout"] == 0.0 and args["extra"]["objective"] == "mlm"
    assert args["bf16"] is native_bf16("cpu")  # bf16 autocast where the CPU has bf16 matrix units
    assert main(cli(root / "rows", tmp_path / "fp32", "--steps", "1", "--recipe", "budget", "--no-bf16")) == 0
    assert json.loads((tmp_path / "fp32" / "args.json").read_text())["bf16"] is False
    # Trained without dropout, saved with the config's, for fine-tuning.
    assert json.loads((run / "final" / "config.json").read_text())["hidden_dropout_prob"] == 0.1
    assert rows(run)[-1]["lr"] == 0.0


def test_unigram_output_bias_starts_at_the_training_tokens_log_frequencies(root, tmp_path):
    """The budget recipe's --output-bias unigram: softmax(bias) is the add-one smoothed frequency of each id
    in the training rows, the special tokens (never predicted) at the floor; --output-bias zero wins over it."""
    tokenizer = BertTokenizer.from_pretrained(root / "rows")
    train = PretrainJob(root / "rows", tokenizer, 8, seed=0).train
    counts = np.zeros(tokenizer.vocab_size, dtype=np.int64)
    for i in range(len(train)):
        np.add.at(counts, train[i]["input_ids"][train[i]["attention_mask"].bool()].numpy(), 1)
    special = [tokenizer.cls_token_id, tokenizer.sep_token_id, tokenizer.mask_token_id, tokenizer.pad_token_id]
    counts[special] = 0
    assert (train.token_counts(tokenizer.vocab_size) == counts).all() and counts.sum() > 1000
    runs = {}
    for bias in (None, "zero"):
        run = runs[bias] = tmp_path / f"budget-{bias}"
        assert main(cli(root / "rows", run, "--steps", "1", "--recipe", "budget", "--lr", "1e-9",
                        *(["--output-bias", bias] if bias else []))) == 0
    assert json.loads((runs[None] / "args.json").read_text())["extra"]["output_bias"] == "unigram"
    assert json.loads((runs["zero"] / "args.json").read_text())["extra"]["output_bias"] == "zero"
    ref = transformers.BertForPreTraining.from_pretrained(runs[None] / "final")  # an ordinary checkpoint
    probs = torch.softmax(ref.cls.predictions.bias.detach().double(), 0).numpy()
    assert probs == pytest.approx((counts + 1) / (counts + 1).sum(), rel=1e-4)
    zero = transformers.BertForPreTraining.from_pretrained(runs["zero"] / "final")
    assert zero.cls.predictions.bias.abs().max() < 1e-6


def test_time_budget_stops_at_the_budget_with_lr_zero(root, tmp_path):
    run = tmp_path / "timed"
    began = time.perf_counter()
    assert main(cli(root / "rows", run, "--time-budget", "4s", "--save-every", "1000")) == 0
    wall = time.perf_counter() - began
    r = rows(run)
    steps = [x["train_seconds"] for x in r]
    step_time = max(np.diff([0.0, *steps]))
    logged = 0.0005  # train_seconds are logged to the millisecond: 3.9996 s before the last step reads 4.0
    assert 4.0 <= steps[-1] < 4.0 + step_time + logged and steps[-2] < 4.0 + logged
    assert r[-1]["lr"] == 0.0 and r[0]["lr"] > 0
    assert wall < 4.0 + 10  # start-up, evaluation-free, one checkpoint
    assert (run / "final" / "model.safetensors").is_file()


def test_killed_timed_run_resumes_to_the_same_total_budget(root, tmp_path):
    run = tmp_path / "killed"
    argv = cli(root / "rows", run, "--time-budget", "8s", "--save-every", "5")
    proc = subprocess.Popen([sys.executable, "-m", "bertforge", *argv], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not list(run.glob("step-*/training_state.pt")) and time.time() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)
    running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert running, "the run ended before it could be killed"
    state = torch.load(sorted(run.glob("step-*/training_state.pt"))[-1], weights_only=True)
    spent = state["scheduler"]["seconds"]
    assert 0 < spent < 8
    subprocess.run([sys.executable, "-m", "bertforge", *argv, "--resume"], env=ENV, check=True, capture_output=True)
    r = rows(run)
    assert [x["step"] for x in r] == list(range(1, len(r) + 1))
    resumed = [x for x in r if x["step"] > state["step"]]
    assert resumed[0]["train_seconds"] > spent  # counts on from the checkpoint's training time
    assert 8.0 <= r[-1]["train_seconds"] < 8.0 + 2 and r[-1]["lr"] == 0.0


def test_the_budget_rate_follows_the_model_width():
    """2e-3 for BERT-Tiny's width; BERT-Mini collapses to token frequencies there and gets 5e-4."""
    assert resolve("budget", {}, 128, "cpu")["lr"] == 2e-3
    assert resolve("budget", {}, 256, "cpu")["lr"] == resolve("budget", {}, 768, "cpu")["lr"] == 5e-4
    assert resolve("budget", {"lr": 1e-3}, 256, "cpu")["lr"] == 1e-3  # an explicit flag wins
    assert resolve("paper", {}, 256, "cpu")["lr"] == 1e-4


@pytest.mark.parametrize("amx, avx512_bf16", [(False, False), (True, False), (False, True)])
def test_budget_bf16_only_where_the_cpu_computes_it(monkeypatch, amx, avx512_bf16):
    monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda: amx)
    monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda: avx512_bf16)
    assert resolve("budget", {}, 256, "cpu")["bf16"] is (amx or avx512_bf16)
    assert resolve("budget", {"bf16": False}, 256, "cpu")["bf16"] is False  # --no-bf16 wins
    assert resolve("budget", {"bf16": True}, 256, "cpu")["bf16"] is True
    assert resolve("paper", {}, 256, "cpu")["bf16"] is False
