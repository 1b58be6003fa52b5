"""How far an exact fp32 embedder can get ahead of sentence-transformers' `encode`: on bench_embed's passages
(all-MiniLM-L6-v2, one process), `encode`'s time against the time of the matrix products alone that any exact fp32
BERT runs on the same texts, through torch's kernels: each layer's Linears over the passages' real tokens only (no
padding; query, key and value as one product), in the batches `encode` makes (sorted by length, --batch-size rows),
without biases, and its attention through scaled_dot_product_attention (the batch padded to its longest row). No work
of tokenizing, embedding lookup, bias, layer norm, GELU or pooling is counted, so `encode / floor` bounds any exact
fp32 implementation's ratio to `encode` on this machine from above.

    python3 -m benchmarks.diag_embed_floor --passages 2000 --reps 3
    python3 -m benchmarks.diag_embed_floor --sst2 --batch-size 32   # the SST-2 dev sentences the server benchmark sends

Timed warm (the model loaded, a first pass untimed), `encode` and the floor interleaved --reps times; medians.
"""

import argparse
import time

import numpy as np

from benchmarks.common import machine, median, setup  # first: it sets the OpenMP wait policy before torch loads
from benchmarks.bench_embed import MAX_TOKENS, MODEL, passages
from benchmarks.bench_inference import sst2_sentences

import torch  # noqa: E402


def batches(lengths: np.ndarray, size: int) -> list[np.ndarray]:
    """The passages' lengths in `encode`'s batches: longest first, `size` rows a batch."""
    order = np.argsort(-lengths, kind="stable")
    return [lengths[order[i:i + size]] for i in range(0, len(order), size)]


@torch.inference_mode()
def floor(weights: list[torch.Tensor], heads: int, layers: int, groups: list[np.ndarray]) -> tuple[float, float]:
    """Wall and CPU seconds of the matrix products alone: a layer's four weights (query, key and value as one) over
    a batch's real tokens, and its attention by scaled_dot_product_attention (fused scores, softmax and values)."""
    width = weights[0].shape[1]
    start, cpu = time.perf_counter(), time.process_time()
    for lengths in groups:
        tokens = int(lengths.sum())
        inputs = {width: torch.randn(tokens, width), weights[-1].shape[1]: torch.randn(tokens, weights[-1].shape[1])}
        q = torch.randn(len(lengths), heads, int(lengths.max()), width // heads)
        for _ in range(layers):
            for weight in weights:
                torch.nn.functional.linear(inputs[weight.shape[1]], weight)
            torch.nn.functional.scaled_dot_product_attention(q, q, q)
    return time.perf_counter() - start, time.process_time() - cpu


def layer_weights(bert) -> list[torch.Tensor]:
    """The first layer's weights, query, key and value as one matrix (the other layers' have the same shapes)."""
    layer = bert.encoder.layer[0]
    attention = layer.attention.self
    return [torch.cat([attention.query.weight, attention.key.weight, attention.value.weight]),
            layer.attention.output.dense.weight, layer.intermediate.dense.weight, layer.output.dense.weight]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passages", type=int, default=2000)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--sst2", action="store_true", help="SST-2's dev sentences (872) instead of wikitext passages")
    args = p.parse_args()
    setup(args.threads)
    from sentence_transformers import SentenceTransformer

    texts = sst2_sentences() if args.sst2 else passages(args.passages)
    model = SentenceTransformer(str(MODEL), device="cpu")
    bert = model[0].auto_model
    lengths = np.array([len(ids) for ids in model.tokenizer(texts, truncation=True, max_length=MAX_TOKENS)["input_ids"]])
    groups = batches(lengths, args.batch_size)
    weights = [w.detach() for w in layer_weights(bert)]
    heads, layers = bert.config.num_attention_heads, bert.config.num_hidden_layers
    model.encode(texts[:256], batch_size=args.batch_size)
    floor(weights, heads, layers, groups[:4])
    encode_s, encode_cpu, floor_s, floor_cpu = [], [], [], []
    for rep in range(args.reps):
        t0, cpu = time.perf_counter(), time.process_time()
        model.encode(texts, batch_size=args.batch_size)
        encode_s.append(time.perf_counter() - t0)
        encode_cpu.append(time.process_time() - cpu)
        wall, cpu = floor(weights, heads, layers, groups)
        floor_s.append(wall)
        floor_cpu.append(cpu)
        print(f"rep {rep + 1}: encode {encode_s[-1]:.1f} s, matrix products alone {floor_s[-1]:.1f} s", flush=True)
    padded = sum(len(g) * int(g.max()) for g in groups)
    print("\n| texts | tokens (padded in encode's batches) | encode s | matrix products alone s | encode / floor | "
          "CPU ms a text: encode, floor |")
    print("|---|---|---|---|---|---|")
    print(f"| {len(texts)} | {int(lengths.sum())} ({padded}) | {median(encode_s):.2f} | {median(floor_s):.2f} | "
          f"{median(encode_s) / median(floor_s):.2f}x | {1e3 * median(encode_cpu) / len(texts):.2f}, "
          f"{1e3 * median(floor_cpu) / len(texts):.2f} |")
    print(f"\n{machine()}; {args.threads} threads, batch size {args.batch_size}, {args.reps} interleaved repetitions, "
          f"medians")


if __name__ == "__main__":
    main()
