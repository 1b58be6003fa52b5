"""A ranking data set from SQuAD v1.1: each question against its own paragraph (relevant, label 1) and k other
paragraphs of the same article (irrelevant, label 0), in a random order, as JSON lines `bertforge finetune rerank`
reads (columns query, passage, label).

    python -m benchmarks.squad_rerank_data --out runs/squad-rank --train-queries 1000 --train-negatives 3 \\
        --dev-queries 300 --dev-negatives 9 --seed 0

train.jsonl comes from the training file, dev.jsonl from the official dev file (other articles). Questions are
drawn without replacement among those whose text occurs once in their file (a query is its text when ranked)
and whose article has more than k paragraphs; the same flags and seed give the same files, byte for byte.
"""

import argparse
import json
from pathlib import Path

import numpy as np

from bertforge.core.io import read_json, write_text_atomic
from bertforge.core.flags import count

from .common import SHARED

FILES = {"train": "train-v1.1.rebuilt.json", "dev": "dev-v1.1.json"}


def questions(articles: list[dict], negatives: int) -> list[tuple[int, int, str]]:
    """(article, paragraph, question) of every question whose text is unique in the file and whose article has
    more than `negatives` paragraphs."""
    found = [(a, p, qa["question"].strip()) for a, article in enumerate(articles)
             if len(article["paragraphs"]) > negatives
             for p, paragraph in enumerate(article["paragraphs"]) for qa in paragraph["qas"]]
    times = {}
    for _, _, q in found:
        times[q] = times.get(q, 0) + 1
    return [f for f in found if times[f[2]] == 1]


def ranking_rows(articles: list[dict], n: int, negatives: int, rng: np.random.Generator) -> list[dict]:
    """n questions, each with its paragraph and `negatives` others of its article, the passages shuffled."""
    pool = questions(articles, negatives)
    if n > len(pool):
        raise SystemExit(f"asked for {n} questions; the file has {len(pool)} that fit")
    rows = []
    for i in sorted(rng.choice(len(pool), n, replace=False)):
        a, p, question = pool[i]
        paragraphs = articles[a]["paragraphs"]
        others = [j for j in range(len(paragraphs)) if j != p]
        chosen = [p, *rng.choice(others, negatives, replace=False)]
        group = [{"query": question, "passage": paragraphs[j]["context"], "label": int(j == p)} for j in chosen]
        rows += [group[j] for j in rng.permutation(len(group))]
    return rows


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="folder for train.jsonl and dev.jsonl")
    parser.add_argument("--squad", default=SHARED / "data" / "squad", type=Path, help="folder of the SQuAD files")
    parser.add_argument("--train-queries", type=count(1), default=1000)
    parser.add_argument("--train-negatives", type=count(1), default=3, help="irrelevant paragraphs per question")
    parser.add_argument("--dev-queries", type=count(1), default=300)
    parser.add_argument("--dev-negatives", type=count(1), default=9)
    parser.add_argument("--seed", type=count(0), default=0)
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for stream, split in enumerate(FILES):
        articles = read_json(args.squad / FILES[split])["data"]
        rng = np.random.default_rng([args.seed, stream])
        rows = ranking_rows(articles, getattr(args, f"{split}_queries"), getattr(args, f"{split}_negatives"), rng)
        write_text_atomic(out / f"{split}.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
        print(f"{out / f'{split}.jsonl'}: {len(rows)} pairs, {sum(r['label'] for r in rows)} relevant")


if __name__ == "__main__":
    main()
