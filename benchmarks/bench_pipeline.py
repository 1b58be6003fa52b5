"""Offline throughput of `bertforge.pipeline("text-classification")` against transformers' `pipeline()` on the
same checkpoint folder and the SST-2 dev sentences, measured in the same process.

Both get the whole list in one call with the same batch size; transformers' pipeline batches in input order,
bertforge's sorts by length first (what it is built to do), so the figure is what a user gets from each
library's defaults at that batch size. Repetitions are interleaved (A B A B ...); figures are medians. The
labels of the two are compared sentence by sentence.

    python3 -m benchmarks.bench_pipeline --model RUN/best [--batch-size 32] [--reps 3] [--limit N]
"""

import argparse

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads
from benchmarks.bench_inference import sst2_sentences


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a text-classification checkpoint folder")
    common.add_sentence_run_arguments(p)
    args = p.parse_args()
    common.setup(args.threads)
    print(common.machine())
    import transformers

    import bertforge

    sentences = sst2_sentences(args.limit)
    ours = bertforge.pipeline("text-classification", model=args.model, max_length=128)
    theirs = transformers.pipeline("text-classification", model=args.model, device="cpu")
    results = {}

    def run(name, pipe, **kw):
        def call():
            results[name] = pipe(sentences, batch_size=args.batch_size, **kw)
        return call

    times = common.interleaved({"bertforge": run("bertforge", ours),
                                "transformers": run("transformers", theirs, truncation=True, max_length=128)},
                               reps=args.reps)
    same = sum(a["label"] == b["label"] for a, b in zip(results["bertforge"], results["transformers"]))
    rates = {name: len(sentences) / common.median(t) for name, t in times.items()}
    for name, rate in rates.items():
        print(f"{name:>12}: {rate:7.1f} sentences/s (median of {args.reps}: {common.median(times[name]):.2f} s "
              f"for {len(sentences)} sentences, batch {args.batch_size})")
    print(f"labels equal: {same} of {len(sentences)}")
    print(f"ratio={rates['bertforge'] / rates['transformers']:.2f}")


if __name__ == "__main__":
    main()
