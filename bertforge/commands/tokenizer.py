"""`bertforge tokenizer train|encode`: a WordPiece vocabulary learnt from text files (wordpiece.train_vocab), or
how a text is tokenized."""

import time

from ..core.io import check_output
from ..core.flags import add_encoding_argument, add_revision_argument, count, old_spellings
from ..text.tokenizer import BertTokenizer
from ..text.wordpiece import train_vocab
from ..text.vocab import SPECIAL_TOKENS


def add_tokenizer_arguments(parser):
    sub = parser.add_subparsers(dest="tokenizer_command", required=True)
    train = sub.add_parser("train", help="train a WordPiece vocabulary on text files")
    old_spellings(train.add_argument("--input", "--files", dest="files", nargs="+", required=True, metavar="F",
                                     help="text files or folders (*.txt, no extension)"), "--files")
    train.add_argument("--vocab-size", type=count(len(SPECIAL_TOKENS) + 1), default=30522, help="entries at most")
    train.add_argument("--out", required=True, help="folder for vocab.txt, tokenizer.json, tokenizer_config.json")
    train.add_argument("--cased", action="store_true", help="keep case and accents (default: lower-case)")
    train.add_argument("--min-frequency", type=count(1), default=2, help="occurrences a piece needs to be learnt")
    add_encoding_argument(train)
    train.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")
    encode = sub.add_parser("encode", help="show how a text (or text pair) is tokenized")
    encode.add_argument("--vocab", required=True, help="vocab.txt, a checkpoint folder, or a Hub model's name "
                        "(org/name)")
    add_revision_argument(encode, "--vocab")
    case = encode.add_mutually_exclusive_group()
    case.add_argument("--cased", dest="do_lower_case", action="store_false", default=None, help="keep case")
    case.add_argument("--uncased", dest="do_lower_case", action="store_true", default=None, help="lower-case")
    encode.add_argument("--max-length", type=count(2), help="truncate the input to this many tokens")
    encode.add_argument("text")
    encode.add_argument("text_pair", nargs="?")


SAMPLES = ["The quick brown fox jumps over the lazy dog.", "Tokenization splits unfamiliar words into pieces."]


def run_tokenizer(args) -> int:
    if args.tokenizer_command == "train":
        check_output(args.out, "--out", inputs=args.files)
        t0 = time.time()
        tokenizer = train_vocab(args.files, args.vocab_size, args.out, lowercase=not args.cased,
                                min_frequency=args.min_frequency, encoding=args.encoding, progress=args.progress)
        print(f"trained a {tokenizer.vocab_size:,}-token {'cased' if args.cased else 'uncased'} vocabulary "
              f"in {time.time() - t0:.1f} s, saved to {args.out}")
        for text in SAMPLES:
            print(f"  {text}\n    -> {' '.join(tokenizer.tokenize(text))}")
        return 0

    tokenizer = BertTokenizer.from_pretrained(args.vocab, do_lower_case=args.do_lower_case, revision=args.revision)
    enc = tokenizer(args.text, args.text_pair, truncation=args.max_length is not None, max_length=args.max_length,
                    return_offsets_mapping=True)
    texts = (args.text, args.text_pair)
    tokens = tokenizer.convert_ids_to_tokens(enc["input_ids"])
    width = max(len(t) for t in tokens + ["token"])
    print(f"{'#':>4}  {'token':<{width}}  {'id':>6}  segment  offsets  text")
    for i, (token, id_, segment, (start, end)) in enumerate(
            zip(tokens, enc["input_ids"], enc["token_type_ids"], enc["offset_mapping"])):
        span = f"{start}:{end}" if end > start else "-"
        source = repr(texts[segment][start:end]) if end > start else ""
        print(f"{i:>4}  {token:<{width}}  {id_:>6}  {segment:>7}  {span:>7}  {source}")
    return 0
