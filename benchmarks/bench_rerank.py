"""Rankers on one ranking dev set (benchmarks/squad_rerank_data.py's dev.jsonl): MRR@10 and nDCG@10 of
fine-tuned rerankers (their runs' eval_results.json, scored by `bertforge finetune rerank` on the same file)
beside baselines that need no training on it:

- random order: the expectation, the mean over 200 random scorings;
- TF-IDF cosine of query and passage (scikit-learn's TfidfVectorizer fitted on the dev passages): lexical match;
- the untuned encoder's cosine: mean-pooled, normalised embeddings of query and passage by sentence-transformers
  (what all-MiniLM-L6-v2 is for), at the same maximum length.

    python -m benchmarks.bench_rerank --data runs/squad-rank --runs runs/rerank-s1 runs/rerank-s2 runs/rerank-s3

All figures go through `bertforge.tasks.metrics.ranking_metrics` (ties counted against the scorer).
"""

import argparse
import json
import statistics
import time
from pathlib import Path

import numpy as np

from bertforge.core.io import read_json, read_json_lines
from bertforge.tasks.metrics import ranking_groups, ranking_metrics

from .common import SHARED, machine, setup

KEYS = ("mrr@10", "ndcg@10")


def random_order(groups, labels) -> dict:
    rng = np.random.default_rng(0)
    draws = [ranking_metrics(groups, labels, rng.random(len(labels))) for _ in range(200)]
    return {k: float(np.mean([d[k] for d in draws])) for k in KEYS}


def tfidf_cosine(rows) -> np.ndarray:
    from sklearn.feature_extraction.text import TfidfVectorizer

    vectorizer = TfidfVectorizer().fit(sorted({r["passage"] for r in rows}))
    queries = vectorizer.transform([r["query"] for r in rows])
    passages = vectorizer.transform([r["passage"] for r in rows])
    return np.asarray(queries.multiply(passages).sum(1)).ravel()  # rows are unit length: the cosine


def encoder_cosine(rows, model: Path, max_length: int) -> np.ndarray:
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    word = Transformer(str(model), max_seq_length=max_length)
    encoder = SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), "mean"), Normalize()],
                                  device="cpu")
    texts = sorted({r["query"] for r in rows} | {r["passage"] for r in rows})
    vectors = dict(zip(texts, encoder.encode(texts, batch_size=32, convert_to_numpy=True)))
    return np.array([vectors[r["query"]] @ vectors[r["passage"]] for r in rows])


def run_figures(run: Path) -> dict:
    results = read_json(run / "eval_results.json")
    return {**{k: results[k] for k in KEYS}, "wall_time_s": results["wall_time_s"]}


def spread(figures: list[dict]) -> dict:
    """Mean and sample sd over seeds."""
    out = {}
    for k in KEYS:
        values = [f[k] for f in figures]
        out[k] = f"{statistics.mean(values):.4f}" + (f" ± {statistics.stdev(values):.4f}" if len(values) > 1 else "")
    return out


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", required=True, type=Path, help="folder of dev.jsonl (squad_rerank_data.py)")
    parser.add_argument("--model", default=SHARED / "models" / "all-MiniLM-L6-v2", type=Path,
                        help="the untuned encoder")
    parser.add_argument("--max-length", type=int, default=256)
    parser.add_argument("--runs", nargs="*", default=[], type=Path, help="finetune rerank run folders (seeds)")
    parser.add_argument("--bi-encoder-runs", nargs="*", default=[], type=Path,
                        help="fine-tuned bi-encoders' folders (their model in best/ or the folder itself)")
    args = parser.parse_args(argv)
    setup()
    print(machine())
    rows = read_json_lines(args.data / "dev.jsonl")
    labels = [r["label"] for r in rows]
    groups = ranking_groups([r["query"] for r in rows], labels, "dev.jsonl")
    print(f"dev: {len(groups)} queries, {len(rows)} pairs")
    table = {"random order (expectation)": random_order(groups, labels),
             "TF-IDF cosine": ranking_metrics(groups, labels, tfidf_cosine(rows))}
    began = time.perf_counter()
    table[f"{args.model.name} cosine, untuned"] = ranking_metrics(groups, labels,
                                                                  encoder_cosine(rows, args.model, args.max_length))
    print(f"untuned encoder: {time.perf_counter() - began:.0f} s")
    for run in args.bi_encoder_runs:
        folder = run / "best" if (run / "best").is_dir() else run
        table[f"bi-encoder {run.name}"] = ranking_metrics(groups, labels,
                                                          encoder_cosine(rows, folder, args.max_length))
    if args.runs:
        figures = [run_figures(run) for run in args.runs]
        for run, f in zip(args.runs, figures):
            table[f"reranker {run.name}"] = f
        table[f"reranker, mean ± sd over {len(figures)}"] = spread(figures)
    print("\n| ranker | MRR@10 | nDCG@10 |\n|---|---|---|")
    for name, m in table.items():
        print(f"| {name} | " + " | ".join(v if isinstance(v, str) else f"{v:.4f}" for v in (m[k] for k in KEYS))
              + " |")
    print(json.dumps({name: {k: m[k] for k in KEYS} for name, m in table.items()}))


if __name__ == "__main__":
    main()
