"""`bertforge export onnx DIR OUT [--int8]`: the checkpoint as ONNX, checked by ONNX Runtime against PyTorch.

The model's padding-free path picks its branch from the data (whether a batch has padding), which a traced
graph cannot, so while exporting the model runs its own forward on its padded path: [B, L, H] throughout,
padding masked in attention (`packing.Layout.padding`). Batch and sequence axes (and the
choices of a multiple-choice model) are dynamic. OUT becomes a folder that `pipeline(..., backend="onnx")`
and `bertforge serve OUT --backend onnx` read: model.onnx (model_int8.onnx with --int8: int8 weights with a
scale per output channel, activations quantised per batch), onnx.json (the head), config.json and the
tokenizer files, and a sentence-transformers folder's files (sentence_folder.py): the graph of an encoder outputs
its token vectors, which `pipeline("sentence-embedding", backend="onnx")` pools as the folder declares. On
all-MiniLM-L6-v2, per-channel scales keep SST-2 sentence embeddings at a mean cosine of
0.992 to fp32 (0.957 with one scale per matrix) at the same speed.
"""

import json
import logging
import shutil
import warnings
from contextlib import nullcontext
from pathlib import Path

import torch
from torch import nn

from ..model.architectures.registry import heads_of, read_config
from ..core.errors import BertforgeError
from .batches import pad
from ..core.io import atomic_path, has_model_file, model_file, new_model_folder, write_text_atomic
from ..core.flags import ONNX_OPSETS
from ..model.architectures.heads import HEADS, head_class
from .runtime import ONNX_FILES, OnnxRuntime, TorchRuntime
from ..model.formats.sentence_folder import keep_sentence_folder
from ..text.tokenizer import BertTokenizer

COPIED = ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SAMPLES = ["The quick brown fox jumps over the lazy dog.", "Paris is the [MASK] of France.", "Hello!",
           "Tokenization splits unfamiliar words into pieces, and the model reads every one of them in context."]


class ExportGraph(nn.Module):
    """A model's own forward for its ONNX graph, returning its head's outputs (heads.HEADS) as the torch runtime
    returns them; while exporting, the model runs its padded path (bert.py: BertModel.encode)."""

    def __init__(self, model, mask_id: int):
        super().__init__()
        self.model = model
        self.runtime = TorchRuntime(model, torch.device("cpu"), mask_id)

    def forward(self, input_ids, attention_mask, token_type_ids):
        out = self.runtime({"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids})
        values = tuple(out[name] for name in self.runtime.outputs)
        return values[0] if len(values) == 1 else values


def sample_batch(tokenizer: BertTokenizer, architecture: str, texts: list[str]) -> dict:
    """A padded batch of real text (pairs of texts for multiple choice), each row holding the mask token ([MASK],
    RoBERTa's <mask>)."""
    mask = tokenizer.mask_token or "[MASK]"
    texts = [t if mask in t else t.replace(" ", f" {mask} ", 1) for t in texts]
    if architecture == "BertForMultipleChoice":
        rows = [dict(tokenizer([t] * 2, [texts[0], t])) for t in texts]
        rows = [{k: r[k] for k in ("input_ids", "token_type_ids")} for r in rows]
    else:
        enc = tokenizer(texts)
        rows = [{"input_ids": i, "token_type_ids": t} for i, t in zip(enc["input_ids"], enc["token_type_ids"])]
    return pad(rows, tokenizer.pad_token_id)


def max_difference(ours: dict, reference: dict, attention_mask: torch.Tensor) -> float:
    """The largest absolute difference over the outputs, per-token outputs compared on the real tokens."""
    worst = 0.0
    for name, expected in reference.items():
        got, expected = ours[name].float(), expected.float()
        if got.dim() >= 2 and got.shape[:2] == attention_mask.shape:
            real = attention_mask.bool()
            got, expected = got[real], expected[real]
        worst = max(worst, (got - expected).abs().max().item())
    return worst


def export_onnx(model_dir, out, int8: bool = False, opset: int = 17, overwrite: bool = False) -> dict:
    """Write OUT (see the module docstring); returns the checks' max differences against PyTorch. OUT is written
    as a whole beside itself and then swapped in (a folder holding another model: only with `overwrite`), or,
    when it is the checkpoint folder itself, gets the ONNX files, each written atomically."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        raise BertforgeError("bertforge export onnx needs onnx and onnxruntime: pip install -e '.[onnx]'") from None
    if not isinstance(opset, int) or not ONNX_OPSETS[0] <= opset <= ONNX_OPSETS[1]:
        raise BertforgeError(f"opset {opset!r}: the export writes ONNX operator sets {ONNX_OPSETS[0]} to "
                             f"{ONNX_OPSETS[1]}")
    folder, out = Path(model_dir), Path(out)
    config = read_config(folder / "config.json")
    heads = [HEADS[h].runs_as for h in heads_of(config)]
    architecture = heads[0] if heads else "BertModel"
    in_place = out.is_dir() and out.resolve() == folder.resolve()
    with nullcontext(out) if in_place else new_model_folder(out, "OUT", overwrite, folder) as target:
        tokenizer = BertTokenizer.from_pretrained(folder)
        model = head_class(architecture).from_pretrained(folder).eval()
        with atomic_path(target / ONNX_FILES[False]) as path:
            write_graph(ExportGraph(model, tokenizer.mask_token_id), architecture, tokenizer, path, opset)
        for name in COPIED:
            if not in_place and has_model_file(folder / name, folder):
                shutil.copyfile(model_file(folder / name, folder), target / name)
        if not in_place:
            keep_sentence_folder(folder, target)  # a sentence-transformers folder's pooling goes with its encoder
        write_text_atomic(target / "onnx.json", json.dumps({"architecture": architecture, "outputs":
                                                            list(HEADS[architecture].outputs)}) + "\n")
        if int8:
            with atomic_path(target / ONNX_FILES[True]) as path:
                quantise(target / ONNX_FILES[False], path)
        elif in_place:
            (target / ONNX_FILES[True]).unlink(missing_ok=True)  # from an earlier export: not of this model.onnx
        return check(model, target, tokenizer, architecture, int8)


def write_graph(graph: ExportGraph, architecture: str, tokenizer, path: Path, opset: int) -> None:
    """The model's graph, traced on a batch of real text, with dynamic batch and sequence axes."""
    outputs = list(HEADS[architecture].outputs)
    axes = {0: "batch", 1: "choices", 2: "sequence"} if architecture == "BertForMultipleChoice" \
        else {0: "batch", 1: "sequence"}
    dynamic = {name: axes for name in ("input_ids", "attention_mask", "token_type_ids")}
    dynamic.update(HEADS[architecture].outputs)
    example = sample_batch(tokenizer, architecture, SAMPLES[:2])
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(graph, (example["input_ids"], example["attention_mask"], example["token_type_ids"]),
                          str(path), input_names=list(dynamic)[:3], output_names=outputs,
                          dynamic_axes=dynamic, opset_version=opset, dynamo=False)


def quantise(source: Path, path: Path) -> None:
    """int8 weights with a scale per output channel, activations quantised per batch."""
    from onnxruntime.quantization import QuantType, quantize_dynamic

    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # a line per tensor it leaves fp32, and advice on pre-processing the graph
    try:
        quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)


def check(model, out: Path, tokenizer, architecture: str, int8: bool) -> dict:
    """Max differences of the exported models from PyTorch on a batch of other shapes than the traced one."""
    batch = sample_batch(tokenizer, architecture, SAMPLES[1:])
    with torch.inference_mode():
        reference = TorchRuntime(model, torch.device("cpu"), tokenizer.mask_token_id)(batch)
    report = {}
    for quantised in (False, True) if int8 else (False,):
        runtime = OnnxRuntime(out / ONNX_FILES[quantised], torch.device("cpu"))
        report[ONNX_FILES[quantised]] = max_difference(runtime(batch), reference, batch["attention_mask"])
    return report
