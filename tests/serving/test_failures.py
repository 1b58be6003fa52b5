"""When the model fails, through bertforge's application (app.create_app) under uvicorn in this process: a
failure stays with its request (batcher.py runs a failed batch again one request at a time), whatever request it
was batched with, and its client is told in one clean line, the traceback in the server's log only."""

import concurrent.futures
import contextlib
import time

from bertforge.serving.serve import Server, create_app
from tests.serving.test_connections import InProcess
from tests.serving.test_guard import classifier, refused  # noqa: F401
from tests.serving.test_serve import httpx


@contextlib.contextmanager
def serving(folder, max_wait_ms: float = 200):
    """The Server of `folder` behind its application, once its model is loaded. A first batch waits
    `max_wait_ms` for company: requests sent together are batched together."""
    server = Server(folder, "text-classification", max_wait_ms=max_wait_ms)
    s = InProcess("auto", app=create_app(server))
    try:
        deadline = time.time() + 60
        while httpx.get(s.url + "/health").status_code != 200:
            assert time.time() < deadline, httpx.get(s.url + "/health").text
            time.sleep(0.05)
        yield server, s
    finally:
        s.stop()


class Failing:
    """The model's forward, failing on the batches that `fails(batch)` picks; the rows of each batch recorded."""

    def __init__(self, forward, fails):
        self.forward, self.fails, self.rows = forward, fails, []

    def __call__(self, batch):
        self.rows.append(len(batch["input_ids"]))
        if self.fails(batch):
            raise RuntimeError("a batch this model cannot take\n  (a second line, and more)")
        return self.forward(batch)


def together(s, requests: list[tuple[str, str]]) -> list:
    """The responses to (path, text) requests sent at once, one client each."""
    with concurrent.futures.ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(lambda r: httpx.post(s.url + r[0], json={"inputs": r[1]}, timeout=60), requests))


def test_a_batch_the_model_fails_on_merged_answers_each_client_as_alone(classifier):  # noqa: F811
    """A model that fails on the rows of two requests in one batch (as a model folder without a pad token did:
    every one of 40 requests got a 424): each client gets the answer it gets alone."""
    with serving(classifier) as (server, s):
        server.batcher.forward = fake = Failing(server.batcher.forward, lambda batch: len(batch["input_ids"]) > 1)
        requests = [("/v1/classify", "a first client's text"), ("/predict", "another's")]
        rounds = [together(s, requests) for _ in range(3)]
        assert max(fake.rows) == 2  # batched together, the model failed
        alone = [httpx.post(s.url + path, json={"inputs": text}) for path, text in requests]
    for responses in rounds:
        assert [r.status_code for r in responses] == [200, 200]
        assert [r.json() for r in responses] == [r.json() for r in alone]


def test_a_request_the_model_fails_on_fails_alone(classifier):  # noqa: F811
    """A request the model fails on, batched with a good one: the good one is answered as alone; the bad one gets
    its own error, in its route's form and status (bertforge's 500, TEI's 424), as it does alone."""
    with serving(classifier) as (server, s):
        poison = server.pipe.tokenizer("poison")["input_ids"][1]
        fails = lambda batch: bool((batch["input_ids"] == poison).any())  # noqa: E731
        server.batcher.forward = fake = Failing(server.batcher.forward, fails)
        good, bad = together(s, [("/v1/classify", "a good text"), ("/predict", "poison")])
        bad_bertforge = together(s, [("/v1/classify", "poison"), ("/v1/classify", "a good text")])[0]
        assert fake.rows[0] == 2  # batched together, the model failed
        assert good.status_code == 200 and good.json() == httpx.post(s.url + "/v1/classify",
                                                                      json={"inputs": "a good text"}).json()
        for response, path, status in ((bad, "/predict", 424), (bad_bertforge, "/v1/classify", 500)):
            alone = httpx.post(s.url + path, json={"inputs": "poison"})
            assert response.status_code == alone.status_code == status
            assert response.json() == alone.json()
    assert refused(bad_bertforge, 500) == ("the server failed on this request (RuntimeError): not the request's "
                                           "fault; its log has the details")
    assert bad.json()["error_type"] == "Backend"


def test_a_model_that_fails_every_request_is_a_clean_500(classifier, caplog):  # noqa: F811
    """A model that raises on every batch (a layer norm's epsilon that torch refuses): one line naming the
    exception's type, never torch's text, and the server goes on answering; the traceback is in the log."""
    import torch

    with serving(classifier, max_wait_ms=2) as (server, s):
        for module in server.pipe.runtime.model.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.eps = "tiny"
        responses = together(s, [("/v1/classify", "one"), ("/v1/classify", "two"), ("/predict", "three")])
        health = httpx.get(s.url + "/health")
    for response in responses[:2]:
        assert refused(response, 500) == ("the server failed on this request (TypeError): not the request's fault; "
                                          "its log has the details")
    assert responses[2].status_code == 424 and "layer_norm" not in responses[2].text
    assert health.json() == {"status": "ok"}
    assert "layer_norm" in caplog.text and "Traceback" in caplog.text
