"""Several models behind one `bertforge serve` (serving/models.py): an encoder and a classifier served together,
each answering its own routes (/models/NAME/...) as when served alone, OpenAI's `model` picking one, /v1/models,
/health and /info telling each; a model that cannot be loaded, or whose batch fails, leaves the other serving; and
a bad --model or --models FILE is a one-line error naming it."""

import contextlib
import json
import time

import pytest

from bertforge.cli import build_parser, main
from bertforge.serving.serve import Server, Shared, create_app, fleet_servers
from bertforge.serving.models import Fleet
from tests.inference.test_pipelines import TEXTS, random_model
from tests.serving.test_serve import HEADS, Served, httpx

pytest.importorskip("fastapi")
from fastapi.testclient import TestClient  # noqa: E402


@pytest.fixture(scope="module")
def encoder(tmp_path_factory, tokenizer):
    name, config = HEADS["embed"]
    return random_model(tmp_path_factory.mktemp("encoder"), name, tokenizer, **config)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory, tokenizer):
    name, config = HEADS["classify"]
    return random_model(tmp_path_factory.mktemp("classifier"), name, tokenizer, **config)


def parsed(*flags):
    return build_parser("serve").parse_args(["serve", *map(str, flags)])


@contextlib.contextmanager
def client(served, ready=lambda health: health.status_code == 200):
    """A TestClient of create_app(served) (a Server or a Fleet), once /health says `ready`."""
    with TestClient(create_app(served)) as c:
        deadline = time.time() + 60
        while not ready(c.get("/health")):
            assert time.time() < deadline, c.get("/health").text
            time.sleep(0.05)
        yield c


def fleet(*flags) -> Fleet:
    return Fleet(fleet_servers(parsed(*flags, "--max-input-tokens", 128), Shared()))


@pytest.fixture(scope="module")
def both(encoder, classifier):
    with client(fleet("--model", f"enc={encoder}", "--model", f"cls={classifier}")) as c:
        yield c


@pytest.fixture(scope="module")
def alone(encoder, classifier):
    """A one-model server of each folder, as `bertforge serve FOLDER` (limits as the fleet's)."""
    with (client(Server(encoder, "sentence-embedding", max_length=128)) as enc,
          client(Server(classifier, "text-classification", max_length=128)) as cls):
        yield {"enc": enc, "cls": cls}


ROUTES = [("enc", "/v1/embed", {"inputs": TEXTS}), ("enc", "/embed", {"inputs": TEXTS}),
          ("enc", "/embed_all", {"inputs": TEXTS[:2]}), ("enc", "/v1/embeddings", {"input": TEXTS}),
          ("enc", "/tokenize", {"inputs": TEXTS[0]}), ("cls", "/v1/classify", {"inputs": TEXTS, "top_k": None}),
          ("cls", "/predict", {"inputs": [[t] for t in TEXTS]}), ("cls", "/decode", {"ids": [101, 2023, 102]})]


@pytest.mark.parametrize("name, path, body", ROUTES)
def test_each_model_answers_its_routes_as_alone(both, alone, name, path, body):
    expected = alone[name].post(path, json=body)
    assert expected.status_code == 200, expected.text
    prefixed = both.post(f"/models/{name}{path}", json=body)
    assert prefixed.status_code == 200, prefixed.text
    if path == "/v1/embeddings":  # named by the fleet's name, the folder's otherwise
        assert prefixed.json()["model"] == "enc"
        assert prefixed.json()["data"] == expected.json()["data"]
    else:
        assert prefixed.content == expected.content
    if name == "enc":  # the first model is the default: the unprefixed routes are its
        assert both.post(path, json=body).content == prefixed.content


def test_the_unprefixed_routes_are_the_defaults(both, alone):
    assert both.post("/v1/classify", json={"inputs": "a"}).json() == alone["enc"].post(
        "/v1/classify", json={"inputs": "a"}).json()  # the default is an encoder: a 404 naming its route
    other = both.post("/models/cls/v1/embed", json={"inputs": "a"})
    assert other.status_code == 404 and "answers on /models/cls/v1/classify" in other.json()["error"]
    wrong = both.post("/models/cls/embed", json={"inputs": "a"})
    assert wrong.status_code == 424 and "/predict" in wrong.json()["error"]
    unknown = both.post("/models/nope/v1/embed", json={"inputs": "a"})
    assert unknown.status_code == 404 and unknown.json()["error_type"] == "model_not_found"
    assert "/models/nope" in unknown.json()["error"] and "enc, cls" in unknown.json()["error"]


def test_openai_model_picks_the_model(both, alone):
    vectors = alone["enc"].post("/v1/embeddings", json={"input": TEXTS}).json()["data"]
    for model in ("enc", None):
        body = {"input": TEXTS, **({"model": model} if model else {})}
        response = both.post("/v1/embeddings", json=body)
        assert response.status_code == 200 and response.json()["data"] == vectors
    missing = both.post("/v1/embeddings", json={"input": "a", "model": "text-embedding-3-small"})
    assert missing.status_code == 404
    error = missing.json()["error"]
    assert (error["type"], error["param"], error["code"]) == ("invalid_request_error", "model", "model_not_found")
    assert "text-embedding-3-small" in error["message"] and "enc, cls" in error["message"]
    classifier = both.post("/v1/embeddings", json={"input": "a", "model": "cls"})
    assert classifier.status_code == 424 and classifier.json()["error"]["code"] == "backend"


def test_openai_client_lists_and_picks_models(both, alone):
    openai = pytest.importorskip("openai")
    api = openai.OpenAI(base_url="http://testserver/v1", api_key="none", http_client=both)
    assert [(m.id, m.owned_by) for m in api.models.list().data] == [("enc", "bertforge"), ("cls", "bertforge")]
    got = api.embeddings.create(model="enc", input=TEXTS[:2])
    expected = alone["enc"].post("/v1/embeddings", json={"input": TEXTS[:2]}).json()["data"]
    assert max(abs(a - b) for d, e in zip(got.data, expected) for a, b in zip(d.embedding, e["embedding"])) < 1e-6
    with pytest.raises(openai.NotFoundError) as e:
        api.embeddings.create(model="nope", input="a")
    assert e.value.code == "model_not_found"
    one = openai.OpenAI(base_url="http://testserver/models/cls/v1", api_key="none", http_client=both)
    assert [m.id for m in one.models.list().data] == ["cls"]


def test_health_info_and_models_tell_each(both, alone):
    assert both.get("/health").json() == {"status": "ok", "models": {"enc": {"status": "ok"},
                                                                      "cls": {"status": "ok"}}}
    assert both.get("/models/cls/health").json() == {"status": "ok"}
    info = both.get("/info").json()
    assert info["default"] == "enc" and info["task"] == "sentence-embedding"
    assert [(m["name"], m["prefix"], m["status"], m["task"]) for m in info["models"]] == [
        ("enc", "/models/enc", "ok", "sentence-embedding"), ("cls", "/models/cls", "ok", "text-classification")]
    own = both.get("/models/cls/info").json()
    assert own == {**alone["cls"].get("/info").json(), "model": "cls", "model_id": "cls", "served_model_name": "cls"}
    listed = both.get("/v1/models").json()
    assert listed["object"] == "list" and [m["id"] for m in listed["data"]] == ["enc", "cls"]
    assert alone["cls"].get("/v1/models").json()["data"][0]["id"] == alone["cls"].get("/info").json()["model"]
    assert both.post("/models/enc/v1/embed", json={"inputs": "a"}).status_code == 200
    metrics = both.get("/metrics").text
    assert 'bertforge_queue_depth{model="cls"} 0' in metrics and 'bertforge_batch_size_count{model="enc"}' in metrics
    assert "/models/cls/v1/classify" not in both.get("/openapi.json").json()["paths"]  # /docs: the routes once


def test_each_model_has_its_own_limits(encoder, classifier, tmp_path):
    file = tmp_path / "models.json"
    file.write_text(json.dumps([{"name": "cls", "model": str(classifier), "max_client_batch": 2},
                                {"name": "enc", "model": str(encoder), "default": True, "max_input_tokens": 16}]))
    with client(fleet("--models", file, "--max-client-batch", 4)) as c:
        assert c.get("/info").json()["default"] == "enc"  # marked the default
        assert c.post("/models/cls/v1/classify", json={"inputs": ["a"] * 3}).status_code == 413
        assert c.post("/models/enc/v1/embed", json={"inputs": ["a"] * 3}).status_code == 200
        assert c.post("/models/enc/v1/embed", json={"inputs": ["a"] * 5}).status_code == 413
        assert c.post("/models/enc/v1/embed", json={"inputs": "word " * 20}).status_code == 413
        assert c.post("/models/cls/v1/classify", json={"inputs": "word " * 20}).status_code == 200
        limits = {m["name"]: m["limits"] for m in c.get("/info").json()["models"]}
        assert (limits["cls"]["max_client_batch"], limits["cls"]["max_input_tokens"]) == (2, 128)
        assert (limits["enc"]["max_client_batch"], limits["enc"]["max_input_tokens"]) == (4, 16)


def test_a_broken_model_answers_503_while_the_other_serves(encoder, tmp_path, alone):
    empty = tmp_path / "broken"
    empty.mkdir()
    (empty / "config.json").write_text((encoder / "config.json").read_text())  # no weights, no vocabulary
    served = fleet("--model", f"enc={encoder}", "--model", f"broken={empty}", "--model",
                   f"gone={tmp_path / 'missing'}")
    with client(served) as c:
        health = c.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "degraded"
        assert health.json()["models"]["enc"] == {"status": "ok"}
        assert health.json()["models"]["broken"]["status"] == "failed"
        assert c.get("/models/broken/health").status_code == 503
        for name in ("broken", "gone"):
            refused = c.post(f"/models/{name}/v1/embed", json={"inputs": "a"})
            assert refused.status_code == 503 and f"'{name}' cannot be loaded" in refused.json()["error"]
            assert c.post("/v1/embeddings", json={"input": "a", "model": name}).status_code == 503
        assert [m["id"] for m in c.get("/v1/models").json()["data"]] == ["enc"]
        assert c.post("/v1/embed", json={"inputs": TEXTS}).content == alone["enc"].post(
            "/v1/embed", json={"inputs": TEXTS}).content


def test_a_model_that_fails_loading_or_its_batches_leaves_the_other_serving(encoder, classifier, tmp_path, alone):
    corrupt = tmp_path / "corrupt"
    corrupt.mkdir()
    for file in classifier.iterdir():
        (corrupt / file.name).write_bytes(file.read_bytes())
    config = json.loads((corrupt / "config.json").read_text())
    (corrupt / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))  # the weights do not fit it
    shared = Shared()
    servers = Fleet([Server(encoder, "sentence-embedding", name="enc", shared=shared, max_length=128),
                     Server(classifier, "text-classification", name="cls", shared=shared, max_length=128),
                     Server(corrupt, "text-classification", name="corrupt", shared=shared)])
    with client(servers, ready=lambda h: "loading" not in h.text) as c:
        assert c.get("/health").json()["models"]["corrupt"]["status"] == "failed"
        assert c.post("/models/corrupt/v1/classify", json={"inputs": "a"}).status_code == 503

        def crash(batch):
            raise RuntimeError("this model's batch crashes")

        servers.get("enc").batcher.forward = crash
        assert c.post("/v1/embed", json={"inputs": "a"}).status_code == 500
        assert c.post("/models/cls/v1/classify", json={"inputs": TEXTS}).content == alone["cls"].post(
            "/v1/classify", json={"inputs": TEXTS}).content
        assert c.get("/health").json()["models"]["cls"] == {"status": "ok"}


def error_of(capsys, *argv) -> str:
    assert main(["serve", *map(str, argv)]) == 2
    error = capsys.readouterr().err.strip()
    assert error.startswith("bertforge: error: ") and "\n" not in error, error
    return error


def test_bad_model_flags_and_files_are_one_line_naming_them(encoder, classifier, tmp_path, capsys):
    assert "no model: give MODEL, --model MODEL" in error_of(capsys)
    assert "MODEL" in error_of(capsys, encoder, "--model", classifier)
    assert "the name 'x' is --model x=" in error_of(capsys, "--model", f"x={encoder}", "--model", f"x={classifier}")
    assert "cannot name a model in a URL" in error_of(capsys, "--model", "bad name!")
    assert "--revision with --model: give each model's own \"revision\"" in error_of(capsys, "--model", encoder,
                                                                                   "--revision", "v1")
    assert "--task with --model" in error_of(capsys, "--model", encoder, "--task", "text-classification")
    file = tmp_path / "models.json"
    for content, message in [
            ("[{\"model\": 1", "not valid JSON"), ("{}", "expected a JSON list"),
            ('[{"name": "a"}]', 'entry 1: "model" (a folder or a Hub name) is missing'),
            (json.dumps([str(encoder), {"model": str(classifier), "colour": 1}]), "entry 2: unknown key 'colour'"),
            (json.dumps([{"model": str(encoder), "max_batch_tokens": 0}]), '"max_batch_tokens" must be a whole'),
            (json.dumps([{"model": str(encoder), "max_input_tokens": 100000}]), "entry 1 (encoder"),
            (json.dumps([{"model": str(encoder), "backend": "gpu"}]), '"backend" must be one of torch, onnx'),
            (json.dumps([{"model": str(encoder), "default": True}, {"model": str(classifier), "default": True}]),
             "both the default"),
            (json.dumps([{"model": str(encoder), "task": "nope"}]), "entry 1 (encoder"),
            (json.dumps([{"model": str(tmp_path / "missing")}]), "no model can be served: --models")]:
        file.write_text(content)
        error = error_of(capsys, "--models", file)
        assert message in error and str(file) in error, (message, error)
    assert "--models" in error_of(capsys, "--models", file, "--model", encoder)
    assert "--task with --models" in error_of(capsys, "--models", file, "--task", "text-classification")
    assert f"--models {tmp_path / 'none.json'}: file not found" in error_of(capsys, "--models", tmp_path / "none.json")


def test_the_command_serves_both(encoder, classifier):
    """`bertforge serve --model A --model B` as a process: both answer, each its own."""
    s = Served(f"--model=enc={encoder}", "--model", f"cls={classifier}", "--max-input-tokens", 128)
    try:
        s.wait()
        assert s.post("embed", {"inputs": "a"}).status_code == 200
        assert httpx.post(s.url + "/models/cls/v1/classify", json={"inputs": "a"}).json()[0]["label"] in ("neg", "pos")
        assert httpx.get(s.url + "/health").json()["status"] == "ok"
    finally:
        s.stop()


def test_a_key_guards_every_models_routes_but_health(encoder):
    with TestClient(create_app(fleet("--model", f"enc={encoder}"), key="sesame")) as c:
        assert c.post("/models/enc/v1/embed", json={"inputs": "a"}).status_code == 401
        assert c.get("/v1/models").status_code == 401
        assert c.get("/models/enc/health").status_code in (200, 503)  # no key asked: a probe's route
        assert c.get("/models/enc/info").status_code == 401
