"""The configs of the families beyond BERT, each a dataclass that reads and writes its Hugging Face `config.json`
under its own names (DistilBERT's `dim`, `n_layers`, ...; ModernBERT's two forms) with its `schema` (config.Rule per
field), and gives the layers the families share BERT's names."""

from dataclasses import dataclass, field

from ...core.errors import BertforgeError
from .config import (ACTIVATIONS, EPSILON, LIMITS, PROBABILITY, PROBLEM_TYPES, SCALE, TOKEN_ID, BertConfig,
                     ConfigFile, Rule, size)


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
