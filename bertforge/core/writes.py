"""Writing files, at the bottom of the house: a written file appears whole or not at all (`atomic_path`), with the
ordinary mode the user's umask gives (not the 0600 of a temporary file), a write that fails (a full disk) is one
line naming the file; one writer per output folder (`exclusive`); a model folder written whole and swapped in, never
over another model without --overwrite (`new_model_folder`); an output checked before any work starts
(`check_output`). Reading is io.py's.
"""

import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path

from .errors import FULL, BertforgeError

try:
    import fcntl
except ImportError:  # not on Windows: folders are not locked there
    fcntl = None


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()


@contextmanager
def atomic_path(path):
    """Yield a temporary path beside `path`; on success it replaces `path` in one step, else it is removed."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException as e:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(e, OSError) or type(e).__name__ in WRITE_ERRORS:
            raise BertforgeError(f"{path}: {write_failure(e)}") from None
        raise


# What torch and safetensors raise when a write fails (a full disk: torch says "unexpected pos", safetensors
# "No space left on device"); plain OSErrors are caught too.
WRITE_ERRORS = ("RuntimeError", "SafetensorError")


def write_failure(e: BaseException) -> str:
    text = str(e).lower()
    if isinstance(e, OSError) and e.errno in FULL or any(w in text for w in ("space", "too large", "unexpected pos")):
        return "could not be written: no space left (the disk is full or a file-size limit was reached)"
    detail = e.strerror if isinstance(e, OSError) and e.strerror else str(e).splitlines()[0]
    return f"could not be written ({detail})"


_HELD: set[Path] = set()  # the folders this process holds (exclusive is re-entrant)


@contextmanager
def exclusive(folder, flag: str):
    """Hold `folder` while writing it: another process writing the same folder meanwhile (a second `data create`
    or `pretrain` on one --out) gets a one-line error instead of each deleting the other's files. The lock is an
    OS file lock on `.NAME.lock` beside the folder, released when the holder ends, however it ends."""
    key = Path(folder).resolve()
    if key in _HELD or fcntl is None:
        yield
        return
    key.parent.mkdir(parents=True, exist_ok=True)
    lock = key.with_name(f".{key.name}.lock")
    with open(lock, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise BertforgeError(f"{flag} {folder}: another process is writing it (it holds {lock}); wait for it "
                                 f"to end or write elsewhere") from None
        _HELD.add(key)
        try:
            yield
        finally:
            _HELD.discard(key)


def remove_folder(folder: Path):
    """Delete a folder, renaming it first so that a deletion cut short never leaves it under its own name."""
    doomed = folder.with_name(f".{folder.name}.old")
    shutil.rmtree(doomed, ignore_errors=True)
    if folder.exists():
        folder.rename(doomed)
    shutil.rmtree(doomed, ignore_errors=True)


def replace_folder(tmp: Path, final: Path):
    """Move a fully written folder into place; an older folder of that name goes only after."""
    old = final.with_name(f".{final.name}.old")
    if final.exists():
        shutil.rmtree(old, ignore_errors=True)
        final.rename(old)
    tmp.rename(final)
    shutil.rmtree(old, ignore_errors=True)


# What a model folder holds (a checkpoint, its tokenizer, an ONNX export): a folder of these alone may be replaced
# by another model with --overwrite; a folder holding anything else is never replaced (those files would be lost).
MODEL_FILES = ("config.json", "bert_config.json", "model.safetensors.index.json", "pytorch_model.bin", "onnx.json",
               "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
               # a sentence-transformers folder's (sentence_folder.py)
               "modules.json", "sentence_bert_config.json", "config_sentence_transformers.json", "1_Pooling",
               "2_Normalize")
MODEL_SUFFIXES = (".safetensors", ".onnx")


@contextmanager
def new_model_folder(out, flag: str, overwrite: bool = False, source=None):
    """Yield an empty folder beside `out` to write a whole model in; on success it replaces `out` in one step (no
    file of an earlier model is left beside the new one), on failure it is removed and `out` is as it was.
    Refused before anything is written: `out` holding a model's files without `overwrite`, or other files."""
    out = check_output(out, flag, inputs=[source] if source is not None else ())
    found = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    others = [name for name in found if name not in MODEL_FILES and not name.endswith(MODEL_SUFFIXES)]
    if others:
        raise BertforgeError(f"{flag} {out}: holds other files than a model's ({', '.join(others[:3])}"
                             f"{', ...' if len(others) > 3 else ''}), which replacing it would delete; write to a new "
                             "or empty folder")
    if found and not overwrite:
        more = ", ..." if len(found) > 4 else ""
        raise BertforgeError(f"{flag} {out}: holds another model ({', '.join(found[:4])}{more}); pass --overwrite to "
                             "replace it, or write elsewhere")
    with exclusive(out, flag):
        tmp = out.with_name(f".{out.name}.partial")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            yield tmp
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        replace_folder(tmp, out)


def write_text_atomic(path, text: str):
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path, value, **dumps_options):
    """`value` as indented JSON, atomically."""
    write_text_atomic(path, json.dumps(value, indent=2, **dumps_options) + "\n")


def check_output(path, flag: str, folder: bool = True, inputs=()) -> Path:
    """An output path checked before any work starts: a folder (or a file) where one can write, not an input."""
    path = Path(path)
    if folder and path.exists() and not path.is_dir():
        raise BertforgeError(f"{flag} {path}: is a file, not a folder")
    if not folder and path.is_dir():
        raise BertforgeError(f"{flag} {path}: is a folder, not a file")
    for given in inputs:
        if Path(given).exists() and Path(given).resolve() == path.resolve():
            raise BertforgeError(f"{flag} {path}: is also the input; write somewhere else")
    parent = path if folder else path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise BertforgeError(f"{flag} {path}: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK):
        raise BertforgeError(f"{flag} {path}: cannot write in {parent} (permission denied or read-only)")
    return path
