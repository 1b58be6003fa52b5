"""Retrieval: its metrics against scikit-learn and by hand, a bi-encoder fine-tuned on SQuAD ranking pairs and read
by sentence-transformers, and an untuned encoder evaluated as it is."""

import json

import numpy as np
import pytest

from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.tasks import make_family
from bertforge.tasks.metrics import retrieval_metrics
from tests.conftest import fine_tune, write_jsonl
from tests.tasks.test_rerank import squad_ranking


def test_retrieval_metrics_against_sklearn_and_by_hand():
    skm = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(1)
    scores = rng.normal(size=(30, 40))
    relevant = rng.random((30, 40)) < 0.08
    relevant[np.arange(30), rng.integers(0, 40, 30)] = True  # each query has one relevant passage at least
    metrics = retrieval_metrics(scores, relevant)
    assert metrics["ndcg@10"] == pytest.approx(np.mean([skm.ndcg_score([r], [s], k=10)
                                                        for r, s in zip(relevant, scores)]))
    top = np.argsort(-scores, axis=1)[:, :10]
    recall = [relevant[q, top[q]].sum() / relevant[q].sum() for q in range(30)]
    first = [next((i for i, p in enumerate(np.argsort(-scores[q])) if relevant[q, p]), None) for q in range(30)]
    mrr = [1 / (f + 1) if f < 10 else 0.0 for f in first]
    assert metrics["recall@10"] == pytest.approx(np.mean(recall)) and metrics["mrr@10"] == pytest.approx(np.mean(mrr))
    assert 0 < metrics["recall@10"] < 1


def test_fine_tuned_bi_encoder_is_a_sentence_transformers_folder(tiny_model, minilm_dir, tmp_path, capsys):
    squad_ranking(tmp_path, "--train-queries", "32", "--train-negatives", "1", "--dev-queries", "6",
                  "--dev-negatives", "3")
    data = ["--train", tmp_path / "train.jsonl", "--dev", tmp_path / "dev.jsonl", "--max-length", "64"]
    run = fine_tune("retrieval", tiny_model, tmp_path / "run", *data, "--epochs", "1", "--batch-size", "8")
    results = json.loads((run / "eval_results.json").read_text())
    assert results["train_examples"] == 32  # the relevant pairs only
    assert results["ranked_queries"] == 6 and 0 < results["recall@10"] <= 1 and 0 < results["mrr@10"] <= 1
    assert json.loads((run / "best" / "config.json").read_text())["architectures"] == ["BertModel"]  # as it is

    texts = ["Which NFL team won Super Bowl 50?", "The Denver Broncos won Super Bowl 50."]
    capsys.readouterr()
    assert main(["predict", "retrieval", "--model", str(run / "best"), "--text", texts[0], "--text", texts[1],
                 "--max-length", "64"]) == 0
    ours = np.array([json.loads(line)["embedding"] for line in capsys.readouterr().out.splitlines()])
    sentence_transformers = pytest.importorskip("sentence_transformers")
    theirs = sentence_transformers.SentenceTransformer(str(run / "best"), device="cpu").encode(texts)
    assert (ours * theirs).sum(1) == pytest.approx([1, 1], abs=1e-5)

    # The untuned encoder, as it is: what fine-tuning starts from.
    capsys.readouterr()
    assert main(["evaluate", "retrieval", "--model", str(minilm_dir), "--dev", str(tmp_path / "dev.jsonl"),
                 "--max-length", "64", "--no-progress"]) == 0
    untuned = json.loads(capsys.readouterr().out)
    assert untuned["ranked_queries"] == 6 and untuned["mrr@10"] > 0.5  # all-MiniLM-L6-v2 is made for this


def test_training_needs_relevant_pairs(tokenizer, tmp_path):
    rows = [{"query": "q", "passage": "p", "label": 0}, {"query": "r", "passage": "s", "label": 0.2}]
    family = make_family("retrieval", options={"train": write_jsonl(tmp_path / "train.jsonl", rows)})
    with pytest.raises(BertforgeError, match=r"train\.jsonl: no relevant pair \(label >= 0.5\) to train on"):
        family.read("train", tokenizer)
