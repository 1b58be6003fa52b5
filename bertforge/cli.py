"""The `bertforge` command. Each command lives beside the code that does its work; this file only wires them."""

import argparse
import importlib
import logging
import sys

from .core.version import __version__
from .core.errors import BertforgeError, os_error_message
from .core.hub import progress_bars
from .training.options import apply_args_file

# command -> (module, help); the module defines add_<name>_arguments(parser) and run_<name>(args). Building a
# command's parser imports its module but not torch (the work's imports are inside functions): --help is instant.
COMMANDS = {
    "demo": ("pretraining.demo", "the whole pipeline on a built-in corpus: vocabulary, data, pre-training, fill-mask"),
    "tokenizer": ("commands.tokenizer", "train a WordPiece vocabulary, or encode text"),
    "data": ("commands.data", "build pre-training data (sharded token files) from text"),
    "pretrain": ("pretraining.pretrain", "pre-train with masked LM + next sentence prediction"),
    "plot": ("pretraining.plot", "draw a run's loss and accuracy curves as a PNG"),
    "finetune": ("finetuning.finetune",
                 "fine-tune on a task: GLUE, SQuAD, CoNLL NER, multiple choice, or your own data"),
    "distill": ("finetuning.distill",
                "distil a fine-tuned teacher into a small student on a task (soft targets, augmentation), or a "
                "sentence-embedding teacher's vectors into one (distill embeddings)"),
    "evaluate": ("finetuning.evaluate", "score a fine-tuned model on a task's data"),
    "suite": ("finetuning.suite", "fine-tune one model on several tasks x seeds (or a grid) and report mean ± sd"),
    "predict": ("finetuning.predict",
                "predictions of a fine-tuned model: a task's submission file, or on your own text"),
    "squad-split": ("commands.squad_split", "split a SQuAD file by article into train and dev files"),
    "features": ("commands.features", "hidden states of chosen layers, per token, word or sentence"),
    "embed": ("commands.embed", "embed a corpus into shards of vectors (any precision), resumable"),
    "search": ("commands.search", "the passages of an embedded corpus nearest a query; retrieval metrics with qrels"),
    "index": ("commands.index", "an approximate nearest-neighbour index (faiss or usearch) over an embedded corpus, "
              "for search --index"),
    "info": ("commands.info", "describe a checkpoint folder: sizes, parameters, heads, vocabulary"),
    "convert": ("commands.convert",
                "rewrite a trusted pytorch_model.bin folder, or Google's TF checkpoint, as safetensors"),
    "export": ("commands.convert", "write a checkpoint as ONNX (fp32, and int8 with --int8), checked against PyTorch"),
    "serve": ("serving.serve", "an HTTP JSON API for a checkpoint: classify, embed, fill-mask, ner, qa (FastAPI)"),
    "push": ("commands.push", "upload a model or a run's model to the Hugging Face Hub, with a model card"),
}
# Modules whose command function is named after the module rather than the command.
FUNCTION_NAMES = {"data": "data_create"}
# (command, its first word) -> (module, function name): a command of its own under another's name, with its own flags
SUBCOMMANDS = {("distill", word): ("finetuning.distill_embeddings", "distill_embeddings")
               for word in ("embeddings", "sentence-embedding")}


def command_functions(command: str, word: str | None = None):
    """The command's add_..._arguments and run_... (a subcommand's where `word`, its first word, names one)."""
    module_name, name = SUBCOMMANDS.get((command, word)) or (
        COMMANDS[command][0], FUNCTION_NAMES.get(command, command.replace("-", "_")))
    module = importlib.import_module(f"bertforge.{module_name}")
    return getattr(module, f"add_{name}_arguments"), getattr(module, f"run_{name}")


def shown_default(value) -> str:
    """A default as a user would type it: 3 not 3.0, lists as space-separated words."""
    if isinstance(value, (list, tuple)):
        return " ".join(map(shown_default, value))
    return f"{value:g}" if isinstance(value, float) else str(value)


class HelpFormatter(argparse.HelpFormatter):
    """Every option's help ends with its default, unless it has none (None, an off switch) or the help already
    says what the default is (e.g. "default: cuda when present"). Old spellings kept for compatibility
    (`options.old_spellings`) are accepted but not shown."""

    def _get_help_string(self, action):
        text = action.help or ""
        default = action.default
        if (not action.option_strings or default is None or isinstance(default, bool) or default == argparse.SUPPRESS
                or (isinstance(default, (list, tuple, str)) and not default) or "default" in text):
            return text
        return f"{text} (default: {shown_default(default).replace('%', '%%')})".lstrip()

    def _format_action_invocation(self, action):
        hidden = getattr(action, "old_spellings", ())
        if not hidden:
            return super()._format_action_invocation(action)
        shown = argparse.Action([s for s in action.option_strings if s not in hidden], action.dest,
                                nargs=action.nargs, metavar=action.metavar)
        return super()._format_action_invocation(shown)


class Parser(argparse.ArgumentParser):
    """argparse, with its errors on one line (the usage is one --help away), every default in --help, and the
    arguments of an --args-file as the defaults of the command line (options.apply_args_file)."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        args = sys.argv[1:] if args is None else list(args)
        self.typed = {a.split("=", 1)[0] for a in args}
        if self.typed & {"-h", "--help"} and hasattr(self, "narrow_help"):  # e.g. `finetune sst2 --help`
            self.narrow_help([a for a in args if not a.startswith("-")])
        try:
            apply_args_file(self, args)
        except BertforgeError as e:
            self.error(str(e))
        return super().parse_known_args(args, namespace)

    def error(self, message):
        for action in self._actions:  # an option with old spellings is named as it was typed
            if getattr(action, "old_spellings", ()):
                typed = next((s for s in action.option_strings if s in getattr(self, "typed", ())),
                             action.option_strings[0])
                message = message.replace("/".join(action.option_strings), typed)
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser(command: str | None, word: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command` (None: of none), whose first word is `word`."""
    parser = Parser(prog="bertforge", description="BERT from raw text to a served model.")
    parser.add_argument("--version", action="version", version=f"bertforge {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (_, help_text) in COMMANDS.items():
        own = {"prog": f"bertforge {name} {word}"} if name == command and (name, word) in SUBCOMMANDS else {}
        p = sub.add_parser(name, help=help_text, description=help_text, **own)
        if name == command:  # import only the module of the command being run
            command_functions(name, word)[0](p if name != "data" else _data_subcommand(p))
    return parser


def _data_subcommand(parser):
    return parser.add_subparsers(dest="data_command", required=True).add_parser(
        "create", help=COMMANDS["data"][1], description=COMMANDS["data"][1])


def unpaired_surrogate(argv) -> int | None:
    """The position of the first argument that is not valid Unicode (bytes that were not UTF-8), if any."""
    for i, arg in enumerate(argv, 1):
        try:
            arg.encode("utf-8")
        except UnicodeEncodeError:
            return i
    return None


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    bad = unpaired_surrogate(argv)
    if bad is not None:
        shown = argv[bad - 1].encode("utf-8", "backslashreplace").decode()
        print(f"bertforge: error: argument {bad} ({shown}) is not valid UTF-8 text", file=sys.stderr)
        return 2
    command = next((a for a in argv if not a.startswith("-")), None)
    word = argv[argv.index(command) + 1] if command in COMMANDS and argv.index(command) + 1 < len(argv) else None
    parser = build_parser(command if command in COMMANDS else None, word)
    parser.set_defaults(command_line=["bertforge", *argv])  # what a run records as its command
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # --help (0) or a bad flag (2), already printed
        return e.code
    if args.command is None:
        parser.print_help()
        return 0
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    try:
        with progress_bars(getattr(args, "progress", True)):  # a model named on the Hub downloads with bars
            return command_functions(args.command, word)[1](args) or 0
    except BertforgeError as e:
        print(f"bertforge: error: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a full disk, a read-only folder, a file that vanished
        print(f"bertforge: error: {os_error_message(e)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # Ctrl-C, or train.Interrupted after a run saved its checkpoint
        print(f"bertforge: {e or 'interrupted'}", file=sys.stderr)
        return 130
