"""core/writes.py: a file written whole or not at all, with the umask's mode; one writer per folder."""

import os
import stat

import pytest

from bertforge.core.errors import BertforgeError
from bertforge.core.writes import atomic_path, exclusive, write_text_atomic


def test_atomic_write_keeps_old_file_on_failure_and_uses_umask_mode(tmp_path):
    path = tmp_path / "out.json"
    write_text_atomic(path, "old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_path(path) as tmp:
            tmp.write_text("half")
            raise KeyboardInterrupt
    assert path.read_text() == "old" and [p.name for p in tmp_path.iterdir()] == ["out.json"]
    mask = os.umask(0o022)
    try:
        import importlib

        import bertforge.core.writes
        importlib.reload(bertforge.core.writes)
        bertforge.core.writes.write_text_atomic(path, "new")
    finally:
        os.umask(mask)
        importlib.reload(bertforge.core.writes)
    assert stat.S_IMODE(path.stat().st_mode) == 0o644 and path.read_text() == "new"


def test_exclusive_holds_a_folder_against_other_holders_and_lets_go(tmp_path):
    import fcntl

    folder = tmp_path / "run"
    with exclusive(folder, "--out"):
        with exclusive(folder, "--out"):  # re-entrant in its holder (pretrain, then its training loop)
            pass
        with open(tmp_path / ".run.lock") as other:  # what another process would try
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    with open(tmp_path / ".run.lock") as other:
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released at the end
        with pytest.raises(BertforgeError, match=r"--out .*run: another process is writing it"):
            with exclusive(folder, "--out"):
                pass
