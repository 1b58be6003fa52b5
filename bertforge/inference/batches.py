"""Running a model over rows, the one way every consumer does it: evaluation, prediction, features, pipelines and
the server all go through `run`, which plans batches of similar lengths by a row count or a token budget
(`plan_batches`), pads each (`pad`), runs a forward function on it without autograd and puts its results back in
the rows' order. What differs between the callers is given to it, not a second path:

- the rows: dicts of token lists ({"input_ids", "token_type_ids"}, lists of such lists per choice for multiple
  choice): a list of them (pipelines), rows made only when their batch runs (`LazyRows`: the windows of a long
  input), or a split's encoded columns read as rows (`columns`);
- what is padded: `keys`, each batch key with its padding (SEQUENCE_INPUTS by default; a task family's inputs);
- the forward: a function from the padded batch to one result per row, a runtime's (pipelines.py) or a torch
  model's made into one by `model_forward` (its outputs per row, or per token cut to the row's tokens).

`run_model` is `run` on a torch model and a split's encoded columns, its outputs by key. Inputs longer than a
model's window are cut into overlapping windows here too (Google's doc spans), each token read from the window
where it has the most context.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from ..core.errors import BertforgeError

if TYPE_CHECKING:
    import torch

PAD = "pad"  # padding value meaning the tokenizer's [PAD] id
SEQUENCE_INPUTS = {"input_ids": PAD, "token_type_ids": 0, "attention_mask": 0}  # what an encoder reads
MISSING_CHOICE = {"input_ids": PAD, "token_type_ids": 0, "attention_mask": 1}  # one attended [PAD] token


@dataclass(frozen=True)
class PerToken:
    """The padding of a key holding float values per token (a row: an array [tokens, ...], e.g. a teacher's
    logits): `fill` after each row's tokens, for the reader to mask."""

    fill: float = 0.0


def padding(keys: dict, pad_id: int) -> dict:
    """`inputs`/`targets` with PAD replaced by the tokenizer's id."""
    return {k: pad_id if v == PAD else v for k, v in keys.items()}


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


# ---------------------------------------------------------------------------------------------------------
# Rows

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


def row_lengths(encoded: dict[str, list]) -> np.ndarray:
    """Tokens per row of encoded columns (the longest choice's, for rows of several sequences)."""
    ids = encoded["input_ids"]
    return np.array([max(map(len, r)) if r and isinstance(r[0], list) else len(r) for r in ids])


class LazyRows(Sequence):
    """Rows made when they are read, each only for the batch that runs it: the windows of long inputs (a QA
    context, a long text to tag), so that what a long input keeps is linear in its tokens, or a split's encoded
    columns (`columns`). `lengths`: each row's tokens, `widths` its sequences (1 each by default), known without
    making it; `make(i)`: row i."""

    def __init__(self, lengths: Sequence[int], make: Callable[[int], Row], widths: Sequence[int] | None = None):
        self.lengths, self.make = np.asarray(lengths, dtype=np.int64), make
        self.widths = np.ones_like(self.lengths) if widths is None else np.asarray(widths, dtype=np.int64)

    def __len__(self) -> int:
        return len(self.lengths)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        if not -len(self) <= i < len(self):
            raise IndexError(f"row {i} of {len(self)}")
        return self.make(i % len(self))


def columns(encoded: dict[str, list], keys) -> LazyRows:
    """A split's encoded columns (`encoded[key][row]`) read as rows holding those of `keys` it has."""
    held = [k for k in keys if k in encoded]
    widths = [len(r) if r and isinstance(r[0], list) else 1 for r in encoded["input_ids"]]
    return LazyRows(row_lengths(encoded), lambda i: {k: encoded[k][i] for k in held}, widths)


def row_sizes(rows: Sequence[Row]) -> tuple[list[int], list[int]]:
    """Each row's length and width (see row_length, row_width); lazy rows' without making them."""
    if isinstance(rows, LazyRows):
        return rows.lengths.tolist(), rows.widths.tolist()
    return [row_length(r) for r in rows], [row_width(r) for r in rows]


def rows_tokens(rows: Sequence[Row]) -> int:
    """The rows' tokens together (every choice's)."""
    lengths, widths = row_sizes(rows)
    return sum(n * w for n, w in zip(lengths, widths))


# ---------------------------------------------------------------------------------------------------------
# Batches

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


def pad_nested(values: list, fill: int) -> torch.Tensor:
    """[rows][len] or [rows][choices][len] lists of ints as one tensor padded on the last axis."""
    import torch  # here, not at the top: squad's reader and the command line's --help import this module

    flat = [v for row in values for v in row] if isinstance(values[0][0], list) else values
    length = max(len(v) for v in flat)
    out = torch.full((len(flat), length), fill, dtype=torch.long)
    for i, v in enumerate(flat):
        out[i, :len(v)] = torch.tensor(v, dtype=torch.long)
    return out.view(len(values), -1, length) if flat is not values else out


def pad_tokens(values: list, fill: float) -> torch.Tensor:
    """Per-token float rows ([tokens, ...] arrays) as one float32 tensor [rows, longest, ...], `fill` after each
    row's tokens."""
    import torch

    out = np.full((len(values), max(map(len, values)), *np.shape(values[0])[1:]), fill, dtype=np.float32)
    for i, v in enumerate(values):
        out[i, :len(v)] = v
    return torch.from_numpy(out)


def pad_choices(row: Row, width: int, pad_id: int = 0) -> Row:
    """A multiple-choice row padded to `width` choices, each missing one a single attended [PAD] token
    (MISSING_CHOICE), with its choice_mask (the row's own, else 1 for each choice it has) extended by 0 for
    each. The one padding of choices: fine-tuning's encoding pads a split to its most choices with it
    (tasks/multiple_choice.py), `pad` a batch to its most."""
    have, filler = row_width(row), padding(MISSING_CHOICE, pad_id)
    padded = {k: v + [[filler[k]]] * (width - have) if k in filler else v for k, v in row.items()}
    padded["choice_mask"] = list(row.get("choice_mask", [1] * have)) + [0] * (width - have)
    return padded


def ones_over(ids: list) -> list:
    """An attention mask of 1 over every token of a row's sequence (or of each of its choices)."""
    return [[1] * len(s) for s in ids] if ids and isinstance(ids[0], list) else [1] * len(ids)


def pad(rows: Sequence[Row], pad_id: int = 0, keys: dict | None = None) -> dict[str, torch.Tensor]:
    """The rows as one batch: each of `keys` (key -> its padding: a number, PAD for the pad id, None to stack as
    is, or PerToken for float values per token, [B, L, ...]; SEQUENCE_INPUTS by default) that the rows hold,
    padded on its last axis (a PerToken key: its token axis) to the longest row, [B, L]; the
    attention_mask, where rows have none, 1 over their tokens. Multiple-choice rows ([B, C, L]) are padded to the
    batch's most choices (pad_choices), with choice_mask [B, C]."""
    import torch

    keys = padding(SEQUENCE_INPUTS if keys is None else keys, pad_id)
    if "attention_mask" in keys and "attention_mask" not in rows[0]:
        rows = [{**row, "attention_mask": ones_over(row["input_ids"])} for row in rows]
    if is_nested(rows[0]):
        width = max(map(row_width, rows))
        rows, keys = [pad_choices(row, width, pad_id) for row in rows], {**keys, "choice_mask": None}
    batch = {}
    for key, fill in keys.items():
        if key in rows[0]:
            values = [row[key] for row in rows]
            if isinstance(fill, PerToken):
                batch[key] = pad_tokens(values, fill.fill)
            else:
                batch[key] = pad_nested(values, fill) if fill is not None else torch.tensor(values)
    return batch


def pad_batch(encoded: dict[str, list], rows, keys: dict) -> dict[str, torch.Tensor]:
    """`pad` of rows `rows` of encoded columns (a training batch: the family's inputs and targets)."""
    held = [k for k in keys if k in encoded]
    return pad([{k: encoded[k][r] for k in held} for r in rows], keys=keys)


# ---------------------------------------------------------------------------------------------------------
# Running


def run_batch(forward: Callable[[dict], list], rows: Sequence[Row], pad_id: int = 0, keys: dict | None = None) -> list:
    """forward's results for these rows, in their order (one padded batch, under inference mode)."""
    import torch

    with torch.inference_mode():
        results = forward(pad(rows, pad_id, keys))
    if len(results) != len(rows):
        raise RuntimeError(f"forward returned {len(results)} results for {len(rows)} rows")
    return results


def run(forward: Callable[[dict], list], rows: Sequence[Row], batch_size: int | None = 32,
        max_tokens: int | None = None, pad_id: int = 0, progress: str | None = None,
        call_tokens: int | None = None, keys: dict | None = None) -> list:
    """forward's result for every row, in row order: batches of similar lengths (see plan_batches), each made when
    it runs where the rows are lazy (LazyRows), padded by `keys` (see pad). A `progress` label shows a bar (rows/s,
    ETA) on stderr."""
    results = [None] * len(rows)
    lengths, widths = row_sizes(rows)
    batches = plan_batches(lengths, batch_size, max_tokens, widths, call_tokens)
    with tqdm(total=len(rows), desc=progress, unit="row", disable=progress is None, leave=False) as bar:
        for batch in batches:
            for i, result in zip(batch, run_batch(forward, [rows[i] for i in batch], pad_id, keys)):
                results[i] = result
            bar.update(len(batch))
    return results


def per_row(values: torch.Tensor, lengths: torch.Tensor | None = None) -> list[np.ndarray]:
    """A batch's [B, ...] output as float32 arrays, one a row; with `lengths`, per-token rows cut to them."""
    array = values.float().cpu().numpy()
    if lengths is None:
        return list(array)
    return [row[:n] for row, n in zip(array, lengths.tolist())]


def model_forward(model, output_keys: tuple[str, ...], per_token: tuple[str, ...] = (), bf16: bool = False,
                  options: dict | None = None, read: Callable[[dict], dict] | None = None) -> Callable[[dict], list]:
    """A torch model as `run`'s forward (in eval mode): the batch moved to the model's device and given to it with
    `options`, under bf16 autocast with `bf16`; `read` derives outputs from what it returns. Its result per row:
    {key: float32 array} for `output_keys`, those in `per_token` cut to the row's tokens."""
    import torch

    model.eval()
    device = next(model.parameters()).device

    def forward(batch: dict) -> list[dict]:
        tokens = batch["attention_mask"].sum(-1) if per_token else None
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            result = model(**{k: v.to(device) for k, v in batch.items()}, **(options or {}))
        result = read(result) if read is not None else result
        outputs = {k: per_row(result[k], tokens if k in per_token else None) for k in output_keys}
        return [dict(zip(outputs, values)) for values in zip(*outputs.values())]
    return forward


def run_model(model, encoded: dict[str, list], inputs: dict, output_keys: tuple[str, ...],
              per_token: tuple[str, ...] = (), batch_size: int | None = 64, max_tokens: int | None = None,
              bf16: bool = False, progress: str | None = None, forward_options: dict | None = None,
              read: Callable[[dict], dict] | None = None) -> dict[str, list[np.ndarray]]:
    """`run` on a torch model (`model_forward`) and a split's encoded rows (`columns`): the outputs `output_keys`
    for every row, in row order, by key. `inputs`: the batch keys the model reads, with their padding (see pad)."""
    forward = model_forward(model, output_keys, per_token, bf16, forward_options, read)
    results = run(forward, columns(encoded, inputs), batch_size, max_tokens, progress=progress, keys=inputs)
    return {k: [r[k] for r in results] for k in output_keys}
