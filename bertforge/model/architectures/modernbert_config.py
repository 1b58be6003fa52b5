"""ModernBERT's config: both forms of its config.json (transformers' `global_attn_every_n_layers` and rope
thetas, and the newer `layer_types` and `rope_parameters`), refused where they disagree, with its schema."""

from dataclasses import dataclass, field

from ...core.errors import BertforgeError
from .config import ACTIVATIONS, EPSILON, LIMITS, PROBABILITY, PROBLEM_TYPES, SCALE, TOKEN_ID, ConfigFile, Rule, size


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
