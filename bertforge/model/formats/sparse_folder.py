"""SPLADE folders: sentence-transformers' SparseEncoder (sentence-transformers >= 5), read and written. torch-free.

A SparseEncoder folder is a Hugging Face masked-LM folder with, beside it, `modules.json` naming a Transformer at ""
(sentence-transformers 5's `sparse_encoder.models.MLMTransformer`, or 5.4 and later's `base.modules.Transformer`
with `transformer_task` "fill-mask" in `sentence_bert_config.json`) then a `SpladePooling` (its
`1_SpladePooling/config.json`: `pooling_strategy` max or sum, `activation_function` relu or log1p_relu), and
`config_sentence_transformers.json` (`model_type` "SparseEncoder", the prompts). Its vector for a text is the
masked-LM head's logits at each real token, log(1 + ReLU(x)) (twice log1p for log1p_relu), pooled over the tokens
(max or sum): one weight per vocabulary entry, most of them 0.

`read_sparse_folder` turns those files into a `SparseDeclaration` (None for a folder that is not one), which
`pipeline("sparse-embedding")` takes as its defaults; `write_sparse_folder` adds the files beside a masked-LM folder
in the layout every sentence-transformers version from 5.0 reads (`SparseEncoder(folder)`).
"""

from dataclasses import dataclass
from pathlib import Path

from ...core.errors import BertforgeError
from ...core.io import has_model_file, outside_folder, read_model_json, write_json
from .sentence_folder import MODULES, SBERT_CONFIG, ST_CONFIG, read_prompt, read_sbert_config

SPLADE_POOLING = "1_SpladePooling"
STRATEGIES = ("max", "sum")
ACTIVATIONS = ("relu", "log1p_relu")
TRANSFORMERS = ("MLMTransformer", "Transformer")  # the Transformer module of a SparseEncoder, old and new names


@dataclass(frozen=True)
class SparseDeclaration:
    """How a SPLADE folder turns masked-LM logits into one vocabulary-sized vector."""

    pooling: str = "max"  # over the real tokens: max or sum
    activation: str = "relu"  # log(1 + relu(x)); log1p_relu: log(1 + log(1 + relu(x)))
    max_seq_length: int | None = None
    do_lower_case: bool = False
    prompt: str = ""  # the folder's default prompt

    def text(self, text: str) -> str:
        text = self.prompt + text
        return text.lower() if self.do_lower_case else text

    def summary(self) -> str:
        """One line for `bertforge info`."""
        activation = "log(1 + log(1 + relu))" if self.activation == "log1p_relu" else "log(1 + relu)"
        parts = [f"{self.pooling} pooling of {activation} of the masked-LM logits",
                 f"max_seq_length {self.max_seq_length or 'of the tokenizer'}"]
        if self.prompt:
            parts.append(f"prompt {self.prompt!r}")
        return ", ".join(parts)


def sparse_modules(folder: Path) -> list[tuple[str, str]] | None:
    """(module type, path) of a SparseEncoder's modules.json, None where the folder is not one (no modules.json, or
    no SpladePooling in it)."""
    file = folder / MODULES
    if not has_model_file(file, folder):
        return None
    modules = read_model_json(file, folder, expect=list)
    kinds = [m.get("type", "").rsplit(".", 1)[-1] if isinstance(m, dict) and isinstance(m.get("type"), str) else ""
             for m in modules]
    if "SpladePooling" not in kinds:
        return None
    if len(modules) != 2 or kinds[0] not in TRANSFORMERS or kinds[1] != "SpladePooling" \
            or not isinstance(modules[1].get("path"), str) or modules[0].get("path") != "":
        raise BertforgeError(f"{file}: bertforge reads a SparseEncoder of a Transformer at \"\" then a SpladePooling, "
                             f"not {', '.join(kinds)}")
    if outside_folder(folder / modules[1]["path"], folder):
        raise BertforgeError(f"{file}: [1] \"path\" {modules[1]['path']!r} is outside the folder")
    return list(zip(kinds, (m["path"] for m in modules)))


def is_sparse_folder(folder) -> bool:
    return sparse_modules(Path(folder)) is not None


def read_sparse_folder(folder) -> SparseDeclaration | None:
    """The folder's SPLADE declaration, or None where it is not a SparseEncoder folder."""
    folder = Path(folder)
    modules = sparse_modules(folder)
    if modules is None:
        return None
    file = folder / modules[1][1] / "config.json"
    config = read_model_json(file, folder) if has_model_file(file, folder) else {}
    pooling, activation = config.get("pooling_strategy", "max"), config.get("activation_function", "relu")
    if pooling not in STRATEGIES:
        raise BertforgeError(f"{file}: \"pooling_strategy\" {pooling!r} is not one of {', '.join(STRATEGIES)}")
    if activation not in ACTIVATIONS:
        raise BertforgeError(f"{file}: \"activation_function\" {activation!r} is not one of {', '.join(ACTIVATIONS)}")
    sbert = folder / SBERT_CONFIG
    if has_model_file(sbert, folder):
        task = read_model_json(sbert, folder).get("transformer_task", "fill-mask")
        if task != "fill-mask":
            raise BertforgeError(f"{sbert}: \"transformer_task\" {task!r}: a SPLADE Transformer is a fill-mask one")
    max_seq_length, do_lower_case = read_sbert_config(folder)
    return SparseDeclaration(pooling, activation, max_seq_length, do_lower_case, read_prompt(folder))


def write_sparse_folder(folder, pooling: str = "max", activation: str = "relu", max_seq_length: int | None = None,
                        prompts: dict[str, str] | None = None) -> None:
    """Add the SparseEncoder files beside the masked-LM model in `folder`, so that `SparseEncoder(folder)` loads it
    (sentence-transformers 5.0's layout, which later versions read too)."""
    folder = Path(folder)
    if pooling not in STRATEGIES or activation not in ACTIVATIONS:
        raise BertforgeError(f"a SPLADE pooling is {' or '.join(STRATEGIES)} with {' or '.join(ACTIVATIONS)}, not "
                             f"{pooling} with {activation}")
    if max_seq_length is not None and (not isinstance(max_seq_length, int) or max_seq_length < 1):
        raise BertforgeError(f"max_seq_length must be a whole number of at least 1, not {max_seq_length!r}")
    write_json(folder / SPLADE_POOLING / "config.json", {"pooling_strategy": pooling,
                                                         "activation_function": activation})
    write_json(folder / SBERT_CONFIG, {"max_seq_length": max_seq_length, "do_lower_case": False})
    write_json(folder / ST_CONFIG, {"model_type": "SparseEncoder", "prompts": {"query": "", "document": "",
                                                                               **(prompts or {})},
                                    "default_prompt_name": None, "similarity_fn_name": "dot"})
    # last: a folder is a SparseEncoder one once its files are whole
    write_json(folder / MODULES, [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.sparse_encoder.models.MLMTransformer"},
        {"idx": 1, "name": "1", "path": SPLADE_POOLING,
         "type": "sentence_transformers.sparse_encoder.models.SpladePooling"}])
