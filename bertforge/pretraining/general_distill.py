"""General distillation (`pretrain --objective distill --teacher DIR`): a student learns a teacher's
representations on the pre-training rows, with no masked-LM head on either side: the last layer's hidden
states and self-attention relations (model/representation_loss.py says how each is measured).

`--objective distill` trains on both (`DISTILL_LOSSES`), `distill-hidden` and `distill-relations` on one; the
held-out figures give both either way, so that the three can be compared (objectives.py).
"""

from pathlib import Path

from torch import nn

from ..core.errors import BertforgeError
from ..data.shards import check_vocab
from ..model.representation_loss import DISTILL_LOSSES, RepresentationMatch, last_layer_states
from ..text.tokenizer import BertTokenizer


class GeneralDistiller(nn.Module):
    """What the training loop trains for `--objective distill`: the student (a BertForPreTraining, saved as it
    is) and its match to the frozen teacher encoder (with the map from the student's width to the teacher's)."""

    def __init__(self, student, teacher, terms=DISTILL_LOSSES):
        super().__init__()
        self.student, self.terms, self.config = student, terms, student.config
        self.match = RepresentationMatch(teacher, student.config.hidden_size, terms)

    def forward(self, input_ids, attention_mask, token_type_ids=None, terms=None, **unused) -> dict:
        """The losses `terms` (default: those it trains on), each a mean over real tokens."""
        batch = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        encoder = self.student.bert
        return self.match(batch, encoder, *last_layer_states(encoder, batch), terms or self.terms)

    def save_projection(self, folder) -> None:
        self.match.save_projection(folder)

    def load_weights(self, folder, **options):
        """Resuming: the student's weights and the width map."""
        report = self.student.load_weights(folder, **options)
        self.match.load_projection(folder)
        return report


def load_teacher_encoder(folder) -> nn.Module:
    """The teacher's encoder (any checkpoint folder: its heads are not used)."""
    from ..model.bert import BertModel

    folder = Path(folder)
    if not (folder / "config.json").is_file():
        raise BertforgeError(f"--teacher {folder}: not a model folder (no config.json)")
    return BertModel.from_pretrained(folder).eval()


def distiller(student, teacher: str, job, terms=DISTILL_LOSSES):
    """The student wrapped with the teacher for `--objective distill`, once the teacher reads the data."""
    encoder = load_teacher_encoder(teacher)
    if encoder.config.vocab_size != student.config.vocab_size:
        raise BertforgeError(f"--teacher {teacher}: its vocabulary has {encoder.config.vocab_size} entries, the "
                             f"data's {student.config.vocab_size}: teacher and data must share the vocabulary")
    if (Path(teacher) / "vocab.txt").is_file():
        check_vocab(job.train.index, BertTokenizer.from_pretrained(teacher))
    if job.train.max_seq_length > encoder.config.max_position_embeddings:
        raise BertforgeError(f"--teacher {teacher}: {encoder.config.max_position_embeddings} positions, rows of "
                             f"{job.train.max_seq_length} tokens")
    return GeneralDistiller(student, encoder, terms)
