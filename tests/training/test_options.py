"""Option types and --args-file: a bad value or a bad args file is one line naming the flag, the file or the key."""

import json

import pytest

from bertforge.cli import main


def one_line(capsys, argv, *words) -> str:
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    for word in words:
        assert word in err, err
    return err


def args_file(tmp_path, command="finetune", **arguments):
    path = tmp_path / "run" / "args.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"extra": {"arguments": {"command": command, **arguments}}}))
    return path


@pytest.mark.parametrize("arguments, words", [
    ({"nosuch": 1}, ["'nosuch' is not an argument of bertforge finetune"]),
    ({"batch_size": 0}, ["batch_size 0: must be a whole number of at least 1"]),
    ({"lr": "fast"}, ["lr \"fast\": expected a number"]),
    ({"bf16": "yes"}, ["bf16 \"yes\": expected true or false"]),
    ({"schedule": "cosine"}, ["schedule \"cosine\": expected one of linear, one-cycle"]),
    ({"model": 3}, ["model 3: expected a text"]),
    ({"task": None}, ["task null: must be given"]),
])
def test_a_bad_key_or_value_names_the_file_and_the_key(tmp_path, capsys, arguments, words):
    path = args_file(tmp_path, **{"task": "sst2", "model": "m", **arguments})
    one_line(capsys, ["finetune", "--args-file", path, "--out", tmp_path / "o"], str(path), *words)


def test_a_file_that_is_not_a_command_line_record(tmp_path, capsys):
    path = args_file(tmp_path, command="pretrain", data="d")
    one_line(capsys, ["finetune", "--args-file", path], str(path), "bertforge pretrain, not of bertforge finetune")
    path.write_text(json.dumps({"steps": 3, "extra": {}}))
    one_line(capsys, ["pretrain", "--args-file", path], str(path), "no extra.arguments")
    path.write_text("{")
    one_line(capsys, ["pretrain", "--args-file", path], str(path), "not valid JSON")
    one_line(capsys, ["pretrain", "--args-file", tmp_path / "none.json"], "none.json: file not found")


def test_the_file_gives_the_defaults_and_the_command_line_wins(tmp_path):
    from bertforge.cli import build_parser

    path = args_file(tmp_path, task="sst2", model="m", out="o", lr=3e-5, bf16=True, resume=True,
                     time_budget=0.0)
    args = build_parser("finetune").parse_args(["finetune", "--args-file", str(path), "--lr", "1e-4"])
    assert (args.task, args.model, args.out, args.lr, args.bf16) == ("sst2", "m", "o", 1e-4, True)
    assert args.resume is False  # how a run folder is treated is never taken from the file


def test_report_to_tensorboard_without_the_package_names_the_extra(capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "tensorboard" else real(name, *a))
    one_line(capsys, ["pretrain", "--data", "d", "--out", "o", "--report-to", "tensorboard"],
             "argument --report-to", "pip install -e '.[tensorboard]'")


@pytest.mark.parametrize("command", [["pretrain", "--data", "d"], ["finetune", "sst2", "--model", "m"]])
def test_a_time_budget_of_0_is_none_as_the_help_says(command, capsys):
    from bertforge.cli import build_parser

    for text in ("0", "0s", "0m"):
        args = build_parser(command[0]).parse_args([*command, "--out", "o", "--time-budget", text])
        assert args.time_budget == 0
    assert main([command[0], "--help"]) == 0
    assert "(0: --steps decide)" in " ".join(capsys.readouterr().out.split())
    one_line(capsys, [*command, "--out", "o", "--time-budget=-1s"], "argument --time-budget", "'-1s'", "(0: none)")


def test_the_demo_budget_must_be_above_0(capsys):
    one_line(capsys, ["demo", "--out", "o", "--time-budget", "0"], "argument --time-budget", "above 0")
