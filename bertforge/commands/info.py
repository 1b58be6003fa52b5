"""`bertforge info DIR`: what a checkpoint folder holds, from its config and the weights' headers alone.

Only the safetensors headers are read (names, shapes, dtypes), so this is instant even for large models.
"""

from math import prod
from pathlib import Path

from ..model.architectures.config import BertConfig
from ..core.errors import BertforgeError
from ..core.flags import add_revision_argument
from ..core.hub import hub_origin, model_folder
from ..core.io import has_model_file, read_model_json, read_model_text
from ..model.formats.sentence_folder import read_sentence_folder
from ..model.formats.sparse_folder import read_sparse_folder
from ..model.formats.sizes import read_header
from ..text.tokenizer import looks_uncased

# What each hidden_act computes: the two GELUs differ by up to 5e-4 per unit, enough to move a checkpoint's outputs.
ACTIVATIONS = {
    "gelu": "exact GELU (erf), as the paper",
    "gelu_new": "tanh approximation of GELU, as Google's modeling.py",
    "gelu_pytorch_tanh": "tanh approximation of GELU, as Google's modeling.py",
}


def add_info_arguments(parser):
    parser.add_argument("dir", metavar="MODEL", help="checkpoint folder (config.json, model.safetensors), or a Hub "
                        "model's name (org/name)")
    add_revision_argument(parser)


def vocabulary(folder: Path, config: BertConfig) -> str:
    """Its size, and whether vocab.txt (when present) agrees with the embedding table."""
    vocab = folder / "vocab.txt"
    if not has_model_file(vocab):
        return f"{config.vocab_size} tokens"
    lines = len(read_model_text(vocab).splitlines())
    agrees = "as vocab.txt" if lines == config.vocab_size else f"but vocab.txt has {lines}"
    return f"{config.vocab_size} tokens ({agrees})"


def vocabulary_case(folder: Path) -> str:
    """"cased" or "uncased", and where that came from: tokenizer_config.json, tokenizer.json, or vocab.txt."""
    pipeline = folder / "tokenizer.json"
    kind = (read_model_json(pipeline).get("model") or {}).get("type") if has_model_file(pipeline) else None
    if kind not in (None, "WordPiece"):
        return f"{kind} (tokenizer.json), its own normalizer"
    for name, find in (("tokenizer_config.json", lambda d: d.get("do_lower_case")),
                       ("tokenizer.json", lambda d: (d.get("normalizer") or {}).get("lowercase"))):
        path = folder / name
        if has_model_file(path):
            lower = find(read_model_json(path))
            if lower is not None:
                return f"{'uncased' if lower else 'cased'} ({name})"
    vocab = folder / "vocab.txt"
    if has_model_file(vocab):
        if looks_uncased(read_model_text(vocab).splitlines()):
            return "uncased (guessed: vocab.txt has no capitals)"
        return "cased (guessed: vocab.txt has capitals)"
    return "unknown (no tokenizer files in the folder)"


def describe(folder: Path) -> list[str]:
    """The lines `bertforge info` prints."""
    from ..model.architectures.registry import PARTS
    from ..model.formats.checkpoint import part_name

    folder = Path(folder)
    if not folder.is_dir():
        raise BertforgeError(f"{folder}: no such checkpoint folder")
    config, header, files = checked_header(folder)
    dtypes = sorted({dtype for _, dtype in header.values()})
    counts = {"embeddings": 0, "encoder": 0, "heads": 0}
    for key, (shape, _) in header.items():
        group = "heads" if part_name(key) in PARTS.values() else "embeddings" if key.startswith("embeddings.") \
            else "encoder"
        counts[group] += prod(shape)
    heads = head_names(config, header)
    architecture = ", ".join(config.extra.get("architectures", [])) or "not stated in config.json"
    size = sum(f.stat().st_size for f in files)
    sparse = read_sparse_folder(folder)
    declared = None if sparse else read_sentence_folder(folder)
    lines = [
        f"folder:        {folder}",
        f"architecture:  {architecture}",
        f"sizes:         {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
        f"{config.num_attention_heads} heads, feed-forward {config.intermediate_size}, "
        f"{config.max_tokens} positions, vocabulary {config.vocab_size}",
        f"parameters:    {sum(counts.values()):,} total: embeddings {counts['embeddings']:,}, "
        f"encoder {counts['encoder']:,}, heads {counts['heads']:,}",
        f"heads:         {', '.join(heads) or 'none (the bare encoder)'}",
        f"activation:    {config.hidden_act}"
        + (f" ({ACTIVATIONS[config.hidden_act]})" if config.hidden_act in ACTIVATIONS else ""),
        f"weights:       {', '.join(f.name for f in files)}, {', '.join(dtypes)}, {size / 2**20:.1f} MiB",
        f"vocabulary:    {vocabulary(folder, config)}, {vocabulary_case(folder)}",
    ]
    layer_types = getattr(config, "layer_types", None)
    if layer_types:
        full = [str(i) for i, kind in enumerate(layer_types) if kind == "full_attention"]
        lines.insert(3, f"attention:     global in layer{'s' if len(full) > 1 else ''} {', '.join(full)}, a window of "
                        f"{config.window} tokens each side elsewhere; rotary positions (bases "
                        f"{config.rope_theta('full_attention'):g} / {config.rope_theta('sliding_attention'):g})")
    if declared:
        lines.append(f"embedding:     sentence-transformers folder: {declared.summary()}")
    if sparse:
        lines.append(f"embedding:     SPLADE (sentence-transformers SparseEncoder folder): {sparse.summary()}")
    origin = hub_origin(folder)
    if origin:
        lines.insert(1, f"hub:           {origin['repo_id']}, commit {origin['commit']}")
    return lines


def checked_header(folder: Path) -> tuple:
    """The folder's config, its weights' header (names without the prefix, the reference's second names for the
    tied decoder gone) checked as every command checks the encoder's, and its weight files."""
    from ..model.architectures.registry import model_class, read_config
    from ..model.formats import google_checkpoint  # here, not at the top: the command's --help does not load torch
    from ..model.formats.checkpoint import check_header, normalise_keys, weight_files

    google = google_checkpoint.find(folder)
    if google is not None:  # Google's TensorFlow checkpoint: the index alone is read
        config, header, files = google_checkpoint.header(google)
    else:
        config = read_config(folder / "config.json")
        files = weight_files(folder)
        if files[0].suffix == ".bin":
            raise BertforgeError(f"{files[0]}: info reads safetensors headers only; convert a pickle you trust "
                                 f"first (`bertforge convert {folder} OUT`)")
        header = read_header(files)
    check_header(model_class("BertModel", config), config, folder, ignore_mismatched_sizes=False)
    return config, normalise_keys(header, config, wants_prefix=False), files


def head_names(config, header: dict) -> list[str]:
    """The heads the weights hold, in the order reports list them: untrained ones marked, a classifier with its
    outputs (and labels, where the config names as many)."""
    from ..model.architectures.registry import PARTS
    from ..model.formats.checkpoint import part_name

    parts = {part_name(key) for key in header}
    untrained = config.extra.get("untrained_heads") or []
    heads = [part + (" (untrained)" if part in untrained else "") for part in dict.fromkeys(PARTS.values())
             if part in parts]
    if "classifier" in parts:
        last = "classifier.out_proj.bias" if "classifier.out_proj.bias" in header else "classifier.bias"  # RoBERTa's
        outputs = header[last][0][0]
        labels = f": {', '.join(config.id2label.values())}" if config.num_labels == outputs else ""
        heads[heads.index("classifier")] = f"classifier ({outputs} output{'s' if outputs != 1 else ''}{labels})"
    return heads


def run_info(args) -> int:
    print("\n".join(describe(model_folder(args.dir, args.revision))))
    return 0
