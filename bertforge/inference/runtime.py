"""What runs a checkpoint's forward pass for inference: PyTorch (fp32, bf16 autocast, or int8 linear layers)
or ONNX Runtime.

A runtime is called with a padded batch of tensors (see inference.batches.pad) and returns the head's outputs by name,
the same names from every backend (heads.HEADS). The masked-LM head returns `mask_logits` [masked, V]: the
vocabulary scores at the [MASK] positions only, in row-major order, not all [B, L, V].
"""

import importlib.util
import logging
import warnings
from pathlib import Path

import torch

from ..model.architectures import bert as models
from ..core.errors import BertforgeError
from ..core.io import has_model_file, read_model_json
from ..model.architectures.registry import head_of, heads_of
from ..model.architectures.heads import HEADS, head_class
from ..core.flags import device_problem

log = logging.getLogger("bertforge")

BACKENDS = ("torch", "onnx")
ONNX_FILES = {False: "model.onnx", True: "model_int8.onnx"}
ONNX_MISSING = "--backend onnx needs onnxruntime: pip install -e '.[onnx]'"


def pick_device(device: str | None) -> torch.device:
    """The named device, or CUDA when present, else CPU; a named device that is not there is an error."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    problem = device_problem(device, kinds=("cpu", "cuda", "mps"))
    if problem:
        raise BertforgeError(f"--device {problem}")
    return torch.device(device)


def native_bf16(device: torch.device | str) -> bool:
    """Whether `device` computes bf16 matmuls in hardware: CUDA GPUs that support it, CPUs with AMX or AVX512-BF16.
    Elsewhere they are emulated, far slower than fp32 (BENCHMARKS.md, "bf16")."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_bf16_supported()
    return device.type == "cpu" and (torch.cpu._is_amx_tile_supported() or torch.cpu._is_avx512_bf16_supported())


def warn_if_emulated_bf16(device: torch.device | str) -> None:
    if torch.device(device).type == "cpu" and not native_bf16(device):
        log.warning("this CPU has no bf16 matrix instructions (AMX or AVX512-BF16): bf16 will be much slower than fp32")


def quantize_int8(model: torch.nn.Module) -> torch.nn.Module:
    """Dynamic int8 quantisation (weights int8 per output channel, activations quantised per batch) of the
    linear layers, in place; the Q, K and V projections are fused into one first (BertSelfAttention.fuse).
    Per-channel scales: on all-MiniLM-L6-v2, SST-2 sentence embeddings keep a mean cosine of 0.972 to fp32
    (0.976 with Q, K and V left in fp32, 30% slower; 0.939 with one scale per matrix, about as fast)."""
    import torch.ao.quantization as quantization

    for module in model.modules():
        if isinstance(module, models.BertSelfAttention):
            module.fuse()
    spec = {name: quantization.per_channel_dynamic_qconfig for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return quantization.quantize_dynamic(model, spec, dtype=torch.qint8, inplace=True)


def linear_weights_in_bf16(model: torch.nn.Module) -> None:
    """The linear layers' own weights stored in bf16, which autocast would otherwise cast on every call (1.3x
    faster, the same numbers). Weights shared with another module (the masked-LM decoder's, tied to the word
    embeddings) stay fp32: the embeddings feed LayerNorm."""
    shared = {id(p) for m in model.modules() if not isinstance(m, torch.nn.Linear)
              for p in m.parameters(recurse=False)}
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and id(m.weight) not in shared:
            m.to(torch.bfloat16)


def mask_logits(model, batch: dict, mask_id: int) -> torch.Tensor:
    """Vocabulary scores [masked, V] at the mask positions of a masked-LM model's batch, row-major."""
    ids = batch["input_ids"]
    return model(**batch, labels=ids.masked_fill(ids != mask_id, -100)).logits


class TorchRuntime:
    call_tokens = None  # the model packs tokens (no padding in its linear layers): cutting batches did not pay

    def __init__(self, model, device: torch.device, mask_id: int, bf16: bool = False):
        self.model, self.device, self.mask_id, self.bf16 = model.eval(), device, mask_id, bf16
        if bf16:
            linear_weights_in_bf16(model)
        self.architecture = head_of(type(model).__name__) or type(model).__name__  # its head, by BERT's name
        self.outputs = tuple(HEADS[self.architecture].outputs)

    def __call__(self, batch: dict) -> dict[str, torch.Tensor]:
        batch = {k: v.to(self.device) for k, v in batch.items()}
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if self.architecture == "BertForMaskedLM":
                return {"mask_logits": mask_logits(self.model, batch, self.mask_id).float()}
            if self.architecture != "BertForMultipleChoice":
                batch.pop("choice_mask", None)
            result = self.model(**batch)
        return {k: result[k].float() for k in self.outputs}


    def token_logits(self, batch: dict) -> torch.Tensor:
        """A masked-LM model's vocabulary scores at every real token of the batch (attention mask 1), [tokens, V] in
        row-major order: what a SPLADE vector is pooled from (embedding_pipelines.SparseEmbedding)."""
        if self.architecture != "BertForMaskedLM":
            raise BertforgeError(f"token scores need a masked-LM head, not {self.architecture}")
        batch = {k: v.to(self.device) for k, v in batch.items() if k != "choice_mask"}
        ids = batch["input_ids"]
        with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            logits = self.model(**batch, labels=ids.masked_fill(batch["attention_mask"] == 0, -100)).logits
        return logits.float()


class OnnxRuntime:
    """An exported model (see export.py) in an ONNX Runtime session."""

    def __init__(self, path: Path, device: torch.device, threads: int | None = None):
        try:
            import onnxruntime
        except ImportError:
            raise BertforgeError(ONNX_MISSING) from None
        options = onnxruntime.SessionOptions()
        # Idle threads sleep instead of spinning (as torch's under OMP_WAIT_POLICY=PASSIVE): a server shares its
        # cores with its own event loop and, on small machines, with its clients.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        if threads:
            options.intra_op_num_threads = threads
        providers = ["CUDAExecutionProvider"] if device.type == "cuda" else ["CPUExecutionProvider"]
        # The graph computes on the padding: on the CPU a batch of mixed lengths is cut where the padding saved
        # is worth more than a call, which costs about as much as 16 padded tokens (inference.batches.cut_padding; the
        # server's batches of 32 SST-2 sentences: 1.7x the rows per second of one padded call, BENCHMARKS.md).
        # On a GPU padding costs little beside a call's launches (not measured here): no cut.
        self.call_tokens = 16 if device.type == "cpu" else None
        self.session = onnxruntime.InferenceSession(str(path), options, providers=providers)
        self.inputs = [i.name for i in self.session.get_inputs()]
        self.outputs = [o.name for o in self.session.get_outputs()]
        self.architecture = read_model_json(path.parent / "onnx.json").get("architecture")

    def __call__(self, batch: dict) -> dict[str, torch.Tensor]:
        feed = {name: batch[name].numpy() for name in self.inputs}
        values = self.session.run(self.outputs, feed)
        out = {name: torch.from_numpy(v) for name, v in zip(self.outputs, values)}
        if "choice_mask" in batch and self.architecture == "BertForMultipleChoice":
            out["logits"] = out["logits"].masked_fill(~batch["choice_mask"].bool(), -torch.inf)
        return out


def onnx_file(folder: Path, int8: bool = False) -> Path:
    """The exported model that the onnx backend runs; a one-line error where it or onnxruntime is missing."""
    path = Path(folder) / ONNX_FILES[int8]
    if not has_model_file(path, folder):
        raise BertforgeError(f"{path}: no such file; write it with `bertforge export onnx MODEL {folder}"
                             f"{' --int8' if int8 else ''}`")
    if importlib.util.find_spec("onnxruntime") is None:
        raise BertforgeError(ONNX_MISSING)
    return path


def check_precision(backend: str, int8: bool, bf16: bool) -> None:
    if bf16 and (backend == "onnx" or int8):
        raise BertforgeError("--bf16 is for the torch backend in floating point: not with --backend onnx or --int8")


def head_for(config, task: str, default: type) -> type:
    """The class a pipeline of `task` runs: the checkpoint's own head where its task is `task` (a head added to the
    registry runs as itself), else `default` (the encoder, for embeddings from a classifier's folder)."""
    own = [HEADS[h].runs_as for h in heads_of(config) if HEADS[h].task == task]
    return head_class(own[0]) if own else default


def load_runtime(folder, model_class, backend: str = "torch", device: str | None = None, int8: bool = False,
                 mask_id: int = 4, threads: int | None = None, bf16: bool = False):
    """The runtime of `folder` with `model_class`'s head (torch, fp32 or under bf16 autocast), or of the folder's
    exported ONNX model (fp32 or int8)."""
    folder = Path(folder)
    if backend not in BACKENDS:
        raise BertforgeError(f"--backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
    check_precision(backend, int8, bf16)
    chosen = pick_device(device)
    if bf16:
        warn_if_emulated_bf16(chosen)
    if backend == "onnx":
        path = onnx_file(folder, int8)
        runtime = OnnxRuntime(path, chosen, threads)
        if runtime.architecture != model_class.__name__:
            raise BertforgeError(f"{path}: exported with the head {runtime.architecture}, but this task needs "
                                 f"{model_class.__name__}")
        return runtime
    if int8 and chosen.type != "cpu":
        raise BertforgeError(f"--int8 on the torch backend runs on the CPU only, not --device {chosen}")
    model = model_class.from_pretrained(folder)
    if int8:
        model = quantize_int8(model)
    return TorchRuntime(model.to(chosen), chosen, mask_id, bf16)
