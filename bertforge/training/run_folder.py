"""What a training run keeps in its folder: step checkpoints written atomically (a COMPLETE marker last) with
the state that exact resume needs, the run folder's guard against starting over an earlier run, and
metrics.jsonl (with its TensorBoard copy) and which of its rows may be best/."""

from __future__ import annotations

import json
import math
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist

from ..core.errors import BertforgeError
from ..core.io import atomic_path, read_text, remove_folder, replace_folder, write_text_atomic
from .options import TENSORBOARD_MISSING, TrainArgs

STATE_FILE = "training_state.pt"
COMPLETE = "COMPLETE"  # written last into a checkpoint folder: a folder without it is not a checkpoint


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


class Checkpointer:
    """Saves and restores a run's checkpoints: `job` is the loop's train.TrainingJob, `ctx` its train.Dist.
    A resumable checkpoint records the run's wall seconds by then, all its parts together: `started` is when this
    part began (time.perf_counter()), `earlier_s` what the parts before it ran (None: not recorded)."""

    def __init__(self, args: TrainArgs, job, ctx, started: float):
        self.args, self.job, self.ctx = args, job, ctx
        self.started, self.earlier_s = started, 0.0

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
                                "scheduler": scheduler.state_dict(), "rng": rngs,
                                "wall_s": (self.earlier_s or 0.0) + time.perf_counter() - self.started}, path)
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
        self.earlier_s = state.get("wall_s")  # absent from a checkpoint of a version before it was recorded
        return state["step"]


def best_score(row: dict, metric: str) -> float:
    """A metrics.jsonl row's `metric` as a candidate for RUN/best (higher is better): -inf where the row has none,
    where it is not finite, or where the row's step was skipped (its loss or gradient not finite): no best/ is
    saved from a model that does not train."""
    score = row.get(metric)
    return score if isinstance(score, (int, float)) and math.isfinite(score) and not row.get("skipped") \
        else -math.inf


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
