"""The shards of an embeddings folder (`bertforge embed`, embed.py): each written whole or not at all
(`core.io.atomic_path`), before the manifest that lists it (embed_manifest.py), and read back memory-mapped, checked
against their manifest entry (search.py, vector_index.py):

    out/manifest.json              the model (and its Hub commit), dims, precision, int8 ranges, prompt, shards
    out/shard-00000.npy            the vectors [rows, dims] (packed bits [rows, dims / 8] for binary precisions)
    out/shard-00000.ids.json       their ids, in order
    out/shard-00000.parquet        with formats "parquet": id and vector columns

The vectors are quantized (quantize.py) to the manifest's precision as they are written; int8/uint8 ranges not given
come from the first shard's vectors. A SPLADE model's vectors (`bertforge embed --sparse`), a weight per vocabulary
entry, most of them 0, are stored as CSR, the manifest saying so ("sparse": true, "layout": "csr", "dims": the
vocabulary's size):

    out/shard-00000.indptr.npy     [rows + 1] int64: row i's weights are at indptr[i]:indptr[i + 1]
    out/shard-00000.indices.npy    [nnz] int32: their token ids, ascending within a row
    out/shard-00000.values.npy     [nnz] float32: the weights
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.io import atomic_path, read_json, write_text_atomic
from ..core.tables import pyarrow_parquet
from .embed_manifest import MANIFEST, write_manifest
from .quantize import DTYPES, check_ranges, is_scalar, quantize, ranges_of, width


def shard_name(index: int) -> str:
    """The name shard `index`'s files start with (shard-00000), in corpus order."""
    return f"shard-{index:05d}"


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


def write_parquet(path: Path, ids: list[str], values: np.ndarray) -> None:
    """A shard as Parquet: an "id" string column and a "vector" column of fixed-size lists."""
    import pyarrow as pa

    pq = pyarrow_parquet("--format parquet")
    flat = pa.array(np.ascontiguousarray(values).reshape(-1))
    table = pa.table({"id": pa.array(ids, pa.string()),
                      "vector": pa.FixedSizeListArray.from_arrays(flat, values.shape[1])})
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)


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
    """A shard's ids, in order, checked to be as many as its manifest entry's rows."""
    ids = read_json(Path(folder) / entry["ids"], expect=list)
    if len(ids) != entry["rows"]:
        raise BertforgeError(f"{Path(folder) / entry['ids']}: holds {len(ids)} ids; {MANIFEST} lists {entry['rows']}")
    return ids
