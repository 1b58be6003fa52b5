"""bertforge against transformers on the encoder families read beyond BERT and ModernBERT (RoBERTa, XLM-RoBERTa,
ELECTRA, DistilBERT, MPNet): each library's text-classification pipeline over the same texts, at each family's released
shape (random weights written by transformers, the test suite's small trained tokenizers), in one process with the
same threads, repetitions interleaved, medians.

The texts are wikitext-2 (validation) lines of 5 to `--max-words` words, a user's mixed lengths; both pipelines
get the same batch size and truncate at the model's length (transformers batches in input order, bertforge sorts by
length: each library's default use).

`--step`: a fine-tuning step instead, the same for both: each library's sequence classifier from the same folder,
in training mode (dropout on), forward, loss, backward and an AdamW step on one padded batch of `--batch-size`
texts from the same tokenizer (bertforge packs the real tokens, transformers computes on the padding).

    python -m benchmarks.bench_families [--families roberta electra distilbert mpnet] [--texts 48] [--reps 3] [--step]
"""

import argparse
import random
import tempfile
from pathlib import Path

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads

BASE = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12)
FAMILIES = {  # head, the folder writer (the test suite's, or this file's), the released model's shape
    "bert": ("BertForSequenceClassification", "bert_folder", BASE),  # bert-base: the baseline the others meet
    "roberta": ("RobertaForSequenceClassification", "roberta_folder", {**BASE, "max_position_embeddings": 514}),
    "xlm-roberta": ("XLMRobertaForSequenceClassification", "roberta_folder",
                    {**BASE, "max_position_embeddings": 514}),
    "electra": ("ElectraForSequenceClassification", "electra_folder",  # electra-small-discriminator
                dict(embedding_size=128, hidden_size=256, intermediate_size=1024, num_hidden_layers=12,
                     num_attention_heads=4, max_position_embeddings=512)),
    "distilbert": ("DistilBertForSequenceClassification", "distilbert_folder",  # distilbert-base
                   dict(dim=768, hidden_dim=3072, n_layers=6, n_heads=12, max_position_embeddings=512)),
    "mpnet": ("MPNetForSequenceClassification", "mpnet_folder",  # mpnet-base, all-mpnet-base-v2
              {**BASE, "max_position_embeddings": 514, "relative_attention_num_buckets": 32}),
}


def bert_folder(folder: Path, head: str, **config) -> Path:
    """A BERT checkpoint as transformers writes one, random weights, the test suite's WordPiece tokenizer."""
    import transformers

    import tests.conftest as builders

    builders.distilbert_tokenizer(folder, 512)
    vocab = len(transformers.AutoTokenizer.from_pretrained(folder))
    getattr(transformers, head)(transformers.BertConfig(vocab_size=vocab, **config)).save_pretrained(folder)
    return folder


def texts(count: int, max_words: int, seed: int = 0) -> list[str]:
    lines = [line.strip() for line in (common.SHARED / "data" / "corpus" / "wikitext-2-raw" / "wiki.valid.raw")
             .read_text(encoding="utf-8").splitlines() if len(line.split()) >= 5 and not line.startswith(" =")]
    rng = random.Random(seed)
    return [" ".join(rng.choice(lines).split()[:rng.randint(5, max_words)]) for _ in range(count)]


def pipelines(folder, inputs, batch_size) -> dict:
    import transformers

    import bertforge

    ours = bertforge.pipeline("text-classification", model=folder)
    theirs = transformers.pipeline("text-classification", model=str(folder), device="cpu")
    return {"bertforge": lambda: ours(inputs, batch_size=batch_size),
            "transformers": lambda: theirs(inputs, batch_size=batch_size, truncation=True)}


def steps(folder, batch) -> dict:
    import torch
    import transformers

    import bertforge

    encoded = transformers.AutoTokenizer.from_pretrained(str(folder))(batch, padding=True, truncation=True,
                                                                       return_tensors="pt")
    inputs = {"input_ids": encoded["input_ids"], "attention_mask": encoded["attention_mask"],
              "labels": torch.arange(len(batch)) % 2}

    def step(model):
        optimizer = torch.optim.AdamW(model.parameters(), lr=2e-5)

        def run():
            model(**inputs).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return run

    ours = bertforge.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2).train()
    theirs = transformers.AutoModelForSequenceClassification.from_pretrained(str(folder), num_labels=2).train()
    return {"bertforge": step(ours), "transformers": step(theirs)}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--families", nargs="+", choices=FAMILIES, default=["roberta", "electra", "distilbert"])
    p.add_argument("--texts", type=int, default=48)
    p.add_argument("--max-words", type=int, default=80)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=common.THREADS)
    p.add_argument("--step", action="store_true", help="time a fine-tuning step, not the pipeline")
    args = p.parse_args()
    common.setup(args.threads)

    import tests.conftest as builders

    inputs = texts(args.texts, args.max_words)
    print(common.machine())
    what = "one fine-tuning step on a batch of" if args.step else "texts, batch size"
    print(f"{args.texts} texts of 5-{args.max_words} words, {what} {args.batch_size}, {args.reps} interleaved "
          "repetitions after one warm-up")
    print("| family (shape) | bertforge s | transformers s | ratio |\n|---|---|---|---|")
    for family in args.families:
        head, writer, shape = FAMILIES[family]
        with tempfile.TemporaryDirectory() as tmp:
            folder = (globals().get(writer) or getattr(builders, writer))(Path(tmp) / family, head, **shape)
            runs = steps(folder, inputs[:args.batch_size]) if args.step else pipelines(folder, inputs, args.batch_size)
            times = common.interleaved(runs, args.reps)
        a, b = common.median(times["bertforge"]), common.median(times["transformers"])
        sizes = ", ".join(f"{k} {v}" for k, v in shape.items() if k != "max_position_embeddings")
        print(f"| {family} ({sizes}) | {a:.2f} | {b:.2f} | **{b / a:.2f}x** |", flush=True)


if __name__ == "__main__":
    main()
