"""`bertforge suite`: fine-tune one model on several tasks over several seeds, and report mean ± sd per task.

Every run is `finetune.finetune` into OUT/runs/TASK/POINT/seed-S; a run whose eval_results.json exists is
finished and not redone, so an interrupted suite continues where it stopped (a torn one is done again, with a
warning naming it). The model folders of a run are
removed once it is scored (only its metrics are kept) unless --keep-models. With --grid, every point of the
grid is run for every seed and each task reports the point with the best mean dev score over the seeds (the
paper selects on dev the same way; the figure is optimistic by that selection). `--model random:CONFIG`
fine-tunes randomly initialised encoders of that size (one draw per seed): the no-pre-training baseline.

OUT/suite.json holds every run (its best metrics, the metrics after each epoch, wall time) and the summary;
OUT/suite.md the table: per task the main metric's mean ± sd (sample sd over seeds), min and max, the figures of
`bertforge evaluate`'s speed line for the first seed's model (examples/s on the dev split in batches of 64,
parameters, size on disk), and the GLUE-style average (the mean over tasks of the main metric).
"""

import argparse
import itertools
import json
import logging
import math
import shutil
import statistics
import time
from pathlib import Path

from ..model.architectures.registry import load_config
from ..core.errors import BertforgeError
from .evaluate import SPEED_FIGURES, mebibytes, millions, run_conditions, whole
from .finetune import finetune
from ..core.io import read_json, write_json, write_text_atomic
from ..training.options import add_training_arguments, training_options
from ..core.flags import add_revision_argument, count, positive
from ..core.hub import model_folder
from ..tasks import TASKS, make_family
from ..text.tokenizer import BertTokenizer
from ..training.recipes import FINETUNE_DEFAULTS, PAPER
from ..training.settings import EPOCH_RUN

log = logging.getLogger("bertforge")
PAPER_GRID = {"lr": [2e-5, 3e-5, 5e-5], "batch_size": [16, 32], "epochs": [2, 3, 4]}  # the paper's appendix A.3
GRID_KEYS = {"lr": float, "batch_size": int, "epochs": float}
SPEED_BATCH = 64  # rows per forward pass when a run's model is timed


def parse_grid(text: str) -> dict:
    """'paper', or 'lr=1e-4,3e-4 batch_size=32 epochs=3' (keys not given: the paper's values)."""
    if text == "paper":
        return dict(PAPER_GRID)
    grid = dict(PAPER_GRID)
    for part in text.split():
        key, _, values = part.partition("=")
        key = key.replace("-", "_")
        try:
            grid[key] = [GRID_KEYS[key](v) for v in values.split(",")]
        except (KeyError, ValueError):
            raise argparse.ArgumentTypeError(f"{text!r}: expected 'paper' or KEY=V1,V2 ... with KEY one of "
                                             f"{', '.join(GRID_KEYS)}") from None
    return grid


def point_name(point: dict) -> str:
    return f"lr{point['lr']:g}-bs{point['batch_size']}-ep{point['epochs']:g}"


def check_model(model: str, vocab: str | None, revision: str | None = None) -> Path | None:
    """The folder every run starts from (a Hub name's, at `revision`, in the cache), checked; None for
    random:CONFIG, whose runs start from a model of their seed."""
    if model.startswith("random:"):
        if vocab is None:
            raise BertforgeError(f"--model {model}: a random model needs --vocab (a vocab.txt or tokenizer folder)")
        load_config(model.split(":", 1)[1])
        return None
    folder = model_folder(model, revision)
    if not folder.is_dir():
        raise BertforgeError(f"--model {model}: not a folder")
    if not any((folder / name).is_file() for name in ("vocab.txt", "tokenizer.json")):
        raise BertforgeError(f"--model {model}: no tokenizer in the folder (vocab.txt or tokenizer.json); save the "
                             "model with its tokenizer, or copy the vocabulary it was trained with beside it")
    return folder


def random_model(spec: str, vocab: str, seed: int, folder: Path) -> Path:
    """A randomly initialised encoder of size CONFIG (seeded), saved with the vocabulary: a folder finetune reads
    (no pre-training heads, which fine-tuning would only drop with a word)."""
    if not (folder / "config.json").is_file():
        import torch  # here, not at the top: the command's --help does not load torch

        from ..model.architectures.registry import model_class

        tokenizer = BertTokenizer.from_pretrained(vocab)
        config = load_config(spec.split(":", 1)[1])
        config = type(config).from_dict({**config.to_dict(), "vocab_size": tokenizer.vocab_size,
                                         "pad_token_id": tokenizer.pad_token_id})
        torch.manual_seed(seed)
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model_class("BertModel", config)(config).save_pretrained(tmp, tokenizer=tokenizer)
        tmp.rename(folder)
    return folder


def model_cost(task: str, folder: Path, data, max_eval_examples: int | None, device: str | None) -> dict:
    """A fine-tuned model's speed line (`evaluate.model_figures`): its examples/s on the task's first evaluation
    split, timed as evaluate times them (`evaluate.Speed`, batches of 64), its parameters and size on disk; the
    examples/s depend on the machine, which `host` names."""
    import platform

    from .evaluate import Speed, model_figures
    from ..inference.runtime import pick_device

    family = make_family(task, data, reading=True, options={"progress": False})
    tokenizer = BertTokenizer.from_pretrained(folder)
    model = family.model_class.from_pretrained(folder, device=pick_device(device))
    split = family.read(family.eval_splits[0], tokenizer, max_eval_examples)
    speed = Speed()
    speed.predict(family, model, split, SPEED_BATCH, tokenizer.pad_token_id)
    return {**model_figures(model, folder, speed.examples_per_s, SPEED_BATCH), "speed_split": split.name,
            "host": platform.processor() or platform.machine()}


def check_seeds(seeds: list[int]) -> None:
    """Each seed is one run: a seed given twice would count one run twice in the mean and sd."""
    twice = next((seed for i, seed in enumerate(seeds) if seed in seeds[:i]), None)
    if twice is not None:
        raise BertforgeError(f"--seeds {' '.join(map(str, seeds))}: seed {twice} is given twice (each seed is one "
                             "run of each task)")


def run_result(folder: Path) -> dict | None:
    """A finished run's eval_results.json (with its cost.json's figures, if the run has one), or None when the run
    is not finished or its results are torn (unreadable: then a warning names the file and the run is done again)."""
    done = folder / "eval_results.json"
    if not done.is_file():
        return None
    try:
        result = read_json(done)
        if not isinstance(result.get("history"), list):
            raise BertforgeError(f"{done}: not a run's results (no history)")
        cost = read_json(folder / "cost.json") if (folder / "cost.json").is_file() else {}
    except BertforgeError as e:
        log.warning(f"{e}; the run is done again")
        return None
    return {**result, "cost": cost}


def check_report(out: Path) -> None:
    """An earlier suite's report that is torn is said so; it is written anew from the runs."""
    path = out / "suite.json"
    if path.is_file():
        try:
            read_json(path)
        except BertforgeError as e:
            log.warning(f"{e}; it is written anew from the runs")


def summarise(runs: list[dict], tasks: list[str]) -> dict:
    """Per task: the grid point with the best mean main metric over seeds, and that point's spread. An undefined
    value (a correlation of constant predictions is NaN) counts as 0, and `undefined` says how many there were."""
    summary = {}
    for task in tasks:
        metric = make_family(task).best_metric
        by_point = {}
        for r in runs:
            if r["task"] == task:
                by_point.setdefault(point_name(r["point"]), []).append(r["metrics"].get(metric, float("nan")))
        if not by_point:
            continue
        defined = {name: [v if math.isfinite(v) else 0.0 for v in values] for name, values in by_point.items()}
        name, values = max(defined.items(), key=lambda kv: statistics.fmean(kv[1]))
        summary[task] = {"metric": metric, "point": name, "seeds": len(values), "mean": statistics.fmean(values),
                         "sd": statistics.stdev(values) if len(values) > 1 else 0.0,
                         "min": min(values), "max": max(values), "values": values,
                         "undefined": sum(not math.isfinite(v) for v in by_point[name])}
        cost = next((r for r in runs if r["task"] == task and "parameters" in r), {})
        summary[task].update({k: cost[k] for k in SPEED_FIGURES if k in cost})
    means = [s["mean"] for s in summary.values()]
    return {"tasks": summary, "average": statistics.fmean(means) if means else None}


def markdown(model: str, summary: dict, wall_s: float) -> str:
    lines = [f"# Suite: {model}", "", "| task | metric | point | seeds | mean ± sd | min | max | parameters | "
             "examples/s | on disk |", "|---|---|---|---|---|---|---|---|---|---|"]
    for task, s in summary["tasks"].items():
        undefined = f" ({s['undefined']} undefined, as 0)" if s.get("undefined") else ""
        spread = f" ± {100 * s['sd']:.1f}" if s["seeds"] > 1 else " (one seed: no spread)"
        size = millions(s["parameters"]) if "parameters" in s else ""
        rate = whole(s["examples_per_s"]) if "examples_per_s" in s else ""
        disk = mebibytes(s["bytes_on_disk"]) if "bytes_on_disk" in s else ""
        lines.append(f"| {task} | {s['metric']} | {s['point']} | {s['seeds']}{undefined} | {100 * s['mean']:.1f}"
                     f"{spread} | {100 * s['min']:.1f} | {100 * s['max']:.1f} | {size} | {rate} | {disk} |")
    if summary["average"] is not None:
        lines.append(f"| **average** | | | | **{100 * summary['average']:.1f}** | | | | | |")
    measured = sorted({run_conditions(s) for s in summary["tasks"].values() if "batch_size" in s})
    lines += ["", f"Figures x 100; sd is the sample standard deviation over seeds. Runs took {wall_s / 60:.1f} "
                  "min of wall time in all. Parameters, examples/s and size on disk: the first seed's fine-tuned "
                  "model on the task's dev split, as `bertforge evaluate` prints them"
                  + (f" ({'; '.join(measured)})" if measured else "") + ", on this machine."]
    return "\n".join(lines) + "\n"


def suite(model: str, tasks: list[str], seeds: list[int], out, data, points: list[dict], vocab: str | None = None,
          max_train_examples: int | None = None, max_eval_examples: int | None = None, keep_models: bool = False,
          progress: bool = True, training: dict | None = None, revision: str | None = None) -> dict:
    """Run (or pick up) every task x point x seed and write OUT/suite.json and OUT/suite.md; return the summary.
    `model`: a folder, a Hub model's name (at `revision`) or random:CONFIG. `training`: TrainArgs fields for every
    run (finetune's defaults otherwise), but a point's lr and batch size."""
    training = training or {}
    device = training.get("device")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown:
        raise BertforgeError(f"--tasks: unknown task {unknown[0]!r}: choose from {', '.join(TASKS)}")
    check_seeds(seeds)
    start = check_model(model, vocab, revision)
    out = Path(out)
    check_report(out)
    todo = list(itertools.product(tasks, points, seeds))
    runs, spent, fresh = [], 0.0, 0
    for i, (task, point, seed) in enumerate(todo, 1):
        folder = out / "runs" / task / point_name(point) / f"seed-{seed}"
        result = run_result(folder)
        if result is None:
            shutil.rmtree(folder, ignore_errors=True)  # an interrupted run (or a torn result) starts again
            model_dir = random_model(model, vocab, seed, out / "init" / f"seed-{seed}") if start is None else start
            began = time.perf_counter()
            finetune(task, model_dir, data, folder, **{**training, **point}, max_train_examples=max_train_examples,
                     max_eval_examples=max_eval_examples, seed=seed, progress=False, recipe="paper")
            spent, fresh = spent + time.perf_counter() - began, fresh + 1
            if seed == seeds[0] and (folder / "best").is_dir():
                write_json(folder / "cost.json", model_cost(task, folder / "best", data, max_eval_examples, device))
            if not keep_models:  # finetune removed the step checkpoints
                for sub in [folder / "final", folder / "best"]:
                    shutil.rmtree(sub, ignore_errors=True)
            result = run_result(folder)
        metrics = {k: v for k, v in result.items() if isinstance(v, float) and k != "wall_time_s"}
        cost = result.pop("cost")
        runs.append({"task": task, "seed": seed, "point": point, "metrics": metrics, "history": result["history"],
                     "epoch_of_best": result.get("epoch_of_best"), "wall_time_s": result.get("wall_time_s"),
                     "train_examples": result.get("train_examples"), **cost})
        if progress:
            metric = make_family(task).best_metric
            eta = spent / fresh * (len(todo) - i) if fresh else None
            print(f"[{i}/{len(todo)}] {task} {point_name(point)} seed {seed}: {metric} "
                  f"{metrics.get(metric, float('nan')):.4f} ({result.get('wall_time_s', 0):.0f} s)"
                  + (f"; ETA {eta / 60:.1f} min" if eta is not None and i < len(todo) else ""), flush=True)
    summary = summarise(runs, tasks)
    wall = sum(r["wall_time_s"] or 0 for r in runs)
    report = {"model": model, "tasks": tasks, "seeds": seeds, "points": points, "data": str(data),
              "max_train_examples": max_train_examples, "runs": runs, "summary": summary, "wall_time_s": wall}
    write_text_atomic(out / "suite.json", json.dumps(report, indent=1) + "\n")
    write_text_atomic(out / "suite.md", markdown(model, summary, wall))
    return summary


def add_suite_arguments(p):
    p.description = (f"{p.description}; suite.md's table also gives each task's first fine-tuned model's examples/s "
                     f"(timed as evaluate's speed line, batches of {SPEED_BATCH}, on --device), parameters and size "
                     "on disk")
    p.add_argument("--model", required=True,
                   help="checkpoint folder with its tokenizer, a Hub model's name (org/name), or random:CONFIG (tiny, "
                        "mini, ... or a config.json) for randomly initialised encoders (with --vocab)")
    add_revision_argument(p)
    p.add_argument("--vocab", help="vocab.txt, a tokenizer folder or a Hub model's name, for --model random:CONFIG")
    p.add_argument("--tasks", nargs="+", default=["sst2", "mrpc", "cola", "stsb"],
                   help="tasks to fine-tune on")
    p.add_argument("--seeds", nargs="+", type=count(0), default=[1, 2, 3],
                   help="fine-tuning seeds, each a whole number of at least 0, each once")
    p.add_argument("--data", required=True, help="the tasks' data folder (for GLUE: the folder holding SST-2/ ...)")
    p.add_argument("--out", required=True, help="suite folder: suite.json, suite.md, runs/")
    p.add_argument("--epochs", type=positive, default=PAPER["epochs"], help="passes over each task's training data")
    p.add_argument("--grid", nargs="?", const="paper", type=parse_grid, metavar="SPEC",
                   help="run a grid instead of --lr/--batch-size/--epochs and report each task's dev-best point: "
                        "the paper's (lr 2e-5,3e-5,5e-5 x batch 16,32 x epochs 2,3,4) or a subset such as "
                        "'lr=3e-5,5e-5 epochs=3' (keys not given: the paper's values)")
    p.add_argument("--max-train-examples", type=count(1), help="use only the first N training examples of each task")
    p.add_argument("--max-eval-examples", type=count(1), help="evaluate on only the first N examples")
    p.add_argument("--keep-models", action="store_true", help="keep each run's best/ model (default: metrics only)")
    p.add_argument("--no-progress", dest="progress", action="store_false",
                   help="no line per finished run (runs done, ETA); the report is printed at the end")
    # each run's training options, as finetune's (--lr and --batch-size: unless --grid sets them)
    add_training_arguments(p, {**FINETUNE_DEFAULTS, **PAPER}, skip=SUITE_OWN, args_file=False)


# Training options a suite sets per run (seed, the run folder) or for itself (its progress lines), not per flag
SUITE_OWN = ("seed", "resume", "overwrite", "save_every", "keep", "keep_checkpoints", "progress", *EPOCH_RUN)


def run_suite(args) -> int:
    grid = args.grid or {"lr": [args.lr], "batch_size": [args.batch_size], "epochs": [args.epochs]}
    points = [dict(zip(grid, values)) for values in itertools.product(*grid.values())]
    summary = suite(args.model, args.tasks, args.seeds, args.out, args.data, points, vocab=args.vocab,
                    max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples,
                    keep_models=args.keep_models, progress=args.progress,
                    training=training_options(args, skip=SUITE_OWN + ("lr", "batch_size")), revision=args.revision)
    print((Path(args.out) / "suite.md").read_text(encoding="utf-8"), end="")
    return 0 if summary["tasks"] else 2
