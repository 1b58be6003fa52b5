"""MTEB on local data: an STS task of GLUE's STS-B dev (1,500 pairs, scores 0 to 5, read from ../shared), run by
`mteb.evaluate` on a bertforge model through `bertforge.inference.mteb_model.MTEBModel`, and on the same folder
through mteb's own SentenceTransformer wrapper: both scores (Spearman and Pearson of the pairs' cosine against the
gold scores, MTEB's main score cosine_spearman) and the seconds each evaluation took, interleaved.

    python3 -m benchmarks.bench_mteb [--model FOLDER] [--rows N] [--reps 2]

The last line is `ratio=<bertforge seconds / sentence-transformers seconds>`. Needs mteb (pip install -e '.[mteb]').
"""

import argparse
import csv
import time

from benchmarks.common import SHARED, THREADS, machine, median, setup


def stsb_dev(rows: int | None = None):
    """An MTEB STS task of GLUE's STS-B dev pairs (its first `rows`)."""
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

    path = SHARED / "data" / "glue" / "STS-B" / "dev.tsv"

    class STSBDev(AbsTaskSTS):
        metadata = TaskMetadata(
            name="STSBDev", description="GLUE STS-B dev (1,500 pairs), read from ../shared", reference=None,
            dataset={"path": "NA", "revision": "NA"}, type="STS", category="t2t", modalities=["text"],
            eval_splits=["test"], eval_langs=["eng-Latn"], main_score="cosine_spearman", date=None, domains=None,
            task_subtypes=None, license=None, annotations_creators=None, dialect=None, sample_creation=None,
            bibtex_citation="")
        min_score, max_score = 0, 5

        def load_data(self, num_proc=None, **kwargs):
            with open(path, encoding="utf-8") as f:  # the dev file's stray quotes are text
                pairs = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))[:rows]
            self.dataset = DatasetDict({"test": Dataset.from_dict({
                "sentence1": [r["sentence1"] for r in pairs], "sentence2": [r["sentence2"] for r in pairs],
                "score": [float(r["score"]) for r in pairs]})})
            self.data_loaded = True

    return STSBDev()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default=str(SHARED / "models" / "all-MiniLM-L6-v2"))
    p.add_argument("--rows", type=int, help="the first N pairs only")
    p.add_argument("--reps", type=int, default=2)
    p.add_argument("--threads", type=int, default=THREADS)
    args = p.parse_args()
    setup(args.threads)
    import mteb
    from sentence_transformers import SentenceTransformer

    from bertforge.inference.mteb_model import MTEBModel

    print(machine())
    print(f"mteb {mteb.__version__}; model {args.model}; STS-B dev, {args.rows or 'all'} pairs")
    models = {"bertforge": MTEBModel(args.model), "sentence-transformers": SentenceTransformer(args.model,
                                                                                              device="cpu")}
    seconds, found = {name: [] for name in models}, {}
    for _ in range(args.reps):
        for name, model in models.items():
            task = stsb_dev(args.rows)
            start = time.perf_counter()
            result = mteb.evaluate(model, [task], cache=None, show_progress_bar=False)
            seconds[name].append(time.perf_counter() - start)
            found[name] = result.task_results[0].scores["test"][0]
    for name, scores in found.items():
        print(f"{name:>22}: cosine_spearman {scores['cosine_spearman']:.4f}  cosine_pearson "
              f"{scores['cosine_pearson']:.4f}  main_score {scores['main_score']:.4f}  "
              f"{median(seconds[name]):.1f} s (median of {args.reps})")
    print(f"ratio={median(seconds['bertforge']) / median(seconds['sentence-transformers']):.2f}")


if __name__ == "__main__":
    main()
