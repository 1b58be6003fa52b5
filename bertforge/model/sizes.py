"""A checkpoint's sizes known before anything is allocated: the tensors' shapes from the safetensors headers
(read without loading a tensor), the shapes a config gives a model (built on the meta device, which allocates
nothing), and which config field a shape comes from, for errors that name it. `checkpoint.from_pretrained`
compares the two before building the model, so that a config.json that does not describe its weights (1,000
layers beside weights of 2, a billion positions) is a one-line error instead of memory taken until the machine
gives out; `config.LIMITS` bounds every config, weights or not.
"""

from contextlib import contextmanager
from pathlib import Path

from safetensors import SafetensorError, safe_open

from ..core.errors import BertforgeError

DTYPES = {"F64": "float64", "F32": "float32", "F16": "float16", "BF16": "bfloat16", "I64": "int64"}

# The config field behind a tensor's first dimension, by the tensor's name; any other dimension is hidden_size,
# except the second of a feed-forward output (intermediate_size).
FIRST_DIMENSION = (("word_embeddings", "vocab_size"), ("position_embeddings", "max_position_embeddings"),
                   ("token_type_embeddings", "type_vocab_size"), ("intermediate.dense", "intermediate_size"),
                   ("classifier", "num_labels"), ("predictions.bias", "vocab_size"))


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


@contextmanager
def no_random_init():
    """torch.nn.init's initialisers as no-ops (as transformers' no_init_weights): the checkpoint overwrites them."""
    from torch import nn

    names = ("uniform_", "normal_", "trunc_normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_",
             "xavier_normal_", "zeros_", "ones_", "constant_")
    saved = {name: getattr(nn.init, name) for name in names}
    try:
        for name in names:
            setattr(nn.init, name, lambda tensor, *args, **kwargs: tensor)
        yield
    finally:
        for name, function in saved.items():
            setattr(nn.init, name, function)


def model_shapes(model_class, config) -> dict[str, tuple[int, ...]]:
    """The state dict's shapes of `model_class(config)`, built on the meta device (nothing allocated)."""
    import torch

    with torch.device("meta"), no_random_init():
        return {key: tuple(value.shape) for key, value in model_class(config).state_dict().items()}


def field_of(key: str, ours: tuple, theirs: tuple) -> str:
    """The config field a mismatch of tensor `key`'s shapes comes from, e.g. "vocab_size 600"."""
    differs = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
    if len(ours) != len(theirs) or not differs:
        return "the sizes"
    dim = differs[0]
    name = "hidden_size"
    if dim == 0:
        name = next((field for part, field in FIRST_DIMENSION if part in key), name)
    elif ".output.dense." in key and ".attention." not in key:
        name = "intermediate_size"
    return f"{name} {ours[dim]}"


def layer_count(keys, prefix: str) -> int:
    """How many encoder layers the tensor names hold."""
    return len({key.removeprefix(prefix + ".").split(".")[2] for key in keys
                if key.removeprefix(prefix + ".").startswith("encoder.layer.")})


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
