"""`bertforge features`: the hidden states of texts read from a file (features.py does the work), written as
.npy, .npz or .jsonl."""

import argparse
import re
import sys
import time

from ..core.errors import BertforgeError
from ..inference.features import COMBINES, LEVELS, WORD_VECTORS, check_output_format, extract_features, write_features
from ..core.io import check_output, read_text
from ..core.flags import add_device_argument, add_revision_argument, count
from ..model.formats.sentence_folder import POOLINGS

PAIR_SEPARATOR = re.compile(r"^(.*) \|\|\| (.*)$")  # Google's extract_features input format


def read_texts(path, pair: bool = False) -> list:
    """One text per line of a file (or stdin for "-"), stripped; with `pair`, "A ||| B" lines become (A, B)."""
    name = "<stdin>" if str(path) == "-" else str(path)
    data = sys.stdin.read() if str(path) == "-" else read_text(path)
    lines = data.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    lines = [line.strip() for line in lines]
    if not any(lines):
        raise BertforgeError(f"{name}: no text (empty input)")
    if not pair:
        return lines
    out = []
    for line in lines:
        m = PAIR_SEPARATOR.match(line)
        out.append((m.group(1), m.group(2)) if m else (line, None))
    return out


def _layer_list(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise BertforgeError(f"--layers: expected comma-separated integers such as -1,-2,-3,-4, not {text!r}") \
            from None


def add_features_arguments(parser):
    # "-1,-2,-3,-4" is a value, not an option: let this parser read such lists as it reads negative numbers.
    parser._negative_number_matcher = re.compile(r"^-\d+(,\s*-?\d+)*$|^-\d*\.\d+$")
    parser.add_argument("--model", required=True, help="checkpoint folder (config.json, weights, vocab.txt), or a "
                        "Hub model's name (org/name)")
    add_revision_argument(parser)
    parser.add_argument("--input", required=True, help="text file, one text per line, or - for stdin")
    parser.add_argument("--out", required=True,
                        help="output file: .npz or .jsonl (token/word level), .npy, .npz or .jsonl (sentence level)")
    parser.add_argument("--pair", action="store_true", help='lines are text pairs "A ||| B" (Google\'s format)')
    parser.add_argument("--layers", help="hidden states to use, 0 = embeddings, -1 = last layer (default: -1 at "
                        "sentence level on a sentence-transformers folder, else -1,-2,-3,-4)")
    parser.add_argument("--combine", choices=COMBINES, default="concat", help="how the layers are combined")
    parser.add_argument("--level", choices=LEVELS, default="token", help="a vector per token, per word or per text")
    parser.add_argument("--pooling", choices=POOLINGS, help="sentence level: how token vectors make one, as "
                        "sentence-transformers (default: the folder's declared pooling, else mean)")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction,
                        help="sentence level: unit-length vectors (default: where the folder declares a Normalize)")
    parser.add_argument("--word-vector", choices=WORD_VECTORS, default="first",
                        help="word level: the first piece's vector (as the paper's NER) or the mean of the pieces")
    parser.add_argument("--max-length", type=count(3),
                        help="window length in tokens (default: the folder's max_seq_length, else 512 or the "
                             "model's positions)")
    parser.add_argument("--stride", type=count(1),
                        help="longer texts: each window starts this many tokens past the last (default: half a window)")
    parser.add_argument("--batch-size", type=count(1), default=32, help="windows per forward pass")
    parser.add_argument("--bf16", action="store_true", help="run the encoder under bfloat16 autocast")
    add_device_argument(parser)
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bar")


def run_features(args) -> int:
    t0 = time.time()
    check_output_format(args.out, args.level)
    check_output(args.out, "--out", folder=False, inputs=[args.input])
    layers = _layer_list(args.layers)
    texts = read_texts(args.input, pair=args.pair)
    features = extract_features(
        args.model, texts, layers=layers, combine=args.combine, level=args.level,
        pooling=args.pooling, word_vector=args.word_vector, max_length=args.max_length, stride=args.stride,
        batch_size=args.batch_size, bf16=args.bf16, device=args.device, normalize=args.normalize,
        progress="features" if args.progress else None, revision=args.revision)
    out = write_features(features, args.out)
    rows = {"token": "tokens", "word": "words"}.get(args.level)
    shape = f"[{len(features)}, {features.dim}]" if rows is None else \
        f"{len(features)} arrays of [{rows}, {features.dim}]"
    used = ",".join(map(str, features.layers))
    print(f"{len(features)} texts -> {args.level}-level features {shape} (layers {used}, {args.combine})"
          f" written to {out} in {time.time() - t0:.1f} s")
    return 0
