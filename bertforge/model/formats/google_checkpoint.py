"""Google's BERT checkpoint folders: `bert_config.json`, `vocab.txt` and a TensorFlow checkpoint
(`bert_model.ckpt.index` + `.data-*` shards), as released with the paper and written by `run_pretraining.py`.

This module maps Google's variable names onto this package's (Hugging Face) names, reads the config the way
Google's `modeling.py` computes, and converts a folder to the Hugging Face layout. The file format itself is
tf_checkpoint.py.
"""

import dataclasses
import logging
import re
from pathlib import Path

import torch

from ..architectures.config import BertConfig, check_size
from ...core.errors import BertforgeError
from .tf_checkpoint import TFCheckpoint, find_prefix

log = logging.getLogger("bertforge")

CONFIG = "bert_config.json"
OPTIMIZER_SLOTS = ("adam_m", "adam_v")
TRAINING_STATE = ("global_step",)

# Heads whose Google names do not follow the module path: [out, in] matrices, stored as such.
HEADS = {
    "cls/predictions/output_bias": "cls.predictions.bias",
    "cls/seq_relationship/output_weights": "cls.seq_relationship.weight",
    "cls/seq_relationship/output_bias": "cls.seq_relationship.bias",
    "output_weights": "classifier.weight",  # run_classifier.py
    "output_bias": "classifier.bias",
    "cls/squad/output_weights": "qa_outputs.weight",  # run_squad.py
    "cls/squad/output_bias": "qa_outputs.bias",
}
LEAVES = {"kernel": "weight", "gamma": "weight", "beta": "bias", "bias": "bias"}


def find(path) -> Path | None:
    """The checkpoint prefix when `path` is a Google checkpoint (a folder with bert_config.json and no
    config.json, or the `.ckpt` prefix inside one); None for anything else."""
    path = Path(path)
    folder = path if path.is_dir() else path.parent
    if not (folder / CONFIG).is_file() or (path / "config.json").is_file():
        return None
    if not path.is_dir() and not (path.suffix == ".index" or ".ckpt" in path.name):
        return None  # another file of the folder, or a name that is no checkpoint's
    if path.is_dir():
        prefix = find_prefix(path)
        if prefix is None:
            raise BertforgeError(f"{path}: holds {CONFIG} but no TensorFlow checkpoint (*.ckpt.index)")
        return prefix
    return path.with_suffix("") if path.suffix == ".index" else path


def hf_name(name: str) -> tuple[str, bool] | None:
    """The parameter name for a Google variable, and whether its matrix is stored transposed ([in, out]);
    None for names that are not BERT weights."""
    if name in HEADS:
        return HEADS[name], False
    parts = name.split("/")
    if parts[0] not in ("bert", "cls") or len(parts) < 3:
        return None
    if parts[1] == "embeddings" and parts[-1].endswith("_embeddings"):
        return ".".join(parts) + ".weight", False
    if parts[-1] not in LEAVES:
        return None
    path = ".".join(re.sub(r"^layer_(\d+)$", r"layer.\1", p) for p in parts[:-1])
    return f"{path}.{LEAVES[parts[-1]]}", parts[-1] == "kernel"


def skipped(name: str) -> str | None:
    """Why a variable is left out: optimizer slots and the step counter are training state, not weights."""
    if name.rsplit("/", 1)[-1] in OPTIMIZER_SLOTS:
        return "optimizer"
    if name in TRAINING_STATE:
        return "training"
    return None if hf_name(name) else "unknown"


def read_config(prefix: Path, checkpoint: TFCheckpoint | None = None, gelu: str = "gelu_new") -> BertConfig:
    """bert_config.json as Google's modeling.py computes it: its `gelu` is the tanh approximation in the current
    code (`gelu_new` here; the first release computed the exact erf form, `gelu`), LayerNorm epsilon 1e-12, and
    a classifier's labels counted from `output_weights`."""
    config = BertConfig.from_json_file(Path(prefix).parent / CONFIG)
    changes = {"layer_norm_eps": 1e-12}
    if config.hidden_act == "gelu":
        changes["hidden_act"] = gelu
    checkpoint = checkpoint or TFCheckpoint(prefix)
    if "output_weights" in checkpoint.entries:
        labels = check_size("num_labels", checkpoint.entries["output_weights"].shape[0])
        changes["id2label"] = {i: f"LABEL_{i}" for i in range(labels)}
    return dataclasses.replace(config, **changes)


def architecture(checkpoint: TFCheckpoint) -> str:
    """The model class whose heads the checkpoint holds."""
    names = checkpoint.entries
    if "cls/squad/output_weights" in names:
        return "BertForQuestionAnswering"
    if "output_weights" in names:
        return "BertForSequenceClassification"
    if any(n.startswith("cls/predictions/") for n in names):
        return "BertForPreTraining" if "cls/seq_relationship/output_weights" in names else "BertForMaskedLM"
    return "BertModel"


def header(prefix) -> tuple[BertConfig, dict[str, tuple[list[int], str]], list[Path]]:
    """The config (architecture included), (shape, dtype) of each weight under our names, and the files, from
    the index alone."""
    checkpoint = TFCheckpoint(prefix)
    config = read_config(prefix, checkpoint)
    config.extra["architectures"] = [architecture(checkpoint)]
    shapes = {}
    for name, entry in checkpoint.entries.items():
        if not skipped(name):
            key, transposed = hf_name(name)
            shapes[key] = list(entry.shape[::-1] if transposed else entry.shape), entry.dtype
    shards = sorted({checkpoint.shard_path(e.shard) for e in checkpoint.entries.values()})
    return config, shapes, [checkpoint.index, *shards]


def checked_names(checkpoint: TFCheckpoint, shapes: dict | None = None) -> dict[str, tuple[str, bool]]:
    """Google name -> (this package's name, transposed) of the checkpoint's BERT weights, each shape checked
    against `shapes` (name -> the model's shape) where given, from the index alone."""
    names = {}
    for name, entry in checkpoint.entries.items():
        if skipped(name):
            continue
        key, transposed = names[name] = hf_name(name)
        if shapes is not None and key in shapes:
            want = tuple(shapes[key])[::-1] if transposed else tuple(shapes[key])
            if entry.shape != want:
                raise BertforgeError(f"{checkpoint.index}: {name} has shape {entry.shape} but "
                                     f"{checkpoint.prefix.parent / CONFIG} gives {want}; the config does not "
                                     "describe these weights")
    return names


def shapes_of(prefix, shapes: dict) -> tuple[dict[str, tuple[int, ...]], Path]:
    """The checkpoint's shapes under this package's names, checked against `shapes` (see checked_names), and the
    index file: what loading would find, without reading a tensor."""
    checkpoint = TFCheckpoint(prefix)
    found = {}
    for name, (key, transposed) in checked_names(checkpoint, shapes).items():
        shape = tuple(checkpoint.entries[name].shape)
        found[key] = shape[::-1] if transposed else shape
    return found, checkpoint.index


def as_torch(checkpoint: TFCheckpoint, name: str) -> torch.Tensor:
    values = torch.from_numpy(checkpoint.read(name))
    return values.view(torch.bfloat16) if checkpoint.entries[name].dtype == "bfloat16" else values


def read_weights(prefix, shapes: dict | None = None) -> tuple[dict[str, torch.Tensor], Path]:
    """The checkpoint's BERT weights under this package's names (views of the mapped file, no copy), and the
    index file. With `shapes` (name -> the model's shape), each tensor's shape is checked against it."""
    checkpoint = TFCheckpoint(prefix)
    weights = {}
    for name, (key, transposed) in checked_names(checkpoint, shapes).items():
        tensor = as_torch(checkpoint, name)
        weights[key] = tensor.t() if transposed else tensor
    for why, line in report(checkpoint):
        (log.warning if why == "unknown" else log.info)(line)
    return weights, checkpoint.index


def report(checkpoint: TFCheckpoint) -> list[tuple[str, str]]:
    """What loading leaves out, in plain words: (why, line) for the optimizer, training state, unknown names."""
    left_out = {"optimizer": [], "training": [], "unknown": []}
    for name in checkpoint.entries:
        why = skipped(name)
        if why:
            left_out[why].append(name)
    lines = []
    if left_out["optimizer"]:
        slots = sorted({n.rsplit("/", 1)[1] for n in left_out["optimizer"]})
        lines.append(("optimizer", f"skipped the optimizer's {' and '.join(slots)} "
                                   f"({len(left_out['optimizer'])} tensors)"))
    if left_out["training"]:
        lines.append(("training", f"skipped the training state: {', '.join(left_out['training'])}"))
    if left_out["unknown"]:
        lines.append(("unknown", f"skipped, not BERT weights: {', '.join(left_out['unknown'])}"))
    return lines
