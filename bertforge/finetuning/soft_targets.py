"""What a student learns from its teacher's outputs in task distillation, by head (`SOFT_TARGETS`, keyed by the
model class's name): the loss on the teacher's outputs (`teacher_logits` in a batch), the loss on the labels, and
the units each is a mean over (train.TrainingJob's loss_units); and the module the training loop trains, the
student with these losses (`make_distiller`).

The soft-target loss is Hinton et al.'s (2015): T^2 KL(softmax(teacher / T) || softmax(student / T)), T^2 so that
its gradients keep their size as T changes.

- An output per example (text and pair classification, multiple choice): the KL per row, or for a regressor the
  squared error to the teacher's score, averaged over the rows; the labels' loss on the labelled rows only
  (`--augment` and `--unlabelled` rows have the teacher's outputs alone).
- A label per token (token classification): the KL per token that carries a label (labels != -100: a word's first
  piece, the only token prediction reads and the only one the teacher was trained on), averaged over those tokens;
  the labels' loss is the model's own token cross-entropy.
- A span (extractive question answering): per window, the KL of the start and of the end distributions over its
  real tokens, halved as the span loss is, averaged over the windows; a window without the answer learns the
  teacher's distributions as any other, and its span loss (the model's, on the labelled windows) points it to
  [CLS] as in fine-tuning. A question's `--augment` variants keep its paragraph and answer, so their windows are
  labelled; `--unlabelled` questions have the teacher's outputs alone.

The teacher's outputs of a row are `family.output_keys` side by side on the last axis: [outputs] per example,
[tokens, outputs] per token (zeros over a batch's padding, which the losses mask). torch-free at the top: `distill
--help` reads the table.
"""

from collections.abc import Callable
from dataclasses import dataclass

IGNORED = -100  # a token's label that counts for nothing (task_heads.BertForTokenClassification)


def soft_target_loss(student_logits, teacher_logits, temperature: float, regression: bool = False):
    """Per row: T^2 KL(softmax(teacher / T) || softmax(student / T)), or for a regressor the squared error.
    Outputs the teacher gives -inf (a multiple-choice example's missing choices, a window's padding) add nothing."""
    import torch

    if regression:
        return (student_logits[:, 0] - teacher_logits[:, 0]) ** 2
    target = torch.softmax(teacher_logits / temperature, -1)
    log_student = torch.log_softmax(student_logits / temperature, -1)
    log_target = torch.log_softmax(teacher_logits / temperature, -1)
    terms = torch.where(target > 0, target * (log_target - log_student), torch.zeros_like(target))
    return temperature ** 2 * terms.sum(-1)


def example_loss(out: dict, teacher_logits, batch: dict, temperature: float, regression: bool = False):
    """An output per example: the soft-target loss averaged over the rows."""
    return soft_target_loss(out["logits"].float(), teacher_logits, temperature, regression).mean()


def token_loss(out: dict, teacher_logits, batch: dict, temperature: float, regression: bool = False):
    """A label per token: the soft-target loss averaged over the tokens that carry a label (`labelled_tokens`)."""
    counted = batch["labels"] != IGNORED
    if not counted.any():
        return out["logits"].sum() * 0.0
    return soft_target_loss(out["logits"].float()[counted], teacher_logits[counted], temperature).mean()


def span_loss(out: dict, teacher_logits, batch: dict, temperature: float, regression: bool = False):
    """A span: per window, (soft-target loss of the start + of the end) / 2 over its real tokens (the student's
    padding scores lowest, the teacher's is masked out), averaged over the windows."""
    padding = ~batch["attention_mask"].bool()
    teacher = teacher_logits.float().masked_fill(padding[..., None], -float("inf"))
    return sum(soft_target_loss(out[key].float(), teacher[..., i], temperature)
               for i, key in enumerate(("start_logits", "end_logits"))).mean() / 2


def labelled_loss(out: dict, batch: dict, labelled, regression: bool = False):
    """The task loss of an output per example on the labelled rows (`labelled`, bool [B]): cross-entropy, or the
    squared error of a regressor."""
    import torch.nn.functional as F

    logits = out["logits"].float()
    if not labelled.any():
        return logits.sum() * 0.0
    logits, labels = logits[labelled], batch["labels"][labelled]
    return F.mse_loss(logits[:, 0], labels.float()) if regression else F.cross_entropy(logits, labels)


def span_labelled_loss(out: dict, batch: dict, labelled, regression: bool = False):
    """The span loss on the labelled windows (`labelled`, bool [B]): the model's own (task_heads.span_cross_entropy)."""
    from ..model.architectures.task_heads import span_cross_entropy

    if not labelled.any():
        return out["start_logits"].sum() * 0.0
    return span_cross_entropy(*(out[key].float()[labelled] for key in ("start_logits", "end_logits")),
                              *(batch[key][labelled] for key in ("start_positions", "end_positions")))


def rows(batch: dict) -> int:
    return len(batch["input_ids"])


def labelled_rows(batch: dict) -> int:
    return int(batch["labelled"].sum())


def labelled_tokens(batch: dict) -> int:
    return int((batch["labels"] != IGNORED).sum())


@dataclass(frozen=True)
class SoftTargets:
    """What distillation of a head learns (see the module docstring)."""

    soft_loss: Callable  # (student outputs, teacher_logits, batch, temperature, regression) -> mean over `units`
    units: Callable[[dict], int]
    # (student outputs, batch, labelled rows, regression) -> mean over `label_units`; None: the student's own loss
    # given the batch's targets (every row of its families is labelled)
    label_loss: Callable | None
    label_units: Callable[[dict], int]
    label_keys: tuple[str, ...] = ("labels",)  # the batch's targets, for a `label_loss` (the student is not given them)
    own_labels: bool = False  # its outputs are the data's labels: the teacher's label names must be the data's
    text_inputs: bool = False  # its rows are texts that --augment varies, --unlabelled adds and --representations reads
    # its rows are a question's windows over a paragraph: --augment varies the question only, --unlabelled adds
    # questions on paragraphs
    questions: bool = False


SOFT_TARGETS = {
    "BertForSequenceClassification": SoftTargets(example_loss, rows, labelled_loss, labelled_rows, own_labels=True,
                                                 text_inputs=True),
    "BertForMultipleChoice": SoftTargets(example_loss, rows, labelled_loss, labelled_rows),
    "BertForTokenClassification": SoftTargets(token_loss, labelled_tokens, None, labelled_tokens, own_labels=True),
    "BertForQuestionAnswering": SoftTargets(span_loss, rows, span_labelled_loss, labelled_rows,
                                            ("start_positions", "end_positions"), questions=True),
}
PER_EXAMPLE = tuple(head for head, targets in SOFT_TARGETS.items() if targets.soft_loss is example_loss)


def make_distiller(student, temperature: float, alpha: float, regression: bool, representations=None,
                   representation_weight: float = 1.0):
    """The module the training loop trains: the student, whose losses in training are the distillation's, as
    soft_targets.SOFT_TARGETS has them for its head. `representations`: a representation_loss.RepresentationMatch of
    the teacher's encoder to this student, or None."""
    from torch import nn

    from ..model.architectures.registry import head_of

    targets = SOFT_TARGETS[head_of(type(student).__name__)]
    own_loss = targets.label_loss is None

    class Distiller(nn.Module):
        """With `teacher_logits` in the batch: {"distill_loss": (1 - alpha) x the soft-target loss,
        "label_loss": alpha x the task loss on the labelled rows}, and with `representations` its terms (per real
        token) x `representation_weight`; without: the student's own outputs."""

        def __init__(self):
            super().__init__()
            self.student, self.representations = student, representations

        def forward(self, teacher_logits=None, labelled=None, **batch):
            if teacher_logits is None:
                return self.student(**batch)
            given = batch if own_loss else {k: v for k, v in batch.items() if k not in targets.label_keys}
            out = self.student(**given, output_hidden_states=self.representations is not None)
            label_loss = out["loss"] if own_loss else targets.label_loss(out, batch, labelled.bool(), regression)
            losses = {"distill_loss": (1 - alpha) * targets.soft_loss(out, teacher_logits, batch, temperature,
                                                                      regression),
                      "label_loss": alpha * label_loss}
            if self.representations is not None:
                states = out["hidden_states"]
                matched = self.representations(given, self.student.base_model, states[-2], states[-1])
                losses.update({k: representation_weight * v for k, v in matched.items()})
            return losses

        def save_pretrained(self, folder, tokenizer=None):
            self.student.save_pretrained(folder, tokenizer=tokenizer)
            if self.representations is not None:
                self.representations.save_projection(folder)

        def load_weights(self, folder, **options):
            report = self.student.load_weights(folder, **options)
            if self.representations is not None:
                self.representations.load_projection(folder)
            return report

    return Distiller()
