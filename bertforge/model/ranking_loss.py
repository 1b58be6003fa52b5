"""The reranker's training loss: each query's passages compete for its relevance (listwise softmax cross-entropy).

Rows with the same group id in a batch are one query's passages. A group of several rows with a relevant one is
scored by the cross-entropy between the softmax of its logits and its relevance normalised to sum 1 (with one
relevant passage: -log softmax(logits)[relevant]), the listwise loss of ListNet (Cao et al. 2007) and of BERT
rerankers' localized contrastive estimation (Gao et al. 2021). A row alone in its group, or in one with nothing
relevant, is scored by binary cross-entropy on its logit, as a pair classifier. The mean is over the groups and
the lone rows. Pointwise binary cross-entropy alone barely learns to rank from a sentence encoder in a few hundred
steps (BENCHMARKS.md, "Rankers"): its easiest descent is the base rate of relevant pairs.
"""

import torch
import torch.nn.functional as F


def ranking_loss(logits: torch.Tensor, labels: torch.Tensor, groups: torch.Tensor) -> torch.Tensor:
    """`logits` [B, 1], `labels` [B] relevance from 0 to 1, `groups` [B] a query's id per row."""
    scores, labels = logits.float().reshape(-1), labels.float().reshape(-1)
    same = groups.reshape(-1, 1) == groups.reshape(1, -1)  # [B, B]: row j is in row i's group
    mass = (labels.reshape(1, -1) * same).sum(-1)  # the relevance in each row's group
    ranked = (same.sum(-1) > 1) & (mass > 0)  # rows of the groups ranked listwise
    first = same.float().argmax(-1) == torch.arange(len(scores), device=scores.device)  # a group's first row
    log_p = scores.reshape(1, -1).masked_fill(~same, -torch.inf).log_softmax(-1).masked_fill(~same, 0.0)
    target = labels.reshape(1, -1) * same / mass.clamp(min=1e-12).reshape(-1, 1)
    listwise = -(target * log_p).sum(-1)[ranked & first]
    alone = ~ranked
    pointwise = F.binary_cross_entropy_with_logits(scores[alone], labels[alone], reduction="sum")
    return (listwise.sum() + pointwise) / (len(listwise) + int(alone.sum()))
