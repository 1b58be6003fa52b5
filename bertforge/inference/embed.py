"""A corpus embedded into shards of vectors (`bertforge embed`), as a stream: what is in memory is a shard's rows,
whatever the corpus's size.

The passages are read a row at a time (`core.tables.passages`: text, CSV, TSV, JSON lines, Parquet), embedded in
chunks by the sentence-embedding pipeline (embedders.Embedder: the folder's pooling, Dense modules and normalisation;
batches of similar lengths under a token budget), cut to `dimensions` (Matryoshka: the first N values, then unit
length again where the model normalises), quantized (quantize.py) and written to `out` in shards, the manifest
listing them (embed_shards.py: the files; embed_manifest.py: the manifest and the settings a resumed run must keep).

Each file is written whole or not at all, the manifest last: a shard exists once the manifest lists it. A run killed
at any point (kill -9 included) resumes where it stopped, with the same flags: the listed shards are kept, the corpus
is read past their rows, and no row is lost or written twice. Chunks never straddle a shard, so a resumed run batches
each shard's rows as an uninterrupted run does, and writes the same vectors. int8/uint8 ranges come from
`calibration` embeddings, else from the first shard's vectors (the whole corpus's where it fits in one shard, as
sentence-transformers computes them). Under torchrun the shards are shared among the ranks (embed_ranks.py); with
`sparse`, a SPLADE model's vectors (embedders.SparseEmbedder) are stored as CSR shards.

The names of those modules stay importable from here.
"""

from __future__ import annotations

import logging
from pathlib import Path

from tqdm import tqdm

from ..core.errors import BertforgeError
from ..core.heap import trim_heap
from ..core.hub import model_folder
from ..core.io import check_output, exclusive
from ..core.tables import count_rows, passages, pyarrow_parquet
from .embed_manifest import (KIND, MANIFEST, OLDER, QUERY_PROMPT, SETTINGS, VERSION, check_resumable,  # noqa: F401
                             model_identity, new_manifest, read_calibration, read_manifest, write_manifest)
from .embed_ranks import RANK_TIMEOUT_HOURS, embed_as_rank, entry_name, process_group, rank_device  # noqa: F401
from .embed_shards import (shard_files, shard_ids, shard_name, shard_vectors, sparse_shard,  # noqa: F401
                           sparse_shard_files, write_parquet, write_shard)
from .embedders import BATCH_TOKENS, CHUNK_ROWS, Embedder, SparseEmbedder, make_embedder  # noqa: F401
from .quantize import check_precision, is_scalar

log = logging.getLogger("bertforge")

FORMATS = ("npy", "parquet")
SHARD_ROWS = 100_000


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
        return embed_as_rank(rank, world, corpus, out, model, revision, folder, settings, calibration, text_column,
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


def _embed_shards(corpus: Path, out: Path, manifest: dict, embedder: Embedder, text_column, id_column, encoding,
                  progress: bool) -> None:
    """The corpus's rows past the manifest's, in chunks of CHUNK_ROWS that never straddle a shard, each shard written
    once full (write_shard: looked up here, so that a test can stop a run between shards); then the manifest
    complete."""
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
                    trim_heap()  # else the heap keeps the pages of its batches, growing with the corpus
        if texts:
            vectors.append(embedder(texts))
            bar.update(len(texts))
        if ids:
            write_shard(out, manifest, ids, embedder.join(vectors))
    manifest["complete"] = True
    write_manifest(out, manifest)
