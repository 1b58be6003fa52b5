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
