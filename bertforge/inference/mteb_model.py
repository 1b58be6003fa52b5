"""A bertforge model as an MTEB encoder (`pip install 'bertforge[mteb]'`): `MTEBModel(folder or Hub name)` is what
`mteb.evaluate(model, tasks)` runs, mteb's `EncoderProtocol` (mteb 2): `encode(inputs, task_metadata=...,
hf_split=..., hf_subset=..., prompt_type=...)` returns [texts, dims] float32 vectors, made by the sentence-embedding
pipeline as `bertforge embed` makes them (embed.Embedder: the folder's pooling, Dense modules, normalisation,
Matryoshka `dimensions`; token-budget batches).

Prompts are the folder's (config_sentence_transformers.json "prompts"), chosen as mteb's SentenceTransformer
wrapper chooses them (mteb's `get_prompt_name`: the task's name and prompt type, the task's name, its type and
prompt type, its type, then the prompt type: "query" or "document"), a document's also under the name "passage";
none chosen, the folder's default prompt. Scores: cosine, as sentence-transformers' default.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.hub import hub_origin, model_folder
from .embed import BATCH_TOKENS, Embedder

MISSING = "the MTEB adapter needs mteb: pip install 'bertforge[mteb]'"

try:
    from mteb.models.abs_encoder import AbsEncoder, get_prompt_name
    from mteb.models.model_meta import ModelMeta, ScoringFunction
except ImportError:  # MTEBModel refuses to be made, by name
    AbsEncoder = object
    ModelMeta = None


class MTEBModel(AbsEncoder):
    """mteb's encoder of a bertforge model: `model` a folder or a Hub name (at `revision`); `dimensions` keeps the
    first N values of each vector (Matryoshka); `batch_tokens` padded tokens per forward pass."""

    def __init__(self, model_name, revision: str | None = None, *, device: str | None = None,
                 dimensions: int | None = None, bf16: bool = False, batch_tokens: int = BATCH_TOKENS, **kwargs):
        if ModelMeta is None:
            raise BertforgeError(MISSING)
        folder = model_folder(model_name, revision)
        self.embedder = Embedder(model_name, device=device, bf16=bf16, batch_tokens=batch_tokens,
                                 dimensions=dimensions, folder=folder)
        self.model = self.embedder.pipe
        self.model_prompts = dict(self.embedder.prompts) or None
        origin = hub_origin(folder)
        name = origin["repo_id"] if origin else str(model_name)
        self.mteb_model_meta = ModelMeta.create_empty(overwrites=dict(
            name=name if "/" in name else f"bertforge/{Path(name).name}",
            revision=origin["commit"] if origin else revision, loader=None, embed_dim=self.embedder.dims,
            max_tokens=self.model.max_length, framework=["PyTorch"],
            similarity_fn_name=ScoringFunction.COSINE,
            n_parameters=sum(p.numel() for p in self.model.runtime.model.parameters())
            if hasattr(self.model.runtime, "model") else None))

    def prompt_name(self, task_metadata, prompt_type) -> str | None:
        """The folder's prompt for this task and prompt type (see the module docstring); None: its default."""
        name = get_prompt_name(self.model_prompts, task_metadata, prompt_type) if self.model_prompts else None
        if name is None and prompt_type is not None and prompt_type.value == "document" \
                and "passage" in (self.model_prompts or {}):
            return "passage"
        return name

    def encode(self, inputs, *, task_metadata=None, hf_split: str | None = None, hf_subset: str | None = None,
               prompt_type=None, **kwargs) -> np.ndarray:
        """[texts, dims] float32 vectors of mteb's batches of inputs (their "text"), or of a list of texts."""
        texts = list(inputs) if isinstance(inputs, (list, tuple)) else [t for batch in inputs for t in batch["text"]]
        self.embedder.prompt_name = self.prompt_name(task_metadata, prompt_type) if task_metadata else None
        if not texts:
            return np.zeros((0, self.embedder.dims), dtype=np.float32)
        return self.embedder(texts)
