"""`bertforge search`: hits of query texts (text and JSON), and retrieval metrics of --queries against --qrels."""

import json

import numpy as np
import pytest

from bertforge.cli import main
from bertforge.inference.embed import Embedder
from tests.inference.test_embed import corpus_file, sentences, st_folder, stored  # noqa: F401 (a fixture)


@pytest.fixture
def folder(st_folder, tmp_path):  # noqa: F811
    texts = sentences(40, seed=9)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"_id": f"doc{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    assert main(["embed", str(corpus), "--model", str(st_folder), "--out", str(tmp_path / "emb"), "--id-column",
                 "_id", "--shard-rows", "15", "--no-progress"]) == 0
    return tmp_path / "emb"


def test_search_prints_the_best_passages(st_folder, folder, capsys):  # noqa: F811
    capsys.readouterr()
    assert main(["search", str(folder), "a good film", "the bad", "--top-k", "4", "--json", "--no-progress"]) == 0
    results = json.loads(capsys.readouterr().out)
    vectors, ids = stored(folder)
    queries = Embedder(st_folder, prompt="query")(["a good film", "the bad"])
    for result, query in zip(results, queries):
        assert [h["id"] for h in result["hits"]] == [ids[i] for i in np.argsort(-(vectors @ query))[:4]]
        assert [h["score"] for h in result["hits"]] == sorted((h["score"] for h in result["hits"]), reverse=True)
    assert [r["query"] for r in results] == ["a good film", "the bad"]
    assert main(["search", str(folder), "a good film", "--model", str(st_folder), "--no-progress"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "a good film" and len(lines) == 11 and lines[1].split()[2] == results[0]["hits"][0]["id"]


def test_search_scores_queries_against_qrels(folder, tmp_path, capsys):
    queries = tmp_path / "queries.tsv"
    queries.write_text("qid\ttext\nq1\ta good film\nq2\tthe bad\nq3\tnot judged\n")
    capsys.readouterr()
    assert main(["search", str(folder), "a good film", "--top-k", "100", "--json"]) == 0
    ranked = [h["id"] for h in json.loads(capsys.readouterr().out)[0]["hits"]]
    qrels = tmp_path / "qrels.tsv"
    qrels.write_text(f"query-id\tcorpus-id\tscore\nq1\t{ranked[1]}\t1\nq1\t{ranked[30]}\t1\n")
    assert main(["search", str(folder), "--queries", str(queries), "--qrels", str(qrels), "--query-id-column",
                 "qid", "--json", "--no-progress"]) == 0
    metrics = json.loads(capsys.readouterr().out)
    ndcg = (1 / np.log2(3)) / (1 + 1 / np.log2(3))
    assert metrics == pytest.approx({"mrr@10": 0.5, "ndcg@10": ndcg, "recall@10": 0.5, "recall@100": 1.0,
                                     "queries": 1})
    assert main(["search", str(folder), "--queries", str(queries)]) == 2
    assert "--queries and --qrels go together" in capsys.readouterr().err
    assert main(["search", str(tmp_path), "a query"]) == 2
    assert "no manifest.json" in capsys.readouterr().err


def test_rerank_orders_the_hits_by_a_cross_encoders_scores(st_folder, folder, tmp_path, capsys):  # noqa: F811
    """--rerank: the same hits, each with its passage read again from the corpus, ordered by the sigmoid of a
    one-output classifier's logit over (query, passage), as transformers computes it; a classifier of two labels
    is refused in one line."""
    import torch
    import transformers

    from bertforge.model.architectures.task_heads import BertForSequenceClassification

    torch.manual_seed(0)
    scorer = tmp_path / "scorer"
    BertForSequenceClassification.from_pretrained(st_folder, num_labels=1).save_pretrained(scorer)
    transformers.AutoTokenizer.from_pretrained(st_folder).save_pretrained(scorer)
    capsys.readouterr()
    assert main(["search", str(folder), "a good film", "--top-k", "5", "--json", "--no-progress"]) == 0
    plain = json.loads(capsys.readouterr().out)[0]["hits"]
    assert main(["search", str(folder), "a good film", "--top-k", "5", "--json", "--rerank", str(scorer),
                 "--no-progress"]) == 0
    reranked = json.loads(capsys.readouterr().out)[0]["hits"]
    texts = {json.loads(line)["_id"]: json.loads(line)["text"]
             for line in (folder.parent / "corpus.jsonl").read_text().splitlines()}
    assert sorted(h["id"] for h in reranked) == sorted(h["id"] for h in plain)
    assert all(h["text"] == texts[h["id"]] for h in reranked)
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(scorer).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(scorer)
    with torch.no_grad():
        logits = reference(**tokenizer(["a good film"] * 5, [h["text"] for h in reranked], padding=True,
                                       return_tensors="pt")).logits[:, 0]
    np.testing.assert_allclose([h["score"] for h in reranked], torch.sigmoid(logits).numpy(), atol=1e-5)
    assert [h["score"] for h in reranked] == sorted((h["score"] for h in reranked), reverse=True)
    two = tmp_path / "two"
    BertForSequenceClassification.from_pretrained(st_folder, num_labels=2).save_pretrained(two)
    transformers.AutoTokenizer.from_pretrained(st_folder).save_pretrained(two)
    assert main(["search", str(folder), "a good film", "--rerank", str(two), "--no-progress"]) == 2
    assert "a reranker is a sequence classifier of one output" in capsys.readouterr().err
