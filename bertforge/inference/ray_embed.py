"""The embedder of `bertforge embed` as a Ray Data stage: a class that `Dataset.map_batches` builds once per actor
(the model loaded once) and calls with each batch, which comes back with an "embedding" column.

    import ray
    from bertforge.inference.ray_embed import RayEmbedder

    ds = ray.data.read_parquet("s3://bucket/passages/")
    ds = ds.map_batches(RayEmbedder, fn_constructor_kwargs={"model": "sentence-transformers/all-MiniLM-L6-v2"},
                        batch_format="pandas", batch_size=1024, concurrency=8)
    ds.write_parquet("s3://bucket/embeddings/")

The vectors are those of `bertforge embed` (embed.Embedder: the folder's pooling, prompt, normalisation, cut to
`dimensions`), quantized to `precision` (quantize.py); int8/uint8 need their ranges up front (`calibration`: a .npy
of float embeddings, or `ranges`: [2, dims] minima and maxima, as an embeddings manifest keeps them), since each
batch is quantized on its own. Ray itself is not imported here: the class is plain, picklable by reference.
"""

from __future__ import annotations

import numpy as np

from ..core.errors import BertforgeError
from .embed import BATCH_TOKENS, Embedder, read_calibration
from .quantize import check_precision, check_ranges, is_scalar, quantize


class RayEmbedder:
    """A batch's `column` texts to vectors in `output_column` (see the module docstring); a pandas DataFrame or a
    dict of numpy arrays (batch_format "pandas" or "numpy"), the same kind back."""

    def __init__(self, model, revision: str | None = None, column: str = "text", output_column: str = "embedding",
                 precision: str = "float32", dimensions: int | None = None, prompt: str | None = None,
                 calibration=None, ranges=None, device: str | None = None, bf16: bool = False,
                 batch_tokens: int = BATCH_TOKENS, threads: int | None = None):
        check_precision(precision, "precision")
        if threads is not None:
            import torch

            torch.set_num_threads(threads)
        self.embedder = Embedder(model, revision=revision, device=device, bf16=bf16, batch_tokens=batch_tokens,
                                 prompt=prompt, dimensions=dimensions)
        self.column, self.output_column, self.precision = column, output_column, precision
        self.ranges = None
        if is_scalar(precision):
            if (calibration is None) == (ranges is None):
                raise BertforgeError(f"precision {precision}: give calibration (a .npy of float embeddings) or "
                                     f"ranges ([2, dims]), one of them: each batch is quantized on its own")
            self.ranges = read_calibration(calibration, self.embedder.dims) if calibration is not None else \
                check_ranges(ranges, self.embedder.dims, "ranges")
        elif calibration is not None or ranges is not None:
            raise BertforgeError(f"calibration and ranges quantize int8 and uint8 vectors, not {precision}")

    @property
    def dims(self) -> int:
        return self.embedder.dims

    def __call__(self, batch):
        if self.column not in batch:
            raise BertforgeError(f"no column {self.column!r} in the batch; its columns: {', '.join(map(str, batch))}")
        texts = [str(text) for text in batch[self.column]]
        floats = self.embedder(texts) if texts else np.zeros((0, self.dims), np.float32)
        values = quantize(floats, self.precision, self.ranges)
        if isinstance(batch, dict):  # batch_format "numpy"
            return {**batch, self.output_column: values}
        batch = batch.copy()  # pandas: a column of 1-D arrays
        batch[self.output_column] = list(values)
        return batch
