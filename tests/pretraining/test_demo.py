"""`bertforge demo` end to end at a small size: every step runs and the model it reports is saved."""

from bertforge.cli import main


def test_the_demo_runs_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--vocab-size", "500", "--time-budget", "2s", "--max-length", "64",
                 "--batch-size", "8"]) == 0
    printed, err = capsys.readouterr()
    assert "masked-LM accuracy" in printed and "sentences hold the masked word in their top 5" in printed
    assert (out / "run" / "final" / "model.safetensors").is_file()
    assert "--device cpu" in printed or "--device cuda" in printed  # the hint names the device as typed
    assert "s of training [" in err and "s/s" not in err  # the time budget's bar counts seconds, not a rate
    starts = [line for line in err.replace("\r", "\n").splitlines() if " 0/2 s of training" in line]
    assert starts and len(starts) == len(set(starts))  # a step within the same second redraws nothing
