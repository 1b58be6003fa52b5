"""An approximate nearest-neighbour index over an embeddings folder's shards (`bertforge index`), for corpora past a
few million vectors, where search.py's exact scan reads every stored vector for every batch of queries.

Two libraries, each optional (`pip install 'bertforge[index]'`), both by inner product, the exact search's score:

- faiss, IVF-Flat: k-means on a sample of the vectors gives `nlist` lists, each vector is stored whole in the list
  of its nearest centroid, and a query scans the `nprobe` lists whose centroids are nearest it;
- usearch, HNSW: a graph of `m` links per vector, built with `ef_construction` candidates per insertion, walked by a
  query with `ef` candidates.

A usearch graph built by several threads differs from build to build (the order of concurrent insertions), and so
may its answers; one thread (`threads=1`) builds the same graph every time, at about the cores' times the build time.

The index is built from the shards as a stream, a block of rows at a time, so what is in memory is the index (the
vectors once, as the library keeps them) and one block; int8/uint8 folders are indexed dequantized. Binary and
sparse folders are refused: their exact search is already cheap per vector, or not by inner product of dense
vectors.

Files: FILE (default DIR/index-KIND.json) records what the index was built from (the model, dims, precision, and
each shard's file, rows, first and last ids and a digest of its first and last rows) and names the library's file
beside it, written under a fresh name first; FILE is written last, atomically, so a build stopped at any point leaves
the previous index whole. An index whose folder has changed since (shards added or rewritten, another model) is
refused in one line: it would answer with rows that are not the folder's."""

from __future__ import annotations

import contextlib
import datetime
import glob
import hashlib
import importlib
import math
import secrets
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..core.errors import BertforgeError
from ..core.io import atomic_path, check_output, read_json, write_json
from .embed import shard_vectors
from .quantize import as_floats, is_binary

KIND = "bertforge vector index"
VERSION = 1
BUILD_ROWS = 65536  # rows added to the index at a time
# usearch: the first rows are added by one thread; concurrent insertions into a graph this small can leave a vector
# that no walk reaches
SERIAL_ROWS = 1024
TRAINING_PER_LIST = 40  # faiss: k-means sample rows per list (faiss warns under 39)
DIGEST_ROWS = 8  # rows at each end of a shard whose bytes are digested: a rewritten shard is noticed
EXTRA = "pip install 'bertforge[index]'"
# kind -> (module, the package that installs it, the structure built, its build options, its search options)
LIBRARIES = {"faiss": ("faiss", "faiss-cpu", "IVF-Flat", ("nlist",), ("nprobe",)),
             "usearch": ("usearch.index", "usearch", "HNSW", ("m", "ef_construction"), ("ef",))}
KINDS = tuple(LIBRARIES)
FLAGS = {"nlist": "--nlist", "nprobe": "--nprobe", "m": "--m", "ef_construction": "--ef-construction", "ef": "--ef"}


def library(kind: str):
    """The kind's module, or a one-line error naming the extra that installs it."""
    module, package = LIBRARIES[kind][:2]
    try:
        return importlib.import_module(module)
    except ImportError:
        raise BertforgeError(f"--kind {kind}: needs {package}, which is not installed: {EXTRA}") from None


def index_path(folder, kind: str) -> Path:
    return Path(folder) / f"index-{kind}.json"


def check_options(kind: str, options: dict, rows: int | None = None, built: dict | None = None) -> dict:
    """The options given (None: not given) checked against the kind, with the defaults filled in: `rows` at a build,
    the index's own options (`built`) at a search. A wrong kind's option, or an impossible one, is refused by flag."""
    build, search = LIBRARIES[kind][3:]
    allowed = search if built is not None else build + search
    for name, value in options.items():
        if value is not None and built is not None and name in build:
            raise BertforgeError(f"{FLAGS[name]}: set when the index is built (bertforge index), not at a search")
        if value is not None and name not in allowed:
            others = ", ".join(FLAGS[n] for n in allowed)
            raise BertforgeError(f"{FLAGS[name]}: not an option of a {kind} index (its options: {others})")
    chosen = {**(built or defaults(kind, rows)), **{k: v for k, v in options.items() if v is not None}}
    if kind == "faiss" and rows is not None and chosen["nlist"] > rows:
        raise BertforgeError(f"--nlist {chosen['nlist']}: more lists than the folder's {rows} vectors")
    if kind == "faiss" and chosen["nprobe"] > chosen["nlist"]:
        raise BertforgeError(f"--nprobe {chosen['nprobe']}: more lists than the index's {chosen['nlist']}")
    return chosen


def defaults(kind: str, rows: int) -> dict:
    """faiss: 4 sqrt(rows) lists (at least 40 rows each to train on), 2 sqrt(lists) of them probed (at least 16),
    so that a query scans a share of the vectors that shrinks as the corpus grows (2% of 5 million); usearch: its own
    defaults, 16 links, 128 candidates when adding, 64 when searching."""
    if kind == "usearch":
        return {"m": 16, "ef_construction": 128, "ef": 64}
    nlist = max(1, min(round(4 * math.sqrt(rows)), rows // TRAINING_PER_LIST))
    return {"nlist": nlist, "nprobe": min(nlist, max(16, round(2 * math.sqrt(nlist))))}


def check_indexable(manifest: dict, folder, kind: str) -> None:
    if manifest.get("sparse"):
        raise BertforgeError(f"DIR {folder}: holds sparse (SPLADE) vectors; --kind {kind} indexes dense ones")
    if is_binary(manifest["precision"]):
        raise BertforgeError(f"DIR {folder}: holds {manifest['precision']} vectors; an index is built over float32 "
                             "or int8/uint8 ones (a binary folder's exact search reads 32 times fewer bytes)")
    if not manifest["shards"]:
        raise BertforgeError(f"DIR {folder}: holds no shards yet")


def shard_record(folder: Path, entry: dict, manifest: dict) -> dict:
    """What names a shard's vectors: its file, rows, ids at either end, and a digest of its first and last rows."""
    values = shard_vectors(folder, entry, manifest)
    digest = hashlib.sha256(np.ascontiguousarray(values[:DIGEST_ROWS]).tobytes())
    digest.update(np.ascontiguousarray(values[-DIGEST_ROWS:]).tobytes())
    return {"vectors": entry["vectors"], "rows": entry["rows"], "first_id": entry["first_id"],
            "last_id": entry["last_id"], "digest": digest.hexdigest()[:32]}


def float_blocks(folder: Path, manifest: dict, step: int = BUILD_ROWS):
    """(first corpus row, float32 [rows, dims]) of every shard's vectors, a block at a time."""
    first = 0
    for entry in manifest["shards"]:
        values = shard_vectors(folder, entry, manifest)
        for start in range(0, len(values), step):
            yield first + start, floats(values[start:start + step], manifest)
        first += entry["rows"]


def floats(values: np.ndarray, manifest: dict) -> np.ndarray:
    """Stored vectors as contiguous float32, int8/uint8 dequantized with the manifest's ranges."""
    ranges = None if manifest.get("ranges") is None else np.asarray(manifest["ranges"], dtype=np.float32)
    return np.ascontiguousarray(as_floats(values, manifest["precision"], manifest["dims"], ranges), dtype=np.float32)


def training_sample(folder: Path, manifest: dict, size: int, seed: int = 0) -> np.ndarray:
    """`size` rows drawn evenly at random from every shard, as float32 (faiss's k-means reads them)."""
    rows = np.sort(np.random.default_rng(seed).choice(manifest["rows"], size=min(size, manifest["rows"]),
                                                      replace=False))
    parts, first = [], 0
    for entry in manifest["shards"]:
        mine = rows[(rows >= first) & (rows < first + entry["rows"])] - first
        if len(mine):
            parts.append(floats(np.asarray(shard_vectors(folder, entry, manifest)[mine]), manifest))
        first += entry["rows"]
    return np.concatenate(parts)


def new_library_index(kind: str, dims: int, options: dict, folder: Path, manifest: dict):
    """An empty index of the kind, trained where it needs to be (faiss's lists)."""
    lib = library(kind)
    if kind == "usearch":
        return lib.Index(ndim=dims, metric="ip", dtype="f32", connectivity=options["m"],
                         expansion_add=options["ef_construction"], expansion_search=options["ef"])
    index = lib.IndexIVFFlat(lib.IndexFlatIP(dims), dims, options["nlist"], lib.METRIC_INNER_PRODUCT)
    index.train(training_sample(folder, manifest, TRAINING_PER_LIST * options["nlist"]))
    return index


def build_index(folder, kind: str, out=None, options: dict | None = None, progress: bool = True,
                threads: int = 0) -> dict:
    """An index of the kind over the folder's shards, written to `out` (default DIR/index-KIND.json) by `threads`
    threads (0: every core); its record."""
    from .embed import read_manifest

    folder = Path(folder)
    manifest = read_manifest(folder)
    if out is not None:
        check_output(out, "--out", folder=False, inputs=[folder / "manifest.json"])
    check_indexable(manifest, folder, kind)
    options = check_options(kind, options or {}, rows=manifest["rows"])
    with faiss_threads(kind, threads):
        index = new_library_index(kind, manifest["dims"], options, folder, manifest)
        with tqdm(total=manifest["rows"], unit="vectors", disable=not progress, desc=f"index ({kind})") as bar:
            for first, block in float_blocks(folder, manifest):
                add_block(index, kind, first, block, threads)
                bar.update(len(block))
    return write_index(index, kind, Path(out) if out else index_path(folder, kind), folder, manifest, options,
                       threads)


@contextlib.contextmanager
def faiss_threads(kind: str, threads: int):
    """faiss's OpenMP threads set for the build (0: left as they are), and given back after."""
    if kind != "faiss" or not threads:
        yield
        return
    faiss = library(kind)
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(threads)
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


def add_block(index, kind: str, first: int, block: np.ndarray, threads: int) -> None:
    """Rows first.. of the corpus added, keyed by their row (faiss numbers the vectors in the order added); usearch
    adds them by `threads` threads (0: every core), its first SERIAL_ROWS by one."""
    if kind == "faiss":
        index.add(block)
        return
    keys = np.arange(first, first + len(block), dtype=np.uint64)
    alone = min(len(block), max(0, SERIAL_ROWS - first))
    if alone:
        index.add(keys[:alone], block[:alone], threads=1)
    if alone < len(block):
        index.add(keys[alone:], block[alone:], threads=threads)


def write_index(index, kind: str, out: Path, folder: Path, manifest: dict, options: dict, threads: int) -> dict:
    """The library's file under a fresh name, then the record naming it, atomically; older files of this record go."""
    blob = out.with_name(f"{out.stem}.{secrets.token_hex(4)}.{kind}")
    with atomic_path(blob) as tmp:
        if kind == "usearch":
            index.save(str(tmp))
        else:
            library(kind).write_index(index, str(tmp))
    record = {"kind": KIND, "version": VERSION, "library": kind, "library_version": library_version(kind),
              "structure": LIBRARIES[kind][2], "metric": "inner product", "options": options, "threads": threads,
              "file": blob.name, "bytes": blob.stat().st_size, "embeddings": str(folder.resolve()),
              "model": manifest["model"], "dims": manifest["dims"], "precision": manifest["precision"],
              "rows": manifest["rows"],
              "shards": [shard_record(folder, entry, manifest) for entry in manifest["shards"]],
              "built": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
    write_json(out, record, ensure_ascii=False)
    for old in out.parent.glob(f"{glob.escape(out.stem)}.*.{kind}"):
        if old != blob:
            old.unlink(missing_ok=True)
    return record


def library_version(kind: str) -> str:
    lib = library(kind)
    return getattr(lib, "__version__", None) or importlib.import_module(kind).__version__


# ---------------------------------------------------------------------------------------------------------
# Searching


class VectorIndex:
    """An index written by build_index, opened over the folder it was built from: the nearest rows of queries."""

    def __init__(self, path: Path, kind: str, index, options: dict):
        self.path, self.kind, self.index, self.options = path, kind, index, options

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """([q, k] inner products, [q, k] corpus rows) of float queries [q, dims], best first; rows -1 where the
        index found fewer than k."""
        queries = np.ascontiguousarray(np.atleast_2d(queries), dtype=np.float32)
        if self.kind == "faiss":
            scores, rows = self.index.search(queries, k)
            return np.where(rows >= 0, scores, -np.inf).astype(np.float64), rows.astype(np.int64)
        found = self.index.search(queries, k)
        keys, distances, counts = (found.keys, found.distances, found.counts) if hasattr(found, "counts") else \
            (found.keys[None], found.distances[None], np.array([len(found.keys)]))
        rows, scores = np.full((len(queries), k), -1, dtype=np.int64), np.full((len(queries), k), -np.inf)
        for q, count in enumerate(counts):
            rows[q, :count] = keys[q, :count].astype(np.int64)
            scores[q, :count] = 1.0 - distances[q, :count].astype(np.float64)  # usearch's "ip" is 1 - <q, x>
        return scores, rows


def index_file(folder, which: str) -> Path:
    """--index's value: a kind (the folder's own index of it) or an index file written by `bertforge index --out`."""
    path = index_path(folder, which) if which in KINDS else Path(which)
    if not path.is_file():
        built = f"bertforge index {folder} --kind {which}" if which in KINDS else f"bertforge index {folder} --out"
        raise BertforgeError(f"--index {which}: no index file {path} (build one: {built})")
    return path


def open_index(folder, manifest: dict, which: str, options: dict | None = None) -> VectorIndex:
    """The index `which` (a kind, or an index file) over `folder`, checked to be current, with the search options
    given (--nprobe, --ef; None: the index's own)."""
    path = index_file(folder, which)
    record = read_json(path, expect=dict)
    if record.get("kind") != KIND or record.get("version") != VERSION or record.get("library") not in KINDS:
        raise BertforgeError(f"--index {path}: not an index written by bertforge index (version {VERSION})")
    kind = record["library"]
    check_current(record, Path(folder), manifest, path)
    options = check_options(kind, options or {}, built=record["options"])
    blob = path.with_name(record["file"])
    if not blob.is_file() or blob.stat().st_size != record["bytes"]:
        raise BertforgeError(f"--index {path}: its {kind} file {blob.name} is missing or not the one written "
                             f"(rebuild it: {rebuild(folder, kind, path)})")
    try:
        return VectorIndex(path, kind, load(kind, blob, options), options)
    except (RuntimeError, ValueError) as e:
        reason = (str(e).strip().splitlines() or [type(e).__name__])[-1]
        raise BertforgeError(f"--index {path}: its {kind} file {blob.name} cannot be read ({reason})") from None


def load(kind: str, blob: Path, options: dict):
    """The library's index, memory-mapped, with the search options set."""
    lib = library(kind)
    if kind == "usearch":
        index = lib.Index.restore(str(blob), view=True)
        if index is None:
            raise ValueError("not a usearch index")
        index.expansion_search = options["ef"]
        return index
    index = lib.read_index(str(blob), lib.IO_FLAG_MMAP | lib.IO_FLAG_READ_ONLY)
    index.nprobe = options["nprobe"]
    return index


def rebuild(folder, kind: str, path: Path) -> str:
    out = "" if path == index_path(folder, kind) else f" --out {path}"
    return f"bertforge index {folder} --kind {kind}{out}"


def check_current(record: dict, folder: Path, manifest: dict, path: Path) -> None:
    """An index built over other vectors than the folder's now is refused in one line, saying what changed."""
    again = f"rebuild it: {rebuild(folder, record['library'], path)}"
    if record["model"] != manifest["model"]:
        shown = record["model"].get("repo_id") or record["model"].get("folder")
        raise BertforgeError(f"--index {path}: built over another model's vectors ({shown}); {again}")
    if (record["dims"], record["precision"]) != (manifest["dims"], manifest["precision"]):
        raise BertforgeError(f"--index {path}: built over {record['dims']}-value {record['precision']} vectors; "
                             f"DIR {folder} holds {manifest['dims']}-value {manifest['precision']} ones; {again}")
    built, now = record["shards"], manifest["shards"]
    for old, entry in zip(built, now):
        if old != shard_record(folder, entry, manifest):
            raise BertforgeError(f"--index {path}: stale: {folder / entry['vectors']} changed since the index was "
                                 f"built; {again}")
    if len(built) != len(now):
        raise BertforgeError(f"--index {path}: stale: built over {len(built)} shard(s), {record['rows']} vectors; "
                             f"DIR {folder} now holds {len(now)}, {manifest['rows']} vectors; {again}")
