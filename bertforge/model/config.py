"""Model sizes, as a dataclass that reads and writes Hugging Face `config.json`."""

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BertforgeError
from ..core.io import read_model_json, write_json

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
    "vocab_size": 1 << 22,
    "hidden_size": 1 << 14,
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
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BertforgeError(f"{name} must be a whole number of at least 1, not {value!r}")
    if value > LIMITS[name]:
        raise BertforgeError(f"{name} {value} is over {LIMITS[name]:,}, more than any BERT model has")
    return value


@dataclass
class BertConfig:
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

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                     "max_position_embeddings", "type_vocab_size"):
            check_size(name, getattr(self, name))
        if not isinstance(self.id2label, dict):
            raise BertforgeError(f"id2label must be an object of label ids to names, not {self.id2label!r}")
        check_size("num_labels", len(self.id2label))
        if self.parameter_count() > MAX_PARAMETERS:
            raise BertforgeError(
                f"num_hidden_layers {self.num_hidden_layers}, hidden_size {self.hidden_size}, intermediate_size "
                f"{self.intermediate_size} and vocab_size {self.vocab_size} make {self.parameter_count():,} "
                f"parameters, more than the {MAX_PARAMETERS:,} bertforge builds")
        if self.hidden_size % self.num_attention_heads:
            raise BertforgeError(
                f"hidden_size {self.hidden_size} is not a multiple of num_attention_heads {self.num_attention_heads}"
            )
        if self.hidden_act not in ACTIVATIONS:
            raise BertforgeError(f"hidden_act {self.hidden_act!r} is not one of {', '.join(ACTIVATIONS)}")
        try:
            self.id2label = {int(k): v for k, v in self.id2label.items()}
        except (TypeError, ValueError):
            raise BertforgeError(f"id2label keys must be label ids 0, 1, ..., not {list(self.id2label)[:5]}") from None
        if sorted(self.id2label) != list(range(len(self.id2label))):
            raise BertforgeError(f"id2label keys must be the label ids 0 to {len(self.id2label) - 1}, not "
                                 f"{sorted(self.id2label)[:5]}{'...' if len(self.id2label) > 5 else ''}")

    def parameter_count(self) -> int:
        """About how many parameters a model of these sizes has (the encoder with its embeddings)."""
        h, layers = self.hidden_size, self.num_hidden_layers
        embeddings = (self.vocab_size + self.max_position_embeddings + self.type_vocab_size) * h
        return embeddings + layers * (4 * h * h + 2 * h * self.intermediate_size)

    @property
    def num_labels(self) -> int:
        return len(self.id2label)

    @property
    def label2id(self) -> dict[str, int]:
        return {v: k for k, v in self.id2label.items()}

    def with_labels(self, labels: list[str]) -> "BertConfig":
        """A copy whose task head predicts these labels (one label name means regression)."""
        return dataclasses.replace(self, id2label=dict(enumerate(labels)))

    @classmethod
    def from_name(cls, name: str, **overrides) -> "BertConfig":
        """One of the named sizes (tiny, mini, small, medium, base, large), with field overrides."""
        if name not in SIZES:
            raise BertforgeError(f"unknown model size {name!r}: choose one of {', '.join(SIZES)}")
        layers, hidden, heads = SIZES[name]
        sizes = dict(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     intermediate_size=4 * hidden)
        return cls(**{**sizes, **overrides})

    @classmethod
    def from_dict(cls, d: dict) -> "BertConfig":
        """From a Hugging Face config.json dictionary; unknown fields are kept in `extra`."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        known = {k: v for k, v in d.items() if k in names}
        # label2id and num_labels follow from id2label; model_type is always "bert" (to_dict writes it).
        extra = {k: v for k, v in d.items() if k not in names and k not in ("label2id", "num_labels", "model_type")}
        if "id2label" not in known and "num_labels" in d:
            known["id2label"] = {i: f"LABEL_{i}" for i in range(check_size("num_labels", d["num_labels"]))}
        return cls(**known, extra=extra)

    def to_dict(self) -> dict:
        d = {k: v for k, v in dataclasses.asdict(self).items() if k != "extra"}
        d["id2label"] = {str(k): v for k, v in self.id2label.items()}
        d["label2id"] = self.label2id
        return {**self.extra, "model_type": "bert", **d}

    @classmethod
    def from_json_file(cls, path) -> "BertConfig":
        path = Path(path)
        if not os.path.lexists(path):
            raise BertforgeError(f"{path}: config file not found")
        d = read_model_json(path)
        if d.get("model_type", "bert") != "bert":
            raise BertforgeError(f"{path}: model_type is {d['model_type']!r}, expected 'bert'")
        try:
            return cls.from_dict(d)
        except (TypeError, BertforgeError) as e:
            raise BertforgeError(f"{path}: {e}") from None

    def save(self, path):
        write_json(path, self.to_dict(), sort_keys=True)

    @classmethod
    def load(cls, name_or_path: str) -> "BertConfig":
        """A named size, a config.json file, or a folder holding one."""
        if name_or_path in SIZES:
            return cls.from_name(name_or_path)
        path = Path(name_or_path)
        if not path.exists():
            raise BertforgeError(f"{name_or_path}: neither a model size ({', '.join(SIZES)}) nor a config.json file "
                                 "or a folder holding one")
        return cls.from_json_file(path / "config.json" if path.is_dir() else path)
