"""Rerankers: ranking metrics against scikit-learn and by hand, the loss against transformers, fine-tuning on SQuAD
ranking pairs, and the saved model read by transformers and sentence-transformers."""

import json

import numpy as np
import pytest

from benchmarks import squad_rerank_data
from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.core.io import read_json_lines
from bertforge.tasks import make_family
from bertforge.tasks.metrics import ranking_groups, ranking_metrics
from tests.conftest import fine_tune, one_line_error, require_shared, write_jsonl


def test_ndcg_against_sklearn_and_mrr_by_hand():
    skm = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    sizes = [2, 5, 10, 14, 30] * 4
    queries = [f"q{i}" for i, n in enumerate(sizes) for _ in range(n)]
    relevance = np.concatenate([rng.choice([0, 0, 0, 0.3, 0.5, 1], n) for n in sizes])
    for start in np.cumsum([0, *sizes[:-1]]):
        relevance[start] = 1  # a relevant passage in every query
    scores = rng.normal(size=len(queries))  # no ties
    groups = ranking_groups(queries, relevance, "dev")
    metrics = ranking_metrics(groups, relevance, scores)
    ndcg = [skm.ndcg_score([relevance[g]], [scores[g]], k=10) for g in groups]
    mrr = []
    for g in groups:
        ranked = relevance[g][np.argsort(-scores[g])]
        first = next((i for i, r in enumerate(ranked) if r >= 0.5), None)
        mrr.append(1 / (first + 1) if first is not None and first < 10 else 0.0)
    assert metrics["ranked_queries"] == len(sizes)
    assert metrics["ndcg@10"] == pytest.approx(np.mean(ndcg))
    assert metrics["mrr@10"] == pytest.approx(np.mean(mrr))
    assert 0 < min(mrr) < max(mrr) == 1  # the cases differ: some first, some later


def test_mrr_and_ndcg_of_one_query_by_hand():
    # Scores rank the passages c, a, d, b; only d is relevant, at rank 3.
    groups = ranking_groups(["q"] * 4, [0, 0, 0, 1], "dev")
    metrics = ranking_metrics(groups, [0, 0, 0, 1], [0.5, 0.1, 0.9, 0.3])
    assert metrics["mrr@10"] == pytest.approx(1 / 3)
    assert metrics["ndcg@10"] == pytest.approx(1 / np.log2(4))
    beyond = ranking_metrics(ranking_groups(["q"] * 11, [1] + [0] * 10, "dev"), [1] + [0] * 10, [0] + [1] * 10)
    assert beyond["mrr@10"] == 0 and beyond["ndcg@10"] == 0  # the relevant one is 11th


def test_ties_count_against_the_model():
    """A model that scores every passage alike gets the worst ranking, whatever the order of the file."""
    metrics = ranking_metrics(ranking_groups(["q"] * 4, [1, 0, 0, 0], "dev"), [1, 0, 0, 0], [0.2] * 4)
    assert metrics["mrr@10"] == pytest.approx(1 / 4)


def test_only_queries_with_several_passages_and_a_relevant_one_are_ranked():
    queries, relevance = ["a", "b", "b", "c", "c", "d"], [1, 0, 0, 1, 0, 1]
    assert [list(g) for g in ranking_groups(queries, relevance, "dev")] == [[3, 4]]
    with pytest.raises(BertforgeError, match="dev.jsonl: no query has several passages with a relevant one"):
        ranking_groups(["a", "b"], [1, 1], "dev.jsonl")


def test_loss_is_binary_cross_entropy_as_transformers(tokenizer):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from bertforge import BertConfig
    from bertforge.model.architectures.task_heads import BertForSequenceClassification

    family = make_family("rerank", options={})
    config = BertConfig.from_name("tiny", vocab_size=tokenizer.vocab_size, **family.head_config())
    torch.manual_seed(0)
    ours = BertForSequenceClassification(config).eval()
    theirs = transformers.BertForSequenceClassification(transformers.BertConfig(**config.to_dict())).eval()
    theirs.load_state_dict(ours.state_dict(), strict=False)
    enc = tokenizer(["who wrote it?", "when?", "where is it?"], ["a man wrote it.", "in 1990.", "no idea."],
                    padding=True, return_tensors="pt")
    labels = torch.tensor([1.0, 0.0, 0.7])
    mine = ours(**enc, labels=labels)
    reference = theirs(**enc, labels=labels[:, None])
    assert mine.loss.item() == pytest.approx(reference.loss.item(), rel=1e-5)
    expected = torch.nn.functional.binary_cross_entropy(torch.sigmoid(mine.logits[:, 0]), labels)
    assert mine.loss.item() == pytest.approx(expected.item(), rel=1e-5)


def squad_ranking(tmp_path, *flags):
    require_shared("data", "squad")
    squad_rerank_data.main(["--out", str(tmp_path), *flags])
    return [[json.loads(line) for line in (tmp_path / f"{s}.jsonl").read_text().splitlines()] for s in ("train", "dev")]


def test_squad_ranking_data(tmp_path):
    flags = ["--train-queries", "20", "--train-negatives", "2", "--dev-queries", "10", "--dev-negatives", "9"]
    train, dev = squad_ranking(tmp_path / "a", *flags)
    assert squad_ranking(tmp_path / "b", *flags) == [train, dev]  # deterministic by seed
    assert squad_ranking(tmp_path / "c", *flags, "--seed", "1")[1] != dev
    assert len(train) == 20 * 3 and len(dev) == 10 * 10
    squad = json.loads((require_shared("data", "squad") / "dev-v1.1.json").read_text())["data"]
    home = {qa["question"].strip(): (a["title"], p["context"])
            for a in squad for p in a["paragraphs"] for qa in p["qas"]}
    titles = {p["context"]: a["title"] for a in squad for p in a["paragraphs"]}
    queries = {r["query"] for r in dev}
    assert len(queries) == 10
    for query in queries:
        rows = [r for r in dev if r["query"] == query]
        title, own = home[query]
        assert [r["passage"] for r in rows if r["label"] == 1] == [own]
        assert len({r["passage"] for r in rows}) == 10 and {titles[r["passage"]] for r in rows} == {title}
    positions = [[r["label"] for r in dev if r["query"] == q].index(1) for q in queries]
    assert len(set(positions)) > 1  # the relevant passage is not always first


def test_fine_tune_then_transformers_and_sentence_transformers_read_the_reranker(tiny_model, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    squad_ranking(tmp_path, "--train-queries", "24", "--train-negatives", "1", "--dev-queries", "4",
                  "--dev-negatives", "3")
    run = fine_tune("rerank", tiny_model, tmp_path / "run", "--train", tmp_path / "train.jsonl", "--dev",
                    tmp_path / "dev.jsonl", "--epochs", "1", "--batch-size", "8", "--max-length", "64")
    results = json.loads((run / "eval_results.json").read_text())
    assert results["ranked_queries"] == 4 and 0 < results["mrr@10"] <= 1 and 0 < results["ndcg@10"] <= 1

    config = json.loads((run / "best" / "config.json").read_text())
    assert config["id2label"] == {"0": "relevant"} and config["problem_type"] == "multi_label_classification"
    pairs = [("Which NFL team won Super Bowl 50?", "The Denver Broncos won Super Bowl 50."),
             ("Which NFL team won Super Bowl 50?", "Paris is the capital of France.")]
    capsys.readouterr()
    assert main(["predict", "rerank", "--model", str(run / "best"), "--text", "\t".join(pairs[0]),
                 "--text", "\t".join(pairs[1]), "--max-length", "64"]) == 0
    ours = [json.loads(line)["score"] for line in capsys.readouterr().out.splitlines()]

    theirs = transformers.BertForSequenceClassification.from_pretrained(run / "best").eval()
    assert theirs.num_labels == 1
    enc = transformers.BertTokenizerFast.from_pretrained(run / "best")([q for q, _ in pairs], [p for _, p in pairs],
                                                                       padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = theirs(**enc).logits[:, 0]
    assert ours == pytest.approx(torch.sigmoid(logits).tolist(), abs=1e-5)
    sentence_transformers = pytest.importorskip("sentence_transformers")
    cross = sentence_transformers.CrossEncoder(str(run / "best"), device="cpu")
    assert ours == pytest.approx(list(cross.predict(pairs)), abs=1e-5)
    assert served_scores(run / "best", pairs[0][0], [p for _, p in pairs]) == pytest.approx(ours, abs=1e-5)


def served_scores(folder, query: str, texts: list[str]) -> list[float]:
    """The scores `bertforge serve` answers on TEI's /rerank, in the texts' order."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    from tests.serving.test_serve import Served

    served = Served(folder).wait()
    try:
        ranked = httpx.post(served.url + "/rerank", json={"query": query, "texts": texts}, timeout=60).json()
    finally:
        served.stop()
    return [r["score"] for r in sorted(ranked, key=lambda r: r["index"])]


@pytest.mark.parametrize("label, message", [("0.5x", r"relevance '0.5x' is not a number from 0 to 1"),
                                            (3, r"relevance 3 is not a number from 0 to 1"),
                                            (None, r"relevance None is not a number")])
def test_bad_relevance_names_the_line(tokenizer, tmp_path, label, message):
    rows = [{"query": "q", "passage": "p", "label": 1}, {"query": "q", "passage": "r", "label": label}]
    family = make_family("rerank", options={"train": write_jsonl(tmp_path / "train.jsonl", rows)})
    with pytest.raises(BertforgeError, match=r"train\.jsonl:2: " + message) as excinfo:
        family.read("train", tokenizer)
    one_line_error(excinfo)


def test_columns_of_ones_own_and_a_dev_split_with_nothing_to_rank(tokenizer, tmp_path):
    (tmp_path / "dev.csv").write_text("q,doc,rel\nwho?,him,1\nwhat?,that,1\n")
    family = make_family("rerank", options={"dev": tmp_path / "dev.csv", "query_column": "q", "passage_column": "doc",
                                            "label_column": "rel"})
    with pytest.raises(BertforgeError, match=r"dev\.csv: no query has several passages"):
        family.read("dev", tokenizer)
    with pytest.raises(BertforgeError, match=r"dev\.csv:2: no column 'passage'"):
        make_family("rerank", options={"dev": tmp_path / "dev.csv", "query_column": "q"}).read("dev", tokenizer)


@pytest.mark.slow
def test_a_reranker_from_minilm_learns_to_rank_within_a_few_dozen_steps(minilm_dir, tmp_path, capsys):
    """64 steps of 2 queries from all-MiniLM-L6-v2 on SQuAD questions against paragraphs of their article put
    held-out questions' own paragraphs first far more often than chance (MRR@10 of a random order of 4 passages:
    0.52). Pointwise binary cross-entropy stayed near chance here (BENCHMARKS.md, "Rankers")."""
    squad_ranking(tmp_path, "--train-queries", "128", "--train-negatives", "3", "--dev-queries", "24",
                  "--dev-negatives", "3")
    assert main(["finetune", "rerank", "--model", str(minilm_dir), "--train", str(tmp_path / "train.jsonl"),
                 "--dev", str(tmp_path / "dev.jsonl"), "--out", str(tmp_path / "run"), "--epochs", "1",
                 "--batch-size", "8", "--lr", "2e-4", "--max-length", "96", "--seed", "1", "--no-progress"]) == 0
    results = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert results["ranked_queries"] == 24
    assert [row["step"] for row in read_json_lines(tmp_path / "run" / "metrics.jsonl") if "mrr@10" in row] == [64]
    assert results["mrr@10"] > 0.75 and results["ndcg@10"] > 0.8
