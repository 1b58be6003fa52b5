"""A corpus embedded into shards of vectors (`bertforge embed`), as a stream: what is in memory is a shard's rows,
whatever the corpus's size.

The passages are read a row at a time (`core.tables.passages`: text, CSV, TSV, JSON lines, Parquet), embedded in
chunks by the sentence-embedding pipeline (pipelines.SentenceEmbedding: the folder's pooling, Dense modules and
normalisation; batches of similar lengths under a token budget, batches.run), cut to `dimensions` (Matryoshka:
the first N values, then unit length again where the model normalises), quantized (quantize.py) and written to
`out` in shards:

    out/manifest.json              the model (and its Hub commit), dims, precision, int8 ranges, prompt, shards
    out/shard-00000.npy            the vectors [rows, dims] (packed bits [rows, dims / 8] for binary precisions)
    out/shard-00000.ids.json       their ids, in order
    out/shard-00000.parquet        with formats "parquet": id and vector columns

Each file is written whole or not at all (`core.io.atomic_path`), the manifest last: a shard exists once the
manifest lists it. A run killed at any point (kill -9 included) resumes where it stopped, with the same flags: the
listed shards are kept, the corpus is read past their rows, and no row is lost or written twice. Chunks never
straddle a shard, so a resumed run batches each shard's rows as an uninterrupted run does, and writes the same
vectors. int8/uint8 ranges come from `calibration` embeddings, else from the first shard's vectors (the whole
corpus's where it fits in one shard, as sentence-transformers computes them), and are kept in the manifest so that
queries are quantized the same way (search.py).

Under torchrun (RANK, WORLD_SIZE, MASTER_ADDR: one machine or several; a gloo group for the barriers alone), shard i
is rank i % world's: each rank reads the corpus, embeds its own shards' rows as one process would, and writes each
shard's files, then its entry file (shard-00000.entry.json, the manifest entry). Rank 0 writes the manifest first
(the settings, no shards) and, after a barrier, lists every shard in corpus order, complete; the entry files go. A
stopped run resumes per shard: those with an entry file, or listed by the manifest, are kept.

With `sparse` (`bertforge embed --sparse`), a SPLADE model's vectors (SparseEmbedder: the sparse-embedding pipeline
on a SparseEncoder folder), a weight per vocabulary entry, most of them 0, are stored as CSR, the manifest saying
so ("sparse": true, "layout": "csr", "dims": the vocabulary's size):

    out/shard-00000.indptr.npy     [rows + 1] int64: row i's weights are at indptr[i]:indptr[i + 1]
    out/shard-00000.indices.npy    [nnz] int32: their token ids, ascending within a row
    out/shard-00000.values.npy     [nnz] float32: the weights
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import logging
import os
from pathlib import Path

import numpy as np
from tqdm import tqdm

from ..core.errors import BertforgeError
from ..core.hub import hub_origin, model_folder
from ..core.io import atomic_path, check_output, exclusive, read_json, write_text_atomic
from ..core.tables import count_rows, passages, pyarrow_parquet
from ..model.formats.sentence_folder import ST_CONFIG
from .quantize import DTYPES, check_precision, check_ranges, is_scalar, quantize, ranges_of, width

log = logging.getLogger("bertforge")

MANIFEST = "manifest.json"
KIND = "bertforge embeddings"
VERSION = 1
FORMATS = ("npy", "parquet")
CHUNK_ROWS = 2048  # passages given to the pipeline at a time (it sorts them by length into token-budget batches)
BATCH_TOKENS = 16384
SHARD_ROWS = 100_000
RANK_TIMEOUT_HOURS = 24  # how long a rank waits at a barrier for the others (torchrun)
QUERY_PROMPT = "query"  # the prompt a search embeds its queries with, where the folder names one


# ---------------------------------------------------------------------------------------------------------
# The model


class Embedder:
    """Texts to float32 vectors as `bertforge embed` and `bertforge search` make them: a sentence-embedding
    pipeline on the model `model` (a folder or a Hub name, at `revision`), with the prompt named `prompt` (None:
    the folder's default prompt, if it has one), cut to `dimensions`."""

    def __init__(self, model, revision: str | None = None, device: str | None = None, bf16: bool = False,
                 batch_tokens: int = BATCH_TOKENS, prompt: str | None = None, dimensions: int | None = None,
                 folder: Path | None = None):
        from .pipelines import pipeline

        self.folder = folder or model_folder(model, revision)
        self.pipe = pipeline("sentence-embedding", self.folder, device=device, bf16=bf16, batch_size=CHUNK_ROWS,
                             max_batch_tokens=batch_tokens)
        self.prompts = self.pipe.prompts
        self.prompt_name = prompt
        if prompt is not None and prompt not in self.prompts:
            known = f"its prompts: {', '.join(self.prompts)}" if self.prompts else "it names none"
            raise BertforgeError(f"--prompt {prompt}: {self.folder / ST_CONFIG} names no such prompt ({known})")
        self.model_dims = self.pipe.declared.dimension(self.pipe.config.hidden_size)
        if dimensions is not None and not 1 <= dimensions <= self.model_dims:
            raise BertforgeError(f"--dimensions {dimensions}: the model's vectors have {self.model_dims}")
        self.dims = dimensions or self.model_dims
        self.cut = 0  # texts cut to the length limit so far

    @property
    def normalized(self) -> bool:
        return bool(self.pipe.defaults["normalize"])

    def __call__(self, texts: list[str]) -> np.ndarray:
        """[len(texts), dims] float32 vectors; texts over the length limit are cut to it (counted in `cut`)."""
        from .batches import run

        pipe = self.pipe
        prepared = pipe.prepare(texts, dimensions=self.dims, prompt_name=self.prompt_name)
        self.cut += len(prepared.extra.get("cut", ()))
        outputs = run(pipe.forward, prepared.rows, pipe.batch_size, pipe.max_batch_tokens, pipe.tokenizer.pad_token_id,
                      None, pipe.runtime.call_tokens)
        return pipe.vectors(prepared, outputs).astype(np.float32, copy=False).reshape(len(texts), self.dims)


    def join(self, chunks: list) -> np.ndarray:
        """A shard's vectors from its chunks'."""
        return np.concatenate(chunks)


class SparseEmbedder:
    """Texts to SPLADE vectors as `bertforge embed --sparse` and `bertforge search` make them: the sparse-embedding
    pipeline (pipelines.SparseEmbedding) on a SparseEncoder folder, with the prompt named `prompt`. Called, a list of
    (token ids ascending, weights) per text; with `dense_queries`, [texts, vocabulary] float32 rows (a search's
    queries)."""

    normalized = False

    def __init__(self, model, revision: str | None = None, device: str | None = None, bf16: bool = False,
                 batch_tokens: int = BATCH_TOKENS, prompt: str | None = None, folder: Path | None = None,
                 dense_queries: bool = False):
        from .pipelines import pipeline

        self.folder = folder or model_folder(model, revision)
        self.pipe = pipeline("sparse-embedding", self.folder, device=device, bf16=bf16, batch_size=CHUNK_ROWS,
                             max_batch_tokens=batch_tokens)
        self.prompts, self.prompt_name, self.dense_queries = self.pipe.prompts, prompt, dense_queries
        if prompt is not None and prompt not in self.prompts:
            known = f"its prompts: {', '.join(self.prompts)}" if self.prompts else "it names none"
            raise BertforgeError(f"--prompt {prompt}: {self.folder / ST_CONFIG} names no such prompt ({known})")
        self.dims = self.model_dims = self.pipe.config.vocab_size
        self.cut = 0

    def __call__(self, texts: list[str]):
        from .batches import run

        pipe = self.pipe
        prepared = pipe.prepare(texts, prompt_name=self.prompt_name)
        self.cut += len(prepared.extra.get("cut", ()))
        outputs = run(pipe.forward, prepared.rows, pipe.batch_size, pipe.max_batch_tokens, pipe.tokenizer.pad_token_id,
                      None, pipe.runtime.call_tokens)
        if not self.dense_queries:
            return outputs
        vectors = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, (ids, values) in zip(vectors, outputs):
            row[ids] = values
        return vectors

    def join(self, chunks: list) -> list:
        return [row for chunk in chunks for row in chunk]


def model_identity(folder: Path) -> dict:
    """What names a model in a manifest: its Hub repository and commit for a cache folder, else its path."""
    origin = hub_origin(folder)
    return {"repo_id": origin["repo_id"], "commit": origin["commit"]} if origin else \
        {"folder": str(Path(folder).resolve())}


# ---------------------------------------------------------------------------------------------------------
# The manifest


def read_manifest(folder, flag: str = "DIR") -> dict:
    """An embeddings folder's manifest.json, checked to be one."""
    file = Path(folder) / MANIFEST
    if not file.is_file():
        raise BertforgeError(f"{flag} {folder}: no {MANIFEST} (not a folder written by bertforge embed)")
    manifest = read_json(file)
    if manifest.get("kind") != KIND or not isinstance(manifest.get("shards"), list):
        raise BertforgeError(f"{file}: not a manifest written by bertforge embed")
    if manifest.get("version") != VERSION:
        raise BertforgeError(f"{file}: version {manifest.get('version')!r}; this bertforge reads version {VERSION}")
    return manifest


SETTINGS = {  # manifest key -> the flag that sets it, compared when a run resumes
    "corpus": "CORPUS", "text_column": "--text-column", "id_column": "--id-column", "dimensions": "--dimensions",
    "precision": "--precision", "calibration": "--calibration", "prompt": "--prompt", "bf16": "--bf16",
    "shard_rows": "--shard-rows", "formats": "--format", "sparse": "--sparse",
}
OLDER = {"sparse": False}  # a setting's value in a manifest written before it existed


def check_resumable(out: Path, found: dict, settings: dict) -> None:
    """A folder's manifest written with other settings is refused by name: another model's, or other flags."""
    if found["model"] != settings["model"]:
        shown = found["model"].get("repo_id") or found["model"].get("folder")
        raise BertforgeError(f"--out {out}: holds the embeddings of another model ({shown}, {MANIFEST}); write "
                             f"them to a new folder")
    def shown(value) -> str:
        return "(none)" if value is None else ",".join(value) if isinstance(value, list) else str(value)

    for key, flag in SETTINGS.items():
        if found.get(key, OLDER.get(key)) != settings[key]:
            raise BertforgeError(f"--out {out}: its {MANIFEST} was written with {flag} {shown(found.get(key))}, not "
                                 f"{shown(settings[key])}; resume with the same flags or write to a new folder")


def shard_name(index: int) -> str:
    return f"shard-{index:05d}"


# ---------------------------------------------------------------------------------------------------------
# Embedding a corpus


def read_calibration(path, dims: int) -> np.ndarray:
    """int8/uint8 ranges from a .npy of float calibration embeddings [rows, dims] (rows >= 2)."""
    path = Path(path)
    try:
        values = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as e:
        raise BertforgeError(f"--calibration {path}: cannot be read as a .npy array ({str(e).splitlines()[0]})") \
            from None
    if values.ndim != 2 or values.shape[1] != dims or not np.issubdtype(values.dtype, np.floating):
        raise BertforgeError(f"--calibration {path}: expected float embeddings [rows, {dims}], found "
                             f"{values.dtype} {list(values.shape)}")
    return ranges_of(values, f"--calibration {path}")


def embed_corpus(corpus, out, model, revision: str | None = None, text_column: str | None = None,
                 id_column: str | None = None, encoding: str = "utf-8", dimensions: int | None = None,
                 precision: str = "float32", calibration=None, prompt: str | None = None, bf16: bool = False,
                 batch_tokens: int = BATCH_TOKENS, shard_rows: int = SHARD_ROWS, formats=("npy",),
                 device: str | None = None, progress: bool = False, embedder: Embedder | None = None,
                 sparse: bool = False) -> dict:
    """Embed the passages of `corpus` into shards under `out` (see the module docstring), resuming a run of the
    same settings that stopped; the manifest. `sparse`: a SPLADE model's vectors (SparseEmbedder), stored as CSR
    shards."""
    check_precision(precision)
    if sparse and (precision != "float32" or dimensions is not None or "parquet" in formats):
        raise BertforgeError("--sparse stores float32 weights in CSR shards: not with --precision, --dimensions or "
                             "--format parquet")
    formats = sorted(set(formats) | {"npy"})
    for name in formats:
        if name not in FORMATS:
            raise BertforgeError(f"--format {name}: choose one of {', '.join(FORMATS)}")
    if shard_rows < 1 or batch_tokens < 1:
        raise BertforgeError("--shard-rows and --batch-tokens must be at least 1")
    corpus, out = Path(corpus), check_output(out, "--out", inputs=[corpus])
    if not corpus.is_file():
        raise BertforgeError(f"{corpus}: no such file" if not corpus.exists() else f"{corpus}: is a folder, not a "
                                                                                      "file")
    if "parquet" in formats:
        pyarrow_parquet("--format parquet")
    if calibration is not None and not is_scalar(precision):
        raise BertforgeError(f"--calibration: ranges quantize int8 and uint8 vectors, not {precision}")
    folder = embedder.folder if embedder else model_folder(model, revision)
    settings = {"model": model_identity(folder), "corpus": str(corpus.resolve()), "text_column": text_column,
                "id_column": id_column, "dimensions": dimensions, "precision": precision,
                "calibration": None if calibration is None else str(Path(calibration).resolve()), "prompt": prompt,
                "bf16": bf16, "shard_rows": shard_rows, "formats": formats, "sparse": sparse}
    rank, world = process_group()
    if world > 1:
        return _embed_as_rank(rank, world, corpus, out, model, revision, folder, settings, calibration, text_column,
                              id_column, encoding, progress, embedder, device, bf16, batch_tokens)
    with exclusive(out, "--out"):
        manifest = None
        if (out / MANIFEST).exists():
            manifest = read_manifest(out, "--out")
            check_resumable(out, manifest, settings)
            if manifest["complete"]:
                shards = len(manifest["shards"])
                log.info(f"{out}: already complete ({manifest['rows']} passages in {shards} "
                         f"shard{'s' * (shards != 1)})")
                return manifest
        for stale in out.glob(".shard-*.tmp"):  # a write cut short by a kill
            stale.unlink(missing_ok=True)
        embedder = embedder or make_embedder(model, folder, settings, device, bf16, batch_tokens)
        if manifest is None:
            manifest = new_manifest(model, revision, settings, embedder, calibration)
        _embed_shards(corpus, out, manifest, embedder, text_column, id_column, encoding, progress)
    if embedder.cut:
        log.warning(f"{embedder.cut} passages were longer than {embedder.pipe.max_length} tokens "
                    f"({embedder.pipe.length_source}) and were cut to it")
    return manifest


def make_embedder(model, folder: Path, settings: dict, device, bf16: bool, batch_tokens: int):
    if settings["sparse"]:
        return SparseEmbedder(model, device=device, bf16=bf16, batch_tokens=batch_tokens, prompt=settings["prompt"],
                              folder=folder)
    return Embedder(model, device=device, bf16=bf16, batch_tokens=batch_tokens, prompt=settings["prompt"],
                    dimensions=settings["dimensions"], folder=folder)


def new_manifest(model, revision, settings: dict, embedder, calibration) -> dict:
    """The manifest of a run that starts: its settings, the model's, no shards yet."""
    sparse, prompt = settings["sparse"], settings["prompt"]
    return {"kind": KIND, "version": VERSION, "model_name": str(model), "revision": revision,
            **settings, "dims": embedder.dims, "model_dims": embedder.model_dims,
            "normalized": embedder.normalized, "pooling": embedder.pipe.declared.pooling,
            "prompt_text": (embedder.pipe.prompts.get(prompt, "") if sparse and prompt else
                            embedder.pipe.declared.prompt if sparse else
                            embedder.pipe.prompted({"prompt_name": prompt}).prompt),
            "query_prompt": QUERY_PROMPT if QUERY_PROMPT in embedder.prompts else None,
            "max_length": embedder.pipe.max_length,
            "ranges": None if calibration is None else read_calibration(calibration, embedder.dims).tolist(),
            **({"layout": "csr", "activation": embedder.pipe.declared.activation} if sparse else {}),
            "shards": [], "rows": 0, "complete": False}


def _embed_shards(corpus: Path, out: Path, manifest: dict, embedder: Embedder, text_column, id_column, encoding,
                  progress: bool) -> None:
    shard_rows, done = manifest["shard_rows"], manifest["rows"]
    total = count_rows(corpus, encoding) if progress else 0
    stream = passages(corpus, text_column, id_column, encoding, skip=done)
    ids, texts, vectors = [], [], []
    with tqdm(total=max(total, done) or None, initial=done, unit="passage", desc="embed", disable=not progress,
              dynamic_ncols=True) as bar:
        for key, text in stream:
            ids.append(key)
            texts.append(text)
            if len(texts) == min(CHUNK_ROWS, shard_rows - sum(map(len, vectors))):
                vectors.append(embedder(texts))
                bar.update(len(texts))
                texts = []
                if len(ids) == shard_rows:
                    write_shard(out, manifest, ids, embedder.join(vectors))
                    ids, vectors = [], []
        if texts:
            vectors.append(embedder(texts))
            bar.update(len(texts))
        if ids:
            write_shard(out, manifest, ids, embedder.join(vectors))
    manifest["complete"] = True
    write_manifest(out, manifest)


# ---------------------------------------------------------------------------------------------------------
# Several processes (torchrun)


def process_group() -> tuple[int, int]:
    """(rank, world size): (0, 1) for one process; under torchrun (or any launcher that sets RANK, WORLD_SIZE,
    MASTER_ADDR and MASTER_PORT, on one machine or several) a gloo process group, joined once."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return 0, 1
    import torch.distributed as dist

    if not dist.is_initialized():  # the barriers wait as long as the slowest rank's last shard takes
        dist.init_process_group("gloo", timeout=datetime.timedelta(hours=RANK_TIMEOUT_HOURS))
    return dist.get_rank(), dist.get_world_size()


def rank_device(device: str | None) -> str | None:
    """A rank's device: --device as given, else its own GPU (LOCAL_RANK) where there are GPUs."""
    import torch

    if device is None and torch.cuda.is_available():
        return f"cuda:{int(os.environ.get('LOCAL_RANK', 0)) % torch.cuda.device_count()}"
    return device


def entry_name(index: int) -> str:
    """The file a rank writes after shard `index`'s files: its manifest entry (a shard exists once it does)."""
    return f"{shard_name(index)}.entry.json"


def _embed_as_rank(rank: int, world: int, corpus: Path, out: Path, model, revision, folder: Path, settings: dict,
                   calibration, text_column, id_column, encoding, progress: bool, embedder, device, bf16: bool,
                   batch_tokens: int) -> dict:
    """One rank of several: shard i is rank i % world's. Rank 0 starts the manifest (settings, no shards); each rank
    writes its shards, each followed by its entry file; after a barrier rank 0 lists every shard in the manifest,
    in corpus order, and marks it complete. A rank resumes as one process does: shards that have an entry file (or
    that the manifest lists) are kept."""
    import torch.distributed as dist

    if is_scalar(settings["precision"]) and calibration is None:
        raise BertforgeError(f"--precision {settings['precision']} under torchrun: give --calibration embeddings "
                             f"(the ranges cannot come from the first shard when every rank quantizes its own)")
    with exclusive(out, "--out") if rank == 0 else contextlib.nullcontext():
        manifest = None
        if (out / MANIFEST).exists():
            manifest = read_manifest(out, "--out")
            check_resumable(out, manifest, settings)
        complete = manifest is not None and manifest["complete"]
        if not complete:
            embedder = embedder or make_embedder(model, folder, settings, rank_device(device), bf16, batch_tokens)
            if rank == 0:
                for stale in out.glob(".shard-*.tmp"):
                    stale.unlink(missing_ok=True)
                if manifest is None:
                    manifest = new_manifest(model, revision, settings, embedder, calibration)
                    write_manifest(out, manifest)
        dist.barrier()  # rank 0's manifest exists; or every rank saw it complete
        if complete:
            return manifest
        manifest = read_manifest(out, "--out")
        done = {i for i in range(len(manifest["shards"]))} | \
            {int(f.name.split(".")[0].split("-")[1]) for f in out.glob("shard-*.entry.json")}
        rows = _embed_rank_shards(rank, world, corpus, out, manifest, done, embedder, text_column, id_column,
                                  encoding, progress and rank == 0)
        dist.barrier()  # every shard written
        if rank == 0:
            shard_rows, listed = manifest["shard_rows"], manifest["shards"]
            entries = []
            for index in range(-(-rows // shard_rows)):
                entry = listed[index] if index < len(listed) else read_json(out / entry_name(index))
                if entry["first_row"] != index * shard_rows:
                    raise BertforgeError(f"{out / entry_name(index)}: shard {index} starts at row "
                                         f"{entry['first_row']}, not {index * shard_rows}")
                entries.append(entry)
            manifest.update(shards=entries, rows=sum(e["rows"] for e in entries), complete=True)
            if manifest["rows"] != rows:
                raise BertforgeError(f"{out}: its shards hold {manifest['rows']} passages, the corpus {rows}: the "
                                     f"corpus changed since; embed it into a new folder")
            write_manifest(out, manifest)
            for entry in out.glob("shard-*.entry.json"):
                entry.unlink(missing_ok=True)
        dist.barrier()  # the manifest is complete
    if embedder.cut:
        log.warning(f"rank {rank}: {embedder.cut} passages were longer than {embedder.pipe.max_length} tokens "
                    f"({embedder.pipe.length_source}) and were cut to it")
    return read_manifest(out, "--out")


def _embed_rank_shards(rank: int, world: int, corpus: Path, out: Path, manifest: dict, done: set, embedder,
                       text_column, id_column, encoding, progress: bool) -> int:
    """This rank's shards not yet done, each in chunks as one process makes them; the corpus's row count."""
    shard_rows = manifest["shard_rows"]
    mine = (index for index in itertools.count(rank, world) if index not in done)
    before = next(i for i in itertools.count() if i not in done)  # shards before the last of these are full
    row = max(before - 1, 0) * shard_rows
    stream = passages(corpus, text_column, id_column, encoding, skip=row)
    ids, texts, vectors, index = [], [], [], next(mine)

    def flush():
        if texts:
            vectors.append(embedder(texts))
            bar.update(len(texts))
            texts.clear()
        if ids:
            entry = shard_files(out, manifest, index, index * shard_rows, ids, embedder.join(vectors))
            write_text_atomic(out / entry_name(index), json.dumps(entry, ensure_ascii=False))
            ids.clear()
            vectors.clear()

    with tqdm(unit="passage", desc=f"embed (rank {rank} of {world})", disable=not progress,
              dynamic_ncols=True) as bar:
        for key, text in stream:
            if row // shard_rows != index:
                flush()
                if row // shard_rows > index:
                    index = next(mine)
            if row // shard_rows == index:
                ids.append(key)
                texts.append(text)
                if len(texts) == min(CHUNK_ROWS, shard_rows - sum(map(len, vectors))):
                    vectors.append(embedder(texts))
                    bar.update(len(texts))
                    texts.clear()
            row += 1
        flush()
    return row


def write_shard(out: Path, manifest: dict, ids: list[str], floats) -> None:
    """One shard's files, then the manifest listing it."""
    entry = shard_files(out, manifest, len(manifest["shards"]), manifest["rows"], ids, floats)
    manifest["shards"].append(entry)
    manifest["rows"] += len(ids)
    write_manifest(out, manifest)


def shard_files(out: Path, manifest: dict, index: int, first_row: int, ids: list[str], floats) -> dict:
    """Shard `index`'s files (its rows from `first_row`); its manifest entry."""
    if manifest.get("sparse"):
        return sparse_shard_files(out, index, first_row, ids, floats)
    precision = manifest["precision"]
    if is_scalar(precision) and manifest["ranges"] is None:
        manifest["ranges"] = ranges_of(floats, f"the first shard ({len(floats)} passage(s); give --calibration "
                                                "embeddings where the corpus is this small)").tolist()
    values = quantize(floats, precision, None if manifest["ranges"] is None else
                      check_ranges(manifest["ranges"], manifest["dims"], str(out / MANIFEST)))
    name = shard_name(index)
    entry = {"vectors": f"{name}.npy", "ids": f"{name}.ids.json", "rows": len(ids), "first_row": first_row,
             "first_id": ids[0], "last_id": ids[-1]}
    with atomic_path(out / entry["vectors"]) as tmp, open(tmp, "wb") as f:
        np.save(f, values)
    write_text_atomic(out / entry["ids"], json.dumps(ids, ensure_ascii=False))
    if "parquet" in manifest["formats"]:
        entry["parquet"] = f"{name}.parquet"
        write_parquet(out / entry["parquet"], ids, values)
    return entry


def sparse_shard_files(out: Path, index: int, first_row: int, ids: list[str], rows: list) -> dict:
    """A shard of sparse vectors in CSR: indptr [rows + 1] int64, indices [nnz] int32 (token ids, ascending within a
    row), values [nnz] float32 (scipy.sparse.csr_matrix((values, indices, indptr), (rows, vocabulary)) reads them)."""
    name = shard_name(index)
    indptr = np.concatenate([[0], np.cumsum([len(i) for i, _ in rows])]).astype(np.int64)
    arrays = {"indptr": indptr,
              "indices": np.concatenate([i for i, _ in rows] or [[]]).astype(np.int32),
              "values": np.concatenate([v for _, v in rows] or [[]]).astype(np.float32)}
    entry = {**{key: f"{name}.{key}.npy" for key in arrays}, "ids": f"{name}.ids.json", "rows": len(ids),
             "nnz": int(indptr[-1]), "first_row": first_row, "first_id": ids[0], "last_id": ids[-1]}
    for key, values in arrays.items():
        with atomic_path(out / entry[key]) as tmp, open(tmp, "wb") as f:
            np.save(f, values)
    write_text_atomic(out / entry["ids"], json.dumps(ids, ensure_ascii=False))
    return entry


def write_manifest(out: Path, manifest: dict) -> None:
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


def write_parquet(path: Path, ids: list[str], values: np.ndarray) -> None:
    """A shard as Parquet: an "id" string column and a "vector" column of fixed-size lists."""
    import pyarrow as pa

    pq = pyarrow_parquet("--format parquet")
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    table = pa.table({"id": pa.array(ids, pa.string()),
                      "vector": pa.FixedSizeListArray.from_arrays(flat, values.shape[1])})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


# ---------------------------------------------------------------------------------------------------------
# Reading shards


def shard_vectors(folder: Path, entry: dict, manifest: dict) -> np.ndarray:
    """A shard's vectors, memory-mapped, checked against its manifest entry."""
    file = Path(folder) / entry["vectors"]
    try:
        values = np.load(file, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as e:
        raise BertforgeError(f"{file}: cannot be read ({str(e).splitlines()[0]})") from None
    expected = (entry["rows"], width(manifest["precision"], manifest["dims"]))
    if values.shape != expected or values.dtype != DTYPES[manifest["precision"]]:
        raise BertforgeError(f"{file}: holds {values.dtype} {list(values.shape)}; {MANIFEST} lists "
                             f"{np.dtype(DTYPES[manifest['precision']])} {list(expected)}")
    return values


def sparse_shard(folder: Path, entry: dict, manifest: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A CSR shard's indptr, indices and values, memory-mapped, checked against its manifest entry."""
    arrays = []
    for key, dtype, size in (("indptr", np.int64, entry["rows"] + 1), ("indices", np.int32, entry["nnz"]),
                             ("values", np.float32, entry["nnz"])):
        file = Path(folder) / entry[key]
        try:
            values = np.load(file, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError) as e:
            raise BertforgeError(f"{file}: cannot be read ({str(e).splitlines()[0]})") from None
        if values.shape != (size,) or values.dtype != dtype:
            raise BertforgeError(f"{file}: holds {values.dtype} {list(values.shape)}; {MANIFEST} lists "
                                 f"{np.dtype(dtype)} [{size}]")
        arrays.append(values)
    indptr, indices, _ = arrays
    if indptr[0] != 0 or indptr[-1] != entry["nnz"] or (len(indices) and int(indices.max()) >= manifest["dims"]):
        raise BertforgeError(f"{Path(folder) / entry['indptr']}: not the CSR rows of {entry['nnz']} weights over "
                             f"{manifest['dims']} tokens that {MANIFEST} lists")
    return tuple(arrays)


def shard_ids(folder: Path, entry: dict) -> list[str]:
    ids = read_json(Path(folder) / entry["ids"], expect=list)
    if len(ids) != entry["rows"]:
        raise BertforgeError(f"{Path(folder) / entry['ids']}: holds {len(ids)} ids; {MANIFEST} lists {entry['rows']}")
    return ids
