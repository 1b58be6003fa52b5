"""What a checkpoint carries into fine-tuning, and how its sentence representations look before fine-tuning.

For each model folder: which tensors a sequence classifier loads from it and which are fresh (bertforge and
transformers side by side), the fresh classifier's init, and on the first 256 SST-2 dev sentences the mean
pairwise cosine similarity of the pooled output (what the classifier reads), of the [CLS] state, and of the
mean token state, plus the share of pooled units in tanh's saturated range (|x| > 0.95).

    python -m benchmarks.diag_finetune_init --glue ../shared/data/glue MODEL_DIR ...
"""

import argparse
import csv
from pathlib import Path

import torch
import transformers
from safetensors.torch import load_file

from bertforge.model.architectures.task_heads import BertForSequenceClassification
from bertforge.text.tokenizer import BertTokenizer

transformers.logging.set_verbosity_error()


def mean_pairwise_cosine(x: torch.Tensor) -> float:
    x = torch.nn.functional.normalize(x.float(), dim=-1)
    sim = x @ x.T
    n = len(x)
    return float((sim.sum() - sim.diagonal().sum()) / (n * (n - 1)))


@torch.no_grad()
def describe(folder: Path, sentences: list[str]) -> dict:
    saved = load_file(folder / "model.safetensors")
    ours = BertForSequenceClassification.from_pretrained(folder, id2label={0: "0", 1: "1"}).eval()
    state = ours.state_dict()
    loaded = [k for k in state if k in saved and torch.equal(state[k], saved[k])]
    fresh = sorted(k for k in state if k not in saved)
    _, info = transformers.BertForSequenceClassification.from_pretrained(folder, num_labels=2,
                                                                          output_loading_info=True)
    tok = BertTokenizer.from_pretrained(folder)
    enc = tok(sentences, padding=True, truncation=True, max_length=128, return_tensors="pt")
    out = ours.bert(**enc)
    mask = enc["attention_mask"].unsqueeze(-1).float()
    mean_tokens = (out.last_hidden_state * mask).sum(1) / mask.sum(1)
    return {
        "tensors loaded unchanged": f"{len(loaded)} of {len(state)}",
        "fresh (bertforge)": ", ".join(fresh),
        "fresh (transformers)": ", ".join(sorted(info["missing_keys"])),
        "classifier weight std": round(float(ours.classifier.weight.std()), 4),
        "pooler weight std": round(float(ours.bert.pooler.dense.weight.std()), 4),
        "cos(pooled)": round(mean_pairwise_cosine(out.pooler_output), 3),
        "cos([CLS] state)": round(mean_pairwise_cosine(out.last_hidden_state[:, 0]), 3),
        "cos(mean token state)": round(mean_pairwise_cosine(mean_tokens), 3),
        "saturated pooled units": f"{float((out.pooler_output.abs() > 0.95).float().mean()):.1%}",
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("models", nargs="+", type=Path)
    p.add_argument("--glue", required=True, type=Path)
    a = p.parse_args()
    torch.set_num_threads(2)
    with open(a.glue / "SST-2" / "dev.tsv", encoding="utf-8") as f:
        sentences = [row["sentence"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)][:256]
    for folder in a.models:
        print(f"== {folder}")
        for key, value in describe(folder, sentences).items():
            print(f"   {key}: {value}")


if __name__ == "__main__":
    main()
