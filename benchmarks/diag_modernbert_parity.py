"""The parity table of bertforge's ModernBERT against transformers' (fp32): for each head, shape and batch of row
lengths, the worst absolute difference of its outputs at the real tokens (logits, or the last hidden state) and of
every hidden state. Checkpoints are written by transformers with random weights (moved off their first values, so
that biases and norms count), at a scaled-down shape and at Ettin-17M's.

    python -m benchmarks.diag_modernbert_parity [--long 4096]
"""

import argparse
import tempfile
from pathlib import Path

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads

SHAPES = {  # name: config fields (all: sliding window 128 but the scaled-down one's 16, global every 3rd layer)
    "4 x 64, window 16": dict(hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                              local_attention=16),
    "Ettin-17M (7 x 256)": dict(hidden_size=256, intermediate_size=384, num_hidden_layers=7, num_attention_heads=4),
}
HEADS = ["ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
         "ModernBertForTokenClassification", "ModernBertForQuestionAnswering"]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--long", type=int, default=4096, help="the length of the one long row")
    p.add_argument("--threads", type=int, default=common.THREADS)
    args = p.parse_args()
    common.setup(args.threads)
    print(common.machine())
    import torch
    import transformers

    from bertforge.model.architectures import modernbert

    batches = [[10], [50, 23, 7], [600, 130], [args.long]]
    print("| head | shape | row lengths | outputs | hidden states |\n|---|---|---|---|---|")
    for shape, sizes in SHAPES.items():
        for name in HEADS:
            torch.manual_seed(0)
            config = transformers.ModernBertConfig(vocab_size=300, max_position_embeddings=8192, pad_token_id=0,
                                                   num_labels=2, attn_implementation="sdpa", **sizes)
            reference = getattr(transformers, name)(config).eval()
            with torch.no_grad():
                for parameter in reference.parameters():
                    parameter.add_(torch.randn_like(parameter) * 0.02)
            folder = Path(tempfile.mkdtemp()) / name
            reference.save_pretrained(folder)
            ours = getattr(modernbert, name).from_pretrained(folder)
            for lengths in batches:
                ids = torch.randint(3, 300, (len(lengths), max(lengths)))
                mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
                with torch.no_grad():
                    theirs = reference(input_ids=ids * mask, attention_mask=mask, output_hidden_states=True)
                    mine = ours(input_ids=ids * mask, attention_mask=mask, output_hidden_states=True)
                real = mask.bool()
                outputs = max((theirs[k][real] - mine[k][real]).abs().max().item()
                              if theirs[k].shape[:2] == real.shape else (theirs[k] - mine[k]).abs().max().item()
                              for k in ("logits", "start_logits", "end_logits", "last_hidden_state")
                              if theirs.get(k) is not None)
                states = max((a - b)[real].abs().max().item() for a, b in zip(theirs.hidden_states,
                                                                             mine.hidden_states, strict=True))
                print(f"| {name} | {shape} | {', '.join(map(str, lengths))} | {outputs:.1e} | {states:.1e} |",
                      flush=True)


if __name__ == "__main__":
    main()
