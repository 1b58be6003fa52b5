"""An embeddings folder's manifest.json (`bertforge embed`, embed.py): what a run writes first and last, and what lets
a stopped run resume. It holds the run's settings (the model and its Hub commit, the corpus, the flags), what the
model gives (dims, normalisation, pooling, prompt texts), the int8/uint8 ranges, and the shards written so far (their
files are embed_shards.py's); a run is complete once it says so. A run resumes only with the settings it started
with: another model's folder, or other flags, are refused by name (`check_resumable`).

int8/uint8 ranges come from `calibration` embeddings (`read_calibration`), else from the first shard's vectors, and
are kept in the manifest so that queries are quantized the same way (search.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.hub import hub_origin
from ..core.io import read_json, write_text_atomic
from .quantize import ranges_of

MANIFEST = "manifest.json"
KIND = "bertforge embeddings"
VERSION = 1
QUERY_PROMPT = "query"  # the prompt a search embeds its queries with, where the folder names one
SETTINGS = {  # manifest key -> the flag that sets it, compared when a run resumes
    "corpus": "CORPUS", "text_column": "--text-column", "id_column": "--id-column", "dimensions": "--dimensions",
    "precision": "--precision", "calibration": "--calibration", "prompt": "--prompt", "bf16": "--bf16",
    "shard_rows": "--shard-rows", "formats": "--format", "sparse": "--sparse",
}
OLDER = {"sparse": False}  # a setting's value in a manifest written before it existed


def model_identity(folder: Path) -> dict:
    """What names a model in a manifest: its Hub repository and commit for a cache folder, else its path."""
    origin = hub_origin(folder)
    return {"repo_id": origin["repo_id"], "commit": origin["commit"]} if origin else \
        {"folder": str(Path(folder).resolve())}


def new_manifest(model, revision, settings: dict, embedder, calibration) -> dict:
    """The manifest of a run that starts: its settings, what `embedder` (embedders.py) gives, the ranges of
    `calibration` (a .npy, or None), no shards yet."""
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


def write_manifest(out: Path, manifest: dict) -> None:
    """`out`'s manifest.json, whole or not at all: a shard exists once the manifest written lists it."""
    write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n")


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
