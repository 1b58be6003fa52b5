"""Inference speed (forward only, eval, no_grad): bertforge vs transformers on the all-MiniLM-L6-v2 checkpoint.

Cases, each run by both libraries on the same token ids, interleaved (bf, hf, bf, hf ...), medians:
- sst2:        SST-2 dev sentences in file order, batch 64, each batch padded to its longest row (the headline);
- sst2-sorted: the same sentences in length-sorted batches, bertforge's own practice (inference.run_model), compared
               with transformers on the file-order batches, and with transformers on the same sorted batches;
- squad:       SQuAD v1.1 dev windows of up to 384 tokens (bertforge.inference.answer_spans.featurize, stride 128),
               batch 16, padded per batch.
fp32, and bf16 autocast where the CPU has native bf16 matmuls (else skipped with the measured figures).

    python3 -m benchmarks.bench_inference --quick
    python3 -m benchmarks.bench_inference

The last line is `ratio=<bertforge/transformers>` (real tokens/s) for SST-2, fp32, the same batches.
"""

import argparse
import csv
import sys

from benchmarks import common  # first: it sets the OpenMP wait policy before torch loads

import torch  # noqa: E402,I001

MODEL = common.SHARED / "models" / "all-MiniLM-L6-v2"
SST2_DEV = common.SHARED / "data" / "glue" / "SST-2" / "dev.tsv"
SQUAD_DEV = common.SHARED / "data" / "squad" / "dev-v1.1.json"


def sst2_dev_rows(limit=None) -> list[dict]:
    """The SST-2 dev file's rows: {"sentence", "label"}."""
    with open(SST2_DEV, encoding="utf-8", newline="") as f:
        rows = list(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE))
    return rows[:limit]


def sst2_sentences(limit=None) -> list[str]:
    return [row["sentence"] for row in sst2_dev_rows(limit)]


def batches_of(rows: list[dict], batch_size: int) -> list[dict]:
    """Padded tensors (per batch, to its longest row) from rows of input_ids / token_type_ids lists."""
    out = []
    for start in range(0, len(rows), batch_size):
        part = rows[start:start + batch_size]
        length = max(len(r["input_ids"]) for r in part)
        batch = {k: torch.zeros(len(part), length, dtype=torch.long)
                 for k in ("input_ids", "token_type_ids", "attention_mask")}
        for i, r in enumerate(part):
            n = len(r["input_ids"])
            batch["input_ids"][i, :n] = torch.tensor(r["input_ids"])
            batch["token_type_ids"][i, :n] = torch.tensor(r["token_type_ids"])
            batch["attention_mask"][i, :n] = 1
        out.append(batch)
    return out


def sst2_rows(tokenizer, limit=None) -> list[dict]:
    enc = tokenizer(sst2_sentences(limit), truncation=True, max_length=128)
    return [{"input_ids": a, "token_type_ids": b} for a, b in zip(enc["input_ids"], enc["token_type_ids"])]


def squad_rows(tokenizer, windows: int) -> list[dict]:
    from bertforge.inference.answer_spans import featurize
    from bertforge.tasks.squad import read_squad

    examples = read_squad(SQUAD_DEV)[:windows]  # at least one window each
    feats = featurize(examples, tokenizer, 384, 128, 64)[:windows]
    return [{"input_ids": w.input_ids.tolist(), "token_type_ids": w.token_type_ids.tolist()} for w in feats]


def load_model(impl: str):
    if impl == "bertforge":
        from bertforge.model.architectures.bert import BertModel

        return BertModel.from_pretrained(MODEL).eval()
    import transformers

    model = transformers.BertModel.from_pretrained(MODEL, attn_implementation="sdpa").eval()
    assert model.config._attn_implementation == "sdpa"
    return model


def run_pass(model, batches, bf16: bool):
    def run():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            for b in batches:
                model(**b)
    return run


def check_agree(ours, theirs, batch):
    with torch.inference_mode():
        a = ours(**batch).last_hidden_state
        b = theirs(**batch).last_hidden_state
    real = batch["attention_mask"].bool()
    diff = (a[real] - b[real]).abs().max().item()
    assert diff < 1e-3, f"the two implementations disagree by {diff}"


def child(impl: str, case: str, precision: str, limit):
    """One implementation alone in this process, one pass of a case: prints its peak RSS."""
    common.setup()
    import transformers  # noqa: F401

    import bertforge.model.architectures.bert  # noqa: F401
    from bertforge.text.tokenizer import BertTokenizer

    baseline = common.rss_mb()
    tokenizer = BertTokenizer.from_pretrained(MODEL)
    rows = sst2_rows(tokenizer, limit) if case == "sst2" else squad_rows(tokenizer, limit)
    batches = batches_of(rows, 64 if case == "sst2" else 16)
    model = load_model(impl)
    run_pass(model, batches, precision == "bf16")()
    print(common.child_memory_line(baseline))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="128 sentences, 16 SQuAD windows, 3 repetitions")
    p.add_argument("--sentences", type=int, default=None, help="SST-2 dev sentences (default all 872)")
    p.add_argument("--windows", type=int, default=None, help="SQuAD windows (default 128; quick 32)")
    p.add_argument("--reps", type=int, default=None, help="timed passes per implementation (default 5; quick 3)")
    p.add_argument("--precisions", default="fp32,bf16")
    p.add_argument("--force-bf16", action="store_true")
    p.add_argument("--memory", choices=("none", "headline"), default="headline")
    p.add_argument("--child", nargs=3, metavar=("IMPL", "CASE", "PRECISION"), help=argparse.SUPPRESS)
    p.add_argument("--limit", type=int, default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return child(*args.child, args.limit)

    common.setup()
    if not MODEL.is_dir() or not SST2_DEV.is_file():
        print(f"skipped: {MODEL} or {SST2_DEV} is absent (set BERTFORGE_SHARED to the shared folder)")
        print("ratio=nan")
        return 0
    from bertforge.text.tokenizer import BertTokenizer

    sentences = args.sentences or (128 if args.quick else None)
    windows = args.windows or (16 if args.quick else 128)
    reps = args.reps or (3 if args.quick else 5)
    precisions = args.precisions.split(",")
    peak, precisions = common.peaks_and_precisions(precisions, args.quick, args.force_bf16)

    tokenizer = BertTokenizer.from_pretrained(MODEL)
    ours, theirs = load_model("bertforge"), load_model("transformers")
    n_params = common.nonembedding_params(ours)
    config = ours.config
    rows = sst2_rows(tokenizer, sentences)
    sorted_rows = sorted(rows, key=lambda r: len(r["input_ids"]))
    cases = {"sst2": batches_of(rows, 64), "sst2-sorted": batches_of(sorted_rows, 64)}
    if SQUAD_DEV.is_file():
        cases["squad"] = batches_of(squad_rows(tokenizer, windows), 16)
    else:
        print(f"squad skipped: {SQUAD_DEV} is absent")
    check_agree(ours, theirs, cases["sst2"][0])
    for name, batches in cases.items():
        real = sum(int(b["attention_mask"].sum()) for b in batches)
        cells = sum(b["attention_mask"].numel() for b in batches)
        print(f"{name}: {sum(len(b['input_ids']) for b in batches)} rows in {len(batches)} batches, "
              f"{real} real tokens, {1 - real / cells:.0%} padding")
    print(f"{reps} timed passes after 1 warm-up, interleaved")
    print(f"{'case':12} {'impl':23} {'pass_s':>7} {'tok/s':>8} {'MFU':>6} {'peak_MB':>8}")

    headline = None
    for precision in precisions:
        bf16 = precision == "bf16"
        for name in ("sst2", "squad"):
            if name not in cases:
                continue
            batches = cases[name]
            fns = {("bertforge", name): run_pass(ours, batches, bf16),
                   ("transformers", name): run_pass(theirs, batches, bf16)}
            if name == "sst2":
                fns[("bertforge", "sst2-sorted")] = run_pass(ours, cases["sst2-sorted"], bf16)
                fns[("transformers", "sst2-sorted")] = run_pass(theirs, cases["sst2-sorted"], bf16)
            times = common.interleaved(fns, reps, 1)
            med = {k: common.median(v) for k, v in times.items()}
            for (impl, case), t in med.items():
                mask_list = [b["attention_mask"] for b in cases[case]]
                tokens = sum(int(m.sum()) for m in mask_list)
                flops = sum(common.model_flops(n_params, m, config.hidden_size, config.num_hidden_layers, False)
                            for m in mask_list)
                mem = ""
                if args.memory == "headline" and case == "sst2" and precision == "fp32":
                    r = common.run_child("benchmarks.bench_inference",
                                         ["--child", impl, "sst2", precision] +
                                         (["--limit", str(sentences)] if sentences else []))
                    mem = f"{r['peak_rss_mb']:.0f}"
                print(f"{case:12} {impl + ' ' + precision:23} {t:7.3f} {tokens / t:8.0f} "
                      f"{flops / t / (peak[precision] * 1e9):6.1%} {mem:>8}", flush=True)
            ratio = med[("transformers", name)] / med[("bertforge", name)]
            print(f"{name:12} ratio bertforge/transformers {precision}, same batches: {ratio:.2f}x")
            if name == "sst2":
                best = med[("transformers", "sst2")] / med[("bertforge", "sst2-sorted")]
                both = med[("transformers", "sst2-sorted")] / med[("bertforge", "sst2-sorted")]
                print(f"{'sst2-sorted':12} ratio bertforge sorted / transformers file order {precision}: {best:.2f}x; "
                      f"both sorted: {both:.2f}x")
                if precision == "fp32":
                    headline = ratio
    print(f"ratio={headline:.2f}" if headline is not None else "ratio=nan")


if __name__ == "__main__":
    sys.exit(main())
