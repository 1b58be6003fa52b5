"""Fine-tuning tasks: one module per family (reader, encoding, head, metric, outputs) behind the interface of
`base.TaskFamily`, registered here. Adding a family is one new module and one line in FAMILIES."""

import argparse
from pathlib import Path

from ..core.errors import BertforgeError
from .base import TaskFamily
from .glue import GlueFamily
from .multiple_choice import MultipleChoiceFamily, OwnMultipleChoiceFamily
from .ner import NerFamily
from .question_answering import QuestionAnsweringFamily
from .rerank import RerankFamily
from .retrieval import RetrievalFamily
from .squad import SquadFamily
from .text_classification import TextClassificationFamily
from .token_classification import TokenClassificationFamily

FAMILIES: tuple[type[TaskFamily], ...] = (GlueFamily, NerFamily, MultipleChoiceFamily, SquadFamily,
                                          TextClassificationFamily, TokenClassificationFamily,
                                          QuestionAnsweringFamily, OwnMultipleChoiceFamily,
                                          RerankFamily, RetrievalFamily)
TASKS: dict[str, type[TaskFamily]] = {name: family for family in FAMILIES for name in family.names}


def make_family(task: str, data=None, max_length: int | None = None, options: dict | None = None,
                reading: bool = False) -> TaskFamily:
    """The task's family, reading `data` (None: for plain-text examples only, unless `reading` splits).
    `options` may hold any family's options and more (e.g. all parsed flags); the task's own are taken, and
    `progress` (--no-progress) where given."""
    options = options or {}
    if task not in TASKS:
        raise BertforgeError(f"unknown task {task!r}: choose one of {', '.join(TASKS)}")
    family = TASKS[task]
    if reading and data is None and family.reads_data_folder:
        raise BertforgeError(f"{task} reads its splits from a folder: give --data")
    defaults = {}  # every other family's option -> its defaults: a value among them was not given
    for other in FAMILIES:
        for k, default in other.option_defaults.items():
            defaults.setdefault(k, []).append(default)
    foreign = sorted(k for k in options if k in defaults and k not in family.option_defaults
                     and options[k] not in defaults[k])
    if foreign:
        flags = ", ".join("--" + k.replace("_", "-") for k in foreign)
        raise BertforgeError(f"{task} does not take {flags}: those are other tasks' options")
    own = {k: options.get(k, default) for k, default in family.option_defaults.items()}
    made = family(task, None if data is None else Path(data), max_length or family.default_max_length, **own)
    made.progress = options.get("progress", True)
    return made


def add_family_arguments(parser) -> None:
    """Every family's own options, for the commands that take a task name. Families that share a declaration (the
    flags of your own data, own_data.OwnData's; a parent family's) get its flags once: argparse takes a flag once.
    `COMMAND TASK --help` shows the task's own options only (`narrow_help`, called by cli.Parser)."""
    declarations = {}
    for family in FAMILIES:
        declarations.setdefault(family.add_arguments.__func__, family)
    for family in declarations.values():
        family.add_arguments(parser)
    parser.narrow_help = lambda words: hide_other_families(parser, words)


def hide_other_families(parser, words) -> None:
    """With a task among `words` (the command line after the command), hide the other families' options from
    --help."""
    task = next((w for w in words if w in TASKS), None)
    if task is None:
        return
    own = TASKS[task].option_defaults
    others = {k for family in FAMILIES for k in family.option_defaults} - set(own)
    for action in parser._actions:
        if action.dest in others:
            action.help = argparse.SUPPRESS
    parser.epilog = f"The options of {task} only; `{parser.prog.split()[-1]} --help` shows every task's."


def check_family_options(options: dict, job: str) -> None:
    """Keywords given to a job from Python beyond its settings must be a task family's options: a misspelt setting
    is refused by name instead of going unread."""
    unknown = sorted(set(options) - {k for family in FAMILIES for k in family.option_defaults})
    if unknown:
        raise TypeError(f"{job}(): no setting or task option {', '.join(map(repr, unknown))}")


def family_options(args) -> dict:
    """Every family's own options from parsed flags."""
    return {k: getattr(args, k) for family in FAMILIES for k in family.option_defaults if hasattr(args, k)}
