"""Running a model over encoded rows, the one way every consumer does it (evaluation, prediction, features,
pipelines, the server): rows sorted by length so that batches carry little padding, batches cut by a row
count or a token budget, padded, run without autograd, and the outputs put back in the rows' order. Inputs
longer than a model's window are cut into overlapping windows here too (Google's doc spans), each token read
from the window where it has the most context.

Pipelines and the server (pipelines.py, batcher.py) hand over rows as dicts instead: {"input_ids",
"token_type_ids"} lists per row, or lists of such lists for the choices of a multiple-choice example, and a
`forward(batch)` function from the padded tensors to one result per row (see the last section).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from ..core.errors import BertforgeError

PAD = "pad"  # padding value meaning the tokenizer's [PAD] id
SEQUENCE_INPUTS = {"input_ids": PAD, "token_type_ids": 0, "attention_mask": 0}  # what an encoder reads


def padding(keys: dict, pad_id: int) -> dict:
    """`inputs`/`targets` with PAD replaced by the tokenizer's id."""
    return {k: pad_id if v == PAD else v for k, v in keys.items()}

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
    """For each token, the window giving it the most context (Google's _check_is_max_context). Each window
    scores only its own tokens, so the work and memory are the windows' tokens (a few times n), never
    windows x n: a 1 MB context has thousands of windows."""
    best = np.zeros(n, dtype=np.intp)
    if len(spans) == 1:  # most passages: a shortcut worth seconds on the training set
        return best
    top = np.full(n, -np.inf)
    for k, (start, length) in enumerate(spans):
        pos = np.arange(length)
        score = np.minimum(pos, length - 1 - pos) + 0.01 * length
        better = score > top[start:start + length]  # strict: the first of equal scores wins, as Google's '>'
        top[start:start + length][better] = score[better]
        best[start:start + length][better] = k
    return best


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
        widths = [len(r) if r and isinstance(r[0], list) else 1 for r in encoded["input_ids"]]
        for rows in plan_batches(lengths, batch_size, max_tokens, widths):
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


# ---------------------------------------------------------------------------------------------------------
# Rows as dicts, run by a forward function: pipelines and the server

Row = dict[str, list]


def is_nested(row: Row) -> bool:
    """True for a multiple-choice row (one sequence per choice)."""
    ids = row["input_ids"]
    return bool(ids) and isinstance(ids[0], list)


def row_length(row: Row) -> int:
    """Tokens of the row's longest sequence."""
    return max(map(len, row["input_ids"])) if is_nested(row) else len(row["input_ids"])


def row_width(row: Row) -> int:
    """Sequences in the row: its choices, or 1."""
    return len(row["input_ids"]) if is_nested(row) else 1


class LazyRows(Sequence):
    """Rows made when they are read: the windows of long inputs (a QA context, a long text to tag), each built
    only for the batch that runs it, so that what a long input keeps is linear in its tokens. `lengths`: each
    row's tokens (one sequence a row), known without making it; `make(i)`: row i."""

    def __init__(self, lengths: Sequence[int], make: Callable[[int], Row]):
        self.lengths, self.make = np.asarray(lengths, dtype=np.int64), make

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        return self.make(i % len(self))


def row_sizes(rows: Sequence[Row]) -> tuple[list[int], list[int]]:
    """Each row's length and width (see row_length, row_width); lazy rows' without making them."""
    if isinstance(rows, LazyRows):
        return rows.lengths.tolist(), [1] * len(rows)
    return [row_length(r) for r in rows], [row_width(r) for r in rows]


def rows_tokens(rows: Sequence[Row]) -> int:
    """The rows' tokens together (every choice's)."""
    lengths, widths = row_sizes(rows)
    return sum(n * w for n, w in zip(lengths, widths))


def plan_batches(lengths: Sequence[int], batch_size: int | None = 32, max_tokens: int | None = None,
                 widths: Sequence[int] | None = None, call_tokens: int | None = None) -> list[list[int]]:
    """Row indices shortest first, cut into batches of at most `batch_size` rows and `max_tokens` padded tokens
    (a row longer than the budget alone makes a batch). With `call_tokens` (what one forward call costs, in
    padded tokens: runtimes that compute on the padding, see runtime.OnnxRuntime), each batch is cut further
    where the padding saved is worth more than the extra calls (`cut_padding`)."""
    if batch_size is not None and batch_size < 1:
        raise BertforgeError(f"batch_size must be at least 1, not {batch_size}")
    if max_tokens is not None and max_tokens < 1:
        raise BertforgeError(f"max_tokens must be at least 1, not {max_tokens}")
    widths = widths if widths is not None else [1] * len(lengths)
    batches, current, width = [], [], 0
    for i in np.argsort(np.asarray(lengths, dtype=np.int64), kind="stable").tolist():
        grown_width = max(width, widths[i])
        full = batch_size is not None and len(current) >= batch_size
        over = max_tokens is not None and (len(current) + 1) * lengths[i] * grown_width > max_tokens
        if current and (full or over):
            batches.append(current)
            current, grown_width = [], widths[i]
        current.append(i)
        width = grown_width
    batches = batches + [current] if current else batches
    if call_tokens is None:
        return batches
    return [part for batch in batches for part in cut_padding(batch, lengths, widths, call_tokens)]


def cut_padding(batch: list[int], lengths: Sequence[int], widths: Sequence[int], call_tokens: int) -> list[list[int]]:
    """The cheapest cut of a batch (rows shortest first) into consecutive parts, a part costing its padded
    tokens plus `call_tokens`. Rows of one length stay together (no dearer for rows of one width), so the
    search is over the distinct lengths (at most the model's positions), quadratic in their number."""
    groups = []  # [length, width, rows]
    for i in batch:
        if groups and groups[-1][0] == lengths[i]:
            groups[-1][1] = max(groups[-1][1], widths[i])
            groups[-1][2].append(i)
        else:
            groups.append([lengths[i], widths[i], [i]])
    best, start = [0.0] + [math.inf] * len(groups), [0] * (len(groups) + 1)  # cheapest cut of the first k groups
    for end in range(1, len(groups) + 1):
        rows, width = 0, 0
        for first in range(end - 1, -1, -1):
            rows, width = rows + len(groups[first][2]), max(width, groups[first][1])
            cost = best[first] + rows * groups[end - 1][0] * width + call_tokens
            if cost < best[end]:
                best[end], start[end] = cost, first
    parts, end = [], len(groups)
    while end:
        parts.append([i for group in groups[start[end]:end] for i in group[2]])
        end = start[end]
    return parts[::-1]


def pad(rows: Sequence[Row], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """input_ids, token_type_ids and attention_mask [B, L] (multiple choice: [B, C, L] and choice_mask [B, C]).

    Choices missing from an example with fewer are a single pad token, marked 0 in choice_mask."""
    import torch

    nested = is_nested(rows[0])
    sequences = [seq for row in rows for seq in (row_choices(row, max(map(row_width, rows))) if nested else [row])]
    length = max(len(s["input_ids"]) for s in sequences)
    ids = torch.full((len(sequences), length), pad_id, dtype=torch.long)
    types = torch.zeros_like(ids)
    mask = torch.zeros_like(ids)
    for i, s in enumerate(sequences):
        n = len(s["input_ids"])
        ids[i, :n] = torch.tensor(s["input_ids"])
        types[i, :n] = torch.tensor(s["token_type_ids"])
        mask[i, :n] = 1
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask}
    if nested:
        batch = {k: v.view(len(rows), -1, length) for k, v in batch.items()}
        batch["choice_mask"] = torch.tensor([[int(c < row_width(r)) for c in range(batch["input_ids"].shape[1])]
                                             for r in rows])
    return batch


def row_choices(row: Row, width: int) -> list[Row]:
    """The row's sequences, one per choice, padded with single-token sequences to `width` choices."""
    out = [{"input_ids": ids, "token_type_ids": types} for ids, types in zip(row["input_ids"], row["token_type_ids"])]
    return out + [{"input_ids": [0], "token_type_ids": [0]}] * (width - len(out))


def run_batch(forward: Callable[[dict], list], rows: Sequence[Row], pad_id: int = 0) -> list:
    """forward's results for these rows, in their order (one padded batch, under inference mode)."""
    import torch

    with torch.inference_mode():
        results = forward(pad(rows, pad_id))
    if len(results) != len(rows):
        raise RuntimeError(f"forward returned {len(results)} results for {len(rows)} rows")
    return results


def run(forward: Callable[[dict], list], rows: Sequence[Row], batch_size: int | None = 32,
        max_tokens: int | None = None, pad_id: int = 0, progress: str | None = None,
        call_tokens: int | None = None) -> list:
    """forward's result for every row, in row order; batches of similar lengths (see plan_batches), each made
    when it runs where the rows are lazy (LazyRows). A `progress` label shows a bar (rows/s, ETA) on stderr."""
    results = [None] * len(rows)
    lengths, widths = row_sizes(rows)
    batches = plan_batches(lengths, batch_size, max_tokens, widths, call_tokens)
    with tqdm(total=len(rows), desc=progress, unit="row", disable=progress is None, leave=False) as bar:
        for batch in batches:
            for i, result in zip(batch, run_batch(forward, [rows[i] for i in batch], pad_id)):
                results[i] = result
            bar.update(len(batch))
    return results


def per_row(values: torch.Tensor, lengths: torch.Tensor | None = None) -> list[np.ndarray]:
    """A batch's [B, ...] output as float32 arrays, one a row; with `lengths`, per-token rows cut to them."""
    array = values.float().cpu().numpy()
    if lengths is None:
        return list(array)
    return [row[:n] for row, n in zip(array, lengths.tolist())]
