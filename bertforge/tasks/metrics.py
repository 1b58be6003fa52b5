"""Evaluation metrics by their official definitions, in numpy: GLUE's and CoNLL's entity-level F1 (conlleval)."""

import numpy as np

from ..errors import BertforgeError


def _pair(preds, labels) -> tuple[np.ndarray, np.ndarray]:
    preds, labels = np.asarray(preds).reshape(-1), np.asarray(labels).reshape(-1)
    if len(preds) != len(labels):
        raise BertforgeError(f"{len(preds)} predictions for {len(labels)} labels")
    return preds, labels


def accuracy(preds, labels) -> float:
    preds, labels = _pair(preds, labels)
    return float((preds == labels).mean())


def f1(preds, labels) -> float:
    """Binary F1 of the positive class 1; 0 when there are no positives at all (as sklearn)."""
    preds, labels = _pair(preds, labels)
    tp = np.sum((preds == 1) & (labels == 1))
    wrong = np.sum((preds == 1) != (labels == 1))
    return float(2 * tp / (2 * tp + wrong)) if tp + wrong else 0.0


def matthews_corrcoef(preds, labels) -> float:
    """Matthews correlation, multi-class (Gorodkin's R_K) as sklearn's matthews_corrcoef; 0 when undefined."""
    preds, labels = _pair(preds, labels)
    classes, index = np.unique(np.concatenate([labels, preds]), return_inverse=True)
    k, n = len(classes), len(labels)
    confusion = np.bincount(index[:n] * k + index[n:], minlength=k * k).reshape(k, k).astype(np.float64)
    true, pred = confusion.sum(axis=1), confusion.sum(axis=0)
    cov_true_pred = np.trace(confusion) * n - true @ pred
    cov_pred = n * n - pred @ pred
    cov_true = n * n - true @ true
    if cov_pred * cov_true == 0:
        return 0.0
    return float(cov_true_pred / np.sqrt(cov_true * cov_pred))


def pearson(preds, labels) -> float:
    """Pearson's r; NaN when either side is constant (undefined, as scipy)."""
    x, y = (a.astype(np.float64) for a in _pair(preds, labels))
    dx, dy = x - x.mean(), y - y.mean()
    norm = np.sqrt((dx @ dx) * (dy @ dy))
    return float(np.clip(dx @ dy / norm, -1.0, 1.0)) if norm > 0 else float("nan")


def _average_ranks(a: np.ndarray) -> np.ndarray:
    """1-based ranks; tied values share the mean of the ranks they span."""
    order = np.argsort(a, kind="stable")
    ordered = a[order]
    run_start = np.r_[True, ordered[1:] != ordered[:-1]]
    starts = np.flatnonzero(run_start)
    ends = np.r_[starts[1:], len(a)]
    ranks = np.empty(len(a))
    ranks[order] = ((starts + 1 + ends) / 2)[np.cumsum(run_start) - 1]
    return ranks


def spearman(preds, labels) -> float:
    """Spearman's rho: Pearson's r of the average ranks."""
    preds, labels = _pair(preds, labels)
    return pearson(_average_ranks(preds), _average_ranks(labels))


_METRICS = {"accuracy": accuracy, "f1": f1, "mcc": matthews_corrcoef, "pearson": pearson, "spearman": spearman}

GLUE_METRICS = {
    "cola": ("mcc",),
    "sst2": ("accuracy",),
    "mrpc": ("accuracy", "f1"),
    "stsb": ("pearson", "spearman"),
    "qqp": ("accuracy", "f1"),
    "mnli": ("accuracy",),  # scored on dev_matched and dev_mismatched separately
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
}


def glue_metrics(task: str, preds, labels) -> dict[str, float]:
    """GLUE's metrics for a task; preds are label ids (scores for stsb)."""
    if task not in GLUE_METRICS:
        raise BertforgeError(f"unknown GLUE task {task!r}: expected one of {', '.join(GLUE_METRICS)}")
    return {name: _METRICS[name](preds, labels) for name in GLUE_METRICS[task]}


def split_tag(tag: str) -> tuple[str, str]:
    """("B" or "I", type) for B-TYPE / I-TYPE, ("O", "") for O."""
    if tag == "O":
        return "O", ""
    prefix, dash, kind = tag.partition("-")
    if prefix not in ("B", "I") or not dash or not kind:
        raise ValueError(f"tag {tag!r} is not O, B-TYPE or I-TYPE")
    return prefix, kind


def entities(tags) -> list[tuple[str, int, int]]:
    """(type, start, end) of each entity, under conlleval's rules for IOB1 and IOB2 alike.

    An entity continues only through I- tags of its own type. Any other tag ends it, and a B- or I- tag
    that does not continue an entity starts one (so I- after O or after another type starts an entity).
    """
    found, current = [], None
    for i, tag in enumerate([*tags, "O"]):
        prefix, kind = split_tag(tag)
        if current and prefix == "I" and kind == current[0]:
            continue
        if current:
            found.append((current[0], current[1], i))
            current = None
        if prefix != "O":
            current = (kind, i)
    return found


def _prf(correct: int, predicted: int, gold: int) -> dict[str, float]:
    precision = correct / predicted if predicted else 0.0
    recall = correct / gold if gold else 0.0
    f = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return {"precision": precision, "recall": recall, "f1": f}


def ner_metrics(gold, pred) -> dict:
    """Entity-level precision/recall/F1 as conlleval: an entity counts only if its type and both ends match.

    gold and pred are lists of tag sequences, one per sentence (entities never cross sentences). Returns
    {"precision", "recall", "f1", "per_type": {type: {"precision", "recall", "f1", "support"}}} as fractions.
    """
    if len(gold) != len(pred):
        raise BertforgeError(f"{len(pred)} predicted sentences for {len(gold)} gold sentences")
    gold_set, pred_set = set(), set()
    for s, (g, p) in enumerate(zip(gold, pred)):
        if len(g) != len(p):
            raise BertforgeError(f"sentence {s}: {len(p)} predicted tags for {len(g)} words")
        gold_set.update((s, *e) for e in entities(g))
        pred_set.update((s, *e) for e in entities(p))
    correct = gold_set & pred_set

    def count(found, kind):
        return sum(e[1] == kind for e in found)

    per_type = {}
    for kind in sorted({e[1] for e in gold_set | pred_set}):
        support = count(gold_set, kind)
        per_type[kind] = {**_prf(count(correct, kind), count(pred_set, kind), support), "support": support}
    return {**_prf(len(correct), len(pred_set), len(gold_set)), "per_type": per_type}
