"""Sentence-transformers folders: the pooling, normalisation and length a folder declares, read and written.

A sentence-transformers folder is a Hugging Face model folder with, beside it, `modules.json` (the modules run in
order: a Transformer at "", a Pooling at "1_Pooling", any Dense modules (a linear map of the sentence vector, with
an activation: a student's map to its teacher's dimension), an optional Normalize), `1_Pooling/config.json` (which
pooling), `sentence_bert_config.json` (max_seq_length, do_lower_case) and optionally
`config_sentence_transformers.json` (named prompts, the default one prepended to every text; `read_prompts` reads
them all, for a caller that names one).

`read_sentence_folder` turns those files into a `SentencePooling`, which `pipeline("sentence-embedding")` and
`bertforge features --level sentence` take as their defaults; `pool` is the one definition of the pooling
modes, with sentence-transformers' semantics (its `Pooling` module), on the real tokens of one text.
`load_dense` reads the Dense modules' weights and `apply_dense` runs them on pooled vectors.
`write_sentence_folder` adds the files beside a model folder so that `SentenceTransformer(folder)` loads it,
and `keep_sentence_folder` carries a folder's files over to a model made from it (an export, a fine-tuned copy).
"""

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ...core.errors import BertforgeError
from ...core.io import (atomic_path, copy_model_file, has_model_file, model_file, outside_folder, read_json,
                       read_model_json, write_json)

MODULES = "modules.json"
POOLING_CONFIG = "1_Pooling/config.json"
NORMALIZE_CONFIG = "2_Normalize/config.json"
DENSE = "2_Dense"  # where write_sentence_folder puts a Dense module (its Normalize then at 3_Normalize)
DENSE_WEIGHTS = "model.safetensors"
SBERT_CONFIG = "sentence_bert_config.json"
ST_CONFIG = "config_sentence_transformers.json"
KEPT = (SBERT_CONFIG, ST_CONFIG, MODULES)  # beside the modules' own files; modules.json last

# The pooling modes, in the order of sentence-transformers' legacy config keys (the order it concatenates them).
LEGACY_KEYS = {"pooling_mode_cls_token": "cls", "pooling_mode_max_tokens": "max",
               "pooling_mode_mean_tokens": "mean", "pooling_mode_mean_sqrt_len_tokens": "mean_sqrt_len_tokens",
               "pooling_mode_weightedmean_tokens": "weightedmean", "pooling_mode_lasttoken": "lasttoken"}
POOLINGS = ("mean", "cls", "max", "lasttoken", "mean_sqrt_len_tokens", "weightedmean")
# the last part of a modules.json "type" -> the types that may follow it
MODULE_ORDER = {"": ("Transformer",), "Transformer": ("Pooling",), "Pooling": ("Dense", "Normalize"),
                "Dense": ("Dense", "Normalize"), "Normalize": ()}
# a Dense module's activation_function (sentence-transformers writes the class's full name) -> bertforge's name
ACTIVATIONS = {"torch.nn.modules.linear.Identity": "identity", "torch.nn.modules.activation.Tanh": "tanh"}
IDENTITY = "torch.nn.modules.linear.Identity"


@dataclass(frozen=True)
class Dense:
    """A Dense module's declaration (its config.json): activation(weight @ vector + bias), weight [out, in]; its
    weights are read by `load_dense`."""

    path: str
    in_features: int
    out_features: int
    bias: bool = True
    activation: str = "identity"  # or "tanh"


@dataclass(frozen=True)
class SentencePooling:
    """How a folder turns token vectors into one sentence vector. `prompt` is prepended to every text (the
    folder's default prompt); with include_prompt False its tokens ([CLS] included) are left out of the pooling."""

    pooling: str = "mean"
    normalize: bool = True
    max_seq_length: int | None = None
    include_prompt: bool = True
    do_lower_case: bool = False
    prompt: str = ""
    dense: tuple[Dense, ...] = ()

    def dimension(self, hidden_size: int) -> int:
        """The sentence vector's size: the last Dense module's outputs, else the encoder's width."""
        return self.dense[-1].out_features if self.dense else hidden_size

    def text(self, text: str) -> str:
        """A text as the folder's Transformer module reads it: prompted, lower-cased if declared."""
        text = self.prompt + text
        return text.lower() if self.do_lower_case else text

    def summary(self) -> str:
        """One line for `bertforge info`."""
        parts = [f"{self.pooling} pooling",
                 *(f"Dense {d.in_features} -> {d.out_features}" + ("" if d.activation == "identity" else
                                                                  f" {d.activation}") for d in self.dense),
                 "normalized" if self.normalize else "not normalized",
                 f"max_seq_length {self.max_seq_length or 'of the tokenizer'}"]
        if self.do_lower_case:
            parts.append("lower-cased")
        if self.prompt:
            parts.append(f"prompt {self.prompt!r}{'' if self.include_prompt else ' left out of the pooling'}")
        return ", ".join(parts)

    def skipped(self, tokenizer) -> int:
        """How many tokens of each text the pooling leaves out: the prompt's with its [CLS], without include_prompt
        (sentence-transformers counts the prompt's tokens less its final [SEP])."""
        if self.include_prompt or not self.prompt:
            return 0
        return len(tokenizer(self.text(""))["input_ids"]) - 1


def pool(states: np.ndarray, mode: str, skip: int = 0) -> np.ndarray:
    """One vector from a text's token vectors [tokens, dim] (its real tokens, [CLS] and [SEP] included), the
    first `skip` tokens (a prompt's) left out, as sentence-transformers' Pooling computes it."""
    kept = states[skip:]
    if mode == "cls":
        return (kept if len(kept) else states)[0].copy()
    if mode == "lasttoken":
        return (kept if len(kept) else states)[-1].copy()
    if mode == "max":
        return kept.max(0) if len(kept) else np.full(states.shape[1], -np.inf, dtype=states.dtype)
    if mode in ("mean", "mean_sqrt_len_tokens"):
        count = float(len(kept)) if mode == "mean" else float(np.sqrt(len(kept)))
        return (kept.sum(0, dtype=np.float32) / max(count, 1e-9)).astype(states.dtype, copy=False)
    if mode == "weightedmean":  # each token weighted by its position from 1, the skipped ones keeping theirs
        weights = np.arange(skip + 1, len(states) + 1, dtype=np.float32)[:, None]
        return (kept * weights).sum(0) / max(weights.sum(), 1e-9)
    raise BertforgeError(f"pooling must be one of {', '.join(POOLINGS)}, not {mode!r}")


def normalized(vectors: np.ndarray) -> np.ndarray:
    """Rows of unit length (a zero row stays zero), as sentence-transformers' Normalize."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=-1, keepdims=True), 1e-12)


def check_pooling(pooling: str, name: str = "pooling") -> str:
    if pooling not in POOLINGS:
        raise BertforgeError(f"{name} must be one of {', '.join(POOLINGS)}, not {pooling!r}")
    return pooling


# ---------------------------------------------------------------------------------------------------------
# Reading


def read_sentence_folder(folder) -> SentencePooling | None:
    """The folder's declared pooling, or None for a plain model folder (no modules.json)."""
    folder = Path(folder)
    if not has_model_file(folder / MODULES, folder):
        return None
    modules = module_paths(folder)
    paths = dict(modules)
    pooling, include_prompt = read_pooling(folder, folder / paths["Pooling"] / "config.json")
    if "Normalize" in paths:
        check_normalize(folder, folder / paths["Normalize"] / "config.json")
    dense = tuple(read_dense(folder, path) for kind, path in modules if kind == "Dense")
    max_seq_length, do_lower_case = read_sbert_config(folder)
    return SentencePooling(pooling, "Normalize" in paths, max_seq_length, include_prompt, do_lower_case,
                           read_prompt(folder), dense)


def module_paths(folder: Path) -> list[tuple[str, str]]:
    """(module type, path) from modules.json: a Transformer at "", a Pooling, any Dense modules, then maybe a
    Normalize (their files read by the rule of every model file, `core.io.model_file`: inside the folder)."""
    file = folder / MODULES
    modules = read_model_json(file, folder, expect=list)
    if any(isinstance(m, dict) and str(m.get("type", "")).endswith("SpladePooling") for m in modules):
        raise BertforgeError(f"{file}: a SPLADE (SparseEncoder) folder: its vectors are the sparse-embedding "
                             f"pipeline's (sparse_folder.py; `bertforge embed --sparse`), not a sentence embedding")
    found = []
    for i, module in enumerate(modules):
        if not isinstance(module, dict) or not isinstance(module.get("type"), str) \
                or not isinstance(module.get("path"), str):
            raise BertforgeError(f"{file}: [{i}] must be an object with a \"type\" and a \"path\" string")
        kind = module["type"].rsplit(".", 1)[-1]
        if kind not in MODULE_ORDER[found[-1][0] if found else ""]:
            raise BertforgeError(f"{file}: [{i}] \"type\" {module['type']} is not supported here: bertforge reads a "
                                 f"Transformer, a Pooling, any Dense modules and an optional Normalize, in that order")
        if kind == "Transformer" and module["path"] != "":
            raise BertforgeError(f"{file}: [{i}] \"path\" {module['path']!r}: bertforge reads the Transformer "
                                 f"from the folder itself (path \"\")")
        if outside_folder(folder / module["path"], folder):
            raise BertforgeError(f"{file}: [{i}] \"path\" {module['path']!r} is outside the folder")
        found.append((kind, module["path"]))
    if len(found) < 2:
        raise BertforgeError(f"{file}: no Pooling module: bertforge reads a Transformer then a Pooling")
    return found


def whole_number(config: dict, key: str, file: Path) -> int:
    value = config.get(key)
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BertforgeError(f"{file}: \"{key}\" must be a whole number of at least 1, not {value!r}")
    return value


def read_dense(folder: Path, path: str) -> Dense:
    """A Dense module's config: its sizes, bias and activation (sentence-transformers' default: Tanh)."""
    file = folder / path / "config.json"
    config = read_model_json(file, folder)
    name = config.get("activation_function", "torch.nn.modules.activation.Tanh")
    if name not in ACTIVATIONS:
        raise BertforgeError(f"{file}: \"activation_function\" {name!r}: bertforge applies "
                             f"{' or '.join(ACTIVATIONS)}")
    if flag(config, "use_residual", file, False):
        raise BertforgeError(f"{file}: \"use_residual\" true: bertforge applies a Dense module without residual")
    for key in ("module_input_name", "module_output_name"):
        if config.get(key) not in (None, "sentence_embedding"):
            raise BertforgeError(f"{file}: \"{key}\" {config[key]!r}: bertforge maps the sentence embedding only")
    return Dense(path, whole_number(config, "in_features", file), whole_number(config, "out_features", file),
                 flag(config, "bias", file, True), ACTIVATIONS[name])


def load_dense(folder, declared: SentencePooling | None,
               width: int) -> list[tuple[np.ndarray, np.ndarray | None, str]]:
    """The weight [out, in], bias and activation of each Dense module `declared` names, from its
    model.safetensors, checked against its config and what comes before it (the first: the encoder's `width`)."""
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    folder, layers = Path(folder), []
    for n, dense in enumerate(declared.dense if declared else ()):
        given = declared.dense[n - 1].out_features if n else width
        if dense.in_features != given:
            raise BertforgeError(f"{folder / dense.path / 'config.json'}: \"in_features\" {dense.in_features}, but "
                                 f"{'the Dense module before it' if n else 'the encoder'} gives {given}")
        file = folder / dense.path / DENSE_WEIGHTS
        if not has_model_file(file, folder):
            raise BertforgeError(f"{file}: missing: bertforge reads a Dense module's weights from its "
                                 f"{DENSE_WEIGHTS} (a pickled pytorch_model.bin is not read)")
        try:
            tensors = load_file(model_file(file, folder))
        except (SafetensorError, ValueError, TypeError, OSError) as e:
            raise BertforgeError(f"{file}: cannot be read ({str(e).splitlines()[0]})") from None
        shapes = {"linear.weight": (dense.out_features, dense.in_features),
                  **({"linear.bias": (dense.out_features,)} if dense.bias else {})}
        if {k: tuple(v.shape) for k, v in tensors.items()} != shapes:
            raise BertforgeError(f"{file}: holds {', '.join(f'{k} {tuple(v.shape)}' for k, v in tensors.items())}; "
                                 f"its config.json declares {', '.join(f'{k} {v}' for k, v in shapes.items())}")
        bias = tensors.get("linear.bias")
        layers.append((tensors["linear.weight"].astype(np.float32),
                       None if bias is None else bias.astype(np.float32), dense.activation))
    return layers


def apply_dense(vectors: np.ndarray, layers) -> np.ndarray:
    """Pooled vectors [texts, dim] through the Dense modules (`load_dense`), as sentence-transformers' Dense."""
    for weight, bias, activation in layers:
        vectors = vectors.astype(np.float32) @ weight.T + (0 if bias is None else bias)
        if activation == "tanh":
            vectors = np.tanh(vectors)
    return vectors


def flag(config: dict, key: str, file: Path, default: bool) -> bool:
    value = config.get(key, default)
    if not isinstance(value, bool):
        raise BertforgeError(f"{file}: \"{key}\" must be true or false, not {value!r}")
    return value


def read_pooling(folder: Path, file: Path) -> tuple[str, bool]:
    """The pooling mode and include_prompt of a Pooling config: the legacy pooling_mode_* flags or pooling_mode."""
    config = read_model_json(file, folder)
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        modes = mode if isinstance(mode, list) else [mode]
        if not modes or not all(isinstance(m, str) and m in LEGACY_KEYS.values() for m in modes):
            raise BertforgeError(f"{file}: \"pooling_mode\" {mode!r} is not one of {', '.join(POOLINGS)}")
        keys = ["pooling_mode"] * len(modes)
    else:
        keys = [key for key in LEGACY_KEYS if flag(config, key, file, False)]
        modes = [LEGACY_KEYS[key] for key in keys] or ["mean"]  # none set: sentence-transformers means
    if len(modes) > 1:
        raise BertforgeError(f"{file}: {', '.join(dict.fromkeys(keys))} ask for {' + '.join(modes)} concatenated; "
                             f"bertforge pools with one mode")
    return modes[0], flag(config, "include_prompt", file, True)


def check_normalize(folder: Path, file: Path) -> None:
    """A Normalize module normalises the sentence embedding (its config, where there is one, must say so)."""
    if not has_model_file(file, folder):
        return
    config = read_model_json(file, folder)
    for key in ("module_input_name", "module_output_name"):
        if config.get(key) not in (None, "sentence_embedding"):
            raise BertforgeError(f"{file}: \"{key}\" {config[key]!r}: bertforge normalises the sentence embedding "
                                 f"only")


def read_sbert_config(folder: Path) -> tuple[int | None, bool]:
    file = folder / SBERT_CONFIG
    if not has_model_file(file, folder):
        return None, False
    config = read_model_json(file, folder)
    length = config.get("max_seq_length")
    if length is not None and (not isinstance(length, int) or isinstance(length, bool) or length < 1):
        raise BertforgeError(f"{file}: \"max_seq_length\" must be a whole number of at least 1, not {length!r}")
    return length, flag(config, "do_lower_case", file, False)


def read_prompts(folder) -> dict[str, str]:
    """The named prompts of a folder's config_sentence_transformers.json ("prompts"; none without the file)."""
    folder = Path(folder)
    file = folder / ST_CONFIG
    if not has_model_file(file, folder):
        return {}
    prompts = read_model_json(file, folder).get("prompts") or {}
    if not isinstance(prompts, dict) or not all(isinstance(v, str) for v in prompts.values()):
        raise BertforgeError(f"{file}: \"prompts\" must be an object of names to texts")
    return prompts


def read_prompt(folder: Path) -> str:
    """The default prompt's text ("" where none is named)."""
    file = folder / ST_CONFIG
    if not has_model_file(file, folder):
        return ""
    config = read_model_json(file, folder)
    name = config.get("default_prompt_name")
    if name is None:
        return ""
    prompts = config.get("prompts")
    if not isinstance(prompts, dict) or not isinstance(prompts.get(name), str):
        raise BertforgeError(f"{file}: \"default_prompt_name\" {name!r} names no prompt in \"prompts\"")
    return prompts[name]


# ---------------------------------------------------------------------------------------------------------
# Writing


def write_sentence_folder(folder, pooling: str = "mean", normalize: bool = True, max_seq_length: int | None = None,
                          include_prompt: bool = True, do_lower_case: bool = False,
                          dense: tuple[np.ndarray, np.ndarray] | None = None) -> None:
    """Add the sentence-transformers files beside the Hugging Face model in `folder` (its config.json gives the
    embedding dimension), in the legacy layout every sentence-transformers version reads; `dense`: the weight
    [out, in] and bias of a linear map after the pooling (a Dense module without activation)."""
    folder = Path(folder)
    check_pooling(pooling)
    if max_seq_length is not None and (not isinstance(max_seq_length, int) or max_seq_length < 1):
        raise BertforgeError(f"max_seq_length must be a whole number of at least 1, not {max_seq_length!r}")
    fields = read_json(folder / "config.json")
    dimension = fields.get("hidden_size", fields.get("dim"))  # the width, under DistilBERT's name too
    modules = [("Transformer", ""), ("Pooling", "1_Pooling")]
    for path in (DENSE, "2_Normalize", "3_Normalize"):  # an earlier declaration's
        for name in ("config.json", DENSE_WEIGHTS):
            (folder / path / name).unlink(missing_ok=True)
    if dense is not None:
        weight, bias = (np.ascontiguousarray(v, dtype=np.float32) for v in dense)
        if weight.shape[1] != dimension or bias.shape != weight.shape[:1]:
            raise BertforgeError(f"the Dense map is {weight.shape[1]} -> {weight.shape[0]} with {len(bias)} biases, "
                                 f"the model {dimension} wide")
        write_json(folder / DENSE / "config.json", {"in_features": weight.shape[1], "out_features": weight.shape[0],
                                                    "bias": True, "activation_function": IDENTITY})
        write_tensors(folder / DENSE / DENSE_WEIGHTS, {"linear.weight": weight, "linear.bias": bias})
        modules.append(("Dense", DENSE))
    if normalize:
        modules.append(("Normalize", f"{len(modules)}_Normalize"))
        write_json(folder / modules[-1][1] / "config.json", {})
    write_json(folder / POOLING_CONFIG, {"word_embedding_dimension": dimension,
                                         **{key: mode == pooling for key, mode in LEGACY_KEYS.items()},
                                         "include_prompt": include_prompt})
    write_json(folder / SBERT_CONFIG, {"max_seq_length": max_seq_length, "do_lower_case": do_lower_case})
    # last: a folder is a sentence-transformers one once its files are whole
    write_json(folder / MODULES, [{"idx": i, "name": str(i), "path": path, "type": f"sentence_transformers.models.{k}"}
                                  for i, (k, path) in enumerate(modules)])


def write_tensors(path: Path, tensors: dict[str, np.ndarray]) -> None:
    from safetensors.numpy import save_file

    with atomic_path(path) as tmp:
        save_file(tensors, tmp, metadata={"format": "pt"})


def declaration_files(folder) -> list[Path]:
    """The files of the folder's declaration (its modules' configs and Dense weights, then KEPT), checked by
    reading them; none for a plain model folder."""
    folder = Path(folder)
    if read_sentence_folder(folder) is None:
        return []
    modules = module_paths(folder)
    names = [f"{path}/{name}" for kind, path in modules if path
             for name in ("config.json", *([DENSE_WEIGHTS] if kind == "Dense" else []))]
    return [folder / name for name in [*names, *KEPT] if has_model_file(folder / name, folder)]


def keep_sentence_folder(source, target) -> bool:
    """Copy the sentence-transformers files of `source` (checked by reading them) to `target`, a model made from
    it; False where `source` is a plain model folder."""
    source, target = Path(source), Path(target)
    files = declaration_files(source)
    for file in files:  # modules.json last
        copy_model_file(file, source, target / file.relative_to(source))
    return bool(files)
