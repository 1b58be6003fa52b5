"""`bertforge demo`: the whole pipeline on text every Python install carries, in a few minutes on a laptop.

The corpus is the prose of the standard library's docstrings (read from its source files with `ast`, nothing
imported, nothing downloaded) plus the reference-manual topics of `pydoc_data`: one document per module. The
demo trains a WordPiece vocabulary on it, builds pre-training data with held-out documents, pre-trains a tiny
BERT with the budget recipe (recipe.py) for a fixed time, reports held-out masked-LM accuracy (and NSP
accuracy, when the objective has it) against the trivial baselines, and fills in masked words, counting how
often the masked word is among the top 5. Each step prints the command that does it alone.
"""

import ast
import re
import sysconfig
import time
from pathlib import Path

from ..model.architectures.registry import load_config
from ..data.create import create_pretraining_data
from ..core.io import check_output, read_json_lines
from .objectives import OBJECTIVES
from ..core.flags import add_device_argument, count, old_spellings, positive_duration
from .recipe import resolve
from ..training.recipes import PRETRAIN
from ..text.tokenizer import BertTokenizer
from ..text.wordpiece import train_vocab

# The steps behind the README's held-out figure: a run on two idle cores made 2,307 in its 200 seconds (32.7%, Zen 3;
# BENCHMARKS.md, "Short rows"); a slower or busier machine makes fewer and ends lower, which the demo says.
README_STEPS = 2_300
SKIP_PARTS = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo", "__pycache__"}
CODE_LINE = re.compile(r"^\s*(>>>|\.\.\.|\$ |[-=~*]{3,}|:\w+:|\|)")

# Sentences in the corpus's register (not taken from it) and the words that count as a hit for their [MASK].
FILL_MASK_SENTENCES = [
    ("return [MASK] if the path is an existing directory.", {"true"}),
    ("raise an [MASK] if the file does not exist.", {"exception", "error"}),
    ("the default [MASK] is none.", {"value"}),
    ("read the whole [MASK] and return its contents as a string.", {"file"}),
    ("return a new [MASK] containing the items of the list.", {"list", "sequence"}),
    ("if the optional argument is not given, the [MASK] value is used.", {"default"}),
    ("convert the [MASK] to a string and return it.", {"object", "value", "argument"}),
    ("this [MASK] returns the number of items in the sequence.", {"function", "method"}),
]


def prose(docstring: str) -> str:
    """The paragraphs of a docstring that read as sentences: examples, tables and indented code dropped."""
    kept = []
    for paragraph in re.split(r"\n\s*\n", docstring):
        lines = paragraph.splitlines()
        if not lines or any(CODE_LINE.match(line) for line in lines) or lines[0].startswith((" ", "\t")):
            continue
        text = " ".join(line.strip() for line in lines)
        if len(text.split()) >= 5 and text[-1:] in ".:;!?)":
            kept.append(text)
    return "\n\n".join(kept)


def module_documents():
    """(name, text) for each standard-library module with enough prose, and each pydoc topic."""
    root = Path(sysconfig.get_paths()["stdlib"])
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if SKIP_PARTS & set(relative.parts) or relative.name.startswith("test_"):
            continue
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        if relative.parts == ("pydoc_data", "topics.py"):
            topics = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
            for i, topic in enumerate(topics):
                text = prose(topic)
                if len(text) > 500:
                    yield f"pydoc_topic_{i:03d}", text
            continue
        nodes = (n for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef)))
        text = "\n\n".join(p for p in (prose(ast.get_docstring(n) or "") for n in nodes) if p)
        if len(text) > 500:
            yield ".".join(relative.with_suffix("").parts), text


def write_corpus(folder) -> tuple[int, int]:
    """One raw-text file per document; returns (documents, characters)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    docs = chars = 0
    for name, text in module_documents():
        (folder / f"{name}.txt").write_text(text + "\n", encoding="utf-8")
        docs, chars = docs + 1, chars + len(text)
    return docs, chars


def fill_mask(model, tokenizer: BertTokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each [MASK] in `text`, the `top_k` most likely tokens and their probabilities."""
    import torch

    enc = tokenizer(text, return_tensors="pt").to(model.device)
    model.eval()
    with torch.no_grad():
        logits = model(**enc).prediction_logits[0]
    where_masked = (enc["input_ids"][0] == tokenizer.mask_token_id).nonzero().flatten()
    result = []
    for pos in where_masked:
        probs, ids = logits[pos].softmax(-1).topk(top_k)
        result.append(list(zip(tokenizer.convert_ids_to_tokens(ids.tolist()), probs.tolist())))
    return result


def step(title: str, command: str):
    print(f"\n== {title}\n   (alone: {command})", flush=True)


def run_demo(args) -> int:
    from .pretrain import pretrain  # here, not at the top: the command's --help does not load torch
    from ..inference.runtime import pick_device

    out = check_output(args.out, "--out")
    started = time.perf_counter()
    corpus, vocab, data, run = out / "corpus", out / "vocab", out / "data", out / "run"

    step("corpus: standard-library docstrings", f"bertforge demo --out {out} --corpus-only")
    docs, chars = write_corpus(corpus)
    print(f"   {docs} documents, {chars / 1e6:.1f} M characters -> {corpus}")
    if args.corpus_only:
        return 0

    step("WordPiece vocabulary",
         f"bertforge tokenizer train --input {corpus} --vocab-size {args.vocab_size} --out {vocab}")
    tokenizer = train_vocab([corpus], vocab_size=args.vocab_size, out_dir=vocab)
    print(f"   {tokenizer.vocab_size} pieces; 'tokenization' -> {tokenizer.tokenize('tokenization')}")

    device = str(pick_device(args.device))  # the command line's spelling, for the hints and pretrain
    recipe = resolve(args.recipe, {"batch_size": args.batch_size}, load_config(args.config).hidden_size, device)
    nsp = OBJECTIVES[recipe["objective"] or "mlm+nsp"].next_sentence  # None: the data's, pairs here
    kind = "sentence pairs" if nsp else "single segments filled with whole sentences (no NSP)"
    step(f"pre-training data: {kind}, masked afresh at training time",
         f"bertforge data create --input {corpus} --vocab {vocab} --out {data} --no-mask"
         f"{'' if nsp else ' --no-nsp'} --max-length {args.max_seq_length} --dupe-factor 1 "
         f"--eval-docs {args.eval_docs} --seed {args.seed}")
    create_pretraining_data([corpus], vocab, data, max_seq_length=args.max_seq_length, dupe_factor=1, mask=False,
                            nsp=nsp, eval_docs=args.eval_docs, seed=args.seed)

    step(f"pre-training a {args.config} BERT with the {args.recipe} recipe for {args.time_budget:g} s"
         f"{' (bf16 autocast: this device computes it in hardware)' if recipe['bf16'] else ''}",
         f"bertforge pretrain --data {data} --config {args.config} --out {run} --recipe {args.recipe} --batch-size "
         f"{recipe['batch_size']} --time-budget {args.time_budget:g}s --seed {args.seed} --device {device}")
    result = pretrain(str(data), str(run), config=args.config, steps=10**12, time_budget=args.time_budget,
                      batch_size=recipe["batch_size"], lr=recipe["lr"], seed=args.seed, dropout=recipe["dropout"],
                      objective=recipe["objective"], mask_prob=recipe["mask_prob"], recipe=args.recipe,
                      output_bias=recipe["output_bias"], bf16=recipe["bf16"],
                      schedule=recipe["schedule"], warmup=recipe["warmup"], eval_every=10**12,
                      save_every=10**12, log_every=10, overwrite=True, device=device, progress=args.progress)

    step("held-out documents (15% of their tokens masked)", f"tail -n 1 {run / 'metrics.jsonl'}")
    print(f"   masked-LM accuracy {result['eval_mlm_accuracy']:.1%}  (most frequent token: "
          f"{result['mlm_most_frequent_token_accuracy']:.1%}), perplexity {result['eval_mlm_perplexity']:.1f}")
    steps = read_json_lines(run / "metrics.jsonl")[-1]["step"]
    print(f"   after {steps:,} steps in {args.time_budget:g} s (the README's figure: about {README_STEPS:,} steps; a "
          f"slower or busier machine makes fewer{' and ends lower' if steps < 0.8 * README_STEPS else ''})")
    if "eval_nsp_accuracy" in result:
        print(f"   next-sentence accuracy {result['eval_nsp_accuracy']:.1%}  "
              f"(majority: {result['nsp_majority_accuracy']:.1%})")

    show_fill_mask(run / "final", device)
    print(f"\ndone in {time.perf_counter() - started:.0f} s; the model is in {run / 'final'}")
    return 0


def show_fill_mask(folder, device) -> None:
    """The model's top 5 for the demo's sentences, counting the hits."""
    # here, not at the top: the command's --help does not load torch
    from ..model.architectures.bert import BertForPreTraining

    sentence = FILL_MASK_SENTENCES[0][0]
    step("fill-mask (top 5; a hit when the masked word is among them)",
         f"python -c \"import bertforge; print(bertforge.pipeline('fill-mask', model='{folder}')('{sentence}'))\"")
    model = BertForPreTraining.from_pretrained(folder).to(device)
    tokenizer = BertTokenizer.from_pretrained(folder)
    hits = 0
    for sentence, answers in FILL_MASK_SENTENCES:
        guesses = fill_mask(model, tokenizer, sentence)[0]
        hit = any(token in answers for token, _ in guesses)
        hits += hit
        shown = ", ".join(f"{tok} ({p:.0%})" for tok, p in guesses)
        print(f"   {sentence}\n      -> {shown}   [{'hit' if hit else 'miss'}: {'/'.join(sorted(answers))}]")
    print(f"   {hits} of {len(FILL_MASK_SENTENCES)} sentences hold the masked word in their top 5")


def add_demo_arguments(p):
    p.add_argument("--out", default="runs/demo", help="working folder")
    p.add_argument("--corpus-only", action="store_true", help="only write the corpus, one file per document")
    p.add_argument("--config", default="tiny", help="model size")
    p.add_argument("--vocab-size", type=count(100), default=8000, help="WordPiece vocabulary entries")
    old_spellings(p.add_argument("--max-length", "--max-seq-length", dest="max_seq_length", metavar="N",
                                 type=count(5, 512), default=24, help="tokens per training row (short rows learn "
                                 "fastest in minutes, BENCHMARKS.md)"), "--max-seq-length")
    p.add_argument("--batch-size", type=count(1), default=32, help="rows per training step")
    p.add_argument("--eval-docs", type=count(1), default=20, help="documents held out")
    p.add_argument("--recipe", choices=tuple(PRETRAIN), default="budget", help="pre-training recipe")
    p.add_argument("--time-budget", type=positive_duration, default=200.0, metavar="DURATION",
                   help="pre-training time, evaluation and checkpoints excluded (default: 200s)")
    p.add_argument("--seed", type=count(0), default=0, help="random seed (data, pre-training)")
    p.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar (for logs)")
    add_device_argument(p)
