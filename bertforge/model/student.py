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
