"""The command line: --help and --version without loading torch (checked on the import graph, not timed)."""

import subprocess
import sys
from pathlib import Path

import pytest

from bertforge.cli import COMMANDS, main

HELP = [[]] + [["data", "create"] if name == "data" else [name] for name in COMMANDS]


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).parents[1])  # this checkout's package


@pytest.mark.parametrize("argv", HELP, ids=lambda a: " ".join(a) or "bertforge")
def test_help_does_not_import_torch(argv):
    done = run_python("import sys; from bertforge.cli import main; rc = main(%r); "
                      "assert 'torch' not in sys.modules, 'torch imported'; print('rc', rc)" % (argv + ["--help"]))
    assert done.returncode == 0, done.stderr
    assert "usage: bertforge" in done.stdout and done.stdout.strip().endswith("rc 0")


def test_version(capsys):
    import bertforge

    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"bertforge {bertforge.__version__}"


def test_package_exports_are_lazy():
    done = run_python("import sys, bertforge; assert 'torch' not in sys.modules; "
                      "m = bertforge.BertModel; assert 'torch' in sys.modules; print(m.__module__)")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "bertforge.model.architectures.bert"
    assert "BertModel" in dir(__import__("bertforge"))
    with pytest.raises(AttributeError):
        __import__("bertforge").NoSuchThing


def command_parsers():
    """(words, parser) of every command and sub-command, each built as `bertforge WORDS` builds it."""
    import argparse

    from bertforge.cli import build_parser

    def walk(parser, words):
        yield words, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from walk(sub, words + [name])

    for command in COMMANDS:
        for words, parser in walk(build_parser(command), []):
            if words[:1] == [command] and not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
                yield words, parser


def test_every_option_has_help_and_shows_its_default():
    from bertforge.cli import shown_default

    checked = 0
    for words, parser in command_parsers():
        text = parser.format_help()
        flat = " ".join(text.split())
        for action in parser._actions:
            if not action.option_strings or action.dest == "help":
                continue
            assert action.help, f"bertforge {' '.join(words)} {action.option_strings[0]}: no help text"
            assert action.help.count("default") <= 1, f"{action.option_strings[0]}: its default said twice"
            default = action.default
            empty = isinstance(default, (list, tuple, str)) and not default  # nothing to show
            if default is not None and not isinstance(default, bool) and not empty:
                assert f"(default: {shown_default(default)})" in flat or "default" in action.help, \
                    f"bertforge {' '.join(words)} {action.option_strings[0]}: default {default!r} not shown"
            checked += 1
        assert "(default: )" not in flat, f"bertforge {' '.join(words)}: an empty default shown"
    assert checked > 100


def test_old_spellings_work_but_are_not_shown(tmp_path):
    from bertforge.cli import build_parser

    parser = build_parser("data")
    new = parser.parse_args(["data", "create", "--input", "a.txt", "--vocab", "v", "--out", "o", "--max-length", "64"])
    old = parser.parse_args(["data", "create", "--input", "a.txt", "--vocab", "v", "--out", "o",
                             "--max-seq-length", "64"])
    assert new.max_seq_length == old.max_seq_length == 64
    tokenizer = build_parser("tokenizer")
    assert tokenizer.parse_args(["tokenizer", "train", "--files", "c", "--out", "o"]).files == ["c"]
    assert tokenizer.parse_args(["tokenizer", "train", "--input", "c", "--out", "o"]).files == ["c"]
    for words, sub in command_parsers():
        if words in (["data", "create"], ["tokenizer", "train"], ["demo"]):
            assert "--max-seq-length" not in sub.format_help() and "--files" not in sub.format_help()


def test_errors_name_the_spelling_typed(capsys):
    base = ["data", "create", "--input", "i", "--vocab", "v", "--out", "o"]
    assert main(base + ["--max-seq-length", "0"]) == 2
    assert "argument --max-seq-length: must be" in capsys.readouterr().err
    assert main(base + ["--max-length=0"]) == 2
    assert "argument --max-length: must be" in capsys.readouterr().err
    assert main(["tokenizer", "train", "--out", "o"]) == 2
    assert "required: --input " in capsys.readouterr().err


@pytest.mark.parametrize("command", ["finetune", "evaluate", "predict", "distill"])
def test_a_task_s_help_shows_its_own_options_only(command, capsys):
    def help_of(*words):
        capsys.readouterr()
        assert main([command, *words, "--help"]) == 0
        return capsys.readouterr().out

    every = help_of()
    assert "--choices-columns" in every and "--null-threshold" in every and "--text-column" in every
    choices = help_of("multiple-choice")
    assert "--choices-columns" in choices and "--train" in choices and "--model" in choices
    assert "--null-threshold" not in choices and "--text-column" not in choices and "--tags-column" not in choices
    assert "The options of multiple-choice only" in choices
    sst2 = help_of("sst2")
    assert "--choices-columns" not in sst2 and "--text-column" not in sst2 and "--batch-size" in sst2
