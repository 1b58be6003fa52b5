"""`bertforge export onnx DIR OUT [--int8]`: the checkpoint as ONNX, checked by ONNX Runtime against PyTorch.

The model's padding-free path picks its branch from the data (whether a batch has padding), which a traced
graph cannot, so the export runs the same layers on the plain padded path: [B, L, H] throughout, padding
masked in attention (`PaddedLayout`). Batch and sequence axes (and the
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

from . import model as models
from .config import BertConfig
from .errors import BertforgeError
from .inference import pad
from .io import atomic_path, new_model_folder, write_text_atomic
from .options import ONNX_OPSETS
from .packing import Layout
from .runtime import HEAD_OUTPUTS, ONNX_FILES, OnnxRuntime, TorchRuntime
from .sentence_folder import keep_sentence_folder
from .tokenizer import BertTokenizer

HEADS = {"BertForPreTraining": "BertForMaskedLM", **{name: name for name in HEAD_OUTPUTS}}
COPIED = ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
SAMPLES = ["The quick brown fox jumps over the lazy dog.", "Paris is the [MASK] of France.", "Hello!",
           "Tokenization splits unfamiliar words into pieces, and the model reads every one of them in context."]


class PaddedLayout(Layout):
    """The plain padded path's layout ([B, L, H] throughout, no dropout) with the padding masked in attention
    (and, in a left-to-right model, the keys to the right)."""

    def __init__(self, attention_mask: torch.Tensor, causal: bool):
        super().__init__(attention_mask.shape[0], attention_mask.shape[1], None, None, causal=causal,
                         device=attention_mask.device)
        self.padding = attention_mask.bool()[:, None, None, :]

    @property
    def key_mask(self) -> torch.Tensor:
        left = super().key_mask
        return self.padding if left is None else self.padding & left


class ExportGraph(nn.Module):
    """A task model's forward on the padded path, returning its head's outputs (runtime.HEAD_OUTPUTS)."""

    def __init__(self, model, mask_id: int):
        super().__init__()
        self.model, self.mask_id = model, mask_id
        self.architecture = type(model).__name__
        self.bert = model if isinstance(model, models.BertModel) else model.bert

    def encode(self, input_ids, attention_mask, token_type_ids):
        positions = torch.arange(input_ids.shape[1], device=input_ids.device).expand_as(input_ids)
        layout = PaddedLayout(attention_mask, self.bert.config.is_decoder)
        x = self.bert.embeddings(input_ids, token_type_ids, positions, layout)
        return self.bert.encoder(x, layout)[0]

    def pooled(self, x, attention_mask):
        """The pooler on [CLS], or on the last real token in a left-to-right model (Encoded.pooled_tokens)."""
        if not self.bert.config.is_decoder:
            return self.bert.pooler(x[:, 0])
        last = (attention_mask.long() * torch.arange(x.shape[1], device=x.device)).amax(1)
        return self.bert.pooler(x[torch.arange(x.shape[0], device=x.device), last])

    def forward(self, input_ids, attention_mask, token_type_ids):
        m, name = self.model, self.architecture
        if name == "BertForMultipleChoice":
            batch, choices, length = input_ids.shape
            ids, mask, types = (t.reshape(-1, length) for t in (input_ids, attention_mask, token_type_ids))
            return m.classifier(self.pooled(self.encode(ids, mask, types), mask)).view(batch, choices)
        x = self.encode(input_ids, attention_mask, token_type_ids)
        if name == "BertModel":
            return x
        if name == "BertForSequenceClassification":
            return m.classifier(self.pooled(x, attention_mask))
        if name == "BertForTokenClassification":
            return m.classifier(x)
        if name == "BertForQuestionAnswering":
            logits = m.qa_outputs(x).float().masked_fill(~attention_mask.bool()[..., None], torch.finfo().min)
            return logits[..., 0], logits[..., 1]
        positions = (input_ids == self.mask_id).flatten().nonzero().squeeze(1)  # masked LM
        return m.cls.predictions(x.flatten(0, 1)[positions], m.word_embeddings.weight)


def sample_batch(tokenizer: BertTokenizer, architecture: str, texts: list[str]) -> dict:
    """A padded batch of real text (pairs of texts for multiple choice), each row holding a [MASK]."""
    texts = [t if "[MASK]" in t else t.replace(" ", " [MASK] ", 1) for t in texts]
    if architecture == "BertForMultipleChoice":
        rows = [dict(tokenizer([t] * 2, [texts[0], t])) for t in texts]
        rows = [{k: r[k] for k in ("input_ids", "token_type_ids")} for r in rows]
    else:
        enc = tokenizer(texts)
        rows = [{"input_ids": i, "token_type_ids": t} for i, t in zip(enc["input_ids"], enc["token_type_ids"])]
    return pad(rows, tokenizer.pad_token_id)


def output_axes(name: str, architecture: str) -> dict:
    if name == "mask_logits":
        return {0: "masked"}
    if architecture == "BertForMultipleChoice":
        return {0: "batch", 1: "choices"}
    if architecture == "BertForSequenceClassification":
        return {0: "batch"}
    return {0: "batch", 1: "sequence"}


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
    config = BertConfig.from_json_file(folder / "config.json")
    heads = [HEADS[a] for a in config.extra.get("architectures") or [] if a in HEADS]
    architecture = heads[0] if heads else "BertModel"
    in_place = out.is_dir() and out.resolve() == folder.resolve()
    with nullcontext(out) if in_place else new_model_folder(out, "OUT", overwrite, folder) as target:
        tokenizer = BertTokenizer.from_pretrained(folder)
        model = getattr(models, architecture).from_pretrained(folder).eval()
        with atomic_path(target / ONNX_FILES[False]) as path:
            write_graph(ExportGraph(model, tokenizer.mask_token_id), architecture, tokenizer, path, opset)
        for name in COPIED:
            if (folder / name).is_file() and not in_place:
                shutil.copyfile(folder / name, target / name)
        if not in_place:
            keep_sentence_folder(folder, target)  # a sentence-transformers folder's pooling goes with its encoder
        write_text_atomic(target / "onnx.json", json.dumps({"architecture": architecture, "outputs":
                                                            list(HEAD_OUTPUTS[architecture])}) + "\n")
        if int8:
            with atomic_path(target / ONNX_FILES[True]) as path:
                quantise(target / ONNX_FILES[False], path)
        elif in_place:
            (target / ONNX_FILES[True]).unlink(missing_ok=True)  # from an earlier export: not of this model.onnx
        return check(model, target, tokenizer, architecture, int8)


def write_graph(graph: ExportGraph, architecture: str, tokenizer, path: Path, opset: int) -> None:
    """The model's graph, traced on a batch of real text, with dynamic batch and sequence axes."""
    outputs = list(HEAD_OUTPUTS[architecture])
    axes = {0: "batch", 1: "choices", 2: "sequence"} if architecture == "BertForMultipleChoice" \
        else {0: "batch", 1: "sequence"}
    dynamic = {name: axes for name in ("input_ids", "attention_mask", "token_type_ids")}
    dynamic.update({name: output_axes(name, architecture) for name in outputs})
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
    root.setLevel(logging.WARNING)  # it logs a line per tensor it leaves fp32
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
