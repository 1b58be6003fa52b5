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
import dataclasses
import json
import sys
import time
from pathlib import Path

from ..model.architectures.config import SIZES
from ..core.errors import BertforgeError
from .evaluate import evaluate_splits
from .finetune import add_task_run_arguments, task_settings, train_on_task
from ..core.io import check_output
from ..core.flags import add_revision_argument, count, positive, share
from ..core.hub import hub_origin, model_folder
from ..tasks import TASKS, check_family_options, make_family
from ..tasks.base import TaskFamily, head_name
from ..training.recipes import DEFAULTS, DISTILL, EARLY_STOP, FIXED, RECIPES, Facts
from ..training.settings import DistillSettings
from .soft_targets import (  # noqa: F401 (PER_EXAMPLE, soft_target_loss, rows, labelled_rows: distill's names too)
    PER_EXAMPLE, SOFT_TARGETS, labelled_rows, make_distiller, rows, soft_target_loss
)
from .distill_student import (
    build_student, encoder_share, load_teacher, prune_sample, read_teacher, student_folder, student_start
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


def distill(task: str, teacher_dir, student: str | None, data, out, **options) -> dict:
    """Distil `teacher_dir` (fine-tuned on the task: a folder, or a Hub model's name at `revision`) into a
    student; the run folder and the results are `finetune`'s. `options`: DistillSettings fields (TrainArgs'
    among them; the lr, `augment`, `epochs` and `patience` not given are the `recipe`'s, a resumed run's those its
    args.json records) and the task family's options. `alpha` 1 trains on the labels alone, a distillation's
    control: the teacher's outputs are never computed, and the epochs make the steps the distillation would."""
    settings = DistillSettings.make(task=task, teacher=teacher_dir, model=student, data=data, out=out, **options)
    check_family_options(settings.family_options, "distill")
    return distil(settings)


def distil(settings: DistillSettings) -> dict:
    """`distill` from its settings, which the run completes (recipes.choose) and records (args.json)."""
    import torch

    started = time.perf_counter()
    check_distill_options(settings)
    targets = task_targets(settings)
    family = make_family(settings.task, settings.data, settings.max_length, settings.family(), reading=True)
    teacher_dir = model_folder(settings.teacher, settings.revision)
    s = dataclasses.replace(
        settings, teacher=str(teacher_dir), base_model=hub_origin(teacher_dir), max_length=family.max_length,
        data=None if settings.data is None else str(settings.data), prune=settings.prune or bool(settings.prune_from),
        prune_from=settings.prune_from and str(settings.prune_from),
        unlabelled=list(map(str, settings.unlabelled or [])),
    ).resumed()
    tokenizer, splits, teacher = read_teacher(family, teacher_dir, s.max_train_examples, s.max_eval_examples)
    torch.manual_seed(s.seed)
    cut_from = None if s.prune_from is None else load_teacher(  # a model of the task with the teacher's tokens
        family, student_folder(s.prune_from, tokenizer, "--prune-from"), "--prune-from")
    model = build_student(s.student, s.student_layers, teacher, teacher_dir, tokenizer, family, s.student_embeddings,
                          prune_sample(splits.train.encoded, s.seed) if s.prune else None, cut_from)
    model.config.extra.update(family.config_entries())
    regression = family.model_class.__name__ == "BertForSequenceClassification" and teacher.config.num_labels == 1
    facts = Facts(examples=len(splits.train.examples), start=student_start(s.student, s.student_layers, s.prune),
                  share=encoder_share(model, teacher), augmentable=bool(targets.text_inputs), labels_only=s.alpha == 1)
    s, encoded = distill_plan(family, splits.train, tokenizer, teacher, teacher_dir, s, facts, regression)
    teacher_scores = evaluate_splits(family, teacher, splits.evaluated, s.batch_size * 2, tokenizer.pad_token_id,
                                     s.bf16)
    trained, batch_keys, loss_units = trained_module(model, teacher, family, targets, s, regression)
    del teacher
    return report(family.best_metric, teacher_scores, train_on_task(
        family, trained, tokenizer, splits, encoded, s, started, batch_keys=batch_keys, loss_units=loss_units,
        teacher=teacher_scores))


def task_targets(s: DistillSettings):
    """The task's soft targets (soft_targets.SOFT_TARGETS) once the options that need some are checked against it."""
    task = s.task
    head = head_name(TASKS[task]) if task in TASKS else None
    if head not in SOFT_TARGETS and task in TASKS:
        raise BertforgeError(f"distill {task}: task distillation covers the heads of {', '.join(SOFT_TARGETS)}, "
                             f"not {head}")
    targets = SOFT_TARGETS.get(head, SOFT_TARGETS["BertForSequenceClassification"])  # own data: text classification
    for flag, given, allowed in (("--augment", s.augment, targets.text_inputs or targets.questions),
                                 ("--unlabelled", s.unlabelled, targets.text_inputs or targets.questions),
                                 ("--representations", s.representations, targets.text_inputs)):
        if given and not allowed:
            kinds = "text and text-pair" + (" and question-answering" if flag != "--representations" else "")
            raise BertforgeError(f"{flag}: only for {kinds} tasks, not {task}")
        if given and s.alpha == 1:
            raise BertforgeError(f"{flag} with --alpha 1: the labels alone are trained on; {flag} adds what only "
                                 "the teacher's outputs teach")
    return targets


def distill_plan(family: TaskFamily, train, tokenizer, teacher, teacher_dir: Path, s: DistillSettings, facts: Facts,
                 regression: bool) -> tuple[DistillSettings, dict]:
    """The settings the recipe completes for these facts (the lr and variants, then the epochs and patience the
    rows they make give), said in one line, and the rows the student learns from."""
    from ..inference.batches import row_width
    from .distill_data import default_cache

    augment = s.complete(facts)[0].augment  # before the rows: what they are made of
    encoded, cached = distill_rows(family, train, tokenizer, teacher, teacher_dir, augment, s.unlabelled, regression,
                                   Path(s.cache_dir) if s.cache_dir else default_cache(), s.batch_size, s.seed,
                                   s.progress, facts.labels_only)
    sequences = sum(row_width({"input_ids": ids}) for ids in encoded["input_ids"])
    s, _ = s.complete(dataclasses.replace(facts, rows=len(encoded["labelled"]), sequences=sequences))
    s = dataclasses.replace(s, distill_rows=len(encoded["labelled"]), teacher_outputs_cached=cached)
    what = "training on the labels alone" if facts.labels_only else "distilling"
    print(f"{what} at lr {s.lr:g}, batch {s.batch_size}, --augment {s.augment}, {s.epochs:g} epochs"
          + (f", patience {s.patience}" if s.patience else "")
          + (f" ({s.chosen_by})" if s.chosen_by != "given" else ""), file=sys.stderr)
    return s, encoded


def trained_module(model, teacher, family: TaskFamily, targets, s: DistillSettings, regression: bool) -> tuple:
    """What the loop trains (the student, or the distiller around it), the batch keys it reads beyond the family's,
    and its loss terms' units; the student alone, its own loss, with --alpha 1."""
    from ..inference.batches import PerToken

    if s.alpha == 1:
        return model, None, None
    loss_units = {"distill_loss": targets.units, "label_loss": targets.label_units}
    matcher = None
    if s.representations:
        from ..training.representation_loss import RepresentationMatch

        matcher = RepresentationMatch(teacher.base_model, model.config.hidden_size, REPRESENTATIONS[s.representations])
        loss_units.update(dict.fromkeys(matcher.terms, real_tokens))
    batch_keys = {"teacher_logits": PerToken() if family.per_token_outputs else None, "labelled": None}
    return (make_distiller(model, s.temperature, s.alpha, regression, matcher, s.representation_weight), batch_keys,
            loss_units)


def report(metric: str, teacher_scores: dict, results: dict) -> dict:
    """The student's `results`, said beside the teacher's score."""
    if metric in results and metric in teacher_scores:
        kept = results.get("of_teacher")
        print(f"student {metric} {results[metric]:.4f}, teacher {teacher_scores[metric]:.4f}"
              + (f": the student keeps {kept:.1%}" if kept is not None else ""), file=sys.stderr)
    return results


def distill_rows(family: TaskFamily, train, tokenizer, teacher, teacher_dir: Path, augment: int, unlabelled,
                 regression: bool, cache: Path, batch_size: int, seed: int, progress: bool = True,
                 labels_only: bool = False) -> tuple[dict, bool]:
    """The rows the student learns from (the training split's, then the augmented and unlabelled ones: the
    variants drawn by `seed`), each with the teacher's outputs (computed in batches of twice `batch_size`) and
    whether it is labelled; and whether the teacher's outputs came from the cache. `labels_only`: the training
    split's rows alone, without the teacher's outputs (never computed)."""
    from ..inference.batches import row_lengths
    from .distill_data import augmented, read_unlabelled, read_unlabelled_questions, teacher_outputs

    questions = SOFT_TARGETS[family.model_class.__name__].questions
    extra = []  # (examples, whether the labels' loss reads them)
    if augment:
        print(f"--augment {augment}: {augment * len(train.examples):,} variants of the {len(train.examples):,} "
              "training examples", file=sys.stderr)
        # a question's variants keep its answer; a text's have the teacher's outputs alone
        extra.append((augmented(train.examples, augment, seed), questions))
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
                                     batch_size * 2, progress)
    print(f"teacher outputs of {len(logits)} rows {'read from' if cached else 'written to'} {cache}", file=sys.stderr)
    # per token: each row's own tokens of the [rows, longest, outputs] array (views of the cached file)
    encoded["teacher_logits"] = ([logits[i, :n] for i, n in enumerate(row_lengths(encoded))]
                                 if family.per_token_outputs else logits.tolist())
    encoded["labelled"] = labelled
    return encoded, cached


def real_tokens(batch: dict) -> int:
    return int(batch["attention_mask"].sum())


def check_distill_options(s: DistillSettings) -> None:
    """The checks the command line's types and choices make, for calls from Python."""
    if s.recipe not in RECIPES["distill"]:
        raise BertforgeError(f"--recipe must be one of {', '.join(RECIPES['distill'])}, not {s.recipe!r}")
    try:
        if s.augment is not None:
            AUGMENT(str(s.augment))
    except argparse.ArgumentTypeError as e:
        raise BertforgeError(f"--augment {s.augment}: {e}") from None
    if not s.temperature > 0:
        raise BertforgeError(f"--temperature {s.temperature}: must be above 0")
    if not 0 <= s.alpha <= 1:
        raise BertforgeError(f"--alpha {s.alpha}: must be between 0 and 1")
    if s.representations is not None and s.representations not in REPRESENTATIONS:
        raise BertforgeError(f"--representations {s.representations}: expected one of {', '.join(REPRESENTATIONS)}")
    if not s.representation_weight > 0:
        raise BertforgeError(f"--representation-weight {s.representation_weight}: must be above 0")
    if s.student is None and s.student_layers is None:
        raise BertforgeError("distill needs --student (a size or a folder) or --student-layers")
    if (s.prune or s.prune_from) and s.student not in SIZES:
        raise BertforgeError(f"--prune: --student {s.student} is not a size ({', '.join(SIZES)}) to cut the teacher "
                             "to")


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
    rule, early = DISTILL, EARLY_STOP
    p.add_argument("--recipe", choices=RECIPES["distill"], default="adaptive",
                   help=f"what --lr, --epochs, --patience and --augment not given are: adaptive: lr "
                        f"{rule['trained_lr']:g} for a student that starts trained (--prune, --prune-from, "
                        f"--student-layers, a folder), {rule['random_lr']:g} for random layers; text and pair tasks "
                        f"under {rule['augment_rows']:,} examples get teacher-labelled variants of each (at most "
                        f"{rule['max_auto_augment']}) to make about {rule['augment_rows']:,} rows, and a student of "
                        f"at most {rule['small_student'] * 100:g}%% of the teacher's encoder at least "
                        f"{rule['small_augment']}; the epochs that make {rule['min_steps']:,} steps (at most "
                        f"{rule['max_epochs']}), stopping after {early['patience']} epochs without a better dev score "
                        f"where they are more than {early['after_epochs']}; fixed: lr {FIXED['lr']:g}, "
                        f"{FIXED['epochs']:g} epochs, no variants")
    add_task_run_arguments(p, DEFAULTS["distill"],
                           notes=dict.fromkeys(("lr", "epochs", "patience"), " (default: the --recipe's)"))


def run_distill(args) -> int:
    check_output(args.out, "--out", inputs=[p for p in (args.teacher, args.student, args.data) if p])
    results = distil(task_settings(DistillSettings, args, model=args.student))
    print(json.dumps({k: v for k, v in results.items() if k != "history"}, indent=2))
    return 0
