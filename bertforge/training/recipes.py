"""Every training job's defaults and recipes in one place, and `choose`: the one function that completes a run's
settings.

A job's settings (settings.py) are what the user gave over the job's `DEFAULTS`; what they leave unsaid (None), a
recipe chooses from what is known of the run (`Facts`: the training examples, the rows a student learns from, the
student's start and share of its teacher, the model's width, the hardware), with the reason for each choice in
words. A setting given always wins. Nothing here reads a file or asks a device: the callers bring the facts, so
the same facts always give the same settings.
"""

import math
from dataclasses import dataclass, field

from ..core.errors import BertforgeError

# --- the table: what each job runs with where neither the user nor the recipe says otherwise (TrainArgs fields;
# None: the recipe's). Fine-tuning's step checkpoints (with the optimizer state, three times the model's size)
# serve --resume only: one at a time, removed when the run completes unless --keep-checkpoints.
FINETUNE_DEFAULTS = dict(seed=42, adam_eps=1e-6, log_every=10, save_every=0, keep=1, keep_checkpoints=False)
PAPER = dict(lr=2e-5, batch_size=32, epochs=3.0, warmup=0.1, weight_decay=0.01, patience=0)  # spec section 7
CHOSEN = ("lr", "batch_size", "warmup", "weight_decay", "patience")  # the training options a fine-tuning recipe
# sets, beside the epochs
DEFAULTS = {
    # pre-training: the recipe's (PRETRAIN; at most PRETRAIN_STEPS steps, or as many as a time budget allows)
    "pretrain": dict(log_every=10, eval_every=200, save_every=500, **dict.fromkeys(("steps", "batch_size", "lr",
                                                                                "warmup", "schedule", "bf16"))),
    "finetune": {**FINETUNE_DEFAULTS, **dict.fromkeys(CHOSEN)},
    "distill": {**FINETUNE_DEFAULTS, **{k: PAPER[k] for k in CHOSEN}, "lr": None, "patience": None},
    "embeddings": {**FINETUNE_DEFAULTS, **{k: PAPER[k] for k in CHOSEN}, "lr": None, "patience": 0},
}

# --- the recipes. Fine-tuning, `--recipe adaptive` (the default), by the optimizer steps the paper's recipe would
# make (all-MiniLM-L6-v2 on SST-2, 3 seeds at each size; BENCHMARKS.md, "Fine-tuning defaults"): under min_steps
# (fewer than 3,200 examples), batches of small_batch at small_lr for the epochs that min_steps take (at most
# max_epochs): the paper's 48 steps on 500 examples leave SST-2 at chance; under large_steps, transformers'
# Trainer's defaults (TRAINER), 3.3 points above the paper's recipe and 1.3 above the small-data one at 4,000
# examples; from large_steps on (16,000 examples), the paper's recipe at large_lr, the top rate of the paper's own
# grid: above the paper's 2e-5 and level with Trainer's defaults at 16,000 examples, in a quarter of Trainer's steps.
FINETUNE = dict(min_steps=300, small_batch=16, small_lr=1e-4, max_epochs=20, large_steps=1500, large_lr=5e-5)
TRAINER = dict(lr=5e-5, batch_size=8, epochs=3.0, warmup=0.0, weight_decay=0.0, patience=0)
# Where an adaptive recipe runs more than `after_epochs` epochs, it stops after `patience` epochs without a better
# dev score, the best epoch kept (180 rows of one's own data: best at epoch 3 of 20; BENCHMARKS.md, "Early stopping").
EARLY_STOP = dict(after_epochs=5, patience=3)
# Distillation, `--recipe adaptive` (BENCHMARKS.md, "Distillation defaults at every size"): the rate trained_lr for
# a student that starts with trained layers (cut from the teacher, --prune-from, --student-layers, a checkpoint
# folder), random_lr for random layers (far above fine-tuning's 2e-5); for text and pair tasks with fewer than
# augment_rows examples, teacher-labelled variants of each (at most max_auto_augment; TinyBERT made 20) so that an
# epoch reads about augment_rows rows: a few thousand examples give the student too little of what the teacher
# answers; at any size, at least small_augment variants for a student of at most small_student of the teacher's
# encoder parameters (BERT-Tiny cut from all-MiniLM-L6-v2 is 4%: on SST-2's 67,349 examples +1.0 at the defaults);
# and the epochs that make at least min_steps optimizer steps over all the rows (at most max_epochs), a step over
# rows of k choices counting k. `--recipe fixed`: the earlier defaults, FIXED.
DISTILL = dict(trained_lr=1e-4, random_lr=3e-4, augment_rows=20_000, max_auto_augment=20, small_student=1 / 8,
               small_augment=4, min_steps=4_000, max_epochs=30)
FIXED = dict(lr=DISTILL["random_lr"], epochs=PAPER["epochs"], augment=0, patience=0)
EMBEDDING_EPOCHS = 3.0  # sentence-embedding distillation: passes over the texts (every text teaches; no stopping)
# Pre-training (spec section 6, and what the budget literature converges on: Cramming, MosaicBERT, Izsak et al.;
# BENCHMARKS.md, "A budget recipe"): the budget peak rate by hidden size, (largest width, rate), measured at batch
# 16: BERT-Tiny (128) is best at 2e-3; BERT-Mini (256) learns nothing but token frequencies at 2e-3 and 1e-3 and
# learns at 5e-4. Wider models get Mini's rate, the highest measured to work for them. NATIVE: bf16 autocast where
# the device computes it in hardware. None: what the data and the model config hold (objective, masking, dropout).
BUDGET_LR = ((128, 2e-3), (None, 5e-4))
NATIVE = "where native"
PRETRAIN = {
    "paper": {"objective": None, "mask_prob": None, "dropout": None, "lr": 1e-4, "schedule": "linear",
              "warmup": 0.05, "batch_size": 64, "output_bias": "zero", "bf16": False},
    "budget": {"objective": "mlm", "mask_prob": 0.3, "dropout": 0.0, "lr": BUDGET_LR, "schedule": "one-cycle",
               "warmup": 0.1, "batch_size": 16, "output_bias": "unigram", "bf16": NATIVE},
}
PRETRAIN_STEPS, UNTIL_BUDGET = 1000, 10**12  # a run's steps where --steps is not given: a CPU's size, or as many as
# --time-budget allows
RECIPES = {"pretrain": tuple(PRETRAIN), "finetune": ("adaptive", "paper"), "distill": ("adaptive", "fixed"),
           "embeddings": ("adaptive",)}  # each job's recipes, its default first (pre-training's: paper)


@dataclass(frozen=True)
class Facts:
    """What a recipe may know of a run; each job brings those it has."""

    examples: int = 0  # training examples (fine-tuning, distillation)
    rows: int | None = None  # the rows a student learns from, once made (distillation; None: not yet made)
    sequences: int | None = None  # the sequences those rows hold (a multiple-choice row: one a choice)
    start: str = "checkpoint"  # a student's start: cut, layers, random or checkpoint (distill_student.student_start)
    share: float = 1.0  # the student's encoder parameters over the teacher's
    augmentable: bool = False  # a text or pair task: its inputs have variants
    labels_only: bool = False  # distill --alpha 1: the labels alone, a distillation's control
    hidden_size: int = 0  # pre-training: the model's width
    native_bf16: bool = False  # the device computes bf16 in hardware
    time_budget: float = 0.0  # pre-training: seconds of training that end the run (0: its steps do)


@dataclass
class Choice:
    """The settings, given and chosen, and why each chosen one was (in the order of `given`)."""

    settings: dict
    why: dict = field(default_factory=dict)

    def reasons(self) -> str:
        return "; ".join(dict.fromkeys(r for r in self.why.values() if r))


def choose(job: str, recipe: str, given: dict, facts: Facts) -> Choice:
    """`given` (None: unsaid) completed by `job`'s `recipe` for a run of these `facts`: every key of `given` that
    the recipe sets and the facts decide (a distillation's epochs wait for its rows), with the reason for each."""
    if recipe not in RECIPES[job]:
        raise BertforgeError(f"--recipe must be one of {', '.join(RECIPES[job])}, not {recipe!r}")
    chosen, why = CHOOSERS[job](recipe, given, facts)
    unsaid = [k for k, v in given.items() if v is None and k in chosen]
    return Choice({**given, **{k: chosen[k] for k in unsaid}}, {k: why[k] for k in unsaid if why.get(k)})


def early_stop(epochs: float) -> int:
    """The patience (epochs without a better dev score) of an adaptive recipe that runs `epochs`: 0, never, for a
    few epochs."""
    return EARLY_STOP["patience"] if epochs > EARLY_STOP["after_epochs"] else 0


def early_stop_why(patience: int) -> str:
    return f", stopping after {patience} without a better dev score" if patience else ""


def finetune_recipe(recipe: str, given: dict, facts: Facts) -> tuple[dict, dict]:
    settings, why = finetune_settings(recipe, facts.examples, given.get("patience"))
    return settings, dict.fromkeys(settings, why)


def finetune_settings(recipe: str, examples: int, patience: int | None = None) -> tuple[dict, str]:
    """The lr, batch size, epochs, warm-up, weight decay and patience (unless given) of a fine-tuning `recipe` for
    this many training examples, and why."""
    paper_steps = PAPER["epochs"] * math.ceil(examples / PAPER["batch_size"])
    if recipe == "paper":
        return dict(PAPER), "the paper's recipe (--recipe paper)"
    rule = FINETUNE
    if paper_steps >= rule["large_steps"]:
        return {**PAPER, "lr": rule["large_lr"]}, (
            f"{examples} training examples: the paper's recipe ({paper_steps:g} steps) at lr {rule['large_lr']:g}, "
            f"the top of the paper's grid; --recipe paper keeps {PAPER['lr']:g}")
    if paper_steps >= rule["min_steps"]:
        return dict(TRAINER), (f"{examples} training examples: the paper's recipe would make {paper_steps:g} steps "
                               f"(under {rule['large_steps']}), so transformers' Trainer's defaults (no warm-up, no "
                               f"weight decay); --recipe paper keeps the paper's")
    epochs = min(rule["max_epochs"], math.ceil(rule["min_steps"] / math.ceil(examples / rule["small_batch"])))
    patience = early_stop(epochs) if patience is None else patience
    return ({**PAPER, "lr": rule["small_lr"], "batch_size": rule["small_batch"], "epochs": float(epochs),
             "patience": patience},
            f"{examples} training examples: the paper's recipe would make {paper_steps:g} steps, so batches of "
            f"{rule['small_batch']} at {rule['small_lr']:g} for {epochs} epochs (at least {rule['min_steps']} "
            f"steps, at most {rule['max_epochs']} epochs{early_stop_why(patience)}; --recipe paper keeps the "
            "paper's)")


def start_lr(start: str) -> float:
    """A distillation's rate for a student of this start (distill_student.student_start)."""
    return DISTILL["random_lr"] if start == "random" else DISTILL["trained_lr"]


def lr_why(start: str) -> str:
    return f"lr {start_lr(start):g}: a student {'of random layers' if start == 'random' else 'that starts trained'}"


def distill_recipe(recipe: str, given: dict, facts: Facts) -> tuple[dict, dict]:
    """A task distillation's lr and variants (augment) by the start, the student's share and the examples; once the
    rows are made (`facts.rows`), the epochs and patience. The labels alone (`facts.labels_only`) get no variants
    and the epochs that make the steps the distillation they are the control of would make over its variants."""
    if recipe == "fixed":
        return dict(FIXED), dict.fromkeys(FIXED, "--recipe fixed")
    settings, why = {"lr": start_lr(facts.start)}, {"lr": lr_why(facts.start)}
    distilled = given.get("augment")
    if distilled is None and facts.augmentable:
        distilled, why["augment"] = variants(facts.examples, facts.share)
    settings["augment"] = 0 if facts.labels_only else distilled or 0
    if facts.rows is not None:
        stop = given.get("patience")
        epochs, patience, why["epochs"] = (matched_epochs(facts.rows, given["batch_size"], distilled or 0,
                                                          facts.sequences, stop) if facts.labels_only else
                                           distill_epochs(facts.rows, given["batch_size"], facts.sequences, stop))
        settings.update(epochs=epochs, patience=patience)
        why["patience"] = why["epochs"]
    if facts.labels_only:
        why.pop("augment", None)
    return settings, why


def variants(examples: int, share: float) -> tuple[int, str | None]:
    """The teacher-labelled variants of each example the adaptive recipe makes for a text or pair task, and why."""
    rule = DISTILL
    to_rows = min(rule["max_auto_augment"], math.ceil(rule["augment_rows"] / examples) - 1)
    augment = max(to_rows, rule["small_augment"] if share <= rule["small_student"] else 0)
    if augment > to_rows:
        return augment, f"--augment {augment}: a student of {share:.0%} of the teacher's encoder"
    return augment, (f"--augment {augment}: {examples:,} training examples, under {rule['augment_rows']:,}"
                     if augment else None)


def distill_epochs(row_count: int, batch_size: int, sequences: int | None = None,
                   patience: int | None = None) -> tuple[float, int, str]:
    """The adaptive recipe's epochs and patience (0: none; unless given) for `row_count` rows (the examples, their
    variants, unlabelled text) at `batch_size`, and why. `sequences`: the sequences the rows hold (a multiple-choice
    row has one per choice; default: one a row): the step floor counts a step over rows of k sequences as k."""
    rule = DISTILL
    per_epoch = math.ceil(row_count / batch_size)
    width = (sequences or row_count) / row_count
    epochs = max(1, min(rule["max_epochs"], math.ceil(rule["min_steps"] / (per_epoch * width))))
    patience = early_stop(epochs) if patience is None else patience
    rows = f"{row_count:,} rows" + (f" of {width:.3g} choices each" if width != 1 else "")
    floor = f"{rule['min_steps']:,}" + (", a step over rows of k choices counting k" if width != 1 else "")
    return float(epochs), patience, (f"{epochs} epochs: {epochs * per_epoch:,} steps over {rows} (at least {floor}, "
                                     f"at most {rule['max_epochs']} epochs{early_stop_why(patience)})")


def matched_epochs(row_count: int, batch_size: int, augment: int, sequences: int | None = None,
                   patience: int | None = None) -> tuple[float, int, str]:
    """--alpha 1, the labels alone (a distillation's control): the epochs over `row_count` rows that make the
    steps the distillation would make over them and their `augment` variants each (its epochs by
    `distill_epochs`), the patience those epochs give (unless given), and why."""
    rows = row_count * (1 + augment)
    epochs, _, _ = distill_epochs(rows, batch_size, sequences and sequences * (1 + augment))
    steps = round(epochs * math.ceil(rows / batch_size))
    matched = steps / math.ceil(row_count / batch_size)
    patience = early_stop(matched) if patience is None else patience
    return matched, patience, (f"{matched:g} epochs: the {steps:,} steps a distillation with --augment {augment} "
                               f"makes over {rows:,} rows{early_stop_why(patience)}")


def embeddings_recipe(recipe: str, given: dict, facts: Facts) -> tuple[dict, dict]:
    """Sentence-embedding distillation: task distillation's rate for the student's start, EMBEDDING_EPOCHS."""
    return ({"lr": start_lr(facts.start), "epochs": EMBEDDING_EPOCHS},
            {"lr": lr_why(facts.start), "epochs": f"{EMBEDDING_EPOCHS:g} epochs over the texts"})


def pretrain_recipe(recipe: str, given: dict, facts: Facts) -> tuple[dict, dict]:
    """A pre-training recipe's settings: its table's, the budget rate by the model's width, bf16 where native."""
    settings = {**PRETRAIN[recipe], "steps": PRETRAIN_STEPS if not facts.time_budget else UNTIL_BUDGET}
    why = dict.fromkeys(settings, f"--recipe {recipe}")
    why["steps"] = f"{settings['steps']} steps" if not facts.time_budget else "until the time budget is spent"
    if settings["lr"] is BUDGET_LR:
        settings["lr"] = next(lr for width, lr in BUDGET_LR if width is None or facts.hidden_size <= width)
        why["lr"] = f"--recipe {recipe}: hidden size {facts.hidden_size}"
    if settings["bf16"] == NATIVE:
        settings["bf16"] = facts.native_bf16
        why["bf16"] = f"--recipe {recipe}: bf16 {'in' if facts.native_bf16 else 'not in'} the device's hardware"
    return settings, why


CHOOSERS = {"pretrain": pretrain_recipe, "finetune": finetune_recipe, "distill": distill_recipe,
            "embeddings": embeddings_recipe}
