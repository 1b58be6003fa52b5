"""`bertforge plot`: curves from a run's metrics log, with the trivial baselines when the run recorded them."""

import json

import pytest

from bertforge.core.errors import BertforgeError
from bertforge.pretraining.plot import BASELINES_FILE, plot_run


def write_run(folder, baselines=None):
    folder.mkdir()
    rows = [{"step": s, "loss": 8 - s / 100, "mlm_loss": 7.5 - s / 100, "nsp_loss": 0.7 - s / 1000}
            for s in range(10, 210, 10)]
    for row in rows[4::5]:
        row.update(eval_mlm_loss=7.0, eval_mlm_accuracy=0.05 + row["step"] / 2000, eval_nsp_accuracy=0.6)
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if baselines is not None:
        (folder / BASELINES_FILE).write_text(json.dumps(baselines))
    return folder


def test_writes_a_png_and_draws_the_baselines(tmp_path):
    plain = plot_run(write_run(tmp_path / "plain"))
    with_baselines = plot_run(write_run(tmp_path / "with", {"mlm_most_frequent_token_accuracy": 0.059,
                                                            "nsp_majority_accuracy": 0.53}))
    for png in (plain, with_baselines):
        assert png.name == "curves.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plain.read_bytes() != with_baselines.read_bytes()  # the dashed lines and their legend entries


def test_bad_log_line_is_named(tmp_path):
    run = write_run(tmp_path / "run")
    with open(run / "metrics.jsonl", "a") as f:
        f.write("{not json\n")
    with pytest.raises(BertforgeError, match=r"metrics.jsonl:21: not valid JSON"):
        plot_run(run)
    with pytest.raises(BertforgeError, match="no metrics log"):
        plot_run(tmp_path)
