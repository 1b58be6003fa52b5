"""docs/cli.md, the command-line reference, generated from the parsers that `bertforge` itself builds.

    python -m docs.cli_reference          # rewrite docs/cli.md

tests/docs/test_cli_reference.py fails when the checked-in page differs from what the parsers give, and
tests/docs/test_commands.py checks every flag that a page's command shows against the same parsers (`parser_for`).
"""

import argparse
import os
from pathlib import Path

from bertforge.cli import COMMANDS, SUBCOMMANDS, build_parser

PAGE = Path(__file__).with_name("cli.md")
WIDTH = 110  # help columns: fixed, so that the page does not depend on the terminal that wrote it

INTRO = """# Command-line reference

Every command and its options as `bertforge COMMAND --help` prints them, each default included. This page is
generated from the parsers (`python -m docs.cli_reference`), and a test fails when it differs from them.
`bertforge COMMAND TASK --help` (for `finetune`, `distill`, `evaluate` and `predict`) narrows a command's options to
those of one task.
"""


def subparsers(parser) -> dict:
    """The parsers of `parser`'s subcommands by name (`tokenizer train`, `export onnx`), if it has any."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action.choices
    return {}


def parser_for(words) -> argparse.ArgumentParser | None:
    """The parser of the command line `words` (what follows `bertforge`): the command's, or its subcommand's where
    the next word names one; None for a command bertforge does not have."""
    command = next((w for w in words if not w.startswith("-")), None)
    if command not in COMMANDS:
        return None
    after = words[words.index(command) + 1:]
    parser = subparsers(build_parser(command, after[0] if after else None))[command]
    rest = iter(w for w in words[words.index(command) + 1:] if not w.startswith("-"))
    while (choices := subparsers(parser)) and (word := next(rest, None)) in choices:
        parser = choices[word]
    return parser


def commands():
    """(words, parser) for every command and subcommand, in the order of `bertforge --help`."""
    def walk(words, parser):
        yield words, parser
        for name, sub in subparsers(parser).items():
            yield from walk([*words, name], sub)

    named = set()
    for name in COMMANDS:
        yield from walk([name], parser_for([name]))
        for (command, word), target in SUBCOMMANDS.items():  # a command under another's name, once
            if command == name and target not in named:
                named.add(target)
                yield [command, word], parser_for([command, word])


def page() -> str:
    previous = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(WIDTH)  # argparse's formatter reads the width from here
    try:
        sections = [("bertforge", build_parser(None).format_help())]
        sections += [(parser.prog, parser.format_help()) for _, parser in commands()]
    finally:
        if previous is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = previous
    return INTRO + "".join(f"\n## {title}\n\n```text\n{text.rstrip()}\n```\n" for title, text in sections)


if __name__ == "__main__":
    PAGE.write_text(page(), encoding="utf-8")
    print(f"wrote {PAGE}")
