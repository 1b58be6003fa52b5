"""The figures of the docs, drawn from measurements recorded in BENCHMARKS.md (each list names its section).

    python -m benchmarks.plots        # docs/speed.png, docs/distillation-sizes.png
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DOCS = Path(__file__).resolve().parent.parent / "docs"

# bertforge over transformers, same machine, same run ("Results (fp32)", "The offline pipeline after issue 33's
# changes", "Serving (issue 13)": requests/s at 32 clients over transformers' pipeline() behind a plain server).
SPEED = [("pre-training step\nBERT-Mini, Zen 3", 6.84), ("fine-tuning\nSST-2, Zen 3", 2.36),
         ("offline pipeline\nSST-2, Zen 4", 1.78), ("serving, torch fp32\n32 clients, Zen 3", 166 / 49.5),
         ("serving, ONNX int8\n32 clients, Zen 3", 340 / 49.5)]

# Parameters (M), SST-2 dev accuracy (fp32) and examples/s over the teacher's: "Four teacher-labelled variants for
# the BERT-Tiny cut in two steps" (Zen 4, 2 threads, the machine idle).
SIZES = [("teacher all-MiniLM-L6-v2", 22.7, 89.68, 1.0), ("BERT-Mini cut from it", 11.2, 87.50, 2.91),
         ("BERT-Tiny cut from that", 4.4, 84.63, 14.5)]


def speed(path: Path):
    fig, ax = plt.subplots(figsize=(7, 3.2))
    names, ratios = zip(*SPEED)
    bars = ax.barh(names[::-1], ratios[::-1], color="#4c72b0")
    ax.bar_label(bars, [f"{r:.1f}x" for r in ratios[::-1]], padding=3)
    ax.axvline(1, color="grey", linestyle="--", linewidth=1)
    ax.set_xlabel("bertforge / transformers (1 = as fast)")
    ax.set_xlim(0, max(ratios) * 1.2)
    ax.set_title("bertforge against transformers, 2 CPU cores")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def sizes(path: Path):
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for name, params, accuracy, speedup in SIZES:
        ax.scatter(params, accuracy, s=40 + 12 * speedup, color="#dd8452")
        ax.annotate(f"{name}\n{accuracy:.2f}, {speedup:g}x the teacher's speed", (params, accuracy),
                    textcoords="offset points", xytext=(8, -4), fontsize=8)
    ax.set_xlabel("parameters (millions)")
    ax.set_ylabel("SST-2 dev accuracy")
    ax.set_xlim(0, 40)
    ax.set_ylim(83, 91)
    ax.set_title("Distilled students: size against accuracy (SST-2)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    speed(DOCS / "speed.png")
    sizes(DOCS / "distillation-sizes.png")
    print(f"wrote {DOCS / 'speed.png'} and {DOCS / 'distillation-sizes.png'}")
