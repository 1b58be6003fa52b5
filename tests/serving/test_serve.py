"""`bertforge serve`: real uvicorn processes on 127.0.0.1, a real HTTP client, every endpoint and the errors.

Each server's answers are compared with `bertforge.pipeline` on the same folder in this process (which
tests/test_pipelines.py compares with transformers).
"""

import concurrent.futures
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest
import transformers

import bertforge
from bertforge.cli import main
from bertforge.serving.serve import Server
from tests.conftest import REPO
from tests.inference.test_pipelines import LONG_TEXT, QA, TAGS, TEXTS, assert_same, random_model

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
transformers.logging.set_verbosity_error()

HEADS = {"classify": ("BertForSequenceClassification", {"id2label": {0: "neg", 1: "pos"}}),
         "embed": ("BertModel", {}), "fill-mask": ("BertForMaskedLM", {}),
         "ner": ("BertForTokenClassification", {"id2label": dict(enumerate(TAGS))}),
         "qa": ("BertForQuestionAnswering", {})}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Served:
    def __init__(self, folder, *options):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
        self.process = subprocess.Popen([sys.executable, "-m", "bertforge", "serve", str(folder), "--port",
                                         str(self.port), *map(str, options)], env=env, stdout=subprocess.PIPE,
                                        stderr=subprocess.STDOUT, text=True)

    def wait(self, timeout=90):
        deadline = time.time() + timeout
        while time.time() < deadline:
            assert self.process.poll() is None, self.process.stdout.read()
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.url} did not come up")

    def post(self, endpoint, body, **kw):
        return httpx.post(f"{self.url}/v1/{endpoint}", json=body, timeout=60, **kw)

    def stop(self):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tokenizer):
    """endpoint -> a tiny random-weight checkpoint folder for it."""
    return {endpoint: random_model(tmp_path_factory.mktemp(endpoint), name, tokenizer, **config)
            for endpoint, (name, config) in HEADS.items()}


@pytest.fixture(scope="module")
def servers(folders):
    """endpoint -> a running server of its model (started together), stopped after the module."""
    started = {e: Served(f, "--max-length", 128, "--max-client-batch", 8, "--max-wait-ms", 20)
               for e, f in folders.items()}
    try:
        yield {e: s.wait() for e, s in started.items()}
    finally:
        for s in started.values():
            s.stop()


CASES = {
    "classify": ([TEXTS[0], [QA[0]["question"], QA[0]["context"]], {"text": "a", "text_pair": "b"}], {"top_k": 2}),
    "embed": (TEXTS, {}),
    "fill-mask": (["Paris is the [MASK] of France.", "two [MASK] in one [MASK]."], {"top_k": 3}),
    "ner": (TEXTS, {"aggregation_strategy": "simple"}),
    "qa": (QA, {}),
}
TASKS = {"classify": "text-classification", "embed": "sentence-embedding", "fill-mask": "fill-mask",
         "ner": "token-classification", "qa": "question-answering"}


@pytest.mark.parametrize("endpoint, routes", [
    ("classify", "/v1/classify, and as text-embeddings-inference on /predict, /tokenize, /decode"),
    ("embed", "/v1/embed, and as text-embeddings-inference on /embed, /embed_all, /v1/embeddings, /tokenize, /decode")])
def test_the_start_up_line_names_every_route_the_model_answers(folders, caplog, endpoint, routes):
    server = Server(folders[endpoint], TASKS[endpoint])
    with caplog.at_level(logging.INFO, logger="bertforge"):
        server.load()
    server.tokenizing.shutdown()
    server.batcher.close()
    assert f"from {folders[endpoint]} on {routes}" in caplog.text


@pytest.mark.parametrize("endpoint", list(CASES))
def test_endpoint_answers_as_the_pipeline(servers, folders, endpoint):
    inputs, options = CASES[endpoint]
    response = servers[endpoint].post(endpoint, {"inputs": inputs, **options})
    assert response.status_code == 200, response.text
    expected = bertforge.pipeline(TASKS[endpoint], model=folders[endpoint], max_length=128)(
        inputs, **options, truncate=False)
    assert_same(response.json(), expected)
    one = servers[endpoint].post(endpoint, {"inputs": inputs[0], **options})  # one input: a list of one
    assert_same(one.json(), expected[:1])


def test_health_info_metrics_docs(servers):
    s = servers["classify"]
    assert httpx.get(s.url + "/health").json() == {"status": "ok"}
    info = httpx.get(s.url + "/info").json()
    assert info["task"] == "text-classification" and info["labels"] == ["neg", "pos"]
    assert info["sizes"]["layers"] == 2 and info["limits"]["max_length"] == 128
    assert s.post("classify", {"inputs": ["a", "b", "c"]}).status_code == 200
    assert s.post("classify", {"inputs": 3}).status_code == 422
    metrics = httpx.get(s.url + "/metrics")
    assert metrics.headers["content-type"].startswith("text/plain")
    text = metrics.text
    assert re.search(r'bertforge_requests_total\{endpoint="/v1/classify",status="200"\} \d+', text)
    assert re.search(r'bertforge_errors_total\{kind="validation"\} [1-9]', text)
    assert "bertforge_queue_depth 0" in text
    assert re.search(r"bertforge_batch_size_count [1-9]", text)
    assert re.search(r'bertforge_request_duration_seconds_bucket\{endpoint="/v1/classify",le="\+Inf"\} [1-9]', text)
    assert httpx.get(s.url + "/docs").status_code == 200
    assert "/v1/classify" in httpx.get(s.url + "/openapi.json").json()["paths"]


@pytest.mark.parametrize("body, status, message", [
    ({"inputs": 5}, 422, "inputs is int"),
    ({}, 422, "inputs: Field required"),
    ({"inputs": "a", "colour": "red"}, 422, "colour: Extra inputs are not permitted"),
    ({"inputs": ["fine", ""]}, 422, r"inputs\[1\] is empty"),
    ({"inputs": "a", "top_k": "many"}, 422, "top_k"),
    ({"inputs": ["a"] * 9}, 413, "inputs has 9 items, over the limit of 8"),
    ({"inputs": "word " * 200}, 413, "over the limit of 128"),
])
def test_bad_requests_are_4xx_with_a_message(servers, body, status, message):
    response = servers["classify"].post("classify", body)
    assert response.status_code == status
    assert re.search(message, response.json()["error"]), response.json()


@pytest.mark.parametrize("endpoint, body, message", [
    ("embed", {"inputs": "a", "dimensions": True}, "dimensions: Input should be a valid integer, not a boolean"),
    ("embed", {"inputs": "a", "dimensions": "8"}, "dimensions: Input should be a valid integer, not a text"),
    ("embed", {"inputs": "a", "normalize": "yes"}, "normalize: Input should be a valid boolean, not a text"),
    ("embed", {"inputs": "a", "normalize": 1}, "normalize: Input should be a valid boolean, not a whole number"),
    ("classify", {"inputs": "a", "top_k": False}, "top_k: Input should be a valid integer, not a boolean"),
    ("classify", {"inputs": "a", "truncate": "true"}, "truncate: Input should be a valid boolean, not a text"),
    ("fill-mask", {"inputs": "a [MASK]", "top_k": 2.0}, "top_k: Input should be a valid integer, not a decimal number"),
    ("qa", {"inputs": QA, "null_threshold": True}, "null_threshold: Input should be a valid number, not a boolean"),
    ("qa", {"inputs": QA, "handle_impossible_answer": "no"}, "handle_impossible_answer: Input should be a valid "
                                                             "boolean, not a text"),
])
def test_options_of_another_type_are_a_422_naming_them(servers, endpoint, body, message):
    """Each option is of the type its route declares (routes.Route), never converted: true is not 1 (bool is an
    int in Python; `dimensions: true` gave one value), "yes" not true, "8" not 8."""
    response = servers[endpoint].post(endpoint, body)
    assert response.status_code == 422, response.text
    assert response.json() == {"error": message, "error_type": "validation"}


def test_options_of_their_own_type_are_answered(servers):
    assert len(servers["embed"].post("embed", {"inputs": "a", "dimensions": 8, "normalize": False}).json()[0]) == 8
    packed = servers["embed"].post("embed", {"inputs": ["a", "b c"], "precision": "ubinary", "dimensions": 16})
    assert packed.status_code == 200 and [len(v) for v in packed.json()] == [2, 2]
    assert all(isinstance(x, int) and 0 <= x < 256 for v in packed.json() for x in v)
    unknown = servers["embed"].post("embed", {"inputs": "a", "prompt_name": "query"})
    assert unknown.status_code == 422 and "prompt_name 'query'" in unknown.json()["error"]
    assert servers["qa"].post("qa", {"inputs": QA, "null_threshold": 1}).status_code == 200  # a whole number is a float


def test_other_errors(servers):
    s = servers["classify"]
    assert s.post("classify", {"inputs": "word " * 200, "truncate": True}).status_code == 200
    wrong = s.post("qa", {"inputs": QA})
    assert wrong.status_code == 404 and "/v1/classify" in wrong.json()["error"]
    broken = httpx.post(s.url + "/v1/classify", content=b"{not json", headers={"content-type": "application/json"})
    assert broken.status_code == 422
    huge = httpx.post(s.url + "/v1/classify", content=b" " * (5 << 20), headers={"content-type": "application/json"})
    assert huge.status_code == 413
    assert s.post("classify", {"inputs": "still here"}).status_code == 200


def peak_resident_mib(process) -> int | None:
    """The process's peak resident size (Linux's VmHWM), or None where /proc does not tell."""
    try:
        status = open(f"/proc/{process.pid}/status").read()
    except OSError:
        return None
    found = re.search(r"VmHWM:\s+(\d+) kB", status)
    return int(found.group(1)) >> 10 if found else None


def test_a_megabyte_qa_context_is_refused_by_name_in_bounded_memory(servers, folders):
    """A 1 MB context is refused before its windows exist (issue 33: it made a 9.7 GiB array): a typed 413 naming
    the input and the limit it passes, with the server's peak resident size grown by less than 200 MiB; the
    server answers the next request."""
    s = servers["qa"]
    before = peak_resident_mib(s.process)
    context = " ".join(f"Sentence {i} tells of the town of Ghent and its bridges." for i in range(18_000))
    assert len(context) > 1_000_000
    response = s.post("qa", {"inputs": [QA[0], {"question": "How many bridges?", "context": context}]})
    assert response.status_code == 413, response.text
    body = response.json()
    assert body["error_type"] == "too_large"
    assert re.fullmatch(r"inputs\[1\]\.context is \d+ tokens, over the limit of 8192 per request "
                        r"\(--max-batch-tokens\)", body["error"]), body
    if before is not None:
        assert peak_resident_mib(s.process) - before < 200
    assert_same(s.post("qa", {"inputs": QA}).json(),
                bertforge.pipeline("question-answering", model=folders["qa"], max_length=128)(QA))


def test_fill_mask_refuses_a_mask_past_max_input_tokens(servers):
    """A [MASK] past the tokens fill-mask reads is a 413 naming the input, truncated or not (it was dropped from
    the answer without a word); a 1 MB text costs its beginning only."""
    s, words = servers["fill-mask"], "the cat sat on the mat " * 40
    for body in ({"inputs": ["a [MASK] b", f"[MASK] {words} [MASK]"], "truncate": True},
                 {"inputs": ["a [MASK] b", f"x {words * 700} [MASK]"], "truncate": True}):
        response = s.post("fill-mask", body)
        assert response.status_code == 413 and response.json()["error_type"] == "too_large", response.text
        error = response.json()["error"]
        assert re.match(r"inputs\[1\]: 1 of its \d \[MASK\] tokens lie past its first 128 tokens", error), error
    assert s.post("fill-mask", {"inputs": f"[MASK] {words}", "truncate": True}).status_code == 200


def test_ner_tags_a_long_text_in_windows(servers, folders):
    """A 400-word text over --max-input-tokens 128 is tagged in windows to its end, as the pipeline tags it; with
    "truncate": true its first window only, and the Truncated-Inputs header names it."""
    s, long_text = servers["ner"], LONG_TEXT
    pipe = bertforge.pipeline("ner", model=folders["ner"], max_length=128)
    response = s.post("ner", {"inputs": [TEXTS[0], long_text], "aggregation_strategy": "simple"})
    assert response.status_code == 200, response.text
    assert "truncated-inputs" not in response.headers
    assert_same(response.json(), pipe([TEXTS[0], long_text], aggregation_strategy="simple"))
    assert max(e["end"] for e in response.json()[1]) > len(long_text) - 60
    cut = s.post("ner", {"inputs": [TEXTS[0], long_text], "truncate": True})
    assert cut.status_code == 200 and cut.headers["truncated-inputs"] == "1"
    assert_same(cut.json(), pipe([TEXTS[0], long_text], truncate=True))


def test_concurrent_requests_share_batches(servers, folders):
    s = servers["classify"]
    before = batches(s)
    texts = [f"{TEXTS[i % 4]} {i}" for i in range(24)]
    with concurrent.futures.ThreadPoolExecutor(24) as pool:
        answers = list(pool.map(lambda t: s.post("classify", {"inputs": t}), texts))
    assert all(a.status_code == 200 for a in answers)
    expected = bertforge.pipeline(model=folders["classify"])(texts)
    assert_same([a.json()[0] for a in answers], expected)
    rows, count = (after - b for after, b in zip(batches(s), before))
    assert rows == 24 and count < 24  # gathered into fewer batches than requests


def batches(server) -> tuple[float, float]:
    text = httpx.get(server.url + "/metrics").text
    return tuple(float(re.search(rf"bertforge_batch_size_{k} (\S+)", text).group(1)) for k in ("sum", "count"))


def test_queue_full_is_429(folders):
    s = Served(folders["classify"], "--max-concurrent", 1, "--max-wait-ms", 200).wait()
    try:
        with concurrent.futures.ThreadPoolExecutor(6) as pool:
            answers = list(pool.map(lambda _: s.post("classify", {"inputs": "hi"}), range(6)))
        codes = [r.status_code for r in answers]
        assert 200 in codes and 429 in codes and set(codes) <= {200, 429}
        busy = next(r for r in answers if r.status_code == 429)
        assert busy.headers["retry-after"] == "1" and busy.json()["error_type"] == "overloaded"
        assert s.post("classify", {"inputs": "hi"}).status_code == 200  # free again
    finally:
        s.stop()


def test_bf16_serves_the_bf16_pipeline_s_answers(folders):
    s = Served(folders["embed"], "--bf16").wait()
    try:
        served = s.post("embed", {"inputs": TEXTS}).json()
        offline = bertforge.pipeline("sentence-embedding", model=folders["embed"], bf16=True)(TEXTS)
        assert len(served) == len(offline) and all(a == pytest.approx(b, abs=1e-3) for a, b in zip(served, offline))
        assert httpx.get(s.url + "/info").json()["bf16"] is True
    finally:
        s.stop()
    assert main(["serve", str(folders["embed"]), "--bf16", "--int8"]) == 2  # bf16 is for floating point


def test_sigterm_finishes_requests_in_flight(folders):
    s = Served(folders["classify"], "--max-wait-ms", 1000).wait()  # a lone request waits a second for company
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(s.post, "classify", {"inputs": "in flight"})
        deadline = time.time() + 10
        while "bertforge_queue_depth 1" not in httpx.get(s.url + "/metrics").text:
            assert time.time() < deadline
            time.sleep(0.02)
        s.process.send_signal(signal.SIGTERM)
        assert pending.result().status_code == 200
    assert s.process.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once shut down
    assert "Application shutdown complete" in s.process.stdout.read()


def test_a_model_that_cannot_load_is_503_without_paths(tmp_path, folders):
    """Weights that fail to load after the server started (start-up checks the files and the encoder's tensors; a
    head stored as true/false is found when the head loads): /health and each request say why, naming the file but
    no absolute path of the machine."""
    from safetensors.torch import load_file, save_file

    for file in folders["classify"].iterdir():
        if file.is_file():
            (tmp_path / file.name).write_bytes(file.read_bytes())
    weights = load_file(tmp_path / "model.safetensors")
    weights["classifier.weight"] = weights["classifier.weight"] > 0
    save_file(weights, tmp_path / "model.safetensors")
    s = Served(tmp_path)
    try:
        deadline, health = time.time() + 60, None
        while health is None or "cannot be loaded" not in health.text:  # "loading" first
            assert time.time() < deadline and s.process.poll() is None
            try:
                health = httpx.get(s.url + "/health", timeout=2)
            except httpx.TransportError:
                time.sleep(0.2)
        assert health.status_code == 503 and "model.safetensors: classifier.weight holds bool values" in health.text
        response = s.post("classify", {"inputs": "a"})
        assert response.status_code == 503 and "cannot be loaded" in response.json()["error"]
        for text in (health.text, response.text):
            assert str(tmp_path) not in text and f"/{tmp_path.parts[1]}/" not in text, text
    finally:
        s.stop()
