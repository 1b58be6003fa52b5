"""bf16 inference on a CPU with bf16 matrix units (AVX512-BF16 or AMX): bertforge's pipelines under bfloat16
autocast against fp32, and against transformers' pipeline in fp32 and in bf16 weights, on the same SST-2 dev
sentences with the same batch size, in one process.

Text classification with a fine-tuned SST-2 checkpoint: sentences/s (median of interleaved repetitions),
dev accuracy, and labels that bf16 changes; sentence embeddings of an embedding model (mean pooling,
normalised): sentences/s and the cosine of each bf16 vector to its fp32 one.

    python3 -m benchmarks.bench_bf16 --classifier RUN/best [--embedder DIR] [--batch-size 32] [--reps 3]
"""

import argparse

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads
from benchmarks.bench_inference import sst2_dev_rows


def classification(args, rows):
    import torch
    import transformers

    import bertforge

    sentences = [r["sentence"] for r in rows]
    pipes = {"bertforge fp32": bertforge.pipeline("text-classification", model=args.classifier),
             "bertforge bf16": bertforge.pipeline("text-classification", model=args.classifier, bf16=True),
             "transformers fp32": transformers.pipeline("text-classification", model=args.classifier, device="cpu"),
             "transformers bf16": transformers.pipeline("text-classification", model=args.classifier, device="cpu",
                                                        dtype=torch.bfloat16)}
    labels = {}

    def run(name):
        def call():
            kw = {} if name.startswith("bertforge") else {"truncation": True, "max_length": 128}
            labels[name] = [r["label"] for r in pipes[name](sentences, batch_size=args.batch_size, **kw)]
        return call

    times = common.interleaved({name: run(name) for name in pipes}, reps=args.reps)
    gold = [str(r["label"]) for r in rows]
    names = {label: str(i) for i, label in pipes["transformers fp32"].model.config.id2label.items()}
    for name in pipes:
        predicted = [names.get(label, label) for label in labels[name]]
        accuracy = 100 * sum(p == g for p, g in zip(predicted, gold)) / len(gold)
        changed = sum(a != b for a, b in zip(labels[name], labels[name.split()[0] + " fp32"]))
        print(f"{name:>18}: {len(sentences) / common.median(times[name]):7.1f} sentences/s, "
              f"dev accuracy {accuracy:.2f}, labels changed from its fp32: {changed} of {len(gold)}")
    rate = {n: 1 / common.median(t) for n, t in times.items()}
    print(f"bertforge bf16 / bertforge fp32: {rate['bertforge bf16'] / rate['bertforge fp32']:.2f}x; "
          f"/ transformers fp32: {rate['bertforge bf16'] / rate['transformers fp32']:.2f}x; "
          f"/ transformers bf16: {rate['bertforge bf16'] / rate['transformers bf16']:.2f}x")


def embeddings(args, rows):
    import numpy as np

    import bertforge

    sentences = [r["sentence"] for r in rows]
    pipes = {"fp32": bertforge.pipeline("sentence-embedding", model=args.embedder),
             "bf16": bertforge.pipeline("sentence-embedding", model=args.embedder, bf16=True)}
    vectors = {}

    def run(name):
        def call():
            vectors[name] = np.array(pipes[name](sentences, batch_size=args.batch_size))
        return call

    times = common.interleaved({name: run(name) for name in pipes}, reps=args.reps)
    cosine = (vectors["fp32"] * vectors["bf16"]).sum(1)
    print(f"embeddings ({args.embedder}): fp32 {len(sentences) / common.median(times['fp32']):.1f}, bf16 "
          f"{len(sentences) / common.median(times['bf16']):.1f} sentences/s "
          f"({common.median(times['fp32']) / common.median(times['bf16']):.2f}x); cosine bf16 to fp32: "
          f"min {cosine.min():.5f}, mean {cosine.mean():.6f}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--classifier", required=True, help="a text-classification checkpoint fine-tuned on SST-2")
    p.add_argument("--embedder", default=str(common.SHARED / "models" / "all-MiniLM-L6-v2"))
    common.add_sentence_run_arguments(p)
    args = p.parse_args()
    common.setup(args.threads)
    print(common.machine())
    from bertforge.inference.runtime import native_bf16
    print(f"bf16 matrix units on this CPU: {'yes' if native_bf16('cpu') else 'no (bf16 is emulated: slower)'}")
    rows = sst2_dev_rows(args.limit)
    classification(args, rows)
    embeddings(args, rows)


if __name__ == "__main__":
    main()
