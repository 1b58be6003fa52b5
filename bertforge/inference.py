"""Running a model over many encoded rows: sorted by length, cut into batches, padded, results in input order.

A row is one model input as lists of token ids: {"input_ids": [...], "token_type_ids": [...]} for a sequence,
or lists of such lists for the choices of a multiple-choice example. What runs is a `forward(batch)` function
from the padded tensors to one result per row (see pipelines.py); this module knows no task.

Batches hold at most `batch_size` rows and, with `max_tokens`, at most that many padded tokens (rows times the
longest row, times the choices): a token budget keeps a batch of long texts as cheap as one of short texts.
"""

from collections.abc import Callable, Sequence

import numpy as np
import torch
from tqdm import tqdm

from .errors import BertforgeError

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


def plan_batches(lengths: Sequence[int], batch_size: int | None = 32, max_tokens: int | None = None,
                 widths: Sequence[int] | None = None) -> list[list[int]]:
    """Row indices shortest first, cut into batches of at most `batch_size` rows and `max_tokens` padded tokens
    (a row longer than the budget alone makes a batch)."""
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
    return batches + [current] if current else batches


def pad(rows: Sequence[Row], pad_id: int = 0) -> dict[str, torch.Tensor]:
    """input_ids, token_type_ids and attention_mask [B, L] (multiple choice: [B, C, L] and choice_mask [B, C]).

    Choices missing from an example with fewer are a single pad token, marked 0 in choice_mask."""
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
    with torch.inference_mode():
        results = forward(pad(rows, pad_id))
    if len(results) != len(rows):
        raise RuntimeError(f"forward returned {len(results)} results for {len(rows)} rows")
    return results


def run(forward: Callable[[dict], list], rows: Sequence[Row], batch_size: int | None = 32,
        max_tokens: int | None = None, pad_id: int = 0, progress: str | None = None) -> list:
    """forward's result for every row, in row order; batches of similar lengths (see plan_batches).
    A `progress` label shows a bar (rows/s, ETA) on stderr."""
    results = [None] * len(rows)
    batches = plan_batches([row_length(r) for r in rows], batch_size, max_tokens, [row_width(r) for r in rows])
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
