"""A distillation's student and teacher: the teacher read (`load_teacher`: a model fine-tuned for the task, with the
data's labels), and the student built from a size name (random layers, the teacher's embeddings projected onto its
width), a checkpoint folder, the teacher's layers (`--student-layers`, `teacher_layers`) or the teacher cut to a
size (`--prune`, `cut_from_teacher`: model/student.py's ranking on the training rows); and what a recipe knows of it
(`student_start`, `encoder_share`)."""

import sys
from pathlib import Path

from ..core.errors import BertforgeError
from ..core.hub import model_folder
from ..model.architectures.config import SIZES, BertConfig
from ..model.architectures.registry import architecture, head_of, load_config, model_class
from ..tasks.base import TaskFamily
from ..text.tokenizer import BertTokenizer
from .finetune import read_splits
from .soft_targets import SOFT_TARGETS


def student_folder(spec: str, teacher_tokenizer, flag: str = "--student") -> Path:
    """A student checkpoint folder, or a Hub model's (or the model --prune-from names), which must read the
    teacher's tokens."""
    try:
        folder = model_folder(spec)
    except BertforgeError as e:
        size = f"not a size ({', '.join(SIZES)}); " if flag == "--student" else ""
        raise BertforgeError(f"{flag} {spec}: {size}{str(e).removeprefix(f'{spec}: ')}") from None
    if not (folder / "config.json").is_file():
        raise BertforgeError(f"{flag} {spec}: " + (f"neither a size ({', '.join(SIZES)}) nor a model folder"
                                                   if flag == "--student" else "not a model folder"))
    student = BertTokenizer.from_pretrained(folder)
    if student.get_vocab() != teacher_tokenizer.get_vocab():
        raise BertforgeError(f"{flag} {spec}: its vocabulary ({student.vocab_size} tokens) is not the "
                             f"teacher's ({teacher_tokenizer.vocab_size}): the student must read the same tokens")
    return folder


def student_start(student: str | None, layers: list[int] | None, prune: bool) -> str:
    """What the student starts from: "cut" (from the teacher or --prune-from), "layers" (the teacher's), "random"
    (a size's random layers), "checkpoint" (a model folder)."""
    return "cut" if prune else "layers" if layers is not None else "random" if student in SIZES else "checkpoint"


def encoder_share(student, teacher) -> float:
    """The student's encoder parameters (its layers: not the embeddings, nor the head) over the teacher's."""
    def encoder(model):
        return sum(p.numel() for name, p in model.base_model.named_parameters() if not name.startswith("embeddings."))

    return encoder(student) / encoder(teacher)


def load_teacher(family: TaskFamily, folder: Path, flag: str = "--teacher"):
    """The teacher (or the model --prune-from names): a model fine-tuned for the task (its head trained), with the
    data's labels."""
    from .evaluate import check_model

    if not (folder / "config.json").is_file():
        raise BertforgeError(f"{flag} {folder}: not a model folder (no config.json)")
    teacher = family.model_class.from_pretrained(folder)
    check_model(family, teacher, folder, fine_tuned=True)
    config = teacher.config
    if SOFT_TARGETS[family.model_class.__name__].own_labels:
        names = [str(config.id2label[i]) for i in range(config.num_labels)]
        if family.model_order(config) != list(range(len(family.labels))):  # its outputs are the data's labels
            raise BertforgeError(f"{flag} {folder}: its labels ({', '.join(names)}) are not the data's "
                                 f"({', '.join(map(str, family.labels))})")
    return teacher


def read_teacher(family: TaskFamily, teacher_dir: Path, max_train_examples, max_eval_examples) -> tuple:
    """The teacher's tokenizer, the task's splits in its tokens, and the teacher."""
    if not (teacher_dir / "config.json").is_file():
        raise BertforgeError(f"--teacher {teacher_dir}: not a model folder (no config.json)")
    tokenizer = BertTokenizer.from_pretrained(teacher_dir)
    splits = read_splits(family, tokenizer, max_train_examples, max_eval_examples)
    return tokenizer, splits, load_teacher(family, teacher_dir)


def build_student(spec: str | None, layers: list[int] | None, teacher, teacher_dir: Path, tokenizer,
                  family: TaskFamily, embeddings: str | None = None, prune_on: dict | None = None, cut_from=None):
    """The student model (see the module docstring); random weights are drawn from the current torch seed.
    `prune_on`: encoded training rows to rank the parts of the model cut on: `cut_from` (--prune-from's), or the
    teacher."""
    head = family.head_config()
    source = cut_from if cut_from is not None and prune_on is not None else teacher
    depth = source.config.num_hidden_layers
    if layers is not None and max(layers) >= depth:
        raise BertforgeError(f"--student-layers {','.join(map(str, layers))}: the "
                             f"{'teacher ' + str(teacher_dir) if source is teacher else '--prune-from model'} has "
                             f"{depth} layers (0 to {depth - 1})")
    if prune_on is not None:
        return cut_from_teacher(source, spec, layers, family, prune_on, tokenizer.pad_token_id,
                                "the teacher" if source is teacher else "the --prune-from model")
    if layers is not None:
        return teacher_layers(teacher, teacher_dir, layers, spec, tokenizer, family)
    if spec in SIZES:
        from ..model.student import start_embeddings, student_config

        config = student_config(teacher.config, spec, pad_token_id=tokenizer.pad_token_id)
        config = type(config).from_dict({**config.to_dict(), **head})
        student = model_class(head_of(family.model_class.architecture()), config)(config)
        start_embeddings(student, teacher, embeddings)
        return student
    return family.model_class.from_pretrained(student_folder(spec, tokenizer), new_head=True, **head)


def teacher_layers(teacher, teacher_dir: Path, layers: list[int], spec: str | None, tokenizer, family: TaskFamily):
    """A student of the teacher's `layers` (renumbered from 0) with its embeddings, pooler and head."""
    import torch

    width = teacher.config.hidden_size
    if spec is not None:
        config = BertConfig.from_name(spec) if spec in SIZES else load_config(student_folder(spec, tokenizer))
        if config.hidden_size != width or config.num_hidden_layers != len(layers):
            raise BertforgeError(f"--student-layers: the student {spec} has {config.num_hidden_layers} layers of "
                                 f"{config.hidden_size}, the teacher's layers are {width} wide: give "
                                 f"{len(layers)} layers of that width, or leave --student out")
    config = type(teacher.config).from_dict({**teacher.config.to_dict(), "num_hidden_layers": len(layers),
                                             **family.head_config()})
    student = model_class(head_of(family.model_class.architecture()), config)(config)
    arch = architecture(teacher.config)  # its layers: BERT's encoder.layer.I, DistilBERT's transformer.layer.I
    renumbered = {str(i): str(k) for k, i in enumerate(layers)}
    weights = {}
    for key, value in teacher.state_dict().items():
        layer = arch.layer_of(key)
        if layer is None:
            weights[key] = value
        elif layer in renumbered:
            weights[key.replace(f"{arch.layers}.{layer}.", f"{arch.layers}.{renumbered[layer]}.", 1)] = value
    with torch.no_grad():
        student.load_state_dict(weights, strict=True)
    return student


def cut_from_teacher(teacher, spec: str, layers: list[int] | None, family: TaskFamily, sample: dict, pad_id: int,
                     named: str = "the teacher"):
    """--prune: a student of the size `spec` cut from the teacher's `layers` (default: evenly spaced), keeping the
    hidden channels, heads and feed-forward neurons the teacher uses most on the encoded rows `sample`
    (model/student.py); `named`: what the printed line calls the model cut (--prune-from's)."""
    from ..inference.batches import padding, run_model
    from ..model.student import activation_ranks, cut_config, evenly_spaced, pruned_student, task_head

    size = BertConfig.from_name(spec)
    if layers is None:
        layers = evenly_spaced(teacher.config.num_hidden_layers, size.num_hidden_layers)
    elif len(layers) != size.num_hidden_layers:
        raise BertforgeError(f"--student-layers {','.join(map(str, layers))}: the student {spec} has "
                             f"{size.num_hidden_layers} layers")
    config = cut_config(teacher.config, size, spec, layers)
    ranks = activation_ranks(teacher, lambda: run_model(teacher, sample, padding(family.inputs, pad_id),
                                                             family.output_keys), task_head(teacher))
    print(f"student cut from {named}'s layers {','.join(map(str, layers))}: {config.hidden_size} wide, "
          f"{config.num_attention_heads} heads, feed-forward {config.intermediate_size}", file=sys.stderr)
    return pruned_student(teacher, config, layers, ranks)


def prune_sample(encoded: dict, seed: int) -> dict:
    """The training rows --prune ranks the teacher's parts on (model/student.py's ranking_rows)."""
    from ..model.student import ranking_rows

    picked = ranking_rows(len(encoded["input_ids"]), seed)
    return {key: [values[i] for i in picked] for key, values in encoded.items()}
