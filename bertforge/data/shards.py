"""Pre-training data on disk: sharded numpy arrays plus a JSON index, and the reader the trainer uses.

A data directory (``DIR``, held-out documents in ``DIR/eval`` with the same layout) holds::

    index.json                       format, version, vocabulary (sha256, size, lower-casing, special ids),
                                     settings (max_seq_length, masking, seed, ...) and the shard list
    stats.json, vocab.txt, ...       (DIR only) what was read and made; the tokenizer, Hugging Face layout
    shard-00000.tokens.npy           all instances' ids back to back: [CLS] A [SEP] B [SEP] (uint16, or
                                     uint32 for vocabularies over 65,536); masked ids when statically masked
    shard-00000.offsets.npy          int64 [n + 1], instance i is tokens[offsets[i]:offsets[i + 1]]
    shard-00000.a_lengths.npy        int32 [n], length of A: [SEP] is at a_length + 1, B starts after it
    shard-00000.nsp_labels.npy       int8 [n], 1 when B is a random next segment, 0 when it really follows A

Data made with ``--no-nsp`` (index ``"nsp": false``) holds single segments ``[CLS] ... [SEP]``: A is the
whole row (``a_length = length - 2``), there is no B, NSP labels are 0, and a [SEP] inside a row marks where
one document ends and the next begins (never masked).
    shard-00000.mlm_positions.npy    uint16, masked positions in increasing order, back to back   } static
    shard-00000.mlm_labels.npy       original ids at those positions (token dtype)                } masking
    shard-00000.mlm_offsets.npy      int64 [n + 1] into the two arrays above                      } only
    continuation.npy                 bool [vocab_size], ``##`` pieces (whole-word masking only)

Every file is a plain ``.npy`` (``np.save``, read with ``np.load(mmap_mode="r", allow_pickle=False)``), so
reading an instance touches only its pages. Instances are stored in generation order, shuffled only within
a shard: sample indices at random when training.
"""

import hashlib
import numbers
import re
from pathlib import Path

import numpy as np

from bertforge.data.instances import ragged_arange, special_positions, to_padded
from bertforge.data.masking import mask_batch, word_starts
from bertforge.core.errors import BertforgeError
from bertforge.core.io import read_json, write_json

FORMAT = "bertforge-pretraining-data"
VERSION = 1


def vocab_sha256(vocab: dict) -> str:
    """sha256 of the vocabulary as ``vocab.txt`` text (one token per line, in id order): for a normal
    ``vocab.txt`` this is the file's own sha256."""
    text = "".join(token + "\n" for token in sorted(vocab, key=vocab.__getitem__))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ShardWriter:
    """Writes shards into a directory, then ``index.json`` last (a directory without it is incomplete)."""

    def __init__(self, directory):
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.shards = []

    def write(self, arrays: dict) -> None:
        name = f"shard-{len(self.shards):05d}"
        for key, array in arrays.items():
            np.save(self.directory / f"{name}.{key}.npy", array, allow_pickle=False)
        self.shards.append({"name": name, "instances": len(arrays["offsets"]) - 1, "tokens": len(arrays["tokens"])})

    def finish(self, header: dict) -> dict:
        index = {"format": FORMAT, "version": VERSION, **header,
                 "instances": sum(s["instances"] for s in self.shards),
                 "tokens": sum(s["tokens"] for s in self.shards), "shards": self.shards}
        write_json(self.directory / "index.json", index)
        return index


INDEX_FIELDS = ("vocab_sha256", "vocab_size", "token_dtype", "special_token_ids", "max_seq_length", "masked",
                "masked_lm_prob", "max_predictions", "shards")
SHARD_NAME = re.compile(r"shard-\d+")  # a file name in the folder, never a path out of it
SPECIAL_TOKENS = ("cls", "sep", "mask", "pad")


def whole(value, minimum: int = 0) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= minimum


def check_index(path: Path, index: dict) -> None:
    """The index.json fields the reader uses, each of its kind: a value that is not is a one-line error naming
    the file and the field (not a TypeError deep in numpy)."""
    missing = [k for k in INDEX_FIELDS if k not in index]
    if missing:
        raise BertforgeError(f"{path}: lacks {', '.join(missing)} (damaged, or not written by bertforge)")
    special = index["special_token_ids"]
    problems = {
        "vocab_size": not whole(index["vocab_size"], 1), "max_seq_length": not whole(index["max_seq_length"], 1),
        "max_predictions": not whole(index["max_predictions"]), "masked": not isinstance(index["masked"], bool),
        "token_dtype": index["token_dtype"] not in ("uint16", "uint32"), "vocab_sha256": not isinstance(
            index["vocab_sha256"], str), "masked_lm_prob": not isinstance(index["masked_lm_prob"], numbers.Real),
        "special_token_ids": not isinstance(special, dict) or not all(whole(special.get(k)) for k in SPECIAL_TOKENS),
        "shards": not isinstance(index["shards"], list),
        "whole_word_mask": not isinstance(index.get("whole_word_mask", False), bool),
        "nsp": not isinstance(index.get("nsp", True), bool)}
    bad = next((key for key, wrong in problems.items() if wrong), None)
    if bad is not None:
        raise BertforgeError(f"{path}: {bad} {str(index.get(bad))[:60]!r} is not what bertforge writes there (damaged)")
    for n, entry in enumerate(index["shards"]):
        if not (isinstance(entry, dict) and isinstance(entry.get("name"), str) and SHARD_NAME.fullmatch(entry["name"])
                and whole(entry.get("instances")) and whole(entry.get("tokens"))):
            raise BertforgeError(f"{path}: shards[{n}] is not a shard entry (a name shard-N, whole numbers of "
                                 "instances and tokens): damaged")


class _Shard:
    """One shard's arrays, memory-mapped and checked against the index."""

    def __init__(self, directory: Path, entry: dict, index: dict):
        self.name, self.index_path = entry["name"], directory / "index.json"
        n, tokens = entry["instances"], entry["tokens"]
        dtype = np.dtype(index["token_dtype"])
        self.tokens = self._load(directory, "tokens", dtype, (tokens,))
        self.offsets = self._load(directory, "offsets", np.int64, (n + 1,))
        self.a_lengths = self._load(directory, "a_lengths", np.int32, (n,))
        self.nsp_labels = self._load(directory, "nsp_labels", np.int8, (n,))
        lengths = np.diff(self.offsets)
        pairs = index.get("nsp", True)  # [CLS] A [SEP] B [SEP], or one segment [CLS] A [SEP]
        if self.offsets[0] != 0 or self.offsets[-1] != tokens or (lengths < (5 if pairs else 3)).any() or \
                (lengths > index["max_seq_length"]).any() or (self.a_lengths < 1).any() or \
                (self.a_lengths > lengths - (4 if pairs else 2)).any():
            raise BertforgeError(f"{directory / self.name}.offsets.npy: corrupted shard (inconsistent offsets)")
        if index["masked"]:
            self.mlm_offsets = self._load(directory, "mlm_offsets", np.int64, (n + 1,))
            counts = np.diff(self.mlm_offsets)
            if self.mlm_offsets[0] != 0 or (counts < 0).any() or (counts > index["max_predictions"]).any():
                raise BertforgeError(f"{directory / self.name}.mlm_offsets.npy: corrupted shard (inconsistent offsets)")
            total = (int(self.mlm_offsets[-1]),)
            self.mlm_positions = self._load(directory, "mlm_positions", np.uint16, total)
            self.mlm_labels = self._load(directory, "mlm_labels", dtype, total)
        self.check_contents(directory, index, lengths)

    def check_contents(self, directory: Path, index: dict, lengths: np.ndarray):
        """Values in range, one pass over each array: ids below the vocabulary size, NSP labels 0 or 1, masked
        positions inside their rows and increasing; a wrong value names the shard file and the row."""
        vocab, where = index["vocab_size"], directory / self.name

        def fail(key: str, bad: np.ndarray, offsets: np.ndarray, problem: str):
            row = int(np.searchsorted(offsets, np.flatnonzero(bad)[0], side="right") - 1)
            raise BertforgeError(f"{where}.{key}.npy: row {row}: {problem} (corrupted shard)")

        if len(self.tokens) and int(self.tokens.max()) >= vocab:
            fail("tokens", np.asarray(self.tokens) >= vocab, self.offsets,
                 f"a token id beyond the vocabulary's {vocab}")
        if not index["masked"] and (np.asarray(self.tokens) == index["special_token_ids"]["mask"]).any():
            fail("tokens", np.asarray(self.tokens) == index["special_token_ids"]["mask"], self.offsets,
                 "[MASK] in data whose index.json says it is not masked")
        if ((self.nsp_labels != 0) & (self.nsp_labels != 1)).any():
            fail("nsp_labels", (self.nsp_labels != 0) & (self.nsp_labels != 1), np.arange(len(lengths) + 1),
                 "a next-sentence label other than 0 or 1")
        if index["masked"] and len(self.mlm_positions):
            positions = np.asarray(self.mlm_positions, dtype=np.int64)
            row_length = np.repeat(lengths, np.diff(self.mlm_offsets))
            first = np.zeros(len(positions), bool)
            first[self.mlm_offsets[:-1][np.diff(self.mlm_offsets) > 0]] = True
            rising = first | (np.diff(positions, prepend=-1) > 0)
            if (positions >= row_length).any() or not rising.all():
                fail("mlm_positions", (positions >= row_length) | ~rising, self.mlm_offsets,
                     "a masked position outside its row or out of order")
            if int(self.mlm_labels.max()) >= vocab:
                fail("mlm_labels", np.asarray(self.mlm_labels) >= vocab, self.mlm_offsets,
                     f"a masked token's id beyond the vocabulary's {vocab}")

    def _load(self, directory: Path, key: str, dtype, shape) -> np.ndarray:
        path = directory / f"{self.name}.{key}.npy"
        try:
            array = np.load(path, mmap_mode="r", allow_pickle=False)
        except Exception as e:  # a damaged header fails in numpy's parser: ValueError, tokenize.TokenError, ...
            raise BertforgeError(f"{path}: corrupted or truncated shard ({first_line(e)})") from None
        if array.dtype != dtype or array.shape != shape:
            raise BertforgeError(f"{path}: holds {array.dtype} {array.shape}, but {self.index_path} says "
                                 f"{np.dtype(dtype)} {shape}: a corrupted shard, or an index that does not match it")
        return array


class PretrainingShards:
    """Read-only random access to a data directory made by ``bertforge data create``.

    ``len(data)`` instances; ``data[i]`` is one instance and ``data.batch(indices)`` many, as dicts of
    torch tensors (see :meth:`batch`). ``vocab_sha256`` identifies the vocabulary the ids belong to
    (see :func:`check_vocab`).
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        path = self.directory / "index.json"
        if not path.is_file():
            raise BertforgeError(f"{path}: not found; is this a folder made by `bertforge data create`?")
        self.index = read_json(path)
        if self.index.get("format") != FORMAT or self.index.get("version") != VERSION:
            raise BertforgeError(f"{path}: not {FORMAT} version {VERSION}")
        check_index(path, self.index)
        self.max_seq_length = self.index["max_seq_length"]
        self.vocab_sha256 = self.index["vocab_sha256"]
        self.special = self.index["special_token_ids"]
        self._shards = [_Shard(self.directory, entry, self.index) for entry in self.index["shards"]]
        self._starts = np.cumsum([0] + [s["instances"] for s in self.index["shards"]])
        self._continuation = None

    @property
    def static_masked(self) -> bool:
        return self.index["masked"]

    @property
    def has_pairs(self) -> bool:
        """Sentence pairs with NSP labels, or (``data create --no-nsp``) single segments."""
        return self.index.get("nsp", True)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def token_counts(self, vocab_size: int) -> np.ndarray:
        """How often each id occurs in the instances, [vocab_size] int64; the special tokens ([CLS], [SEP],
        [MASK], padding) counted 0, as they are never predicted."""
        counts = sum((np.bincount(shard.tokens, minlength=vocab_size) for shard in self._shards),
                     np.zeros(vocab_size, dtype=np.int64))
        counts[[self.special[k] for k in ("cls", "sep", "mask", "pad")]] = 0
        return counts

    def __getitem__(self, i: int) -> dict:
        """Instance i: the :meth:`batch` dict for ``[i]`` without the batch dimension (no padding)."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"instance {i} out of range for {len(self)} instances")
        return {key: value[0] for key, value in self.batch([i % len(self)]).items()}

    def batch(self, indices, rng=None, pad_to: int | None = None, masked_lm_prob: float | None = None,
              max_predictions: int | None = None) -> dict:
        """Instances ``indices`` as a dict of torch tensors, padded to the longest (or to ``pad_to``).

        input_ids, token_type_ids, attention_mask [B, L] int64 (padding: pad id, 0, 0),
        special_tokens_mask [B, L] bool ([CLS], [SEP], padding), next_sentence_label [B] int64, and for
        statically masked data, or when ``rng`` (np.random.Generator or torch.Generator) is given for
        unmasked data (dynamic masking with the settings in the index), mlm_positions [B, P] (padded with
        0) and mlm_labels [B, P] (padded with -100), P = max_predictions. ``masked_lm_prob`` and
        ``max_predictions`` override the index's for dynamic masking.
        """
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"instance indices must be in [0, {len(self)})")
        P = max_predictions or self.index["max_predictions"]
        ids, lengths, a_lengths, nsp, positions, labels = self._gather(idx, pad_to, P)
        width = ids.shape[1]
        cols = np.arange(width)
        attention = cols < lengths[:, None]
        special = special_positions(lengths, a_lengths, width)
        if not self.has_pairs:
            special |= ids == self.special["sep"]  # document joins
        out = {
            "input_ids": ids,
            "token_type_ids": ((cols > a_lengths[:, None] + 1) & attention).astype(np.int64),
            "attention_mask": attention.astype(np.int64),
            "special_tokens_mask": special,
            "next_sentence_label": nsp,
        }
        if rng is not None:
            if self.static_masked:
                raise BertforgeError(f"{self.directory}: data is statically masked; create it with --no-mask "
                                     "for dynamic masking")
            whole_words = word_starts(ids, self._continuation_table()) if self.index["whole_word_mask"] else None
            out["input_ids"], positions, labels = mask_batch(
                ids, special, rng, self.index["vocab_size"], self.special["mask"],
                masked_lm_prob=masked_lm_prob or self.index["masked_lm_prob"], max_predictions=P,
                whole_word_starts=whole_words, lengths=lengths)
        if self.static_masked or rng is not None:
            out.update(mlm_positions=positions, mlm_labels=labels)
        import torch  # here: `data create` (and its --help) use this module without torch

        return {key: torch.from_numpy(value) for key, value in out.items()}

    def _gather(self, idx: np.ndarray, pad_to: int | None, P: int):
        """The instances' tokens padded to the longest (or to `pad_to`), their lengths, first-segment lengths, NSP
        labels, and the static masks' positions and labels (padded to P), read shard by shard."""
        B = len(idx)
        lengths, a_lengths, nsp = (np.zeros(B, np.int64) for _ in range(3))
        positions, labels = np.zeros((B, P), np.int64), np.full((B, P), -100, np.int64)
        tokens = []  # (rows, their tokens back to back) of each shard
        shard_of = np.searchsorted(self._starts, idx, side="right") - 1
        for s in np.unique(shard_of):
            rows = np.flatnonzero(shard_of == s)
            shard, local = self._shards[s], idx[rows] - self._starts[s]
            start, n = shard.offsets[local], shard.offsets[local + 1] - shard.offsets[local]
            tokens.append((rows, shard.tokens[ragged_arange(start, n)].astype(np.int64)))
            lengths[rows], a_lengths[rows], nsp[rows] = n, shard.a_lengths[local], shard.nsp_labels[local]
            if self.static_masked:
                m_start, m = shard.mlm_offsets[local], shard.mlm_offsets[local + 1] - shard.mlm_offsets[local]
                flat = ragged_arange(m_start, m)
                positions[rows] = to_padded(shard.mlm_positions[flat].astype(np.int64), m, P, 0)
                labels[rows] = to_padded(shard.mlm_labels[flat].astype(np.int64), m, P, -100)
        longest = int(lengths.max(initial=0))
        if pad_to is not None and pad_to < longest:
            raise BertforgeError(f"{self.directory}: pad_to={pad_to} is shorter than an instance ({longest} tokens)")
        ids = np.full((B, pad_to or longest), self.special["pad"], dtype=np.int64)
        for rows, flat in tokens:
            ids[rows] = to_padded(flat, lengths[rows], ids.shape[1], self.special["pad"])
        return ids, lengths, a_lengths, nsp, positions, labels

    def _continuation_table(self) -> np.ndarray:
        if self._continuation is None:
            path = self.directory / "continuation.npy"
            try:
                self._continuation = np.load(path, allow_pickle=False)
            except Exception as e:  # as _Shard._load: numpy's header parser has more ways to fail
                raise BertforgeError(f"{path}: needed for whole-word masking, unreadable ({first_line(e)})") from None
            if self._continuation.dtype != bool or self._continuation.shape != (self.index["vocab_size"],):
                raise BertforgeError(f"{path}: holds {self._continuation.dtype} {self._continuation.shape}, not bool "
                                     f"({self.index['vocab_size']},) as index.json's vocab_size (corrupted)")
        return self._continuation


def first_line(error: Exception) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def load_pretraining_data(directory, split: str = "train") -> PretrainingShards:
    """The training data in ``directory``, or with ``split="eval"`` the held-out documents' data in its ``eval``."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', not {split!r}")
    return PretrainingShards(Path(directory) / "eval" if split == "eval" else directory)


def check_vocab(data, tokenizer) -> None:
    """Raise a one-line BertforgeError unless ``data`` (PretrainingShards, data directory or its index dict)
    was made with ``tokenizer``'s vocabulary."""
    if not isinstance(data, PretrainingShards | dict):
        data = PretrainingShards(data)
    index = data.index if isinstance(data, PretrainingShards) else data
    source = data.directory / "index.json" if isinstance(data, PretrainingShards) else "pre-training data"
    theirs = vocab_sha256(tokenizer.vocab)
    if index["vocab_sha256"] != theirs:
        raise BertforgeError(
            f"{source}: made with another vocabulary (sha256 {index['vocab_sha256'][:12]}..., {index['vocab_size']} "
            f"tokens) than the model's tokenizer (sha256 {theirs[:12]}..., {len(tokenizer.vocab)} tokens)")
