"""The documentation site (mkdocs.yml) builds with --strict: a broken link or anchor, or a page left out of the
navigation, fails the build and this test."""

import shutil
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytest.importorskip("mkdocs", reason="the site needs mkdocs, in the test extra: pip install -e '.[test]'")


def build(root, site) -> subprocess.CompletedProcess:
    command = ["build", "--strict", "--config-file", str(root / "mkdocs.yml"), "--site-dir", str(site)]
    return subprocess.run([sys.executable, "-m", "mkdocs", *command], capture_output=True, text=True, timeout=300)


def test_the_site_builds_strict(tmp_path):
    done = build(REPO, tmp_path / "site")
    assert done.returncode == 0, done.stderr[-5000:]
    assert (tmp_path / "site" / "index.html").is_file() and (tmp_path / "site" / "BENCHMARKS" / "index.html").is_file()


@pytest.mark.parametrize("page, text, named", [
    ("runs.md", "See [the guide](no-such-guide.md).", "no-such-guide.md"),
    ("runs.md", "See [serving](serving.md#no-such-section).", "no-such-section"),
    ("left-out.md", "# A page the navigation does not name", "left-out.md"),
    ("../README.md", "See [the guide](docs/no-such-guide.md).", "no-such-guide.md")])
def test_a_broken_link_or_a_page_left_out_fails_the_build(tmp_path, page, text, named):
    root = tmp_path / "repo"
    shutil.copytree(REPO / "docs", root / "docs", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("mkdocs.yml", "README.md", "BENCHMARKS.md"):
        shutil.copy(REPO / name, root / name)
    with open(root / "docs" / page, "a", encoding="utf-8") as f:
        f.write(f"\n{text}\n")
    done = build(root, tmp_path / "site")
    assert done.returncode != 0 and named in done.stderr, done.stderr[-3000:]
