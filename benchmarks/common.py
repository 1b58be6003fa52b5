"""Shared helpers of the benchmarks: threads, matmul peak, memory, batches, interleaved timing, FLOPs and MFU.

Every benchmark runs bertforge and transformers in one process with the same thread count, interleaving their
timed repetitions (A B A B ...) because the machine is shared and drifts; figures are medians.
"""

import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

# Threads that wait at the end of each parallel region sleep instead of spinning. On this shared 2-vCPU
# machine, spinning OpenMP threads made a step up to 10 times slower whenever another process was running
# (both libraries alike); OMP_WAIT_POLICY=ACTIVE in the environment restores spinning. Read when torch loads
# OpenMP: each benchmark imports this module before torch.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import torch  # noqa: E402

THREADS = 2
REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("BERTFORGE_SHARED", REPO.parent / "shared"))


def setup(threads: int = THREADS) -> None:
    """Same thread count for both implementations; quiet transformers."""
    torch.set_num_threads(threads)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    try:
        import transformers
        transformers.logging.set_verbosity_error()
        transformers.utils.logging.disable_progress_bar()
    except ImportError:
        pass


def add_sentence_run_arguments(p) -> None:
    """The flags of the benchmarks that run pipelines over SST-2 dev sentences."""
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--limit", type=int, help="the first N dev sentences only")
    p.add_argument("--threads", type=int, default=THREADS)


def machine() -> str:
    """CPU model, cores, torch's vector ISA, thread count, torch and transformers versions."""
    model = platform.processor() or "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    import transformers
    return (f"{model}, {os.cpu_count()} cores, torch {torch.__version__} ({torch.backends.cpu.get_cpu_capability()}), "
            f"transformers {transformers.__version__}, {torch.get_num_threads()} threads, "
            f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', 'unset')}, "
            f"load average {os.getloadavg()[0]:.1f}")


# ---------------------------------------------------------------------------------------------------------
# Timing


def median(xs) -> float:
    return statistics.median(xs)


def interleaved(fns: dict, reps: int, warmup: int = 1) -> dict[str, list[float]]:
    """Seconds per call of each function, timed A B A B ...; `warmup` untimed rounds first."""
    for _ in range(warmup):
        for f in fns.values():
            f()
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, f in fns.items():
            start = time.perf_counter()
            f()
            times[name].append(time.perf_counter() - start)
    return times


def matmul_peak(dtype: torch.dtype = torch.float32, budget_s: float = 6.0) -> float:
    """Measured GFLOP/s of a square matmul with the current thread count (the best median over sizes).

    Sizes grow from 256 to 2048 while the budget lasts, so a dtype without native kernels (bf16 on a CPU
    without AVX-512 BF16 or AMX runs a scalar fallback) is measured small instead of taking minutes.
    """
    best, spent = 0.0, 0.0
    for n in (256, 512, 1024, 2048):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        start = time.perf_counter()
        a @ b
        first = time.perf_counter() - start
        spent += first
        reps = max(1, min(7, int((budget_s - spent) / max(first, 1e-6) / 2)))
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            a @ b
            times.append(time.perf_counter() - start)
        spent += sum(times)
        best = max(best, 2 * n ** 3 / median(times) / 1e9)
        if spent > budget_s / 2:
            break
    return best


# ---------------------------------------------------------------------------------------------------------
# Memory


def rss_mb() -> float:
    """Current resident set size of this process, MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2 ** 20


def peak_rss_mb() -> float:
    """Peak resident set size of this process so far, MB: VmHWM, the high-water mark of its own memory map.

    Not ru_maxrss: after fork + exec, Linux carries the parent's RSS at the fork into the child's ru_maxrss.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def run_child(module: str, args: list[str], timeout: float = 600) -> dict:
    """Run `python -m module args` in a fresh process (for a separate peak RSS); parse its last line k=v ..."""
    out = subprocess.run([sys.executable, "-m", module, *args], cwd=REPO, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"{module} {' '.join(args)} failed:\n{out.stderr[-3000:]}")
    last = out.stdout.strip().splitlines()[-1]
    return {k: float(v) for k, v in (item.split("=") for item in last.split())}


def child_memory_line(baseline_mb: float) -> str:
    return f"peak_rss_mb={peak_rss_mb():.0f} baseline_mb={baseline_mb:.0f}"


# ---------------------------------------------------------------------------------------------------------
# Batches


CLS, SEP, MASK, FIRST_ORDINARY = 101, 102, 103, 999  # bert-base-uncased vocabulary ids


def pretraining_batch(batch: int, length: int, realistic: bool, vocab_size: int = 30522, seed: int = 0,
                      mask_prob: float = 0.15) -> dict[str, torch.Tensor]:
    """A BertForPreTraining batch as Google's data gives it: [CLS] A [SEP] B [SEP], padded to `length`.

    realistic: row lengths uniform in 16..length (else every row is `length` long). 15% of the ordinary tokens
    are chosen for prediction (80% [MASK], 10% random, 10% kept), labels -100 elsewhere; NSP labels random.
    """
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(16, length + 1, (batch,), generator=g) if realistic else torch.full((batch,), length)
    ids = torch.zeros(batch, length, dtype=torch.long)
    types = torch.zeros_like(ids)
    for row, n in enumerate(lengths.tolist()):
        a = int(torch.randint(1, n - 3, (1,), generator=g))  # tokens of sentence A; B gets n - 3 - a
        ids[row, :n] = torch.randint(FIRST_ORDINARY, vocab_size, (n,), generator=g)
        ids[row, 0], ids[row, a + 1], ids[row, n - 1] = CLS, SEP, SEP
        types[row, a + 2:n] = 1
    mask = (ids != 0).long()
    ordinary = ids >= FIRST_ORDINARY
    chosen = ordinary & (torch.rand(ids.shape, generator=g) < mask_prob)
    labels = ids.masked_fill(~chosen, -100)
    r = torch.rand(ids.shape, generator=g)
    ids = torch.where(chosen & (r < 0.8), MASK, ids)
    ids = torch.where(chosen & (r >= 0.8) & (r < 0.9),
                      torch.randint(FIRST_ORDINARY, vocab_size, ids.shape, generator=g), ids)
    nsp = torch.randint(0, 2, (batch,), generator=g)
    return dict(input_ids=ids, token_type_ids=types, attention_mask=mask, labels=labels, next_sentence_label=nsp)


# ---------------------------------------------------------------------------------------------------------
# FLOPs


def nonembedding_params(model: torch.nn.Module) -> int:
    """Parameters outside the word, position and token-type embedding tables (the tied decoder included once,
    as the embedding: so it is not counted)."""
    seen, total = set(), 0
    for name, p in model.named_parameters():
        if id(p) in seen or any(k in name for k in ("word_embeddings", "position_embeddings",
                                                      "token_type_embeddings")):
            continue
        seen.add(id(p))
        total += p.numel()
    return total


def model_flops(n_params: int, attention_mask: torch.Tensor, hidden: int, layers: int, training: bool) -> float:
    """FLOPs of one pass over the real tokens: 2 N per token forward (6 N with backward), plus the attention
    products QK^T and AV over each row's real tokens, 4 L^2 H per layer forward (3 times that with backward)."""
    lengths = attention_mask.sum(1).double()
    tokens = float(lengths.sum())
    attention = 4 * float((lengths ** 2).sum()) * hidden * layers
    factor = 3 if training else 1
    return factor * (2 * n_params * tokens + attention)


def real_tokens(attention_mask: torch.Tensor) -> int:
    return int(attention_mask.sum())


def peaks_and_precisions(precisions: list[str], quick: bool, force_bf16: bool) -> tuple[dict, list[str]]:
    """Measure the matmul peak of each precision asked for; drop bf16 where the CPU only emulates it."""
    print(f"machine: {machine()}")
    peak = {"fp32": matmul_peak(torch.float32, budget_s=3.0 if quick else 6.0)}
    if "bf16" in precisions:
        peak["bf16"] = matmul_peak(torch.bfloat16, budget_s=1.5 if quick else 3.0)
    print("matmul peak, 2 threads: " + ", ".join(f"{k} {v:.1f} GFLOP/s" for k, v in peak.items()))
    if "bf16" in precisions and peak["bf16"] < peak["fp32"] and not force_bf16:
        print(f"bf16 skipped: this CPU has no native bf16 matmul (bf16 {peak['bf16']:.1f} vs fp32 "
              f"{peak['fp32']:.1f} GFLOP/s; torch's CPU capability {torch.backends.cpu.get_cpu_capability()}); "
              "--force-bf16 runs it anyway")
        precisions = [p for p in precisions if p != "bf16"]
    return peak, precisions
