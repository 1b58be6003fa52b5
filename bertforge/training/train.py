"""The one training loop that pre-training and fine-tuning share.

A job (pre-training, or fine-tuning on a task) supplies a `TrainingJob`: the batch for a given step (a
deterministic function of the step, so that a resumed run sees exactly the data an uninterrupted one would),
how many units each loss term averages over, an evaluation, and how to save the model. The loop does the
rest: AdamW with warm-up and linear decay, gradient accumulation, clipping, bf16 autocast, DDP, a JSONL log,
progress with rate and ETA, TensorBoard event files if asked, atomic checkpoints, exact resume, and a clean stop
on SIGINT/SIGTERM.

A step whose loss or gradient is not finite is skipped (the weights and the optimizer's state stay as they were;
its metrics.jsonl row says "skipped"), and a run whose steps stay so for NONFINITE_STEPS steps in a row, or that
ends or stops on one, fails with a one-line error: no checkpoint, best/ or final/ is written after such a step, so
the run folder resumes from the last checkpoint before them.

Losses are combined so that the result does not depend on how a global batch is split across processes and
accumulation steps: each term (e.g. masked-LM, averaged over masked tokens) is weighted by its units in the
micro-batch over its units in the whole global batch.
"""

import logging
import math
import os
import signal
import time
import warnings
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from ..core.io import exclusive, remove_folder
from ..core.errors import BertforgeError
from ..core.heap import bound_heap_growth
from .optim import TimeSchedule, make_optimizer, step_schedule
from .options import NONFINITE_STEPS, TrainArgs
from .resume import check_resume, write_record
from .run_folder import Checkpointer, MetricsLog, best_score, check_run_folder, latest_checkpoint, step_folder
from ..inference.runtime import warn_if_emulated_bf16

log = logging.getLogger("bertforge")


class TrainingJob(Protocol):
    """What the loop trains on: pre-training or a fine-tuning job (see the module docstring)."""

    loss_units: dict[str, Callable[[dict], int]]  # output loss key -> units its mean is over in a batch
    best_metric: str | None  # evaluation figure that picks RUN/best (higher is better), or None
    resume_fixed: dict[str, str]  # args.json "extra" keys --resume may not change -> the flag (resume.py); optional

    def batch(self, step: int, rank: int, world: int) -> dict: ...
    def evaluate(self, model: nn.Module) -> dict[str, float]: ...
    def save(self, model: nn.Module, folder: Path) -> None: ...


# ---------------------------------------------------------------------------------------------------------
# Processes


@dataclass
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def main(self) -> bool:
        return self.rank == 0

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        if self.world > 1:
            dist.all_reduce(t)
        return t


def setup_distributed(device: str | None = None) -> Dist:
    """One process, or one of several started by torchrun (gloo on CPU, nccl on GPU)."""
    cuda = torch.cuda.is_available() if device is None else device.startswith("cuda")
    if "WORLD_SIZE" not in os.environ or int(os.environ["WORLD_SIZE"]) == 1:
        return Dist(device=torch.device(device or ("cuda" if cuda else "cpu")))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo")
    local = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local)
    return Dist(dist.get_rank(), dist.get_world_size(), torch.device(f"cuda:{local}" if cuda else "cpu"))


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the run after it saved a checkpoint (the CLI exits 130 with this message)."""


class StopRequest:
    """SIGINT/SIGTERM ask the loop to save and stop at the end of the current step."""

    def __init__(self):
        self.requested = False
        self.previous = {s: signal.signal(s, self.handle) for s in (signal.SIGINT, signal.SIGTERM)}

    def handle(self, signum, frame):
        self.requested = True

    def restore(self):
        for s, handler in self.previous.items():
            signal.signal(s, handler)


# ---------------------------------------------------------------------------------------------------------
# The loop


def split_rows(batch: dict, parts: int) -> list[dict]:
    """Split a batch into `parts` micro-batches by rows, each trimmed to its own longest row."""
    rows = next(iter(batch.values())).shape[0]
    if parts > rows:
        raise BertforgeError(f"gradient accumulation of {parts} needs at least {parts} rows per process, got {rows}")
    chunks = [{k: batch[k].tensor_split(parts)[i] for k in batch} for i in range(parts)]
    return [trim(c) for c in chunks]


def trim(batch: dict) -> dict:
    """Drop padding positions past the longest sequence from the tensors laid out as the attention mask, and from
    those with values per token beyond it ([B, L, ...]: a teacher's per-token logits)."""
    mask = batch.get("attention_mask")
    if mask is None:
        return batch
    longest, axis = int(mask.sum(-1).max()), mask.dim() - 1
    return {k: v.narrow(axis, 0, longest) if v.shape[:mask.dim()] == mask.shape else v for k, v in batch.items()}


def fit(model: nn.Module, job: TrainingJob, args: TrainArgs, ctx: Dist | None = None,
        started: float | None = None) -> dict:
    """Train `model` on `job`; returns the last evaluation (empty if none ran). A stop asked for by SIGINT or
    SIGTERM saves a checkpoint and raises `Interrupted`. The run folder is held by one process at a time.
    `started`: when the command began (time.perf_counter(); default now), from which its wall time counts."""
    ctx = ctx or Dist()
    started = time.perf_counter() if started is None else started
    with exclusive(args.out, "--out") if ctx.main else nullcontext():
        return _fit(model, job, args, ctx, started)


def _fit(model: nn.Module, job: TrainingJob, args: TrainArgs, ctx: Dist, started: float) -> dict:
    bound_heap_growth()
    if args.bf16 and ctx.main:
        warn_if_emulated_bf16(ctx.device)
    if ctx.main:
        check_run_folder(args)
        previous = check_resume(args, getattr(job, "resume_fixed", {}))  # before anything is written
    args.out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(args.seed + ctx.rank)
    model.to(ctx.device)
    optimizer = make_optimizer(model, args.lr, args.weight_decay, args.adam_eps, bias_correction=args.bias_correction)
    timed = args.time_budget > 0  # the schedule follows training time; the run ends when it is spent
    scheduler = TimeSchedule(optimizer, args.schedule, args.warmup, args.time_budget) if timed else \
        step_schedule(optimizer, args.schedule, args.warmup_steps, args.steps)
    ckpt = Checkpointer(args, job, ctx, started)
    start = ckpt.restore(model, optimizer, scheduler) if args.resume else 0
    if ctx.main:  # the device the loop used (the field may say None: the default); resumed, a part added
        write_record(args, str(ctx.device), start, previous, ckpt.earlier_s)
    loop = Loop(model, job, args, ctx, optimizer, scheduler, ckpt, start)
    try:
        done = loop.run(start)
        if args.keep_checkpoints:
            ckpt.save(model, optimizer, scheduler, done)
        ckpt.save(model, optimizer, scheduler, done, name="final", full=False)
        if ctx.main and not args.keep_checkpoints:  # after final/: a kill before this still resumes
            for folder in args.out.glob("step-*"):
                remove_folder(folder)
    finally:
        loop.close()
    return loop.last_eval


# With a time budget the bar counts training seconds of the budget: no rate of "seconds per second"
TIMED_BAR = "{l_bar}{bar}| {n_fmt}/{total_fmt} s of training [{elapsed} in all, {remaining} left{postfix}]"


class Loop:
    """The steps of one run, from `start`: train, evaluate (keeping the best checkpoint, counting patience),
    log, save, and stop when asked (SIGINT/SIGTERM), when patience runs out or when the time budget is spent;
    fail when the loss stays not finite (`skipped`: the steps in a row that were skipped for it)."""

    def __init__(self, model, job: TrainingJob, args: TrainArgs, ctx: Dist, optimizer, scheduler, ckpt, start: int):
        self.model, self.job, self.args, self.ctx = model, job, args, ctx
        self.optimizer, self.scheduler, self.ckpt = optimizer, scheduler, ckpt
        self.timed = args.time_budget > 0
        self.metrics_log = MetricsLog(args.out / "metrics.jsonl", start, ctx.main, args.report_to == "tensorboard")
        self.trained = nn.parallel.DistributedDataParallel(model) if ctx.world > 1 else model
        self.stop = StopRequest()
        self.bar = tqdm(total=round(args.time_budget) if self.timed else args.steps,
                        initial=round(scheduler.seconds) if self.timed else start, unit="s" if self.timed else "step",
                        disable=not (args.progress and ctx.main), dynamic_ncols=True,
                        bar_format=TIMED_BAR if self.timed else None)
        self.last_eval = {}
        scores = [best_score(row, job.best_metric) for row in self.metrics_log.rows if job.best_metric in row]
        self.best = max(scores, default=-math.inf)
        self.since_best = len(scores) - 1 - scores.index(self.best) if scores else 0  # evaluations since the best
        self.skipped = 0  # a run resumes from a checkpoint, written after a step that was not skipped
        self.tokens_since, self.clock = 0, time.perf_counter()

    def run(self, start: int) -> int:
        """Train from step `start`; the steps done."""
        done = start
        for step in range(start, self.args.steps):
            if self.timed and self.scheduler.finished:
                break
            row = self.train(step)
            done = step + 1
            self.skipped = self.skipped + 1 if row.get("skipped") else 0
            last = done == self.args.steps or (self.timed and self.scheduler.finished)
            evaluated = bool(self.args.eval_every) and (done % self.args.eval_every == 0 or last)
            if evaluated:
                row.update(self.evaluate(done, row))
            if done % self.args.log_every == 0 or last or evaluated:
                self.log(row)
            advance = min(round(self.scheduler.seconds), self.bar.total) - self.bar.n if self.timed else 1
            if advance:  # timed: whole seconds; a step within the same second redraws nothing
                self.bar.update(advance)
            if self.stops(done, last, row["loss"]):
                break
        return done

    def train(self, step: int) -> dict:
        """One optimizer step; its row of figures."""
        self.model.train()
        began = time.perf_counter()
        stats = train_step(self.trained, self.job, self.args, self.ctx, step, self.optimizer)
        spent = time.perf_counter() - began
        if self.timed:  # every process steps by rank 0's time, so that all stop at the same step
            spent = float(self.ctx.all_reduce(torch.tensor([spent if self.ctx.main else 0.0], dtype=torch.float64)))
            self.scheduler.step(spent)
        else:
            with warnings.catch_warnings():  # torch's, where a run's first step is skipped: the rate is not off by one
                warnings.filterwarnings("ignore", "Detected call of `lr_scheduler.step\\(\\)` before")
                self.scheduler.step()
        self.tokens_since += stats.pop("tokens")
        row = {"step": step + 1, **stats, "lr": self.scheduler.get_last_lr()[0]}
        return row | ({"train_seconds": round(self.scheduler.seconds, 3)} if self.timed else {})

    def evaluate(self, done: int, row: dict) -> dict:
        """The evaluation's figures after the step of `row`; a better `best_metric` saves RUN/best (never one that
        is not finite, nor after a skipped step: run_folder.best_score), a worse one counts against patience."""
        self.last_eval = evaluate_on_main(self.model, self.job, self.ctx)
        metric = self.job.best_metric
        if metric and best_score(row | self.last_eval, metric) > self.best:
            self.best, self.since_best = self.last_eval[metric], 0
            self.ckpt.save(self.model, self.optimizer, self.scheduler, done, name="best", full=False)
        elif metric and self.ctx.main:
            self.since_best += 1
        return self.last_eval

    def log(self, row: dict) -> None:
        elapsed = time.perf_counter() - self.clock
        row["tokens_per_s"] = round(self.tokens_since / elapsed, 1) if elapsed else None
        self.tokens_since, self.clock = 0, time.perf_counter()
        self.metrics_log.write(row)
        self.bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s'] or 0:.0f}")

    def stops(self, done: int, last: bool, loss: float) -> bool:
        """Saves at --save-every and on a stop request (raising `Interrupted`); whether patience ran out. Fails
        (a BertforgeError) after NONFINITE_STEPS skipped steps in a row, or where the run would end or stop on one:
        nothing is saved after a skipped step."""
        args = self.args
        flags = self.ctx.all_reduce(torch.tensor([float(self.stop.requested),
                                                  float(bool(args.patience) and self.since_best >= args.patience)]))
        stop_now, patience_out = bool(flags[0]), bool(flags[1])
        if self.skipped >= NONFINITE_STEPS or (self.skipped and (last or stop_now or patience_out)):
            raise self.not_finite(done, loss)
        if (args.save_every and done % args.save_every == 0 and not self.skipped) or stop_now:
            self.ckpt.save(self.model, self.optimizer, self.scheduler, done)
        if stop_now:
            raise Interrupted(f"stopped at step {done}: checkpoint saved in {step_folder(args.out, done)}; "
                              "continue with --resume")
        if patience_out and not last:
            if self.ctx.main:
                log.info(f"stopped early at step {done}: {args.patience} evaluations without a better "
                         f"{self.job.best_metric} than {self.best:.4f}")
            return True
        return False

    def not_finite(self, done: int, loss: float) -> BertforgeError:
        """The error that stops a run whose last `skipped` steps had a loss or gradient that was not finite."""
        folder = latest_checkpoint(self.args.out)
        resumes = f"--resume continues from its last checkpoint before them, {folder}" if folder else \
            "it has no checkpoint before them to resume from: start it over with --overwrite"
        return BertforgeError(f"step {done}: the loss or its gradient has not been finite for {self.skipped} steps "
                              f"in a row (the last loss: {loss:.4g}); the run stops without saving; {resumes}")

    def close(self):
        self.bar.close()
        self.stop.restore()
        self.metrics_log.close()


def train_step(model, job: TrainingJob, args: TrainArgs, ctx: Dist, step: int, optimizer) -> dict:
    micro = split_rows(job.batch(step, ctx.rank, ctx.world), args.grad_accum)
    micro = [{k: v.to(ctx.device, non_blocking=True) for k, v in m.items()} for m in micro]
    terms = list(job.loss_units)
    local_units = torch.tensor([[float(job.loss_units[t](m)) for t in terms] for m in micro])
    total_units = ctx.all_reduce(local_units.sum(0))
    sums = torch.zeros(len(terms) + 1, dtype=torch.float64)  # weighted term means, then real tokens
    for i, batch in enumerate(micro):
        sync = i == len(micro) - 1 or ctx.world == 1
        with model.no_sync() if not sync else nullcontext():
            with torch.autocast(ctx.device.type, dtype=torch.bfloat16, enabled=args.bf16):
                out = model(**batch)
            weights = local_units[i] / total_units.clamp(min=1)
            loss = sum(out[t] * w for t, w in zip(terms, weights) if w > 0)
            (loss * ctx.world).backward()
        sums[:-1] += torch.tensor([float(out[t].detach()) * w if w > 0 else 0.0 for t, w in zip(terms, weights)],
                                  dtype=torch.float64)
        sums[-1] += float(batch["attention_mask"].sum()) if "attention_mask" in batch else 0.0
    # the norm of the gradients, which DDP made the same in every process (clipped only with --max-grad-norm)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm or math.inf)
    sums = ctx.all_reduce(sums)
    stats = {t: float(v) for t, v in zip(terms, sums[:-1])}
    stats["loss"] = sum(stats.values()) if "loss" not in stats else stats["loss"]
    stats["tokens"] = float(sums[-1])
    if math.isfinite(stats["loss"]) and math.isfinite(norm):
        optimizer.step()
    else:  # the weights and the optimizer's state stay as they were
        stats["skipped"] = True
    optimizer.zero_grad(set_to_none=True)
    return stats


def evaluate_on_main(model, job: TrainingJob, ctx: Dist) -> dict:
    result = {}
    if ctx.main:
        model.eval()
        with torch.no_grad():
            result = job.evaluate(model)
    if ctx.world > 1:
        dist.barrier()
    return result
