"""A bi-encoder: the encoder as a sentence embedder (mean pooling, unit length, as all-MiniLM-L6-v2), trained on
(query, passage) pairs with in-batch negatives.

The loss is sentence-transformers' MultipleNegativesRankingLoss: each query's cosine similarities to every passage
of the batch, times 20, are the logits of a cross-entropy whose target is its own passage (the others are its
negatives). On disk it is the plain encoder (a BertModel folder) with the sentence-transformers files that
declare its pooling (sentence_folder.py), so that `SentenceTransformer(folder)` loads it as it was trained.
"""

import torch
import torch.nn.functional as F

from .architectures.bert import BertModel
from .sentence_encoder import pooled
from .formats.sentence_folder import write_sentence_folder

SCALE = 20.0  # sentence-transformers' MultipleNegativesRankingLoss scale


def mean_pooled(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """The mean of each row's real token vectors ([CLS] and [SEP] included, as sentence-transformers'), unit length."""
    return F.normalize(pooled(hidden, attention_mask, "mean"), dim=-1)


class BertBiEncoder(BertModel):
    """`forward` of texts gives their "embedding"; with the passages of the queries given as well, the in-batch
    negatives loss ("loss") and the similarity logits ("scores", queries x passages)."""

    saved_as = "BertModel"

    def embed(self, input_ids, attention_mask, token_type_ids) -> torch.Tensor:
        if attention_mask is None:
            attention_mask = torch.ones_like(input_ids)
        hidden = super().forward(input_ids, attention_mask, token_type_ids).last_hidden_state
        return mean_pooled(hidden, attention_mask)

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, passage_input_ids=None,
                passage_attention_mask=None, passage_token_type_ids=None):
        queries = self.embed(input_ids, attention_mask, token_type_ids)
        if passage_input_ids is None:
            return {"embedding": queries}
        passages = self.embed(passage_input_ids, passage_attention_mask, passage_token_type_ids)
        scores = SCALE * queries.float() @ passages.float().T
        loss = F.cross_entropy(scores, torch.arange(len(scores), device=scores.device))
        return {"loss": loss, "scores": scores}

    def save_pretrained(self, folder, tokenizer=None):
        super().save_pretrained(folder, tokenizer)
        write_sentence_folder(folder, pooling="mean", normalize=True)
