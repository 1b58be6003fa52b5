"""Task distillation (`bertforge distill`): a small student learns what a teacher fine-tuned on the task answers.

The loss (Hinton et al., 2015) is the KL divergence from the teacher's softened distribution to the student's at
temperature T, times T^2 so that its gradients keep their size as T changes, weighted 1 - alpha, plus alpha times
the usual loss on the labels: per example (classification, multiple choice; a regressor: the squared error to the
teacher's score), per labelled token (token classification) or per window's start and end (question answering),
as soft_targets.py defines it for each head. The student learns on the training set and, for text
classification, on `--augment N` variants of each training input and on `--unlabelled` text (distill_data.py),
all labelled by the teacher, whose outputs are cached; for question answering `--augment N` varies the questions
(the paragraphs, so the answers' places, kept) and `--unlabelled` adds questions without answers, whose spans the
teacher gives.
`--representations` (text classification) adds general distillation's terms on the last layer (TinyBERT's
task-specific stage: the hidden states, MiniLMv2's self-attention relations, or both;
training/representation_loss.py), weighted `--representation-weight`: the teacher then runs beside the student on
every training batch.

The student starts from a size name (the size's layers and width with the teacher's vocabulary, position count
and token types; random weights, except its embeddings: the teacher's projected onto its width, unless it is wider
or `--student-embeddings random`), a checkpoint folder, `--student-layers`
(DistilBERT's start: the teacher's embeddings, the named layers, its pooler and head), or with `--prune` the
teacher cut to a size name (model/student.py: the layers, channels, heads and neurons it uses most on the data).
The run folder is the one `finetune` writes (best/, eval_results.json, metrics.jsonl): an ordinary fine-tuned
model for every other command; eval_results.json adds the teacher's scores on the same evaluation split
(`teacher`) and the share of the teacher's best-epoch figure the student keeps (`of_teacher`). `--resume` is
checked against it (training/resume.py's DISTILL_FIXED) before the teacher or the student is loaded or built.
"""

import argparse
import json
import sys
import time
from pathlib import Path

from ..model.architectures.config import SIZES
from ..core.errors import BertforgeError
from .evaluate import evaluate_splits
from .finetune import (
    EARLY_EPOCHS, PATIENCE, add_task_run_arguments, family_record, task_run_options,
    task_training_options, train_on_task
)
from ..core.io import check_output, read_json
from ..core.flags import add_revision_argument, count, positive, share
from ..core.hub import hub_origin, model_folder
from ..tasks import TASKS, make_family
from ..tasks.base import TaskFamily, head_name
from ..training.options import TrainArgs
from ..training.resume import DISTILL_FIXED, check_resume
from .soft_targets import (  # noqa: F401 (PER_EXAMPLE, soft_target_loss, rows, labelled_rows: distill's names too)
    PER_EXAMPLE, SOFT_TARGETS, labelled_rows, make_distiller, rows, soft_target_loss
)
from .distill_student import build_student, load_teacher, prune_sample, read_teacher
from .distill_recipe import (
    AUGMENT_ROWS, DISTILL_DEFAULTS, DISTILL_RECIPES, FIXED, MAX_AUTO_AUGMENT, MAX_EPOCHS, MIN_STEPS, RANDOM_LR,
    SMALL_AUGMENT, SMALL_STUDENT, TRAINED_LR, distill_epochs, distill_settings, encoder_share, matched_epochs,
    student_folder, student_start
)

# --representations: the terms of general distillation (training/representation_loss.py) each choice trains on
REPRESENTATIONS = {"hidden": ("hidden_loss",), "relations": ("relation_loss",),
                   "both": ("hidden_loss", "relation_loss")}
# --augment's bound: TinyBERT's augmentation makes 20 variants of each input; 64 leaves room to measure beyond it
# without a slip of the keyboard (10000) making 10,000 times the rows for the teacher to label
MAX_AUGMENT = 64
AUGMENT = count(0, MAX_AUGMENT)


def layer_list(text: str) -> list[int]:
    """--student-layers: comma-separated teacher layer numbers from 0, e.g. 0,2,4."""
    try:
        layers = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected layer numbers such as 0,2,4, not {text!r}") from None
    if any(i < 0 for i in layers) or len(set(layers)) != len(layers):
        raise argparse.ArgumentTypeError(f"expected distinct layer numbers from 0, not {text!r}")
    return layers


def distill(task: str, teacher_dir, student: str | None, data, out, temperature: float = 2.0, alpha: float = 0.5,
            augment: int | None = None, unlabelled: list | None = None, student_layers: list[int] | None = None,
            student_embeddings: str | None = None, prune: bool = False, prune_from=None,
            representations: str | None = None, representation_weight: float = 1.0, cache_dir=None,
            epochs: float | None = None,
            max_length: int | None = None, max_train_examples: int | None = None, max_eval_examples: int | None = None,
            group_by_length: bool = True, command: list[str] | None = None, arguments: dict | None = None,
            recipe: str = "adaptive", revision: str | None = None, **options) -> dict:
    """Distil `teacher_dir` (fine-tuned on the task: a folder, or a Hub model's name at `revision`) into a
    student; the run folder and the results are `finetune`'s. `options`: TrainArgs fields (defaults
    DISTILL_DEFAULTS) and the task family's options; the lr, `augment` and `epochs` not given are the `recipe`'s
    (`distill_settings`, `distill_epochs`), a resumed run's those its args.json records. `alpha` 1 trains on the
    labels alone, a distillation's control: the teacher's outputs are never computed, and the epochs make the steps
    the distillation would (`matched_epochs`)."""
    import torch

    started, prune = time.perf_counter(), prune or prune_from is not None
    check_distill_options(temperature, alpha, student, student_layers, representations, representation_weight, prune,
                          augment, recipe)
    targets = task_targets(task, alpha, augment, unlabelled, representations)
    train_options = task_training_options(options, DISTILL_DEFAULTS)
    family = make_family(task, data, max_length, options, reading=True)
    augment, epochs, began_why = resumed_choices(out, train_options, augment, epochs)
    teacher_dir = model_folder(teacher_dir, revision)
    run = {"task": task, "model": student if student_layers is None else
           f"{teacher_dir} layers {','.join(map(str, student_layers))}", "prune": prune,
           "prune_from": None if prune_from is None else str(prune_from), "teacher": str(teacher_dir),
           "base_model": hub_origin(teacher_dir),
           "data": None if data is None else str(data), "family_options": family_record(options),
           "student_embeddings": student_embeddings, "temperature": temperature, "alpha": alpha,
           "representations": representations, "representation_weight": representation_weight,
           "augment": augment, "unlabelled": [str(p) for p in unlabelled or []],
           "distill_rows": None, "teacher_outputs_cached": None, "epochs": epochs, "max_length": family.max_length,
           "max_train_examples": max_train_examples, "max_eval_examples": max_eval_examples,
           "group_by_length": group_by_length, "command": command, "arguments": arguments, "recipe": recipe,
           "chosen_by": None}
    check_resume(TrainArgs(out=Path(out), **{**train_options, "extra": run}), DISTILL_FIXED)
    tokenizer, splits, teacher = read_teacher(family, teacher_dir, max_train_examples, max_eval_examples)
    torch.manual_seed(train_options["seed"])
    cut_from = None if prune_from is None else load_teacher(  # a model of the task with the teacher's tokens, labels
        family, student_folder(str(prune_from), tokenizer, "--prune-from"), "--prune-from")
    model = build_student(student, student_layers, teacher, teacher_dir, tokenizer, family, student_embeddings,
                          prune_sample(splits.train.encoded, train_options["seed"]) if prune else None, cut_from)
    model.config.extra.update(family.config_entries())
    regression = family.model_class.__name__ == "BertForSequenceClassification" and teacher.config.num_labels == 1
    plan = dict(recipe=recipe, start=student_start(student, student_layers, prune), share=encoder_share(model, teacher),
                labels_only=alpha == 1, augmentable=bool(targets.text_inputs), augment=augment, epochs=epochs,
                began_why=began_why)
    encoded, cached, augment, epochs, why = distill_plan(family, splits.train, tokenizer, teacher, teacher_dir, plan,
                                                         unlabelled, regression, cache_dir, train_options)
    run.update(distill_rows=len(encoded["labelled"]), teacher_outputs_cached=cached, augment=augment, epochs=epochs,
               chosen_by=why or "given")
    teacher_scores = evaluate_splits(family, teacher, splits.evaluated, train_options["batch_size"] * 2,
                                     tokenizer.pad_token_id, train_options.get("bf16", False))
    trained, batch_keys, loss_units = trained_module(model, teacher, family, targets, temperature, alpha, regression,
                                                     representations, representation_weight)
    del teacher
    return report(family.best_metric, teacher_scores, train_on_task(
        family, trained, tokenizer, splits, encoded, out, train_options, run, started, batch_keys=batch_keys,
        loss_units=loss_units, teacher=teacher_scores))


def task_targets(task: str, alpha: float, augment: int | None, unlabelled, representations):
    """The task's soft targets (soft_targets.SOFT_TARGETS) once the options that need some are checked against it."""
    head = head_name(TASKS[task]) if task in TASKS else None
    if head not in SOFT_TARGETS and task in TASKS:
        raise BertforgeError(f"distill {task}: task distillation covers the heads of {', '.join(SOFT_TARGETS)}, "
                             f"not {head}")
    targets = SOFT_TARGETS.get(head, SOFT_TARGETS["BertForSequenceClassification"])  # own data: text classification
    for flag, given, allowed in (("--augment", augment, targets.text_inputs or targets.questions),
                                 ("--unlabelled", unlabelled, targets.text_inputs or targets.questions),
                                 ("--representations", representations, targets.text_inputs)):
        if given and not allowed:
            kinds = "text and text-pair" + (" and question-answering" if flag != "--representations" else "")
            raise BertforgeError(f"{flag}: only for {kinds} tasks, not {task}")
        if given and alpha == 1:
            raise BertforgeError(f"{flag} with --alpha 1: the labels alone are trained on; {flag} adds what only "
                                 "the teacher's outputs teach")
    return targets


def resumed_choices(out, train_options: dict, augment, epochs) -> tuple:
    """What a resumed run chose where this call leaves it unsaid (the lr and patience into `train_options`),
    the augment and epochs, and why it chose them (None unless resumed)."""
    record = Path(out) / "args.json"
    if not (train_options.get("resume") and record.is_file()):
        return augment, epochs, None
    began = read_json(record)
    for key in ("lr", "patience"):
        train_options[key] = began[key] if train_options[key] is None else train_options[key]
    return (began["extra"]["augment"] if augment is None else augment,
            began["extra"]["epochs"] if epochs is None else epochs, began["extra"].get("chosen_by"))


def distill_plan(family: TaskFamily, train, tokenizer, teacher, teacher_dir: Path, plan: dict, unlabelled,
                 regression: bool, cache_dir, train_options: dict) -> tuple:
    """The recipe's lr (into `train_options`) and variants, the rows the student learns from, and the epochs and
    patience those rows give (`plan`: the recipe, the student's start and share of the teacher, whether the task
    is augmentable, the labels alone, the augment and epochs given, why a resumed run began as it did): (rows,
    whether the teacher's outputs were cached, augment, epochs, why)."""
    from ..inference.batches import row_width
    from .distill_data import default_cache

    given = {"lr": train_options["lr"], "augment": plan["augment"]}

    def settings(augmentable: bool) -> tuple[dict, str]:
        return distill_settings(plan["recipe"], len(train.examples), plan["start"], augmentable, given, plan["share"])

    chosen, why = settings(plan["augmentable"])
    train_options["lr"], augment, epochs, compared = chosen["lr"], chosen["augment"], plan["epochs"], 0
    if plan["labels_only"]:  # no variants; `compared`: those of the distillation it is the control of
        (_, why), augment, compared = settings(False), 0, augment
    encoded, cached = distill_rows(family, train, tokenizer, teacher, teacher_dir, augment, unlabelled, regression,
                                   Path(cache_dir) if cache_dir else default_cache(), train_options,
                                   plan["labels_only"])
    if epochs is None or train_options["patience"] is None:
        sequences = sum(row_width({"input_ids": ids}) for ids in encoded["input_ids"])
        rows, batch = len(encoded["labelled"]), train_options["batch_size"]
        chosen_epochs, patience, epochs_why = (matched_epochs(plan["recipe"], rows, batch, compared, sequences)
                                               if plan["labels_only"] else
                                               distill_epochs(plan["recipe"], rows, batch, sequences))
        epochs = chosen_epochs if epochs is None else epochs
        train_options["patience"] = patience if train_options["patience"] is None else train_options["patience"]
        why = "; ".join(filter(None, (why, epochs_why)))
    why = why or plan["began_why"]
    what = "training on the labels alone" if plan["labels_only"] else "distilling"
    print(f"{what} at lr {train_options['lr']:g}, batch {train_options['batch_size']}, --augment {augment}, "
          f"{epochs:g} epochs" + (f", patience {train_options['patience']}" if train_options["patience"] else "")
          + (f" ({why})" if why else ""), file=sys.stderr)
    return encoded, cached, augment, epochs, why


def trained_module(model, teacher, family: TaskFamily, targets, temperature: float, alpha: float, regression: bool,
                   representations: str | None, representation_weight: float) -> tuple:
    """What the loop trains (the student, or the distiller around it), the batch keys it reads beyond the family's,
    and its loss terms' units; the student alone, its own loss, with --alpha 1."""
    from ..inference.batches import PerToken

    if alpha == 1:
        return model, None, None
    loss_units = {"distill_loss": targets.units, "label_loss": targets.label_units}
    matcher = None
    if representations:
        from ..training.representation_loss import RepresentationMatch

        matcher = RepresentationMatch(teacher.base_model, model.config.hidden_size, REPRESENTATIONS[representations])
        loss_units.update(dict.fromkeys(matcher.terms, real_tokens))
    batch_keys = {"teacher_logits": PerToken() if family.per_token_outputs else None, "labelled": None}
    return (make_distiller(model, temperature, alpha, regression, matcher, representation_weight), batch_keys,
            loss_units)


def report(metric: str, teacher_scores: dict, results: dict) -> dict:
    """The student's `results`, said beside the teacher's score."""
    if metric in results and metric in teacher_scores:
        kept = results.get("of_teacher")
        print(f"student {metric} {results[metric]:.4f}, teacher {teacher_scores[metric]:.4f}"
              + (f": the student keeps {kept:.1%}" if kept is not None else ""), file=sys.stderr)
    return results


def distill_rows(family: TaskFamily, train, tokenizer, teacher, teacher_dir: Path, augment: int, unlabelled,
                 regression: bool, cache: Path, train_options: dict, labels_only: bool = False) -> tuple[dict, bool]:
    """The rows the student learns from (the training split's, then the augmented and unlabelled ones), each with
    the teacher's outputs and whether it is labelled; and whether the teacher's outputs came from the cache.
    `labels_only`: the training split's rows alone, without the teacher's outputs (never computed)."""
    from ..inference.batches import row_lengths
    from .distill_data import augmented, read_unlabelled, read_unlabelled_questions, teacher_outputs

    questions = SOFT_TARGETS[family.model_class.__name__].questions
    extra = []  # (examples, whether the labels' loss reads them)
    if augment:
        print(f"--augment {augment}: {augment * len(train.examples):,} variants of the {len(train.examples):,} "
              "training examples", file=sys.stderr)
        # a question's variants keep its answer; a text's have the teacher's outputs alone
        extra.append((augmented(train.examples, augment, train_options["seed"]), questions))
    if unlabelled:
        extra.append((read_unlabelled_questions(unlabelled, family) if questions else
                      read_unlabelled(unlabelled, family, pairs=train.examples[0].text_b is not None), False))
    encoded = {k: list(v) for k, v in train.encoded.items()}
    labelled = [1] * len(encoded["input_ids"])
    if labels_only:
        return {**encoded, "labelled": labelled}, False
    for examples, has_labels in extra:  # an unlabelled row's labels are placeholders, never read
        more = family.encode("extra", examples, tokenizer).encoded
        added = len(more["input_ids"])  # rows: a question may make several windows
        for key in encoded:
            encoded[key] += more.get(key, [0.0 if regression else 0] * added)
        labelled += [int(has_labels)] * added
    logits, cached = teacher_outputs(teacher, teacher_dir, family, encoded, tokenizer.pad_token_id, cache,
                                     train_options["batch_size"] * 2, train_options.get("progress", True))
    print(f"teacher outputs of {len(logits)} rows {'read from' if cached else 'written to'} {cache}", file=sys.stderr)
    # per token: each row's own tokens of the [rows, longest, outputs] array (views of the cached file)
    encoded["teacher_logits"] = ([logits[i, :n] for i, n in enumerate(row_lengths(encoded))]
                                 if family.per_token_outputs else logits.tolist())
    encoded["labelled"] = labelled
    return encoded, cached


def real_tokens(batch: dict) -> int:
    return int(batch["attention_mask"].sum())


def check_distill_options(temperature: float, alpha: float, student, layers, representations=None,
                          representation_weight: float = 1.0, prune: bool = False, augment: int = 0,
                          recipe: str = "adaptive") -> None:
    """The checks the command line's types and choices make, for calls from Python."""
    if recipe not in DISTILL_RECIPES:
        raise BertforgeError(f"--recipe must be one of {', '.join(DISTILL_RECIPES)}, not {recipe!r}")
    try:
        if augment is not None:
            AUGMENT(str(augment))
    except argparse.ArgumentTypeError as e:
        raise BertforgeError(f"--augment {augment}: {e}") from None
    if not temperature > 0:
        raise BertforgeError(f"--temperature {temperature}: must be above 0")
    if not 0 <= alpha <= 1:
        raise BertforgeError(f"--alpha {alpha}: must be between 0 and 1")
    if representations is not None and representations not in REPRESENTATIONS:
        raise BertforgeError(f"--representations {representations}: expected one of {', '.join(REPRESENTATIONS)}")
    if not representation_weight > 0:
        raise BertforgeError(f"--representation-weight {representation_weight}: must be above 0")
    if student is None and layers is None:
        raise BertforgeError("distill needs --student (a size or a folder) or --student-layers")
    if prune and student not in SIZES:
        raise BertforgeError(f"--prune: --student {student} is not a size ({', '.join(SIZES)}) to cut the teacher to")


def add_distill_arguments(p):
    p.add_argument("task", help=f"one of {', '.join(t for t, f in TASKS.items() if head_name(f) in SOFT_TARGETS)} "
                   "(a sentence-embedding student: `bertforge distill embeddings --help`)")
    p.add_argument("--teacher", required=True, help="a model fine-tuned on the task (bertforge's or transformers' "
                   "folder, or a Hub model's name, org/name)")
    add_revision_argument(p, "--teacher")
    p.add_argument("--student", help=f"the student: a size ({', '.join(SIZES)}: its layers and width, random "
                   "weights, and the teacher's vocabulary, position count and token types, so that it reads what "
                   "the teacher reads) or a checkpoint folder (or a Hub model's name) with the teacher's vocabulary "
                   "(default with --student-layers: the teacher's layers)")
    p.add_argument("--student-layers", type=layer_list, metavar="I,J,...",
                   help="start from these layers of the teacher (from 0), its embeddings, pooler and head")
    p.add_argument("--student-embeddings", choices=("teacher", "random"),
                   help="a student of a size name starts with the teacher's embeddings projected onto its width "
                        "(leading principal directions: +2 points on SST-2 for BERT-Mini), or random ones (default: "
                        "the teacher's, unless the student is wider)")
    p.add_argument("--prune", action="store_true",
                   help="the student of the size --student names starts as the teacher cut to that size: its layers "
                        "evenly spaced (or --student-layers), in each the hidden channels, attention heads (the "
                        "teacher's head size) and feed-forward neurons most active on the training data")
    p.add_argument("--prune-from", metavar="MODEL",
                   help="--prune, cutting this model of the task (a folder or a Hub model's name) instead of the "
                        "teacher: a larger student distilled before, to cut a much narrower student in steps "
                        "(measured: docs/distillation.md)")
    p.add_argument("--temperature", type=positive, default=2.0, help="softens both distributions")
    p.add_argument("--alpha", type=share, default=0.5, help="weight of the loss on the labels (1 - alpha: on the "
                   "teacher's outputs)")
    p.add_argument("--representations", choices=tuple(REPRESENTATIONS),
                   help="text and text-pair tasks: also learn the teacher's last hidden states, its self-attention "
                        "relations, or both, as pretrain --objective distill does (the teacher runs on every batch; "
                        "default: outputs only)")
    p.add_argument("--representation-weight", type=positive, default=1.0, metavar="W",
                   help="weight of the --representations terms (default: 1)")
    p.add_argument("--augment", type=AUGMENT, metavar="N",
                   help="text and text-pair tasks: N variants of each training input (words masked, replaced, cut to "
                        f"n-grams), teacher-labelled: N + 1 times the training rows (at most {MAX_AUGMENT}; TinyBERT "
                        "makes 20); question answering: N variants of each question, the paragraph and answer kept "
                        "(default: the --recipe's; none for questions)")
    p.add_argument("--unlabelled", nargs="+", type=Path, metavar="FILE",
                   help="text and text-pair tasks: text the teacher labels, a text (or a tab-separated pair) a line, "
                        "or a table with the task's text columns; question answering: questions on paragraphs, a "
                        "SQuAD file (its answers not read) or a table with the question and context columns, whose "
                        "spans the teacher gives")
    p.add_argument("--cache-dir", type=Path, help="where the teacher's outputs are kept (default: "
                   "$BERTFORGE_CACHE/teacher-outputs, or ~/.cache/bertforge/teacher-outputs)")
    p.add_argument("--recipe", choices=DISTILL_RECIPES, default="adaptive",
                   help=f"what --lr, --epochs and --augment not given are: adaptive: lr {TRAINED_LR:g} for a student "
                        f"that starts trained (--prune, --prune-from, --student-layers, a folder), {RANDOM_LR:g} for "
                        f"random layers; text and pair tasks under {AUGMENT_ROWS:,} examples get teacher-labelled "
                        f"variants of each (at most {MAX_AUTO_AUGMENT}) to make about {AUGMENT_ROWS:,} rows, and a "
                        f"student of at most {SMALL_STUDENT * 100:g}%% of the teacher's encoder at least "
                        f"{SMALL_AUGMENT}; the epochs that make {MIN_STEPS:,} steps (at most {MAX_EPOCHS}), "
                        f"stopping after {PATIENCE} epochs without a better dev score where they are more than "
                        f"{EARLY_EPOCHS}; fixed: lr {FIXED['lr']:g}, {FIXED['epochs']:g} epochs, no variants")
    add_task_run_arguments(p, DISTILL_DEFAULTS, None,
                           notes=dict.fromkeys(("lr", "epochs", "patience"), " (default: the --recipe's)"))


def run_distill(args) -> int:
    check_output(args.out, "--out", inputs=[p for p in (args.teacher, args.student, args.data) if p])
    results = distill(args.task, args.teacher, args.student, args.data, args.out, temperature=args.temperature,
                      alpha=args.alpha, augment=args.augment, unlabelled=args.unlabelled,
                      student_layers=args.student_layers, student_embeddings=args.student_embeddings, prune=args.prune,
                      prune_from=args.prune_from,
                      representations=args.representations, representation_weight=args.representation_weight,
                      cache_dir=args.cache_dir, recipe=args.recipe, revision=args.revision, **task_run_options(args))
    print(json.dumps({k: v for k, v in results.items() if k != "history"}, indent=2))
    return 0
