"""What a task or embedding distillation starts from and how long it trains: the student's start (a size's random
layers, the teacher cut, the teacher's layers, a checkpoint folder) and `--recipe`, the settings chosen for what the
command line leaves unsaid (the rate, teacher-labelled variants, the epochs), by that start and the data's size."""

import math
from pathlib import Path

from ..core.errors import BertforgeError
from ..core.hub import model_folder
from ..model.architectures.config import SIZES
from ..text.tokenizer import BertTokenizer
from .finetune import CHOSEN, FINETUNE_DEFAULTS, PAPER, early_stop, early_stop_why

# `--recipe adaptive` (the default) sets what --lr, --epochs and --augment leave unsaid, by the student's start and
# the training examples (BENCHMARKS.md, "Distillation defaults at every size"): the rate TRAINED_LR for a start
# that holds trained layers (cut from the teacher, --prune-from, --student-layers, a checkpoint folder; SST-2's cut
# BERT-Mini), RANDOM_LR for random layers (far above fine-tuning's 2e-5: the students from random weights); for text
# and pair tasks with fewer than AUGMENT_ROWS examples, teacher-labelled variants of each (at most MAX_AUTO_AUGMENT;
# TinyBERT made 20) so that an epoch reads about AUGMENT_ROWS rows: a few thousand examples give the student too
# little of what the teacher answers; at any size, at least SMALL_AUGMENT variants for a student of at most
# SMALL_STUDENT of the teacher's encoder parameters (BERT-Tiny cut from all-MiniLM-L6-v2 is 4%, BERT-Mini 30%): a
# student that small learns from the teacher's answers on more text than the task has (SST-2's 67,349 examples:
# +1.9 for the Tiny at lr 3e-4 and 2 epochs, +1.0 at the defaults; TinyBERT augmented every task for its 4-layer
# student); and the epochs that make at least MIN_STEPS optimizer steps over all the rows (at most MAX_EPOCHS),
# stopping after finetune.PATIENCE epochs without a better dev score where they are more than a few (180 rows of
# one's own data: the Tiny student best at epoch 3 of 30; BENCHMARKS.md, "Early stopping").
# `--recipe fixed`: the earlier defaults, FIXED.
DISTILL_RECIPES = ("adaptive", "fixed")
TRAINED_LR, RANDOM_LR = 1e-4, 3e-4
AUGMENT_ROWS, MAX_AUTO_AUGMENT = 20_000, 20
SMALL_STUDENT, SMALL_AUGMENT = 1 / 8, 4
MIN_STEPS, MAX_EPOCHS = 4_000, 30
FIXED = dict(lr=RANDOM_LR, epochs=PAPER["epochs"], augment=0, patience=0)
DISTILL_DEFAULTS = {**FINETUNE_DEFAULTS, **{k: PAPER[k] for k in CHOSEN}, "lr": None, "patience": None}


def student_folder(spec: str, teacher_tokenizer, flag: str = "--student") -> Path:
    """A student checkpoint folder, or a Hub model's (or the model --prune-from names), which must read the
    teacher's tokens."""
    try:
        folder = model_folder(spec)
    except BertforgeError as e:
        size = f"not a size ({', '.join(SIZES)}); " if flag == "--student" else ""
        raise BertforgeError(f"{flag} {spec}: {size}{str(e).removeprefix(f'{spec}: ')}") from None
    if not (folder / "config.json").is_file():
        raise BertforgeError(f"{flag} {spec}: " + (f"neither a size ({', '.join(SIZES)}) nor a model folder"
                                                   if flag == "--student" else "not a model folder"))
    student = BertTokenizer.from_pretrained(folder)
    if student.get_vocab() != teacher_tokenizer.get_vocab():
        raise BertforgeError(f"{flag} {spec}: its vocabulary ({student.vocab_size} tokens) is not the "
                             f"teacher's ({teacher_tokenizer.vocab_size}): the student must read the same tokens")
    return folder


def student_start(student: str | None, layers: list[int] | None, prune: bool) -> str:
    """What the student starts from: "cut" (from the teacher or --prune-from), "layers" (the teacher's), "random"
    (a size's random layers), "checkpoint" (a model folder)."""
    return "cut" if prune else "layers" if layers is not None else "random" if student in SIZES else "checkpoint"


def start_lr(start: str) -> float:
    return RANDOM_LR if start == "random" else TRAINED_LR


def encoder_share(student, teacher) -> float:
    """The student's encoder parameters (its layers: not the embeddings, nor the head) over the teacher's."""
    def encoder(model):
        return sum(p.numel() for name, p in model.base_model.named_parameters() if not name.startswith("embeddings."))

    return encoder(student) / encoder(teacher)


def distill_settings(recipe: str, examples: int, start: str, augmentable: bool, given: dict,
                     share: float) -> tuple[dict, str]:
    """`given` (lr, augment: None where unsaid) completed by `recipe` for this many training examples, this start
    and a student of this `share` of the teacher's encoder (`encoder_share`), and why, in words; the epochs follow
    from the rows (`distill_epochs`)."""
    if recipe == "fixed":
        return {k: FIXED[k] if given[k] is None else given[k] for k in given}, "--recipe fixed"
    why = []
    lr, augment = given["lr"], given["augment"]
    if lr is None:
        lr = start_lr(start)
        why.append(f"lr {lr:g}: a student {'of random layers' if start == 'random' else 'that starts trained'}")
    if augment is None and not augmentable:
        augment = 0
    elif augment is None:
        to_rows = min(MAX_AUTO_AUGMENT, math.ceil(AUGMENT_ROWS / examples) - 1)
        augment = max(to_rows, SMALL_AUGMENT if share <= SMALL_STUDENT else 0)
        if augment > to_rows:
            why.append(f"--augment {augment}: a student of {share:.0%} of the teacher's encoder")
        elif augment:
            why.append(f"--augment {augment}: {examples:,} training examples, under {AUGMENT_ROWS:,}")
    return {"lr": lr, "augment": augment}, "; ".join(why)


def distill_epochs(recipe: str, row_count: int, batch_size: int,
                   sequences: int | None = None) -> tuple[float, int, str]:
    """The epochs and the patience (0: none) `recipe` gives for `row_count` rows (the examples, their variants,
    unlabelled text) at `batch_size`, and why. `sequences`: the sequences the rows hold (a multiple-choice row has
    one per choice; default: one a row): the step floor counts a step over rows of k sequences as k steps."""
    if recipe == "fixed":
        return FIXED["epochs"], FIXED["patience"], "--recipe fixed"
    per_epoch = math.ceil(row_count / batch_size)
    width = (sequences or row_count) / row_count
    epochs = max(1, min(MAX_EPOCHS, math.ceil(MIN_STEPS / (per_epoch * width))))
    patience = early_stop(epochs)
    rows = f"{row_count:,} rows" + (f" of {width:.3g} choices each" if width != 1 else "")
    floor = f"{MIN_STEPS:,}" + (", a step over rows of k choices counting k" if width != 1 else "")
    return float(epochs), patience, (f"{epochs} epochs: {epochs * per_epoch:,} steps over {rows} (at least {floor}, "
                                     f"at most {MAX_EPOCHS} epochs{early_stop_why(patience)})")


def matched_epochs(recipe: str, row_count: int, batch_size: int, augment: int,
                   sequences: int | None = None) -> tuple[float, int, str]:
    """--alpha 1, the labels alone (a distillation's control): the epochs over `row_count` rows that make the
    steps the distillation would make over them and their `augment` variants each (its epochs by
    `distill_epochs`), the patience those epochs give, and why."""
    rows = row_count * (1 + augment)
    epochs, _, _ = distill_epochs(recipe, rows, batch_size, sequences and sequences * (1 + augment))
    steps = round(epochs * math.ceil(rows / batch_size))
    matched = steps / math.ceil(row_count / batch_size)
    patience = early_stop(matched)
    return matched, patience, (f"{matched:g} epochs: the {steps:,} steps a distillation with --augment {augment} "
                               f"makes over {rows:,} rows{early_stop_why(patience)}")
