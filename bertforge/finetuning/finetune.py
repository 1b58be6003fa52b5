"""Fine-tuning (spec section 7): one pre-trained encoder, one small head per task, the whole network trained.

What differs between tasks is the task family's (tasks/): reading, encoding, the head, the metric. What is
shared is here: length-grouped batches (little padding), the training loop of `train.py` with settings chosen
by the number of training examples or the paper's recipe exactly (`--recipe`), evaluation every
epoch with the best checkpoint kept in RUN/best/, and RUN/eval_results.json (its history read back from
metrics.jsonl, so a resumed run reports every epoch).
"""

import dataclasses
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
from .evaluate import check_length, evaluate_splits, predict_split
from ..inference.batches import pad_batch, row_lengths
from ..core.version import __version__
from ..core.io import check_output, read_json_lines, write_json, write_text_atomic
from ..training.options import add_training_arguments
from ..core.flags import add_revision_argument, count, positive
from ..core.hub import hub_origin, model_folder
from ..tasks import TASKS, add_family_arguments, check_family_options, family_options, make_family
from ..tasks.base import Split, TaskFamily
from ..inference.batches import padding
from ..text.tokenizer import BertTokenizer
from ..training.recipes import CHOSEN, DEFAULTS, EARLY_STOP, FINETUNE, RECIPES, Facts
from ..training.resume import ARGS_FILE, FINETUNE_FIXED, run_wall_seconds
from ..training.settings import EPOCH_RUN, FinetuneSettings, JobSettings

log = logging.getLogger("bertforge")
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


def finetune(task: str, model_dir, data, out, recipe: str = "adaptive", revision: str | None = None,
             **options) -> dict:
    """Fine-tune `model_dir` (a folder, or a Hub model's name at `revision`) on a task; writes RUN/best/,
    RUN/eval_results.json (and, where the family predicts a test split, its predictions by the best model) and
    returns the best metrics. `options`: FinetuneSettings fields (TrainArgs' among them; the lr, batch size,
    warm-up, weight decay, patience and epochs not given are the `recipe`'s) and the task family's options."""
    settings = FinetuneSettings.make(task=task, model=model_dir, data=data, out=out, recipe=recipe,
                                     revision=revision, **options)
    check_family_options(settings.family_options, "finetune")
    return fine_tune(settings)


def fine_tune(settings: FinetuneSettings) -> dict:
    """`finetune` from its settings, which the run completes (recipes.choose) and records (args.json)."""
    import torch  # here, not at the top: the command's --help does not load torch

    started = time.perf_counter()
    family = make_family(settings.task, settings.data, settings.max_length, settings.family(), reading=True)
    model_dir = model_folder(settings.model, settings.revision)
    check_length(family, load_config(str(model_dir)), model_dir)  # before the data is read
    given = dataclasses.replace(settings, model=str(model_dir), base_model=hub_origin(model_dir),
                                data=None if settings.data is None else str(settings.data),
                                max_length=family.max_length)
    resumed = given.resumed()
    tokenizer = BertTokenizer.from_pretrained(model_dir)
    splits = read_splits(family, tokenizer, settings.max_train_examples, settings.max_eval_examples)
    settings, choice = resumed.complete(Facts(examples=len(splits.train.examples)))
    say_choice(given, settings, choice.reasons() if resumed is given else
               f"the run being resumed ({resumed.out / ARGS_FILE})")
    torch.manual_seed(settings.seed)
    model = family.model_class.from_pretrained(model_dir, new_head=True, **family.head_config())
    model.config.extra.update(family.config_entries())
    return train_on_task(family, model, tokenizer, splits, splits.train.encoded, settings, started)


def say_choice(given: FinetuneSettings, settings: FinetuneSettings, why: str) -> None:
    """The settings the call left unsaid, in one line, and why they are what they are."""
    left = [k for k in given.chosen if getattr(given, k) is None]
    if left:
        log.info(f"fine-tuning with lr {settings.lr:g}, batch {settings.batch_size}, {settings.epochs:g} epochs, "
                 f"warm-up {settings.warmup:g}, weight decay {settings.weight_decay:g}"
                 + (f", patience {settings.patience}" if settings.patience else "")
                 + f" ({', '.join(left)} from {why})")


@dataclass
class TaskSplits:
    train: Split
    evaluated: list[Split]
    test: Split | None  # read when the family predicts it with the best model, so that its bad rows fail early


def read_splits(family: TaskFamily, tokenizer, max_train_examples=None, max_eval_examples=None) -> TaskSplits:
    return TaskSplits(family.read("train", tokenizer, max_train_examples),
                      [family.read(s, tokenizer, max_eval_examples) for s in family.eval_splits],
                      family.read("test", tokenizer) if family.predicts_test() else None)


def train_on_task(family: TaskFamily, model, tokenizer, splits: TaskSplits, encoded: dict,
                  settings: FinetuneSettings, started: float, batch_keys: dict | None = None,
                  loss_units: dict | None = None, teacher: dict | None = None) -> dict:
    """Train `model` on the rows `encoded` for `settings.epochs`, evaluating every epoch; the run folder as
    `finetune` describes it. `batch_keys` (key -> padding) are what the model reads beyond the family's, and
    `loss_units` its loss terms (see train.TrainingJob) where they are not the family's one loss; `teacher`: a
    distillation teacher's scores on the same splits, recorded beside the best epoch's with the share it keeps."""
    from ..training.run_folder import best_score
    from ..training.train import fit, setup_distributed

    ctx = setup_distributed(settings.device)
    out, batch_size, bf16 = settings.out, settings.batch_size, settings.bf16
    # the evaluation's bar sits under the training bar: on a terminal only (in a log it leaves cursor codes)
    progress = settings.progress and sys.stderr.isatty()

    def evaluate(m):
        return evaluate_splits(family, m, splits.evaluated, batch_size * 2, tokenizer.pad_token_id, bf16, progress)

    job = FinetuneJob(family, encoded, batch_size, settings.seed, evaluate, tokenizer, settings.group_by_length)
    job.keys.update(batch_keys or {})
    job.loss_units = loss_units or job.loss_units
    fit(model, job, settings.loop(max(1, round(settings.epochs * job.steps_per_epoch)), job.steps_per_epoch), ctx,
        started)
    if not ctx.main:
        return {}
    rows = [row for row in read_json_lines(out / "metrics.jsonl") if family.best_metric in row]
    history = [{k: v for k, v in row.items() if k not in LOG_KEYS} for row in rows]
    scores = [best_score(row, family.best_metric) for row in rows]
    best = history[scores.index(max(scores))] if history else {}  # where none can be best: the first epoch's
    results = {"task": settings.task, **best, "epoch_of_best": history.index(best) + 1 if history else None,
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
        write_text_atomic(out / "best" / "README.md", model_card(family, settings.record(), results))
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
    rule, early = FINETUNE, EARLY_STOP
    p.add_argument("--recipe", choices=RECIPES["finetune"], default="adaptive",
                   help="what --lr, --batch-size, --epochs, --warmup, --weight-decay and --patience not given are: "
                        "adaptive: "
                        f"the paper's recipe (lr 2e-5, batch 32, 3 epochs, warm-up 0.1, weight decay 0.01) at lr "
                        f"{rule['large_lr']:g} where it makes at least {rule['large_steps']} steps; transformers' "
                        f"Trainer's defaults (lr 5e-5, batch 8, 3 epochs, no warm-up or weight decay) where it makes "
                        f"{rule['min_steps']} to {rule['large_steps']}; below, batch {rule['small_batch']} at "
                        f"{rule['small_lr']:g} for the epochs {rule['min_steps']} steps take (at most "
                        f"{rule['max_epochs']}), stopping after {early['patience']} epochs without a better dev score "
                        f"where they are more than {early['after_epochs']}; paper: always the paper's, every epoch")
    add_task_run_arguments(p, DEFAULTS["finetune"], notes=dict.fromkeys((*CHOSEN, "epochs"),
                                                                        " (default: the --recipe's)"))


def add_task_run_arguments(p, defaults: dict, notes: dict | None = None):
    """The data, the run folder, the epochs and the training options: what training on a task takes beside the
    model it starts from (finetune, distill). A default of None is decided elsewhere, as `notes` say."""
    p.add_argument("--data", help="the task's data folder (or file); "
                                  "your own data: --train/--dev/--test or --dataset instead")
    add_run_arguments(p, defaults, "the task's, 128 to 384", notes)
    add_family_arguments(p)


def add_run_arguments(p, defaults: dict, length: str, notes: dict | None = None):
    """The run folder, the epochs, the lengths and counts of the data read, and the training options: what a run
    on examples takes (finetune, distill and distill embeddings); `length`: what --max-length defaults to."""
    p.add_argument("--out", required=True, help="run folder: best/, eval_results.json, metrics.jsonl")
    p.add_argument("--epochs", type=positive, help="passes over the training data" + (notes or {}).get("epochs", ""))
    p.add_argument("--max-length", type=count(3), help=f"tokens per input (default: {length})")
    p.add_argument("--max-train-examples", type=count(1), help="use only the first N training examples")
    p.add_argument("--max-eval-examples", type=count(1), help="evaluate on only the first N examples")
    p.add_argument("--no-length-grouping", action="store_true",
                   help="batches of a plain shuffle (default: batches of similar lengths, little padding)")
    add_training_arguments(p, defaults, skip=EPOCH_RUN, notes=notes)


def task_settings(settings_class: type[JobSettings], args, **fields) -> JobSettings:
    """A job's settings from the flags `add_run_arguments` (and, for a task, `add_task_run_arguments`) declare; a
    task's family options go to `JobSettings.make`, which keeps them as the settings' `family_options`."""
    family = family_options(args) if hasattr(args, "task") and args.task in TASKS else {}
    return settings_class.from_args(args, group_by_length=not args.no_length_grouping, **family, **fields)


def run_finetune(args) -> int:
    check_output(args.out, "--out", inputs=[p for p in (args.model, args.data) if p])
    results = fine_tune(task_settings(FinetuneSettings, args))
    print(json.dumps({k: v for k, v in results.items() if k != "history"}, indent=2))
    return 0
