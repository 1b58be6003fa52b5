import math
import random

import numpy as np
import pytest

from bertforge.core.errors import BertforgeError
from bertforge.tasks.metrics import (
    accuracy, entities, f1, glue_metrics, matthews_corrcoef, ner_metrics, pearson, search_metrics, spearman
)


def test_accuracy_and_f1_by_hand():
    preds, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]  # tp 2, fp 1, fn 1, tn 1
    assert accuracy(preds, labels) == pytest.approx(3 / 5)
    assert f1(preds, labels) == pytest.approx(2 * 2 / (2 * 2 + 1 + 1))
    assert f1([0, 0], [0, 0]) == 0.0


def test_mcc_by_hand():
    preds, labels = [1, 1, 0, 0, 1], [1, 0, 0, 1, 1]
    assert matthews_corrcoef(preds, labels) == pytest.approx((2 * 1 - 1 * 1) / math.sqrt(3 * 3 * 2 * 2))
    assert matthews_corrcoef([0, 1, 1], [0, 1, 1]) == pytest.approx(1.0)
    assert matthews_corrcoef([1, 0, 0], [0, 1, 1]) == pytest.approx(-1.0)
    assert matthews_corrcoef([1, 1, 1], [0, 1, 1]) == 0.0  # undefined: one predicted class
    # Three classes, confusion [[2,1,0],[0,1,0],[1,0,1]]: (c*s - t.p) / sqrt((s^2 - p.p)(s^2 - t.t)).
    labels, preds = [0, 0, 0, 1, 2, 2], [0, 0, 1, 1, 0, 2]
    t, p = np.array([3, 1, 2]), np.array([3, 2, 1])
    expected = (4 * 6 - t @ p) / math.sqrt((36 - p @ p) * (36 - t @ t))
    assert matthews_corrcoef(preds, labels) == pytest.approx(expected)


def test_pearson_and_spearman_by_hand():
    assert pearson([1, 2, 3], [2, 4, 6]) == pytest.approx(1.0)
    assert pearson([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert math.isnan(pearson([1, 1, 1], [1, 2, 3]))
    # Ties take average ranks: x -> 1, 2.5, 2.5, 4; y -> 1, 3, 2, 4; rho = 4.5 / sqrt(4.5 * 5).
    assert spearman([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(math.sqrt(0.9))
    assert spearman([1, 10, 100], [1, 2, 3]) == pytest.approx(1.0)


def test_against_scipy():
    stats = pytest.importorskip("scipy.stats")
    rng = np.random.default_rng(0)
    x = rng.integers(0, 6, 500).astype(float)  # many ties
    y = x + rng.normal(0, 2, 500)
    assert pearson(x, y) == pytest.approx(stats.pearsonr(x, y)[0])
    assert spearman(x, y) == pytest.approx(stats.spearmanr(x, y)[0])
    assert spearman(x, np.round(y)) == pytest.approx(stats.spearmanr(x, np.round(y))[0])


def test_against_sklearn():
    skm = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    for k in (2, 3, 5):
        labels, preds = rng.integers(0, k, 300), rng.integers(0, k, 300)
        preds[:150] = labels[:150]
        assert matthews_corrcoef(preds, labels) == pytest.approx(skm.matthews_corrcoef(labels, preds))
    labels, preds = rng.integers(0, 2, 300), rng.integers(0, 2, 300)
    assert f1(preds, labels) == pytest.approx(skm.f1_score(labels, preds))


def test_glue_metrics_names():
    assert set(glue_metrics("cola", [1, 0], [1, 0])) == {"mcc"}
    assert glue_metrics("mrpc", [1, 0, 1], [1, 0, 0]) == pytest.approx({"accuracy": 2 / 3, "f1": 2 / 3})
    assert set(glue_metrics("stsb", np.array([[0.5], [2.0], [4.0]]), [1.0, 2.5, 3.0])) == {"pearson", "spearman"}
    for task in ("sst2", "qnli", "rte", "wnli", "mnli"):
        assert set(glue_metrics(task, [0], [0])) == {"accuracy"}
    with pytest.raises(BertforgeError, match="unknown GLUE task 'sst-2'"):
        glue_metrics("sst-2", [0], [0])
    with pytest.raises(BertforgeError, match="3 predictions for 2 labels"):
        accuracy([0, 1, 1], [0, 1])


def test_entities_follow_conlleval():
    assert entities(["I-PER", "I-PER", "O", "I-LOC"]) == [("PER", 0, 2), ("LOC", 3, 4)]  # IOB1
    assert entities(["O", "I-ORG", "I-ORG"]) == [("ORG", 1, 3)]  # I- after O starts an entity
    assert entities(["I-PER", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 2)]  # a type change starts one
    assert entities(["B-PER", "I-LOC"]) == [("PER", 0, 1), ("LOC", 1, 2)]
    assert entities(["I-PER", "B-PER", "I-PER"]) == [("PER", 0, 1), ("PER", 1, 3)]  # B- inside splits
    assert entities(["B-PER", "B-PER"]) == [("PER", 0, 1), ("PER", 1, 2)]
    assert entities(["B-MISC", "I-MISC", "I-MISC"]) == [("MISC", 0, 3)]
    with pytest.raises(ValueError, match="'PER' is not O, B-TYPE or I-TYPE"):
        entities(["PER"])


def _conlleval_chunks(tags):
    """conlleval.pl's startOfChunk/endOfChunk, transcribed for B/I/O tags."""
    chunks, start, prev_tag, prev_type = [], None, "O", ""
    for i, t in enumerate([*tags, "O"]):
        tag, _, kind = t.partition("-")
        end = (prev_tag in ("B", "I") and tag in ("B", "O")) or (prev_tag != "O" and prev_type != kind)
        begin = tag == "B" or (prev_tag == "O" and tag == "I") or (tag != "O" and prev_type != kind)
        if end and start is not None:
            chunks.append((prev_type, start, i))
            start = None
        if begin:
            start = i
        prev_tag, prev_type = tag, kind
    return chunks


def test_entities_match_conlleval_transcription_on_random_tags():
    rng = random.Random(0)
    tags = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
    for _ in range(2000):
        sequence = [rng.choice(tags) for _ in range(rng.randint(0, 12))]
        assert entities(sequence) == _conlleval_chunks(sequence), sequence


def test_ner_metrics_exact_spans_only():
    gold = [["B-PER", "I-PER", "O", "B-LOC"], ["I-ORG", "O"]]
    pred = [["B-PER", "O", "O", "B-LOC"], ["B-ORG", "O"]]  # PER cut short: wrong; LOC right; ORG right (IOB1=IOB2)
    m = ner_metrics(gold, pred)
    assert (m["precision"], m["recall"]) == pytest.approx((2 / 3, 2 / 3))
    assert m["f1"] == pytest.approx(2 / 3)
    assert m["per_type"]["PER"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1}
    assert m["per_type"]["LOC"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1}


def test_ner_metrics_wrong_type_and_spurious():
    gold = [["B-PER", "O", "O"]]
    pred = [["B-ORG", "B-LOC", "O"]]
    m = ner_metrics(gold, pred)
    assert (m["precision"], m["recall"], m["f1"]) == (0.0, 0.0, 0.0)
    assert m["per_type"]["ORG"]["support"] == 0 and m["per_type"]["PER"]["support"] == 1


def test_ner_metrics_sentences_do_not_join():
    gold = [["O", "I-PER"], ["I-PER", "O"]]
    assert ner_metrics(gold, gold)["per_type"]["PER"]["support"] == 2
    with pytest.raises(BertforgeError, match="sentence 1: 1 predicted tags for 2 words"):
        ner_metrics(gold, [gold[0], ["O"]])


def test_search_metrics_by_hand():
    qrels = {"q1": {"d1": 1, "d2": 2, "d9": 1}, "q2": {"d5": 1}, "q3": {"d7": 0}}
    rankings = {"q1": ["d4", "d2", "d1", "d3"], "q2": ["d6", "d7", "d8"], "q3": ["d7"]}
    metrics = search_metrics(rankings, qrels, k=3, recall_at=(1, 3))
    dcg = 0 + 2 / math.log2(3) + 1 / math.log2(4)  # q1's top 3: grades 0, 2, 1
    ideal = 2 + 1 / math.log2(3) + 1 / math.log2(4)  # 2, 1, 1
    assert metrics == pytest.approx({"mrr@3": (1 / 2 + 0) / 2, "ndcg@3": (dcg / ideal + 0) / 2,
                                     "recall@1": 0.0, "recall@3": (2 / 3 + 0) / 2, "queries": 2})
    assert search_metrics({"q2": ["d5"]}, qrels) == {"mrr@10": 1.0, "ndcg@10": 1.0, "recall@10": 1.0,
                                                    "recall@100": 1.0, "queries": 1}
    with pytest.raises(BertforgeError, match="no ranked query has a relevant passage"):
        search_metrics({"q3": ["d7"]}, qrels)
