"""A student's start from its teacher, for task distillation (`distill`) and general distillation (`pretrain
--objective distill*`) alike: a student of a size with its teacher's embedding tables (`student_config`), the
teacher's embeddings projected onto the student's width, so that a random student starts knowing which words are
alike (`--student-embeddings`); or the teacher itself cut to the student's size (`--prune`)."""

import torch

from ..core.errors import BertforgeError
from .architectures.bert import BertModel
from .architectures.config import BertConfig
from .cut_rules import BertCut


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
    reads. `rules`: the architecture's (cut_rules.BertCut, ModernBertCut, ...)."""
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
