"""`bertforge demo` end to end at a small size: every step runs and the model it reports is saved."""

import itertools
import json

from bertforge.cli import main
from bertforge.pretraining import demo


def test_the_demo_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--vocab-size", "500", "--time-budget", "2s", "--max-length", "64",
                 "--batch-size", "8"]) == 0
    printed, err = capsys.readouterr()
    assert "masked-LM accuracy" in printed and "sentences hold the masked word in their top 5" in printed
    steps = json.loads((out / "run" / "metrics.jsonl").read_text().splitlines()[-1])["step"]
    assert f"after {steps:,} steps in 2 s (the README's figure: about 2,300 steps; a slower or busier machine makes " \
           "fewer and ends lower)" in printed  # a run's figure read beside the steps behind the README's
    assert (out / "run" / "final" / "model.safetensors").is_file()
    assert "--device cpu" in printed or "--device cuda" in printed  # the hint names the device as typed
    assert "s of training [" in err and "s/s" not in err  # the time budget's bar counts seconds, not a rate
    starts = [line for line in err.replace("\r", "\n").splitlines() if " 0/2 s of training" in line]
    assert starts and len(starts) == len(set(starts))  # a step within the same second redraws nothing


def test_no_progress_leaves_the_bars_out(tmp_path, capsys, monkeypatch):
    documents = demo.module_documents
    monkeypatch.setattr(demo, "module_documents", lambda: itertools.islice(documents(), 30))  # a small corpus
    assert main(["demo", "--out", str(tmp_path / "demo"), "--vocab-size", "300", "--time-budget", "1s",
                 "--eval-docs", "2", "--batch-size", "8", "--no-progress"]) == 0
    printed, err = capsys.readouterr()
    assert "masked-LM accuracy" in printed and "of training" not in err
