"""The models behind `bertforge embed` and `bertforge search` (embed.py, search.py): texts to the vectors a corpus's
shards hold. `Embedder` runs the sentence-embedding pipeline (embedding_pipelines.SentenceEmbedding: the folder's
pooling, Dense modules and normalisation; batches of similar lengths under a token budget, batches.run) and cuts its
vectors to `dimensions` (Matryoshka); `SparseEmbedder` runs the sparse-embedding pipeline for a SPLADE model. Both
check the prompt they are given by name against the folder's, and count the texts cut to the length limit, which a
run reports once at its end."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.hub import model_folder
from ..model.formats.sentence_folder import ST_CONFIG

CHUNK_ROWS = 2048  # passages given to the pipeline at a time (it sorts them by length into token-budget batches)
BATCH_TOKENS = 16384


class PipelineEmbedder:
    """What both embedders share: the pipeline they run, the prompt they name, the texts they have cut."""

    def _open(self, task: str, model, revision, device, bf16: bool, batch_tokens: int, folder, prompt):
        """The pipeline of `task` on `folder` (else the model's), in chunks of CHUNK_ROWS under `batch_tokens`; the
        prompt named is refused by name where the folder has no such prompt."""
        from .pipelines import pipeline

        self.folder = folder or model_folder(model, revision)
        self.pipe = pipeline(task, self.folder, device=device, bf16=bf16, batch_size=CHUNK_ROWS,
                             max_batch_tokens=batch_tokens)
        self.prompts, self.prompt_name, self.cut = self.pipe.prompts, prompt, 0  # cut: texts cut to the limit so far
        if prompt is not None and prompt not in self.prompts:
            known = f"its prompts: {', '.join(self.prompts)}" if self.prompts else "it names none"
            raise BertforgeError(f"--prompt {prompt}: {self.folder / ST_CONFIG} names no such prompt ({known})")

    def _run(self, texts: list[str], **options):
        """The pipeline's prepared inputs for `texts` (with the prompt named) and its outputs, run in token-budget
        batches; the texts cut to the length limit are added to `cut`."""
        from .batches import run

        pipe = self.pipe
        prepared = pipe.prepare(texts, prompt_name=self.prompt_name, **options)
        self.cut += len(prepared.extra.get("cut", ()))
        outputs = run(pipe.forward, prepared.rows, pipe.batch_size, pipe.max_batch_tokens,
                      pipe.tokenizer.pad_token_id, None, pipe.runtime.call_tokens)
        return prepared, outputs


class Embedder(PipelineEmbedder):
    """Texts to float32 vectors as `bertforge embed` and `bertforge search` make them: a sentence-embedding
    pipeline on the model `model` (a folder or a Hub name, at `revision`), with the prompt named `prompt` (None:
    the folder's default prompt, if it has one), cut to `dimensions`."""

    def __init__(self, model, revision: str | None = None, device: str | None = None, bf16: bool = False,
                 batch_tokens: int = BATCH_TOKENS, prompt: str | None = None, dimensions: int | None = None,
                 folder: Path | None = None):
        self._open("sentence-embedding", model, revision, device, bf16, batch_tokens, folder, prompt)
        self.model_dims = self.pipe.declared.dimension(self.pipe.config.hidden_size)
        if dimensions is not None and not 1 <= dimensions <= self.model_dims:
            raise BertforgeError(f"--dimensions {dimensions}: the model's vectors have {self.model_dims}")
        self.dims = dimensions or self.model_dims

    @property
    def normalized(self) -> bool:
        """Whether the vectors are unit length (the folder's Normalize module), as the manifest records."""
        return bool(self.pipe.defaults["normalize"])

    def __call__(self, texts: list[str]) -> np.ndarray:
        """[len(texts), dims] float32 vectors; texts over the length limit are cut to it (counted in `cut`)."""
        prepared, outputs = self._run(texts, dimensions=self.dims)
        return self.pipe.vectors(prepared, outputs).astype(np.float32, copy=False).reshape(len(texts), self.dims)

    def join(self, chunks: list) -> np.ndarray:
        """A shard's vectors from its chunks'."""
        return np.concatenate(chunks)


class SparseEmbedder(PipelineEmbedder):
    """Texts to SPLADE vectors as `bertforge embed --sparse` and `bertforge search` make them: the sparse-embedding
    pipeline (embedding_pipelines.SparseEmbedding) on a SparseEncoder folder, with the prompt named `prompt`. Called,
    a list of (token ids ascending, weights) per text; with `dense_queries`, [texts, vocabulary] float32 rows (a
    search's queries)."""

    normalized = False

    def __init__(self, model, revision: str | None = None, device: str | None = None, bf16: bool = False,
                 batch_tokens: int = BATCH_TOKENS, prompt: str | None = None, folder: Path | None = None,
                 dense_queries: bool = False):
        self._open("sparse-embedding", model, revision, device, bf16, batch_tokens, folder, prompt)
        self.dense_queries = dense_queries
        self.dims = self.model_dims = self.pipe.config.vocab_size

    def __call__(self, texts: list[str]):
        """Per text, its token ids (ascending) and their weights; with `dense_queries`, [len(texts), vocabulary]
        float32 rows. Texts over the length limit are cut to it (counted in `cut`)."""
        _, outputs = self._run(texts)
        if not self.dense_queries:
            return outputs
        vectors = np.zeros((len(texts), self.dims), dtype=np.float32)
        for row, (ids, values) in zip(vectors, outputs):
            row[ids] = values
        return vectors

    def join(self, chunks: list) -> list:
        """A shard's rows from its chunks'."""
        return [row for chunk in chunks for row in chunk]


def make_embedder(model, folder: Path, settings: dict, device, bf16: bool, batch_tokens: int):
    """The embedder a run's settings ask for: SparseEmbedder with "sparse", else Embedder cut to "dimensions"."""
    if settings["sparse"]:
        return SparseEmbedder(model, device=device, bf16=bf16, batch_tokens=batch_tokens, prompt=settings["prompt"],
                              folder=folder)
    return Embedder(model, device=device, bf16=bf16, batch_tokens=batch_tokens, prompt=settings["prompt"],
                    dimensions=settings["dimensions"], folder=folder)
