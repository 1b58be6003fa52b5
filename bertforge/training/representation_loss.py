"""Matching a teacher's last-layer representations: the terms general distillation trains on (`pretrain
--objective distill`, pretraining/general_distill.py) and task distillation adds with `distill --representations`
(finetuning/distill.py). Both are on the last layer of each model, both averaged over real tokens:

- hidden states: the squared error between the teacher's last hidden states and the student's, mapped to the
  teacher's width by a learned linear map when the widths differ (the map is not part of the student: it is kept
  beside it, in `distill_projection.safetensors`, for --resume);
- self-attention relations (MiniLMv2, Wang et al. 2021): for queries, keys and values alike, the last layer's
  vectors are split into R relation heads, and the scaled dot products of every token with every other
  (softmax over the real tokens) are the relations; the loss is the KL divergence from the teacher's to the
  student's, summed over q-q, k-k and v-v and averaged over heads. R is the largest number up to the
  teacher's head count that divides both widths, so that any widths and head counts can be paired. Each encoder
  gives its last layer's vectors (`last_layer_qkv`; ModernBERT's before the rotary positions).
"""

import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from ..core.errors import BertforgeError
from ..core.io import atomic_path, has_model_file, model_file

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


def last_layer_states(encoder, batch: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """An encoder's (last layer's input, its output) on `batch`, [B, L, H] each."""
    out = encoder(**batch, output_hidden_states=True)
    return out.hidden_states[-2], out.hidden_states[-1]


class RepresentationMatch(nn.Module):
    """The frozen teacher encoder, the map from the student's width to the teacher's, and the losses between the
    two last layers."""

    def __init__(self, teacher, student_width: int, terms=DISTILL_LOSSES):
        super().__init__()
        self.teacher, self.terms = teacher, terms
        teacher.requires_grad_(False)
        width = teacher.config.hidden_size
        self.projection = nn.Linear(student_width, width) if student_width != width else nn.Identity()
        self.heads = relation_heads(width, student_width, teacher.config.num_attention_heads)

    def train(self, mode: bool = True):
        super().train(mode)
        self.teacher.eval()  # no dropout in the targets
        return self

    def forward(self, batch: dict, student_encoder, s_in: torch.Tensor, s_out: torch.Tensor, terms=None) -> dict:
        """The losses `terms` (default: those it trains on), each a mean over real tokens, given the student
        encoder's last-layer input and output on `batch` (input_ids, attention_mask, token_type_ids)."""
        terms = terms or self.terms
        mask = batch["attention_mask"].bool()
        tokens = mask.sum().clamp(min=1)
        with torch.no_grad():
            t_in, t_out = last_layer_states(self.teacher, batch)
        losses = {}
        if "hidden_loss" in terms:
            hidden = ((self.projection(s_out).float() - t_out.float()) ** 2).mean(-1)
            losses["hidden_loss"] = (hidden * mask).sum() / tokens
        if "relation_loss" in terms:
            with torch.no_grad():
                t_rel = [relation_log_probs(v, mask, self.heads) for v in self.teacher.last_layer_qkv(t_in)]
            s_rel = [relation_log_probs(v, mask, self.heads) for v in student_encoder.last_layer_qkv(s_in)]
            losses["relation_loss"] = sum(relation_kl(t, s, mask) for t, s in zip(t_rel, s_rel)).sum() / tokens
        return losses

    def save_projection(self, folder) -> None:
        if isinstance(self.projection, nn.Linear):
            with atomic_path(Path(folder) / PROJECTION_FILE) as tmp:
                save_file({k: v.detach().cpu().contiguous() for k, v in self.projection.state_dict().items()}, tmp)

    def load_projection(self, folder) -> None:
        path = Path(folder) / PROJECTION_FILE
        if isinstance(self.projection, nn.Linear):
            if not has_model_file(path, folder):
                raise BertforgeError(f"{folder}: no {PROJECTION_FILE} (the width map of a distillation run)")
            self.projection.load_state_dict(load_file(model_file(path, folder, limit=None)))
