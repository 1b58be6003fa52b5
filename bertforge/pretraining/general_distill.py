"""General distillation (`pretrain --objective distill --teacher DIR`): a student learns a teacher's
representations on the pre-training rows, with no masked-LM head on either side: the last layer's hidden
states and self-attention relations (training/representation_loss.py says how each is measured).

`--objective distill` trains on both (`DISTILL_LOSSES`), `distill-hidden` and `distill-relations` on one; the
held-out figures give both either way, so that the three can be compared (objectives.py). With `--prune` the
student starts as the teacher cut to its size (model/student.py), ranked on the training rows.
"""

from pathlib import Path

from torch import nn

from ..core.errors import BertforgeError
from ..data.shards import check_vocab
from ..model.architectures.registry import pretraining_class
from ..training.representation_loss import DISTILL_LOSSES, RepresentationMatch, last_layer_states
from ..text.tokenizer import BertTokenizer


class GeneralDistiller(nn.Module):
    """What the training loop trains for `--objective distill`: the student (its architecture's pre-training
    model, saved as it is) and its match to the frozen teacher encoder (with the map from the student's width to
    the teacher's)."""

    def __init__(self, student, teacher, terms=DISTILL_LOSSES):
        super().__init__()
        self.student, self.terms, self.config = student, terms, student.config
        self.match = RepresentationMatch(teacher, student.config.hidden_size, terms)

    def forward(self, input_ids, attention_mask, token_type_ids=None, terms=None, **unused) -> dict:
        """The losses `terms` (default: those it trains on), each a mean over real tokens."""
        batch = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        encoder = self.student.base_model
        return self.match(batch, encoder, *last_layer_states(encoder, batch), terms or self.terms)

    def save_projection(self, folder) -> None:
        self.match.save_projection(folder)

    def load_weights(self, folder, **options):
        """Resuming: the student's weights and the width map."""
        report = self.student.load_weights(folder, **options)
        self.match.load_projection(folder)
        return report


def load_teacher_encoder(folder) -> nn.Module:
    """The teacher's encoder (a checkpoint folder of any architecture: its heads are not used)."""
    from ..model.architectures.bert import BertModel

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise BertforgeError(f"--teacher {folder}: not a model folder (no config.json)")
    return BertModel.from_pretrained(folder).eval()


RANK_BATCH = 64  # rows per teacher pass while --prune ranks its parts


def cut_student(student, encoder, job, name: str):
    """--prune: a pre-training model of the student's size (`name` in errors) and dropout cut from the teacher
    `encoder`, of the teacher's architecture: its layers evenly spaced, the parts it uses most on the training
    rows (model/student.py); heads fresh."""
    import numpy as np
    import torch

    from ..model.student import activation_ranks, cut_config, evenly_spaced, pruned_student, ranking_rows

    teacher = encoder.config
    dropout = getattr(student.config, student.config.dropout_fields[0])
    config = cut_config(teacher, student.config, name).with_dropout(dropout)
    picked = np.array(ranking_rows(len(job.train), job.seed))
    rows = job.rows_of(job.train, picked, 0)

    def run():
        for start in range(0, len(picked), RANK_BATCH):
            encoder(**{k: v[start:start + RANK_BATCH] for k, v in rows.items()})

    layers = evenly_spaced(teacher.num_hidden_layers, config.num_hidden_layers)
    cut = pretraining_class(config)(config)
    weights = pruned_student(encoder, config, layers, activation_ranks(encoder, run)).state_dict()
    with torch.no_grad():
        missing, unexpected = cut.base_model.load_state_dict(weights, strict=False)
    if unexpected or any(not key.startswith("pooler.") for key in missing):  # a teacher without a pooler
        raise BertforgeError(f"--prune: the teacher's weights do not fit the student ({(missing + unexpected)[:3]})")
    return cut


def distiller(student, teacher: str, job, terms=DISTILL_LOSSES, prune: str | None = None):
    """The student wrapped with the teacher for `--objective distill`, once the teacher reads the data; `prune`:
    the student's size name, to start it as the teacher cut to that size (cut_student) instead."""
    encoder = load_teacher_encoder(teacher)
    if encoder.config.vocab_size != student.config.vocab_size:
        raise BertforgeError(f"--teacher {teacher}: its vocabulary has {encoder.config.vocab_size} entries, the "
                             f"data's {student.config.vocab_size}: teacher and data must share the vocabulary")
    if (Path(teacher) / "vocab.txt").is_file():
        check_vocab(job.train.index, BertTokenizer.from_pretrained(teacher))
    if job.train.max_seq_length > encoder.config.max_tokens:
        raise BertforgeError(f"--teacher {teacher}: {encoder.config.max_tokens} positions, rows of "
                             f"{job.train.max_seq_length} tokens")
    if prune:
        student = cut_student(student, encoder, job, prune)
    return GeneralDistiller(student, encoder, terms)
