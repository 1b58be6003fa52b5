"""The command blocks of README.md and docs/ cannot rot: every flag a shown `bertforge` command passes is one its
parser has, and every ```bash or ```python block either runs here, on the demo's corpus and a few rows of the
shared sets, or is marked `<!-- not run: REASON -->` on the line before it. A block marked
`<!-- not run: README.md runs these commands -->` must hold only commands that README.md's run blocks hold. The
pages name the model as a user types it (`sentence-transformers/all-MiniLM-L6-v2`): the blocks download it from a
Hub (tests/hub_server.py) that serves the shared checkpoint under that name, as huggingface.co serves it."""

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from docs.cli_reference import parser_for
from tests.conftest import REPO, require_shared

PAGES = [REPO / "README.md", *sorted(p for p in (REPO / "docs").glob("*.md") if p.name != "cli.md")]
COMMAND_LANGUAGES = ("bash", "python")
NOT_RUN = re.compile(r"<!-- not run: (.+) -->")
AS_README = "README.md runs these commands"
# The README's first two blocks, exactly: the demo, and the test suite that CI runs (.ci/run); not run here.
INSTALL = ["pip install torch==2.13.0 && pip install -e . && bertforge demo\n",
           "pip install torch==2.13.0 && pip install -e '.[test]' && python -m pytest\n"]
SHARED_ROWS = 17  # a header and 16 rows of each shared data file a run block reads
MODEL = "sentence-transformers/all-MiniLM-L6-v2"  # the shared checkpoint's name on the Hub, which the pages use
# what points huggingface_hub elsewhere than the Hub above, or keeps it from it (a token it would send, offline)
HUB_SETTINGS = ("HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, from 1
    language: str
    code: str
    not_run: str | None  # the reason, where the block is marked

    def __str__(self):
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    found, lines, i = [], page.read_text(encoding="utf-8").splitlines(), 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start, language = i, lines[i][3:].strip()
            i += 1
            while not lines[i].startswith("```"):
                i += 1
            marked = NOT_RUN.fullmatch(lines[start - 1].strip()) if start else None
            found.append(Block(page, start + 1, language, "\n".join(lines[start + 1:i]) + "\n",
                               marked[1] if marked else None))
        i += 1
    return found


ALL = [b for page in PAGES for b in blocks(page)]
COMMANDS = [b for b in ALL if b.language in COMMAND_LANGUAGES]


def command_lines(code: str) -> list[str]:
    """A shell block's commands, each whole (continuations and quoted line breaks joined), comments and
    here-documents left out."""
    lines, end, pending = [], None, ""
    for line in re.sub(r"\\\n\s*", " ", code).splitlines():
        if end is not None:
            end = None if line == end else end
        elif pending or (line.strip() and not line.lstrip().startswith("#")):
            pending = f"{pending}\n{line}" if pending else line.strip()
            try:
                shlex.split(pending, comments=True)
            except ValueError:  # a quote still open: the command goes on
                continue
            lines.append(pending)
            heredoc = re.search(r"<<-?'?(\w+)'?", pending)
            end, pending = (heredoc[1] if heredoc else None), ""
    assert not pending, f"a quote left open: {pending}"
    return lines


def bertforge_words(line: str) -> list[str] | None:
    """What follows `bertforge` (or `-m bertforge`) on a command line, optional `[--flag value]` parts unwrapped;
    None where the line runs something else."""
    words = [w.strip("[]") for w in shlex.split(line, comments=True)]
    if "bertforge" not in words:
        return None
    return words[words.index("bertforge") + 1:]


def test_the_readme_starts_with_the_two_commands():
    first = blocks(REPO / "README.md")[:2]
    assert [b.code for b in first] == INSTALL and all(b.language == "bash" for b in first)
    assert (REPO / ".ci" / "run").read_text().rstrip().endswith(INSTALL[1].rstrip())


def test_pages_hold_command_blocks_of_known_languages_only():
    untyped = [str(b) for b in ALL if not b.language]
    assert not untyped, f"say what each block is (```bash, ```python, ```text): {untyped}"
    stray = [str(b) for b in ALL if b.not_run and b.language not in COMMAND_LANGUAGES]
    assert not stray, f"<!-- not run --> marks a command block only: {stray}"


@pytest.mark.parametrize("block", [b for b in COMMANDS if b.language == "bash"], ids=str)
def test_every_flag_shown_is_one_the_command_has(block):
    for line in command_lines(block.code):
        words = bertforge_words(line)
        if words is None:
            continue
        parser = parser_for(words)
        assert parser is not None, f"{block}: no such command: bertforge {' '.join(words[:2])}"
        unknown = [w for w in words if w.startswith("--") and w.split("=", 1)[0] not in parser._option_string_actions]
        assert not unknown, f"{block}: {parser.prog} has no {', '.join(unknown)}"


def lines(block: Block) -> list[str]:
    if block.language == "bash":
        return command_lines(block.code)
    return [line for line in block.code.splitlines() if line.strip()]


def test_blocks_marked_as_the_readme_s_hold_its_commands():
    readme = {(b.language, line) for b in runs(REPO / "README.md") for line in lines(b)}
    for block in (b for b in COMMANDS if b.not_run == AS_README):
        missing = [line for line in lines(block) if (block.language, line) not in readme]
        assert not missing, f"{block}: README.md runs no {missing}"


def test_the_checks_see_the_pages():
    assert {p.name for p in PAGES} >= {"README.md", "ARCHITECTURE.md", "serving.md", "own-data.md"}
    assert sum(bertforge_words(line) is not None for b in COMMANDS for line in command_lines(b.code)) > 100


@pytest.fixture(scope="module")
def shared_rows(tmp_path_factory) -> Path:
    """A folder laid out as ../shared with the first rows of each data file run here."""
    glue = require_shared("data", "glue", "SST-2")
    root = tmp_path_factory.mktemp("shared")
    (root / "data" / "glue" / "SST-2").mkdir(parents=True)
    for file in glue.glob("*.tsv"):
        head = file.read_text(encoding="utf-8").splitlines(keepends=True)[:SHARED_ROWS]
        (root / "data" / "glue" / "SST-2" / file.name).write_text("".join(head), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def hub():
    """The Hub the pages' blocks download MODEL from: the shared checkpoint under its real name."""
    from tests.hub_server import HubServer

    with HubServer() as server:
        server.add(MODEL, require_shared("models", "all-MiniLM-L6-v2"))
        yield server


def run_blocks(page: Path, shared: Path, hub, work: Path):
    """The page's unmarked blocks in order, in `work`, beside a `shared` folder, with this tree's `bertforge`, and
    `hub` as the Hugging Face Hub (an empty cache beside `work`, no token, online)."""
    work.mkdir()
    (work.parent / "shared").symlink_to(shared)
    bin_dir = work.parent / "bin"
    bin_dir.mkdir()
    (bin_dir / "bertforge").write_text(f'#!/bin/sh\nexec "{sys.executable}" -m bertforge "$@"\n')
    (bin_dir / "bertforge").chmod(0o755)
    home = work.parent / "hf-home"
    env = {**{k: v for k, v in os.environ.items() if k not in HUB_SETTINGS},
           "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": str(REPO),
           "HF_ENDPOINT": hub.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}
    for block in runs(page):
        command = ["bash", "-euo", "pipefail", "-c", block.code] if block.language == "bash" else \
            [sys.executable, "-c", block.code]
        done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{block} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"


def runs(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.language in COMMAND_LANGUAGES and not b.not_run and b.code not in INSTALL]


RUN_PAGES = [p for p in PAGES if runs(p)]


@pytest.mark.slow
@pytest.mark.parametrize("page", RUN_PAGES, ids=lambda p: p.name)
def test_the_page_s_unmarked_blocks_run(page, shared_rows, hub, tmp_path):
    run_blocks(page, shared_rows, hub, tmp_path / "work")
