"""Feature-based use (spec section 7): hidden states of chosen layers, per token, per word or per sentence.

No fine-tuning: the encoder runs once over the texts and the hidden states of the chosen layers are combined
(the paper's best CoNLL NER feature set concatenates the last four). Layers index the encoder's hidden states:
0 is the embedding output, 1..L the layers, -1 the last layer.

- token level: per text an array [tokens, dim], the special tokens included ([CLS] and [SEP] for BERT, as
  Google's extract_features).
- word level: per text an array [words, dim], one row per whitespace-separated word of the input (punctuation
  that BERT splits off stays with its word), from the word's first piece (the paper's NER setup) or the mean of
  its pieces. A word the tokenizer drops entirely (e.g. only control characters) gets a zero row.
- sentence level: per text a vector [dim] pooled from the combined layers' token vectors ([CLS] and [SEP]
  included) as sentence-transformers pools them (sentence_folder.pool: mean, cls, max, lasttoken, ...), of unit
  length with normalize. A sentence-transformers folder's declaration gives the defaults left None: the last
  layer, its pooling, Normalize, max_seq_length (as the window length: a longer text is windowed, where
  sentence-transformers cuts it) and default prompt; a plain folder's are the last four layers, mean, not
  normalized, windows of 512 tokens (fewer where the model has fewer positions).

Texts longer than `max_length` are cut into overlapping windows, each starting `stride` tokens past the last
(Google's doc_stride), and each token is taken from the window where it has the most context on both sides (as
Google's SQuAD code scores it); [CLS] comes from the first window, the final [SEP] from the last. Text pairs
("A ||| B") are instead truncated, longest first, and the truncated pairs counted in one warning.
Windows run in length-sorted batches (inference.batches.run_model), so that batches carry little padding.
"""

from __future__ import annotations

import bisect
import json
import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ..core.errors import BertforgeError
from ..core.hub import model_folder
from ..core.io import atomic_path, rounded
from ..model.formats.sentence_folder import check_pooling, normalized, pool, read_sentence_folder
from .batches import doc_spans, max_context_window, run_model
from .batches import SEQUENCE_INPUTS, padding
from ..text.encoding import truncated_lengths
from ..text.layout import layout
from ..text.tokenizer import BertTokenizer

if TYPE_CHECKING:  # torch and the model are imported where they are used: --help does not load torch
    import torch

log = logging.getLogger("bertforge")

LEVELS = ("token", "word", "sentence")
COMBINES = ("concat", "sum", "mean")
WORD_VECTORS = ("first", "mean")
WORD = re.compile(r"\S+")  # the words of str.split()


@dataclass
class Features:
    """What `extract_features` returns.

    `vectors`: token/word level, a list with one float32 array [tokens or words, dim] per text; sentence level,
    one float32 array [texts, dim]. `tokens`: per text its tokens (token level) or words (word level); None at
    sentence level. `texts`: the inputs, a pair as "A ||| B".
    """

    level: str
    layers: tuple[int, ...]
    combine: str
    vectors: list[np.ndarray] | np.ndarray
    tokens: list[list[str]] | None
    texts: list[str]
    dim: int
    windowed: int = 0  # texts cut into several windows
    truncated: int = 0  # pairs truncated to max_length

    def __len__(self) -> int:
        return len(self.texts)


@dataclass
class _Item:
    """One text: its windows, and where each of its output tokens is found in them."""

    windows: list[int]  # global window indices, in order
    gather: np.ndarray  # [tokens, 2]: (window number within this text, position in that window)
    tokens: list[str]
    starts: np.ndarray  # [tokens] character offset of each token in its own text; -1 for special tokens
    segments: np.ndarray  # [tokens] 0 for text A and the special tokens ahead of B, 1 from B on
    text_a: str
    text_b: str | None


class FeatureExtractor:
    """A loaded model and tokenizer; `extract(texts, ...)` may be called many times."""

    def __init__(self, model_dir, device: str | None = None, revision: str | None = None, token: str | None = None):
        folder = model_folder(model_dir, revision, token)  # or a Hub name (org/name)
        if not folder.is_dir():
            raise BertforgeError(f"{folder}: no such model folder")
        from ..model.architectures.bert import BertModel
        from .runtime import pick_device

        self.folder = folder
        self.tokenizer = BertTokenizer.from_pretrained(folder)
        self.model = BertModel.from_pretrained(folder, skip_init=True)
        self.device = pick_device(device)
        self.model.to(self.device)
        self.config = self.model.config
        self.declared = read_sentence_folder(folder)

    def check_layers(self, layers) -> tuple[int, ...]:
        layers = tuple(int(layer) for layer in layers)
        n = self.config.num_hidden_layers
        if not layers:
            raise BertforgeError("no layers chosen: give at least one hidden-state index (0 = embeddings, -1 = last)")
        for layer in layers:
            if not -(n + 1) <= layer <= n:
                raise BertforgeError(
                    f"{self.folder / 'config.json'}: layer {layer} does not exist: the model has {n} layers, so "
                    f"hidden-state indices run from 0 (embeddings) to {n}, or from -{n + 1} to -1 (last layer)")
        return layers

    def extract(self, texts, layers=None, combine="concat", level="token", pooling=None, word_vector="first",
                max_length=None, stride=None, batch_size=32, bf16=False, progress: str | None = None,
                normalize=None) -> Features:
        """Features of `texts` (strings, or (A, B) pairs whose B may be None); see the module docstring (what
        None means for layers, pooling, max_length and normalize). A `progress` label shows a bar on stderr."""
        for name, value, allowed in (("combine", combine, COMBINES), ("level", level, LEVELS),
                                     ("word_vector", word_vector, WORD_VECTORS)):
            if value not in allowed:
                raise BertforgeError(f"{name} must be one of {', '.join(allowed)}, not {value!r}")
        declared = self.declared if level == "sentence" else None  # the folder's, at sentence level only
        layers = self.check_layers(((-1,) if declared else (-1, -2, -3, -4)) if layers is None else layers)
        pooling = check_pooling(pooling or (declared.pooling if declared else "mean"))
        declared_length = declared and declared.max_seq_length and min(declared.max_seq_length,
                                                                       self.config.max_tokens)
        max_length = max_length or declared_length or min(512, self.config.max_tokens)
        pairs = _as_pairs(texts)
        stride = self._check_sizes(max_length, stride, batch_size)
        skip = declared.skipped(self.tokenizer) if declared else 0  # a prompt's tokens, left out of the pooling
        items, windows, truncated = self._plan([(declared.text(a), b) for a, b in pairs] if declared else pairs,
                                               max_length, stride)
        if truncated:
            log.warning(f"{truncated} of {sum(b is not None for _, b in pairs)} text pairs were longer than "
                        f"max_length={max_length} and were truncated (longest text first)")
        windowed = sum(len(item.windows) > 1 for item in items)
        if windowed:
            log.info(f"{windowed} texts longer than max_length={max_length} were read in overlapping windows "
                     f"(stride {stride}); each token comes from the window where it has the most context")

        encoded = {"input_ids": [ids for ids, _ in windows], "token_type_ids": [types for _, types in windows],
                   "attention_mask": [[1] * len(ids) for ids, _ in windows]}
        combined = run_model(self.model, encoded, padding(SEQUENCE_INPUTS, self.tokenizer.pad_token_id),
                             ("features",), per_token=("features",), batch_size=batch_size, bf16=bf16,
                             forward_options={"output_hidden_states": True}, progress=progress,
                             read=lambda out: {"features": _combine(out.hidden_states, layers, combine)})["features"]
        results, empty_words = [], 0
        for item in items:
            matrix = _stitch(item, [combined[w] for w in item.windows])
            if level == "token":
                results.append(matrix)
            elif level == "sentence":
                results.append(pool(matrix, pooling, skip))
            else:
                vectors, item.tokens, missing = _word_vectors(item, matrix, word_vector)
                results.append(vectors)
                empty_words += missing
        if empty_words:
            log.warning(f"{empty_words} words had no tokens (the tokenizer drops their characters); "
                        f"their word vectors are zeros")

        dim = self.config.hidden_size * (len(layers) if combine == "concat" else 1)
        vectors = np.stack(results).reshape(len(items), dim) if level == "sentence" else results
        if level == "sentence" and (bool(declared and declared.normalize) if normalize is None else normalize):
            vectors = normalized(vectors)
        return Features(level=level, layers=layers, combine=combine, vectors=vectors,
                        tokens=None if level == "sentence" else [item.tokens for item in items],
                        texts=[a if b is None else f"{a} ||| {b}" for a, b in pairs], dim=dim,
                        windowed=windowed, truncated=truncated)

    def _check_sizes(self, max_length: int, stride: int | None, batch_size: int) -> int:
        """The stride (None: half a window), once the sizes are checked."""
        limit = self.config.max_tokens
        if not 3 <= max_length <= limit:
            raise BertforgeError(f"max_length must be between 3 and {limit} (the model's positions), not {max_length}")
        stride = max(1, (max_length - 2) // 2) if stride is None else stride
        if stride < 1:
            raise BertforgeError(f"stride must be at least 1, not {stride}")
        if batch_size < 1:
            raise BertforgeError(f"batch_size must be at least 1, not {batch_size}")
        return stride

    def _plan(self, pairs, max_length: int, stride: int):
        """Tokenize, and lay each text out as the tokenizer does (text.layout.layout: BERT's [CLS] A [SEP] and
        [CLS] A [SEP] B [SEP], RoBERTa's <s> A </s> and <s> A </s></s> B </s>), a long A cut into windows."""
        backend = self.tokenizer.backend_tokenizer
        firsts = backend.encode_batch([a for a, _ in pairs], add_special_tokens=False)
        seconds = dict(zip([i for i, (_, b) in enumerate(pairs) if b is not None],
                           backend.encode_batch([b for _, b in pairs if b is not None], add_special_tokens=False)))
        single, pair = (layout(backend, self.tokenizer.cls_token, pair) for pair in (False, True))
        items, windows, truncated = [], [], 0
        for i, ((a, b), first) in enumerate(zip(pairs, firsts)):
            if b is None:
                item_windows, item = _windows(single, first, max_length - len(single) + 1, stride, backend)
            else:
                n, m = len(first.ids), len(seconds[i].ids)
                n1, n2 = truncated_lengths(n, m, True, max_length - len(pair) + 2, "longest_first", max_length)
                truncated += (n1, n2) != (n, m)
                item_windows, item = _pair(pair, first, n1, seconds[i], n2, backend)
            items.append(_Item(list(range(len(windows), len(windows) + len(item_windows))), *item, a, b))
            windows += item_windows
        return items, windows, truncated


def _laid_out(parts: list[tuple], sizes: dict[str, int]) -> list[tuple]:
    """The positions of a text or pair laid out as `parts` (text.layout.layout) with texts of `sizes` tokens
    ({"A": n, "B": m}): per position (part, index within it, segment id); a special token's part is its id."""
    return [(part, i, segment) for part, segment in parts for i in range(sizes.get(part, 1))]


def _rows(positions, texts: dict, backend) -> tuple[list[int], list[int], list[str], np.ndarray, np.ndarray]:
    """The ids, segment ids, tokens, character starts (-1: special) and text (0: A, 1: B) of each position."""
    ids = [texts[p].ids[i] if p in texts else p for p, i, _ in positions]
    tokens = [texts[p].tokens[i] if p in texts else backend.id_to_token(p) for p, i, _ in positions]
    starts = np.array([texts[p].offsets[i][0] if p in texts else -1 for p, i, _ in positions], dtype=np.int64)
    which = np.cumsum([p == "B" and i == 0 for p, i, _ in positions]).astype(np.int64)
    return ids, [s for *_, s in positions], tokens, starts, which


def _pair(parts, first, n1: int, second, n2: int, backend):
    """A pair's one window (A cut to n1 tokens, B to n2) and its _Item fields."""
    ids, types, tokens, starts, which = _rows(_laid_out(parts, {"A": n1, "B": n2}), {"A": first, "B": second},
                                              backend)
    gather = np.stack([np.zeros(len(ids), dtype=np.intp), np.arange(len(ids))], 1)
    return [(ids, types)], (gather, tokens, starts, which)


def _windows(parts, first, room: int, stride: int, backend):
    """A text's windows of at most `room` of its tokens (one where it fits), and its _Item fields: each token
    gathered from the window where it has the most context, the special tokens before it from the first window,
    those after it from the last."""
    n = len(first.ids)
    spans = [(0, n)] if n <= room else doc_spans(n, room, stride)
    best = np.zeros(n, dtype=np.intp) if len(spans) == 1 else max_context_window(n, spans)
    span_start = np.array([s for s, _ in spans])
    windows = []
    for s, length in spans:
        positions = [(p, i + s if p == "A" else i, segment) for p, i, segment in _laid_out(parts, {"A": length})]
        windows.append(_rows(positions, {"A": first}, backend)[:2])
    before = [part for part, _ in parts].index("A")  # the special tokens ahead of the text
    after = len(parts) - before - 1
    last_end = before + spans[-1][1]
    gather = np.concatenate([np.stack([np.zeros(before), np.arange(before)], 1).reshape(-1, 2),
                             np.stack([best, before + np.arange(n) - span_start[best]], 1).reshape(n, 2),
                             np.stack([np.full(after, len(spans) - 1), last_end + np.arange(after)], 1)
                             .reshape(-1, 2)]).astype(np.intp)
    _, _, tokens, starts, which = _rows(_laid_out(parts, {"A": n}), {"A": first}, backend)
    return windows, (gather, tokens, starts, which)


def _combine(hidden_states, layers, combine: str) -> torch.Tensor:
    """The chosen layers' hidden states [B, L, H], concatenated, summed or averaged."""
    import torch

    chosen = [hidden_states[layer].float() for layer in layers]
    if combine == "concat":
        return torch.cat(chosen, -1)
    combined = torch.stack(chosen).sum(0)
    return combined / len(chosen) if combine == "mean" else combined


def _as_pairs(texts) -> list[tuple[str, str | None]]:
    if isinstance(texts, str):
        raise BertforgeError("texts must be a list of strings (or of (text, pair) tuples), not a single string")
    pairs = []
    for i, text in enumerate(texts):
        if isinstance(text, str):
            pairs.append((text, None))
        elif isinstance(text, (tuple, list)) and len(text) == 2 and isinstance(text[0], str) \
                and (text[1] is None or isinstance(text[1], str)):
            pairs.append((text[0], text[1]))
        else:
            raise BertforgeError(f"texts[{i}] is {type(text).__name__}, expected str or a (text, pair) tuple")
    if not pairs:
        raise BertforgeError("no texts to extract features from (empty input)")
    return pairs


def _stitch(item: _Item, matrices: list[np.ndarray]) -> np.ndarray:
    """The text's [tokens, dim] matrix, each token from its chosen window (a copy, not a view of the batch)."""
    if len(matrices) == 1 and len(matrices[0]) == len(item.gather):
        return matrices[0].copy()
    base = np.cumsum([0] + [len(m) for m in matrices[:-1]])
    return np.concatenate(matrices)[base[item.gather[:, 0]] + item.gather[:, 1]]


def _word_vectors(item: _Item, matrix: np.ndarray, how: str) -> tuple[np.ndarray, list[str], int]:
    """[words, dim] rows for the whitespace words of A (then B), the words, and how many words had no tokens."""
    spans = [[(m.start(), m.group()) for m in WORD.finditer(text)] if text is not None else []
             for text in (item.text_a, item.text_b)]
    words = [w for seg in spans for _, w in seg]
    starts = [[s for s, _ in seg] for seg in spans]
    word_of = np.full(len(item.tokens), -1, dtype=np.intp)
    for t, (start, segment) in enumerate(zip(item.starts, item.segments)):
        if start >= 0:
            index = bisect.bisect_right(starts[segment], start) - 1
            word_of[t] = index + (len(spans[0]) if segment == 1 else 0)
    real = word_of >= 0
    counts = np.bincount(word_of[real], minlength=len(words))
    out = np.zeros((len(words), matrix.shape[1]), dtype=np.float32)
    if how == "first":
        present, first = np.unique(word_of[real], return_index=True)
        out[present] = matrix[np.flatnonzero(real)[first]]
    else:
        np.add.at(out, word_of[real], matrix[real])
        out[counts > 0] /= counts[counts > 0, None]
    return out, words, int((counts == 0).sum())


def extract_features(model_dir, texts, layers=None, combine="concat", level="token", pooling=None,
                     word_vector="first", max_length=None, stride=None, batch_size=32, bf16=False,
                     device=None, progress: str | None = None, normalize=None,
                     revision: str | None = None) -> Features:
    """Load the model in `model_dir` (or the Hub model of that name, at `revision`) and return the features of
    `texts`; see the module docstring.

    For many calls on one model, build a `FeatureExtractor` once and call its `extract`.
    """
    return FeatureExtractor(model_dir, device, revision).extract(
        texts, layers=layers, combine=combine, level=level, pooling=pooling, word_vector=word_vector,
        max_length=max_length, stride=stride, batch_size=batch_size, bf16=bf16, progress=progress, normalize=normalize)


# ---------------------------------------------------------------------------------------------------------
# Output files


def check_output_format(path, level: str) -> str:
    """The output format named by the file's suffix, or an error before any work is done."""
    suffix = Path(path).suffix.lower()
    allowed = (".npy", ".npz", ".jsonl") if level == "sentence" else (".npz", ".jsonl")
    if suffix not in allowed:
        hint = "" if level == "sentence" or suffix != ".npy" else \
            f" ({level}-level features are one array per text, so .npy cannot hold them)"
        raise BertforgeError(f"--out {path}: output must end with {', '.join(allowed)}{hint}")
    return suffix


def write_features(features: Features, path) -> Path:
    """Write `features` to .npy (sentence level), .npz or .jsonl, atomically; see the module docstring."""
    path = Path(path)
    suffix = check_output_format(path, features.level)
    name = "tokens" if features.level == "token" else "words"
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        if suffix == ".npy":
            np.save(f, features.vectors)
        elif suffix == ".npz":
            meta = dict(level=np.array(features.level), combine=np.array(features.combine),
                        layers=np.array(features.layers, dtype=np.int64))
            if features.level == "sentence":
                np.savez(f, features=features.vectors, **meta)
            else:
                arrays = {}
                for i, (vectors, tokens) in enumerate(zip(features.vectors, features.tokens)):
                    arrays[f"features_{i}"] = vectors
                    arrays[f"{name}_{i}"] = np.array(tokens, dtype=str)
                np.savez(f, **arrays, **meta)
        else:
            for i, text in enumerate(features.texts):
                if features.level == "sentence":
                    record = {"index": i, "text": text, "vector": rounded(features.vectors[i])}
                else:
                    key = name[:-1]
                    record = {"linex_index": i, "features": [
                        {key: token, "layers": _layer_entries(features, row)}
                        for token, row in zip(features.tokens[i], features.vectors[i])]}
                f.write((json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8"))
    return path


def _layer_entries(features: Features, row: np.ndarray) -> list[dict]:
    """Google's per-layer entries; a sum or mean of layers is one entry listing the layers it combines."""
    if features.combine == "concat":
        size = len(row) // len(features.layers)
        return [{"index": layer, "values": rounded(row[k * size:(k + 1) * size])}
                for k, layer in enumerate(features.layers)]
    return [{"index": list(features.layers), "combine": features.combine, "values": rounded(row)}]
