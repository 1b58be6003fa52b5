"""General distillation (`pretrain --objective distill --teacher DIR`): a student learns a teacher's
representations on the pre-training rows, with no masked-LM head on either side.

Two signals, both on the last layer of each model, both averaged over real tokens:

- hidden states: the squared error between the teacher's last hidden states and the student's, mapped to the
  teacher's width by a learned linear map when the widths differ (the map is not part of the saved model; it
  is kept beside it, in `distill_projection.safetensors`, for --resume);
- self-attention relations (MiniLMv2, Wang et al. 2021): for queries, keys and values alike, the last layer's
  vectors are split into R relation heads, and the scaled dot products of every token with every other
  (softmax over the real tokens) are the relations; the loss is the KL divergence from the teacher's to the
  student's, summed over q-q, k-k and v-v and averaged over heads. R is the largest number up to the
  teacher's head count that divides both widths, so that any widths and head counts can be paired.

`--objective distill` trains on both (`DISTILL_LOSSES`), `distill-hidden` and `distill-relations` on one; the
held-out figures give both either way, so that the three can be compared (objectives.py).
"""

import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..data.shards import check_vocab
from ..core.errors import BertforgeError
from ..core.io import atomic_path
from ..text.tokenizer import BertTokenizer


DISTILL_LOSSES = ("hidden_loss", "relation_loss")
PROJECTION_FILE = "distill_projection.safetensors"


def relation_heads(teacher_width: int, student_width: int, teacher_heads: int) -> int:
    return max(r for r in range(1, teacher_heads + 1) if teacher_width % r == 0 and student_width % r == 0)


def relation_log_probs(vectors: torch.Tensor, mask: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, L, H] vectors -> [B, R, L, L] log-softmax of the scaled dot products over the real tokens (keys)."""
    batch, length, width = vectors.shape
    # fp32 even under bf16 autocast: the loss is a small difference of these log-probabilities
    with torch.autocast(vectors.device.type, enabled=False):
        split = vectors.float().view(batch, length, heads, width // heads).transpose(1, 2)
        scores = split @ split.transpose(-1, -2) / math.sqrt(width // heads)
        scores = scores.masked_fill(~mask[:, None, None, :], torch.finfo(scores.dtype).min)
        return torch.log_softmax(scores, -1)


def relation_kl(teacher: torch.Tensor, student: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(teacher || student) per query row, summed over keys, averaged over heads: [B, L], 0 at padding."""
    kl = (teacher.exp() * (teacher - student)).sum(-1).mean(1)
    return kl * mask


def last_layer_qkv(model, hidden_in: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The last layer's query, key and value vectors [B, L, H] from that layer's input hidden states."""
    attention = model.encoder.layer[-1].attention.self
    return attention.query(hidden_in), attention.key(hidden_in), attention.value(hidden_in)


class GeneralDistiller(nn.Module):
    """What the training loop trains for `--objective distill`: the student (a BertForPreTraining, saved as it
    is; in `distill --representations`, the task model), the frozen teacher encoder, and the map from the
    student's width to the teacher's."""

    def __init__(self, student, teacher, terms=DISTILL_LOSSES):
        super().__init__()
        self.student, self.teacher, self.terms = student, teacher, terms
        teacher.requires_grad_(False)
        s, t = student.config, teacher.config
        self.projection = nn.Linear(s.hidden_size, t.hidden_size) if s.hidden_size != t.hidden_size else nn.Identity()
        self.heads = relation_heads(t.hidden_size, s.hidden_size, t.num_attention_heads)
        self.config = s

    def train(self, mode: bool = True):
        super().train(mode)
        self.teacher.eval()  # no dropout in the targets
        return self

    def states(self, model, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
        """(the last layer's input, its output), [B, L, H] each."""
        out = model(**batch, output_hidden_states=True)
        return out.hidden_states[-2], out.hidden_states[-1]

    def forward(self, input_ids, attention_mask, token_type_ids=None, terms=None, **unused) -> dict:
        """The losses `terms` (default: those it trains on), each a mean over real tokens."""
        batch = dict(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
        return self.losses(batch, *self.states(self.student.bert, batch), terms or self.terms)

    def losses(self, batch: dict, s_in: torch.Tensor, s_out: torch.Tensor, terms) -> dict:
        """The losses `terms` between the teacher's last layer on `batch` and the student's, given its input and
        output hidden states [B, L, H] (task distillation computes them with the student's outputs)."""
        mask = batch["attention_mask"].bool()
        tokens = mask.sum().clamp(min=1)
        with torch.no_grad():
            t_in, t_out = self.states(self.teacher, batch)
        losses = {}
        if "hidden_loss" in terms:
            hidden = ((self.projection(s_out).float() - t_out.float()) ** 2).mean(-1)
            losses["hidden_loss"] = (hidden * mask).sum() / tokens
        if "relation_loss" in terms:
            with torch.no_grad():
                t_rel = [relation_log_probs(v, mask, self.heads) for v in last_layer_qkv(self.teacher, t_in)]
            s_rel = [relation_log_probs(v, mask, self.heads) for v in last_layer_qkv(self.student.bert, s_in)]
            losses["relation_loss"] = sum(relation_kl(t, s, mask) for t, s in zip(t_rel, s_rel)).sum() / tokens
        return losses

    def save_projection(self, folder) -> None:
        if isinstance(self.projection, nn.Linear):
            with atomic_path(Path(folder) / PROJECTION_FILE) as tmp:
                save_file({k: v.detach().cpu().contiguous() for k, v in self.projection.state_dict().items()}, tmp)

    def load_weights(self, folder, **options):
        """Resuming: the student's weights and the width map."""
        report = self.student.load_weights(folder, **options)
        path = Path(folder) / PROJECTION_FILE
        if isinstance(self.projection, nn.Linear):
            if not path.is_file():
                raise BertforgeError(f"{folder}: no {PROJECTION_FILE} (the width map of a distillation run)")
            self.projection.load_state_dict(load_file(path))
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
