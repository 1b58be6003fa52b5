"""What each precision of `bertforge embed` keeps of float32's retrieval quality: SQuAD v1.1 dev's 2,067 paragraphs
as the corpus, its questions as the queries (the first `--queries` whose text occurs once), each relevant to its
own paragraph; all-MiniLM-L6-v2; `bertforge search --queries --qrels` at each precision, the quantized ones with a
float rescoring of their top `--rescore` (as sentence-transformers' quantization guide does) and without.

    python -m benchmarks.bench_quantized_retrieval [--queries 2000] [--rescore 100]

A markdown row per precision and rescoring: MRR@10, nDCG@10, recall@100, the share of float32's MRR@10 kept, and
the vectors' bytes.
"""

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks import common

MODEL = common.SHARED / "models" / "all-MiniLM-L6-v2"
SQUAD = common.SHARED / "data" / "squad" / "dev-v1.1.json"


def write_data(folder: Path, count: int) -> list[str]:
    """corpus.jsonl, queries.jsonl and qrels.tsv in `folder`."""
    articles = json.loads(SQUAD.read_text(encoding="utf-8"))["data"]
    corpus, questions = [], []
    for a, article in enumerate(articles):
        for p, paragraph in enumerate(article["paragraphs"]):
            corpus.append({"_id": f"p{a}-{p}", "text": paragraph["context"]})
            questions += [(qa["question"].strip(), f"p{a}-{p}") for qa in paragraph["qas"]]
    times = {}
    for question, _ in questions:
        times[question] = times.get(question, 0) + 1
    chosen = [(q, doc) for q, doc in questions if times[q] == 1][:count]
    (folder / "corpus.jsonl").write_text("".join(json.dumps(row) + "\n" for row in corpus))
    (folder / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n"
                                                  for i, (q, _) in enumerate(chosen)))
    (folder / "qrels.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                      + "".join(f"q{i}\t{doc}\t1\n" for i, (_, doc) in enumerate(chosen)))
    return [row["_id"] for row in corpus]


def bertforge(*argv) -> str:
    return subprocess.run([sys.executable, "-m", "bertforge", *map(str, argv)], check=True, capture_output=True,
                          text=True).stdout


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--queries", type=int, default=2000)
    p.add_argument("--rescore", type=int, default=100)
    p.add_argument("--precisions", nargs="+", default=["float32", "int8", "ubinary"])
    args = p.parse_args()
    print(common.machine())
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        ids = write_data(tmp, args.queries)
        print(f"{len(ids):,} paragraphs, {args.queries:,} questions")
        print("| precision | rescoring | MRR@10 | nDCG@10 | recall@100 | of float32's MRR@10 | bytes a vector |\n"
              "|---|---|---|---|---|---|---|")
        base = None
        for precision in args.precisions:
            out = tmp / precision
            bertforge("embed", tmp / "corpus.jsonl", "--model", MODEL, "--out", out, "--id-column", "_id",
                      "--precision", precision, "--no-progress")
            manifest = json.loads((out / "manifest.json").read_text())
            size = sum(f.stat().st_size for f in out.glob("*.npy") if not f.name.endswith("ids.npy")) / len(ids)
            for rescore in ([args.rescore, 0] if precision != "float32" else [0]):
                metrics = json.loads(bertforge("search", out, "--queries", tmp / "queries.jsonl", "--qrels",
                                               tmp / "qrels.tsv", "--query-id-column", "_id", "--rescore", rescore,
                                               "--json", "--no-progress"))
                base = base or metrics["mrr@10"]
                shown = f"top {rescore} in float32" if rescore else "none"
                print(f"| {precision} ({manifest['dims']} dims) | {shown} | {metrics['mrr@10']:.4f} | "
                      f"{metrics['ndcg@10']:.4f} | {metrics['recall@100']:.4f} | {metrics['mrr@10'] / base:.1%} | "
                      f"{size:.0f} |", flush=True)


if __name__ == "__main__":
    main()
