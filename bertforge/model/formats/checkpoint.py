"""Checkpoint folders in the Hugging Face layout: safe reading, atomic writing, mismatches said in plain words.

A folder holds `config.json`, `model.safetensors` (or the sharded `model.safetensors.index.json`), and the
tokenizer files. Pickled `pytorch_model.bin` files can run code when loaded, so they are refused unless the
caller trusts them explicitly, and even then read with `torch.load(weights_only=True)`.
"""

import json
import logging
from pathlib import Path


import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from . import google_checkpoint, sizes
from ..architectures.registry import ENCODER_PARTS, PARTS, architecture, head_of, model_class, read_config
from ..architectures.config import BertConfig, check_size
from ...core.errors import BertforgeError
from ...core.hub import model_folder, push_saved
from ...core.io import atomic_path, has_model_file, model_file, read_model_json, write_text_atomic

log = logging.getLogger("bertforge")

SAFETENSORS = "model.safetensors"
SAFETENSORS_INDEX = "model.safetensors.index.json"
PICKLE = "pytorch_model.bin"

# What each top-level part of a checkpoint is, for reports a person can act on.


def weight_files(folder: Path) -> list[Path]:
    """The weights files of a checkpoint folder (or the file itself): safetensors, its shards, or else a pickle."""
    if folder.is_file():
        return [folder]
    for name in (SAFETENSORS, SAFETENSORS_INDEX, PICKLE):
        if has_model_file(folder / name, folder):
            return shard_files(folder / name) if name == SAFETENSORS_INDEX else [folder / name]
    if not folder.exists():
        raise BertforgeError(f"{folder}: no such checkpoint folder")
    raise BertforgeError(f"{folder}: no {SAFETENSORS} (or {PICKLE}) in this folder")


def pickle_refused(file: Path, folder: Path) -> BertforgeError:
    return BertforgeError(f"{file}: pickle files can run code when loaded, so they are not read by default; convert "
                          f"it with `bertforge convert {folder} OUT` from a source you trust, or (in Python) pass "
                          "trust_pickle=True to from_pretrained to read it with torch.load(weights_only=True)")


def check_weights(folder, trust_pickle: bool = False) -> None:
    """A one-line error now, before a model is built, where the folder has no weights that read_weights would read
    (none at all, or a pickle not trusted) or its encoder's weights are not what its config.json describes (for
    commands that load the model later, in the background); a Google checkpoint's are its own module's to check."""
    folder = Path(folder)
    if google_checkpoint.find(folder) is not None:
        return
    for file in weight_files(folder):
        if file.suffix == ".bin" and not trust_pickle:
            raise pickle_refused(file, folder)
    config = read_config(folder / "config.json")
    check_header(model_class("BertModel", config), config, folder, ignore_mismatched_sizes=False)


def shard_files(index_file: Path) -> list[Path]:
    """The shards a `model.safetensors.index.json` names, each a file of its folder by the rule every file of a
    model folder is read by (`core.io.model_file`)."""
    index = read_model_json(index_file)
    try:
        names = list(index["weight_map"].values())
    except (KeyError, TypeError, AttributeError) as e:
        raise BertforgeError(f"{index_file}: not a valid shard index ({e!r})") from None
    files = []
    for name in dict.fromkeys(names):
        if not isinstance(name, str) or name == "":
            raise BertforgeError(f"{index_file}: weight_map names {name!r}, not a file name")
        try:
            model_file(index_file.parent / name, index_file.parent, limit=None)
        except BertforgeError as e:
            raise BertforgeError(f"{index_file}: weight_map names {name!r}: {e}") from None
        files.append(index_file.parent / name)
    return sorted(files)


def read_weights(folder, trust_pickle: bool = False, shapes: dict | None = None) -> tuple[dict, Path]:
    """The tensors of a checkpoint folder (or a weights file) and the file they came from. A Google checkpoint's
    are renamed and checked against `shapes` (name -> the model's shape) where given."""
    folder = Path(folder)
    google = google_checkpoint.find(folder)
    if google is not None:
        return google_checkpoint.read_weights(google, shapes)
    files = weight_files(folder)
    weights = {}
    for file in files:
        real = model_file(file, folder if folder.is_dir() else file.parent, limit=None)
        if file.suffix == ".bin":
            if not trust_pickle:
                raise pickle_refused(file, folder)
            try:
                weights.update(torch.load(real, map_location="cpu", weights_only=True))
            except Exception as e:  # torch raises several types for bad files
                raise BertforgeError(f"{file}: cannot be read as PyTorch weights ({str(e).splitlines()[0]})") from None
        else:
            try:
                weights.update(load_file(real))
            except (SafetensorError, OSError) as e:
                raise BertforgeError(f"{file}: not a valid safetensors file ({e})") from None
    return weights, files[0]


def normalise_keys(weights: dict, config, wants_prefix: bool) -> dict:
    """Old LayerNorm names (gamma/beta) to new ones, and the encoder's prefix (`bert.`, `model.`) added or removed to
    fit the model of `config`: a bare encoder's checkpoint (BertModel, ModernBertModel) names its parts without it."""
    arch = architecture(config)
    prefix, aliases = arch.prefix, arch.aliases_of(config)
    out = {}
    for key, value in weights.items():
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace("LayerNorm.beta", "LayerNorm.bias")
        if key.endswith("embeddings.position_ids") or key in aliases:
            continue  # a buffer, and names of tensors this model ties instead of storing twice
        has_prefix = key.startswith(prefix + ".")
        if wants_prefix and not has_prefix and key.split(".")[0] in ENCODER_PARTS:
            key = f"{prefix}.{key}"
        elif not wants_prefix and has_prefix:
            key = key[len(prefix) + 1:]
        out[key] = value
    return out


def part_name(key: str) -> str:
    for prefix, name in PARTS.items():
        if key.startswith(prefix) or key.startswith(prefix.removeprefix("bert.")):
            return name
    return key.rsplit(".", 1)[0]


def describe_mismatch(model_name: str, missing: list[str], unexpected: list[str],
                      new_head: bool = False) -> list[tuple[int, str]]:
    """(log level, plain-words line) about parts initialised fresh and parts of the checkpoint left unused;
    with `new_head` (fine-tuning), a fresh task head and unused heads are information, not warnings."""
    lines = []
    for part in sorted({part_name(k) for k in missing}):
        if part not in PARTS.values():
            lines.append((logging.WARNING, f"{part} missing from the checkpoint: initialised fresh"))
        elif new_head:
            lines.append((logging.INFO, f"{part}: a new head, initialised at random; fine-tuning trains it"))
        else:
            lines.append((logging.WARNING, f"{part} initialised fresh: fine-tune it before use"))
    for part in sorted({part_name(k) for k in unexpected}):
        lines.append((logging.INFO if new_head else logging.WARNING,
                      f"{part} in the checkpoint is not used by {model_name}"))
    return lines


class PretrainedMixin:
    """`from_pretrained` / `save_pretrained` for the model classes (which define `base_model_prefix`)."""

    saved_as: str | None = None  # the class config.json's `architectures` names, where not this one

    @classmethod
    def architecture(cls) -> str:
        """What config.json's `architectures` records for this class."""
        return cls.saved_as or cls.__name__

    @classmethod
    def from_pretrained(cls, folder, trust_pickle: bool = False, config: BertConfig | None = None,
                        skip_init: bool = False, *, revision: str | None = None, token: str | None = None,
                        num_labels: int | None = None, id2label: dict | None = None, label2id: dict | None = None,
                        dtype=None, torch_dtype=None, device=None, device_map=None,
                        ignore_mismatched_sizes: bool = False, new_head: bool = False, **config_overrides):
        """Build the model from `folder/config.json` (or `config`) and load the folder's weights; in eval mode.

        `folder` may be a Hub name (org/name, `core.hub.model_folder`: at `revision`, with `token`; a folder that
        exists wins). As transformers: `num_labels`, `id2label`, `label2id` set the task head's labels (LABEL_0..
        when only the number is given); `dtype` (or `torch_dtype`; "auto" reads the config's) casts the weights;
        `ignore_mismatched_sizes` initialises fresh a head whose checkpoint shape differs; `new_head`: the task
        head is expected to be fresh (fine-tuning starts one), said as information, not a warning. `device` (or
        a one-device `device_map`) moves the model. Other keywords replace BertConfig fields; any other name is
        a TypeError. `skip_init` builds the model without drawing random weights first (seconds for a
        base-sized embedding table on a CPU, and every value is overwritten): parts the checkpoint lacks are then
        zeros, so use it only where those parts are not used (a missing pooler, when reading hidden states).
        """
        google = google_checkpoint.find(folder)
        folder = Path(folder) if google else model_folder(folder, revision, token, trust_pickle=trust_pickle)
        if config is None:
            config = google_checkpoint.read_config(google) if google else read_config(folder / "config.json")
        if type(config) is not cls.config_class:  # another architecture's folder, a subclass's too: its class
            cls = own_class(cls, config, folder)
        if config_overrides.pop("attn_implementation", None) is not None:
            log.warning("attn_implementation is ignored: bertforge runs SDPA, or the written-out product where "
                        "dropout or output_attentions need it")
        config = configured(config, f"{cls.__name__}.from_pretrained", num_labels, id2label, label2id,
                            **config_overrides)
        check_header(cls, config, folder, ignore_mismatched_sizes)  # sizes checked before anything is allocated
        if skip_init:
            with sizes.no_random_init():
                model = cls(config)
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.zero_()
        else:
            model = cls(config)
        model.load_weights(folder, trust_pickle, ignore_mismatched_sizes, new_head)
        dtype = weights_dtype(dtype, torch_dtype, config)
        return model.to(device=placement(device, device_map), dtype=dtype).eval()

    def load_weights(self, folder, trust_pickle: bool = False, ignore_mismatched_sizes: bool = False,
                     new_head: bool = False) -> list[str]:
        """Load a checkpoint's tensors into this model; returns (and logs) the plain-words report.

        `ignore_mismatched_sizes`: a head whose shape differs from the checkpoint's is initialised fresh;
        `new_head`: a fresh task head and the checkpoint's unused heads are expected (fine-tuning): logged as
        information, the rest as warnings."""
        own = self.state_dict()
        prefix = self.base_model_prefix
        wants_prefix = any(k.startswith(prefix + ".") for k in own)
        shapes = {k: v.shape for k, v in normalise_keys(own, self.config, wants_prefix=True).items()}
        weights, file = read_weights(folder, trust_pickle, shapes)
        weights = normalise_keys(weights, self.config, wants_prefix)
        fresh = check_shapes(type(self), self.config, shapes_and_dtypes(own), shapes_and_dtypes(weights), file,
                             ignore_mismatched_sizes)
        for key in fresh:
            log.warning(f"{part_name(key)}: {key} is {tuple(weights[key].shape)} in the checkpoint, "
                        f"{tuple(own[key].shape)} here: initialised fresh")
            del weights[key]
        result = self.load_state_dict(weights, strict=False)
        self.fresh_parts = sorted({part_name(k) for k in result.missing_keys})  # initialised, not loaded
        report = describe_mismatch(type(self).__name__, result.missing_keys, result.unexpected_keys, new_head)
        for level, line in report:
            log.log(level, line)
        return [line for _, line in report]

    def save_pretrained(self, folder, tokenizer=None):
        """Write config.json and model.safetensors (each atomically), and the tokenizer when given."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        config = {**self.config.to_dict(), "architectures": [self.architecture()]}
        config.pop("torch_dtype", None)  # as transformers 5: the weights' dtype, under its new name
        config["dtype"] = str(next(self.parameters()).dtype).removeprefix("torch.")
        write_text_atomic(folder / "config.json", json.dumps(config, indent=2, sort_keys=True) + "\n")
        tensors = {k: v.detach().to("cpu").contiguous() for k, v in self.state_dict().items()}
        with atomic_path(folder / SAFETENSORS) as tmp:
            save_file(tensors, tmp, metadata={"format": "pt"})
        if tokenizer is not None:
            tokenizer.save_pretrained(folder)

    def push_to_hub(self, repo_id: str, private: bool = False, branch: str | None = None,
                    token: str | None = None) -> str:
        """Upload the files save_pretrained writes to the Hub repository `repo_id` in one commit (made where
        missing, private if asked, on `branch`: core.hub.push); the commit's URL."""
        return push_saved(self, repo_id, private, branch, token)


def shapes_and_dtypes(tensors: dict) -> dict[str, tuple[tuple, str]]:
    return {key: (tuple(value.shape), str(value.dtype).removeprefix("torch.")) for key, value in tensors.items()}


def own_class(cls, config, folder: Path) -> type:
    """The class of `config`'s architecture with the head `cls` has (as transformers' AutoModelFor... classes)."""
    head = head_of(cls.architecture())
    if head is None:
        raise BertforgeError(f"{folder}: a {config.model_type} checkpoint; {cls.__name__} reads "
                             f"{cls.config_class.model_type} checkpoints only")
    return model_class(head, config)


FLOATS = ("float64", "float32", "float16", "bfloat16")


def check_shapes(model_class, config, own: dict, theirs: dict, file: Path, ignore_mismatched_sizes: bool) -> list[str]:
    """The checkpoint's tensors (`theirs`: name -> (shape, dtype name), under the model's names) against the model's
    (`own`, likewise), by its architecture's parameter list: the heads to initialise fresh (another shape, with
    ignore_mismatched_sizes); any other difference is an error naming the config field, and so is an encoder part
    missing or left over (the config is wrong; only heads may be fresh) and a float weight stored as integers."""
    arch = architecture(config)
    config_name = google_checkpoint.CONFIG if file.suffix == ".index" else "config.json"
    fresh = []
    for key, (shape, dtype) in theirs.items():
        if key in own and own[key][1] in FLOATS and dtype not in FLOATS:
            raise BertforgeError(f"{file}: {key} holds {dtype} values; the model's weights are floating point "
                                 f"({', '.join(FLOATS)})")
        if key not in own or own[key][0] == shape:
            continue
        if ignore_mismatched_sizes and not arch.encoder_parts([key]):
            fresh.append(key)
            continue
        hint = "" if arch.encoder_parts([key]) else " (for a task head of another size, pass " \
            "ignore_mismatched_sizes=True)"
        field = sizes.field_of(model_class, config, key, own[key][0], shape)
        raise BertforgeError(f"{file}: {key} has shape {shape} but the config gives {own[key][0]} ({field}); the "
                             f"{config_name} does not describe these weights{hint}")
    kept = theirs.keys() - set(fresh)
    missing, extra = arch.encoder_parts(own.keys() - kept), arch.encoder_parts(kept - own.keys())
    if missing or extra:
        problems = ([f"{', '.join(sizes.layer_runs(missing))} not in the weights"] if missing else []) + (
            [f"weights have {', '.join(sizes.layer_runs(extra))} beyond the config"] if extra else [])
        if any(part.startswith("layer") for part in missing + extra):
            problems.append(f"num_hidden_layers {config.num_hidden_layers}, the weights have "
                            f"{arch.layer_count(theirs)} layers")
        raise BertforgeError(f"{file}: the {config_name} does not describe these weights: {'; '.join(problems)}")
    return fresh


def check_header(model_class, config, folder: Path, ignore_mismatched_sizes: bool) -> None:
    """Before the model is built: its shapes (on the meta device) against those the checkpoint's headers give
    (safetensors headers, a Google checkpoint's index; a pickle's are checked once loaded)."""
    google = google_checkpoint.find(folder)
    files = weight_files(folder) if google is None else []
    if any(file.suffix != ".safetensors" for file in files):
        return
    own = sizes.model_shapes(model_class, config)
    prefix = model_class.base_model_prefix
    wants_prefix = any(k.startswith(prefix + ".") for k in own)
    if google is not None:
        shapes = {key: shape for key, (shape, _) in normalise_keys(own, config, wants_prefix=True).items()}
        theirs, file = google_checkpoint.shapes_of(google, shapes)
        theirs = {key: (shape, "float32") for key, shape in theirs.items()}
    else:
        theirs, file = {k: (tuple(shape), dtype) for k, (shape, dtype) in sizes.read_header(files).items()}, files[0]
    check_shapes(model_class, config, own, normalise_keys(theirs, config, wants_prefix), file,
                 ignore_mismatched_sizes)


def configured(config, caller: str, num_labels=None, id2label=None, label2id=None, **fields):
    """`config` with transformers' keyword overrides: the labels (num_labels, id2label, label2id) and config fields;
    any other name is a TypeError naming `caller`."""
    overrides = {**fields, **labels_override(num_labels, id2label, label2id)}
    unknown = sorted(set(overrides) - set(config.to_dict()) - {"id2label"})
    if unknown:
        raise TypeError(f"{caller}() got unexpected keyword arguments: {', '.join(unknown)} (neither its own nor "
                        f"{type(config).__name__} fields; pass output_attentions and the like to forward)")
    return type(config).from_dict({**config.to_dict(), **overrides}) if overrides else config


def labels_override(num_labels, id2label, label2id) -> dict:
    """The config's id2label for transformers' num_labels / id2label / label2id keywords (none given: {})."""
    if id2label is not None:
        id2label = {int(k): v for k, v in id2label.items()}
        if label2id is not None and {v: k for k, v in id2label.items()} != {k: int(v) for k, v in label2id.items()}:
            raise BertforgeError(f"label2id {label2id} is not the inverse of id2label {id2label}")
        if num_labels is not None and num_labels != len(id2label):
            log.warning(f"num_labels={num_labels} but id2label has {len(id2label)} labels: id2label is used, "
                        "as transformers does")
        return {"id2label": id2label}
    if label2id is not None:  # transformers would keep its old id2label beside this label2id; bertforge cannot
        log.warning("label2id without id2label: the labels are taken from label2id (transformers keeps id2label)")
        return {"id2label": {int(i): label for label, i in label2id.items()}}
    if num_labels is not None:
        return {"id2label": {i: f"LABEL_{i}" for i in range(check_size("num_labels", num_labels))}}
    return {}


DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "float64": torch.float64}


def weights_dtype(dtype, torch_dtype, config: BertConfig) -> torch.dtype | None:
    """transformers' dtype (or its older name torch_dtype): a torch.dtype, its name, or "auto" (the config's)."""
    if torch_dtype is not None:
        if dtype is not None and dtype != torch_dtype:
            raise BertforgeError(f"dtype={dtype} and torch_dtype={torch_dtype} disagree; pass dtype alone")
        dtype = torch_dtype
    if dtype == "auto":
        dtype = config.extra.get("dtype") or config.extra.get("torch_dtype") or "float32"
    if isinstance(dtype, str):
        if dtype.removeprefix("torch.") not in DTYPES:
            raise BertforgeError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)} or 'auto'")
        dtype = DTYPES[dtype.removeprefix("torch.")]
    if dtype is not None and not isinstance(dtype, torch.dtype):
        raise BertforgeError(f"dtype {dtype!r} is not a torch dtype")
    return dtype


def placement(device, device_map):
    """The one device of `device` or a single-device `device_map` (bertforge does not split a model)."""
    if device_map is None:
        return device
    if device is not None:
        raise BertforgeError("pass device or device_map, not both")
    if isinstance(device_map, int):
        return torch.device("cuda", device_map)
    if isinstance(device_map, dict) and len(set(device_map.values())) == 1:
        return placement(None, next(iter(device_map.values())))
    if device_map == "auto" or isinstance(device_map, dict):
        raise BertforgeError(f"device_map={device_map!r}: bertforge keeps a model on one device; pass device=")
    return torch.device(device_map)
