"""A job's settings: one typed object, built from the command line, from Python or from a run folder's args.json,
and the only thing the job reads.

Each is the loop's options (`TrainArgs`) and the job's own fields. The user's values go over the job's defaults
(recipes.DEFAULTS); what they leave unsaid (None) is completed by the run being resumed (`resumed`: its args.json,
read back into the same class and checked against this run), else by the job's recipe (`complete`:
recipes.choose), with the reason recorded in `chosen_by`. args.json is the object written out: the loop's options
at the top, the job's fields under "extra" (as the loop has always recorded a run); `from_record` reads it back.
"""

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from ..core.io import read_json
from .options import TrainArgs, recorded_arguments, training_options
from .recipes import DEFAULTS, Choice, Facts, choose
from .resume import ARGS_FILE, DISTILL_FIXED, EMBEDDINGS_FIXED, FINETUNE_FIXED, PRETRAIN_FIXED, check_resume

LOOP = {f.name for f in dataclasses.fields(TrainArgs)} - {"extra"}
EPOCH_RUN = ("steps", "eval_every")  # the loop options a run over epochs sets itself: the steps, an evaluation each


def unrecorded(default=None):
    """A field that args.json leaves out: how the run was reached, not what it is."""
    return field(default=default, metadata={"recorded": False})


@dataclass(kw_only=True)
class JobSettings(TrainArgs):
    """What every job over examples has beside the loop's options."""

    job: ClassVar[str]
    fixed: ClassVar[dict]  # what a resumed run must keep (training/resume.py)
    chosen: ClassVar[tuple]  # the settings the job's recipe completes
    kept: ClassVar[tuple | None] = None  # those a resumed run reads back from its args.json (None: all of them)
    recipe: str = "adaptive"
    command: list[str] | None = None
    arguments: dict | None = None
    chosen_by: str | None = None  # why the recipe chose what the user left unsaid ("given": nothing was)

    @classmethod
    def make(cls, **given) -> "JobSettings":
        """From Python: the job's fields and TrainArgs fields by name, over the job's defaults (the rest, given to
        a task job, are its family's options)."""
        own = {f.name for f in dataclasses.fields(cls) if f.init}
        rest = {k: v for k, v in given.items() if k not in own}
        if rest and "family_options" not in own:
            raise TypeError(f"{cls.__name__}: no setting {', '.join(rest)}")
        extra = {"family_options": {k: str(v) if isinstance(v, Path) else v for k, v in rest.items()}} if rest else {}
        values = {**DEFAULTS[cls.job], **{k: v for k, v in given.items() if k in own}, **extra}
        return cls(**{**values, "out": Path(values["out"])})

    @classmethod
    def from_args(cls, args, **fields_) -> "JobSettings":
        """From a parsed command line: its training flags, the job's own flags of the same names, `fields_`."""
        own = {f.name for f in dataclasses.fields(cls) if f.init} - LOOP | {"out"}
        named = {k: getattr(args, k) for k in own if hasattr(args, k)}
        return cls.make(**{**training_options(args), **named, "command": args.command_line,
                           "arguments": recorded_arguments(args), **fields_})

    @classmethod
    def from_record(cls, record: dict) -> "JobSettings":
        """From a run's args.json."""
        names = {f.name for f in dataclasses.fields(cls) if f.init}
        values = {k: v for k, v in {**record, **record.get("extra", {})}.items() if k in names and k != "extra"}
        return cls(**{**values, "out": Path(record["out"])})

    def record(self) -> dict:
        """The job's fields as args.json keeps them under "extra"."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if f.name not in LOOP and f.name != "extra" and f.metadata.get("recorded", True)}

    def loop(self, steps: int | None = None, eval_every: int | None = None) -> TrainArgs:
        """What the training loop reads: the loop's options (a run over epochs gives its `steps` and `eval_every`),
        the job's record as "extra"."""
        own = {k: getattr(self, k) for k in LOOP}
        return TrainArgs(**{**own, "steps": own["steps"] if steps is None else steps,
                            "eval_every": own["eval_every"] if eval_every is None else eval_every,
                            "extra": self.record()})

    def resumed(self, check: bool = True) -> "JobSettings":
        """With --resume, these settings completed by the run's args.json (what this call leaves unsaid is what
        the run began with) and checked against it: a change to what the run is, a one-line error (`check`
        False: the job checks once its data has said what the run is)."""
        path = Path(self.out) / ARGS_FILE
        if not (self.resume and path.is_file()):
            return self
        began = type(self).from_record(read_json(path))
        unsaid = {k: getattr(began, k) for k in self.kept or self.chosen if getattr(self, k) is None}
        settings = dataclasses.replace(self, **unsaid, chosen_by=began.chosen_by) if unsaid else self
        if check:
            check_resume(settings.loop(), settings.fixed)
        return settings

    def given(self) -> dict:
        return {k: getattr(self, k) for k in self.chosen}

    def complete(self, facts: Facts) -> tuple["JobSettings", Choice]:
        """The settings with what is unsaid chosen by the recipe for these facts (a resumed run's were read back
        by `resumed`), and the choice (the reasons of each)."""
        choice = choose(self.job, self.recipe, {**self.given(), "batch_size": self.batch_size}, facts)
        chosen = {k: choice.settings[k] for k in self.chosen}
        why = choice.reasons() or self.chosen_by or "given"
        return dataclasses.replace(self, **chosen, chosen_by=why), choice


@dataclass(kw_only=True)
class FinetuneSettings(JobSettings):
    """`bertforge finetune`: a pre-trained model trained on a task."""

    job: ClassVar[str] = "finetune"
    fixed: ClassVar[dict] = FINETUNE_FIXED
    chosen: ClassVar[tuple] = ("lr", "batch_size", "warmup", "weight_decay", "patience", "epochs")
    task: str
    model: str
    revision: str | None = unrecorded()
    base_model: dict | None = None  # the Hub model and commit `model` was read from (None: a folder)
    data: str | None = None
    epochs: float | None = None
    family_options: dict = field(default_factory=dict)
    max_length: int | None = None
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    group_by_length: bool = True

    def family(self) -> dict:
        """The options the task family reads."""
        return {**self.family_options, "progress": self.progress}


@dataclass(kw_only=True)
class DistillSettings(FinetuneSettings):
    """`bertforge distill`: a student learns what a teacher fine-tuned on the task answers. `model` is the
    student (a size name or a folder); with `student_layers`, the teacher's layers (args.json names them)."""

    job: ClassVar[str] = "distill"
    fixed: ClassVar[dict] = DISTILL_FIXED
    chosen: ClassVar[tuple] = ("lr", "augment", "epochs", "patience")
    model: str | None = None
    teacher: str
    student_layers: list[int] | None = None
    student_embeddings: str | None = None
    prune: bool = False
    prune_from: str | None = None
    temperature: float = 2.0
    alpha: float = 0.5
    representations: str | None = None
    representation_weight: float = 1.0
    augment: int | None = None
    unlabelled: list[str] = field(default_factory=list)
    cache_dir: str | None = unrecorded()
    distill_rows: int | None = None  # the rows the student learns from, once made
    teacher_outputs_cached: bool | None = None  # whether the teacher's outputs were read from the cache

    def record(self) -> dict:
        named = self.model if self.student_layers is None else \
            f"{self.teacher} layers {','.join(map(str, self.student_layers))}"
        return {**super().record(), "model": named}

    @property
    def student(self) -> str | None:
        return self.model


@dataclass(kw_only=True)
class EmbeddingSettings(JobSettings):
    """`bertforge distill embeddings`: a student learns a sentence-embedding teacher's vectors of `input`'s texts.
    `model` is the student (a size name or a folder)."""

    job: ClassVar[str] = "embeddings"
    fixed: ClassVar[dict] = EMBEDDINGS_FIXED
    chosen: ClassVar[tuple] = ("lr", "epochs")
    task: str = "embeddings"
    teacher: str
    revision: str | None = unrecorded()
    base_model: dict | None = None  # the Hub model and commit the teacher was read from (None: a folder)
    model: str | None = None
    prune: bool = False
    student_embeddings: str | None = None
    input: list[str] = field(default_factory=list)
    held_out: float = 0.05  # the share of the texts scored each epoch (embedding_data.HELD_OUT)
    epochs: float | None = None
    text_column: str = "text"
    text_pair_column: str | None = None
    max_length: int | None = None
    max_train_examples: int | None = None
    max_eval_examples: int | None = None
    group_by_length: bool = True
    cache_dir: str | None = unrecorded()
    texts: int | None = None  # the distinct texts read
    teacher_embeddings_cached: bool | None = None  # whether the teacher's vectors were read from the cache


@dataclass(kw_only=True)
class PretrainSettings(JobSettings):
    """`bertforge pretrain`, general distillation among its objectives (`teacher`). The recipe's choices beside the
    loop's are the objective, the masking rate, the dropout and the output bias (None: what the data and the config
    hold); once the data is read, the run records them as resolved (the objective and rate the data gave, the
    config's dropout, the config used: `init_from`'s)."""

    job: ClassVar[str] = "pretrain"
    fixed: ClassVar[dict] = PRETRAIN_FIXED
    chosen: ClassVar[tuple] = ("lr", "schedule", "warmup", "batch_size", "bf16", "steps", "objective", "mask_prob",
                               "dropout", "output_bias")
    # args.json holds the others as the data and the config resolved them, not as given: resolved again
    kept: ClassVar[tuple] = ("lr", "schedule", "warmup", "batch_size", "bf16", "steps")
    recipe: str = "paper"
    data: str
    config: str = "mini"
    init_from: str | None = None
    revision: str | None = unrecorded()
    teacher: str | None = None
    base_model: dict | None = None  # the Hub model and commit `init_from` (else `teacher`) was read from
    objective: str | None = None
    mask_prob: float | None = None
    dropout: float | None = None
    output_bias: str | None = None
    student_embeddings: str | None = None
    prune: bool | None = False  # recorded as None where the student was not cut
    eval_rows: int = 1024
    max_length: int | None = None  # the data's rows' length
