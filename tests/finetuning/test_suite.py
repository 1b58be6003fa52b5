"""`bertforge suite`: tasks x seeds (x a grid) through finetune, resumable, reported as mean ± sd."""

import json
import statistics

import pytest

from bertforge.finetuning import suite as suite_module
from bertforge.cli import main
from tests.conftest import require_shared


@pytest.fixture(scope="module")
def glue():
    return require_shared("data", "glue")


def argv(out, *extra, model="random:tiny", vocab=True):
    vocab_args = ["--vocab", str(require_shared("models", "all-MiniLM-L6-v2", "vocab.txt"))] if vocab else []
    return ["suite", "--model", model, *vocab_args, "--data", str(require_shared("data", "glue")), "--out", str(out),
            "--max-train-examples", "32", "--max-eval-examples", "24", "--epochs", "2", "--batch-size", "8",
            "--lr", "1e-3", *extra]


def test_runs_report_and_resume(glue, tmp_path, monkeypatch, capsys):
    out = tmp_path / "suite"
    assert main(argv(out, "--tasks", "sst2", "stsb", "--seeds", "1", "2")) == 0
    printed = capsys.readouterr().out
    assert "[4/4]" in printed and "ETA" in printed
    report = json.loads((out / "suite.json").read_text())
    assert len(report["runs"]) == 4
    for r in report["runs"]:
        assert len(r["history"]) == 2 and r["wall_time_s"] > 0  # metrics after every epoch
    sst2 = [r["metrics"]["accuracy"] for r in report["runs"] if r["task"] == "sst2"]
    s = report["summary"]["tasks"]["sst2"]
    assert s["mean"] == pytest.approx(statistics.fmean(sst2)) and s["sd"] == pytest.approx(statistics.stdev(sst2))
    assert (s["min"], s["max"]) == (min(sst2), max(sst2))
    stsb = report["summary"]["tasks"]["stsb"]
    assert stsb["metric"] == "pearson"
    assert report["summary"]["average"] == pytest.approx((s["mean"] + stsb["mean"]) / 2)
    md = (out / "suite.md").read_text()
    assert "| sst2 | accuracy |" in md and "**average**" in md
    # size and speed: the tiny config's parameters with a 2-way head; examples/s on the 24 dev examples
    from bertforge import BertConfig, BertForSequenceClassification

    config = BertConfig.from_name("tiny", vocab_size=30522, id2label={0: "0", 1: "1"})
    assert s["parameters"] == sum(p.numel() for p in BertForSequenceClassification(config).parameters())
    assert s["examples_per_s"] > 0 and stsb["parameters"] == s["parameters"] - 129  # one output, not two
    assert [r.get("parameters") is not None for r in report["runs"]] == [True, False, True, False]
    assert s["bytes_on_disk"] > 0 and s["batch_size"] == 64 and s["device"] == "cpu" and s["threads"] > 0
    assert "| parameters | examples/s | on disk |" in md
    assert (f"| {s['parameters'] / 1e6:.1f}M | {s['examples_per_s']:,.0f} | {s['bytes_on_disk'] / 2**20:.1f} MiB |"
            in md)
    assert f"(batch 64, cpu, {s['threads']} thread" in md
    assert not list((out / "runs").rglob("model.safetensors"))  # only metrics are kept
    # Each seed draws its own random encoder.
    assert (out / "init" / "seed-1" / "model.safetensors").read_bytes() != \
        (out / "init" / "seed-2" / "model.safetensors").read_bytes()

    # A finished run is not redone: one more seed runs one more fine-tuning only.
    calls = []
    real = suite_module.finetune
    monkeypatch.setattr(suite_module, "finetune", lambda *a, **k: calls.append(a) or real(*a, **k))
    assert main(argv(out, "--tasks", "sst2", "stsb", "--seeds", "1", "2", "3", "--no-progress")) == 0
    assert [(a[0], a[3].name) for a in calls] == [("sst2", "seed-3"), ("stsb", "seed-3")]
    assert "ETA" not in capsys.readouterr().out  # --no-progress: the report only
    assert json.loads((out / "suite.json").read_text())["summary"]["tasks"]["sst2"]["seeds"] == 3


def test_grid_reports_the_dev_best_point(glue, tmp_path):
    out = tmp_path / "grid"
    assert main(argv(out, "--tasks", "sst2", "--seeds", "1", "--grid", "lr=1e-3,1e-5 batch_size=8 epochs=1",
                     "--device", "cpu", "--keep-models")) == 0
    report = json.loads((out / "suite.json").read_text())
    for r in report["runs"]:  # each kept model's size on disk is its weights file's
        best = out / "runs" / "sst2" / suite_module.point_name(r["point"]) / "seed-1" / "best"
        assert r["bytes_on_disk"] == (best / "model.safetensors").stat().st_size
    assert {json.loads(p.read_text())["device"] for p in (out / "runs").rglob("args.json")} == {"cpu"}
    assert sorted(suite_module.point_name(p) for p in report["points"]) == ["lr0.001-bs8-ep1", "lr1e-05-bs8-ep1"]
    best = max(report["runs"], key=lambda r: r["metrics"]["accuracy"])
    assert report["summary"]["tasks"]["sst2"]["point"] == suite_module.point_name(best["point"])
    assert suite_module.parse_grid("paper") == suite_module.PAPER_GRID
    assert "(one seed: no spread)" in (out / "suite.md").read_text() and " ± 0.0" not in (out / "suite.md").read_text()


@pytest.mark.parametrize("extra, model, vocab, words", [
    (["--tasks", "sst3"], "random:tiny", True, ["--tasks", "sst3"]),
    ([], "random:tiny", False, ["--vocab"]),
    ([], "TMP", False, ["--model", "no tokenizer"]),
])
def test_bad_input_is_one_line(glue, tmp_path, capsys, extra, model, vocab, words):
    if model == "TMP":
        model = str(tmp_path)
        (tmp_path / "config.json").write_text("{}")
    assert main(argv(tmp_path / "out", *extra, model=model, vocab=vocab)) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and all(w in err for w in words), err


def test_an_undefined_correlation_counts_as_zero():
    # constant predictions make Pearson NaN (scipy's answer too); the summary and its table must still come out
    point = {"lr": 3e-4, "batch_size": 32, "epochs": 3}
    runs = [{"task": "stsb", "point": point, "seed": seed, "metrics": {"pearson": value}}
            for seed, value in ((1, 0.2), (2, float("nan")), (3, 0.4))]
    summary = suite_module.summarise(runs, ["stsb"])
    stsb = summary["tasks"]["stsb"]
    assert stsb["undefined"] == 1 and stsb["values"] == [0.2, 0.0, 0.4]
    assert stsb["mean"] == pytest.approx(0.2) and stsb["sd"] == pytest.approx(statistics.stdev([0.2, 0.0, 0.4]))
    assert "3 (1 undefined, as 0) | 20.0 ± 20.0" in suite_module.markdown("m", summary, 60.0)


@pytest.mark.parametrize("seeds, words", [
    (["-1"], ["argument --seeds", "at least 0", "-1"]),
    (["1", "x"], ["argument --seeds", "whole number", "'x'"]),
    (["1", "2", "1"], ["--seeds 1 2 1", "seed 1 is given twice"]),
])
def test_seeds_are_whole_numbers_of_at_least_0_each_once(tmp_path, capsys, seeds, words):
    """Checked before any model is read (this one does not exist): one line, nothing written."""
    out = tmp_path / "out"
    assert main(["suite", "--model", str(tmp_path / "none"), "--data", str(tmp_path), "--out", str(out),
                 "--seeds", *seeds]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "Traceback" not in err and all(w in err for w in words), err
    assert not out.exists()


def test_a_torn_run_result_is_done_again_with_a_warning(tmp_path, monkeypatch, capsys, caplog):
    model = tmp_path / "model"
    model.mkdir()
    (model / "vocab.txt").write_text("[PAD]\n")
    calls = []

    def fake_finetune(task, model_dir, data, folder, seed, **kw):
        calls.append(seed)
        folder.mkdir(parents=True)
        (folder / "eval_results.json").write_text(json.dumps({"task": task, "accuracy": seed / 10, "history": [
            {"accuracy": seed / 10}], "wall_time_s": 1.0}))
    monkeypatch.setattr(suite_module, "finetune", fake_finetune)
    out = tmp_path / "suite"
    argv = ["suite", "--model", str(model), "--data", str(tmp_path), "--out", str(out), "--tasks", "sst2",
            "--seeds", "1", "2", "--no-progress"]
    assert main(argv) == 0 and calls == [1, 2]
    torn = out / "runs" / "sst2" / "lr2e-05-bs32-ep3" / "seed-1" / "eval_results.json"
    torn.write_text('{"task": "sst2", "accur')
    (out / "suite.json").write_text('{"model": ')
    caplog.clear()
    assert main(argv) == 0
    assert calls == [1, 2, 1]  # the torn run only is done again
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 2 and all("\n" not in w for w in warnings), warnings
    assert warnings[0].startswith(str(out / "suite.json")) and "not valid JSON" in warnings[0], warnings
    assert "written anew" in warnings[0]
    assert warnings[1].startswith(str(torn)) and "not valid JSON" in warnings[1] and "done again" in warnings[1]
    report = json.loads((out / "suite.json").read_text())
    assert [r["metrics"]["accuracy"] for r in report["runs"]] == [0.1, 0.2]


def test_training_options_reach_every_run(glue, tmp_path):
    """The suite takes finetune's training options (one definition) and gives them to each run."""
    out = tmp_path / "suite"
    assert main(argv(out, "--tasks", "sst2", "--seeds", "1", "--warmup", "0.3", "--weight-decay", "0",
                     "--max-grad-norm", "0.5", "--no-progress")) == 0
    args = json.loads((out / "runs" / "sst2" / "lr0.001-bs8-ep2" / "seed-1" / "args.json").read_text())
    assert (args["warmup"], args["weight_decay"], args["max_grad_norm"], args["lr"], args["batch_size"]) == \
        (0.3, 0.0, 0.5, 1e-3, 8)


def test_random_weights_of_any_architecture(glue, tmp_path):
    """`random:CONFIG` with a ModernBERT config.json: a random ModernBERT encoder with the vocabulary, fine-tuned."""
    (tmp_path / "config.json").write_text(json.dumps({
        "model_type": "modernbert", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 2,
        "intermediate_size": 96, "max_position_embeddings": 512}))
    out = tmp_path / "suite"
    assert main(argv(out, "--tasks", "sst2", "--seeds", "1", model=f"random:{tmp_path / 'config.json'}")) == 0
    configs = [json.loads(p.read_text()) for p in out.rglob("config.json")]
    assert configs and all(c["model_type"] == "modernbert" for c in configs)
    assert json.loads((out / "suite.json").read_text())["runs"][0]["metrics"]["accuracy"] > 0
