"""docs/cli.md is what the parsers print (docs/cli_reference.py), and it covers every command."""

import sys

import pytest

from bertforge.cli import COMMANDS
from docs import cli_reference


@pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="argparse lays out help differently in each Python "
                    "version; the page is written by Python 3.11, the README's")
def test_the_checked_in_page_is_what_the_parsers_print():
    assert cli_reference.PAGE.read_text(encoding="utf-8") == cli_reference.page(), \
        "docs/cli.md is out of date: python -m docs.cli_reference"


def test_every_command_and_subcommand_has_its_section():
    titles = [parser.prog for _, parser in cli_reference.commands()]
    assert [t for t in titles if t.count(" ") == 1] == [f"bertforge {name}" for name in COMMANDS]
    assert {"bertforge tokenizer train", "bertforge tokenizer encode", "bertforge data create",
            "bertforge export onnx"} <= set(titles)


@pytest.mark.parametrize("words, prog", [
    (["finetune", "sst2", "--model", "m"], "bertforge finetune"),
    (["tokenizer", "train", "--input", "x"], "bertforge tokenizer train"),
    (["data", "create", "--input", "x"], "bertforge data create"),
    (["export", "onnx", "in", "out", "--int8"], "bertforge export onnx"),
    (["serve", "m", "--port", "8000"], "bertforge serve"),
])
def test_parser_for_finds_the_command_s_parser(words, prog):
    assert cli_reference.parser_for(words).prog == prog


def test_parser_for_a_command_bertforge_lacks():
    assert cli_reference.parser_for(["train", "--fast"]) is None
