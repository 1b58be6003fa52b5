"""int8 against fp32 on the torch runtime: SST-2 dev accuracy and speed of a text-classification model, and how
close the int8 sentence embeddings of an encoder stay to fp32 (mean cosine over the dev sentences).

Each pass runs all dev sentences through `bertforge.pipeline` (batch 32); fp32 and int8 passes are interleaved
and the rates are medians.

    python3 -m benchmarks.bench_int8 --model RUN/best [--embedder ../shared/models/all-MiniLM-L6-v2] [--reps 3]
"""

import argparse
import json
from pathlib import Path

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads
from benchmarks.bench_inference import sst2_dev_rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a text-classification checkpoint folder fine-tuned on SST-2")
    p.add_argument("--embedder", default=str(common.SHARED / "models" / "all-MiniLM-L6-v2"),
                   help="an encoder folder for the embedding comparison")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=common.THREADS)
    args = p.parse_args()
    common.setup(args.threads)
    print(common.machine())
    import torch

    import bertforge

    rows = sst2_dev_rows()
    names = json.loads((Path(args.model) / "config.json").read_text())["id2label"]  # the dev file's 0/1 -> labels
    sentences, gold = [r["sentence"] for r in rows], [names[r["label"]] for r in rows]
    pipes = {name: bertforge.pipeline("text-classification", model=args.model, int8=name == "int8")
             for name in ("fp32", "int8")}
    labels = {}

    def run(name):
        def call():
            labels[name] = [x["label"] for x in pipes[name](sentences, batch_size=32)]
        return call

    times = common.interleaved({name: run(name) for name in pipes}, reps=args.reps)
    rates = {name: len(sentences) / common.median(times[name]) for name in pipes}
    for name in pipes:
        accuracy = sum(a == b for a, b in zip(labels[name], gold)) / len(gold)
        print(f"{name}: SST-2 dev accuracy {accuracy:.2%}, {rates[name]:.0f} sentences/s (median of {args.reps})")
    embeddings = [torch.tensor(bertforge.pipeline("sentence-embedding", model=args.embedder, int8=int8)(
        sentences, batch_size=32)) for int8 in (False, True)]
    cosine = torch.nn.functional.cosine_similarity(*embeddings).mean().item()
    print(f"{args.embedder}: int8 sentence embeddings, mean cosine to fp32 {cosine:.3f}")
    print(f"ratio={rates['int8'] / rates['fp32']:.2f} (int8 / fp32)")


if __name__ == "__main__":
    main()
