"""Pre-training step speed: bertforge vs transformers, one process, same config, data, batch and threads.

One step = forward + backward + gradient clipping (1.0) + AdamW step + zero_grad of BertForPreTraining with
masked-LM labels (15% of the ordinary tokens) and NSP labels. bertforge runs through its own loop body
(`bertforge.training.train.train_step`), transformers through the plain PyTorch loop its Trainer runs. Both start from
the same weights. Cases: (a) realistic row lengths uniform in 16..128 padded to 128, (b) full-length rows;
fp32, and bf16 autocast. Repetitions are interleaved (bf, hf, bf, hf ...) and reported as medians.

    python3 -m benchmarks.bench_pretrain --quick                  # mini, realistic lengths, fp32: ~2 min
    python3 -m benchmarks.bench_pretrain                          # mini and small, both cases: ~10 min
    python3 -m benchmarks.bench_pretrain --configs base           # base, both cases: ~15-20 min here

The last line is `ratio=<bertforge/transformers>` for mini, realistic lengths, fp32 (real tokens/s).
"""

import argparse
import sys
from pathlib import Path

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads

import torch  # noqa: E402,I001

class FixedBatchJob:
    """The bertforge training loop's view of one fixed batch."""

    loss_units = {"mlm_loss": lambda b: int((b["labels"] != -100).sum()),
                  "nsp_loss": lambda b: len(b["next_sentence_label"])}
    best_metric = None

    def __init__(self, batch):
        self._batch = batch

    def batch(self, step, rank, world):
        return dict(self._batch)


def build(config_name: str, seed: int = 0):
    """bertforge's and transformers' BertForPreTraining with the same weights, each with its AdamW."""
    import transformers

    from bertforge.model.architectures.config import BertConfig
    from bertforge.model.architectures.bert import BertForPreTraining
    from bertforge.training.optim import make_optimizer, param_groups

    torch.manual_seed(seed)
    config = BertConfig.from_name(config_name)
    ours = BertForPreTraining(config).train()
    hf_config = transformers.BertConfig(**{k: v for k, v in config.to_dict().items()
                                           if k not in ("id2label", "label2id")},
                                        attn_implementation="sdpa")
    theirs = transformers.BertForPreTraining(hf_config).train()
    assert theirs.config._attn_implementation == "sdpa"
    missing, unexpected = theirs.load_state_dict(ours.state_dict(), strict=False)
    assert not unexpected and all("decoder" in k for k in missing), (missing, unexpected)
    opt_ours = make_optimizer(ours, lr=1e-4)
    # The same AdamW (fused, decay off for biases and LayerNorm) for transformers, as its Trainer sets up.
    opt_theirs = torch.optim.AdamW(param_groups(theirs, 0.01), lr=1e-4, eps=1e-6, fused=True)
    return config, ours, theirs, opt_ours, opt_theirs


def bertforge_step(model, optimizer, batch, bf16: bool):
    from bertforge.training.train import Dist, TrainArgs, train_step

    args = TrainArgs(out=Path("."), steps=1, batch_size=len(batch["input_ids"]), lr=1e-4, bf16=bf16)
    job = FixedBatchJob(batch)
    return lambda: train_step(model, job, args, Dist(), 0, optimizer)


def transformers_step(model, optimizer, batch, bf16: bool):
    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(**batch)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return step


def steps_for(impl, config_name, batch, bf16):
    config, ours, theirs, opt_ours, opt_theirs = build(config_name)
    if impl == "bertforge":
        return config, ours, bertforge_step(ours, opt_ours, batch, bf16)
    return config, ours, transformers_step(theirs, opt_theirs, batch, bf16)


def child(impl: str, config_name: str, case: str, precision: str, batch_size: int, length: int, steps: int):
    """One implementation alone in this process: prints its peak RSS (for the memory column)."""
    common.setup()
    import transformers  # noqa: F401  (both children import both libraries: the same baseline)

    import bertforge.model.architectures.bert  # noqa: F401
    baseline = common.rss_mb()
    batch = common.pretraining_batch(batch_size, length, case == "realistic")
    config, ours, theirs, opt_ours, opt_theirs = build(config_name)
    if impl == "bertforge":
        del theirs, opt_theirs
        step = bertforge_step(ours, opt_ours, batch, precision == "bf16")
    else:
        del ours, opt_ours
        step = transformers_step(theirs, opt_theirs, batch, precision == "bf16")
    for _ in range(steps):
        step()
    print(common.child_memory_line(baseline))


def profile(args):
    """Where one implementation's step goes: the ops with the most self CPU time over 3 steps."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    config_name = (args.configs or "mini").split(",")[0]
    case = (args.cases or "realistic").split(",")[0]
    bf16 = args.precisions.split(",")[0] == "bf16"
    print(f"machine: {common.machine()}")
    print(f"profile: {args.profile}, {config_name}, {case}, {'bf16' if bf16 else 'fp32'}, "
          f"batch {args.batch} x {args.length}, 3 steps after 2 warm-up steps")
    batch = common.pretraining_batch(args.batch, args.length, case == "realistic")
    config, ours, theirs, opt_ours, opt_theirs = build(config_name)
    step = (bertforge_step(ours, opt_ours, batch, bf16) if args.profile == "bertforge"
            else transformers_step(theirs, opt_theirs, batch, bf16))
    step()
    step()
    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=40))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="mini, realistic lengths only, no memory runs")
    p.add_argument("--configs", default=None, help="comma-separated sizes (default mini,small; quick: mini)")
    p.add_argument("--cases", default=None, help="realistic and/or full (default both; quick: realistic)")
    p.add_argument("--precisions", default="fp32,bf16",
                   help="fp32 and/or bf16 (bf16 is skipped where the CPU has no native bf16 matmul, "
                        "unless --force-bf16)")
    p.add_argument("--force-bf16", action="store_true")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--length", type=int, default=128)
    p.add_argument("--steps", type=int, default=5, help="timed steps per implementation (median reported)")
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--memory", choices=("none", "headline", "all"), default=None,
                   help="peak RSS of each implementation in its own process (default: headline; quick: none)")
    p.add_argument("--profile", metavar="IMPL", choices=("bertforge", "transformers"),
                   help="instead of timing: torch.profiler over 3 steps of the first config and case, top ops")
    p.add_argument("--child", nargs=4, metavar=("IMPL", "CONFIG", "CASE", "PRECISION"), help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(*args.child, args.batch, args.length, args.warmup + 2)

    common.setup()
    import transformers  # noqa: F401

    if args.profile:
        return profile(args)
    configs = (args.configs or ("mini" if args.quick else "mini,small")).split(",")
    cases = (args.cases or ("realistic" if args.quick else "realistic,full")).split(",")
    precisions = args.precisions.split(",")
    memory = args.memory or ("none" if args.quick else "headline")
    peak, precisions = common.peaks_and_precisions(precisions, args.quick, args.force_bf16)
    print(f"batch {args.batch} x {args.length}, {args.steps} timed steps after {args.warmup} warm-up, interleaved")
    print(f"{'config':6} {'case':9} {'impl':23} {'step_s':>7} {'tok/s':>8} {'MFU':>6} {'peak_MB':>8}")

    headline = None
    for config_name in configs:
        config, ours, theirs, opt_ours, opt_theirs = build(config_name)
        n_params = common.nonembedding_params(ours)
        for case in cases:
            batch = common.pretraining_batch(args.batch, args.length, case == "realistic")
            tokens = common.real_tokens(batch["attention_mask"])
            flops = common.model_flops(n_params, batch["attention_mask"], config.hidden_size,
                                       config.num_hidden_layers, training=True)
            fns = {}
            for precision in precisions:
                bf16 = precision == "bf16"
                fns[("bertforge", precision)] = bertforge_step(ours, opt_ours, batch, bf16)
                fns[("transformers", precision)] = transformers_step(theirs, opt_theirs, batch, bf16)
            times = common.interleaved(fns, args.steps, args.warmup)
            med = {k: common.median(v) for k, v in times.items()}
            for (impl, precision), t in med.items():
                mem = ""
                if memory == "all" or (memory == "headline" and config_name == configs[0] and case == cases[0]
                                       and precision == "fp32"):
                    r = common.run_child("benchmarks.bench_pretrain",
                                         ["--child", impl, config_name, case, precision, "--batch", str(args.batch),
                                          "--length", str(args.length), "--warmup", "1"])
                    mem = f"{r['peak_rss_mb']:.0f}"
                print(f"{config_name:6} {case:9} {impl + ' ' + precision:23} {t:7.3f} {tokens / t:8.0f} "
                      f"{flops / t / (peak[precision] * 1e9):6.1%} {mem:>8}", flush=True)
            base = med[("transformers", "fp32")] if "fp32" in precisions else None
            for precision in precisions:
                r = med[("transformers", precision)] / med[("bertforge", precision)]
                print(f"{config_name:6} {case:9} ratio bertforge/transformers {precision}: {r:.2f}x")
            if "bf16" in precisions and base:
                print(f"{config_name:6} {case:9} ratio bertforge bf16 / transformers fp32: "
                      f"{base / med[('bertforge', 'bf16')]:.2f}x")
            if headline is None and "fp32" in precisions:
                headline = med[("transformers", "fp32")] / med[("bertforge", "fp32")]
        del ours, theirs, opt_ours, opt_theirs
    print(f"ratio={headline:.2f}" if headline is not None else "ratio=nan")


if __name__ == "__main__":
    sys.exit(main())
