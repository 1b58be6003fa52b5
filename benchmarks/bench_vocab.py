"""`tokenizer train` (bertforge.text.wordpiece) against the `tokenizers` library's WordPieceTrainer: speed, agreement,
pieces per word on held-out text, and how many distinct vocabularies each gives over repeated runs.

    taskset -c 0 python -m benchmarks.bench_vocab                  # the shared corpus at 30,522, the demo's at 8,000
    taskset -c 0 python -m benchmarks.bench_vocab --cases demo --reps 5

Both trainers get the same text, read once into memory (file reading is not timed), and the same settings: the
uncased BERT normalizer and pre-tokenizer, min_frequency 2, limit_alphabet 1000, the five special tokens, `##`.
Timed, interleaved (bertforge, reference, bertforge, ...): bertforge's `count_words` + `learn_vocab` (what
`train_vocab` does between reading and saving) and the reference's `train_from_iterator`. Cases:

- `corpus`: ../shared/data/corpus less its WikiText folder (gutenberg, gutenberg_books, inaugural, state_union,
  55 MB), each folder read with the encodings it needs, at 30,522 entries;
- `demo`: the corpus `bertforge demo` writes (standard-library docstrings), at 8,000 entries, as the demo trains;
  here `train_vocab` is also timed end to end (reading the files and writing the folder), as the demo runs it.

Quality: the share of the reference's entries that bertforge's vocabulary holds (and the same between two of the
reference's runs), and pieces per word and the [UNK] share on WikiText-2's validation text, which neither trains on.
Last line: ratio=<reference seconds / bertforge seconds> on the first case run.
"""

import argparse
import hashlib
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from tokenizers import trainers  # noqa: E402

from bertforge.pretraining.demo import write_corpus  # noqa: E402
from bertforge.core.io import decoded_blocks, text_files  # noqa: E402
from bertforge.text.tokenizer import BertTokenizer, build_backend  # noqa: E402
from bertforge.text.wordpiece import train_vocab  # noqa: E402
from bertforge.text.vocab import SPECIAL_TOKENS  # noqa: E402
from bertforge.text.wordpiece import count_words, learn_vocab  # noqa: E402

SHARED = Path(os.environ.get("BERTFORGE_SHARED", REPO.parent / "shared"))
CORPUS = {"gutenberg": "utf-8,cp1252", "gutenberg_books": "utf-8", "inaugural": "utf-8,cp1252",
          "state_union": "utf-8,cp950"}  # the encodings the shared README names for each folder
HELD_OUT = SHARED / "data" / "corpus" / "wikitext-2-raw" / "wiki.valid.raw"
MIN_FREQUENCY, LIMIT_ALPHABET = 2, 1000


def read(folders: dict) -> list[str]:
    return [block for folder, encoding in folders.items() for path in text_files([folder])[0]
            for block in decoded_blocks(path, encoding)]


def ours(texts, vocab_size) -> list[str]:
    backend = build_backend({}, True)
    word_counts = count_words(texts, backend.normalizer, backend.pre_tokenizer)
    return learn_vocab(word_counts, vocab_size, SPECIAL_TOKENS, MIN_FREQUENCY, LIMIT_ALPHABET)


def reference(texts, vocab_size) -> list[str]:
    backend = build_backend({}, True)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, min_frequency=MIN_FREQUENCY,
                                        limit_alphabet=LIMIT_ALPHABET, special_tokens=SPECIAL_TOKENS,
                                        continuing_subword_prefix="##", show_progress=False)
    backend.train_from_iterator(texts, trainer)
    vocab = backend.get_vocab()
    return sorted(vocab, key=vocab.get)


def pieces_per_word(tokens: list[str], lines: list[str]) -> tuple[float, float]:
    """Pieces per pre-tokenized word over `lines`, and the share of pieces that are [UNK]."""
    backend = BertTokenizer({t: i for i, t in enumerate(tokens)}, do_lower_case=True).backend_tokenizer
    encodings = backend.encode_batch(lines, add_special_tokens=False)
    pieces = sum(len(e.ids) for e in encodings)
    words = sum(len({w for w in e.word_ids if w is not None}) for e in encodings)
    unknown = sum(e.tokens.count("[UNK]") for e in encodings)
    return pieces / words, unknown / pieces


def checksum(tokens: list[str]) -> str:
    return hashlib.sha256("".join(t + "\n" for t in tokens).encode()).hexdigest()[:12]


def run_case(name: str, texts: list[str], vocab_size: int, reps: int, held_out: list[str], corpus_dir=None) -> dict:
    times, vocabs = {"bertforge": [], "reference": []}, {"bertforge": [], "reference": []}
    for _ in range(reps):
        for label, train in (("bertforge", ours), ("reference", reference)):
            start = time.perf_counter()
            vocabs[label].append(train(texts, vocab_size))
            times[label].append(time.perf_counter() - start)
    mine, theirs = vocabs["bertforge"][0], vocabs["reference"]
    result = {
        "case": name, "vocab_size": vocab_size, "chars": sum(map(len, texts)),
        "bertforge_s": round(statistics.median(times["bertforge"]), 2),
        "reference_s": round(statistics.median(times["reference"]), 2),
        "all_s": {k: [round(t, 2) for t in v] for k, v in times.items()},
        "distinct_vocabularies": {k: len({checksum(v) for v in vs}) for k, vs in vocabs.items()},
        "entries": {"bertforge": len(mine), "reference": [len(v) for v in theirs]},
        "overlap_with_reference": [round(len(set(mine) & set(v)) / len(v), 5) for v in theirs],
        "reference_run_to_run_overlap": [round(len(set(theirs[0]) & set(v)) / len(v), 5) for v in theirs[1:]],
    }
    if held_out:
        ppw, unk = pieces_per_word(mine, held_out)
        ref = [pieces_per_word(v, held_out) for v in theirs]
        result |= {"pieces_per_word": {"bertforge": round(ppw, 5), "reference": [round(p, 5) for p, _ in ref]},
                   "unk_share": {"bertforge": round(unk, 6), "reference": [round(u, 6) for _, u in ref]}}
    if corpus_dir is not None:
        with tempfile.TemporaryDirectory() as out:
            start = time.perf_counter()
            train_vocab([corpus_dir], vocab_size=vocab_size, out_dir=out)
            result["bertforge_train_vocab_end_to_end_s"] = round(time.perf_counter() - start, 2)
    result["speedup"] = round(result["reference_s"] / result["bertforge_s"], 2)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="+", choices=("corpus", "demo"), default=["corpus", "demo"])
    parser.add_argument("--reps", type=int, default=3, help="timed runs of each trainer per case")
    args = parser.parse_args()
    held_out = HELD_OUT.read_text(encoding="utf-8").splitlines() if HELD_OUT.is_file() else []
    if not held_out:
        print(f"{HELD_OUT} not found: no pieces per word", file=sys.stderr)
    print(f"cpus allowed: {len(os.sched_getaffinity(0))}, load average {os.getloadavg()[0]:.1f}", flush=True)
    ratios = []
    for case in args.cases:
        if case == "corpus":
            folders = {SHARED / "data" / "corpus" / f: e for f, e in CORPUS.items()}
            if not all(f.is_dir() for f in folders):
                print(f"skipping corpus: {SHARED / 'data' / 'corpus'} not found", file=sys.stderr)
                continue
            result = run_case("corpus", read(folders), 30522, args.reps, held_out)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                write_corpus(tmp)
                result = run_case("demo", read({Path(tmp): "utf-8"}), 8000, args.reps, held_out, corpus_dir=tmp)
        print(json.dumps(result), flush=True)
        ratios.append(result["speedup"])
    if ratios:
        print(f"ratio={ratios[0]}")


if __name__ == "__main__":
    main()
