"""SPLADE vectors against sentence-transformers' `SparseEncoder.encode`, at a real vocabulary's size: all-MiniLM-L6-v2
(../shared) with a masked-LM head of seeded random weights, written by transformers, made a SparseEncoder folder by
`write_sparse_folder`; the sparse-embedding pipeline and `SparseEncoder(folder).encode` embed SST-2 dev sentences.
Prints the max abs difference of the weights, the tokens active in one and not the other, then both speeds,
interleaved (`ratio=` bertforge/sentence-transformers time).

    python3 -m benchmarks.diag_splade_parity [--limit N] [--reps 3]
"""

import argparse
import csv
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.common import SHARED, THREADS, interleaved, machine, median, setup


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--limit", type=int, default=872, help="the first N SST-2 dev sentences")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--threads", type=int, default=THREADS)
    args = p.parse_args()
    setup(args.threads)
    import torch
    import transformers
    from sentence_transformers import SparseEncoder

    import bertforge
    from bertforge.model.formats.sparse_folder import write_sparse_folder

    print(machine())
    with open(SHARED / "data" / "glue" / "SST-2" / "dev.tsv", encoding="utf-8") as f:
        texts = [r["sentence"] for r in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][:args.limit]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "splade"
        torch.manual_seed(0)
        minilm = SHARED / "models" / "all-MiniLM-L6-v2"
        transformers.BertForMaskedLM.from_pretrained(minilm).save_pretrained(folder)
        transformers.AutoTokenizer.from_pretrained(minilm).save_pretrained(folder)
        write_sparse_folder(folder, max_seq_length=256)
        ours, theirs = bertforge.pipeline(model=folder, batch_size=32), SparseEncoder(str(folder), device="cpu")
        reference = theirs.encode(texts, batch_size=32, convert_to_tensor=True).to_dense().numpy()
        got = np.zeros_like(reference)
        for row, weights in zip(got, ours(texts)):
            row[list(weights)] = list(weights.values())
        print(f"{len(texts)} SST-2 dev sentences, vocabulary {reference.shape[1]}: max abs difference "
              f"{np.abs(got - reference).max():.2e} (largest weight {reference.max():.2f}); active tokens "
              f"{int((reference > 0).sum())} (sentence-transformers), {int((got > 0).sum())} (bertforge), "
              f"{int(((reference > 0) != (got > 0)).sum())} in one only")
        times = interleaved({"bertforge": lambda: ours(texts),
                             "sentence-transformers": lambda: theirs.encode(texts, batch_size=32)}, args.reps)
        for name, values in times.items():
            print(f"{name:>22}: {median(values):.2f} s ({len(texts) / median(values):.0f} sentences/s)")
        print(f"ratio={median(times['bertforge']) / median(times['sentence-transformers']):.2f}")


if __name__ == "__main__":
    main()
