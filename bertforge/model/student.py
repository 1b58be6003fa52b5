"""A student's start from its teacher, for task distillation (`distill`) and general distillation (`pretrain
--objective distill*`) alike: a student of a size with its teacher's embedding tables (`student_config`), the
teacher's embeddings projected onto the student's width, so that a random student starts knowing which words are
alike (`--student-embeddings`); or the teacher itself cut to the student's size (`--prune`)."""

import torch

from ..core.errors import BertforgeError
from .architectures.bert import BertModel
from .architectures.config import BertConfig


# The embedding tables of a BERT encoder, each with the config field that counts its rows
TABLES = {"word_embeddings": "vocab_size", "position_embeddings": "max_position_embeddings",
          "token_type_embeddings": "type_vocab_size"}


def student_config(teacher, size: str, **overrides):
    """A student of the size `size` (its layers, width, heads and feed-forward size) for `teacher`, with the
    teacher's vocabulary, position count and token types (`TABLES`), whatever the size's own (512 positions, 2
    token types): every row of its embedding tables is then one of the teacher's, projected (project_embeddings),
    and it reads the inputs its teacher reads, never longer ones than the teacher learned on. A student cut from
    the teacher, or made of its layers, has the teacher's tables too. Another architecture's teacher gets a
    student of its own architecture, the feed-forward at the teacher's ratio to the width (GeGLU's is not 4), its
    layer types in the teacher's pattern."""
    if type(teacher) is BertConfig:
        return BertConfig.from_name(size, **{field: getattr(teacher, field) for field in TABLES.values()},
                                    **overrides)
    sized = BertConfig.from_name(size)
    fields = {k: v for k, v in teacher.to_dict().items() if k != "layer_types"}
    return type(teacher).from_dict({**fields, "num_hidden_layers": sized.num_hidden_layers,
                                    "hidden_size": sized.hidden_size, "num_attention_heads": sized.num_attention_heads,
                                    "intermediate_size": sized.hidden_size * teacher.intermediate_size
                                    // teacher.hidden_size, **overrides})


def project_embeddings(teacher, student) -> None:
    """The student's token, position and segment embeddings from the teacher's, projected onto the student's width
    by the leading principal directions of the teacher's (centred) token embeddings; at the teacher's width the
    projection is a rotation, which keeps every inner product. A student with more positions or token types than
    its teacher (a `pretrain --config` size; never a student_config) keeps its own start for the rows the teacher
    lacks. The embedding LayerNorm and everything above stay fresh."""
    source, target = tables_of(teacher), tables_of(student)
    words = source["word_embeddings"].weight.detach().float()
    rows, width = target["word_embeddings"].weight.shape
    if width > words.shape[1]:
        raise BertforgeError(f"--student-embeddings teacher: the student is wider ({width}) than the teacher "
                             f"({words.shape[1]})")
    if rows != len(words):
        raise BertforgeError(f"--student-embeddings teacher: the student's vocabulary has {rows} entries, the "
                             f"teacher's {len(words)}: the student must read the teacher's tokens")
    centre = words.mean(0)
    directions = torch.linalg.svd(words - centre, full_matrices=False).Vh[:width].T  # teacher width x student width
    with torch.no_grad():
        target["word_embeddings"].weight.copy_((words - centre) @ directions)
        for name in set(source) & set(target) - {"word_embeddings"}:
            table, theirs = target[name].weight, source[name].weight.detach().float()
            shared = min(len(table), len(theirs))
            table[:shared] = theirs[:shared] @ directions


def tables_of(model) -> dict:
    """A model's embedding tables by their `TABLES` name: BERT's three, ModernBERT's token table alone."""
    embeddings = model.base_model.embeddings
    return {"word_embeddings": model.word_embeddings,
            **{name: getattr(embeddings, name) for name in TABLES if name != "word_embeddings"
               and hasattr(embeddings, name)}}


def start_embeddings(student, teacher, choice: str | None) -> str:
    """A fresh student's embeddings: the teacher's projected (`choice` "teacher"; by default, None, where the
    student is no wider) or its own random ones ("random"); returns which."""
    if choice is None:
        choice = "teacher" if student.config.hidden_size <= teacher.config.hidden_size else "random"
    if choice == "teacher":
        project_embeddings(teacher, student)
    return choice


# ---------------------------------------------------------------------------------------------------------
# A student cut from the teacher (--prune): the parts the teacher uses most on the training data, ranked by the
# mean magnitude of their activations (Minitron's ranking, Muralidharan et al. 2024), kept in the teacher's order.


PRUNE_ROWS = 2048  # training rows the teacher's parts are ranked on: the means settle well before


def ranking_rows(count: int, seed: int) -> list[int]:
    """The rows (of `count` training rows) the teacher's parts are ranked on: PRUNE_ROWS at random, in order."""
    import numpy as np

    return np.sort(np.random.default_rng(seed).permutation(count)[:PRUNE_ROWS]).tolist()


def evenly_spaced(depth: int, n: int) -> list[int]:
    """n of `depth` layers, the first and the last among them (one: the first, which reads the embeddings)."""
    return [round(i * (depth - 1) / (n - 1)) for i in range(n)] if n > 1 else [0]


def cut_config(teacher, size: BertConfig, name: str, layers: list[int] | None = None):
    """The teacher's config at the size `size` (named `name` in errors): its layers (`layers` of the teacher's, by
    default evenly spaced), width, and a feed-forward at the teacher's ratio to the width (4 for BERT's, so the
    size's own), with the teacher's head size, so as many heads as that divides the width into. Any architecture:
    its fields that vary by layer (ModernBERT's layer types) are the kept layers'."""
    head_size = teacher.hidden_size // teacher.num_attention_heads
    intermediate = size.hidden_size * teacher.intermediate_size // teacher.hidden_size
    if size.hidden_size > teacher.hidden_size or size.hidden_size % head_size:
        raise BertforgeError(f"--prune: the student {name} is {size.hidden_size} wide; the teacher's width "
                             f"({teacher.hidden_size}) cuts to a multiple of its head size ({head_size}) no wider")
    # ELECTRA's tables: projected ones kept whole (a student as wide would lose the projection), else cut with the width
    tables = getattr(teacher, "embedding_size", None)
    if tables not in (None, teacher.hidden_size) and tables == size.hidden_size:
        raise BertforgeError(f"--prune: the student {name} is {size.hidden_size} wide; the teacher's tables "
                             f"(embedding_size {tables}) are kept whole, projected onto the width as the teacher's "
                             f"are: choose another width")
    tied = {"embedding_size": size.hidden_size} if tables == teacher.hidden_size else {}
    if size.num_hidden_layers > teacher.num_hidden_layers:
        raise BertforgeError(f"--prune: the student {name} ({size.num_hidden_layers} layers) is deeper than the "
                             f"teacher ({teacher.num_hidden_layers} layers)")
    layers = evenly_spaced(teacher.num_hidden_layers, size.num_hidden_layers) if layers is None else layers
    per_layer = {"layer_types": [teacher.layer_types[i] for i in layers], "global_attn_every_n_layers": None} \
        if hasattr(teacher, "layer_types") else {}  # the kept layers' types, not the teacher's pattern
    return type(teacher).from_dict({**teacher.to_dict(), "num_hidden_layers": size.num_hidden_layers,
                                    "hidden_size": size.hidden_size, "intermediate_size": intermediate,
                                    "num_attention_heads": size.hidden_size // head_size, **per_layer,
                                    **tied})


def task_head(model) -> torch.nn.Linear:
    """A task model's head layer (task_heads.TaskHead.head_name: `classifier`, `qa_outputs`; ModernBERT's
    `classifier`; RoBERTa's sentence classifier's `out_proj`). The cut keeps the input channels it reads: the pooled
    vector's where the model has a pooler or a prediction head, else every token's hidden channels (BERT's token
    classification and question answering)."""
    head = getattr(model, getattr(model, "head_name", "classifier"))
    return getattr(head, "out_proj", head)


class BertCut:
    """Where BERT's parts are ranked (`watch`: module, rank, per head, on the module's input) and which rows and
    columns of each tensor a cut keeps (`keep`)."""

    @staticmethod
    def watch(model):
        encoder = model.base_model
        yield encoder.embeddings.LayerNorm, "hidden.embeddings", False, False
        if getattr(encoder, "pooler", None) is not None:
            yield encoder.pooler, "pooled", False, False
        for i, layer in enumerate(encoder.encoder.layer):
            yield layer.attention.output.LayerNorm, f"hidden.{i}.attention", False, False
            yield layer.output.LayerNorm, f"hidden.{i}.output", False, False
            yield layer.attention.output.dense, f"heads.{i}", True, True
            yield layer.output.dense, f"neurons.{i}", False, True

    layer_list = "layer"  # a layer's tensors: ...layer.I.<module>.<parameter>

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        """(rows, columns) of the tensor named `parts` (a layer's index at parts[at + 1], its renumbered kept sets in
        keep["channels"], keep["neurons"]; keep["hidden"], keep["pooled"] for all); None keeps them all."""
        hidden, pooled = keep["hidden"], keep["pooled"]
        if at is not None:
            channels, neurons = keep["channels"], keep["neurons"]
            return {"attention.self.query": (channels, hidden), "attention.self.key": (channels, hidden),
                    "attention.self.value": (channels, hidden), "attention.output.dense": (hidden, channels),
                    "intermediate.dense": (neurons, hidden), "output.dense": (hidden, neurons),
                    }.get(".".join(parts[at + 2:-1]), (hidden, None))  # the LayerNorms
        if "pooler" in parts:
            return pooled, hidden
        if head in parts:
            return None, hidden if pooled is None else pooled
        if "embeddings" in parts:  # the tables [rows, H], their LayerNorm [H]
            return (None, hidden) if value.dim() == 2 else (hidden, None)
        return None, None


class RobertaCut(BertCut):
    """BERT's ranks and cuts, and RoBERTa's sentence classifier in place of the pooler: its dense layer's output
    after tanh (out_proj's input) ranked as the pooled vector, and cut as the pooler is."""

    @staticmethod
    def watch(model):
        yield from BertCut.watch(model)
        if hasattr(getattr(model, "classifier", None), "out_proj"):
            yield model.classifier.out_proj, "pooled", False, True

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        if parts[:2] == ["classifier", "dense"]:
            return keep["pooled"], keep["hidden"]
        if parts[:2] == ["classifier", "out_proj"]:
            return None, keep["pooled"]
        return BertCut.keep(parts, value, at, keep, head)


class DistilBertCut(BertCut):
    """BERT's ranks and cuts under DistilBERT's names (the embeddings' norm, each layer's sa_layer_norm and
    output_layer_norm, out_lin's input per head, lin2's per neuron), and the sentence heads' pre_classifier cut as a
    pooler, ranked at the classifier's input; the masked-LM head's transform keeps the hidden channels."""

    @staticmethod
    def watch(model):
        encoder = model.base_model
        yield encoder.embeddings.LayerNorm, "hidden.embeddings", False, False
        if hasattr(model, "pre_classifier"):
            yield model.classifier, "pooled", False, True
        for i, layer in enumerate(encoder.transformer.layer):
            yield layer.sa_layer_norm, f"hidden.{i}.attention", False, False
            yield layer.output_layer_norm, f"hidden.{i}.output", False, False
            yield layer.attention.out_lin, f"heads.{i}", True, True
            yield layer.ffn.lin2, f"neurons.{i}", False, True

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        hidden, pooled = keep["hidden"], keep["pooled"]
        if at is not None:
            channels, neurons = keep["channels"], keep["neurons"]
            return {"attention.q_lin": (channels, hidden), "attention.k_lin": (channels, hidden),
                    "attention.v_lin": (channels, hidden), "attention.out_lin": (hidden, channels),
                    "ffn.lin1": (neurons, hidden), "ffn.lin2": (hidden, neurons),
                    }.get(".".join(parts[at + 2:-1]), (hidden, None))  # the LayerNorms
        if parts[0] == "pre_classifier":
            return pooled, hidden
        if parts[0] == "vocab_transform":
            return hidden, hidden
        if parts[0] == "vocab_layer_norm":
            return hidden, None
        return BertCut.keep(parts, value, at, keep, head)


class MPNetCut(RobertaCut):
    """RoBERTa's ranks and cuts under MPNet's names (each layer's attention.LayerNorm, o's input per head, q, k, v and
    o in attention.attn), with one set of heads kept in every layer: the relative position bias is one table shared
    by the layers, a column per head (`shared_heads`: the heads ranked by their sum over the kept layers), its
    columns cut with them; the masked-LM head's dense layer and norm keep the hidden channels."""

    shared_heads = True

    @staticmethod
    def watch(model):
        encoder = model.base_model
        yield encoder.embeddings.LayerNorm, "hidden.embeddings", False, False
        if getattr(encoder, "pooler", None) is not None:
            yield encoder.pooler, "pooled", False, False
        if hasattr(getattr(model, "classifier", None), "out_proj"):
            yield model.classifier.out_proj, "pooled", False, True
        for i, layer in enumerate(encoder.encoder.layer):
            yield layer.attention.LayerNorm, f"hidden.{i}.attention", False, False
            yield layer.output.LayerNorm, f"hidden.{i}.output", False, False
            yield layer.attention.attn.o, f"heads.{i}", True, True
            yield layer.output.dense, f"neurons.{i}", False, True

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        hidden = keep["hidden"]
        if at is not None:
            channels, neurons = keep["channels"], keep["neurons"]
            return {"attention.attn.q": (channels, hidden), "attention.attn.k": (channels, hidden),
                    "attention.attn.v": (channels, hidden), "attention.attn.o": (hidden, channels),
                    "intermediate.dense": (neurons, hidden), "output.dense": (hidden, neurons),
                    }.get(".".join(parts[at + 2:-1]), (hidden, None))  # the LayerNorms
        if "relative_attention_bias" in parts:  # [buckets, heads]
            return None, keep["heads"]
        if parts[:2] == ["lm_head", "dense"]:
            return hidden, hidden
        if parts[:2] == ["lm_head", "layer_norm"]:
            return hidden, None
        return RobertaCut.keep(parts, value, at, keep, head)


class ElectraCut(RobertaCut):
    """RoBERTa's ranks and cuts, with ELECTRA's tables (embedding_size wide) kept whole: embeddings_project's output
    ranked as the hidden channels and its rows cut with them; the masked-LM head's dense layer reads the hidden
    channels and writes the tables'; multiple choice's sequence summary ranked and cut as a pooler. A teacher
    without the projection (embedding_size = hidden_size, electra-base's) is cut as BERT is, its tables with the
    width."""

    @staticmethod
    def watch(model):
        encoder = model.base_model
        for point in RobertaCut.watch(model):
            if point[1] != "hidden.embeddings" or encoder.embeddings_project is None:
                yield point
        if encoder.embeddings_project is not None:
            yield encoder.embeddings_project, "hidden.embeddings", False, False
        if isinstance(getattr(model, "sequence_summary", None), torch.nn.Module):
            yield model.sequence_summary, "pooled", False, False

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        projected = any("embeddings_project" in key for key in keep["weights"])
        tables = None if projected else keep["hidden"]  # the table channels kept
        if "embeddings_project" in parts:
            return keep["hidden"], None
        if "embeddings" in parts:  # the tables [rows, E], their LayerNorm [E]
            return (None, tables) if value.dim() == 2 else (tables, None)
        if parts[:2] == ["generator_predictions", "dense"]:
            return tables, keep["hidden"]
        if parts[:2] == ["generator_predictions", "LayerNorm"]:
            return tables, None
        if parts[:2] == ["sequence_summary", "summary"]:
            return keep["pooled"], keep["hidden"]
        return RobertaCut.keep(parts, value, at, keep, head)


class ModernBertCut:
    """ModernBERT's ranks: the hidden channels at every norm's output (the embeddings', each layer's two, the final
    one), each head's context vector, each GeGLU neuron (act(value) x gate, Wo's input), and a task model's
    prediction head (dense, norm: the classifier's input, per example or per token). Wqkv keeps its heads' rows in
    each of Q, K and V; Wi keeps its neurons' rows in both halves, value and gate."""

    @staticmethod
    def watch(model):
        encoder = model.base_model
        yield encoder.embeddings.norm, "hidden.embeddings", False, False
        yield encoder.final_norm, "hidden.final", False, False
        if hasattr(model, "classifier") and hasattr(model, "head"):
            yield model.head, "pooled", False, False
        for i, layer in enumerate(encoder.layers):
            if i:
                yield layer.attn_norm, f"hidden.{i}.attention", False, False
            yield layer.mlp_norm, f"hidden.{i}.mlp", False, False
            yield layer.attn.Wo, f"heads.{i}", True, True
            yield layer.mlp.Wo, f"neurons.{i}", False, True

    layer_list = "layers"

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        hidden, pooled = keep["hidden"], keep["pooled"]
        if at is not None:
            channels, neurons = keep["channels"], keep["neurons"]
            module = ".".join(parts[at + 2:-1])
            if module == "attn.Wqkv":
                third = len(value) // 3
                return torch.cat([channels, channels + third, channels + 2 * third]), hidden
            if module == "mlp.Wi":
                return torch.cat([neurons, neurons + len(value) // 2]), hidden
            return {"attn.Wo": (hidden, channels), "mlp.Wo": (hidden, neurons)}.get(module, (hidden, None))
        if parts[0] == "head":  # the prediction head: dense [H, H] and its norm
            return (pooled, hidden) if parts[1] == "dense" and parts[-1] == "weight" else (pooled, None)
        if parts[0] == "classifier":
            return None, pooled
        if "embeddings" in parts or "final_norm" in parts:
            return (None, hidden) if value.dim() == 2 else (hidden, None)
        return None, None


def cut_of(model):
    """The cut rules of a model's architecture (architectures.Architecture.cut)."""
    from .architectures.registry import architecture

    return architecture(model.config).cut_rules()


def activation_ranks(model, run, head=None) -> dict[str, torch.Tensor]:
    """How much the teacher `model` (an encoder or a task model, any architecture) uses each of its parts while
    `run()` feeds it data: "hidden" [H], each channel's mean |value| summed over every norm's output; "heads"
    [layers, heads], the mean norm of each head's context vector; "neurons" [layers, I], each feed-forward
    activation's mean |value|; "pooled" [H] (with a pooler or prediction head), each of its outputs' mean |value|,
    times the norm of the weights the task's `head` (task_head) gives it. A head reading the tokens directly reads
    the hidden channels, ranked as they are."""
    config = model.config
    head_size = config.hidden_size // config.num_attention_heads
    totals: dict = {}

    def watch(module, key, per_head, on_input):
        def hook(module, args, output):
            x = (args[0] if on_input else output).detach().float()
            x = x.reshape(-1, x.shape[-1])
            x = x.view(len(x), -1, head_size).norm(dim=-1) if per_head else x.abs()
            total, rows = totals.get(key, (0.0, 0))
            totals[key] = (total + x.sum(0), rows + len(x))
        return module.register_forward_hook(hook)

    hooks = [watch(*point) for point in cut_of(model).watch(model)]
    try:
        with torch.no_grad():
            run()
    finally:
        for hook in hooks:
            hook.remove()
    mean = {key: total / rows for key, (total, rows) in totals.items()}
    layers = range(config.num_hidden_layers)
    ranks = {"hidden": sum(v for k, v in mean.items() if k.startswith("hidden.")),
             "heads": torch.stack([mean[f"heads.{i}"] for i in layers]),
             "neurons": torch.stack([mean[f"neurons.{i}"] for i in layers])}
    if "pooled" in mean:
        ranks["pooled"] = mean["pooled"] * (head.weight.detach().float().norm(dim=0) if head is not None else 1)
    return ranks


def top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of the k highest scores, in ascending order."""
    return scores.topk(k).indices.sort().values


def cut_weights(weights: dict, config, head_size: int, layers: list[int], ranks: dict, head: str | None = None,
                rules=BertCut) -> dict:
    """The teacher's `weights` (a state dict with or without the task model's prefix) cut to `config`: its `layers`
    renumbered from 0, in each the hidden channels, heads and feed-forward neurons that `ranks` (activation_ranks)
    rank highest (the same heads in every layer where the rules' `shared_heads` say so: MPNet's); the pooled vector
    keeps the outputs ranked highest. The task's `head` (the name of its parameters) keeps the input channels it
    reads. `rules`: the architecture's (BertCut, ModernBertCut)."""
    width = config.hidden_size
    keep = {"hidden": top(ranks["hidden"], width), "pooled": top(ranks["pooled"], width) if "pooled" in ranks else None,
            "weights": weights}  # which the rules may look at (ELECTRA's: whether its tables are projected)
    heads = [top(ranks["heads"][i], width // head_size) for i in layers]
    if getattr(rules, "shared_heads", False):  # one set of heads in every layer (MPNet's bias, a column a head)
        heads = [top(ranks["heads"][layers].sum(0), width // head_size)] * len(layers)
    keep["heads"] = heads[0]
    channels = [(h[:, None] * head_size + torch.arange(head_size)).flatten() for h in heads]
    neurons = [top(ranks["neurons"][i], config.intermediate_size) for i in layers]
    renumbered = {i: k for k, i in enumerate(layers)}
    cut = {}
    for key, value in weights.items():
        parts = key.split(".")
        at = parts.index(rules.layer_list) if rules.layer_list in parts else None
        if at is not None:
            if int(parts[at + 1]) not in renumbered:
                continue
            k = renumbered[int(parts[at + 1])]
            key = ".".join(parts[:at + 1] + [str(k)] + parts[at + 2:])
            keep.update(channels=channels[k], neurons=neurons[k])
        rows, cols = rules.keep(parts, value, at, keep, head)
        if rows is not None:
            value = value[rows]
        if cols is not None and value.dim() == 2:
            value = value[:, cols]
        cut[key] = value
    return cut


def pruned_student(teacher, config, layers: list[int], ranks: dict):
    """A model of the teacher's class and `config` (cut_config), cut from the teacher (cut_weights): a task model,
    or a bare encoder (with a pooler where the teacher has one). A layer without its own attention norm (the first,
    in ModernBERT) drops the one of the teacher's layer it was cut from."""
    head_size = teacher.config.hidden_size // teacher.config.num_attention_heads
    bare = {"add_pooling_layer": teacher.pooler is not None} if isinstance(teacher, BertModel) else {}
    student = type(teacher)(config, **bare)
    weights = cut_weights(teacher.state_dict(), config, head_size, layers, ranks, getattr(teacher, "head_name", None),
                          cut_of(teacher))
    own = student.state_dict()
    with torch.no_grad():
        student.load_state_dict({k: v for k, v in weights.items() if k in own}, strict=True)
    return student
