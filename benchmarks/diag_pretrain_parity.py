"""Pre-training parity: bertforge's BertForPreTraining against transformers' on the same weights and batches.

Both start from the same initial weights (bertforge's init, copied into transformers), see the batches of
bertforge's PretrainJob (dynamic masking, seed 0) and step torch's AdamW with the same groups and linear
schedule. Prints both losses every few steps; with dropout 0 they should agree to float rounding, with
dropout 0.1 they should track within noise.

    python -m benchmarks.diag_pretrain_parity --data DATA --steps 300 --dropout 0
"""

import argparse
import tempfile

import torch
import transformers

from bertforge.training.optim import linear_schedule, make_optimizer
from bertforge.pretraining.pretrain import PretrainJob, build_model
from bertforge.text.tokenizer import BertTokenizer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--config", default="tiny")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--dropout", type=float, default=0.0)
    p.add_argument("--every", type=int, default=25)
    a = p.parse_args()
    torch.set_num_threads(2)
    tokenizer = BertTokenizer.from_pretrained(a.data)
    task = PretrainJob(a.data, tokenizer, a.batch_size, seed=0, eval_rows=512)
    torch.manual_seed(0)
    ours = build_model(a.config, tokenizer, None, a.dropout)
    with tempfile.TemporaryDirectory() as tmp:
        ours.save_pretrained(tmp)
        theirs = transformers.BertForPreTraining.from_pretrained(tmp, attn_implementation="eager")
    models = {"bertforge": ours, "transformers": theirs}
    opts = {k: make_optimizer(m, a.lr) for k, m in models.items()}
    scheds = {k: linear_schedule(o, int(0.05 * a.steps), a.steps) for k, o in opts.items()}
    sums = {k: [0.0, 0.0] for k in models}
    print(f"{'step':>5} | bertforge mlm nsp | transformers mlm nsp  (means over the last {a.every} steps)")
    for step in range(a.steps):
        b = task.batch(step, 0, 1)
        for k, m in models.items():
            m.train()
            if k == "bertforge":
                out = m(**b)
                mlm = out.mlm_loss
            else:
                out = m(**{x: b[x] for x in ("input_ids", "attention_mask", "token_type_ids")})
                masked = b["labels"] != -100
                mlm = torch.nn.functional.cross_entropy(out.prediction_logits[masked].float(), b["labels"][masked])
            nsp = torch.nn.functional.cross_entropy(out.seq_relationship_logits.float(), b["next_sentence_label"])
            (mlm + nsp).backward()
            torch.nn.utils.clip_grad_norm_(m.parameters(), 1.0)
            opts[k].step()
            opts[k].zero_grad(set_to_none=True)
            scheds[k].step()
            sums[k][0] += float(mlm.detach())
            sums[k][1] += float(nsp.detach())
        if (step + 1) % a.every == 0:
            f = {k: [v / a.every for v in s] for k, s in sums.items()}
            print(f"{step + 1:5d} | {f['bertforge'][0]:.4f} {f['bertforge'][1]:.4f} | "
                  f"{f['transformers'][0]:.4f} {f['transformers'][1]:.4f}", flush=True)
            sums = {k: [0.0, 0.0] for k in models}
    print("held-out (bertforge's evaluate on each model's weights):")
    for k, m in models.items():
        if k == "transformers":
            with tempfile.TemporaryDirectory() as tmp:
                m.save_pretrained(tmp)
                m = type(ours).from_pretrained(tmp)
        print(f"  {k}: " + ", ".join(f"{n} {v:.4f}" for n, v in task.evaluate(m).items()))


if __name__ == "__main__":
    main()
