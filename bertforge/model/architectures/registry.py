"""The architectures bertforge reads, each declared once (`ARCHITECTURES`, by config.json's `model_type`): its
config class, the model class of each head (`heads.HEADS` names the heads by BERT's classes; an architecture
gives its own class for each head it has), the state-dict prefix of its encoder, and how `--prune` ranks and cuts
it. Checkpoint loading, the pipelines, the task families, the server, export, `info` and distillation ask this
module, never `model_type` itself: a new architecture is its model module, its config dataclass and an entry here.
torch-free: classes are imported only when asked for."""

import importlib
import os
from dataclasses import dataclass, replace
from pathlib import Path

from ...core.errors import BertforgeError
from ...core.hub import model_folder
from ...core.io import read_model_json
from .config import SIZES, BertConfig, ConfigFile
from .family_configs import DistilBertConfig, ElectraConfig, MPNetConfig, RobertaConfig, XLMRobertaConfig
from .modernbert_config import ModernBertConfig
from .heads import HEADS, PART_NAMES, head_class


@dataclass(frozen=True)
class Architecture:
    model_type: str  # config.json's
    config: type  # its config dataclass (config.py)
    prefix: str  # the encoder's name in a head's state dict (transformers' base_model_prefix)
    # head (a HEADS name) -> "module:Class" of this architecture's model with that head; None: the HEADS registry's
    # own classes (BERT's, a head registered at run time included)
    classes: dict[str, str] | None
    layers: str  # the encoder layers' list in the state dict, under the prefix ("encoder.layer", "layers")
    # the encoder's top-level parts, under the prefix: what a bare encoder's checkpoint holds; a part within one
    # (MPNet's encoder.relative_attention_bias) is required as the top-level ones are, the layers aside
    encoder: tuple[str, ...]
    parts: dict[str, str]  # state-dict prefix of each part outside the encoder -> its plain name, for reports
    cut: str  # "module:Class" of how --prune ranks and cuts it (model/cut_rules.py)
    optional: tuple[str, ...] = ()  # encoder parts a checkpoint may lack, initialised fresh (BERT's pooler)
    segments: bool = True  # reads token_type_ids (BERT's sentence A / B); others ignore them
    causal: bool = False  # has left-to-right attention (config.json's is_decoder): what --objective ltr trains
    # checkpoint names of tensors the model holds once under another name (the masked-LM decoder tied to the token
    # table): dropped on reading, where the config ties them
    aliases: tuple[str, ...] = ()

    def aliases_of(self, config) -> tuple[str, ...]:
        return self.aliases if getattr(config, "tie_word_embeddings", True) else ()

    def cut_rules(self):
        module, name = self.cut.split(":")
        return getattr(importlib.import_module(module), name)

    def layer_count(self, keys) -> int:
        """How many encoder layers the tensor names (with or without the prefix) hold."""
        return len({part for part in map(self.layer_of, keys) if part is not None})

    def layer_of(self, key: str) -> str | None:
        """The encoder layer (its index, as named) tensor `key` belongs to; None outside the layers."""
        start = self.layers + "."
        key = key.removeprefix(self.prefix + ".")
        return key[len(start):].split(".")[0] if key.startswith(start) else None

    def encoder_parts(self, keys) -> list[str]:
        """The encoder's layers and the other parts a checkpoint must hold among tensor names `keys` (with or
        without the prefix), e.g. ["embeddings.word_embeddings", "layer 6"]: what a mismatch is reported by."""
        required = set(self.encoder) - {self.layers.split(".")[0]} - set(self.optional)
        layers, tables = set(), set()
        for key in keys:
            layer = self.layer_of(key)
            if layer is not None:
                layers.add(layer)
            elif any(f"{key.removeprefix(self.prefix + '.')}.".startswith(part + ".") for part in required):
                tables.add(key.removeprefix(self.prefix + ".").rsplit(".", 1)[0])
        ordered = sorted(layers, key=lambda layer: (not layer.isdigit(), int(layer) if layer.isdigit() else 0, layer))
        return sorted(tables) + [f"layer {layer}" for layer in ordered]

    def heads(self) -> list[str]:
        """The heads (HEADS names) this architecture has a class for."""
        return list(HEADS if self.classes is None else self.classes)


def classes(module: str, family: str) -> dict[str, str]:
    """Each head but pre-training's (which has a next-sentence head) -> the family's class named as transformers
    names it (BertForMaskedLM -> RobertaForMaskedLM), in `module`."""
    return {head: f"{module}:{family}{head.removeprefix('Bert')}" for head in HEADS if head != "BertForPreTraining"}


MODERNBERT, ROBERTA = "bertforge.model.architectures.modernbert", "bertforge.model.architectures.roberta"
CUTS = "bertforge.model.cut_rules"
ELECTRA = "bertforge.model.architectures.electra"
DISTILBERT = "bertforge.model.architectures.distilbert"
MPNET = "bertforge.model.architectures.mpnet"
ROBERTA_ARCHITECTURE = Architecture(
    "roberta", RobertaConfig, "roberta", classes(ROBERTA, "Roberta"), "encoder.layer",
    ("embeddings", "encoder", "pooler"), {"roberta.pooler": "pooler", "lm_head": "masked-LM head",
                                          "classifier": "classifier", "qa_outputs": "question-answering head"},
    f"{CUTS}:RobertaCut", optional=("pooler",), segments=False, aliases=("lm_head.decoder.weight",
                                                                            "lm_head.decoder.bias"))
ARCHITECTURES = {arch.model_type: arch for arch in (
    Architecture("bert", BertConfig, "bert", None, "encoder.layer", ("embeddings", "encoder", "pooler"), PART_NAMES,
                 f"{CUTS}:BertCut", optional=("pooler",), causal=True,
                 aliases=("cls.predictions.decoder.weight", "cls.predictions.decoder.bias")),
    Architecture("modernbert", ModernBertConfig, "model", classes(MODERNBERT, "ModernBert"), "layers",
                 ("embeddings", "layers", "final_norm"),
                 {"head": "prediction head", "decoder": "masked-LM decoder", "classifier": "classifier"},
                 f"{CUTS}:ModernBertCut", segments=False, aliases=("decoder.weight",)),
    ROBERTA_ARCHITECTURE,
    replace(ROBERTA_ARCHITECTURE, model_type="xlm-roberta", config=XLMRobertaConfig,
            classes=classes(ROBERTA, "XLMRoberta")),
    Architecture("electra", ElectraConfig, "electra", classes(ELECTRA, "Electra"), "encoder.layer",
                 ("embeddings", "embeddings_project", "encoder"),
                 {"generator_predictions": "masked-LM head", "generator_lm_head": "masked-LM head",
                  "discriminator_predictions": "discriminator head", "classifier": "classifier",
                  "qa_outputs": "question-answering head", "sequence_summary": "sequence summary"},
                 f"{CUTS}:ElectraCut", aliases=("generator_lm_head.weight",)),
    Architecture("distilbert", DistilBertConfig, "distilbert", classes(DISTILBERT, "DistilBert"), "transformer.layer",
                 ("embeddings", "transformer"), {"vocab_transform": "masked-LM head", "vocab_layer_norm":
                 "masked-LM head", "vocab_projector": "masked-LM head", "pre_classifier": "classifier",
                 "classifier": "classifier", "qa_outputs": "question-answering head"},
                 f"{CUTS}:DistilBertCut", segments=False, aliases=("vocab_projector.weight",)),
    Architecture("mpnet", MPNetConfig, "mpnet", classes(MPNET, "MPNet"), "encoder.layer",
                 ("embeddings", "encoder", "encoder.relative_attention_bias", "pooler"),
                 {"mpnet.pooler": "pooler", "lm_head": "masked-LM head", "classifier": "classifier",
                  "qa_outputs": "question-answering head"},
                 f"{CUTS}:MPNetCut", optional=("pooler",), segments=False,
                 aliases=("lm_head.decoder.weight", "lm_head.decoder.bias")),
)}
# The class names of the architectures beyond BERT's, as config.json's `architectures` lists them, to their heads.
HEAD_OF = {spec.split(":")[1]: head for arch in ARCHITECTURES.values() for head, spec in (arch.classes or {}).items()}
# Every architecture's encoder parts, which a bare encoder's checkpoint names without the prefix.
ENCODER_PARTS = {part for arch in ARCHITECTURES.values() for part in arch.encoder}
# Every architecture's parts outside the encoder, by state-dict prefix, in the order reports list them.
PARTS = {prefix: name for arch in ARCHITECTURES.values() for prefix, name in arch.parts.items()}


def architecture(config: ConfigFile) -> Architecture:
    return ARCHITECTURES[config.model_type]


def read_config(path) -> ConfigFile:
    """A config.json of any architecture bertforge reads, as that architecture's config dataclass."""
    path = Path(path)
    if not os.path.lexists(path):
        raise BertforgeError(f"{path}: config file not found")
    d = read_model_json(path)
    model_type = d.get("model_type", "bert")
    if model_type not in ARCHITECTURES:
        raise BertforgeError(f"{path}: model_type is {model_type!r}; bertforge reads "
                             f"{', '.join(repr(t) for t in ARCHITECTURES)}")
    return ARCHITECTURES[model_type].config.from_file_dict(path, d)


def load_config(name_or_path: str) -> ConfigFile:
    """A named BERT size (config.SIZES), a config.json file of any architecture, a folder holding one, or a Hub
    model's name (org/name: its config.json)."""
    if name_or_path in SIZES:
        return BertConfig.from_name(name_or_path)
    try:
        path = model_folder(name_or_path, weights=False)
    except BertforgeError as e:
        raise BertforgeError(f"{name_or_path}: neither a model size ({', '.join(SIZES)}) nor a config.json file "
                             f"or a folder holding one, nor a Hub model ({str(e).removeprefix(f'{name_or_path}: ')})"
                             ) from None
    return read_config(path / "config.json" if path.is_dir() else path)


def model_class(head: str, config: ConfigFile) -> type:
    """The model class of `config`'s architecture with this head (a HEADS name)."""
    arch = architecture(config)
    if head not in arch.heads():
        raise BertforgeError(f"{arch.model_type} has no {head.removeprefix('Bert')} head in bertforge")
    if arch.classes is None:
        return head_class(head)
    module, name = arch.classes[head].split(":")
    return getattr(importlib.import_module(module), name)


def pretraining_class(config, next_sentence: bool = False):
    """The class pre-training trains for `config`'s architecture: BERT's with the next-sentence head; one without
    (ModernBERT), its masked-LM model, for the objectives that need no next-sentence head."""
    arch = architecture(config)
    if "BertForPreTraining" in arch.heads():
        return model_class("BertForPreTraining", config)
    if next_sentence:
        raise BertforgeError(f"a {arch.model_type} model has no next-sentence head: pre-train it with --objective "
                             "mlm (the budget recipe's)")
    return model_class("BertForMaskedLM", config)


def head_of(class_name: str) -> str | None:
    """The head (a HEADS name) of a class config.json's `architectures` names, of any architecture."""
    return class_name if class_name in HEADS else HEAD_OF.get(class_name)


def heads_of(config: ConfigFile) -> list[str]:
    """The heads (HEADS names) of the classes config.json's `architectures` lists, of any architecture."""
    return [head for head in map(head_of, config.extra.get("architectures") or []) if head is not None]
