"""`bertforge plot RUN`: the run's losses and held-out figures from metrics.jsonl, as a PNG."""

from pathlib import Path

from ..core.errors import BertforgeError
from ..core.io import atomic_path, check_output, read_json, read_json_lines
from .objectives import FIGURES


def read_metrics(run) -> list[dict]:
    path = Path(run) / "metrics.jsonl" if Path(run).is_dir() else Path(run)
    if not path.is_file():
        raise BertforgeError(f"{path}: no metrics log (is this a run folder?)")
    rows = read_json_lines(path)
    if not rows:
        raise BertforgeError(f"{path}: the log is empty")
    return rows


def series(rows, key):
    points = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
    return [p[0] for p in points], [p[1] for p in points]


BASELINES_FILE = "baselines.json"


def read_baselines(folder: Path) -> dict:
    """The trivial predictors' scores that `pretrain` writes beside the log, or nothing."""
    path = folder / BASELINES_FILE
    return read_json(path) if path.is_file() else {}


def plot_run(run, out=None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(run)
    folder = Path(run) if Path(run).is_dir() else Path(run).parent
    baselines = read_baselines(folder)
    out = Path(out) if out else folder / "curves.png"
    losses = [k for k in ("loss", "mlm_loss", "nsp_loss", "eval_mlm_loss") if any(k in r for r in rows)]
    figures = [k for k in sorted({k for r in rows for k in r})
               if k.startswith("eval_") and k not in ("eval_mlm_loss", "eval_mlm_perplexity")]
    fig, axes = plt.subplots(1, 2 if figures else 1, figsize=(12 if figures else 6, 4.5), squeeze=False)
    for key in losses:
        axes[0][0].plot(*series(rows, key), label=key, marker="o" if key.startswith("eval") else None, markersize=3)
    axes[0][0].set(xlabel="step", ylabel="loss", title="training and held-out loss")
    axes[0][0].legend()
    if figures:
        for key in figures:
            line, = axes[0][1].plot(*series(rows, key), label=key, marker="o", markersize=3)
            if FIGURES.get(key) in baselines:
                axes[0][1].axhline(baselines[FIGURES[key]], color=line.get_color(), linestyle="--",
                                   linewidth=1, label=f"{key} baseline")
        axes[0][1].set(xlabel="step", title="held-out evaluation")
        axes[0][1].legend()
    for ax in axes[0]:
        ax.grid(alpha=0.3)
    fig.suptitle(Path(run).name)
    fig.tight_layout()
    with atomic_path(out) as tmp:
        fig.savefig(tmp, dpi=110, format="png")
    plt.close(fig)
    return out


def add_plot_arguments(p):
    p.add_argument("run", help="run folder (or its metrics.jsonl)")
    p.add_argument("--out", help="PNG to write (default RUN/curves.png)")


def run_plot(args) -> int:
    if args.out:
        check_output(args.out, "--out", folder=False, inputs=[args.run])
    print(plot_run(args.run, args.out))
    return 0
