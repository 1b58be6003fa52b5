"""`bertforge data create`: pre-training data from text files (data/create.py), Google's flags and defaults."""

import argparse

from ..data.create import AUTO, AUTO_MIN_DOCS, AUTO_SHARE, MAX_SEQ_LENGTH, create_pretraining_data, format_report
from ..core.io import check_output
from ..core.flags import add_encoding_argument, add_revision_argument, count, old_spellings, open_fraction, share
from ..text.tokenizer import BertTokenizer


def _eval_docs(text: str) -> float | str:
    if text == AUTO:
        return AUTO
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of documents or a fraction below 1") from None
    if value < 0 or (value >= 1 and value != int(value)):
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number of documents or a fraction below 1")
    return value


def add_data_create_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``bertforge data create`` (Google's defaults)."""
    parser.add_argument("--input", nargs="+", required=True, metavar="F",
                        help="text files or folders (searched recursively for .txt/.raw/.text files)")
    parser.add_argument("--vocab", required=True, help="vocab.txt, a tokenizer/model folder, or a Hub model's name "
                        "(org/name)")
    add_revision_argument(parser, "--vocab")
    parser.add_argument("--out", required=True, help="output folder (shards, index.json, stats.json, eval/)")
    old_spellings(parser.add_argument("--max-length", "--max-seq-length", dest="max_seq_length", metavar="N",
                                      type=count(5, MAX_SEQ_LENGTH), default=128,
                                      help="tokens per instance, [CLS] and [SEP]s included"), "--max-seq-length")
    parser.add_argument("--max-predictions", type=count(1), default=20,
                        help="masked positions per instance at most")
    parser.add_argument("--masked-lm-prob", type=open_fraction, default=0.15,
                        help="share of the tokens masked")
    parser.add_argument("--short-seq-prob", type=share, default=0.1,
                        help="share of instances given a shorter random length")
    parser.add_argument("--dupe-factor", type=count(1), default=10,
                        help="passes over the corpus, each with new masks")
    parser.add_argument("--seed", type=count(0), default=12345, help="random seed")
    parser.add_argument("--whole-word-mask", action="store_true", help="mask all pieces of a word together")
    parser.add_argument("--no-mask", action="store_true",
                        help="write unmasked instances (the trainer masks dynamically)")
    parser.add_argument("--no-nsp", action="store_true",
                        help="single-segment rows filled to --max-length with consecutive sentences (RoBERTa's "
                             "FULL-SENTENCES; [SEP] between documents) instead of next-sentence pairs")
    parser.add_argument("--eval-docs", type=_eval_docs, default=AUTO, metavar="N",
                        help=f"hold out N documents (or this fraction, if below 1) for evaluation: one pass, "
                             f"written to OUT/eval, never used in training pairs; auto: {AUTO_SHARE * 100:g}%% of "
                             f"them, at least one, when there are {AUTO_MIN_DOCS} or more (0: none, as Google's)")
    add_encoding_argument(parser)
    parser.add_argument("--format", choices=("auto", "lines", "raw"), default="auto",
                        help="lines: one sentence per line, blank line between documents (Google's); "
                             "raw: running text, one document per file; auto: decide per file")
    parser.add_argument("--no-progress", dest="progress", action="store_false", help="no progress bars")


def run_data_create(args) -> None:
    check_output(args.out, "--out", inputs=args.input)
    stats = create_pretraining_data(
        args.input, BertTokenizer.from_pretrained(args.vocab, revision=args.revision), args.out,
        max_seq_length=args.max_seq_length,
        max_predictions=args.max_predictions, masked_lm_prob=args.masked_lm_prob, short_seq_prob=args.short_seq_prob,
        dupe_factor=args.dupe_factor, seed=args.seed, whole_word_mask=args.whole_word_mask, mask=not args.no_mask,
        eval_docs=args.eval_docs, encoding=args.encoding, fmt=args.format, nsp=not args.no_nsp, progress=args.progress)
    print(format_report(stats))
