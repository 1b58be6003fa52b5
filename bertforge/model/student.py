"""A student's start from its teacher, for task distillation (`distill`) and general distillation (`pretrain
--objective distill*`) alike: a student of a size with its teacher's embedding tables (`student_config`), the
teacher's embeddings projected onto the student's width, so that a random student starts knowing which words are
alike (`--student-embeddings`); or the teacher itself cut to the student's size (`--prune`)."""

import torch

from ..core.errors import BertforgeError
from .bert import BertEmbeddings, BertModel
from .config import BertConfig


# The embedding tables of a BERT encoder, each with the config field that counts its rows
TABLES = {"word_embeddings": "vocab_size", "position_embeddings": "max_position_embeddings",
          "token_type_embeddings": "type_vocab_size"}


def student_config(teacher: BertConfig, size: str, **overrides) -> BertConfig:
    """A student of the size `size` (its layers, width, heads and feed-forward size) for `teacher`, with the
    teacher's vocabulary, position count and token types (`TABLES`), whatever the size's own (512 positions, 2
    token types): every row of its embedding tables is then one of the teacher's, projected (project_embeddings),
    and it reads the inputs its teacher reads, never longer ones than the teacher learned on. A student cut from
    the teacher, or made of its layers, has the teacher's tables too."""
    return BertConfig.from_name(size, **{field: getattr(teacher, field) for field in TABLES.values()}, **overrides)


def project_embeddings(teacher, student) -> None:
    """The student's token, position and segment embeddings from the teacher's, projected onto the student's width
    by the leading principal directions of the teacher's (centred) token embeddings; at the teacher's width the
    projection is a rotation, which keeps every inner product. A student with more positions or token types than
    its teacher (a `pretrain --config` size; never a student_config) keeps its own start for the rows the teacher
    lacks. The embedding LayerNorm and everything above stay fresh."""
    source, target = (next(m for m in model.modules() if isinstance(m, BertEmbeddings)) for model in (teacher, student))
    words = source.word_embeddings.weight.detach().float()
    rows, width = target.word_embeddings.weight.shape
    if width > words.shape[1]:
        raise BertforgeError(f"--student-embeddings teacher: the student is wider ({width}) than the teacher "
                             f"({words.shape[1]})")
    if rows != len(words):
        raise BertforgeError(f"--student-embeddings teacher: the student's vocabulary has {rows} entries, the "
                             f"teacher's {len(words)}: the student must read the teacher's tokens")
    centre = words.mean(0)
    directions = torch.linalg.svd(words - centre, full_matrices=False).Vh[:width].T  # teacher width x student width
    with torch.no_grad():
        target.word_embeddings.weight.copy_((words - centre) @ directions)
        for name in TABLES:
            if name != "word_embeddings":
                table, theirs = getattr(target, name).weight, getattr(source, name).weight.detach().float()
                shared = min(len(table), len(theirs))
                table[:shared] = theirs[:shared] @ directions


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


def cut_config(teacher: BertConfig, size: BertConfig, name: str) -> BertConfig:
    """The teacher's config at the size `size` (named `name` in errors): its layers, width and feed-forward size,
    with the teacher's head size, so as many heads as that divides the width into."""
    head_size = teacher.hidden_size // teacher.num_attention_heads
    if size.hidden_size > teacher.hidden_size or size.hidden_size % head_size:
        raise BertforgeError(f"--prune: the student {name} is {size.hidden_size} wide; the teacher's width "
                             f"({teacher.hidden_size}) cuts to a multiple of its head size ({head_size}) no wider")
    if size.intermediate_size > teacher.intermediate_size or size.num_hidden_layers > teacher.num_hidden_layers:
        raise BertforgeError(f"--prune: the student {name} ({size.num_hidden_layers} layers, feed-forward "
                             f"{size.intermediate_size}) is larger than the teacher ({teacher.num_hidden_layers} "
                             f"layers, {teacher.intermediate_size})")
    return BertConfig.from_dict({**teacher.to_dict(), "num_hidden_layers": size.num_hidden_layers,
                                 "hidden_size": size.hidden_size, "intermediate_size": size.intermediate_size,
                                 "num_attention_heads": size.hidden_size // head_size})


def task_head(model) -> torch.nn.Linear:
    """A task model's head layer (task_heads.TaskHead.head_name: `classifier`, `qa_outputs`). The cut keeps the
    input channels it reads: the pooler's outputs where the model has a pooler (sequence classification, multiple
    choice), else every token's hidden channels (token classification, question answering)."""
    return getattr(model, model.head_name)


def activation_ranks(encoder, run, head=None) -> dict[str, torch.Tensor]:
    """How much the teacher's `encoder` (a BertModel) uses each of its parts while `run()` feeds it data: "hidden"
    [H], each channel's mean |value| summed over every LayerNorm's output; "heads" [layers, heads], the mean norm
    of each head's context vector; "neurons" [layers, I], each feed-forward activation's mean |value|; "pooled" [H]
    (with a pooler), each pooler output's mean |value|, times the norm of the weights the task's `head` (task_head,
    on the pooled output) gives it. A head on the tokens reads the hidden channels, ranked as they are."""
    config = encoder.config
    head_size = config.hidden_size // config.num_attention_heads
    totals: dict = {}

    def watch(module, key, per_head=False, on_input=False):
        def hook(module, args, output):
            x = (args[0] if on_input else output).detach().float()
            x = x.reshape(-1, x.shape[-1])
            x = x.view(len(x), -1, head_size).norm(dim=-1) if per_head else x.abs()
            total, rows = totals.get(key, (0.0, 0))
            totals[key] = (total + x.sum(0), rows + len(x))
        return module.register_forward_hook(hook)

    hooks = [watch(encoder.embeddings.LayerNorm, "hidden.embeddings")]
    if encoder.pooler is not None:
        hooks.append(watch(encoder.pooler, "pooled"))
    for i, layer in enumerate(encoder.encoder.layer):
        hooks += [watch(layer.attention.output.LayerNorm, f"hidden.{i}.attention"),
                  watch(layer.output.LayerNorm, f"hidden.{i}.output"),
                  watch(layer.attention.output.dense, f"heads.{i}", per_head=True, on_input=True),
                  watch(layer.output.dense, f"neurons.{i}", on_input=True)]
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


def cut_weights(weights: dict, config: BertConfig, head_size: int, layers: list[int], ranks: dict,
                head: str | None = None) -> dict:
    """The teacher's `weights` (a state dict with or without the task model's "bert." prefix) cut to `config`:
    its `layers` renumbered from 0, in each the hidden channels, heads and feed-forward neurons that `ranks`
    (activation_ranks) rank highest; the pooler keeps the outputs ranked highest. The task's `head` (the name of
    its parameters, task_heads.TaskHead.head_name) keeps the input channels it reads: the pooler's kept outputs,
    or without a pooler the kept hidden channels."""
    width = config.hidden_size
    hidden = top(ranks["hidden"], width)
    pooled = top(ranks["pooled"], width) if "pooled" in ranks else None
    heads = [top(ranks["heads"][i], width // head_size) for i in layers]
    channels = [(h[:, None] * head_size + torch.arange(head_size)).flatten() for h in heads]
    neurons = [top(ranks["neurons"][i], config.intermediate_size) for i in layers]
    renumbered = {i: k for k, i in enumerate(layers)}
    cut = {}
    for key, value in weights.items():
        parts = key.split(".")
        if "layer" in parts:  # [bert.]encoder.layer.I.<module>.<parameter>
            at = parts.index("layer")
            if int(parts[at + 1]) not in renumbered:
                continue
            k = renumbered[int(parts[at + 1])]
            rows, cols = {"attention.self.query": (channels[k], hidden), "attention.self.key": (channels[k], hidden),
                          "attention.self.value": (channels[k], hidden),
                          "attention.output.dense": (hidden, channels[k]),
                          "intermediate.dense": (neurons[k], hidden), "output.dense": (hidden, neurons[k])
                          }.get(".".join(parts[at + 2:-1]), (hidden, None))  # the LayerNorms
            key = ".".join(parts[:at + 1] + [str(k)] + parts[at + 2:])
        elif "pooler" in parts:
            rows, cols = pooled, hidden
        elif head in parts:
            rows, cols = None, hidden if pooled is None else pooled
        elif "embeddings" in parts:  # the tables [rows, H], their LayerNorm [H]
            rows, cols = (None, hidden) if value.dim() == 2 else (hidden, None)
        else:
            rows, cols = None, None
        if rows is not None:
            value = value[rows]
        if cols is not None and value.dim() == 2:
            value = value[:, cols]
        cut[key] = value
    return cut


def pruned_student(teacher, config: BertConfig, layers: list[int], ranks: dict):
    """A model of the teacher's class and `config` (cut_config), cut from the teacher (cut_weights): a task model,
    or a bare encoder (a BertModel, with a pooler where the teacher has one)."""
    head_size = teacher.config.hidden_size // teacher.config.num_attention_heads
    bare = {"add_pooling_layer": teacher.pooler is not None} if isinstance(teacher, BertModel) else {}
    student = type(teacher)(config, **bare)
    with torch.no_grad():
        student.load_state_dict(cut_weights(teacher.state_dict(), config, head_size, layers, ranks,
                                            getattr(teacher, "head_name", None)), strict=True)
    return student
