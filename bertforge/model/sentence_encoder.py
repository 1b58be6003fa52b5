"""A sentence-transformers model in torch, to train: the encoder, its token vectors pooled on a padded batch as
`sentence_folder.pool` pools one text's (`pooled`), an optional linear map to another dimension (saved as a
sentence-transformers Dense module), then unit length where it normalizes. Saved, it is the encoder's folder with
the sentence-transformers files (`sentence_folder.write_sentence_folder`), so that `SentenceTransformer(folder)`,
`pipeline("sentence-embedding")` and `serve` give the vectors it computes."""

import torch
import torch.nn.functional as F
from torch import nn

from ..core.errors import BertforgeError
from .architectures.bert import BertModel
from .formats.sentence_folder import DENSE, check_pooling, load_dense, read_sentence_folder, write_sentence_folder


def pooled(hidden: torch.Tensor, attention_mask: torch.Tensor, mode: str) -> torch.Tensor:
    """One vector per row [B, H] from its real tokens' vectors ([CLS] and [SEP] included; `attention_mask` 1 over
    them, from the first position), as sentence_folder.pool computes each with no prompt left out."""
    mask = attention_mask[..., None].to(hidden.dtype)
    lengths = attention_mask.sum(1)
    if mode == "cls":
        return hidden[:, 0]
    if mode == "lasttoken":
        return hidden[torch.arange(len(hidden), device=hidden.device), lengths - 1]
    if mode == "max":
        return hidden.masked_fill(mask == 0, -torch.inf).max(1).values
    if mode == "weightedmean":  # each token weighted by its position from 1
        mask = mask * torch.arange(1, hidden.shape[1] + 1, device=hidden.device, dtype=hidden.dtype)[:, None]
    total = (hidden * mask).sum(1)
    count = mask.sum(1).clamp(min=1e-9)
    return total / (count.sqrt() if mode == "mean_sqrt_len_tokens" else count)


def embedding_mse(student: torch.Tensor, teacher: torch.Tensor) -> torch.Tensor:
    """Per row, the mean squared difference of the student's embedding and the teacher's [B, dimension] -> [B]
    (Reimers and Gurevych, 2020; sentence-transformers' MSELoss is its mean over the rows)."""
    return ((student.float() - teacher.float()) ** 2).mean(-1)


class SentenceEncoder(nn.Module):
    """`encoder` (a BertModel) pooled by `pooling`, mapped to `dimension` by a learned linear map where that
    differs from the encoder's width, of unit length with `normalize`. Forward gives {"embedding": [B, dimension],
    "pooled": [B, width], the vectors before the map}, and with `teacher_embedding` [B, dimension] the loss that
    teaches it a teacher's vectors, {"loss": mean embedding_mse}. `max_seq_length` and `do_lower_case` are what
    its saved folder declares."""

    def __init__(self, encoder: BertModel, pooling: str = "mean", normalize: bool = True,
                 dimension: int | None = None, max_seq_length: int | None = None, do_lower_case: bool = False):
        super().__init__()
        self.encoder, self.pooling, self.normalize = encoder, check_pooling(pooling), normalize
        self.config, self.max_seq_length, self.do_lower_case = encoder.config, max_seq_length, do_lower_case
        width = encoder.config.hidden_size
        self.dense = nn.Linear(width, dimension) if dimension not in (None, width) else None

    @property
    def dimension(self) -> int:
        return self.dense.out_features if self.dense is not None else self.config.hidden_size

    def forward(self, input_ids, attention_mask, token_type_ids=None, teacher_embedding=None) -> dict:
        hidden = self.encoder(input_ids, attention_mask, token_type_ids).last_hidden_state
        vectors = pooled(hidden, attention_mask, self.pooling)
        embedding = self.dense(vectors) if self.dense is not None else vectors
        out = {"embedding": F.normalize(embedding, dim=-1) if self.normalize else embedding, "pooled": vectors}
        if teacher_embedding is not None:
            out["loss"] = embedding_mse(out["embedding"], teacher_embedding).mean()
        return out

    def save_pretrained(self, folder, tokenizer=None):
        """The encoder's folder with the sentence-transformers files, the map a Dense module."""
        self.encoder.save_pretrained(folder, tokenizer)
        dense = None
        if self.dense is not None:
            dense = tuple(p.detach().float().cpu().numpy() for p in (self.dense.weight, self.dense.bias))
        write_sentence_folder(folder, self.pooling, self.normalize, self.max_seq_length,
                              do_lower_case=self.do_lower_case, dense=dense)

    def load_weights(self, folder, **options):
        """The encoder's weights and the linear map of a folder this class saved."""
        report = self.encoder.load_weights(folder, **options)
        if self.dense is not None:
            declared = read_sentence_folder(folder)
            shapes = [(d.in_features, d.out_features) for d in declared.dense] if declared else []
            if shapes != [(self.config.hidden_size, self.dimension)]:
                raise BertforgeError(f"{folder}: its Dense modules map {shapes or 'nothing'}, not the "
                                     f"{self.config.hidden_size} -> {self.dimension} of this model ({DENSE})")
            (weight, bias, _), = load_dense(folder, declared, self.config.hidden_size)
            with torch.no_grad():
                self.dense.weight.copy_(torch.from_numpy(weight))
                self.dense.bias.copy_(torch.from_numpy(bias))
        return report
