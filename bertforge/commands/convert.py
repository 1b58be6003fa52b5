"""A checkpoint in another format: `bertforge convert` (a trusted pickled checkpoint, or Google's TensorFlow
checkpoint, rewritten as a safetensors folder) and `bertforge export onnx`. The work is `checkpoint.py`'s,
`google_checkpoint.py`'s and `export.py`'s, imported when the command runs: --help does not load torch."""

import argparse
import shutil
from pathlib import Path

from ..core.errors import BertforgeError
from ..core.io import atomic_path, has_model_file, model_file, new_model_folder
from ..core.flags import ONNX_OPSETS, add_revision_argument, onnx_opset
from ..core.hub import model_folder
from ..model.formats.sentence_folder import keep_sentence_folder


def add_convert_arguments(parser):
    parser.add_argument("src", help="checkpoint folder holding pytorch_model.bin (from a source you trust), or "
                        "Google's TensorFlow checkpoint (bert_config.json, *.ckpt.*, vocab.txt), or a Hub model's "
                        "name (org/name: its safetensors, else its pytorch_model.bin)")
    add_revision_argument(parser, "SRC")
    parser.add_argument("out", help="folder to write (config, model.safetensors and the tokenizer files)")
    parser.add_argument("--do-lower-case", action=argparse.BooleanOptionalAction, default=None,
                        help="for a Google checkpoint: its casing, when neither its name nor its vocabulary says")
    parser.add_argument("--hidden-act", choices=("gelu", "gelu_new"), default=None,
                        help="for a Google checkpoint: its `gelu` as the exact erf form (gelu, as the first release "
                        "of Google's modeling.py) or the tanh approximation (gelu_new, its current code; default)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace OUT when it holds another model (as a whole: none of its files are kept)")


def run_convert(args) -> int:
    """Read the pickle with torch.load(weights_only=True) once, on the user's say-so, and write safetensors;
    or rewrite a Google checkpoint in the Hugging Face layout."""
    from safetensors.torch import save_file

    from ..model.formats import google_checkpoint
    from ..model.architectures.registry import architecture, read_config
    from ..model.formats.checkpoint import SAFETENSORS, read_weights

    out, overwrite = Path(args.out), getattr(args, "overwrite", False)
    if google_checkpoint.find(args.src) is not None:
        print(convert_google(Path(args.src), out, getattr(args, "do_lower_case", None),
                             getattr(args, "hidden_act", None), overwrite=overwrite))
        return 0
    src = model_folder(args.src, getattr(args, "revision", None), trust_pickle=True)  # converting is trusting it
    with new_model_folder(out, "OUT", overwrite, src) as tmp:
        weights, file = read_weights(src, trust_pickle=True)
        check_vocabulary(src, weights, file)
        for name in ("config.json", "vocab.txt", "tokenizer.json", "tokenizer_config.json",
                     "special_tokens_map.json"):
            if has_model_file(src / name, src):
                shutil.copyfile(model_file(src / name, src), tmp / name)
        keep_sentence_folder(src, tmp)  # the same model in another format: its pooling goes with it
        config = read_config(src / "config.json")
        aliases = architecture(config).aliases_of(config)
        tensors = {k: v.contiguous() for k, v in weights.items() if k not in aliases}
        with atomic_path(tmp / SAFETENSORS) as path:
            save_file(tensors, path, metadata={"format": "pt"})
    print(f"{file} -> {out / SAFETENSORS} ({len(tensors)} tensors)")
    return 0


def check_vocabulary(src: Path, weights: dict, file: Path) -> None:
    """The folder's vocabulary (when it has one) fits the embedding table of its weights."""
    from ..text.tokenizer import BertTokenizer

    rows = next((v.shape[0] for k, v in weights.items() if k.endswith("word_embeddings.weight")), None)
    if rows is None or not any((src / name).is_file() for name in ("vocab.txt", "tokenizer.json")):
        return
    ids = max(BertTokenizer.from_pretrained(src).get_vocab().values()) + 1  # also against its config.json
    if ids > rows:
        raise BertforgeError(f"{src}: the vocabulary has {ids} tokens, more than the {rows} rows of the embedding "
                             f"table in {file.name}; convert it with the model's own vocabulary")


def add_export_arguments(p):
    sub = p.add_subparsers(dest="format", required=True)
    onnx = sub.add_parser("onnx", help="ONNX with dynamic batch and sequence axes, checked by ONNX Runtime")
    onnx.add_argument("model", help="a checkpoint folder, or a Hub model's name (org/name)")
    add_revision_argument(onnx)
    onnx.add_argument("out", help="folder to write: model.onnx, onnx.json, config and tokenizer files")
    onnx.add_argument("--int8", action="store_true", help="also model_int8.onnx, dynamically quantised")
    onnx.add_argument("--opset", type=onnx_opset, default=17,
                      help=f"ONNX operator set version, {ONNX_OPSETS[0]} to {ONNX_OPSETS[1]}")
    onnx.add_argument("--overwrite", action="store_true",
                      help="replace OUT when it holds another model (as a whole: none of its files are kept)")


def run_export(args) -> int:
    from ..inference.export import ONNX_FILES, export_onnx

    folder = model_folder(args.model, getattr(args, "revision", None))
    report = export_onnx(folder, args.out, args.int8, args.opset, getattr(args, "overwrite", False))
    for name, difference in report.items():
        verdict = ("within 1e-4 of PyTorch: the same model" if name == ONNX_FILES[False] else
                   "int8 weights and activations: outputs differ by design; check its accuracy on your data "
                   "(SST-2 dev kept 82.45% of fp32's 82.68%: BENCHMARKS.md, int8 against fp32)")
        print(f"{Path(args.out) / name}: max |ONNX Runtime - PyTorch| = {difference:.2e} ({verdict})")
    if report[ONNX_FILES[False]] > 1e-4:
        raise BertforgeError(f"the fp32 export differs from PyTorch by {report[ONNX_FILES[False]]:.2e} (over 1e-4)")
    return 0


def convert_google(src, out, do_lower_case: bool | None = None, hidden_act: str | None = None,
                   overwrite: bool = False) -> str:
    """Write a Google checkpoint as a Hugging Face-layout folder (config.json, model.safetensors, tokenizer
    files with the checkpoint's casing), replacing `out` as a whole (a folder holding a model: only with
    `overwrite`); the line to print (what was skipped is logged while loading)."""
    from ..model.formats.google_checkpoint import architecture, find, read_config
    from ..model.architectures.heads import head_class
    from ..model.formats.tf_checkpoint import TFCheckpoint
    from ..text.tokenizer import BertTokenizer

    prefix = find(src)
    with new_model_folder(out, "OUT", overwrite, prefix.parent) as tmp:
        checkpoint = TFCheckpoint(prefix)
        tokenizer = BertTokenizer.from_pretrained(prefix.parent, do_lower_case=do_lower_case)
        model_class = head_class(architecture(checkpoint))
        config = read_config(prefix, checkpoint, gelu=hidden_act or "gelu_new")
        model = model_class.from_pretrained(prefix, config=config)
        model.save_pretrained(tmp, tokenizer)
    casing = "uncased" if tokenizer.do_lower_case else "cased"
    return (f"{checkpoint.index} -> {Path(out)} ({model_class.__name__}, hidden_act {model.config.hidden_act}, "
            f"{casing})")
