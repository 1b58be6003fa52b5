"""Pre-training (spec section 6): masked LM + next sentence prediction on data made by `bertforge data create`,
or one of the other objectives (`--objective`, see objectives.py) and recipes (`--recipe`, see recipe.py).

The batch of step s is a deterministic function of (seed, s): an epoch is a seeded permutation of the
instances, and a global batch is split by rows across processes. Data written without masks is masked
afresh every time a row is drawn (dynamic masking), the global batch at once with a generator seeded by
(seed, step), each process keeping its rows: the masks do not depend on the number of processes either.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from pathlib import Path

import numpy as np

from ..core.io import check_output, exclusive, read_json, write_json
from ..training.options import add_training_arguments
from ..core.flags import add_revision_argument, count
from ..core.hub import hub_origin, model_folder
from ..model.architectures.registry import architecture, load_config, pretraining_class
from ..data.shards import check_vocab, load_pretraining_data
from ..core.errors import BertforgeError
from .objectives import OBJECTIVES, choose_objective
from .plot import BASELINES_FILE
from ..text.tokenizer import BertTokenizer
from .recipe import add_recipe_arguments, recipe_notes
from ..training.recipes import DEFAULTS, Facts
from ..training.resume import ARGS_FILE, PRETRAIN_FIXED, check_resume
from ..training.settings import PretrainSettings

# torch, the model and the loop are imported where they are used: the command's --help does not load torch.

log = logging.getLogger("bertforge")
EVAL_STEP = 2**40  # seeds the held-out masks: the same at every evaluation, unlike any training step's
EVAL_BATCH = 64  # held-out rows per batch, masked together: the same masks whatever the training batch size


class PretrainJob:
    """Batches, losses, evaluation and checkpoints for BertForPreTraining under one objective (objectives.py);
    the training loop's view (see train.TrainingJob)."""

    best_metric = None
    resume_fixed = PRETRAIN_FIXED

    def __init__(self, data_dir, tokenizer: BertTokenizer, batch_size: int, seed: int, eval_rows: int = 1024,
                 objective: str | None = None, mask_prob: float | None = None, teacher: str | None = None):
        self.tokenizer = tokenizer
        self.train = load_pretraining_data(data_dir, "train")
        check_vocab(self.train.index, tokenizer)
        self.objective = choose_objective(self.train, objective, mask_prob, teacher)
        self.mask_prob = mask_prob
        self.saved_dropout = None  # see save
        self.loss_units = self.objective.loss_units()
        held_out = (Path(data_dir) / "eval" / "index.json").is_file()
        self.eval = load_pretraining_data(data_dir, "eval") if held_out else None
        self.batch_size, self.seed = batch_size, seed
        self.eval_rows = min(eval_rows, len(self.eval)) if self.eval is not None else 0
        self.steps_per_epoch = len(self.train) // batch_size
        self._order = (None, None)  # (epoch, its permutation of the instances)
        if self.steps_per_epoch == 0:
            raise BertforgeError(f"{data_dir}: {len(self.train)} training instances, "
                                 f"fewer than one batch of {batch_size}")

    def rows_of(self, data, indices, step: int, mine=None) -> dict:
        """Instances `indices` as the objective's inputs and labels; `mine`: this process's positions among them.
        Unmasked data is masked now for a masking objective, all of `indices` at once with a generator seeded
        by (seed, step), so that the masks do not depend on the number of processes (see module doc). The rows
        come from the shards padded to the longest of `indices` (the width the masks are drawn at); the loop
        cuts each micro-batch to its own longest row (train.split_rows), and the model packs the real tokens."""
        if data.static_masked or not self.objective.masks:
            b = data.batch(indices if mine is None else indices[mine])
        else:
            # Held-out rows keep the data's rate (0.15 by default), so that runs with other rates compare.
            masking = {} if self.mask_prob is None or data is not self.train else \
                {"masked_lm_prob": self.mask_prob, "max_predictions": math.ceil(data.max_seq_length * self.mask_prob)}
            b = data.batch(indices, rng=np.random.default_rng([self.seed, step]), **masking)
            if mine is not None:
                b = {k: v[mine] for k, v in b.items()}
        b.pop("special_tokens_mask")
        return self.objective.finish(b)

    def batch(self, step: int, rank: int, world: int) -> dict:
        epoch, i = divmod(step, self.steps_per_epoch)
        if self._order[0] != epoch:
            self._order = (epoch, np.random.default_rng([self.seed, epoch]).permutation(len(self.train)))
        global_rows = self._order[1][i * self.batch_size:(i + 1) * self.batch_size]
        return self.rows_of(self.train, global_rows, step, np.array_split(np.arange(self.batch_size), world)[rank])

    def held_out(self, device=None):
        """The held-out batches: the same rows and masks every time, whatever the batch size, at the data's
        masking rate whatever --mask-prob trains with."""
        for start in range(0, self.eval_rows, EVAL_BATCH):
            rows = np.arange(start, min(start + EVAL_BATCH, self.eval_rows))
            b = self.rows_of(self.eval, rows, EVAL_STEP + start)
            yield {k: v.to(device) for k, v in b.items()} if device is not None else b

    def evaluate(self, model) -> dict:
        if not self.eval_rows:
            return {}
        return self.objective.evaluate(model, self.held_out(next(model.parameters()).device))

    def baselines(self) -> dict:
        return self.objective.baselines(self.held_out()) if self.eval_rows else {}

    def save(self, model, folder: Path):
        self.objective.save(model, folder, self.save_checkpoint)

    def save_checkpoint(self, model, folder: Path):
        """The checkpoint with its tokenizer, its config naming the heads the objective leaves untrained
        (`info` says so). A run trained with `--dropout` other than its config's saves the config's rate
        (`saved_dropout`), so that fine-tuning uses it: the budget recipe drops dropout in pre-training only, as
        Cramming and MosaicBERT do."""
        config = model.config
        model.config = dataclasses.replace(config, extra={**config.extra,
                                                          "untrained_heads": self.objective.untrained_heads})
        if self.saved_dropout is not None:
            model.config = model.config.with_dropout(self.saved_dropout)
        try:
            model.save_pretrained(folder, tokenizer=self.tokenizer)
        finally:
            model.config = config


def build_model(config_name: str, tokenizer: BertTokenizer, init_from: str | None, dropout: float | None,
                data_index: dict | None = None, causal: bool = False, next_sentence: bool = False):
    if init_from:
        if data_index is not None and (Path(init_from) / "vocab.txt").is_file():
            check_vocab(data_index, BertTokenizer.from_pretrained(init_from))
        model = pretraining_class(load_config(init_from), next_sentence).from_pretrained(init_from)
        if model.config.vocab_size != tokenizer.vocab_size:
            raise BertforgeError(f"{init_from}: the model's vocabulary has {model.config.vocab_size} entries, "
                                 f"the data's {tokenizer.vocab_size}: the data was made with another vocabulary")
        if model.config.is_decoder != causal:
            kind = {True: "causal (ltr)", False: "bidirectional"}
            raise BertforgeError(f"--init-from {init_from}: a {kind[model.config.is_decoder]} model cannot continue "
                                 f"with a {kind[causal]} objective")
        return model
    config = load_config(config_name)
    if causal and not architecture(config).causal:
        raise BertforgeError(f"--config {config_name}: a {config.model_type} model has no causal attention: "
                             "--objective ltr pre-trains BERTs")
    overrides = {"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_token_id}
    config = type(config).from_dict({**config.to_dict(), **overrides, **({"is_decoder": True} if causal else {})})
    if dropout is not None:
        config = config.with_dropout(dropout)
    return pretraining_class(config, next_sentence)(config)


def init_output_bias(model, counts) -> None:
    """The masked-LM output bias set to the log unigram frequencies of the training tokens (add-one smoothed):
    a fresh model's first predictions are then the token frequencies it would otherwise spend its first few
    hundred steps learning (held-out accuracy +1-2 points after 2 minutes of BERT-Tiny: BENCHMARKS.md)."""
    import torch

    smoothed = torch.as_tensor(counts, dtype=torch.float64) + 1
    with torch.no_grad():
        model.output_bias.copy_((smoothed / smoothed.sum()).log())


SAID = ("recipe", "objective", "teacher", "mask_prob", "dropout", "config", "init_from", "base_model", "data",
        "max_length", "eval_rows", "output_bias", "student_embeddings", "prune", "lr", "schedule", "warmup",
        "batch_size", "bf16")  # the settings the run's first line says
UNSET = ("teacher", "mask_prob", "student_embeddings", "prune", "base_model")  # not said where the objective has none


def say_settings(s: PretrainSettings, no_held_out: bool) -> None:
    """The run's settings in one line (those left unset by the objective not named), and a warning where the data
    holds no held-out documents to evaluate on."""
    shown = {k: getattr(s, k) for k in SAID if getattr(s, k) is not None or k not in UNSET}
    shown["steps"] = s.steps if not s.time_budget else f"until the {s.time_budget:g} s budget"
    log.info("pre-training: " + ", ".join(f"{k} {v}" for k, v in shown.items()))
    if s.eval_every and no_held_out:
        log.warning(f"{s.data}: no held-out documents, so no held-out figures or baselines; make the data with "
                    "`bertforge data create --eval-docs N` (auto by default) to have them")


def pretrain(data: str, out: str, **options) -> dict:
    """Pre-train and return the last held-out evaluation (with the trivial baselines beside it).

    `options`: PretrainSettings fields (TrainArgs' among them); what is not given is the `recipe`'s (default:
    paper; training/recipes.py). `output_bias="unigram"` starts a fresh model's masked-LM output bias at the
    training tokens' log frequencies (`init_output_bias`); with `init_from` it is ignored, as `config` is: args.json
    records the config used, `init_from`'s.
    `teacher`: the model whose representations `objective="distill"` learns (general_distill.py); a fresh student
    starts with its embeddings projected onto the student's width (`student_embeddings` None or "teacher"; None
    only where the student is no wider), or random ones ("random"); with `prune` the student is the teacher cut
    to `config`'s size instead (general_distill.cut_student)."""
    return pre_train(PretrainSettings.make(data=data, out=out, **options))


def pre_train(settings: PretrainSettings) -> dict:
    """`pretrain` from its settings, which the run completes (recipes.choose) and records (args.json)."""
    import torch

    from ..training.train import fit, setup_distributed

    s = completed(settings.resumed(check=False))  # checked below, once the data has resolved the run
    if not Path(s.data).is_dir():
        raise BertforgeError(f"--data {s.data}: no such folder; make pre-training data with `bertforge data create`")
    if not (Path(s.data) / "index.json").is_file():
        raise BertforgeError(f"{s.data}: not pre-training data (no index.json); make it with `bertforge data create`")
    ctx = setup_distributed(s.device)
    tokenizer = BertTokenizer.from_pretrained(s.data)
    job = PretrainJob(s.data, tokenizer, s.batch_size, s.seed, s.eval_rows, s.objective, s.mask_prob, s.teacher)
    torch.manual_seed(s.seed)
    model = build_model(s.config, tokenizer, s.init_from, s.dropout, job.train.index, causal=job.objective.causal,
                        next_sentence=job.objective.next_sentence)
    if s.output_bias == "unigram" and not s.init_from and job.objective.predicts_tokens:
        init_output_bias(model, job.train.token_counts(model.config.vocab_size))
    model = job.objective.prepare(model, s.teacher, job, prune=s.config if s.prune else None)
    embeddings = s.student_embeddings
    if job.objective.teacher and not s.init_from and not s.prune:
        from ..model.student import start_embeddings

        embeddings = start_embeddings(model.student, model.match.teacher, embeddings)
    if job.train.max_seq_length > model.config.max_tokens:
        raise BertforgeError(f"{s.data}: rows of {job.train.max_seq_length} tokens, but the model has "
                             f"{model.config.max_tokens} positions (--config, --init-from)")
    if s.dropout is not None and not s.init_from:
        job.saved_dropout = load_config(s.config).hidden_dropout_prob
    s = ran_as(s, job, model.config.hidden_dropout_prob, embeddings)
    if not ctx.main:
        return fit(model, job, s.loop(), ctx)
    say_settings(s, job.eval is None)
    baselines = job.baselines()
    with exclusive(s.out, "--out"):  # from the first file written (fit holds it too)
        check_resume(s.loop(), job.resume_fixed)  # a refused --resume writes nothing
        write_json(s.out / BASELINES_FILE, baselines)  # beside metrics.jsonl, for `bertforge plot`
        return {**fit(model, job, s.loop(), ctx), **baselines}


def completed(s: PretrainSettings) -> PretrainSettings:
    """The settings with the models they name found (a Hub name fetched) and what they leave unsaid chosen by the
    recipe for the model's width and the device: a recipe's masking rate is for masking objectives, its output
    bias for those that predict tokens."""
    from ..inference.runtime import native_bf16, pick_device

    check_choices(s)
    init_from = s.init_from and str(model_folder(s.init_from, s.revision))
    teacher = s.teacher and str(model_folder(s.teacher, None if s.init_from else s.revision))
    facts = Facts(hidden_size=load_config(init_from or s.config).hidden_size,
                  native_bf16=native_bf16(pick_device(s.device)), time_budget=s.time_budget)
    chosen, _ = dataclasses.replace(s, init_from=init_from, teacher=teacher).complete(facts)
    if chosen.time_budget and chosen.warmup >= 1:
        raise BertforgeError(f"--warmup {chosen.warmup:g}: with --time-budget the warm-up is a fraction (< 1) of it")
    objective = OBJECTIVES[chosen.objective] if chosen.objective else None  # None: what the data holds, masked
    return dataclasses.replace(
        chosen, mask_prob=chosen.mask_prob if objective is None or objective.masks else s.mask_prob,
        output_bias=chosen.output_bias if objective is None or objective.predicts_tokens else None)


def ran_as(s: PretrainSettings, job: PretrainJob, dropout: float, embeddings: str | None) -> PretrainSettings:
    """The settings as the run resolved them, which args.json records: the objective and masking rate the data
    gave, the model's dropout, the config used (`init_from`'s), the student's embeddings."""
    tokens = job.objective.predicts_tokens
    return dataclasses.replace(
        s, objective=job.objective.name, data=str(s.data), config=str(s.init_from or s.config),
        mask_prob=s.mask_prob or job.train.index.get("masked_lm_prob") if job.objective.masks else None,
        dropout=dropout, base_model=hub_origin(s.init_from or s.teacher), max_length=job.train.max_seq_length,
        output_bias=s.output_bias or "zero" if tokens and not s.init_from else None, student_embeddings=embeddings,
        prune=s.prune or None)


def check_choices(s: PretrainSettings) -> None:
    """The settings that contradict one another, refused in one line."""
    if s.init_from and s.output_bias:
        raise BertforgeError(f"--output-bias {s.output_bias}: it sets a fresh model's bias; with --init-from "
                             f"the checkpoint's is kept")
    if s.student_embeddings and (s.init_from or not s.teacher):
        raise BertforgeError(f"--student-embeddings {s.student_embeddings}: it starts a fresh student of "
                             f"--objective distill (with --teacher), not " +
                             ("one from --init-from" if s.init_from else "a model without a teacher"))
    if s.prune and (s.init_from or not s.teacher or s.student_embeddings):
        raise BertforgeError("--prune: it cuts a fresh student from --teacher (--objective distill), not " +
                             ("one from --init-from" if s.init_from else "beside --student-embeddings"
                              if s.teacher else "without a teacher"))


def add_pretrain_arguments(p):
    p.add_argument("--data", required=True, help="folder written by `bertforge data create`")
    p.add_argument("--out", required=True, help="run folder: metrics.jsonl, step-*/ checkpoints, final/")
    p.add_argument("--config", default="mini", help="tiny|mini|small|medium|base|large, a config.json, or a Hub "
                   "model's name (org/name: its config)")
    p.add_argument("--init-from", help="start from this checkpoint folder (or Hub model, org/name) instead of random "
                   "weights")
    p.add_argument("--teacher", help="--objective distill: the model whose representations the student learns "
                                     "(any checkpoint folder or Hub model with the data's vocabulary)")
    add_revision_argument(p, "--init-from (else --teacher)")
    p.add_argument("--student-embeddings", choices=("teacher", "random"),
                   help="--objective distill*: a fresh student starts with the teacher's embeddings projected onto "
                        "its width (leading principal directions), or random ones (default: the teacher's, unless "
                        "the student is wider)")
    p.add_argument("--prune", action="store_true",
                   help="--objective distill*: the student starts as the teacher cut to --config's size (its layers "
                        "evenly spaced, in each the hidden channels, heads and feed-forward neurons most active on "
                        "the training rows; the teacher's head size), not from random weights")
    p.add_argument("--eval-rows", type=count(1), default=1024, help="held-out instances per evaluation")
    add_recipe_arguments(p)
    # None: the recipe decides (and --steps: 1000, or as many as --time-budget allows)
    add_training_arguments(p, DEFAULTS["pretrain"],
                           skip=("keep_checkpoints",),  # pre-training keeps its last --keep step checkpoints
                           notes={**recipe_notes(), "steps": "(default 1000, or as many as --time-budget allows)"})


def run_pretrain(args) -> int:
    check_output(args.out, "--out", inputs=[args.data])
    result = pre_train(PretrainSettings.from_args(args))
    for key, value in result.items():
        print(f"{key}: {value:.4f}")
    print(f"saved: {Path(args.out) / 'final'} (a checkpoint folder: bertforge finetune TASK --model "
          f"{Path(args.out) / 'final'} ...)")
    collapsed = collapse_warning(result, read_json(Path(args.out) / ARGS_FILE)["lr"])  # the rate it ran at
    if collapsed:
        log.warning(collapsed)
    return 0


def collapse_warning(result: dict, lr: float) -> str | None:
    """A model whose held-out masked-LM accuracy is that of always guessing the most frequent token has
    learnt the unigram distribution and nothing else: after a whole run, that is a learning rate too high for
    the model (measured: BERT-Mini stays there at 1e-3 and 2e-3 with batch 16; BENCHMARKS.md, issue 11)."""
    accuracy, baseline = result.get("eval_mlm_accuracy"), result.get("mlm_most_frequent_token_accuracy")
    if accuracy is None or baseline is None or accuracy > baseline + 0.002:
        return None
    return (f"held-out masked-LM accuracy {accuracy:.2%} is that of always guessing the most frequent token "
            f"({baseline:.2%}): the model learnt only token frequencies; a lower --lr than {lr:g} (or more "
            f"steps) usually gets it past this")
