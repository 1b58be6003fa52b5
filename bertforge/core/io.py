"""Files, at the bottom of the house: reading text and JSON with one-line errors, atomic writes, text folders.

Every module reads and writes through these, so that a decoding error, a malformed JSON file or a torn write
is handled one way everywhere: errors name the file (and line), and a written file appears whole or not at all,
with the ordinary mode the user's umask gives (not the 0600 of a temporary file).
"""

import csv
import io
import json
import os
import re
import shutil
import stat
import tempfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from .errors import FULL, BertforgeError, where

try:
    import fcntl
except ImportError:  # not on Windows: folders are not locked there
    fcntl = None

TEXT_SUFFIXES = (".txt", ".raw", ".text")  # what is read when recursing into a folder of text


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()


def read_text(path, encoding="utf-8") -> str:
    """A whole text file, with a decoding error reported by file and byte offset."""
    path = Path(path)
    try:
        return decoded(path.read_bytes(), path, encoding)
    except OSError as e:
        raise unreadable(path, e) from None


def decoded(data: bytes, path, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise BertforgeError(
            f"{path}: not valid {encoding} at byte {e.start} ({e.object[e.start:e.start + 1]!r}); "
            f"pass the file's encoding (e.g. encoding='latin-1')"
        ) from None


def unreadable(path, e: OSError) -> BertforgeError:
    if isinstance(e, FileNotFoundError):
        return BertforgeError(f"{path}: file not found")
    if isinstance(e, IsADirectoryError):
        return BertforgeError(f"{path}: is a folder, not a file")
    return BertforgeError(f"{path}: cannot read ({e.strerror})")


SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")


def parse_json(text: str, path, first_line: int = 1):
    """JSON from `text`, which starts on line `first_line` of `path`; an error names the file and line.
    A string holding an unpaired surrogate escape (e.g. "\\ud800") is refused: it is not Unicode text."""
    try:
        value = json.loads(text)
        deep = too_deep(value)
    except json.JSONDecodeError as e:
        raise BertforgeError(f"{where(path, first_line + e.lineno - 1)}: not valid JSON ({e.msg})") from None
    except RecursionError:
        deep = True
    if deep:
        raise BertforgeError(f"{where(path, first_line)}: JSON nested more than {MAX_JSON_DEPTH} levels deep, "
                             "which no model or data file needs")
    found = SURROGATE_ESCAPE.search(text)
    if found and not _is_unicode(value):
        line = first_line + text.count("\n", 0, found.start())
        raise BertforgeError(f"{where(path, line)}: a string holds an unpaired surrogate ({found.group()}), which is "
                             "not Unicode text")
    return value


MAX_JSON_DEPTH = 100  # a tokenizer.json nests 6 deep; code that walks a value recursively stays far from Python's limit


def too_deep(value) -> bool:
    """Whether a parsed JSON value nests lists and objects more than MAX_JSON_DEPTH deep (walked without recursion)."""
    level = [value] if isinstance(value, (list, dict)) else []  # the containers at depth 1, 2, ...
    for _ in range(MAX_JSON_DEPTH):
        level = [child for item in level for child in (item.values() if isinstance(item, dict) else item)
                 if isinstance(child, (list, dict))]
    return bool(level)


def _is_unicode(value) -> bool:
    """Every string in a parsed JSON value encodes as UTF-8 (no unpaired surrogates)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return False
        return True
    if isinstance(value, dict):
        return all(_is_unicode(k) and _is_unicode(v) for k, v in value.items())
    if isinstance(value, list):
        return all(map(_is_unicode, value))
    return True


def read_json(path, expect: type | None = dict):
    """A JSON file's value (by default it must be an object)."""
    return expected_json(parse_json(read_text(path), path), path, expect)


def expected_json(value, path, expect: type | None):
    if expect is not None and not isinstance(value, expect):
        raise BertforgeError(f"{path}: expected a JSON {'object' if expect is dict else expect.__name__}")
    return value


# ---------------------------------------------------------------------------------------------------------
# Model folders come from anywhere (a download; a git clone keeps symbolic links), so every file one is read from
# is checked first, by one rule: it is a regular file (not a FIFO, a device or a folder), found inside the model
# folder after following links (a Hugging Face cache snapshot, .../snapshots/REV/, may link into its repository's
# folder, where the cache keeps the files), and a file read whole is at most MODEL_TEXT_LIMIT bytes.

MODEL_TEXT_LIMIT = 128 * 2**20  # the largest tokenizer.json of a released encoder is about 35 MB


def model_file(path, folder=None, limit: int | None = MODEL_TEXT_LIMIT) -> Path:
    """The real path of `path`, a file of the model folder `folder` (by default the file's own folder), once it
    passes the rule above; `limit` None for weights, which are mapped or checked against their header."""
    path = Path(path)
    folder = Path(folder if folder is not None else path.parent)
    try:
        outside = outside_folder(path, folder)
        if outside:
            raise BertforgeError(f"{path}: {outside}, outside the model folder {folder}; a model's files are read "
                                 "from its own folder only (copy the file in)")
        info = path.stat()
    except FileNotFoundError:
        raise BertforgeError(f"{path}: file not found" + (f" (a link to {os.readlink(path)}, which does not exist)"
                                                          if path.is_symlink() else "")) from None
    except (OSError, RuntimeError, ValueError) as e:  # a loop of links; a NUL in the name
        raise BertforgeError(f"{path}: cannot be read ({getattr(e, 'strerror', None) or e})") from None
    target = path.resolve()
    if not stat.S_ISREG(info.st_mode):
        kind = "a folder" if stat.S_ISDIR(info.st_mode) else "a FIFO" if stat.S_ISFIFO(info.st_mode) \
            else "a device" if stat.S_ISCHR(info.st_mode) or stat.S_ISBLK(info.st_mode) else "a socket"
        link = f" (a link to {target})" if target != path.absolute() else ""
        raise BertforgeError(f"{path}: {kind}, not a regular file{link}")
    if limit is not None and info.st_size > limit:
        raise BertforgeError(f"{path}: {info.st_size / 2**20:,.0f} MiB, more than the {limit / 2**20:,.0f} MiB a "
                             "model's text or JSON file may have")
    return target


def outside_folder(path, folder) -> str | None:
    """Where `path` leads out of the model folder `folder` (by its name, or after following links), in words;
    None where it stays inside."""
    path, folder = Path(path), Path(folder)
    if not Path(os.path.normpath(path.absolute())).is_relative_to(os.path.normpath(folder.absolute())):
        return "names a file"
    root, target = folder.resolve(), path.resolve()
    roots = (root, root.parent.parent) if root.parent.name == "snapshots" else (root,)
    return None if any(target.is_relative_to(r) for r in roots) else f"resolves to {target}"


def has_model_file(path, folder=None) -> bool:
    """Whether the model folder holds the optional file `path`; one there that breaks the rule above is an error,
    not a file ignored."""
    if not os.path.lexists(path):
        return False
    model_file(path, folder, limit=None)
    return True


def read_model_text(path, folder=None, encoding="utf-8") -> str:
    target = model_file(path, folder)
    try:
        with open(target, "rb") as f:
            data = f.read(MODEL_TEXT_LIMIT + 1)
    except OSError as e:
        raise unreadable(path, e) from None
    if len(data) > MODEL_TEXT_LIMIT:  # grew since it was checked
        raise BertforgeError(f"{path}: more than the {MODEL_TEXT_LIMIT / 2**20:,.0f} MiB a model's text or JSON "
                             "file may have")
    return decoded(data, path, encoding)


def read_model_json(path, folder=None, expect: type | None = dict):
    """A JSON file of a model folder (see model_file), by default an object."""
    return expected_json(parse_json(read_model_text(path, folder), path), path, expect)


def read_json_lines(path) -> list[dict]:
    """The objects of a JSON-lines file; blank lines are skipped, a bad line is named."""
    rows = []
    for line_no, line in enumerate(read_text(path).split("\n"), 1):
        if line.strip():
            row = parse_json(line, path, line_no)
            if not isinstance(row, dict):
                raise BertforgeError(f"{where(path, line_no)}: expected a JSON object")
            rows.append(row)
    return rows


def read_records(path):
    """(location, record) pairs of a table: CSV (.csv) or TSV (.tsv) with a header, JSON lines, or one JSON
    array in a .json file; located by line, or by [index] in an array. Values of CSV/TSV records are strings."""
    path = Path(path)
    text = read_text(path, "utf-8-sig")
    if path.suffix.lower() in (".csv", ".tsv"):
        csv.field_size_limit(max(csv.field_size_limit(), len(text) + 1))  # a field may be as long as the file
        tsv = path.suffix.lower() == ".tsv"
        rows = csv.DictReader(io.StringIO(text, newline=""), delimiter="\t" if tsv else ",",
                              quoting=tsv_quoting(text) if tsv else csv.QUOTE_MINIMAL)
        for row in rows:
            location = where(path, rows.line_num)
            if None in row or None in row.values():  # DictReader's marks for too many / too few fields
                raise BertforgeError(f"{location}: expected {len(rows.fieldnames)} columns")
            yield location, row
        return
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        located = [(f"{path}[{k}]", r) for k, r in enumerate(parse_json(text, path))]
    else:  # split on newlines only: JSON strings may hold other characters that splitlines() breaks at
        located = [(where(path, n), parse_json(line, path, n)) for n, line in enumerate(text.split("\n"), 1)
                   if line.strip()]
    for location, record in located:
        if not isinstance(record, dict):
            raise BertforgeError(f"{location}: expected a JSON object")
        yield location, record


def tsv_quoting(text: str) -> int:
    """How a TSV file quotes: not at all (csv.QUOTE_NONE), as GLUE's files, whose texts may start with a literal
    quote ("Hello," she said), when every line splits into the header's columns that way and the fields that
    start with a quote do not all end with one; else as CSV does (quoted fields, doubled quotes inside), as
    spreadsheets and pandas write TSV."""
    literal = [row for row in csv.reader(io.StringIO(text, newline=""), delimiter="\t", quoting=csv.QUOTE_NONE)
               if row]
    consistent = all(len(row) == len(literal[0]) for row in literal)
    quoted = [field for row in literal for field in row if field.startswith('"')]
    fully_quoted = bool(quoted) and all(len(field) > 1 and field.endswith('"') for field in quoted)
    return csv.QUOTE_NONE if consistent and not fully_quoted else csv.QUOTE_MINIMAL


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


def copy_model_file(path, folder, target):
    """A file of the model folder `folder` (by the model-file rule, any size) copied to `target`, atomically."""
    source = model_file(path, folder, limit=None)
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)


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


def text_files(inputs) -> tuple[list[Path], int]:
    """Files to read, in a fixed order, and how many files inside folders were skipped (not text by suffix).

    Files named explicitly are always read; folders are searched recursively for ``*.txt``, ``*.raw`` and
    ``*.text`` files (so READMEs and JSON side files next to a corpus are left alone); hidden files are skipped.
    """
    files, skipped = [], 0
    for item in map(Path, inputs):
        if item.is_dir():
            found = sorted(p for p in item.rglob("*") if p.is_file() and not p.name.startswith("."))
            text = [p for p in found if p.suffix.lower() in TEXT_SUFFIXES]
            skipped += len(found) - len(text)
            files += text
        elif item.is_file():
            files.append(item)
        else:
            raise BertforgeError(f"{item}: no such file or folder")
    return files, skipped


def rounded(values):
    """Floats to 6 decimals for JSON, as Google's extract_features writes them (arrays become lists)."""
    return np.round(np.asarray(values, dtype=np.float64), 6).tolist()
