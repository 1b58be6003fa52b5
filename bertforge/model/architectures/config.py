"""Model sizes, as a dataclass that reads and writes Hugging Face `config.json`."""

import dataclasses
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from ...core.errors import BertforgeError
from ...core.io import read_model_json, write_json
from ...text.vocab import MAX_VOCAB

# (layers, hidden, heads) from the paper and Google's 24 small models; feed-forward is 4H.
SIZES = {
    "tiny": (2, 128, 2),
    "mini": (4, 256, 4),
    "small": (4, 512, 8),
    "medium": (8, 512, 8),
    "base": (12, 768, 12),
    "large": (24, 1024, 16),
}

ACTIVATIONS = ("gelu", "gelu_new", "gelu_pytorch_tanh", "relu", "silu")

# Upper bounds on the sizes a config may ask for, far beyond any released BERT (checked before anything is
# allocated, so that a careless or hostile config.json is an error, not memory taken until the machine gives out).
LIMITS = {
    "vocab_size": MAX_VOCAB,
    "hidden_size": 1 << 14,
    "embedding_size": 1 << 14,
    "num_hidden_layers": 1 << 8,
    "num_attention_heads": 1 << 10,
    "intermediate_size": 1 << 16,
    "max_position_embeddings": 1 << 17,
    "type_vocab_size": 1 << 10,
    "num_labels": 1 << 17,
}
MAX_PARAMETERS = 1 << 32  # about 4.3 billion: 17 GB of float32 weights


def check_size(name: str, value) -> int:
    """`value` as the config field `name`: a whole number from 1 to its LIMITS bound."""
    return Rule("whole", 1, LIMITS[name]).check(name, value)


@dataclass(frozen=True)
class Rule:
    """What one config field may hold: whole numbers or numbers within [low, high] (`low` itself excluded where
    `above`), one of `choices`, true or false, an object or a list; `optional`: null too."""

    kind: str  # "whole", "number", "choice", "flag", "object", "list"
    low: float | None = None
    high: float | None = None
    choices: tuple = ()
    optional: bool = False
    above: bool = False

    def check(self, name: str, value):
        """`value` if it is what the field holds, else a one-line error naming the field, the value and the rule."""
        if value is None and self.optional:
            return value
        if self.kind == "choice" and not self.holds(value):
            raise BertforgeError(f"{name} {value!r:.80} is not one of {', '.join(self.choices)}")
        if not self.holds(value):
            raise BertforgeError(f"{name} must be {self.describe()}, not {value!r:.80}")
        if self.kind == "whole" and self.high is not None and value > self.high:
            raise BertforgeError(f"{name} {value} is over {self.high:,}, more than any BERT model has")
        return value

    def holds(self, value) -> bool:
        if self.kind == "choice":
            return isinstance(value, str) and value in self.choices
        if self.kind in ("flag", "object", "list"):
            return isinstance(value, {"flag": bool, "object": dict, "list": list}[self.kind])
        number = int if self.kind == "whole" else (int, float)
        if isinstance(value, bool) or not isinstance(value, number) or not math.isfinite(value):
            return False
        low_ok = self.low is None or (value > self.low if self.above else value >= self.low)
        return low_ok and (self.kind == "whole" or self.high is None or value <= self.high)

    def describe(self) -> str:
        if self.kind in ("flag", "object", "list"):
            return {"flag": "true or false", "object": "an object", "list": "a list"}[self.kind]
        what = "a whole number" if self.kind == "whole" else "a number"
        if self.kind == "whole":
            return f"{what} of at least {self.low:g}" if self.low is not None else what
        if self.low is None:
            return what
        if self.above:
            return f"{what} above {self.low:g}" + (f" and at most {self.high:g}" if self.high is not None else "")
        return f"{what} from {self.low:g}" + (f" to {self.high:g}" if self.high is not None else "")


def size(name: str) -> Rule:
    return Rule("whole", 1, LIMITS[name])


PROBABILITY = Rule("number", 0, 1)  # a dropout rate
EPSILON = Rule("number", 0, 1, above=True)  # a layer norm's
SCALE = Rule("number", 0, 100, above=True)  # an initialiser's standard deviation or cutoff
TOKEN_ID = Rule("whole", 0, LIMITS["vocab_size"], optional=True)
PROBLEM_TYPES = ("regression", "single_label_classification", "multi_label_classification")


def check_fields(schema: dict[str, Rule], values: dict) -> None:
    """Each field of `values` that `schema` has a rule for, by its rule (fields absent are left to defaults)."""
    for name, rule in schema.items():
        if name in values:
            rule.check(name, values[name])


def check_labels(config) -> None:
    """id2label as label ids 0..n-1 (keys read as numbers) to names."""
    if not isinstance(config.id2label, dict):
        raise BertforgeError(f"id2label must be an object of label ids to names, not {config.id2label!r}")
    check_size("num_labels", len(config.id2label))
    try:
        config.id2label = {int(k): v for k, v in config.id2label.items()}
    except (TypeError, ValueError):
        raise BertforgeError(f"id2label keys must be label ids 0, 1, ..., not {list(config.id2label)[:5]}") from None
    if sorted(config.id2label) != list(range(len(config.id2label))):
        raise BertforgeError(f"id2label keys must be the label ids 0 to {len(config.id2label) - 1}, not "
                             f"{sorted(config.id2label)[:5]}{'...' if len(config.id2label) > 5 else ''}")


def check_shape(config) -> None:
    """Across fields: the parameters within MAX_PARAMETERS, the heads dividing the width."""
    if config.parameter_count() > MAX_PARAMETERS:
        raise BertforgeError(
            f"num_hidden_layers {config.num_hidden_layers}, hidden_size {config.hidden_size}, intermediate_size "
            f"{config.intermediate_size} and vocab_size {config.vocab_size} make {config.parameter_count():,} "
            f"parameters, more than the {MAX_PARAMETERS:,} bertforge builds")
    if config.hidden_size % config.num_attention_heads:
        raise BertforgeError(
            f"hidden_size {config.hidden_size} is not a multiple of num_attention_heads {config.num_attention_heads}"
        )


class ConfigFile:
    """What every architecture's config shares: config.json's reading and writing (fields the class does not
    use kept in `extra`, so that saving preserves them) and the task head's labels. A subclass is a dataclass
    with `id2label`, `extra` and `model_type` (config.json's, which `architectures.read_config` dispatches on)."""

    model_type = ""
    # every field the model reads -> its Rule; config.json's older spellings too, checked before they are read
    schema: dict = {}

    @property
    def max_tokens(self) -> int:
        """The most tokens an input may hold: one a row of the position table (RoBERTa's fewer)."""
        return self.max_position_embeddings

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in self.id2label.items()}

    def with_dropout(self, p: float):
        """A copy whose every dropout rate (`dropout_fields`) is p."""
        return dataclasses.replace(self, **dict.fromkeys(self.dropout_fields, p))

    def with_labels(self, labels: list[str]):
        """A copy whose task head predicts these labels (one label name means regression)."""
        return dataclasses.replace(self, id2label=dict(enumerate(labels)))

    @classmethod
    def normalise(cls, d: dict) -> dict:
        """config.json's fields as this class's (older spellings read into today's)."""
        return d

    @classmethod
    def from_dict(cls, d: dict):
        """From a Hugging Face config.json dictionary; unknown fields are kept in `extra`."""
        check_fields(cls.schema, d)  # before normalise reads them and before anything is allocated
        d = cls.normalise(dict(d))
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        # label2id and num_labels follow from id2label; model_type is the class's (to_dict writes it).
        extra = {k: v for k, v in d.items() if k not in names and k not in ("label2id", "num_labels", "model_type")}
        if "id2label" not in known and "num_labels" in d:
            known["id2label"] = {i: f"LABEL_{i}" for i in range(check_size("num_labels", d["num_labels"]))}
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "extra"}
        d["id2label"] = {str(k): v for k, v in self.id2label.items()}
        d["label2id"] = self.label2id
        return {**self.extra, "model_type": self.model_type, **d}

    @classmethod
    def from_json_file(cls, path):
        path = Path(path)
        if not os.path.lexists(path):
            raise BertforgeError(f"{path}: config file not found")
        return cls.from_file_dict(path, read_model_json(path))

    @classmethod
    def from_file_dict(cls, path, d: dict):
        """From the dictionary read from config.json `path` (which errors name)."""
        if d.get("model_type", "bert") != cls.model_type:
            raise BertforgeError(f"{path}: model_type is {d['model_type']!r}, expected {cls.model_type!r}")
        try:
            return cls.from_dict(d)
        except (TypeError, BertforgeError) as e:
            raise BertforgeError(f"{path}: {e}") from None

    def save(self, path):
        write_json(path, self.to_dict(), sort_keys=True)

    def check(self) -> None:
        """Every field by its rule, then the rules across fields (from __post_init__, however it was made)."""
        check_fields(self.schema, {f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        check_shape(self)
        check_labels(self)


@dataclass
class BertConfig(ConfigFile):
    model_type = "bert"
    dropout_fields = ("hidden_dropout_prob", "attention_probs_dropout_prob")  # what `--dropout` sets

    vocab_size: int = 30522
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    type_vocab_size: int = 2
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    pad_token_id: int = 0
    # Causal self-attention (each position sees only itself and its left), as the reference's `is_decoder`:
    # set by `pretrain --objective ltr`, kept by everything that loads the checkpoint.
    is_decoder: bool = False
    # Task heads: labels for classification (num_labels 1 means regression), dropout before the head.
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    classifier_dropout: float | None = None
    problem_type: str | None = None
    # Fields of config.json this class does not use, kept so that saving preserves them.
    extra: dict = field(default_factory=dict, repr=False)

    schema = {
        **{name: size(name) for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                         "intermediate_size", "max_position_embeddings", "type_vocab_size")},
        "hidden_act": Rule("choice", choices=ACTIVATIONS),
        "hidden_dropout_prob": PROBABILITY, "attention_probs_dropout_prob": PROBABILITY,
        "classifier_dropout": Rule("number", 0, 1, optional=True),
        "initializer_range": SCALE, "layer_norm_eps": EPSILON, "pad_token_id": TOKEN_ID,
        "is_decoder": Rule("flag"),
        "problem_type": Rule("choice", choices=PROBLEM_TYPES, optional=True),
    }

    def __post_init__(self):
        self.check()

    def parameter_count(self) -> int:
        """About how many parameters a model of these sizes has (the encoder with its embeddings)."""
        h, layers = self.hidden_size, self.num_hidden_layers
        embeddings = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * h
        return embeddings + layers * (4 * h * h + 2 * h * self.intermediate_size)

    @classmethod
    def from_name(cls, name: str, **overrides) -> "BertConfig":
        """One of the named sizes (tiny, mini, small, medium, base, large), with field overrides."""
        if name not in SIZES:
            raise BertforgeError(f"unknown model size {name!r}: choose one of {', '.join(SIZES)}")
        layers, hidden, heads = SIZES[name]
        sizes = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     intermediate_size=4 * hidden)
        return cls(**{**sizes, **overrides})


@dataclass
class RobertaConfig(BertConfig):
    """RoBERTa (Liu et al., 2019): BERT's fields with transformers' RobertaConfig defaults, and the ids of <s> and
    </s>. Positions count from pad_token_id + 1 (fairseq's), so an input holds pad_token_id + 1 tokens fewer than the
    position table's rows (roberta-base: 514 rows, 512 tokens); the masked-LM decoder is the token table."""

    model_type = "roberta"

    vocab_size: int = 50265
    pad_token_id: int = 1
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = True

    schema = {**BertConfig.schema, "pad_token_id": Rule("whole", 0, LIMITS["vocab_size"]),
              **dict.fromkeys(("bos_token_id", "eos_token_id"), TOKEN_ID), "tie_word_embeddings": Rule("flag")}

    def __post_init__(self):
        super().__post_init__()
        if self.max_tokens < 1:
            raise BertforgeError(f"max_position_embeddings {self.max_position_embeddings} leaves no position after "
                                 f"pad_token_id {self.pad_token_id}: RoBERTa's positions start at pad_token_id + 1")
        if not self.tie_word_embeddings:
            raise BertforgeError("tie_word_embeddings false is not supported: bertforge's RoBERTa scores masked "
                                 "tokens against the token table, as every released RoBERTa does")

    @property
    def max_tokens(self) -> int:
        return self.max_position_embeddings - self.pad_token_id - 1


@dataclass
class XLMRobertaConfig(RobertaConfig):
    """XLM-RoBERTa (Conneau et al., 2020): RoBERTa's architecture under its own model_type, with transformers'
    XLMRobertaConfig defaults."""

    model_type = "xlm-roberta"

    vocab_size: int = 30522


@dataclass
class ElectraConfig(BertConfig):
    """ELECTRA (Clark et al., 2020), the discriminator: BERT's fields with transformers' ElectraConfig defaults
    (electra-small's), token tables `embedding_size` wide (projected onto hidden_size where the two differ), and
    the multiple-choice head's sequence summary (the first token, a projection, an activation)."""

    model_type = "electra"

    embedding_size: int = 128
    hidden_size: int = 256
    num_attention_heads: int = 4
    intermediate_size: int = 1024
    summary_type: str = "first"
    summary_use_proj: bool = True
    summary_activation: str | None = "gelu"
    summary_last_dropout: float = 0.1
    tie_word_embeddings: bool = True

    schema = {**BertConfig.schema, "embedding_size": size("embedding_size"),
              "summary_type": Rule("choice", choices=("first",)), "summary_use_proj": Rule("flag"),
              "summary_activation": Rule("choice", choices=ACTIVATIONS, optional=True),
              "summary_last_dropout": PROBABILITY, "tie_word_embeddings": Rule("flag")}

    def __post_init__(self):
        super().__post_init__()
        if not self.tie_word_embeddings:
            raise BertforgeError("tie_word_embeddings false is not supported: bertforge's ELECTRA scores masked "
                                 "tokens against the token table, as every released ELECTRA does")

    def parameter_count(self) -> int:
        e, h = self.embedding_size, self.hidden_size
        rows = self.vocab_size + self.max_position_embeddings + self.type_vocab_size
        return super().parameter_count() + rows * (e - h) + (e * h if e != h else 0)  # tables e wide, projection


ROPE_THETA = {"full_attention": 160_000.0, "sliding_attention": 10_000.0}  # ModernBERT's global and local bases
LAYER_TYPES = ("full_attention", "sliding_attention")


def layer_pattern(layers: int, every: int) -> list[str]:
    """Global attention in every `every`-th layer from the first, sliding-window attention between."""
    return ["sliding_attention" if i % every else "full_attention" for i in range(layers)]


@dataclass
class ModernBertConfig(ConfigFile):
    """ModernBERT (Warner et al., 2024) and the encoders that share its layout (Ettin, gte-modernbert, mmBERT):
    transformers' `ModernBertConfig` fields and defaults (ModernBERT-base's). Read from either form of config.json:
    today's `layer_types` and `rope_parameters`, or the first release's `global_attn_every_n_layers`,
    `global_rope_theta` and `local_rope_theta`; written in both, so that either transformers reads it."""

    model_type = "modernbert"
    dropout_fields = ("embedding_dropout", "mlp_dropout", "attention_dropout")

    vocab_size: int = 50368
    hidden_size: int = 768
    intermediate_size: int = 1152
    num_hidden_layers: int = 22
    num_attention_heads: int = 12
    hidden_activation: str = "gelu"
    max_position_embeddings: int = 8192
    initializer_range: float = 0.02
    initializer_cutoff_factor: float = 2.0
    norm_eps: float = 1e-5
    norm_bias: bool = False
    pad_token_id: int = 50283
    eos_token_id: int | None = 50282
    bos_token_id: int | None = 50281
    cls_token_id: int | None = 50281
    sep_token_id: int | None = 50282
    attention_bias: bool = False
    attention_dropout: float = 0.0
    layer_types: list[str] | None = None  # per layer: full_attention (global) or sliding_attention (local)
    rope_parameters: dict | None = None  # per layer type: {"rope_type": "default", "rope_theta": base}
    local_attention: int = 128  # the sliding window: a token sees the tokens within local_attention // 2 of it
    embedding_dropout: float = 0.0
    mlp_bias: bool = False
    mlp_dropout: float = 0.0
    decoder_bias: bool = True
    classifier_pooling: str = "cls"
    classifier_dropout: float = 0.0
    classifier_bias: bool = False
    classifier_activation: str = "gelu"
    tie_word_embeddings: bool = True
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    problem_type: str | None = None
    extra: dict = field(default_factory=dict, repr=False)

    # What the layers shared with BERT (pipelines, distillation, training options) read under BERT's names.
    is_decoder = False
    type_vocab_size = 1

    @property
    def hidden_act(self) -> str:
        return self.hidden_activation

    @property
    def layer_norm_eps(self) -> float:
        return self.norm_eps

    @property
    def hidden_dropout_prob(self) -> float:
        return self.mlp_dropout

    @property
    def window(self) -> int:
        """How far a sliding-attention layer sees on each side."""
        return self.local_attention // 2

    def rope_theta(self, layer_type: str) -> float:
        return self.rope_parameters[layer_type]["rope_theta"]

    schema = {
        **{name: size(name) for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                         "intermediate_size", "max_position_embeddings")},
        **dict.fromkeys(("hidden_activation", "classifier_activation"), Rule("choice", choices=ACTIVATIONS)),
        **dict.fromkeys(("embedding_dropout", "mlp_dropout", "attention_dropout", "classifier_dropout"), PROBABILITY),
        **dict.fromkeys(("norm_bias", "attention_bias", "mlp_bias", "decoder_bias", "classifier_bias",
                         "tie_word_embeddings"), Rule("flag")),
        **dict.fromkeys(("pad_token_id", "eos_token_id", "bos_token_id", "cls_token_id", "sep_token_id"), TOKEN_ID),
        "initializer_range": SCALE, "initializer_cutoff_factor": SCALE, "norm_eps": EPSILON,
        "classifier_pooling": Rule("choice", choices=("cls", "mean")),
        "local_attention": Rule("whole", 2, 2 * LIMITS["max_position_embeddings"]),
        "layer_types": Rule("list", optional=True), "rope_parameters": Rule("object", optional=True),
        "problem_type": Rule("choice", choices=PROBLEM_TYPES, optional=True),
        # the first release's spellings, read into layer_types and rope_parameters
        "global_attn_every_n_layers": Rule("whole", 1, LIMITS["num_hidden_layers"], optional=True),
        "global_rope_theta": Rule("number", 1, above=True), "local_rope_theta": Rule("number", 1, above=True),
    }

    @classmethod
    def normalise(cls, d: dict) -> dict:
        """The first release's fields read into today's; where both forms are given, they must agree."""
        layers = d.get("num_hidden_layers", cls.num_hidden_layers)
        given = "global_attn_every_n_layers" in d
        every = d.pop("global_attn_every_n_layers", 3)  # transformers' default
        if every is not None:
            pattern = layer_pattern(layers, every)
            if d.get("layer_types") is None:
                d["layer_types"] = pattern
            elif given and d["layer_types"] != pattern:
                raise BertforgeError(f"layer_types {str(d['layer_types'])[:80]} disagrees with "
                                     f"global_attn_every_n_layers {every}")
        elif d.get("layer_types") is None:
            raise BertforgeError("global_attn_every_n_layers is null and no layer_types is given: one of them must "
                                 "say which layers attend globally")
        rope = {}
        for layer_type, value in (d.get("rope_parameters") or {}).items():
            if layer_type not in LAYER_TYPES:
                raise BertforgeError(f"rope_parameters has {layer_type!r:.40}; its keys are {', '.join(LAYER_TYPES)}")
            rope[layer_type] = dict(Rule("object").check(f"rope_parameters.{layer_type}", value))
        old_names = {"full_attention": "global_rope_theta", "sliding_attention": "local_rope_theta"}
        for layer_type, old_name in old_names.items():
            theta = d.pop(old_name, None)
            given = rope.setdefault(layer_type, {"rope_type": "default"}).setdefault(
                "rope_theta", theta if theta is not None else ROPE_THETA[layer_type])
            if theta is not None and theta != given:
                raise BertforgeError(f"{old_name} {theta:g} disagrees with rope_parameters.{layer_type}.rope_theta "
                                     f"{given!r:.40}")
        d["rope_parameters"] = rope
        if d.pop("rope_scaling", None) is not None:
            raise BertforgeError("rope_scaling is not supported: bertforge runs ModernBERT's default rotary positions")
        return d

    def __post_init__(self):
        self.check()
        if self.layer_types is None:
            self.layer_types = layer_pattern(self.num_hidden_layers, 3)
        if self.rope_parameters is None:
            self.rope_parameters = self.normalise({})["rope_parameters"]
        if len(self.layer_types) != self.num_hidden_layers or any(t not in LAYER_TYPES for t in self.layer_types):
            raise BertforgeError(f"layer_types must name {' or '.join(LAYER_TYPES)} for each of the "
                                 f"{self.num_hidden_layers} layers, not {str(self.layer_types)[:80]}")
        for layer_type in LAYER_TYPES:
            rope = self.rope_parameters.get(layer_type)
            if not isinstance(rope, dict):
                raise BertforgeError(f"rope_parameters.{layer_type} must be an object, not {rope!r:.40}")
            if rope.get("rope_type", "default") != "default":
                raise BertforgeError(f"rope_parameters.{layer_type}.rope_type {rope['rope_type']!r} is not supported:"
                                     " bertforge runs the default rotary positions")
            Rule("number", 1, above=True).check(f"rope_parameters.{layer_type}.rope_theta", rope.get("rope_theta"))

    def parameter_count(self) -> int:
        h, i = self.hidden_size, self.intermediate_size
        return self.vocab_size * h + self.num_hidden_layers * (4 * h * h + 3 * h * i)

    def to_dict(self) -> dict:
        d = super().to_dict()
        # the first release's names too, for transformers from before layer_types
        layers = self.num_hidden_layers
        every = [n for n in range(1, layers + 1) if self.layer_types == layer_pattern(layers, n)]
        if every:
            d["global_attn_every_n_layers"] = every[0]
        d["global_rope_theta"] = self.rope_theta("full_attention")
        d["local_rope_theta"] = self.rope_theta("sliding_attention")
        return d


DISTILBERT_NAMES = {"hidden_size": "dim", "num_hidden_layers": "n_layers", "num_attention_heads": "n_heads",
                    "intermediate_size": "hidden_dim"}


@dataclass
class DistilBertConfig(ConfigFile):
    """DistilBERT (Sanh et al., 2019): transformers' `DistilBertConfig` fields and defaults (distilbert-base's), its
    own names for BERT's sizes (dim, n_layers, n_heads, hidden_dim) and a dropout rate per head; no token types, the
    norms' epsilon fixed at 1e-12; positions learned, or sinusoids (sinusoidal_pos_embds) in the same table."""

    model_type = "distilbert"
    dropout_fields = ("dropout", "attention_dropout", "qa_dropout", "seq_classif_dropout")

    vocab_size: int = 30522
    max_position_embeddings: int = 512
    sinusoidal_pos_embds: bool = False
    n_layers: int = 6
    n_heads: int = 12
    dim: int = 768
    hidden_dim: int = 3072
    dropout: float = 0.1
    attention_dropout: float = 0.1
    activation: str = "gelu"
    initializer_range: float = 0.02
    qa_dropout: float = 0.1
    seq_classif_dropout: float = 0.2
    pad_token_id: int | None = 0
    tie_weights_: bool = True  # the first release's name of tie_word_embeddings
    tie_word_embeddings: bool = True
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    problem_type: str | None = None
    extra: dict = field(default_factory=dict, repr=False)

    schema = {
        "vocab_size": size("vocab_size"), "max_position_embeddings": size("max_position_embeddings"),
        "dim": size("hidden_size"), "n_layers": size("num_hidden_layers"), "n_heads": size("num_attention_heads"),
        "hidden_dim": size("intermediate_size"), "activation": Rule("choice", choices=ACTIVATIONS),
        **dict.fromkeys(("dropout", "attention_dropout", "qa_dropout", "seq_classif_dropout"), PROBABILITY),
        **dict.fromkeys(("sinusoidal_pos_embds", "tie_weights_", "tie_word_embeddings"), Rule("flag")),
        "initializer_range": SCALE, "pad_token_id": TOKEN_ID,
        "problem_type": Rule("choice", choices=PROBLEM_TYPES, optional=True),
        **{name: size(name) for name in DISTILBERT_NAMES},  # BERT's names, read as DistilBERT's (normalise)
    }

    # What the layers shared with BERT (the attention, the fast path, the heads, distillation) read under BERT's names.
    is_decoder = False
    type_vocab_size = 1
    layer_norm_eps = 1e-12
    classifier_dropout = None
    hidden_size = property(lambda self: self.dim)
    num_hidden_layers = property(lambda self: self.n_layers)
    num_attention_heads = property(lambda self: self.n_heads)
    intermediate_size = property(lambda self: self.hidden_dim)
    hidden_act = property(lambda self: self.activation)
    hidden_dropout_prob = property(lambda self: self.dropout)
    attention_probs_dropout_prob = property(lambda self: self.attention_dropout)

    @classmethod
    def normalise(cls, d: dict) -> dict:
        """BERT's names of the sizes (what the shared code gives a student's config) read as DistilBERT's."""
        for bert_name, name in DISTILBERT_NAMES.items():
            if bert_name in d:
                d[name] = d.pop(bert_name)
        return d

    def __post_init__(self):
        self.check()
        if not (self.tie_word_embeddings and self.tie_weights_):
            raise BertforgeError("tie_word_embeddings false is not supported: bertforge's DistilBERT scores masked "
                                 "tokens against the token table, as every released DistilBERT does")
        if self.pad_token_id is not None and self.pad_token_id >= self.vocab_size:
            raise BertforgeError(f"pad_token_id {self.pad_token_id} is not a token of the vocabulary "
                                 f"(vocab_size {self.vocab_size}): DistilBERT's padding row is the token table's")

    def parameter_count(self) -> int:
        h, layers = self.dim, self.n_layers
        return (self.vocab_size + self.max_position_embeddings) * h + layers * (4 * h * h + 2 * h * self.hidden_dim)


MPNET_PADDING_IDX = 1  # transformers' MPNetEmbeddings: positions count from 1 + 1, whatever pad_token_id says
MPNET_BUCKETS = 32  # the relative positions' buckets transformers' MPNetEncoder computes, whatever the table's rows


@dataclass
class MPNetConfig(ConfigFile):
    """MPNet (Song et al., 2020): transformers' `MPNetConfig` fields and defaults (BERT's sizes, mpnet-base's
    vocabulary), no token types, a table of `relative_attention_num_buckets` relative position biases shared by the
    layers, and positions counted as RoBERTa's from the padding id 1 + 1, so that an input holds 2 tokens fewer than
    the position table's rows (mpnet-base: 514 rows, 512 tokens); the masked-LM decoder is the token table."""

    model_type = "mpnet"
    dropout_fields = ("hidden_dropout_prob", "attention_probs_dropout_prob")

    vocab_size: int = 30527
    hidden_size: int = 768
    num_hidden_layers: int = 12
    num_attention_heads: int = 12
    intermediate_size: int = 3072
    hidden_act: str = "gelu"
    hidden_dropout_prob: float = 0.1
    attention_probs_dropout_prob: float = 0.1
    max_position_embeddings: int = 512
    initializer_range: float = 0.02
    layer_norm_eps: float = 1e-12
    relative_attention_num_buckets: int = MPNET_BUCKETS
    pad_token_id: int = MPNET_PADDING_IDX
    bos_token_id: int | None = 0
    eos_token_id: int | None = 2
    tie_word_embeddings: bool = True
    id2label: dict[int, str] = field(default_factory=lambda: {0: "LABEL_0", 1: "LABEL_1"})
    problem_type: str | None = None
    extra: dict = field(default_factory=dict, repr=False)

    schema = {
        **{name: size(name) for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                                         "intermediate_size", "max_position_embeddings")},
        "hidden_act": Rule("choice", choices=ACTIVATIONS),
        "hidden_dropout_prob": PROBABILITY, "attention_probs_dropout_prob": PROBABILITY,
        "initializer_range": SCALE, "layer_norm_eps": EPSILON,
        "relative_attention_num_buckets": Rule("whole", 1, 1 << 10),
        "pad_token_id": Rule("whole", 0, LIMITS["vocab_size"]),
        **dict.fromkeys(("bos_token_id", "eos_token_id"), TOKEN_ID), "tie_word_embeddings": Rule("flag"),
        "problem_type": Rule("choice", choices=PROBLEM_TYPES, optional=True),
    }

    # What the layers shared with BERT (the fast path, the heads, distillation) read under BERT's names.
    is_decoder = False
    classifier_dropout = None  # the heads' dropout is hidden_dropout_prob, as transformers' MPNet heads

    def __post_init__(self):
        self.check()
        if self.pad_token_id != MPNET_PADDING_IDX:
            raise BertforgeError(f"pad_token_id {self.pad_token_id} is not supported: MPNet counts positions from "
                                 f"the padding id {MPNET_PADDING_IDX} + 1, as transformers' MPNetEmbeddings does "
                                 "whatever pad_token_id says")
        if self.max_tokens < 1:
            raise BertforgeError(f"max_position_embeddings {self.max_position_embeddings} leaves no position after "
                                 f"the padding id {MPNET_PADDING_IDX}: MPNet's positions start at 2")
        if self.relative_attention_num_buckets < MPNET_BUCKETS:
            raise BertforgeError(f"relative_attention_num_buckets {self.relative_attention_num_buckets} is under "
                                 f"{MPNET_BUCKETS}: MPNet sorts relative positions into {MPNET_BUCKETS} buckets "
                                 "(transformers' MPNetEncoder), a row of the table each")
        if not self.tie_word_embeddings:
            raise BertforgeError("tie_word_embeddings false is not supported: bertforge's MPNet scores masked "
                                 "tokens against the token table, as every released MPNet does")

    @property
    def max_tokens(self) -> int:
        return self.max_position_embeddings - MPNET_PADDING_IDX - 1

    def parameter_count(self) -> int:
        h, layers = self.hidden_size, self.num_hidden_layers
        embeddings = (self.vocab_size + self.max_position_embeddings) * h
        return embeddings + layers * (4 * h * h + 2 * h * self.intermediate_size) \
            + self.relative_attention_num_buckets * self.num_attention_heads
