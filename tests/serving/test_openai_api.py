"""OpenAI's /v1/embeddings on `bertforge serve` (serve_openai.py): a real uvicorn process on 127.0.0.1 serving the
shared all-MiniLM-L6-v2, checked against `bertforge.pipeline("sentence-embedding")` and the tokenizer's counts, and
called by the `openai` client package unchanged."""

import base64

import numpy as np
import pytest

import bertforge
from tests.conftest import require_shared
from tests.inference.test_pipelines import TEXTS
from tests.serving.test_serve import Served

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")


@pytest.fixture(scope="module")
def minilm():
    return require_shared("models", "all-MiniLM-L6-v2")


@pytest.fixture(scope="module")
def server(minilm):
    s = Served(minilm, "--max-client-batch", 8, "--max-input-tokens", 128, "--api-key", "sesame")
    try:
        yield s.wait()
    finally:
        s.stop()


@pytest.fixture(scope="module")
def pipe(minilm):
    return bertforge.pipeline("sentence-embedding", model=minilm)


def embeddings(server, body):
    return httpx.post(server.url + "/v1/embeddings", json=body, headers={"authorization": "Bearer sesame"},
                      timeout=120)


def test_float_and_base64_are_the_pipelines_vectors(server, pipe):
    response = embeddings(server, {"input": TEXTS, "model": "all-MiniLM-L6-v2"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["object"] == "list" and body["model"] == "all-MiniLM-L6-v2"
    assert [(d["object"], d["index"]) for d in body["data"]] == [("embedding", i) for i in range(len(TEXTS))]
    vectors = np.array([d["embedding"] for d in body["data"]])
    assert np.abs(vectors - np.array(pipe(TEXTS))).max() < 1e-5
    tokens = sum(len(ids) for ids in pipe.tokenizer(TEXTS)["input_ids"])
    assert body["usage"] == {"prompt_tokens": tokens, "total_tokens": tokens}
    bare = httpx.post(server.url + "/embeddings", json={"input": TEXTS}, headers={"authorization": "Bearer sesame"})
    assert bare.json() == body  # TEI's and Infinity's path too
    packed = embeddings(server, {"input": TEXTS, "encoding_format": "base64"}).json()["data"]
    decoded = np.array([np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4") for d in packed])
    assert np.array_equal(decoded, vectors.astype(np.float32))


def test_token_ids_and_dimensions(server, pipe):
    ids = pipe.tokenizer(TEXTS[:2])["input_ids"]
    from_ids = embeddings(server, {"input": ids}).json()
    assert np.abs(np.array([d["embedding"] for d in from_ids["data"]]) - np.array(pipe(TEXTS[:2]))).max() < 1e-5
    assert from_ids["usage"]["prompt_tokens"] == sum(map(len, ids))
    one = embeddings(server, {"input": ids[0], "dimensions": 32}).json()["data"]  # one input's ids
    raw = np.array(pipe(TEXTS[0], normalize=False))[:32]
    assert len(one) == 1 and np.abs(np.array(one[0]["embedding"]) - raw / np.linalg.norm(raw)).max() < 1e-5


@pytest.mark.parametrize("body, status, param, message", [
    ({"input": []}, 400, "input", "`input` cannot be empty"),
    ({"input": ["a", ""]}, 422, "input", r"input\[1\] is empty"),
    ({"input": ["a"] * 9}, 413, "input", "input has 9 items, over the limit of 8"),
    ({"input": "word " * 200}, 413, "input", r"over the limit of 128 \(--max-input-tokens; this route cannot ask to "
                                             "cut it: send shorter inputs, or start the server with --auto-truncate"),
    ({"input": "a", "encoding_format": "hex"}, 422, "encoding_format", "encoding_format"),
    ({"input": "a", "dimensions": 0}, 422, "dimensions", "dimensions must be a whole number of at least 1"),
    ({"input": "a", "dimensions": True}, 422, "dimensions", "^dimensions: Input should .* integer, not a boolean$"),
    ({"input": "a", "dimensions": "16"}, 422, "dimensions", "^dimensions: Input should .* integer, not a text$"),
    ({"input": "a", "user": 7}, 422, "user", "^user: Input should be a valid string, not a whole number$"),
])
def test_errors_in_openais_form(server, body, status, param, message):
    import re

    response = embeddings(server, body)
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["type"] == "invalid_request_error"
    assert error["param"] == param and re.search(message, error["message"]), error


def test_the_guards_answer_in_openais_form(server):
    response = httpx.post(server.url + "/v1/embeddings", json={"input": "a"})
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "authentication_error"
    twice = httpx.post(server.url + "/v1/embeddings", json={"input": "a"},
                       headers=[("authorization", "Bearer sesame"), ("authorization", "Bearer sesame")])
    assert twice.status_code == 401
    assert twice.json()["error"] == {"message": "2 Authorization headers: send one, Authorization: Bearer KEY",
                                     "type": "authentication_error", "param": None, "code": "unauthorized"}


def test_an_input_over_the_limit_is_a_413_that_does_not_suggest_truncate(server):
    """The route has no "truncate" field (a request that sends one is refused): its 413 says what it accepts."""
    message = embeddings(server, {"input": ["a", "word " * 200]}).json()["error"]["message"]
    assert message.startswith("input[1] is 202 tokens, over the limit of 128 (--max-input-tokens;"), message
    assert "--auto-truncate" in message and '"truncate"' not in message, message
    assert embeddings(server, {"input": "word " * 200, "truncate": True}).status_code == 422


def test_the_openai_client_works_unchanged(server, pipe):
    openai = pytest.importorskip("openai")
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="sesame")
    result = client.embeddings.create(model="all-MiniLM-L6-v2", input=TEXTS[:3])  # the client asks for base64
    vectors = np.array([d.embedding for d in result.data])
    assert np.abs(vectors - np.array(pipe(TEXTS[:3]))).max() < 1e-5
    assert result.usage.prompt_tokens == sum(len(ids) for ids in pipe.tokenizer(TEXTS[:3])["input_ids"])
    floats = client.embeddings.create(model="m", input="hello", encoding_format="float", dimensions=16)
    assert len(floats.data[0].embedding) == 16
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="m", input=[])
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=server.url + "/v1", api_key="wrong").embeddings.create(model="m", input="a")
