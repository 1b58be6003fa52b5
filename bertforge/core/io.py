"""Files, at the bottom of the house: reading text and JSON with one-line errors, a model folder's files by one
rule, tables of records, text folders; the atomic writes are writes.py's (their names imported here too).

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
from pathlib import Path

import numpy as np

from .errors import BertforgeError, where
from .writes import (  # noqa: F401 (the writers, imported from here too)
    FILE_MODE, MODEL_FILES, MODEL_SUFFIXES, WRITE_ERRORS, atomic_path, check_output, exclusive, new_model_folder,
    remove_folder, replace_folder, write_failure, write_json, write_text_atomic
)

TEXT_SUFFIXES = (".txt", ".raw", ".text")  # what is read when recursing into a folder of text


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


def copy_model_file(path, folder, target):
    """A file of the model folder `folder` (by the model-file rule, any size) copied to `target`, atomically."""
    source = model_file(path, folder, limit=None)
    with atomic_path(target) as tmp:
        shutil.copyfile(source, tmp)


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
