"""What a student learns from in task distillation, beside the labelled training set: variants of the training
inputs (Tang et al., 2019), unlabelled text (or questions on paragraphs), and the teacher's outputs on all of it,
cached on disk.

Augmentation works on words (whitespace-separated): each word is replaced by [MASK] with probability
`MASK_P`, else by a word drawn from the training texts with probability `REPLACE_P`; then, with probability
`NGRAM_P`, the variant is cut to a random n-gram of 1 to `MAX_NGRAM` words. Each text of a pair is varied
on its own. The teacher labels every variant; the labels of the original are not carried over (a masked word
may flip the meaning). A question-answering example varies its question only: its paragraph, and so where the
answer is, stay, and the variant keeps the answer beside the teacher's start and end.

The teacher's outputs are cached as one .npy file named by a hash of the teacher's files (config and weights)
and of the encoded rows it reads (so of the data, the augmentation and the max length): another seed,
student or number of epochs on the same rows reuses them, and a change to any of them computes them anew.
Outputs per example are a [rows, outputs] float32 array; outputs per token (token classification, question
answering's start and end) a [rows, longest row, outputs] float16 array, each row's tokens first and zeros after,
read memory-mapped (SQuAD's 88k training windows of 384 tokens: 135 MB).
"""

import hashlib
import os
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.io import atomic_path, has_model_file, model_file, read_records, read_text, where
from ..tasks.base import TaskFamily
from ..inference.answer_spans import SquadExample
from ..inference.batches import padding
from ..tasks.glue import GlueExample

MASK_P, REPLACE_P, NGRAM_P, MAX_NGRAM = 0.1, 0.1, 0.25, 5
CACHE_ENV = "BERTFORGE_CACHE"


def augment_words(words: list[str], vocabulary: list[str], rng: np.random.Generator) -> list[str]:
    """One variant of a text's words (see the module docstring); never empty."""
    draw = rng.random(len(words))
    out = [("[MASK]" if p < MASK_P else vocabulary[rng.integers(len(vocabulary))] if p < MASK_P + REPLACE_P else w)
           for w, p in zip(words, draw)]
    if len(out) > 1 and rng.random() < NGRAM_P:
        n = int(rng.integers(1, min(MAX_NGRAM, len(out)) + 1))
        start = int(rng.integers(len(out) - n + 1))
        out = out[start:start + n]
    return out


def augmented(examples: list, copies: int, seed: int) -> list:
    """`copies` variants of each example: a text or pair's, labels left out (None); a question's (SquadExample),
    the paragraph and answers kept."""
    questions = bool(examples) and isinstance(examples[0], SquadExample)
    texts = [e.question for e in examples] if questions else [t for e in examples for t in (e.text_a, e.text_b) if t]
    vocabulary = sorted({w for t in texts for w in t.split()})
    if not vocabulary:
        raise BertforgeError("--augment: the training texts have no words to vary")
    rng = np.random.default_rng([seed, 7])

    def vary(text: str) -> str:
        return " ".join(augment_words(text.split() or [text], vocabulary, rng))

    out = []
    for e in examples:
        for k in range(copies):
            if questions:
                out.append(replace(e, id=f"{e.id}-aug{k}", question=vary(e.question)))
            else:
                b = None if e.text_b is None else vary(e.text_b)
                out.append(GlueExample(f"{e.guid}-aug{k}", vary(e.text_a), b, None))
    return out


def text_columns(family: TaskFamily) -> tuple[str, str | None]:
    """The columns of a table of unlabelled text: your own data's --text-column/--text-pair-column, or the GLUE
    task's own column names (sentence, or sentence1 and sentence2, ...)."""
    if hasattr(family, "columns"):
        return family.columns[0], family.columns[1]
    return family.glue.hf_text


def read_unlabelled(paths: list[Path], family: TaskFamily, pairs: bool) -> list[GlueExample]:
    """Texts for the teacher to label: in a plain-text file one example a line (a pair split by a tab); in a
    table (.csv, .tsv, .jsonl, .json) the columns of `text_columns`."""
    first, second = text_columns(family)
    examples = []
    for path in map(Path, paths):
        if path.suffix.lower() in (".csv", ".tsv", ".jsonl", ".json"):
            located = ((loc, [r.get(first), r.get(second) if second else None]) for loc, r in read_records(path))
            wanted = f"the column {first!r}" + (f" and {second!r}" if second else "")
        else:
            lines = read_text(path).split("\n")
            located = ((where(path, n), line.split("\t")) for n, line in enumerate(lines, 1) if line.strip())
            wanted = "two texts split by a tab" if pairs else "one text (no tab)"
        for location, fields in located:
            fields = [f for f in fields if f is not None]
            if len(fields) != (2 if pairs else 1) or not all(isinstance(f, str) and f.strip() for f in fields):
                raise BertforgeError(f"{location}: expected {wanted}")
            examples.append(GlueExample(f"unlabelled-{len(examples)}", fields[0], fields[1] if pairs else None, None))
    if not examples:
        raise BertforgeError(f"--unlabelled {' '.join(map(str, paths))}: no text")
    return examples


def read_unlabelled_questions(paths: list[Path], family: TaskFamily) -> list[SquadExample]:
    """Questions on paragraphs for the teacher to answer: a SQuAD file's (a .json object; its answers not read),
    or a table's (.csv, .tsv, .jsonl, a .json array) question and context columns (your own data's
    --question-column and --context-column)."""
    from ..tasks.squad import read_squad

    question, context = family.columns[:2] if hasattr(family, "columns") else ("question", "context")
    pairs = []
    for path in map(Path, paths):
        if path.suffix.lower() == ".json" and not read_text(path).lstrip().startswith("["):
            pairs += [(e.question, e.context) for e in read_squad(path)]
            continue
        for location, record in read_records(path):
            fields = [record.get(question), record.get(context)]
            if not all(isinstance(f, str) and f.strip() for f in fields):
                raise BertforgeError(f"{location}: expected a question ({question!r}) and its paragraph "
                                     f"({context!r}), both non-empty texts")
            pairs.append(fields)
    if not pairs:
        raise BertforgeError(f"--unlabelled {' '.join(map(str, paths))}: no questions")
    # no answer given: the windows' positions are [CLS]'s, and the labels' loss never reads them
    return [SquadExample(f"unlabelled-{i}", q, c, [], [], True) for i, (q, c) in enumerate(pairs)]


def default_cache() -> Path:
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "bertforge") / "teacher-outputs"


def file_digest(path: Path, digest) -> None:
    with path.open("rb") as f:
        while block := f.read(1 << 22):
            digest.update(block)


def cache_key(teacher_dir: Path, encoded: dict, keys: tuple[str, ...]) -> str:
    """A hash of the teacher's files (its config, its weights and their shard index: the files it is read from)
    and the rows (`keys` of `encoded`) it reads."""
    from ..model.formats.checkpoint import SAFETENSORS_INDEX, weight_files

    digest = hashlib.sha256(b"bertforge teacher outputs 1\n")
    read = [teacher_dir / "config.json", *weight_files(teacher_dir)]
    if has_model_file(teacher_dir / SAFETENSORS_INDEX, teacher_dir):
        read.append(teacher_dir / SAFETENSORS_INDEX)
    for path in sorted(read, key=lambda p: p.name):
        digest.update(path.name.encode() + b"\0")
        file_digest(model_file(path, teacher_dir, limit=None), digest)
    for key in keys:
        rows = encoded[key]
        flat = [v for row in rows for v in (row if not row or not isinstance(row[0], list) else sum(row, []))]
        sizes = [len(row) if not row or not isinstance(row[0], list) else sum(map(len, row)) for row in rows]
        digest.update(key.encode() + b"\0")
        digest.update(np.asarray(sizes, dtype=np.int64).tobytes())
        digest.update(np.asarray(flat, dtype=np.int64).tobytes())
    return digest.hexdigest()[:32]


def teacher_outputs(teacher, teacher_dir: Path, family: TaskFamily, encoded: dict, pad_id: int, cache: Path,
                    batch_size: int = 64, progress: bool = True) -> tuple[np.ndarray, bool]:
    """The teacher's outputs for every row (the family's output_keys side by side on the last axis: [rows, outputs]
    float32, or per token [rows, longest row, outputs] float16, see the module docstring), and whether they came
    from the cache."""
    from ..inference.batches import row_lengths, run_model

    inputs = padding(family.inputs, pad_id)
    lengths = row_lengths(encoded)
    per_token = bool(family.per_token_outputs)
    path = cache / f"{cache_key(teacher_dir, encoded, tuple(k for k in inputs if k in encoded))}.npy"
    if path.is_file():
        try:
            logits = np.load(path, mmap_mode="r" if per_token else None, allow_pickle=False)
            rows = (len(lengths), int(lengths.max())) if per_token else (len(lengths),)
            if logits.ndim == 2 + per_token and logits.shape[:len(rows)] == rows:
                return logits, True
        except (OSError, ValueError):
            pass  # a torn or foreign file: computed again and replaced
    outputs = run_model(teacher, encoded, inputs, family.output_keys, family.per_token_outputs,
                        batch_size=batch_size, progress="teacher" if progress else None)
    if per_token:
        logits = None
        for i, values in enumerate(zip(*outputs.values())):
            row = np.concatenate([v.reshape(len(v), -1) for v in values], -1)
            if logits is None:
                logits = np.zeros((len(lengths), int(lengths.max()), row.shape[-1]), dtype=np.float16)
            logits[i, :len(row)] = row
    else:
        logits = np.concatenate([np.stack(v).reshape(len(v), -1) for v in outputs.values()], -1).astype(np.float32)
    try:
        with atomic_path(path) as tmp:
            with tmp.open("wb") as f:
                np.save(f, logits, allow_pickle=False)
    except BertforgeError as e:
        raise BertforgeError(f"--cache-dir: {e}") from None
    return logits, False
