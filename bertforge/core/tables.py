"""Tables read as a stream, a row at a time, never the whole file in memory: a corpus to embed (`bertforge embed`),
queries and qrels to search with (`bertforge search`).

A file is read by its suffix: CSV (.csv) and TSV (.tsv) with a header, JSON lines (.jsonl, .json), Parquet
(.parquet, through pyarrow, a batch of rows at a time), else text, one passage per line (blank lines skipped).
`passages` yields (id, text) pairs: the id from `id_column`, else the row's number (0 for the first passage); the
text from `text_column` (default: a column named "text"). A bad row is an error naming the file and its line (a
Parquet file: its row), an unknown column one naming the columns the file has. Text is decoded in blocks as every
text file is (`decoding.decoded_blocks`, with its fallback encodings)."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from itertools import chain, islice
from pathlib import Path

from .decoding import decoded_blocks
from .errors import BertforgeError, where
from .io import parse_json, tsv_quoting

TABLE_SUFFIXES = (".csv", ".tsv", ".jsonl", ".json", ".parquet")
TEXT_COLUMN = "text"  # the text column where none is named
PARQUET_BATCH = 1024  # rows read from a Parquet file at a time
QUOTING_LINES = 1000  # the lines of a TSV file that decide whether it quotes (core.io.tsv_quoting)


def table_kind(path) -> str:
    """"csv", "tsv", "jsonl", "parquet" or "text", by the file's suffix."""
    suffix = Path(path).suffix.lower()
    return {".csv": "csv", ".tsv": "tsv", ".jsonl": "jsonl", ".json": "jsonl", ".parquet": "parquet"}.get(suffix,
                                                                                                       "text")


def lines(path, encoding: str = "utf-8") -> Iterator[str]:
    """The file's lines, ends kept, decoded block by block."""
    for block in decoded_blocks(Path(path), encoding):
        yield from _newline_lines(block)


def _newline_lines(block: str) -> list[str]:
    """Lines split at "\\n" alone (JSON strings and CSV fields may hold other line breaks); "\\r\\n" kept whole."""
    parts = block.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def pyarrow_parquet(path):
    """pyarrow.parquet, or a one-line error: Parquet files need pyarrow."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise BertforgeError(f"{path}: reading or writing Parquet needs pyarrow (pip install pyarrow)") from None
    return pq


def records(path, encoding: str = "utf-8") -> Iterator[tuple[str, dict]]:
    """(location, record) of a table file, one at a time: CSV/TSV rows (strings), JSON-lines objects, Parquet
    rows; a text file's non-blank lines as {"text": line}."""
    path = Path(path)
    kind = table_kind(path)
    if kind == "parquet":
        yield from _parquet_records(path)
    elif kind in ("csv", "tsv"):
        yield from _csv_records(path, kind, encoding)
    elif kind == "jsonl":
        for number, line in enumerate(lines(path, encoding), 1):
            if line.strip():
                record = parse_json(line, path, number)
                if not isinstance(record, dict):
                    raise BertforgeError(f"{where(path, number)}: expected a JSON object")
                yield where(path, number), record
    else:
        for number, line in enumerate(lines(path, encoding), 1):
            text = line.rstrip("\r\n")
            if text.strip():
                yield where(path, number), {TEXT_COLUMN: text.strip()}


def _csv_records(path: Path, kind: str, encoding: str):
    stream = lines(path, encoding)
    head = list(islice(stream, QUOTING_LINES))  # how a TSV file quotes is read from its first lines
    if not head or not head[0].strip():
        raise BertforgeError(f"{path}: empty file (expected a header line naming the columns)")
    quoting = csv.QUOTE_MINIMAL if kind == "csv" else tsv_quoting("".join(head))
    csv.field_size_limit(2**31 - 1)
    rows = csv.reader(chain(head, stream), delimiter="\t" if kind == "tsv" else ",", quoting=quoting)
    header = next(rows)
    for row in rows:
        if not row:
            continue
        location = where(path, rows.line_num)
        if len(row) != len(header):
            raise BertforgeError(f"{location}: expected {len(header)} columns, found {len(row)}")
        yield location, dict(zip(header, row))


def _parquet_records(path: Path, start: int = 0):
    """A Parquet file's rows from row `start` (a row group's first row: see parquet_start)."""
    pq = pyarrow_parquet(path)
    try:
        table = pq.ParquetFile(path)
    except OSError as e:
        raise BertforgeError(f"{path}: cannot be read as Parquet ({str(e).splitlines()[0]})") from None
    groups, row = [], 0
    for group in range(table.num_row_groups):
        if row < start:
            row += table.metadata.row_group(group).num_rows
        else:
            groups.append(group)
    if not groups:
        return
    for batch in table.iter_batches(batch_size=PARQUET_BATCH, row_groups=groups):
        for record in batch.to_pylist():
            yield f"{path} row {row}", record
            row += 1


def parquet_start(path, skip: int) -> int:
    """The first row of the row group that holds row `skip`: where reading past `skip` rows starts, whole row groups
    skipped unread (a resumed `embed`)."""
    metadata, row = pyarrow_parquet(path).ParquetFile(path).metadata, 0
    for group in range(metadata.num_row_groups):
        size = metadata.row_group(group).num_rows
        if row + size > skip:
            return row
        row += size
    return row


def columns_of(path, encoding: str = "utf-8") -> list[str] | None:
    """The columns a table file declares (its header, its Parquet schema), None for JSON lines and text."""
    kind = table_kind(path)
    if kind == "parquet":
        return list(pyarrow_parquet(path).ParquetFile(path).schema_arrow.names)
    if kind in ("csv", "tsv"):
        first = next(lines(path, encoding), "")
        if not first.strip():
            raise BertforgeError(f"{path}: empty file (expected a header line naming the columns)")
        return next(csv.reader([first], delimiter="\t" if kind == "tsv" else ","))
    return None


def passages(path, text_column: str | None = None, id_column: str | None = None, encoding: str = "utf-8",
             skip: int = 0) -> Iterator[tuple[str, str]]:
    """(id, text) of each passage of a corpus file, after the first `skip` (see the module docstring); the ids as
    strings. Checked before the first row: the columns exist (CSV, TSV, Parquet: in the header); every row: its
    text is a non-empty string, its id present."""
    path = Path(path)
    if not path.is_file():
        raise BertforgeError(f"{path}: no such file" if not path.exists() else f"{path}: is a folder, not a file")
    kind = table_kind(path)
    if kind == "text" and (text_column or id_column):
        raise BertforgeError(f"{path}: a text file (one passage per line) has no columns; --text-column and "
                             f"--id-column name the columns of a .csv, .tsv, .jsonl or .parquet file")
    text_column = text_column or TEXT_COLUMN
    declared = columns_of(path, encoding)
    if declared is not None:
        for flag, column in (("--text-column", text_column), ("--id-column", id_column)):
            if column is not None and column not in declared:
                raise BertforgeError(f"{path}: no column {column!r} ({flag}); its columns: {', '.join(declared)}")
    row = parquet_start(path, skip) if kind == "parquet" and skip else 0
    stream = _parquet_records(path, row) if kind == "parquet" else records(path, encoding)
    for location, record in stream:
        if row >= skip:
            text = record.get(text_column)
            if text_column not in record:
                raise BertforgeError(f"{location}: no column {text_column!r} (--text-column); this row holds "
                                     f"{', '.join(map(str, record)) or 'nothing'}")
            if not isinstance(text, str) or not text.strip():
                raise BertforgeError(f"{location}: {text_column!r} is {'empty' if text in ('', None) else repr(text)}"
                                     f"; every passage must be a non-empty text")
            if id_column is None:
                key = str(row)
            elif record.get(id_column) is None or isinstance(record.get(id_column), (dict, list)):
                raise BertforgeError(f"{location}: no id in column {id_column!r} (--id-column)")
            else:
                key = str(record[id_column])
            yield key, text
        row += 1
    if row == 0:
        raise BertforgeError(f"{path}: no passages (empty file)")
    if row < skip:
        raise BertforgeError(f"{path}: holds {row} passages, fewer than the {skip} already embedded: the corpus "
                             f"changed since; embed it into a new folder")


def count_rows(path, encoding: str = "utf-8") -> int:
    """About how many passages a corpus holds, quickly, for a progress bar: a Parquet file's row count; else its
    non-blank lines (less the header of CSV and TSV; a field holding line breaks counts each line)."""
    path = Path(path)
    kind = table_kind(path)
    if kind == "parquet":
        return pyarrow_parquet(path).ParquetFile(path).metadata.num_rows
    count = 0
    try:
        with open(path, "rb") as f:
            for line in f:
                count += bool(line.strip())
    except OSError:
        return 0
    return max(0, count - (kind in ("csv", "tsv")))


def qrels(path, encoding: str = "utf-8") -> dict[str, dict[str, float]]:
    """Relevance judgements, query id -> {passage id: grade}: BEIR's TSV (query-id, corpus-id, score, a header
    line) or TREC's (query-id, iteration, doc-id, relevance, space- or tab-separated, no header)."""
    found: dict[str, dict[str, float]] = {}
    for number, line in enumerate(lines(path, encoding), 1):
        fields = line.split("\t") if "\t" in line else line.split()
        fields = [f.strip() for f in fields]
        if not any(fields):
            continue
        if number == 1 and len(fields) == 3 and fields[2].lower() in ("score", "relevance", "label"):
            continue  # BEIR's header
        if len(fields) not in (3, 4):
            raise BertforgeError(f"{where(path, number)}: expected query-id, corpus-id, score (BEIR) or query-id, "
                                 f"0, doc-id, relevance (TREC), found {len(fields)} fields")
        query, passage, grade = (fields[0], fields[1], fields[2]) if len(fields) == 3 else \
            (fields[0], fields[2], fields[3])
        try:
            found.setdefault(query, {})[passage] = float(grade)
        except ValueError:
            raise BertforgeError(f"{where(path, number)}: relevance {grade!r} is not a number") from None
    if not found:
        raise BertforgeError(f"{path}: no judgements (empty file)")
    return found
