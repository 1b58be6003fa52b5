"""Pre-training objectives, one object each (`OBJECTIVES`, by the name `--objective` takes).

An objective says what it needs of the data (`check`), how a batch drawn from the shards becomes its inputs and
labels (`finish`), what its losses count (`loss_units`), what it measures on the held-out rows and the trivial
baselines beside them (`evaluate`, `baselines`, `FIGURES`), what it makes of the model before training and
writes into its config (`prepare`, `causal`), and what a checkpoint holds (`save`). `pretrain.PretrainJob` runs
any of them; no other code tests an objective's name. torch is imported where it is used (`--help`).
"""

from __future__ import annotations

import math
from pathlib import Path

from ..core.errors import BertforgeError

# A held-out figure -> the trivial predictor's figure it is plotted and judged against.
FIGURES = {"eval_mlm_accuracy": "mlm_most_frequent_token_accuracy", "eval_nsp_accuracy": "nsp_majority_accuracy"}


def labels_from_positions(input_ids, positions, labels):
    """[B, L] labels (-100 where nothing is predicted) from per-row masked positions and labels (-100 padded)."""
    import torch

    full = torch.full_like(input_ids, -100)
    keep = labels != -100
    rows = torch.arange(len(input_ids)).unsqueeze(1).expand_as(positions)
    full[rows[keep], positions[keep]] = labels[keep]
    return full


def next_token_labels(input_ids, attention_mask):
    """[B, L] labels for left-to-right LM: each real position predicts the token after it (-100 at the last)."""
    import torch

    labels = torch.full_like(input_ids, -100)
    labels[:, :-1] = input_ids[:, 1:].masked_fill(attention_mask[:, 1:] == 0, -100)
    return labels


class MaskedLM:
    """`mlm`: predict the masked tokens (80% [MASK], 10% random, 10% kept), from static or dynamic masks."""

    name = "mlm"
    help = "masked LM only"
    masks = True  # masked tokens: --mask-prob and the recipe's masking rate apply
    predicts_tokens = True  # trains the masked-LM head (a fresh one may start from the unigram output bias)
    causal = False  # saved as config.is_decoder: attention to the left only
    next_sentence = False
    teacher = False  # learns from --teacher

    @property
    def untrained_heads(self) -> list[str]:
        """The pre-training heads a checkpoint holds but this objective does not train (config.json says so)."""
        return [name for name, trained in (("masked-LM head", self.predicts_tokens),
                                           ("next-sentence head", self.next_sentence)) if not trained]

    def check(self, data, mask_prob: float | None) -> None:
        """A one-line error where the data cannot serve the objective."""
        if mask_prob is not None and data.static_masked:
            raise BertforgeError(f"--mask-prob {mask_prob}: {data.directory} is statically masked (at "
                                 f"{data.index['masked_lm_prob']}); dynamic masking needs data made with --no-mask")
        if mask_prob is not None and not self.masks:
            raise BertforgeError(f"--mask-prob: --objective {self.name} masks nothing")
        if not self.masks and data.static_masked:
            raise BertforgeError(f"--objective {self.name}: {data.directory} is statically masked; it needs the "
                                 f"real tokens: make the data with --no-mask")

    def finish(self, b: dict) -> dict:
        """A batch from the shards -> the model's inputs with their labels."""
        b["labels"] = labels_from_positions(b["input_ids"], b.pop("mlm_positions"), b.pop("mlm_labels"))
        if not self.next_sentence:
            b.pop("next_sentence_label")
        return b

    def loss_units(self) -> dict:
        """Each loss's unit count in a batch, by name: what the loop averages the loss over across steps."""
        units = {"mlm_loss": lambda b: int((b["labels"] != -100).sum())}
        return units | ({"nsp_loss": lambda b: len(b["next_sentence_label"])} if self.next_sentence else {})

    def evaluate(self, model, batches) -> dict:
        """Held-out masked-LM loss, accuracy and perplexity (and NSP accuracy) over `batches`."""
        import torch

        mlm_loss = mlm_correct = mlm_count = nsp_correct = rows = 0.0
        for b in batches:
            labels, nsp = b.pop("labels"), b.pop("next_sentence_label", None)
            with torch.no_grad():
                out = model(**b, labels=labels)
            count = int((labels != -100).sum())
            mlm_loss += float(out.mlm_loss) * count
            logits = out["prediction_logits"] if "prediction_logits" in out else out["logits"]  # or a masked LM's
            mlm_correct += float((logits.argmax(-1) == labels[labels != -100]).sum())
            mlm_count += count
            rows += len(labels)
            if nsp is not None:
                nsp_correct += float((out.seq_relationship_logits.argmax(-1) == nsp).sum())
        loss = mlm_loss / mlm_count
        result = {"eval_mlm_loss": loss, "eval_mlm_accuracy": mlm_correct / mlm_count,
                  "eval_mlm_perplexity": math.exp(min(loss, 50))}
        return result | ({"eval_nsp_accuracy": nsp_correct / rows} if self.next_sentence else {})

    def baselines(self, batches) -> dict:
        """The trivial predictors on the held-out rows: the most frequent masked token, the majority NSP label."""
        import torch

        labels, nsp = [], []
        for b in batches:
            labels.append(b["labels"][b["labels"] != -100])
            nsp.append(b.get("next_sentence_label", torch.zeros(0, dtype=torch.long)))
        labels, nsp = torch.cat(labels), torch.cat(nsp)
        result = {"mlm_most_frequent_token_accuracy": float(labels.bincount().max() / len(labels))}
        return result | ({"nsp_majority_accuracy": float(nsp.bincount().max() / len(nsp))} if self.next_sentence
                         else {})

    def prepare(self, model, teacher: str | None, job, prune: str | None = None):
        """What trains: the model itself (a teacher, and `prune`, a size to cut it to, are distillation's)."""
        return model

    def save(self, model, folder: Path, save_checkpoint) -> None:
        save_checkpoint(model, folder)


class MaskedLMNextSentence(MaskedLM):
    """`mlm+nsp`, the paper's: masked LM plus whether segment B followed segment A (needs sentence pairs)."""

    name = "mlm+nsp"
    help = "masked LM + next sentence (needs sentence pairs)"
    next_sentence = True

    def check(self, data, mask_prob):
        if not data.has_pairs:
            raise BertforgeError(f"--objective {self.name}: {data.directory} holds single segments (made with "
                                 "--no-nsp), not sentence pairs; use --objective mlm or ltr, or make pairs without "
                                 "--no-nsp")
        super().check(data, mask_prob)


class LeftToRight(MaskedLM):
    """`ltr`, the paper's ablation: each position predicts the next token, attending to its left only. Its
    figures keep the masked-LM names (eval_mlm_accuracy: next-token accuracy over every real position)."""

    name = "ltr"
    help = "left-to-right LM, causal attention, saved as is_decoder (needs unmasked data)"
    masks = False
    causal = True

    def finish(self, b):
        b["labels"] = next_token_labels(b["input_ids"], b["attention_mask"])
        b.pop("next_sentence_label")
        return b


class Distill(MaskedLM):
    """`distill` (general_distill.py): learn a teacher's last hidden states and self-attention relations on the
    rows as they are; the held-out figures are both losses per real token. A checkpoint is the student alone
    (its masked-LM head untrained) and the learned width map."""

    name = "distill"
    help = "learn --teacher's hidden states and self-attention relations (needs unmasked data)"
    masks = False
    predicts_tokens = False
    teacher = True
    terms = ("hidden_loss", "relation_loss")  # the losses it trains on (general_distill.DISTILL_LOSSES: all)

    def finish(self, b):
        return {k: b[k] for k in ("input_ids", "token_type_ids", "attention_mask")}

    def loss_units(self):
        return dict.fromkeys(self.terms, lambda b: int(b["attention_mask"].sum()))

    def evaluate(self, model, batches):
        from .general_distill import DISTILL_LOSSES

        sums, tokens = dict.fromkeys(DISTILL_LOSSES, 0.0), 0
        for b in batches:
            out, count = model(**b, terms=DISTILL_LOSSES), int(b["attention_mask"].sum())
            for key in sums:
                sums[key] += float(out[key]) * count
            tokens += count
        return {f"eval_{key}": value / tokens for key, value in sums.items()}

    def baselines(self, batches):
        return {}

    def prepare(self, model, teacher, job, prune=None):
        from .general_distill import distiller

        return distiller(model, teacher, job, self.terms, prune)

    def save(self, model, folder, save_checkpoint):
        save_checkpoint(model.student, folder)
        model.save_projection(folder)


class DistillHidden(Distill):
    name = "distill-hidden"
    help = "learn --teacher's last hidden states only (needs unmasked data)"
    terms = ("hidden_loss",)


class DistillRelations(Distill):
    name = "distill-relations"
    help = "learn --teacher's self-attention relations only (needs unmasked data)"
    terms = ("relation_loss",)


OBJECTIVES = {o.name: o for o in (MaskedLMNextSentence(), MaskedLM(), LeftToRight(), Distill(), DistillHidden(),
                                   DistillRelations())}


def choose_objective(data, name: str | None, mask_prob: float | None, teacher: str | None = None):
    """The objective `name` (None: what the data holds, mlm+nsp for sentence pairs, else mlm), checked against
    the data, the masking rate and the teacher."""
    objective = OBJECTIVES[name or ("mlm+nsp" if data.has_pairs else "mlm")]
    if objective.teacher != (teacher is not None):
        raise BertforgeError(f"--objective {objective.name} needs --teacher DIR" if objective.teacher else
                             f"--teacher {teacher}: only --objective distill learns from a teacher")
    objective.check(data, mask_prob)
    return objective
