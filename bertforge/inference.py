"""Running a model over encoded rows, the one way every consumer does it (evaluation, prediction, features,
pipelines, the server): rows sorted by length so that batches carry little padding, batches cut by a row
count or a token budget, padded, run without autograd, and the outputs put back in the rows' order. Inputs
longer than a model's window are cut into overlapping windows here too (Google's doc spans), each token read
from the window where it has the most context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import numpy as np
from tqdm import tqdm

if TYPE_CHECKING:
    import torch


def pad_nested(values: list, fill: int) -> torch.Tensor:
    """[rows][len] or [rows][choices][len] lists of ints as one tensor padded on the last axis."""
    import torch  # here, not at the top: squad's reader and the command line's --help import this module

    flat = [v for row in values for v in row] if isinstance(values[0][0], list) else values
    length = max(len(v) for v in flat)
    out = torch.full((len(flat), length), fill, dtype=torch.long)
    for i, v in enumerate(flat):
        out[i, :len(v)] = torch.tensor(v, dtype=torch.long)
    return out.view(len(values), -1, length) if flat is not values else out


def pad_batch(encoded: dict[str, list], rows, keys: dict) -> dict[str, torch.Tensor]:
    """Tensors of the given rows for `keys` (key -> padding fill, or None to stack as is) present in `encoded`."""
    import torch

    batch = {}
    for key, fill in keys.items():
        if key in encoded:
            values = [encoded[key][r] for r in rows]
            batch[key] = pad_nested(values, fill) if fill is not None else torch.tensor(values)
    return batch


def row_lengths(encoded: dict[str, list]) -> np.ndarray:
    """Tokens per row (the longest choice's, for rows of several sequences)."""
    ids = encoded["input_ids"]
    return np.array([max(map(len, r)) if r and isinstance(r[0], list) else len(r) for r in ids])


def length_sorted_batches(lengths: np.ndarray, batch_size: int | None = None,
                          max_tokens: int | None = None) -> list[np.ndarray]:
    """Row indices in batches of similar lengths: at most `batch_size` rows, and at most `max_tokens` padded
    tokens (rows x the longest), whichever binds first; a row longer than the budget goes alone."""
    order = np.argsort(lengths, kind="stable")
    batches, start = [], 0
    while start < len(order):
        end = start + 1
        while end < len(order) and (batch_size is None or end - start < batch_size) and \
                (max_tokens is None or (end + 1 - start) * lengths[order[end]] <= max_tokens):
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


def doc_spans(n: int, room: int, stride: int) -> list[tuple[int, int]]:
    """Google's doc spans as (start, length): windows of `room` tokens, each `stride` past the last."""
    spans, start = [], 0
    while start < n:
        length = min(n - start, room)
        spans.append((start, length))
        if start + length == n:
            break
        start += min(length, stride)
    return spans


def max_context_window(n: int, spans) -> np.ndarray:
    """For each token, the window giving it the most context (Google's _check_is_max_context)."""
    if len(spans) == 1:  # most passages: a shortcut worth seconds on the training set
        return np.zeros(n, dtype=np.intp)
    start = np.array([s for s, _ in spans])[:, None]
    length = np.array([size for _, size in spans])[:, None]
    pos = np.arange(n)[None, :]
    end = start + length - 1
    score = np.minimum(pos - start, end - pos) + 0.01 * length
    score = np.where((pos >= start) & (pos <= end), score, -np.inf)
    return score.argmax(0)  # the first of equal scores wins, as Google's strict '>'


def run_model(model, encoded: dict[str, list], inputs: dict, output_keys: tuple[str, ...],
              per_token: tuple[str, ...] = (), batch_size: int | None = 64, max_tokens: int | None = None,
              bf16: bool = False, progress: str | None = None, forward_options: dict | None = None,
              read: Callable[[dict], dict] | None = None) -> dict[str, list[np.ndarray]]:
    """The model's outputs `output_keys` for every row of `encoded`, in row order.

    `inputs`: the batch keys the model reads, with their padding (see pad_batch). Outputs named in `per_token`
    are cut to each row's length. `forward_options` are passed to the model, and `read` (the model's output
    -> tensors by key) derives outputs from it. A `progress` label shows a bar (rows/s, ETA) on stderr.
    """
    import torch

    with torch.inference_mode():
        model.eval()
        device = next(model.parameters()).device
        lengths = row_lengths(encoded)
        out = {k: [None] * len(lengths) for k in output_keys}
        bar = tqdm(total=len(lengths), desc=progress, unit="row", disable=progress is None, leave=False)
        for rows in length_sorted_batches(lengths, batch_size, max_tokens):
            bar.update(len(rows))
            batch = {k: v.to(device) for k, v in pad_batch(encoded, rows, inputs).items()}
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
                result = model(**batch, **(forward_options or {}))
            if read is not None:
                result = read(result)
            for k in output_keys:
                values = result[k].float().cpu().numpy()
                for j, r in enumerate(rows):
                    out[k][r] = values[j, :lengths[r]] if k in per_token else values[j]
        bar.close()
        return out
