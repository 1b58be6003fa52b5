"""Fine-tuning (spec section 7): one pre-trained encoder, one small head per task, the whole network trained.

What differs between tasks is the task family's (tasks/): reading, encoding, the head, the metric. What is
shared is here: length-grouped batches (little padding), the training loop of `train.py` with settings chosen
by the number of training examples or the paper's recipe exactly (`--recipe`), evaluation every
epoch with the best checkpoint kept in RUN/best/, and RUN/eval_results.json (its history read back from
metrics.jsonl, so a resumed run reports every epoch).
"""

import json
import logging
import math
import shlex
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..model.architectures.registry import load_config
from ..core.errors import BertforgeError
from .evaluate import check_length, evaluate_splits, predict_split
from ..inference.batches import pad_batch, row_lengths
from ..core.version import __version__
from ..core.io import check_output, read_json, read_json_lines, write_json, write_text_atomic
from ..training.options import add_training_arguments, recorded_arguments, training_options
from ..core.flags import add_revision_argument, count, positive
from ..core.hub import hub_origin, model_folder
from ..tasks import TASKS, add_family_arguments, family_options, make_family
from ..tasks.base import Split, TaskFamily
from ..inference.batches import padding
from ..text.tokenizer import BertTokenizer
from ..training.options import TrainArgs
from ..training.resume import FINETUNE_FIXED, run_wall_seconds

log = logging.getLogger("bertforge")

# The paper's fine-tuning recipe (spec section 7): batch 32, lr 2e-5, 3 epochs, 10% warm-up, weight decay 0.01.
# Step checkpoints (with the optimizer state, three times the model's size) serve --resume only: one at a time,
# removed when the run completes unless --keep-checkpoints.
PAPER = dict(lr=2e-5, batch_size=32, epochs=3.0, warmup=0.1, weight_decay=0.01, patience=0)
FINETUNE_DEFAULTS = dict(seed=42, adam_eps=1e-6, log_every=10, save_every=0, keep=1, keep_checkpoints=False)
# `--recipe adaptive` (the command's default), for what --lr, --batch-size, --epochs, --warmup and --weight-decay
# leave unsaid, by the optimizer steps the paper's recipe would make (all-MiniLM-L6-v2 on SST-2, 3 seeds at each
# size; BENCHMARKS.md, "Fine-tuning defaults"): under MIN_STEPS (fewer than 3,200 examples), batches of SMALL_BATCH
# at SMALL_LR for the epochs that MIN_STEPS take (at most MAX_EPOCHS): the paper's 48 steps on 500 examples leave
# SST-2 at chance; under LARGE_STEPS, transformers' Trainer's defaults (TRAINER), 3.3 points above the paper's
# recipe and 1.3 above the small-data one at 4,000 examples; from LARGE_STEPS on (16,000 examples), the paper's
# recipe at LARGE_LR, the top rate of the paper's own grid: above the paper's 2e-5 and level with Trainer's
# defaults at 16,000 examples, in a quarter of Trainer's steps. Where it runs more than EARLY_EPOCHS epochs, it stops
# after PATIENCE epochs without a better dev score, the best epoch kept (180 rows of one's own data: best at epoch 3
# of 20; BENCHMARKS.md, "Early stopping").
RECIPES = ("adaptive", "paper")
MIN_STEPS, SMALL_BATCH, SMALL_LR, MAX_EPOCHS = 300, 16, 1e-4, 20
LARGE_STEPS, LARGE_LR = 1500, 5e-5
TRAINER = dict(lr=5e-5, batch_size=8, epochs=3.0, warmup=0.0, weight_decay=0.0, patience=0)
EARLY_EPOCHS, PATIENCE = 5, 3
CHOSEN = ("lr", "batch_size", "warmup", "weight_decay", "patience")  # the training options a recipe sets, beside
# the epochs
EPOCH_RUN = ("steps", "eval_every")  # training options a fine-tuning run sets itself: epochs, an evaluation each
LOG_KEYS = {"step", "loss", "lr", "tokens_per_s", "skipped"}  # the training figures of a metrics.jsonl row


def shuffled_order(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of a plain shuffle, as transformers' Trainer draws them."""
    order = rng.permutation(len(lengths))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def length_grouped_order(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of similar lengths: sort within random windows of 50 batches, shuffle the batches."""
    order = rng.permutation(len(lengths))
    window = batch_size * 50
    for start in range(0, len(order), window):
        part = order[start:start + window]
        order[start:start + window] = part[np.argsort(lengths[part], kind="stable")]
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


def query_groups(groups: list[int]) -> list[np.ndarray]:
    """The rows of each group id (a query's passages), in the order of the ids' first rows."""
    rows: dict[int, list[int]] = {}
    for row, group in enumerate(groups):
        rows.setdefault(group, []).append(row)
    return [np.array(r) for r in rows.values()]


def grouped_order(groups: list[np.ndarray], per_batch: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of `per_batch` whole groups of rows, the groups shuffled: a query's passages ranked together."""
    order = rng.permutation(len(groups))
    return [np.concatenate([groups[g] for g in order[i:i + per_batch]]) for i in range(0, len(order), per_batch)]


class FinetuneJob:
    """The training loop's view of fine-tuning on one task (see train.TrainingJob)."""

    resume_fixed = FINETUNE_FIXED

    def __init__(self, family: TaskFamily, encoded: dict, batch_size: int, seed: int, evaluate, tokenizer,
                 group_by_length=True):
        self.family, self.encoded, self.batch_size, self.seed = family, encoded, batch_size, seed
        self.keys = padding({**family.inputs, **family.targets}, tokenizer.pad_token_id)
        self.order = length_grouped_order if group_by_length else shuffled_order
        self.lengths = row_lengths(encoded)
        self.steps_per_epoch = math.ceil(len(self.lengths) / batch_size)
        self.groups = None
        if "groups" in encoded:  # a reranker's rows: each query's passages whole in a batch, about batch_size rows
            self.groups = query_groups(encoded["groups"])
            self.per_batch = max(1, round(batch_size * len(self.groups) / len(self.lengths)))
            self.steps_per_epoch = math.ceil(len(self.groups) / self.per_batch)
        self.evaluate, self.tokenizer = evaluate, tokenizer
        self.best_metric = family.best_metric
        self.loss_units = {"loss": family.loss_units}
        self._epoch, self._batches = None, None

    def batch(self, step: int, rank: int, world: int) -> dict:
        epoch, i = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            rng = np.random.default_rng([self.seed, epoch])
            self._batches = (self.order(self.lengths, self.batch_size, rng) if self.groups is None
                             else grouped_order(self.groups, self.per_batch, rng))
        rows = np.array_split(self._batches[i], world)[rank]
        return pad_batch(self.encoded, rows, self.keys)

    def save(self, model, folder: Path):
        model.save_pretrained(folder, tokenizer=self.tokenizer)


def finetune(task: str, model_dir, data, out, epochs: float | None = None, max_length: int | None = None,
             max_train_examples: int | None = None, max_eval_examples: int | None = None,
             group_by_length: bool = True, command: list[str] | None = None, arguments: dict | None = None,
             recipe: str = "adaptive", revision: str | None = None, **options) -> dict:
    """Fine-tune `model_dir` (a folder, or a Hub model's name at `revision`) on a task; writes RUN/best/,
    RUN/eval_results.json (and, where the family predicts a test split, its predictions by the best model) and
    returns the best metrics.

    `options`: TrainArgs fields (defaults FINETUNE_DEFAULTS) and the task family's own options; the lr, batch
    size and `epochs` not given are the `recipe`'s (`recipe_settings`); `command` and `arguments` (the parsed
    command line, which --args-file reruns) are recorded in args.json."""
    import torch  # here, not at the top: the command's --help does not load torch

    started = time.perf_counter()
    train_options = task_training_options(options, FINETUNE_DEFAULTS)
    family = make_family(task, data, max_length, options, reading=True)
    model_dir = model_folder(model_dir, revision)
    check_length(family, load_config(str(model_dir)), model_dir)  # before the data is read
    tokenizer = BertTokenizer.from_pretrained(model_dir)
    splits = read_splits(family, tokenizer, max_train_examples, max_eval_examples)
    epochs, chosen_by = choose_settings(recipe, len(splits.train.examples), train_options, epochs, out)
    torch.manual_seed(train_options["seed"])
    model = family.model_class.from_pretrained(model_dir, new_head=True, **family.head_config())
    model.config.extra.update(family.config_entries())
    run = {"task": task, "model": str(model_dir), "base_model": hub_origin(model_dir),
           "data": None if data is None else str(data),
           "family_options": family_record(options),
           "epochs": epochs, "max_length": family.max_length, "max_train_examples": max_train_examples,
           "max_eval_examples": max_eval_examples, "group_by_length": group_by_length, "command": command,
           "arguments": arguments, "recipe": recipe, "chosen_by": chosen_by}
    return train_on_task(family, model, tokenizer, splits, splits.train.encoded, out, train_options, run, started)


def recipe_settings(recipe: str, examples: int) -> tuple[dict, str]:
    """The lr, batch size, epochs, warm-up and weight decay of `recipe` (see RECIPES) for this many training
    examples, and why."""
    if recipe not in RECIPES:
        raise BertforgeError(f"--recipe must be one of {', '.join(RECIPES)}, not {recipe!r}")
    paper_steps = PAPER["epochs"] * math.ceil(examples / PAPER["batch_size"])
    if recipe == "paper":
        return dict(PAPER), "the paper's recipe (--recipe paper)"
    if paper_steps >= LARGE_STEPS:
        return {**PAPER, "lr": LARGE_LR}, (f"{examples} training examples: the paper's recipe ({paper_steps:g} "
                                           f"steps) at lr {LARGE_LR:g}, the top of the paper's grid; --recipe paper "
                                           f"keeps {PAPER['lr']:g}")
    if paper_steps >= MIN_STEPS:
        return dict(TRAINER), (f"{examples} training examples: the paper's recipe would make {paper_steps:g} steps "
                               f"(under {LARGE_STEPS}), so transformers' Trainer's defaults (no warm-up, no weight "
                               f"decay); --recipe paper keeps the paper's")
    epochs = min(MAX_EPOCHS, math.ceil(MIN_STEPS / math.ceil(examples / SMALL_BATCH)))
    patience = early_stop(epochs)
    return ({**PAPER, "lr": SMALL_LR, "batch_size": SMALL_BATCH, "epochs": float(epochs), "patience": patience},
            f"{examples} training examples: the paper's recipe would make {paper_steps:g} steps, so batches of "
            f"{SMALL_BATCH} at {SMALL_LR:g} for {epochs} epochs (at least {MIN_STEPS} steps, at most {MAX_EPOCHS} "
            f"epochs{early_stop_why(patience)}; --recipe paper keeps the paper's)")


def early_stop(epochs: float) -> int:
    """The patience (epochs without a better dev score) of an adaptive recipe that runs `epochs`: 0, never, for a
    few epochs."""
    return PATIENCE if epochs > EARLY_EPOCHS else 0


def early_stop_why(patience: int) -> str:
    return f", stopping after {patience} without a better dev score" if patience else ""


def choose_settings(recipe: str, examples: int, train_options: dict, epochs: float | None,
                    out) -> tuple[float, str]:
    """Fills the lr, batch size, warm-up and weight decay of `train_options` that were not given (None or absent)
    with the recipe's, says so, and returns the epochs and the reason recorded in args.json. A resumed run goes on
    with what its args.json records (the data it resumes on may be cut to another size)."""
    chosen, why = recipe_settings(recipe, examples)
    record = Path(out) / "args.json"
    if train_options.get("resume") and record.is_file():
        began = read_json(record)
        chosen, why = ({**{k: began[k] for k in CHOSEN}, "epochs": began["extra"]["epochs"]},
                       f"the run being resumed ({record})")
    given = {**{k: train_options.get(k) for k in CHOSEN}, "epochs": epochs}
    settings = {k: chosen[k] if v is None else v for k, v in given.items()}
    train_options.update({k: settings[k] for k in CHOSEN})
    left = [k for k, v in given.items() if v is None]
    if left:
        log.info(f"fine-tuning with lr {settings['lr']:g}, batch {settings['batch_size']}, "
                 f"{settings['epochs']:g} epochs, warm-up {settings['warmup']:g}, weight decay "
                 f"{settings['weight_decay']:g}"
                 + (f", patience {settings['patience']}" if settings["patience"] else "")
                 + f" ({', '.join(left)} from {why})")
    return settings["epochs"], why if left else "given"


def family_record(options: dict) -> dict:
    """The family's options among `options`, as args.json and the model card record them."""
    return {k: str(v) if isinstance(v, Path) else v for k, v in options.items()
            if k not in TrainArgs.__dataclass_fields__}


def task_training_options(options: dict, defaults: dict) -> dict:
    """The TrainArgs fields among `options`, over a command's defaults."""
    return {**defaults, **{k: v for k, v in options.items() if k in TrainArgs.__dataclass_fields__}}


@dataclass
class TaskSplits:
    train: Split
    evaluated: list[Split]
    test: Split | None  # read when the family predicts it with the best model, so that its bad rows fail early


def read_splits(family: TaskFamily, tokenizer, max_train_examples=None, max_eval_examples=None) -> TaskSplits:
    return TaskSplits(family.read("train", tokenizer, max_train_examples),
                      [family.read(s, tokenizer, max_eval_examples) for s in family.eval_splits],
                      family.read("test", tokenizer) if family.predicts_test() else None)


def train_on_task(family: TaskFamily, model, tokenizer, splits: TaskSplits, encoded: dict, out, train_options: dict,
                  run: dict, started: float, batch_keys: dict | None = None, loss_units: dict | None = None,
                  teacher: dict | None = None) -> dict:
    """Train `model` on the rows `encoded` for run["epochs"], evaluating every epoch; the run folder as
    `finetune` describes it. `batch_keys` (key -> padding) are what the model reads beyond the family's, and
    `loss_units` its loss terms (see train.TrainingJob) where they are not the family's one loss; `teacher`: a
    distillation teacher's scores on the same splits, recorded beside the best epoch's with the share it keeps."""
    from ..training.run_folder import best_score
    from ..training.train import fit, setup_distributed

    ctx = setup_distributed(train_options.get("device"))
    out = Path(out)
    batch_size, bf16 = train_options["batch_size"], train_options.get("bf16", False)
    # the evaluation's bar sits under the training bar: on a terminal only (in a log it leaves cursor codes)
    progress = train_options.get("progress", True) and sys.stderr.isatty()

    def evaluate(m):
        return evaluate_splits(family, m, splits.evaluated, batch_size * 2, tokenizer.pad_token_id, bf16, progress)

    job = FinetuneJob(family, encoded, batch_size, train_options["seed"], evaluate, tokenizer,
                      run["group_by_length"])
    job.keys.update(batch_keys or {})
    job.loss_units = loss_units or job.loss_units
    steps = max(1, round(run["epochs"] * job.steps_per_epoch))
    args = TrainArgs(out=out, steps=steps, **{**train_options, "eval_every": job.steps_per_epoch, "extra": run})
    fit(model, job, args, ctx, started)
    if not ctx.main:
        return {}
    rows = [row for row in read_json_lines(out / "metrics.jsonl") if family.best_metric in row]
    history = [{k: v for k, v in row.items() if k not in LOG_KEYS} for row in rows]
    scores = [best_score(row, family.best_metric) for row in rows]
    best = history[scores.index(max(scores))] if history else {}  # where none can be best: the first epoch's
    results = {"task": run["task"], **best, "epoch_of_best": history.index(best) + 1 if history else None,
               "history": history, "train_examples": len(splits.train.examples),
               "wall_time_s": run_wall_seconds(out, started)}
    if teacher is not None:
        results["teacher"] = teacher
        kept = share_kept(best.get(family.best_metric), teacher.get(family.best_metric))
        if kept is not None:
            results["of_teacher"] = kept
    if splits.test is not None and (out / "best").is_dir():
        best_model = family.model_class.from_pretrained(out / "best", device=ctx.device)
        outputs = predict_split(family, best_model, splits.test, batch_size * 2, tokenizer.pad_token_id, bf16)
        results["test_predictions"] = str(family.write(splits.test, outputs, out))
    write_json(out / "eval_results.json", results)
    if (out / "best").is_dir():
        write_text_atomic(out / "best" / "README.md", model_card(family, run, results))
    return results


def share_kept(student: float | None, teacher: float | None) -> float | None:
    """The student's score as a share of the teacher's (None where either is missing or the teacher's is not
    above 0: a correlation or MCC at or under chance has no share to keep)."""
    return None if student is None or teacher is None or teacher <= 0 else round(student / teacher, 4)


def model_card(family: TaskFamily, run: dict, results: dict) -> str:
    """best/README.md: what the model is, what it was trained on, how, and how it scored."""
    scores = "\n".join(f"| {k} | {v:.4f} |" for k, v in results.items() if isinstance(v, float) and k != "wall_time_s")
    command = shlex.join(run["command"]) if run["command"] else "(from Python: bertforge.finetuning.finetune.finetune)"
    return (f"# {run['task']}, fine-tuned with bertforge {__version__}\n\n"
            f"- task: `{run['task']}` ({type(family).__name__}, head `{family.model_class.__name__}`)\n"
            f"- labels: {', '.join(map(str, family.labels))}\n"
            f"- started from: {model_named(run['model'])}\n- data: {data_sources(run)}, "
            f"{results['train_examples']} training examples, max length {run['max_length']}\n"
            f"- best epoch: {results['epoch_of_best']} of {len(results['history'])}\n"
            f"- command: `{command}`\n\n| metric (best epoch) | value |\n|---|---|\n{scores}\n")


def model_named(model: str) -> str:
    """A model as the card names it: a Hub model by its repository and the commit read, a folder by its path."""
    origin = hub_origin(model)
    return f"`{origin['repo_id']}`, commit `{origin['commit']}`" if origin else f"`{model}`"


def data_sources(run: dict) -> str:
    """Where a run's data came from, for the model card: the data folder, or your own files or data set."""
    if run["data"]:
        return f"`{run['data']}`"
    options = run["family_options"]
    return ", ".join(f"{k} `{options[k]}`" for k in ("train", "dev", "test", "dataset") if options.get(k)) or "-"


def add_finetune_arguments(p):
    p.add_argument("task", help=f"one of {', '.join(TASKS)}")
    p.add_argument("--model", required=True, help="pre-trained checkpoint folder (Hugging Face layout), or a Hub "
                   "model's name (org/name)")
    add_revision_argument(p)
    p.add_argument("--recipe", choices=RECIPES, default="adaptive",
                   help="what --lr, --batch-size, --epochs, --warmup, --weight-decay and --patience not given are: "
                        "adaptive: "
                        f"the paper's recipe (lr 2e-5, batch 32, 3 epochs, warm-up 0.1, weight decay 0.01) at lr "
                        f"{LARGE_LR:g} where it makes at least {LARGE_STEPS} steps; transformers' Trainer's defaults "
                        f"(lr 5e-5, batch 8, 3 epochs, no warm-up or weight decay) where it makes {MIN_STEPS} to "
                        f"{LARGE_STEPS}; below, batch {SMALL_BATCH} at {SMALL_LR:g} for the epochs {MIN_STEPS} steps "
                        f"take (at most {MAX_EPOCHS}), stopping after {PATIENCE} epochs without a better dev score "
                        f"where they are more than {EARLY_EPOCHS}; paper: always the paper's, every epoch")
    add_task_run_arguments(p, {**FINETUNE_DEFAULTS, **dict.fromkeys(CHOSEN)}, None,
                           notes=dict.fromkeys((*CHOSEN, "epochs"), " (default: the --recipe's)"))


def add_task_run_arguments(p, defaults: dict, epochs: float | None, notes: dict | None = None):
    """The data, the run folder, the epochs and the training options: what training on a task takes beside the
    model it starts from (finetune, distill). A default of None is decided elsewhere, as `notes` say."""
    p.add_argument("--data", help="the task's data folder (or file); "
                                  "your own data: --train/--dev/--test or --dataset instead")
    add_run_arguments(p, defaults, epochs, "the task's, 128 to 384", notes)
    add_family_arguments(p)


def add_run_arguments(p, defaults: dict, epochs: float | None, length: str, notes: dict | None = None):
    """The run folder, the epochs, the lengths and counts of the data read, and the training options: what a run
    on examples takes (finetune, distill and distill embeddings); `length`: what --max-length defaults to."""
    p.add_argument("--out", required=True, help="run folder: best/, eval_results.json, metrics.jsonl")
    p.add_argument("--epochs", type=positive, default=epochs,
                   help="passes over the training data" + (notes or {}).get("epochs", ""))
    p.add_argument("--max-length", type=count(3), help=f"tokens per input (default: {length})")
    p.add_argument("--max-train-examples", type=count(1), help="use only the first N training examples")
    p.add_argument("--max-eval-examples", type=count(1), help="evaluate on only the first N examples")
    p.add_argument("--no-length-grouping", action="store_true",
                   help="batches of a plain shuffle (default: batches of similar lengths, little padding)")
    add_training_arguments(p, defaults, skip=EPOCH_RUN, notes=notes)


def task_run_options(args) -> dict:
    """The keywords of `finetune`/`distill` that `add_task_run_arguments` declares."""
    return {**run_options(args), **family_options(args)}


def run_options(args) -> dict:
    """The keywords that `add_run_arguments` declares."""
    return dict(epochs=args.epochs, max_length=args.max_length, max_train_examples=args.max_train_examples,
                max_eval_examples=args.max_eval_examples, group_by_length=not args.no_length_grouping,
                command=args.command_line, arguments=recorded_arguments(args),
                **training_options(args, skip=EPOCH_RUN))


def run_finetune(args) -> int:
    check_output(args.out, "--out", inputs=[p for p in (args.model, args.data) if p])
    results = finetune(args.task, args.model, args.data, args.out, recipe=args.recipe, revision=args.revision,
                       **task_run_options(args))
    print(json.dumps({k: v for k, v in results.items() if k != "history"}, indent=2))
    return 0
