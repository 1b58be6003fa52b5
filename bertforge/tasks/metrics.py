"""Evaluation metrics by their official definitions, in numpy: GLUE's, CoNLL's entity-level F1 (conlleval),
SQuAD's (evaluate-v1.1.py and evaluate-v2.0.py), and ranking's (MRR@k, nDCG@k, recall@k; of a search,
BEIR's)."""

import re
import string
from collections import Counter

import numpy as np

from ..core.errors import BertforgeError


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


def macro_f1(preds, labels, num_classes: int) -> float:
    """The mean over classes of each class's F1 against the rest (a class never predicted nor present: 0)."""
    preds, labels = _pair(preds, labels)
    scores = []
    for c in range(num_classes):
        tp = np.sum((preds == c) & (labels == c))
        wrong = np.sum((preds == c) != (labels == c))
        scores.append(2 * tp / (2 * tp + wrong) if tp + wrong else 0.0)
    return float(np.mean(scores))


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


RELEVANT = 0.5  # a passage whose relevance label is at least this counts as relevant (for MRR)


def ranking_groups(queries: list[str], relevance, source: str) -> list[np.ndarray]:
    """The rows of each query (grouped by its text) that has several passages, one of them relevant: the queries
    a ranking is scored on. None is an error naming `source`."""
    rows: dict[str, list[int]] = {}
    for i, query in enumerate(queries):
        rows.setdefault(query, []).append(i)
    relevance = np.asarray(relevance, dtype=np.float64)
    groups = [np.array(r) for r in rows.values() if len(r) > 1 and (relevance[r] >= RELEVANT).any()]
    if not groups:
        raise BertforgeError(f"{source}: no query has several passages with a relevant one (label >= {RELEVANT}): "
                             f"nothing to rank")
    return groups


def top_relevance(relevance: np.ndarray, scores: np.ndarray, k: int) -> np.ndarray:
    """The relevance labels of the k best-scored passages, best first; ties broken against the scorer."""
    return relevance[np.lexsort((relevance, -scores))][:k]


def ranking_metrics(groups: list[np.ndarray], relevance, scores, k: int = 10) -> dict[str, float]:
    """Mean MRR@k and nDCG@k over the queries' `groups` of rows, passages ordered by descending score (ties broken
    against the model: the less relevant first). MRR@k: 1 / the rank of the first relevant passage within the top
    k, else 0 (MS MARCO's). nDCG@k: DCG of the top k over the ideal order's, gains linear in the label (rel, as
    scikit-learn's ndcg_score), discount 1 / log2(rank + 1)."""
    relevance, scores = np.asarray(relevance, dtype=np.float64), np.asarray(scores, dtype=np.float64)
    discounts = 1 / np.log2(np.arange(2, k + 2))
    mrr, ndcg = [], []
    for rows in groups:
        rel = relevance[rows]
        ranked = top_relevance(rel, scores[rows], k)
        hits = np.flatnonzero(ranked >= RELEVANT)
        mrr.append(1 / (hits[0] + 1) if len(hits) else 0.0)
        ideal = np.sort(rel)[::-1][:k] @ discounts[:min(k, len(rel))]
        ndcg.append(ranked @ discounts[:len(ranked)] / ideal)
    return {f"mrr@{k}": float(np.mean(mrr)), f"ndcg@{k}": float(np.mean(ndcg)), "ranked_queries": len(groups)}


def retrieval_metrics(scores: np.ndarray, relevant: np.ndarray, k: int = 10) -> dict[str, float]:
    """Each query (a row) searching all passages (the columns): ranking_metrics' MRR@k and nDCG@k, and recall@k,
    the share of its relevant passages among its k best-scored, averaged over the queries."""
    relevance = np.asarray(relevant, dtype=np.float64)
    width = relevance.shape[1]
    groups = [np.arange(i * width, (i + 1) * width) for i in range(len(relevance))]
    metrics = ranking_metrics(groups, relevance.ravel(), np.asarray(scores).ravel(), k)
    recall = [top_relevance(rel, row, k).sum() / rel.sum() for rel, row in zip(relevance, scores)]
    return {**metrics, f"recall@{k}": float(np.mean(recall))}


def search_metrics(rankings: dict[str, list[str]], qrels: dict[str, dict[str, float]], k: int = 10,
                   recall_at=(10, 100)) -> dict:
    """BEIR's retrieval metrics of ranked passage ids (query id -> ids, best first) against relevance judgements
    (query id -> {passage id: grade}), averaged over the ranked queries with a relevant passage (grade > 0):
    MRR@k (1 / the rank of the first relevant passage in the top k, else 0), nDCG@k (gains linear in the grade, as
    pytrec_eval's ndcg_cut; the ideal ranking of all the query's judged passages) and recall@n for each n of
    `recall_at` (the share of the query's relevant passages in its top n)."""
    discounts = 1 / np.log2(np.arange(2, max(k, 1) + 2))
    mrr, ndcg, recall = [], [], {n: [] for n in recall_at}
    for query, ranked in rankings.items():
        grades = qrels.get(query, {})
        relevant = {p for p, g in grades.items() if g > 0}
        if not relevant:
            continue
        top = ranked[:k]
        first = next((rank for rank, p in enumerate(top, 1) if p in relevant), None)
        mrr.append(1 / first if first else 0.0)
        gains = np.array([max(grades.get(p, 0.0), 0.0) for p in top])
        ideal = np.sort([g for g in grades.values() if g > 0])[::-1][:k]
        ndcg.append(float(gains @ discounts[:len(gains)] / (ideal @ discounts[:len(ideal)])))
        for n in recall_at:
            recall[n].append(len(relevant & set(ranked[:n])) / len(relevant))
    if not mrr:
        raise BertforgeError("no ranked query has a relevant passage (a grade above 0) in the judgements")
    return {f"mrr@{k}": float(np.mean(mrr)), f"ndcg@{k}": float(np.mean(ndcg)),
            **{f"recall@{n}": float(np.mean(recall[n])) for n in recall_at}, "queries": len(mrr)}


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


# ---------------------------------------------------------------------------------------------------------
# SQuAD's official metrics (evaluate-v1.1.py and evaluate-v2.0.py); examples are answer_spans.SquadExample

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, fold whitespace."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _f1(prediction: str, gold: str, empty_match: bool) -> float:
    """Token F1. v1.1 scores two empty answers 0; v2.0 (empty_match) scores them 1."""
    pred, ref = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if empty_match and (not pred or not ref):
        return float(pred == ref)
    same = sum((Counter(pred) & Counter(ref)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(pred), same / len(ref)
    return 2 * precision * recall / (precision + recall)


def _exact(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def squad_v1_evaluate(examples, predictions: dict[str, str]) -> dict[str, float]:
    """evaluate-v1.1.py: `exact_match` and `f1` in percent, each the best over the gold answers; a
    question without a prediction scores 0."""
    em = f1 = 0.0
    for ex in examples:
        if ex.id in predictions:
            gold = ex.answer_texts or [""]
            em += max(_exact(predictions[ex.id], g) for g in gold)
            f1 += max(_f1(predictions[ex.id], g, empty_match=False) for g in gold)
    return {"exact_match": 100.0 * em / len(examples), "f1": 100.0 * f1 / len(examples)}


def _best_threshold(examples, predictions, raw, na_probs):
    """evaluate-v2.0.py's find_best_thresh: start from answering nothing, then answer the questions in
    rising na_prob order, keeping the score after each one if it is the best so far."""
    score = best = sum(ex.is_impossible for ex in examples)
    thresh = 0.0
    for ex in sorted(examples, key=lambda ex: na_probs[ex.id]):
        score += raw[ex.id] if not ex.is_impossible else -1 if predictions.get(ex.id) else 0
        if score > best:
            best, thresh = score, na_probs[ex.id]
    return 100.0 * best / len(examples), thresh


def squad_v2_evaluate(examples, predictions: dict[str, str], na_probs=None,
                      na_prob_thresh: float = 1.0) -> dict[str, float]:
    """evaluate-v2.0.py. An unanswerable question's gold is [""]; a missing prediction counts as "".

    Where na_probs (id -> no-answer score, e.g. null odds) is given, questions with a score above
    na_prob_thresh count as answered "no answer", and the best thresholds are searched (best_*).
    """
    exact, f1 = {}, {}
    for ex in examples:
        gold = [g for g in ex.answer_texts if normalize_answer(g)] or [""]
        pred = predictions.get(ex.id, "")
        exact[ex.id] = max(_exact(pred, g) for g in gold)
        f1[ex.id] = max(_f1(pred, g, empty_match=True) for g in gold)
    probs = {ex.id: 0.0 for ex in examples} | dict(na_probs or {})
    no_ans = {ex.id for ex in examples if ex.is_impossible}
    said_no = {ex.id for ex in examples if probs[ex.id] > na_prob_thresh}
    exact_t = {k: float(k in no_ans) if k in said_no else v for k, v in exact.items()}
    f1_t = {k: float(k in no_ans) if k in said_no else v for k, v in f1.items()}

    out = {}
    for prefix, subset in (("", examples), ("HasAns_", [ex for ex in examples if not ex.is_impossible]),
                           ("NoAns_", [ex for ex in examples if ex.is_impossible])):
        if subset or not prefix:
            out[prefix + "exact"] = 100.0 * sum(exact_t[ex.id] for ex in subset) / len(subset)
            out[prefix + "f1"] = 100.0 * sum(f1_t[ex.id] for ex in subset) / len(subset)
            out[prefix + "total"] = len(subset)
    if na_probs is not None:
        out["best_exact"], out["best_exact_thresh"] = _best_threshold(examples, predictions, exact, probs)
        out["best_f1"], out["best_f1_thresh"] = _best_threshold(examples, predictions, f1, probs)
    return out


def squad_metrics(examples, predictions: dict[str, str], null_odds=None,
                  version_2: bool = False, best_spans: dict[str, str] | None = None) -> dict[str, float]:
    """The scores of the predictions as given, named `exact_match` and `f1` for both versions.

    For v2 also the HasAns_/NoAns_ parts and counts, and, given null_odds, the best-threshold search;
    unlike evaluate-v2.0.py's default, null_odds do not override the predictions (the threshold was
    applied when predicting). Given best_spans (every question answered by its best span), the search runs
    on them: evaluate-v2.0.py's search can only turn answers into no-answers, so on predictions made at a
    threshold it cannot find a lower one. Then best_f1 is the F1 that --null-threshold best_f1_thresh gives.
    """
    if not version_2:
        return squad_v1_evaluate(examples, predictions)
    search_on_spans = best_spans is not None and null_odds is not None
    out = squad_v2_evaluate(examples, predictions, None if search_on_spans else null_odds, na_prob_thresh=np.inf)
    if search_on_spans:
        searched = squad_v2_evaluate(examples, best_spans, null_odds, na_prob_thresh=np.inf)
        out.update({k: v for k, v in searched.items() if k.startswith("best_")})
    out["exact_match"] = out.pop("exact")
    return out
