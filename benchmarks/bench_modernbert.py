"""bertforge's ModernBERT against transformers' on the same checkpoint: pipeline inference and a fine-tuning step
at 128, 512 and 2,048 tokens, in one process with the same threads, repetitions interleaved, medians.

The checkpoint is written by transformers (random weights) at the shape of a released model (`--shape`: Ettin's
17M or 32M encoders, ModernBERT-base), with a byte-level BPE tokenizer trained on the demo text; the inputs are
wikitext-2 passages cut to between half and all of the length (a batch as a user's: mixed lengths, padded).
Inference: each library's text-classification pipeline over the passages at the same batch size (transformers
batches in input order, bertforge sorts by length: each library's default use). A fine-tuning step: forward,
backward and AdamW on one batch of the passages, padded to its longest, the same batch for both.

    python -m benchmarks.bench_modernbert [--shape ettin-32m] [--lengths 128 512 2048] [--reps 3] [--threads 2]
"""

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads

SHAPES = {  # (layers, hidden, heads, feed-forward) of the released models; all: window 128, global every 3rd
    "ettin-17m": (7, 256, 4, 384),
    "ettin-32m": (10, 384, 6, 576),
    "modernbert-base": (22, 768, 12, 1152),
}


def checkpoint(folder: Path, shape: str) -> Path:
    import torch
    import transformers
    from tokenizers import Tokenizer

    from tests.conftest import modernbert_tokenizer

    modernbert_tokenizer(folder)
    vocab = Tokenizer.from_file(str(folder / "tokenizer.json"))
    layers, hidden, heads, ffn = SHAPES[shape]
    config = transformers.ModernBertConfig(vocab_size=vocab.get_vocab_size(), hidden_size=hidden,
                                           num_hidden_layers=layers, num_attention_heads=heads, intermediate_size=ffn,
                                           max_position_embeddings=8192, pad_token_id=vocab.token_to_id("[PAD]"),
                                           cls_token_id=vocab.token_to_id("[CLS]"),
                                           sep_token_id=vocab.token_to_id("[SEP]"), num_labels=2)
    torch.manual_seed(0)
    transformers.ModernBertForSequenceClassification(config).save_pretrained(folder)
    return folder


def passages(tokenizer, length: int, count: int, seed: int = 0) -> list[str]:
    """`count` wikitext-2 (validation) passages of between length/2 and length - 2 tokens (room for [CLS] and [SEP])."""
    import random

    text = (common.SHARED / "data" / "corpus" / "wikitext-2-raw" / "wiki.valid.raw").read_text(encoding="utf-8")
    ids = tokenizer.backend_tokenizer.encode(text[:3_000_000], add_special_tokens=False).ids
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        n = rng.randint(length // 2, length - 2)
        start = rng.randrange(len(ids) - n)
        out.append(tokenizer.decode(ids[start:start + n]))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=SHAPES, default="ettin-32m")
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048])
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--texts", type=int, default=32, help="passages per inference run")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=common.THREADS)
    p.add_argument("--json", type=Path, help="also write the figures here")
    args = p.parse_args()
    common.setup(args.threads)
    print(common.machine())
    import torch
    import transformers

    import bertforge
    from bertforge.model.modernbert import ModernBertForSequenceClassification

    folder = checkpoint(Path(tempfile.mkdtemp()) / "model", args.shape)
    tokenizer = bertforge.BertTokenizer.from_pretrained(folder)
    ours_pipe = bertforge.pipeline("text-classification", model=folder, batch_size=args.batch_size, max_length=8192)
    theirs_pipe = transformers.pipeline("text-classification", model=str(folder), device="cpu")
    ours_model = ModernBertForSequenceClassification.from_pretrained(folder).train()
    theirs_model = transformers.ModernBertForSequenceClassification.from_pretrained(
        folder, attn_implementation="sdpa").train()
    ours_opt = torch.optim.AdamW(ours_model.parameters(), lr=1e-5)
    theirs_opt = torch.optim.AdamW(theirs_model.parameters(), lr=1e-5)
    figures = {"shape": args.shape, "machine": common.machine(), "threads": args.threads, "rows": []}
    print(f"{'job':<24}{'tokens':>8}{'bertforge s':>13}{'transformers s':>16}{'ratio':>8}")
    for length in args.lengths:
        texts = passages(tokenizer, length, args.texts)
        times = common.interleaved({
            "bertforge": lambda: ours_pipe(texts),
            "transformers": lambda: theirs_pipe(texts, batch_size=args.batch_size, truncation=True,
                                                max_length=8192)}, args.reps)
        row = {"job": "pipeline inference", "tokens": length, **{k: common.median(v) for k, v in times.items()}}
        figures["rows"].append(row)
        print(f"{row['job']:<24}{length:>8}{row['bertforge']:>13.3f}{row['transformers']:>16.3f}"
              f"{row['transformers'] / row['bertforge']:>7.2f}x", flush=True)

        batch = tokenizer(texts[:args.batch_size], padding=True, return_tensors="pt", return_token_type_ids=False)
        labels = torch.arange(len(texts[:args.batch_size])) % 2

        def step(model, optimizer):
            def run():
                loss = model(**batch, labels=labels).loss
                loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            return run
        times = common.interleaved({"bertforge": step(ours_model, ours_opt),
                                    "transformers": step(theirs_model, theirs_opt)}, args.reps)
        row = {"job": "fine-tuning step", "tokens": length, **{k: common.median(v) for k, v in times.items()}}
        figures["rows"].append(row)
        print(f"{row['job']:<24}{length:>8}{row['bertforge']:>13.3f}{row['transformers']:>16.3f}"
              f"{row['transformers'] / row['bertforge']:>7.2f}x", flush=True)
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
