"""Pre-training objectives as objects: the registry is the only place that knows their names; a new objective
is one class and one entry, and `pretrain` runs it end to end."""

import ast
import json
from pathlib import Path

import bertforge
from bertforge.cli import main
from bertforge.pretraining.objectives import OBJECTIVES, MaskedLM
from tests.pretraining.test_pretrain import cli, data_dir  # noqa: F401 (the fixture)

PACKAGE = Path(bertforge.__file__).parent


class MaskedLMPerRow(MaskedLM):
    """A new objective for the test: masked LM whose loss is averaged over rows, not masked tokens."""

    name = "mlm-rows"
    help = "masked LM, averaged per row"

    def loss_units(self):
        return {"mlm_loss": lambda b: len(b["labels"])}


def test_a_new_objective_is_one_class_and_one_entry(data_dir, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setitem(OBJECTIVES, MaskedLMPerRow.name, MaskedLMPerRow())
    run = tmp_path / "run"
    assert main(["pretrain", *cli(data_dir, run, "--objective", "mlm-rows", "--eval-every", "2", steps=2)]) == 0
    assert json.loads((run / "args.json").read_text())["extra"]["objective"] == "mlm-rows"
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert "nsp_loss" not in rows[0] and rows[0]["loss"] == rows[0]["mlm_loss"]
    assert any("eval_mlm_accuracy" in r for r in rows)
    assert "mlm_most_frequent_token_accuracy" in json.loads((run / "baselines.json").read_text())


def test_info_names_the_heads_the_objective_left_untrained(data_dir, tmp_path, capsys):  # noqa: F811
    for objective, said in (("mlm", "masked-LM head, next-sentence head (untrained)"),
                            ("mlm+nsp", "masked-LM head, next-sentence head\n")):
        run = tmp_path / objective
        assert main(["pretrain", *cli(data_dir, run, "--objective", objective, steps=1)]) == 0
        capsys.readouterr()
        assert main(["info", str(run / "final")]) == 0
        assert f"heads:         pooler, {said}" in capsys.readouterr().out


def test_no_code_outside_the_registry_tests_an_objective_name():
    """No comparison or membership test against an objective's name anywhere in the package but objectives.py."""
    names = set(OBJECTIVES)
    found = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "objectives.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                for operand in [node.left, *node.comparators]:
                    values = operand.elts if isinstance(operand, (ast.Tuple, ast.List, ast.Set)) else [operand]
                    found += [f"{path.name}:{node.lineno}" for v in values
                              if isinstance(v, ast.Constant) and v.value in names]
    assert not found, found
