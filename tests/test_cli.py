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
    assert done.stdout.strip() == "bertforge.model"
    assert "BertModel" in dir(__import__("bertforge"))
    with pytest.raises(AttributeError):
        __import__("bertforge").NoSuchThing
