"""Sentence-embedding models without tuning on the task (a teacher and the students `distill embeddings` made of it):

- STS-B dev: Spearman's rho of the cosine of each pair's embeddings against the gold score (1,500 pairs);
- SQuAD v1.1 dev retrieval: each question searches every dev paragraph (2,067) by cosine; MRR@10, nDCG@10 and
  recall@10 of its own paragraph (`bertforge.tasks.metrics.retrieval_metrics`);
- encoding speed: STS-B dev's distinct sentences per second through `bertforge.pipeline("sentence-embedding")`
  (after one untimed batch), on the threads given.

Every model runs through the pipeline at the same --max-length (its own sentence-transformers declaration gives the
pooling, Dense map and normalisation; a plain folder is mean pooled and normalised, as all-MiniLM-L6-v2).

    OMP_NUM_THREADS=1 taskset -c 1 python -m benchmarks.bench_embedding_student --threads 1 \\
        --models ../shared/models/all-MiniLM-L6-v2 runs/mini-cut/best --out embedding_students.json
"""

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from bertforge.core.errors import BertforgeError
from bertforge.core.io import read_records, write_json
from bertforge.tasks.metrics import retrieval_metrics, spearman

from .common import SHARED, machine, setup


def sts_pairs(limit: int | None) -> tuple[list[str], list[str], np.ndarray]:
    rows = [record for _, record in read_records(SHARED / "data" / "glue" / "STS-B" / "dev.tsv")][:limit]
    return ([r["sentence1"] for r in rows], [r["sentence2"] for r in rows],
            np.array([float(r["score"]) for r in rows]))


def squad_questions(limit: int | None) -> tuple[list[str], list[str], np.ndarray]:
    """The questions, the distinct paragraphs, and each question's paragraph (an index)."""
    from bertforge.tasks.squad import read_squad

    examples = read_squad(SHARED / "data" / "squad" / "dev-v1.1.json")[:limit]
    paragraphs = list(dict.fromkeys(e.context for e in examples))
    index = {p: i for i, p in enumerate(paragraphs)}
    return [e.question for e in examples], paragraphs, np.array([index[e.context] for e in examples])


def measure(folder: Path, sts, squad, max_length: int, batch_size: int) -> dict:
    import bertforge

    embed = bertforge.pipeline("sentence-embedding", model=folder, max_length=max_length, batch_size=batch_size)

    def vectors(texts):
        out = np.asarray(embed(texts, truncate=True), dtype=np.float32)
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    first, second, gold = sts
    distinct = list(dict.fromkeys(first + second))
    vectors(distinct[:batch_size])  # untimed
    began = time.perf_counter()
    by_text = dict(zip(distinct, vectors(distinct)))
    seconds = time.perf_counter() - began
    cosine = np.array([by_text[a] @ by_text[b] for a, b in zip(first, second)])
    questions, paragraphs, own = squad
    scores = vectors(questions) @ vectors(paragraphs).T
    relevant = np.zeros_like(scores, dtype=bool)
    relevant[np.arange(len(own)), own] = True
    retrieval = retrieval_metrics(scores, relevant, k=10)
    return {"model": str(folder), "dimension": int(len(next(iter(by_text.values())))),
            "stsb_spearman": spearman(cosine, gold), "squad_mrr@10": retrieval["mrr@10"],
            "squad_ndcg@10": retrieval["ndcg@10"], "squad_recall@10": retrieval["recall@10"],
            "sentences_per_s": len(distinct) / seconds, "sts_sentences": len(distinct),
            "squad_questions": len(questions), "squad_paragraphs": len(paragraphs)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", type=Path, required=True, help="model folders (teacher and students)")
    p.add_argument("--max-length", type=int, default=256, help="tokens per text (all-MiniLM-L6-v2's max_seq_length)")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--max-pairs", type=int, help="the first N STS-B dev pairs only")
    p.add_argument("--max-questions", type=int, help="the first N SQuAD dev questions only (their paragraphs)")
    p.add_argument("--out", type=Path, default=Path("bench_embedding_student.json"), help="the figures as JSON")
    args = p.parse_args()
    setup(args.threads)
    began = time.perf_counter()
    try:
        sts, squad = sts_pairs(args.max_pairs), squad_questions(args.max_questions)
    except BertforgeError as e:
        sys.exit(f"bench_embedding_student: {e} (set BERTFORGE_SHARED to the shared data folder)")
    rows = [measure(folder, sts, squad, args.max_length, args.batch_size) for folder in args.models]
    header = f"{'model':<48} {'dim':>5} {'STS-B rho':>9} {'MRR@10':>7} {'R@10':>6} {'sent/s':>8}"
    print(header + "\n" + "-" * len(header))
    for r in rows:
        print(f"{r['model'][-48:]:<48} {r['dimension']:>5} {100 * r['stsb_spearman']:>9.2f} "
              f"{100 * r['squad_mrr@10']:>7.2f} {100 * r['squad_recall@10']:>6.2f} {r['sentences_per_s']:>8.1f}")
    wall = time.perf_counter() - began
    write_json(args.out, {"machine": machine(), "max_length": args.max_length, "batch_size": args.batch_size,
                          "threads": args.threads, "wall_time_s": round(wall, 1), "models": rows})
    print(f"{machine()}\nwall time {wall:.0f} s; figures in {args.out}")


if __name__ == "__main__":
    main()
