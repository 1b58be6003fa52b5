"""Held-out masked-LM accuracy and perplexity of pre-trained checkpoints on the held-out rows of data folders.

Every model is scored on the same rows with the same masks (15%, the data's rate, seeded as the pre-training
evaluation seeds them), whatever objective or mask rate it trained with, so that runs compare. A causal
(`ltr`) checkpoint is scored on next-token prediction instead (its "mlm" figures are next-token ones).

    python -m benchmarks.eval_mlm --models abl/a-paper/final abl/d-budget/final --data corpus-rows wikivalid-rows

One JSON line per (model, data): model, data, rows, eval_mlm_accuracy, eval_mlm_perplexity, eval_mlm_loss.
"""

import argparse
import json

import torch

from bertforge.model.architectures.bert import BertForPreTraining
from bertforge.pretraining.pretrain import PretrainJob
from bertforge.text.tokenizer import BertTokenizer


def evaluate(model_dir: str, data_dir: str, batch_size: int, rows: int) -> dict:
    model = BertForPreTraining.from_pretrained(model_dir).eval()
    objective = "ltr" if model.config.is_decoder else "mlm"
    job = PretrainJob(data_dir, BertTokenizer.from_pretrained(data_dir), batch_size, seed=0, eval_rows=rows,
                      objective=objective)
    return {"model": model_dir, "data": data_dir, "objective": objective, "rows": job.eval_rows,
            **job.evaluate(model), **job.baselines()}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", nargs="+", required=True, help="checkpoint folders (BertForPreTraining)")
    p.add_argument("--data", nargs="+", required=True, help="data folders with an eval/ split")
    p.add_argument("--batch-size", type=int, default=32, help="at most the data's training rows (PretrainJob)")
    p.add_argument("--rows", type=int, default=2048, help="the first N held-out rows (all if fewer)")
    p.add_argument("--threads", type=int, default=1)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    for model_dir in args.models:
        for data_dir in args.data:
            print(json.dumps(evaluate(model_dir, data_dir, args.batch_size, args.rows)), flush=True)


if __name__ == "__main__":
    main()
