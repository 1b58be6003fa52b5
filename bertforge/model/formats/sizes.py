"""A checkpoint's sizes known before anything is allocated: the tensors' shapes from the safetensors headers
(read without loading a tensor), the shapes a config gives a model (built on the meta device, which allocates
nothing), and which config field a shape comes from, for errors that name it. `checkpoint.from_pretrained`
compares the two before building the model, so that a config.json that does not describe its weights (1,000
layers beside weights of 2, a billion positions) is a one-line error instead of memory taken until the machine
gives out; `config.LIMITS` bounds every config, weights or not.
"""

import dataclasses
import threading
from contextlib import contextmanager
from pathlib import Path

from safetensors import SafetensorError, safe_open

from ...core.errors import BertforgeError

DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64", "I32": "int32",
          "I16": "int16", "I8": "int8", "U8": "uint8", "BOOL": "bool"}


def read_header(files: list[Path]) -> dict[str, tuple[list[int], str]]:
    """(shape, dtype) of each tensor, by name, without reading the tensors."""
    header = {}
    for file in files:
        try:
            with safe_open(file, "pt") as f:
                for key in f.keys():
                    tensor = f.get_slice(key)
                    header[key] = tensor.get_shape(), DTYPES.get(tensor.get_dtype(), tensor.get_dtype())
        except (SafetensorError, OSError) as e:
            raise BertforgeError(f"{file}: not a valid safetensors file ({e})") from None
    return header


INITIALISERS = ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
                "xavier_normal_", "zeros_", "ones_", "constant_")


class _InitSkips:
    """Who is inside no_random_init now. Threads that build models at once (several models loading behind one
    server) share one patch: the first in saves torch's initialisers, the last out puts them back; each saving and
    restoring its own would leave the no-ops in place for good when their exits cross."""

    lock = threading.Lock()
    inside = 0
    saved: dict = {}


@contextmanager
def no_random_init():
    """torch.nn.init's initialisers as no-ops (as transformers' no_init_weights): the checkpoint overwrites them."""
    from torch import nn

    with _InitSkips.lock:
        if _InitSkips.inside == 0:
            _InitSkips.saved = {name: getattr(nn.init, name) for name in INITIALISERS}
            for name in INITIALISERS:
                setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        _InitSkips.inside += 1
    try:
        yield
    finally:
        with _InitSkips.lock:
            _InitSkips.inside -= 1
            if _InitSkips.inside == 0:
                for name, function in _InitSkips.saved.items():
                    setattr(nn.init, name, function)


def model_shapes(model_class, config) -> dict[str, tuple[tuple[int, ...], str]]:
    """(shape, dtype name) of each tensor in the state dict of `model_class(config)`, built on the meta device
    (nothing allocated)."""
    import torch

    with torch.device("meta"), no_random_init():
        return {key: (tuple(value.shape), str(value.dtype).removeprefix("torch."))
                for key, value in model_class(config).state_dict().items()}


def field_of(model_class, config, key: str, ours: tuple, theirs: tuple) -> str:
    """The config field a mismatch of tensor `key`'s shapes comes from, e.g. "vocab_size 600": the size field
    whose change changes that dimension of the model's tensor (tried on the meta device, for any architecture)."""
    differs = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if len(ours) != len(theirs) or not differs:
        return "the sizes"
    dim = differs[0]
    for name in size_fields(config) + ["num_labels"]:
        if shape_changes(model_class, config, name, key, ours, dim):
            return f"{name} {getattr(config, name)}"
    return "the sizes"


def size_fields(config) -> list[str]:
    """The config's own fields that are sizes (a whole number from 1 to a LIMITS bound, by its schema), under the
    architecture's names (DistilBERT's `dim`, `hidden_dim`), not the BERT names a config only reads."""
    return [f.name for f in dataclasses.fields(config) if (rule := config.schema.get(f.name)) is not None
            and rule.kind == "whole" and rule.low == 1 and rule.high is not None]


def shape_changes(model_class, config, name: str, key: str, ours: tuple, dim: int) -> bool:
    """Whether a config with another value of size field `name` gives tensor `key` another size in `dim`."""
    from ..architectures.config import size

    value = getattr(config, name)
    # the width changes by a head's width at a time, so that the heads still divide it
    step = config.num_attention_heads if config.schema.get(name) == size("hidden_size") else 1
    for other in (value + step, value - step):
        try:
            changed = config.with_labels([f"LABEL_{i}" for i in range(other)]) if name == "num_labels" \
                else dataclasses.replace(config, **{name: other})
        except BertforgeError:
            continue  # over the field's bound, or under 1: try the other way
        shape = model_shapes(model_class, changed).get(key, ((),))[0]
        return len(shape) > dim and shape[dim] != ours[dim]
    return False


def layer_runs(parts: list[str]) -> list[str]:
    """Encoder parts with runs of three or more layers shortened: ["layer 2", ..., "layer 999"] -> "layers 2-999"."""
    tables = [p for p in parts if not p.startswith("layer ")]
    layers = [int(p.split()[1]) for p in parts if p.startswith("layer ")]
    runs, start = [], None
    for i, layer in enumerate(layers):
        start = layer if start is None else start
        if i + 1 == len(layers) or layers[i + 1] != layer + 1:
            short = layer - start >= 2
            runs += [f"layers {start}-{layer}"] if short else [f"layer {n}" for n in range(start, layer + 1)]
            start = None
    return tables + runs
