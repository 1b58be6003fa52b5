"""What a sentence-embedding student learns from (`bertforge distill embeddings`): the texts of `--input` (a text a
line of a text file, a folder's text files, the text columns of a table, a SQuAD file's questions and paragraphs;
each distinct text once), the share kept aside, and the teacher's vectors of them, computed once in batches without
autograd and kept on disk under a hash of the teacher's files and the texts' tokens (as distill_data.py keeps a
task teacher's outputs)."""

import hashlib
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.io import atomic_path, read_records, read_text, text_files
from ..model.formats.sentence_folder import declaration_files

HELD_OUT, MAX_HELD_OUT = 0.05, 2000  # --held-out's default share, and the most texts it keeps aside
# A table's columns read as texts where --text-column names none of its columns: GLUE's, SQuAD's, rerank's
TEXT_COLUMNS = ("text", "sentence", "sentence1", "sentence2", "question", "question1", "question2", "premise",
                "hypothesis", "query", "passage", "context")
TABLES = (".csv", ".tsv", ".jsonl", ".json")
TEACHER_CHUNK = 2048  # texts per call of the teacher's pipeline (its vectors kept as float32 arrays between calls)


# ---------------------------------------------------------------------------------------------------------
# The texts


def read_texts(paths, text_column: str = "text", pair_column: str | None = None) -> list[str]:
    """Every distinct text of `paths`, in the order first met (see the module docstring)."""
    files, _ = text_files(paths)
    texts: dict[str, None] = {}
    for path in files:
        for text in file_texts(path, text_column, pair_column):
            text = text.strip()
            if text:
                texts.setdefault(text)
    if not texts:
        raise BertforgeError(f"--input {' '.join(map(str, paths))}: no text")
    return list(texts)


def file_texts(path: Path, text_column: str, pair_column: str | None):
    if path.suffix.lower() not in TABLES:
        return read_text(path).split("\n")
    records = list(read_records(path))
    if path.suffix.lower() == ".json" and len(records) == 1 and isinstance(records[0][1].get("data"), list):
        from ..tasks.squad import read_squad

        return [text for example in read_squad(path) for text in (example.context, example.question)]
    present = records[0][1] if records else {}
    columns = [c for c in dict.fromkeys([text_column, pair_column]) if c in present] or \
        [c for c in TEXT_COLUMNS if c in present]
    if records and not columns:
        raise BertforgeError(f"{path}: no text column (its columns: {', '.join(map(str, present))}); name one with "
                             f"--text-column")
    texts = []
    for location, record in records:
        for column in columns:
            value = record.get(column)
            if value is not None and not isinstance(value, str):
                raise BertforgeError(f"{location}: {column} is {type(value).__name__}, not a text")
            texts.append(value or "")
    return texts


def held_out_rows(count: int, share: float, most: int | None, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows trained on and those kept aside (`share` of `count`, at least one where share > 0, at most `most`
    or MAX_HELD_OUT), drawn by `seed`, each in order."""
    held = min(round(share * count), most or MAX_HELD_OUT, count - 1)
    held = max(held, 1) if share > 0 and count > 1 else held
    order = np.random.default_rng([seed, 45]).permutation(count)
    return np.sort(order[held:]), np.sort(order[:held])


# ---------------------------------------------------------------------------------------------------------
# The teacher's vectors


def cache_path(teacher_dir: Path, encoded: dict, cache: Path) -> Path:
    """Where the teacher's vectors of these rows are kept: named by a hash of the teacher's files (its
    sentence-transformers files too) and of the rows' tokens (distill_data.cache_key's), in cache/embeddings/."""
    from .distill_data import cache_key, file_digest

    digest = hashlib.sha256(b"bertforge teacher embeddings 1\n")
    digest.update(cache_key(teacher_dir, encoded, ("input_ids", "token_type_ids")).encode())
    for path in declaration_files(teacher_dir):
        digest.update(str(path.relative_to(teacher_dir)).encode() + b"\0")
        file_digest(path, digest)
    return cache / "embeddings" / f"{digest.hexdigest()[:32]}.npy"


def teacher_embeddings(teacher_dir: Path, texts: list[str], encoded: dict, max_length: int, cache: Path,
                       batch_size: int, device: str | None, progress: bool) -> tuple[np.ndarray, bool]:
    """The teacher's vector of every text [texts, dimension] (float32), and whether it came from the cache."""
    path = cache_path(teacher_dir, encoded, cache)
    if path.is_file():
        try:
            vectors = np.load(path, allow_pickle=False)
            if vectors.ndim == 2 and len(vectors) == len(texts):
                return vectors, True
        except (OSError, ValueError):
            pass  # a torn or foreign file: computed again and replaced
    from tqdm import tqdm

    from ..inference.pipelines import pipeline

    embed = pipeline("sentence-embedding", model=teacher_dir, device=device, batch_size=batch_size,
                     max_length=max_length)
    parts = []
    with tqdm(total=len(texts), desc="teacher", unit="text", disable=not progress, leave=False) as bar:
        for start in range(0, len(texts), TEACHER_CHUNK):
            parts.append(np.asarray(embed(texts[start:start + TEACHER_CHUNK], truncate=True), dtype=np.float32))
            bar.update(len(parts[-1]))
    vectors = np.concatenate(parts)
    try:
        with atomic_path(path) as tmp, tmp.open("wb") as f:
            np.save(f, vectors, allow_pickle=False)
    except BertforgeError as e:
        raise BertforgeError(f"--cache-dir: {e}") from None
    return vectors, False


def scores(student: np.ndarray, teacher: np.ndarray) -> dict[str, float]:
    """The held-out figures: the mean squared difference (per value, as the loss) and the mean cosine."""
    cosine = (student * teacher).sum(1) / np.maximum(np.linalg.norm(student, axis=1) * np.linalg.norm(teacher, axis=1),
                                                     1e-12)
    return {"mse": float(((student - teacher) ** 2).mean()), "cosine": float(cosine.mean())}
