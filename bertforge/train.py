"""The one training loop that pre-training and fine-tuning share.

A job (pre-training, or fine-tuning on a task) supplies a `TrainingJob`: the batch for a given step (a
deterministic function of the step, so that a resumed run sees exactly the data an uninterrupted one would),
how many units each loss term averages over, an evaluation, and how to save the model. The loop does the
rest: AdamW with warm-up and linear decay, gradient accumulation, clipping, bf16 autocast, DDP, a JSONL log,
progress with rate and ETA, TensorBoard event files if asked, atomic checkpoints, exact resume, and a clean stop
on SIGINT/SIGTERM.

Losses are combined so that the result does not depend on how a global batch is split across processes and
accumulation steps: each term (e.g. masked-LM, averaged over masked tokens) is weighted by its units in the
micro-batch over its units in the whole global batch.
"""

import json
import logging
import math
import os
import shutil
import signal
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol

import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from .io import atomic_path, exclusive, read_text, remove_folder, replace_folder, write_text_atomic
from .errors import BertforgeError
from .heap import bound_heap_growth
from .optim import TimeSchedule, make_optimizer, step_schedule
from .options import TENSORBOARD_MISSING, TrainArgs
from .resume import check_resume, write_record
from .runtime import warn_if_emulated_bf16

STATE_FILE = "training_state.pt"
COMPLETE = "COMPLETE"  # written last into a checkpoint folder: a folder without it is not a checkpoint

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


# ---------------------------------------------------------------------------------------------------------
# Checkpoints


def step_folder(out: Path, step: int) -> Path:
    return out / f"step-{step:07d}"


def latest_checkpoint(out: Path) -> Path | None:
    """The newest step checkpoint that was written to the end (its COMPLETE marker is written last)."""
    done = sorted(p for p in out.glob("step-*") if (p / COMPLETE).is_file() and (p / STATE_FILE).is_file())
    return done[-1] if done else None


EVENT_FILES = "events.out.tfevents.*"  # TensorBoard's, with --report-to tensorboard
RUN_FILES = ("metrics.jsonl", "eval_results.json", EVENT_FILES)  # with step-*/, final/ and best/: what a run leaves


def earlier_run(out: Path) -> list[str]:
    """What an earlier run left in `out`."""
    left = [p.name for p in (*out.glob("step-*"), out / "final", out / "best") if p.is_dir()]
    return sorted(left) + sorted(p.name for pattern in RUN_FILES for p in out.glob(pattern) if p.is_file())


def check_run_folder(args: "TrainArgs"):
    """--resume needs a checkpoint to resume; a new run does not start over an earlier one unless told to."""
    if args.resume:
        if latest_checkpoint(args.out) is not None:
            return
        if (args.out / "final").is_dir() and not args.keep_checkpoints:
            raise BertforgeError(f"{args.out}: nothing to resume: the run is complete (final/) and its step "
                                 "checkpoints were removed at its end (--keep-checkpoints keeps them)")
        raise BertforgeError(f"{args.out}: nothing to resume (no complete checkpoint with its training state); "
                             "start without --resume")
    left = earlier_run(args.out) if args.out.is_dir() else []
    if left and not args.overwrite:
        raise BertforgeError(f"{args.out}: holds an earlier run ({', '.join(left[:4])}); continue it with --resume, "
                             "or start over with --overwrite")
    for name in left:
        remove_folder(args.out / name) if (args.out / name).is_dir() else (args.out / name).unlink()


class Interrupted(KeyboardInterrupt):
    """SIGINT or SIGTERM stopped the run after it saved a checkpoint (the CLI exits 130 with this message)."""


class Checkpointer:
    def __init__(self, args: TrainArgs, job: TrainingJob, ctx: Dist):
        self.args, self.job, self.ctx = args, job, ctx

    def rng_states(self) -> list[dict]:
        state = {"torch": torch.get_rng_state()}
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state()
        if self.ctx.world == 1:
            return [state]
        states = [None] * self.ctx.world
        dist.all_gather_object(states, state)
        return states

    def save(self, model, optimizer, scheduler, step: int, name: str | None = None, full: bool = True):
        """Write a checkpoint folder atomically (rank 0); `full` adds what resuming needs."""
        rngs = self.rng_states() if full else None
        if not self.ctx.main:
            return
        final = self.args.out / name if name else step_folder(self.args.out, step)
        tmp = final.with_name(f".{final.name}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            self.job.save(model, tmp)
            if full:
                with atomic_path(tmp / STATE_FILE) as path:
                    torch.save({"step": step, "optimizer": optimizer.state_dict(),
                                "scheduler": scheduler.state_dict(), "rng": rngs}, path)
            write_text_atomic(tmp / COMPLETE, f"step {step}\n")
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)  # the last complete checkpoint stays as it was
            raise
        replace_folder(tmp, final)
        if full and name is None:
            for old in sorted(self.args.out.glob("step-*"))[:-self.args.keep]:
                remove_folder(old)

    def restore(self, model, optimizer, scheduler) -> int:
        """Load the latest complete checkpoint; returns the step to continue from (0 if none)."""
        folder = latest_checkpoint(self.args.out)
        if folder is None:
            return 0
        model.load_weights(folder)
        try:
            state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
        except Exception as e:
            raise BertforgeError(f"{folder / STATE_FILE}: cannot be read ({str(e).splitlines()[0]})") from None
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        if len(state["rng"]) != self.ctx.world:
            raise BertforgeError(f"{folder}: saved by {len(state['rng'])} processes, resumed with {self.ctx.world}")
        rng = state["rng"][self.ctx.rank]
        torch.set_rng_state(rng["torch"])
        if "cuda" in rng and torch.cuda.is_available():
            torch.cuda.set_rng_state(rng["cuda"])
        return state["step"]


# ---------------------------------------------------------------------------------------------------------
# Logging


class MetricsLog:
    """RUN/metrics.jsonl, one object per logged step; on resume, rows past the checkpoint are dropped (and a
    last line torn by a kill), and `rows` holds those kept. With `tensorboard`, each row's figures are also
    TensorBoard scalars (tagged by their metrics.jsonl keys) in event files beside it."""

    def __init__(self, path: Path, start_step: int, enabled: bool, tensorboard: bool = False):
        self.path, self.enabled, self.rows, self.board = path, enabled, [], None
        if not enabled:
            return
        if start_step and path.exists():
            lines = [line for line in read_text(path).split("\n") if line.strip()]
            for n, line in enumerate(lines, 1):
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    if n == len(lines):
                        break  # the line being written when the run was killed
                    raise BertforgeError(f"{path}:{n}: not valid JSON ({e.msg})") from None
                if row.get("step", 0) <= start_step:
                    self.rows.append(row)
        write_text_atomic(path, "".join(json.dumps(r) + "\n" for r in self.rows))
        if tensorboard:
            self.board = tensorboard_writer(path.parent, start_step)

    def write(self, row: dict):
        if not self.enabled:
            return
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(row) + "\n")
        if self.board is not None:
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.board.add_scalar(key, value, row["step"])
            self.board.flush()

    def close(self):
        if self.board is not None:
            self.board.close()


def tensorboard_writer(folder: Path, start_step: int):
    """A TensorBoard writer into the run folder; resumed at a checkpoint, it has TensorBoard drop the events an
    earlier writer logged past it, as metrics.jsonl drops its rows."""
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise BertforgeError(f"--report-to tensorboard {TENSORBOARD_MISSING}") from None
    return SummaryWriter(str(folder), purge_step=start_step + 1 if start_step else None)


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
    """Drop padding positions past the longest sequence from the tensors laid out as the attention mask."""
    mask = batch.get("attention_mask")
    if mask is None:
        return batch
    longest = int(mask.sum(-1).max())
    return {k: v[..., :longest] if v.shape == mask.shape else v for k, v in batch.items()}


def fit(model: nn.Module, job: TrainingJob, args: TrainArgs, ctx: Dist | None = None) -> dict:
    """Train `model` on `job`; returns the last evaluation (empty if none ran). A stop asked for by SIGINT or
    SIGTERM saves a checkpoint and raises `Interrupted`. The run folder is held by one process at a time."""
    ctx = ctx or Dist()
    with exclusive(args.out, "--out") if ctx.main else nullcontext():
        return _fit(model, job, args, ctx)


def _fit(model: nn.Module, job: TrainingJob, args: TrainArgs, ctx: Dist) -> dict:
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
    ckpt = Checkpointer(args, job, ctx)
    start = ckpt.restore(model, optimizer, scheduler) if args.resume else 0
    if ctx.main:  # the device the loop used (the field may say None: the default); resumed, a part added
        write_record(args, str(ctx.device), start, previous)
    metrics_log = MetricsLog(args.out / "metrics.jsonl", start, ctx.main, args.report_to == "tensorboard")
    trained = nn.parallel.DistributedDataParallel(model) if ctx.world > 1 else model
    stop = StopRequest()
    bar = tqdm(total=round(args.time_budget) if timed else args.steps,
               initial=round(scheduler.seconds) if timed else start, unit="s" if timed else "step",
               disable=not (args.progress and ctx.main), dynamic_ncols=True)
    last_eval = {}
    scores = [row[job.best_metric] for row in metrics_log.rows if job.best_metric in row]
    best = max(scores, default=-math.inf)
    since_best = len(scores) - 1 - scores.index(best) if scores else 0  # evaluations since the best (patience)
    tokens_since, clock = 0, time.perf_counter()
    done = start
    try:
        for step in range(start, args.steps):
            if timed and scheduler.finished:
                break
            model.train()
            began = time.perf_counter()
            stats = train_step(trained, job, args, ctx, step, optimizer)
            spent = time.perf_counter() - began
            if timed:  # every process steps by rank 0's time, so that all stop at the same step
                spent = float(ctx.all_reduce(torch.tensor([spent if ctx.main else 0.0], dtype=torch.float64)))
                scheduler.step(spent)
            else:
                scheduler.step()
            tokens_since += stats.pop("tokens")
            done = step + 1
            last = done == args.steps or (timed and scheduler.finished)
            row = {"step": done, **stats, "lr": scheduler.get_last_lr()[0]}
            if timed:
                row["train_seconds"] = round(scheduler.seconds, 3)
            evaluated = False
            if args.eval_every and (done % args.eval_every == 0 or last):
                last_eval, evaluated = evaluate_on_main(model, job, ctx), True
                row.update(last_eval)
                if job.best_metric and last_eval.get(job.best_metric, -math.inf) > best:
                    best, since_best = last_eval[job.best_metric], 0
                    ckpt.save(model, optimizer, scheduler, done, name="best", full=False)
                elif job.best_metric and ctx.main:
                    since_best += 1
            if done % args.log_every == 0 or last or evaluated:
                elapsed = time.perf_counter() - clock
                row["tokens_per_s"] = round(tokens_since / elapsed, 1) if elapsed else None
                tokens_since, clock = 0, time.perf_counter()
                metrics_log.write(row)
                bar.set_postfix(loss=f"{row['loss']:.3f}", tok_s=f"{row['tokens_per_s'] or 0:.0f}")
            bar.update(min(round(scheduler.seconds), bar.total) - bar.n if timed else 1)  # timed: whole seconds
            flags = ctx.all_reduce(torch.tensor([float(stop.requested),
                                                 float(bool(args.patience) and since_best >= args.patience)]))
            stop_now, patience_out = bool(flags[0]), bool(flags[1])
            if (args.save_every and done % args.save_every == 0) or stop_now:
                ckpt.save(model, optimizer, scheduler, done)
            if stop_now:
                raise Interrupted(f"stopped at step {done}: checkpoint saved in {step_folder(args.out, done)}; "
                                  "continue with --resume")
            if patience_out and not last:
                if ctx.main:
                    log.info(f"stopped early at step {done}: {args.patience} evaluations without a better "
                             f"{job.best_metric} than {best:.4f}")
                break
        if args.keep_checkpoints:
            ckpt.save(model, optimizer, scheduler, done)
        ckpt.save(model, optimizer, scheduler, done, name="final", full=False)
        if ctx.main and not args.keep_checkpoints:  # after final/: a kill before this still resumes
            for folder in args.out.glob("step-*"):
                remove_folder(folder)
    finally:
        bar.close()
        stop.restore()
        metrics_log.close()
    return last_eval


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
    if args.max_grad_norm:
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    sums = ctx.all_reduce(sums)
    stats = {t: float(v) for t, v in zip(terms, sums[:-1])}
    stats["loss"] = sum(stats.values()) if "loss" not in stats else stats["loss"]
    stats["tokens"] = float(sums[-1])
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
