"""bertforge's ModernBERT against transformers' on the same checkpoint: pipeline inference and fine-tuning steps
at 128, 512 and 2,048 tokens, in one process with the same threads, repetitions interleaved, medians.

The checkpoint is written by transformers (random weights) at the shape of a released model (`--shape`: Ettin's
17M or 32M encoders, ModernBERT-base), with a small byte-level BPE tokenizer; the inputs are wikitext-2
passages of up to the length, "mixed" (lengths uniform from 8 tokens up: a user's texts, a batch padded) and
"full" (every row the whole length: no padding, so only the model's own work differs).
Inference: each library's text-classification pipeline over the passages at the same batch size (transformers
batches in input order, bertforge sorts by length: each library's default use). Fine-tuning steps: forward,
backward and AdamW on each batch of the passages in input order, padded to its longest, the same batches for both
(the time of all of them: a single batch's padding would make the ratio a matter of the draw).

    python -m benchmarks.bench_modernbert [--shape ettin-32m] [--lengths 128 512 2048] [--reps 3] [--threads 2]
    python -m benchmarks.bench_modernbert --memory 8192 [--shape modernbert-base]
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


MIXES = {"mixed": lambda length: (8, length - 2), "full": lambda length: (length - 2, length - 2)}


def passages(tokenizer, length: int, count: int, mix: str, seed: int = 0) -> list[str]:
    """`count` wikitext-2 (validation) passages of up to `length` tokens with [CLS] and [SEP]: "mixed", of lengths
    uniform from 8 up, as a user's texts are; "full", every one as long."""
    import random

    text = (common.SHARED / "data" / "corpus" / "wikitext-2-raw" / "wiki.valid.raw").read_text(encoding="utf-8")
    ids = tokenizer.backend_tokenizer.encode(text, add_special_tokens=False).ids
    rng = random.Random(seed)
    low, high = MIXES[mix](length)
    out = []
    while len(out) < count:
        n = rng.randint(low, high)
        start = rng.randrange(len(ids) - n)
        passage = tokenizer.decode(ids[start:start + n])
        if len(tokenizer.backend_tokenizer.encode(passage, add_special_tokens=False).ids) <= length - 2:
            out.append(passage)  # a passage that re-encodes longer (a piece split across the cut) is drawn again
    return out


def forward_memory(library: str, folder: Path, tokens: int) -> None:
    """In a fresh process: one forward pass of one `tokens`-token row; prints the peak RSS over the loaded model's."""
    import torch

    if library == "bertforge":
        from bertforge.model.architectures.modernbert import ModernBertForSequenceClassification as Model
        model = Model.from_pretrained(folder)
    else:
        import transformers
        model = transformers.ModernBertForSequenceClassification.from_pretrained(folder, attn_implementation="sdpa")
    model.eval()
    ids = torch.randint(10, 300, (1, tokens))
    baseline = common.peak_rss_mb()
    start = __import__("time").perf_counter()
    with torch.no_grad():
        model(input_ids=ids, attention_mask=torch.ones_like(ids))
    seconds = __import__("time").perf_counter() - start
    print(f"{common.child_memory_line(baseline)} seconds={seconds:.2f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--shape", choices=SHAPES, default="ettin-32m")
    p.add_argument("--lengths", type=int, nargs="+", default=[128, 512, 2048])
    p.add_argument("--mixes", nargs="+", choices=MIXES, default=list(MIXES))
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--texts", type=int, default=32, help="passages per run (inference and the steps)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=common.THREADS)
    p.add_argument("--json", type=Path, help="also write the figures here")
    p.add_argument("--memory", type=int, help="instead: the peak memory of one forward pass of a row this long, "
                                              "each library in a fresh process")
    p.add_argument("--child", nargs=2, metavar=("LIBRARY", "FOLDER"), help=argparse.SUPPRESS)
    args = p.parse_args()
    common.setup(args.threads)
    if args.child:
        return forward_memory(args.child[0], Path(args.child[1]), args.memory)
    print(common.machine())
    if args.memory:
        folder = checkpoint(Path(tempfile.mkdtemp()) / "model", args.shape)
        for library in ("bertforge", "transformers"):
            got = common.run_child("benchmarks.bench_modernbert", ["--shape", args.shape, "--memory", str(args.memory),
                                                                   "--threads", str(args.threads),
                                                                   "--child", library, str(folder)], timeout=1800)
            print(f"{library:<14} {args.memory} tokens: peak {got['peak_rss_mb'] - got['baseline_mb']:,.0f} MB above "
                  f"the loaded model ({got['baseline_mb']:,.0f} MB), {got['seconds']:.1f} s", flush=True)
        return
    import torch
    import transformers

    import bertforge
    from bertforge.model.architectures.modernbert import ModernBertForSequenceClassification

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
    # padded/real: the tokens transformers runs (batches in input order, padded) per real token: where matrix
    # products dominate (short rows), the most that running only the real tokens can gain at the same precision
    print(f"{'job':<20}{'inputs':>8}{'tokens':>8}{'bertforge s':>13}{'transformers s':>16}{'ratio':>8}"
          f"{'padded/real':>12}")

    def report(job, mix, length, padding, times):
        row = {"job": job, "mix": mix, "tokens": length, "padded_per_real": padding,
               **{k: common.median(v) for k, v in times.items()}}
        figures["rows"].append(row)
        print(f"{job:<20}{mix:>8}{length:>8}{row['bertforge']:>13.3f}{row['transformers']:>16.3f}"
              f"{row['transformers'] / row['bertforge']:>7.2f}x{padding:>10.2f}", flush=True)

    def steps(model, optimizer, batches):
        def run():
            for batch in batches:
                model(**batch, labels=torch.arange(len(batch["input_ids"])) % 2).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
        return run

    for length in args.lengths:
        for mix in args.mixes:
            texts = passages(tokenizer, length, args.texts, mix)
            batches = [tokenizer(texts[i:i + args.batch_size], padding=True, return_tensors="pt",
                                 return_token_type_ids=False) for i in range(0, len(texts), args.batch_size)]
            padding = sum(b["attention_mask"].numel() for b in batches) / sum(int(b["attention_mask"].sum())
                                                                              for b in batches)
            report("pipeline inference", mix, length, padding, common.interleaved({
                "bertforge": lambda: ours_pipe(texts),
                "transformers": lambda: theirs_pipe(texts, batch_size=args.batch_size, truncation=True,
                                                    max_length=8192)}, args.reps))
            report("fine-tuning steps", mix, length, padding, common.interleaved({
                "bertforge": steps(ours_model, ours_opt, batches),
                "transformers": steps(theirs_model, theirs_opt, batches)}, args.reps))
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2) + "\n")


if __name__ == "__main__":
    main()
