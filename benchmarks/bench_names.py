"""What a model's name costs a command once it is in the Hugging Face cache: `bertforge info` given the folder
against the same model given by its Hub name, with the Hub up and with HF_HUB_OFFLINE=1.

The Hub is tests/hub_server.py's, in this process on 127.0.0.1, serving the shared all-MiniLM-L6-v2 under its real
name (sentence-transformers/all-MiniLM-L6-v2), talked to by the real huggingface_hub client; the cache is a fresh
HF_HOME, filled by one download first (timed, `download_s`). Each command is its own process (`python -m bertforge
info ...`: the interpreter, the imports, the model's headers read); the three cases alternate, path, name, name
offline, path, ... (--reps each), and the figures are medians. Beside them, `core.hub.model_folder(name)` alone: what
resolving a cached name takes, online (one request: which commit main names now) and offline (none), in a process
of its own after one untimed call.

    python3 -m benchmarks.bench_names              # 9 runs of each case
    python3 -m benchmarks.bench_names --reps 5

The last line is `added_s=<the larger of name - path and offline name - path, seconds>`; the target is under 0.5.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import common

MODEL = common.SHARED / "models" / "all-MiniLM-L6-v2"
NAME = "sentence-transformers/all-MiniLM-L6-v2"
HUB_SETTINGS = ("HF_ENDPOINT", "HF_HOME", "HF_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE",
                "TRANSFORMERS_OFFLINE")


def command_s(model: str, env: dict) -> float:
    """Wall seconds of `bertforge info MODEL` in a process of its own (it must succeed)."""
    began = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "bertforge", "info", model], env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - began
    if done.returncode:
        raise SystemExit(f"bertforge info {model} failed:\n{done.stderr}")
    return seconds


RESOLVE = f"""
import statistics, time
from bertforge.core.hub import model_folder
model_folder({NAME!r})
times = []
for _ in range({{reps}}):
    began = time.perf_counter()
    model_folder({NAME!r})
    times.append(time.perf_counter() - began)
print(statistics.median(times))
"""


def resolve_s(reps: int, env: dict) -> float:
    """Median seconds of `model_folder(NAME)` on the cached name, in a process with `env` (after one untimed
    call, which imports huggingface_hub)."""
    done = subprocess.run([sys.executable, "-c", RESOLVE.format(reps=reps)], env=env, capture_output=True,
                          text=True, check=True)
    return float(done.stdout)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=9, help="runs of each command case")
    args = p.parse_args(argv)
    if not MODEL.is_dir():
        print(f"skipped: {MODEL} is absent (set BERTFORGE_SHARED to the shared folder)")
        print("added_s=nan")
        return
    from tests.hub_server import HubServer

    print(f"machine: {common.machine()}")
    with tempfile.TemporaryDirectory() as home, HubServer() as hub:
        hub.add(NAME, MODEL)
        online = {**{k: v for k, v in os.environ.items() if k not in HUB_SETTINGS}, "HF_ENDPOINT": hub.url,
                  "HF_HOME": home, "HF_HUB_CACHE": str(Path(home) / "hub"), "HF_HUB_DISABLE_PROGRESS_BARS": "1",
                  "PYTHONPATH": str(common.REPO)}
        offline = {**online, "HF_HUB_OFFLINE": "1"}
        download_s = command_s(NAME, online)  # the first run downloads (config, tokenizer, 87 MiB of weights)
        resolve = {"online": resolve_s(args.reps * 5, online), "offline": resolve_s(args.reps * 5, offline)}
        cases = {"path": (str(MODEL), online), "name": (NAME, online), "name offline": (NAME, offline)}
        times = {case: [] for case in cases}
        for _ in range(args.reps):
            for case, (model, env) in cases.items():
                times[case].append(command_s(model, env))
        requests = len(hub.requests)
    median = {case: statistics.median(t) for case, t in times.items()}
    print(f"bertforge info, {args.reps} runs each, interleaved; first download of {NAME}: {download_s:.2f} s "
          f"(the command with it); {requests} requests to the Hub in all")
    print(f"{'case':13} {'median_s':>8} {'added_s':>8}  runs (s)")
    for case, seconds in median.items():
        print(f"{case:13} {seconds:8.3f} {seconds - median['path']:8.3f}  "
              + ", ".join(f"{t:.2f}" for t in times[case]))
    print(f"model_folder({NAME!r}) of the cached name alone, after the import: online {resolve['online'] * 1e3:.1f} "
          f"ms, offline {resolve['offline'] * 1e3:.1f} ms (medians of {args.reps * 5})")
    print(f"added_s={max(median['name'], median['name offline']) - median['path']:.3f}")


if __name__ == "__main__":
    main()
