"""`bertforge embed` under torchrun (embed.py's corpus over several processes: RANK, WORLD_SIZE, MASTER_ADDR; one
machine or several; a gloo group for the barriers alone). Shard i is rank i % world's: each rank reads the corpus,
embeds its own shards' rows as one process would (in the same chunks, so into the same vectors), and writes each
shard's files (embed_shards.py), then its entry file (shard-00000.entry.json, the manifest entry). Rank 0 writes the
manifest first (the settings, no shards) and, after a barrier, lists every shard in corpus order, complete; the entry
files go. A stopped run resumes per shard: those with an entry file, or listed by the manifest, are kept.
"""

from __future__ import annotations

import contextlib
import datetime
import itertools
import json
import logging
import os
from pathlib import Path

from tqdm import tqdm

from ..core.errors import BertforgeError
from ..core.heap import trim_heap
from ..core.io import exclusive, read_json, write_text_atomic
from ..core.tables import passages
from .embed_manifest import MANIFEST, check_resumable, new_manifest, read_manifest, write_manifest
from .embed_shards import shard_files, shard_name
from .embedders import CHUNK_ROWS, make_embedder
from .quantize import is_scalar

log = logging.getLogger("bertforge")

RANK_TIMEOUT_HOURS = 24  # how long a rank waits at a barrier for the others (torchrun)


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


def embed_as_rank(rank: int, world: int, corpus: Path, out: Path, model, revision, folder: Path, settings: dict,
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
            trim_heap()  # as one process does after a shard (embed.py)

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
