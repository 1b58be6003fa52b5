"""`bertforge squad-split`: a SQuAD file split by article into train and dev files (tasks/squad.py's
`split_by_article`), named by the file's version as `finetune squad` reads them."""

import json
from pathlib import Path

from ..core.errors import BertforgeError, where
from ..core.io import check_output, read_json, write_text_atomic
from ..core.flags import count, open_fraction
from ..tasks.squad import split_by_article, squad_counts


def add_squad_split_arguments(parser):
    parser.add_argument("file", help="a SQuAD v1.1 or v2.0 JSON file")
    parser.add_argument("--out", required=True,
                        help="folder for train-vV.json and dev-vV.json, V the file's version (what finetune reads)")
    parser.add_argument("--train-fraction", type=open_fraction, default=0.5,
                        help="the share of the articles to train on")
    parser.add_argument("--seed", type=count(0), default=0, help="seed of the shuffle of the articles")


def run_squad_split(args) -> int:
    check_output(args.out, "--out", inputs=[args.file])
    data = read_json(args.file)
    squad_counts(data, args.file)  # a malformed file fails here, before anything is written
    version = str(data.get("version", "")).removeprefix("v")
    if version not in ("1.1", "2.0"):
        raise BertforgeError(f"{where(args.file)}: version is {data.get('version')!r}, expected 1.1 or 2.0 "
                             f"(it names the files written)")
    for name, part in zip(("train", "dev"), split_by_article(data, args.train_fraction, args.seed, args.file)):
        path = Path(args.out) / f"{name}-v{version}.json"
        write_text_atomic(path, json.dumps(part, ensure_ascii=False))
        counts = squad_counts(part, path)
        print(f"{name}: {counts['articles']} articles, {counts['questions']} questions "
              f"({counts['unanswerable']} unanswerable) -> {path}")
    return 0
