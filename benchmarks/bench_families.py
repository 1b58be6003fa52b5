"""bertforge against transformers on the encoder families read beyond BERT and ModernBERT (RoBERTa, XLM-RoBERTa,
ELECTRA, DistilBERT): each library's text-classification pipeline over the same texts, at each family's released
shape (random weights written by transformers, the test suite's small trained tokenizers), in one process with the
same threads, repetitions interleaved, medians.

The texts are wikitext-2 (validation) lines of 5 to `--max-words` words, a user's mixed lengths; both pipelines
get the same batch size and truncate at the model's length (transformers batches in input order, bertforge sorts by
length: each library's default use).

    python -m benchmarks.bench_families [--families roberta electra distilbert] [--texts 48] [--reps 3]
"""

import argparse
import random
import tempfile
from pathlib import Path

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads

BASE = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
FAMILIES = {  # head, the test suite's folder writer, the released model's shape
    "roberta": ("RobertaForSequenceClassification", "roberta_folder", {**BASE, "max_position_embeddings": 514}),
    "xlm-roberta": ("XLMRobertaForSequenceClassification", "roberta_folder",
                    {**BASE, "max_position_embeddings": 514}),
    "electra": ("ElectraForSequenceClassification", "electra_folder",  # electra-small-discriminator
                dict(embedding_size=128, hidden_size=256, intermediate_size=1024, num_hidden_layers=12,
                     num_attention_heads=4, max_position_embeddings=512)),
    "distilbert": ("DistilBertForSequenceClassification", "distilbert_folder",  # distilbert-base
                   dict(dim=768, hidden_dim=3072, n_layers=6, n_heads=12, max_position_embeddings=512)),
}


def texts(count: int, max_words: int, seed: int = 0) -> list[str]:
    lines = [line.strip() for line in (common.SHARED / "data" / "corpus" / "wikitext-2-raw" / "wiki.valid.raw")
             .read_text(encoding="utf-8").splitlines() if len(line.split()) >= 5 and not line.startswith(" =")]
    rng = random.Random(seed)
    return [" ".join(rng.choice(lines).split()[:rng.randint(5, max_words)]) for _ in range(count)]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", choices=FAMILIES, default=["roberta", "electra", "distilbert"])
    p.add_argument("--texts", type=int, default=48)
    p.add_argument("--max-words", type=int, default=80)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=common.THREADS)
    args = p.parse_args()
    common.setup(args.threads)

    import transformers

    import bertforge
    import tests.conftest as builders

    transformers.logging.set_verbosity_error()
    inputs = texts(args.texts, args.max_words)
    print(common.machine())
    print(f"{args.texts} texts of 5-{args.max_words} words, batch size {args.batch_size}, {args.reps} interleaved "
          "repetitions after one warm-up")
    print("| family (shape) | bertforge s | transformers s | ratio |\n|---|---|---|---|")
    for family in args.families:
        head, writer, shape = FAMILIES[family]
        with tempfile.TemporaryDirectory() as tmp:
            folder = getattr(builders, writer)(Path(tmp) / family, head, **shape)
            ours = bertforge.pipeline("text-classification", model=folder)
            theirs = transformers.pipeline("text-classification", model=str(folder), device="cpu")
            times = common.interleaved({
                "bertforge": lambda: ours(inputs, batch_size=args.batch_size),
                "transformers": lambda: theirs(inputs, batch_size=args.batch_size, truncation=True),
            }, args.reps)
        a, b = common.median(times["bertforge"]), common.median(times["transformers"])
        sizes = ", ".join(f"{k} {v}" for k, v in shape.items() if k != "max_position_embeddings")
        print(f"| {family} ({sizes}) | {a:.2f} | {b:.2f} | **{b / a:.2f}x** |", flush=True)


if __name__ == "__main__":
    main()
