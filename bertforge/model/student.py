"""A student's start from its teacher: the teacher's embeddings projected onto the student's width, so that a
random student starts knowing which words are alike (task distillation's `distill --student-embeddings` and
general distillation's `pretrain --objective distill*` both use it)."""

import torch

from ..core.errors import BertforgeError
from .bert import BertEmbeddings


def project_embeddings(teacher, student) -> None:
    """The student's token, position and segment embeddings from the teacher's, projected onto the student's width
    by the leading principal directions of the teacher's (centred) token embeddings; at the teacher's width the
    projection is a rotation, which keeps every inner product. The embedding LayerNorm and everything above stay
    fresh."""
    source, target = (next(m for m in model.modules() if isinstance(m, BertEmbeddings)) for model in (teacher, student))
    words = source.word_embeddings.weight.detach().float()
    width = target.word_embeddings.weight.shape[1]
    if width > words.shape[1]:
        raise BertforgeError(f"--student-embeddings teacher: the student is wider ({width}) than the teacher "
                             f"({words.shape[1]})")
    centre = words.mean(0)
    directions = torch.linalg.svd(words - centre, full_matrices=False).Vh[:width].T  # teacher width x student width
    with torch.no_grad():
        target.word_embeddings.weight.copy_((words - centre) @ directions)
        for name in ("position_embeddings", "token_type_embeddings"):
            rows = getattr(target, name).weight.shape[0]
            getattr(target, name).weight.copy_(getattr(source, name).weight.detach().float()[:rows] @ directions)


def start_embeddings(student, teacher, choice: str | None) -> str:
    """A fresh student's embeddings: the teacher's projected (`choice` "teacher"; by default, None, where the
    student is no wider) or its own random ones ("random"); returns which."""
    if choice is None:
        choice = "teacher" if student.config.hidden_size <= teacher.config.hidden_size else "random"
    if choice == "teacher":
        project_embeddings(teacher, student)
    return choice


# ---------------------------------------------------------------------------------------------------------
# A student cut from the teacher (distill --prune): the parts the teacher uses most on the task's data, ranked by
# the mean magnitude of their activations (Minitron's ranking, Muralidharan et al. 2024), kept in its order.


def activation_ranks(teacher, run) -> dict[str, torch.Tensor]:
    """How much the teacher (a task model: encoder `bert`, pooler, `classifier`) uses each of its parts while
    `run()` feeds it data: "hidden" [H], each channel's mean |value| summed over every LayerNorm's output;
    "heads" [layers, heads], the mean norm of each head's context vector; "neurons" [layers, I], each feed-forward
    activation's mean |value|; "pooled" [H], each pooler output's mean |value| times the norm of the weights the
    classifier gives it."""
    config = teacher.config
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

    bert = teacher.bert
    hooks = [watch(bert.embeddings.LayerNorm, "hidden.embeddings"), watch(bert.pooler, "pooled")]
    for i, layer in enumerate(bert.encoder.layer):
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
    return {"hidden": sum(v for k, v in mean.items() if k.startswith("hidden.")),
            "heads": torch.stack([mean[f"heads.{i}"] for i in layers]),
            "neurons": torch.stack([mean[f"neurons.{i}"] for i in layers]),
            "pooled": mean["pooled"] * teacher.classifier.weight.detach().float().norm(dim=0)}


def top(scores: torch.Tensor, k: int) -> torch.Tensor:
    """The indices of the k highest scores, in ascending order."""
    return scores.topk(k).indices.sort().values


def pruned_student(teacher, config, layers: list[int], ranks: dict[str, torch.Tensor]):
    """A model of the teacher's class and `config` (narrower or as wide, the teacher's head size) made of the
    teacher's `layers`, each cut to the hidden channels, heads and feed-forward neurons that `ranks`
    (activation_ranks) rank highest; the pooler keeps the outputs the classifier leans on most."""
    width, head_size = config.hidden_size, teacher.config.hidden_size // teacher.config.num_attention_heads
    hidden = top(ranks["hidden"], width)
    pooled = top(ranks["pooled"], width)
    heads = [top(ranks["heads"][i], width // head_size) for i in layers]
    channels = [(h[:, None] * head_size + torch.arange(head_size)).flatten() for h in heads]
    neurons = [top(ranks["neurons"][i], config.intermediate_size) for i in layers]
    renumbered = {i: k for k, i in enumerate(layers)}
    weights = {}
    for key, value in teacher.state_dict().items():
        parts = key.split(".")
        if "layer" in parts:  # bert.encoder.layer.I.<module>...
            at = parts.index("layer")
            i = int(parts[at + 1])
            if i not in renumbered:
                continue
            k = renumbered[i]
            module = ".".join(parts[at + 2:-1])
            rows, cols = {"attention.self.query": (channels[k], hidden), "attention.self.key": (channels[k], hidden),
                          "attention.self.value": (channels[k], hidden),
                          "attention.output.dense": (hidden, channels[k]),
                          "intermediate.dense": (neurons[k], hidden), "output.dense": (hidden, neurons[k])
                          }.get(module, (hidden, None))  # the LayerNorms
            key = ".".join(parts[:at + 1] + [str(k)] + parts[at + 2:])
        elif "pooler" in parts:
            rows, cols = pooled, hidden
        elif "classifier" in parts:
            rows, cols = None, pooled
        elif "embeddings" in parts and value.dim() == 2:
            rows, cols = None, hidden
        elif "embeddings" in parts:  # the LayerNorm
            rows, cols = hidden, None
        else:
            rows, cols = None, None
        if rows is not None:
            value = value[rows]
        if cols is not None and value.dim() == 2:
            value = value[:, cols]
        weights[key] = value
    student = type(teacher)(config)
    with torch.no_grad():
        student.load_state_dict(weights, strict=True)
    return student
