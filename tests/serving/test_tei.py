"""text-embeddings-inference's routes on `bertforge serve` (serve_tei.py): real uvicorn processes on 127.0.0.1.

The embedding model is the shared all-MiniLM-L6-v2, checked against `bertforge.pipeline("sentence-embedding")`,
sentence-transformers (where installed) and transformers; the classifier and the reranker (a one-output pair
classifier) are tiny random-weight transformers models built here, checked against transformers' logits.
"""

import concurrent.futures
import csv
import re

import numpy as np
import pytest
import torch
import transformers

import bertforge
from tests.conftest import require_shared
from tests.inference.test_pipelines import TEXTS, random_model
from tests.serving.test_serve import Served

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
transformers.logging.set_verbosity_error()

QUERY = "Who wrote Emma?"
PASSAGES = ["Emma is a novel by Jane Austen.", "The Thames flows through London.", "Austen wrote six novels.",
            "Reykjavík ☃ is cold in winter."]


def sst2_sentences(n: int) -> list[str]:
    with open(require_shared("data", "glue", "SST-2", "dev.tsv"), encoding="utf-8") as f:
        return [row["sentence"] for row, _ in zip(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE), range(n))]


@pytest.fixture(scope="module")
def minilm():
    return require_shared("models", "all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer):
    return {"classifier": random_model(tmp_path_factory.mktemp("classifier"), "BertForSequenceClassification",
                                       tokenizer, id2label={0: "neg", 1: "pos", 2: "mixed"}),
            "reranker": random_model(tmp_path_factory.mktemp("reranker"), "BertForSequenceClassification",
                                     tokenizer, num_labels=1)}


@pytest.fixture(scope="module")
def servers(minilm, folders):
    """kind -> a running server (started together), stopped after the module. The reranker's takes TEI's flag
    names, an API key and a small payload limit."""
    started = {"embedding": Served(minilm, "--max-client-batch", 8, "--max-input-tokens", 128),
               "classifier": Served(folders["classifier"], "--max-input-tokens", 64),
               "reranker": Served(folders["reranker"], "--max-concurrent-requests", 7, "--max-client-batch-size", 5,
                                  "--auto-truncate", "--payload-limit", 3000, "--max-input-tokens", 64,
                                  "--api-key", "sesame")}
    try:
        yield {kind: s.wait() for kind, s in started.items()}
    finally:
        for s in started.values():
            s.stop()


def post(server, path, body, **kw):
    return httpx.post(server.url + path, json=body, timeout=120, **kw)


KEY = {"authorization": "Bearer sesame"}


def test_embed_is_the_pipelines_and_sentence_transformers(servers, minilm):
    sentences = sst2_sentences(24)
    response = post(servers["embedding"], "/embed", {"inputs": sentences[:8]})
    assert response.status_code == 200, response.text
    vectors = np.array(response.json())
    expected = np.array(bertforge.pipeline("sentence-embedding", model=minilm)(sentences[:8]))
    assert vectors.shape == (8, 384) and np.abs(vectors - expected).max() < 1e-5
    one = post(servers["embedding"], "/embed", {"inputs": sentences[0]}).json()
    assert np.abs(np.array(one) - expected[:1]).max() < 1e-5  # one input: still a list of one vector
    sentence_transformers = pytest.importorskip("sentence_transformers")
    reference = sentence_transformers.SentenceTransformer(str(minilm), device="cpu").encode(sentences[:8])
    assert (np.sum(vectors * reference, 1) / np.linalg.norm(reference, axis=1)).min() > 1 - 1e-5


def test_embed_dimensions_and_normalize(servers, minilm):
    texts = TEXTS[:3]
    raw = np.array(bertforge.pipeline("sentence-embedding", model=minilm)(texts, normalize=False))
    unnormalised = np.array(post(servers["embedding"], "/embed", {"inputs": texts, "normalize": False}).json())
    assert np.abs(unnormalised - raw).max() < 1e-4
    cut = np.array(post(servers["embedding"], "/embed", {"inputs": texts, "dimensions": 64}).json())
    first = raw[:, :64] / np.linalg.norm(raw[:, :64], axis=1, keepdims=True)
    assert cut.shape == (3, 64) and np.abs(cut - first).max() < 1e-5
    too_many = post(servers["embedding"], "/embed", {"inputs": texts, "dimensions": 385})
    assert too_many.status_code == 422 and "dimensions 385 is over the model's 384" in too_many.json()["error"]
    no_prompt = post(servers["embedding"], "/embed", {"inputs": texts, "prompt_name": "query"})
    assert no_prompt.status_code == 422 and "prompt_name 'query'" in no_prompt.json()["error"]


def test_embed_all_is_transformers_last_hidden_state(servers, minilm):
    response = post(servers["embedding"], "/embed_all", {"inputs": TEXTS[:2]})
    assert response.status_code == 200, response.text
    tok = transformers.AutoTokenizer.from_pretrained(minilm)
    model = transformers.BertModel.from_pretrained(minilm).eval()
    for text, states in zip(TEXTS[:2], response.json()):
        with torch.no_grad():
            expected = model(**tok(text, return_tensors="pt")).last_hidden_state[0].numpy()
        assert np.array(states).shape == expected.shape and np.abs(np.array(states) - expected).max() < 1e-4


def logits(folder, pairs) -> np.ndarray:
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    model = transformers.BertForSequenceClassification.from_pretrained(folder).eval()
    firsts = [p if isinstance(p, str) else p[0] for p in pairs]
    seconds = None if all(isinstance(p, str) for p in pairs) else [p[1] for p in pairs]
    with torch.no_grad():
        return model(**tok(firsts, seconds, padding=True, return_tensors="pt")).logits.double().numpy()


def test_predict_ranks_labels_as_transformers(servers, folders):
    s, folder = servers["classifier"], folders["classifier"]
    single = post(s, "/predict", {"inputs": TEXTS[0]})
    assert single.status_code == 200, single.text
    assert single.headers["Input-Read-As"] == "text"
    probabilities = torch.tensor(logits(folder, TEXTS[:1])[0]).softmax(0).numpy()
    labels = ["neg", "pos", "mixed"]
    expected = [{"score": probabilities[i], "label": labels[i]} for i in np.argsort(-probabilities)]
    assert [p["label"] for p in single.json()] == [e["label"] for e in expected]
    assert np.allclose([p["score"] for p in single.json()], [e["score"] for e in expected], atol=1e-5)
    pair = post(s, "/predict", {"inputs": [QUERY, PASSAGES[0]], "raw_scores": True})  # two texts: one pair
    assert pair.headers["Input-Read-As"] == "pair"
    pair = pair.json()
    raw = logits(folder, [(QUERY, PASSAGES[0])])[0]
    assert np.allclose(sorted(p["score"] for p in pair), sorted(raw), atol=1e-4)
    batch = post(s, "/predict", {"inputs": [[TEXTS[1]], [QUERY, PASSAGES[2]]]})  # a batch: a list each
    assert batch.headers["Input-Read-As"] == "batch"
    batch = batch.json()
    assert len(batch) == 2 and all(len(ranked) == 3 for ranked in batch)
    best = logits(folder, [(QUERY, PASSAGES[2])])[0].argmax()
    assert batch[1][0]["label"] == labels[best]


def test_rerank_scores_are_sigmoid_of_transformers_logits(servers, folders):
    s, folder = servers["reranker"], folders["reranker"]
    response = post(s, "/rerank", {"query": QUERY, "texts": PASSAGES, "return_text": True}, headers=KEY)
    assert response.status_code == 200, response.text
    scores = 1 / (1 + np.exp(-logits(folder, [(QUERY, p) for p in PASSAGES])[:, 0]))
    ranks = response.json()
    assert [r["index"] for r in ranks] == list(np.argsort(-scores, kind="stable"))
    assert all(r["text"] == PASSAGES[r["index"]] and abs(r["score"] - scores[r["index"]]) < 1e-5 for r in ranks)
    raw = post(s, "/rerank", {"query": QUERY, "texts": PASSAGES, "raw_scores": True}, headers=KEY).json()
    assert all(set(r) == {"index", "score"} for r in raw)
    assert np.allclose([r["score"] for r in sorted(raw, key=lambda r: r["index"])],
                       logits(folder, [(QUERY, p) for p in PASSAGES])[:, 0], atol=1e-4)
    predicted = post(s, "/predict", {"inputs": [QUERY, PASSAGES[0]]}, headers=KEY).json()  # a reranker predicts too
    assert predicted[0]["label"] == "LABEL_0" and abs(predicted[0]["score"] - scores[0]) < 1e-5


def test_tokenize_and_decode(servers, tokenizer):
    s, text = servers["embedding"], "Héllo Reykjavík ☃ world"
    tokens = post(s, "/tokenize", {"inputs": text}).json()
    assert [t["id"] for t in tokens[0]] == tokenizer(text)["input_ids"]
    assert tokens[0][0] == {"id": 101, "text": "[CLS]", "special": True, "start": None, "stop": None}
    data = text.encode("utf-8")
    for token in tokens[0][1:-1]:  # byte offsets into the text, as TEI's
        assert data[token["start"]:token["stop"]].decode("utf-8") == token["text"] and not token["special"]
    plain = post(s, "/tokenize", {"inputs": [text, "hi"], "add_special_tokens": False}).json()
    assert [t["id"] for t in plain[1]] == tokenizer("hi", add_special_tokens=False)["input_ids"]
    ids = tokenizer(["hello world", text])["input_ids"]
    assert post(s, "/decode", {"ids": ids[0]}).json() == ["hello world"]
    assert post(s, "/decode", {"ids": ids, "skip_special_tokens": False}).json() == [
        tokenizer.decode(i) for i in ids]
    outside = post(s, "/decode", {"ids": [101, 40000]})
    assert outside.status_code == 422 and outside.json()["error_type"] == "Tokenizer"


def test_info_says_teis_fields(servers):
    info = httpx.get(servers["embedding"].url + "/info").json()
    assert info["model_type"] == {"embedding": {"pooling": "mean"}} and info["task"] == "sentence-embedding"
    assert info["max_input_length"] == 128 and info["max_client_batch_size"] == 8 and info["version"]
    assert info["model_id"] == "all-MiniLM-L6-v2" and info["model_dtype"] == "float32"
    classifier = httpx.get(servers["classifier"].url + "/info").json()["model_type"]["classifier"]
    assert classifier == {"id2label": {"0": "neg", "1": "pos", "2": "mixed"}, "label2id": {"neg": 0, "pos": 1,
                                                                                           "mixed": 2}}
    reranker = httpx.get(servers["reranker"].url + "/info", headers=KEY).json()
    assert "reranker" in reranker["model_type"] and reranker["max_concurrent_requests"] == 7
    assert reranker["max_client_batch_size"] == 5 and reranker["auto_truncate"] is True


@pytest.mark.parametrize("kind, path, body, status, error_type, message", [
    ("embedding", "/embed", {"inputs": []}, 400, "Empty", "`inputs` cannot be empty"),
    ("embedding", "/embed", {"inputs": ["a"] * 9}, 413, "Validation", "inputs has 9 items, over the limit of 8"),
    ("embedding", "/embed", {"inputs": "word " * 200}, 413, "Validation", "over the limit of 128"),
    ("embedding", "/embed", {"inputs": ["fine", ""]}, 422, "Validation", r"inputs\[1\] is empty"),
    ("embedding", "/embed", {"inputs": "a", "colour": 1}, 422, "Validation", "colour: Extra inputs"),
    ("embedding", "/embed", {"inputs": "a", "truncation_direction": "Left"}, 422, "Validation",
     "truncation_direction"),
    ("embedding", "/embed", {"inputs": [1, 99999]}, 422, "Validation", "token id 99999 is outside"),
    ("embedding", "/rerank", {"query": "q", "texts": ["a"]}, 424, "Backend",
     "an embedding model, which answers /embed, /embed_all, /v1/embeddings, /tokenize, /decode"),
    ("classifier", "/embed", {"inputs": "a"}, 424, "Backend", "a classifier model, which answers /predict,"),
    ("classifier", "/predict", {"inputs": ["a", "b", "c"]}, 422, "Validation", "a list of texts is one input"),
    ("embedding", "/tokenize", {"inputs": "word " * 9000}, 413, "Validation", "over the limit of 8192"),
    # each field of the type TEI declares, never converted (true is not 1, "yes" not true, "5" not 5)
    ("embedding", "/embed", {"inputs": "a", "dimensions": True}, 422, "Validation",
     "^dimensions: Input should be a valid integer, not a boolean$"),
    ("embedding", "/embed", {"inputs": "a", "normalize": "yes"}, 422, "Validation",
     "^normalize: Input should be a valid boolean, not a text$"),
    ("embedding", "/decode", {"ids": [True, False]}, 422, "Validation",
     r"^ids\.list\[int\]\.0: Input should be a valid integer, not a boolean$"),
    ("embedding", "/decode", {"ids": ["5"]}, 422, "Validation", r"^ids\.list\[int\]\.0: .* integer, not a text$"),
    ("embedding", "/decode", {"ids": [[101], [102, True]]}, 422, "Validation", "ids.* integer, not a boolean"),
    ("embedding", "/tokenize", {"inputs": "a", "add_special_tokens": 0}, 422, "Validation",
     "add_special_tokens: Input should be a valid boolean, not a whole number"),
    ("classifier", "/predict", {"inputs": "a", "raw_scores": "true"}, 422, "Validation",
     "raw_scores: Input should be a valid boolean, not a text"),
])
def test_errors_in_teis_form(servers, kind, path, body, status, error_type, message):
    response = post(servers[kind], path, body)
    assert response.status_code == status, response.text
    assert set(response.json()) == {"error", "error_type"} and response.json()["error_type"] == error_type
    assert re.search(message, response.json()["error"]), response.json()


def test_guards_and_teis_flags(servers):
    """The Guard's refusals (API key, payload limit) in TEI's form on its routes; --auto-truncate cuts what a
    request does not ask to keep, --max-client-batch-size limits the batch."""
    s = servers["reranker"]
    assert post(s, "/rerank", {"query": QUERY, "texts": PASSAGES}).status_code == 401
    big = post(s, "/rerank", {"query": QUERY, "texts": ["word " * 200] * 4}, headers=KEY)
    assert big.status_code == 413 and big.json()["error_type"] == "Validation" and "3000 bytes" in big.json()["error"]
    long = post(s, "/rerank", {"query": QUERY, "texts": ["word " * 100]}, headers=KEY)
    assert long.status_code == 200, long.text  # cut to 64 tokens: --auto-truncate
    kept = post(s, "/rerank", {"query": QUERY, "texts": ["word " * 100], "truncate": False}, headers=KEY)
    assert kept.status_code == 413
    many = post(s, "/rerank", {"query": QUERY, "texts": ["a"] * 6}, headers=KEY)
    assert many.status_code == 413 and "over the limit of 5" in many.json()["error"]


def test_queue_full_and_a_foreign_host_in_teis_form(folders):
    """The batcher's queue limit (--max-concurrent-requests) is TEI's 429 "Overloaded" with Retry-After, and the
    Host check a 421, on TEI's routes as on bertforge's."""
    s = Served(folders["classifier"], "--max-concurrent-requests", 1, "--max-wait-ms", 200).wait()
    try:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: post(s, "/predict", {"inputs": "hi"}), range(6)))
        assert {r.status_code for r in answers} == {200, 429}
        busy = next(r for r in answers if r.status_code == 429)
        assert busy.headers["retry-after"] == "1" and busy.json()["error_type"] == "Overloaded"
        foreign = post(s, "/predict", {"inputs": "hi"}, headers={"host": "evil.example"})
        assert foreign.status_code == 421 and set(foreign.json()) == {"error", "error_type"}
    finally:
        s.stop()
