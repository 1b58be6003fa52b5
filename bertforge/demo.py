"""`bertforge demo`: the whole pipeline on text every Python install carries, in a few minutes on a laptop.

The corpus is the prose of the standard library's docstrings (read from its source files with `ast`, nothing
imported, nothing downloaded) plus the reference-manual topics of `pydoc_data`: one document per module. The
demo trains a WordPiece vocabulary on it, builds pre-training data with held-out documents, pre-trains a tiny
BERT, reports held-out masked-LM and NSP accuracy against their trivial baselines, and fills in masked words.
Each step prints the command that does it alone.
"""

import ast
import re
import sysconfig
import time
from pathlib import Path

import torch

from .data.create import create_pretraining_data
from .model import BertForPreTraining
from .io import check_output
from .options import count, positive
from .pretrain import pretrain
from .tokenizer import BertTokenizer, train_vocab

SKIP_PARTS = {"test", "tests", "idlelib", "site-packages", "lib2to3", "turtledemo", "__pycache__"}
CODE_LINE = re.compile(r"^\s*(>>>|\.\.\.|\$ |[-=~*]{3,}|:\w+:|\|)")

FILL_MASK_SENTENCES = [
    "return a new [MASK] containing the items of the list.",
    "raise an [MASK] if the file does not exist.",
    "the [MASK] argument is the name of the module.",
    "this function returns the number of [MASK] in the string.",
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


@torch.no_grad()
def fill_mask(model, tokenizer: BertTokenizer, text: str, top_k: int = 5) -> list[list[tuple[str, float]]]:
    """For each [MASK] in `text`, the `top_k` most likely tokens and their probabilities."""
    enc = tokenizer(text, return_tensors="pt")
    model.eval()
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
    out = check_output(args.out, "--out")
    started = time.perf_counter()
    corpus, vocab, data, run = out / "corpus", out / "vocab", out / "data", out / "run"

    step("corpus: standard-library docstrings", f"bertforge demo --out {out} --corpus-only")
    docs, chars = write_corpus(corpus)
    print(f"   {docs} documents, {chars / 1e6:.1f} M characters -> {corpus}")
    if args.corpus_only:
        return 0

    step("WordPiece vocabulary",
         f"bertforge tokenizer train --files {corpus} --vocab-size {args.vocab_size} --out {vocab}")
    tokenizer = train_vocab([corpus], vocab_size=args.vocab_size, out_dir=vocab)
    print(f"   {tokenizer.vocab_size} pieces; 'tokenization' -> {tokenizer.tokenize('tokenization')}")

    step("pre-training data (masked afresh at training time)",
         f"bertforge data create --input {corpus} --vocab {vocab} --out {data} --no-mask --max-seq-length "
         f"{args.max_seq_length} --dupe-factor {args.dupe_factor} --eval-docs {args.eval_docs} --seed {args.seed}")
    create_pretraining_data([corpus], vocab, data, max_seq_length=args.max_seq_length, dupe_factor=args.dupe_factor,
                            mask=False, eval_docs=args.eval_docs, seed=args.seed)

    step(f"pre-training a {args.config} BERT for {args.steps} steps",
         f"bertforge pretrain --data {data} --config {args.config} --out {run} --steps {args.steps} "
         f"--batch-size {args.batch_size} --lr {args.lr} --seed {args.seed} --eval-every {args.steps // 4} "
         f"--save-every {args.steps}")
    result = pretrain(str(data), str(run), config=args.config, steps=args.steps, batch_size=args.batch_size,
                      lr=args.lr, warmup=0.1, seed=args.seed, eval_every=args.steps // 4, save_every=args.steps,
                      overwrite=True)

    step("held-out documents", f"bertforge plot {run}")
    print(f"   masked-LM accuracy {result['eval_mlm_accuracy']:.1%}  (most frequent token: "
          f"{result['mlm_most_frequent_token_accuracy']:.1%}), perplexity {result['eval_mlm_perplexity']:.1f}")
    print(f"   next-sentence accuracy {result['eval_nsp_accuracy']:.1%}  "
          f"(majority: {result['nsp_majority_accuracy']:.1%})")

    step("fill-mask",
         f"python -c \"import bertforge; bertforge.BertForPreTraining.from_pretrained('{run / 'final'}')\"")
    model = BertForPreTraining.from_pretrained(run / "final")
    tokenizer = BertTokenizer.from_pretrained(run / "final")
    for sentence in FILL_MASK_SENTENCES:
        guesses = ", ".join(f"{tok} ({p:.0%})" for tok, p in fill_mask(model, tokenizer, sentence)[0])
        print(f"   {sentence}\n      -> {guesses}")
    print(f"\ndone in {time.perf_counter() - started:.0f} s; the model is in {run / 'final'}")
    return 0


def add_demo_arguments(p):
    p.add_argument("--out", default="runs/demo", help="working folder (default runs/demo)")
    p.add_argument("--corpus-only", action="store_true", help="only write the corpus, one file per document")
    p.add_argument("--config", default="tiny")
    p.add_argument("--vocab-size", type=count(100), default=8000)
    p.add_argument("--max-seq-length", type=count(5, 512), default=64)
    p.add_argument("--dupe-factor", type=count(1), default=2)
    p.add_argument("--eval-docs", type=count(1), default=20)
    p.add_argument("--steps", type=count(4), default=600)
    p.add_argument("--batch-size", type=count(1), default=32)
    p.add_argument("--lr", type=positive, default=2e-3)
    p.add_argument("--seed", type=count(0), default=0)
