"""`bertforge serve MODEL`: the checkpoint's pipeline behind an HTTP JSON API (FastAPI + uvicorn, the `serve` extra);
`bertforge serve --model A --model B` (or --models FILE): several, each under /models/NAME (models.py).

Endpoints, with request bodies as text-embeddings-inference spells them ({"inputs": ...} plus options):
POST /v1/classify, /v1/embed, /v1/fill-mask, /v1/ner, /v1/qa, /v1/multiple-choice (a route per pipeline task,
with its options, as routes.py declares them; the one matching the model's task answers, the others say which
does), GET /health, /info, /metrics (Prometheus text), /docs; beside them text-embeddings-inference's routes
(tei.py) and OpenAI's /v1/embeddings (openai_api.py).
A response is a list in input order, each item shaped as the matching `pipeline()` result. A QA context or a
text to tag (/v1/ner) longer than --max-input-tokens is cut into overlapping windows of that length, the whole
input within --max-batch-tokens (a 413 naming it otherwise, before any window is run); with "truncate": true,
/v1/ner tags a text's first window only, and the response's Truncated-Inputs header lists the inputs cut.

Concurrent requests are gathered into batches by a token budget (batcher.py). Errors are typed, as
{"error", "error_type"}: 413 over the size limits, 422 malformed input (naming the field), 429 queue full,
500 a model failure or a bug, 503 while the model loads; what guards the server against hostile requests is
guard.py's, against stalled connections connections.py's (a 408 for a body that stalls). A server
that could never answer (no weights, no model.onnx for --backend onnx, the port in use) stops before it listens
(start.py). SIGTERM stops accepting requests and finishes those in flight.
"""

import argparse
import asyncio
import json
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .batcher import Batcher, Overloaded
from .models import PREFIX, Fleet, ModelSpec, model_specs
from ..model.architectures.registry import read_config
from ..core.errors import BertforgeError
from .prometheus import Registry
from .routes import SERVED, Route, served_task
from ..core.flags import (add_device_argument, add_revision_argument, count, header_token, host_names,
                          non_negative, old_spellings)
from ..core.hub import hub_origin, model_folder
from .guard import (
    CUT, MAX_BODY, REQUEST, Guard, Limits, Refused, error_body, http_refusal, json_response, problems, result_bytes,
    scrub, unexpected
)
from .connections import add_connection_arguments, log_paths_only, protocol_class
from .start import (
    KEY_VARIABLE, allowed_hosts, api_key, check_limits, check_model, listening_socket, raise_file_limit, warn_if_open
)
# pipelines and runtime (torch, the model) are imported where they are used: the command's --help does not load torch

log = logging.getLogger("bertforge")

# bertforge's routes: one per pipeline task served (routes.SERVED), and these
ROUTES = {f"/v1/{route.name}" for route in SERVED.values()} | {"/health", "/info", "/metrics"}
BUCKETS = {"latency": (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
           "rows": (1, 2, 4, 8, 16, 32, 64, 128, 256, 512), "tokens": (64, 256, 1024, 4096, 16384, 65536)}
TORCH_THREADS = {}  # "start": torch's threads before a model's --workers divided them (Server.load)
RETRY_AFTER = "1"  # seconds: the Retry-After of a 429 (queue full; a 503 over --max-connections says the same)


class Shared:
    """What the models of one server share: the metrics, the tokenising threads, each route's error form."""

    def __init__(self):
        self.forms = {}  # route -> its protocol's error body (status, kind, message) -> (status, body); see error
        self.tokenizing_threads = min(4, os.cpu_count() or 1)
        self.tokenizing = ThreadPoolExecutor(self.tokenizing_threads, "bertforge-tokenize")
        self.metrics = Registry()
        for name, kind, text, buckets in [
                ("bertforge_requests_total", "counter", "requests answered, by endpoint and status", None),
                ("bertforge_errors_total", "counter", "requests refused or failed, by kind", None),
                ("bertforge_inputs_total", "counter", "inputs answered, by endpoint", None),
                ("bertforge_queue_depth", "gauge", "requests waiting or running", None),
                ("bertforge_batch_size", "histogram", "rows per model batch", BUCKETS["rows"]),
                ("bertforge_batch_tokens", "histogram", "padded tokens per model batch", BUCKETS["tokens"]),
                ("bertforge_request_duration_seconds", "histogram", "request latency, by endpoint",
                 BUCKETS["latency"])]:
            self.metrics.define(name, kind, text, buckets)


class Server:
    """The model (loaded in the background), its batcher and metrics. One of several (models.Fleet) has a `name`,
    which its metrics and errors carry, and `shared` with the others; `load_error`: a model that is not loaded,
    and why (its checks failed), which answers 503 saying so."""

    def __init__(self, model_dir, task=None, max_batch_tokens=8192, max_concurrent=512, max_wait_ms=2.0,
                 max_client_batch=64, workers=1, auto_truncate=False, name: str | None = None,
                 shared: Shared | None = None, load_error: str | None = None, **pipeline_options):
        self.model_dir, self.task, self.options = Path(model_dir), task, pipeline_options
        origin = None if load_error else hub_origin(self.model_dir)  # a Hub model: its repository, and commit
        self.model_name, self.model_sha = (origin["repo_id"], origin["commit"]) if origin else (self.model_dir.name,
                                                                                               None)
        self.name, self.labels = name, {"model": name} if name else {}
        self.created = int(time.time())  # OpenAI's `created` of /v1/models
        if name:
            self.model_name = name
        self.max_batch_tokens, self.max_concurrent, self.max_wait = max_batch_tokens, max_concurrent, max_wait_ms / 1e3
        self.max_client_batch, self.workers, self.auto_truncate = max_client_batch, workers, auto_truncate
        self.limits = Limits(max_client_batch, max_batch_tokens)
        self.pipe = self.batcher = None
        self.load_error = load_error
        self.shared = shared = shared or Shared()
        self.forms, self.metrics = shared.forms, shared.metrics
        self.tokenizing, self.tokenizing_threads = shared.tokenizing, shared.tokenizing_threads

    def load(self):
        from ..inference.pipelines import pipeline

        if self.load_error is not None:  # its checks failed: it is not loaded, and says why
            return
        try:
            if self.workers > 1:  # the workers share the cores: torch's threads are divided between them
                import torch

                base = TORCH_THREADS.setdefault("start", torch.get_num_threads())  # not divided again per model
                torch.set_num_threads(max(1, base // self.workers))
            pipe = pipeline(self.task, model=self.model_dir, **self.options)
            self.batcher = Batcher(pipe.forward, pipe.tokenizer.pad_token_id, self.max_batch_tokens,
                                   self.max_concurrent, self.max_wait, self.on_batch, self.workers,
                                   pipe.runtime.call_tokens)
            self.pipe = pipe
            from .tei import model_routes

            where = f" as {PREFIX}{self.name}/..." if self.name else ""
            log.info(f"bertforge: serving {pipe.task} from {self.model_dir}{where} on /v1/{self.endpoint}, and as "
                     f"text-embeddings-inference on {', '.join(model_routes(pipe))}")
        except Exception as e:  # reported by /health and every request
            self.load_error = str(e)
            log.error(f"bertforge: cannot load {self.model_dir}: {e}")

    def on_batch(self, rows: int, tokens: int):
        self.metrics.observe("bertforge_batch_size", rows, **self.labels)
        self.metrics.observe("bertforge_batch_tokens", tokens, **self.labels)

    def ready(self):
        if self.pipe is None:
            what = f"the model {self.name!r}" if self.name else "the model"
            raise Refused(503, "loading", f"{what} cannot be loaded: {self.load_error}" if self.load_error
                          else f"{what} is loading")

    def state(self) -> dict:
        """/health's word on this model: ok, loading, or failed with its error."""
        if self.pipe is not None:
            return {"status": "ok"}
        if self.load_error is None:
            return {"status": "loading"}
        return {"status": "failed", "error": scrub(f"cannot be loaded: {self.load_error}")}

    async def answer(self, endpoint: str, body, receive, prefix: str = "") -> tuple[bytes, dict]:
        """The JSON of the results of a request to PREFIX/v1/ENDPOINT, in input order, and the response's headers
        (see finish); Refused for what is not answered."""
        self.ready()
        if endpoint != self.endpoint:
            raise Refused(404, "not_found", f"this model ({self.pipe.task}) answers on {prefix}/v1/{self.endpoint}")
        options = body.model_dump(exclude_unset=True)
        inputs, truncate = options.pop("inputs"), options.pop("truncate", self.auto_truncate)
        return await self.compute(f"/v1/{endpoint}", inputs, truncate, options, receive, self.finish)

    async def compute(self, path: str, inputs, truncate: bool, options: dict, receive, finish, cut: str = CUT):
        """`finish(prepared, outputs)` of the pipeline's rows of `inputs` (with these options) within the limits,
        run by the batcher with those of other requests; Refused for what is not answered (`cut`: how this route's
        request has an input over --max-input-tokens cut, Limits.prepare). Every route that runs the model comes
        here. Tokenising and finishing run in the tokenising threads, never on the event loop:
        one huge input does not hold up the other requests, nor /health. `receive` (ASGI's, the body read) tells
        when the client leaves."""
        loop = asyncio.get_running_loop()
        prepared = await loop.run_in_executor(self.tokenizing, self.limits.prepare, self.pipe, inputs, truncate,
                                              options, cut)
        try:
            outputs = await self.outputs(self.batcher.submit(prepared.rows), receive)
        except Overloaded as e:
            raise Refused(429, "overloaded", str(e)) from None
        self.metrics.inc("bertforge_inputs_total", len(prepared.items), endpoint=path)
        return await loop.run_in_executor(self.tokenizing, finish, prepared, outputs)

    async def respond(self, path: str, work):
        """The response to a request to `path`: the JSON and headers that `await work()` gives, counted and timed,
        or its refusal (a failure: 500, and the server goes on)."""
        from starlette.responses import Response

        started = time.perf_counter()
        try:
            content, headers = await work()
        except Refused as e:
            return self.refusal(e.status, e.kind, str(e), path)
        except Exception as e:  # a bug or a model failure: a 500 (its text in the log only), and the server goes on
            log.exception("bertforge: request failed")
            return self.refusal(500, "backend", unexpected(e), path)
        self.metrics.inc("bertforge_requests_total", endpoint=path, status=200)
        self.metrics.observe("bertforge_request_duration_seconds", time.perf_counter() - started, endpoint=path)
        return Response(content, headers=headers, media_type="application/json")

    async def outputs(self, future: asyncio.Future, receive) -> list:
        """The batcher's answer to a request; where its client leaves first, the request is dropped from the
        batcher (its rows not yet run are not computed)."""
        left = asyncio.ensure_future(client_left(receive))
        try:
            await asyncio.wait((future, left), return_when=asyncio.FIRST_COMPLETED)
        finally:
            left.cancel()
        if not future.done():
            self.batcher.drop(future)
            raise Refused(499, "client_closed", "the client closed the connection before the answer")
        return future.result()

    def finish(self, prepared, outputs) -> tuple[bytes, dict]:
        """The results' JSON, and a Truncated-Inputs header listing the inputs cut where the request asked for
        truncation (/v1/ner: the texts longer than a window, tagged in their first one only)."""
        prepared.single = False  # always a list, in input order
        results = self.pipe.finish(prepared, outputs)
        cut = [str(i) for i, result in enumerate(results) if getattr(result, "truncated", False)]
        return result_bytes(results), {"truncated-inputs": ",".join(cut)} if cut else {}

    def count_refusal(self, status: int, kind: str, endpoint: str):
        self.metrics.inc("bertforge_errors_total", kind=kind)
        known = endpoint in ROUTES or endpoint in self.forms
        endpoint = endpoint if known else "other"  # a client's path: few label values, bounded
        self.metrics.inc("bertforge_requests_total", endpoint=endpoint, status=status)

    def error(self, path: str, status: int, kind: str, message: str) -> tuple[int, dict]:
        """The status and JSON body of a refusal on `path`, in its protocol's form: bertforge's {"error",
        "error_type"}, text-embeddings-inference's (tei.py) or OpenAI's (openai_api.py)."""
        return self.forms.get(path, error_body)(status, kind, scrub(message))

    def refusal(self, status: int, kind: str, message: str, endpoint: str = "", headers: dict | None = None):
        """The response to a refused or failed request, in its route's form (see error), counted."""
        status, body = self.error(endpoint, status, kind, message)
        self.count_refusal(status, kind, endpoint)
        retry = {"Retry-After": RETRY_AFTER} if status == 429 else {}  # the queue is full: try again soon
        return json_response(body, status, {**retry, **(headers or {})})

    @property
    def endpoint(self) -> str:
        return SERVED[self.pipe.task].name

    def info(self) -> dict:
        pipe = self.pipe
        c = pipe.config
        model = getattr(pipe.runtime, "model", None)
        return {"model": self.model_name, "task": pipe.task, "endpoint": f"/v1/{self.endpoint}",
                "labels": [c.id2label[i] for i in range(c.num_labels)] if pipe.task == "text-classification"
                or pipe.task == "token-classification" else None,
                "backend": self.options.get("backend", "torch"), "int8": bool(self.options.get("int8")),
                "bf16": bool(self.options.get("bf16")),
                "device": str(getattr(pipe.runtime, "device", "cpu")),
                "sizes": {"layers": c.num_hidden_layers, "hidden": c.hidden_size, "heads": c.num_attention_heads,
                          "vocabulary": c.vocab_size, "max_position_embeddings": c.max_position_embeddings,
                          "parameters": sum(p.numel() for p in model.parameters()) if model is not None else None},
                "limits": {"max_length": pipe.max_length, "max_input_tokens": pipe.max_length,
                           "max_batch_tokens": self.max_batch_tokens, "max_concurrent": self.max_concurrent,
                           "max_client_batch": self.max_client_batch}}


async def client_left(receive):
    """Returns once the client has closed the connection (ASGI's http.disconnect, after the body)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def create_app(server: "Server | Fleet", hosts=None, key: str | None = None, body_timeout: float | None = None,
               max_body: int = MAX_BODY):
    """The FastAPI application around a Server (whose model loads in a thread when the app starts), answering the
    Host names `hosts` (None: any) and, with a `key`, requests that send it, their body of at most `max_body`
    bytes whole within `body_timeout` seconds (guard.Guard); bertforge's routes, text-embeddings-inference's
    (tei.py) and OpenAI's /v1/embeddings and /v1/models (openai_api.py). Given a Fleet (models.py), the same for
    each of its models under /models/NAME, the default's on the unprefixed routes too, OpenAI's /v1/embeddings
    routed by the request's `model`, and /health, /info and /v1/models telling every model."""
    try:
        from contextlib import asynccontextmanager

        from fastapi import FastAPI
        from fastapi.exceptions import RequestValidationError
        from starlette.exceptions import HTTPException

        from . import openai_api, tei  # noqa: F401 (they import FastAPI and pydantic: checked here)
    except ImportError:
        raise BertforgeError("bertforge serve needs FastAPI and uvicorn: pip install -e '.[serve]'") from None

    fleet = server if isinstance(server, Fleet) else None
    servers = list(fleet) if fleet else [server]
    server = fleet.default if fleet else server

    @asynccontextmanager
    async def lifespan(app):
        for each in servers:  # a thread each: a model slow to load (or stuck) holds up no other
            threading.Thread(target=each.load, name="bertforge-load", daemon=True).start()
        yield
        for each in servers:
            if each.batcher is not None:
                each.batcher.close()  # uvicorn has let the requests in flight finish first
        server.tokenizing.shutdown()

    app = FastAPI(title="bertforge", description=__doc__.split("\n\n")[1], lifespan=lifespan)

    async def malformed(request, exc: RequestValidationError):
        return server.refusal(422, "validation", problems(exc.errors(), exc.body), request.url.path)

    async def unanswered(request, exc: HTTPException):  # no such route, or a body FastAPI could not parse
        e = http_refusal(exc, request.method, request.url.path)
        unknown = fleet.unknown_prefix(request.url.path) if fleet and e.status == 404 else None
        if unknown is not None:
            e = Refused(404, "model_not_found", f"{PREFIX}{unknown}: no such model on this server, which serves "
                                                f"{fleet.names()} (GET /v1/models)")
        return server.refusal(e.status, e.kind, str(e), request.url.path, exc.headers)

    async def failed(request, exc: Exception):  # a bug: JSON like every error (Starlette logs the traceback)
        return server.refusal(500, "internal", unexpected(exc), request.url.path)

    app.add_exception_handler(RequestValidationError, malformed)
    app.add_exception_handler(HTTPException, unanswered)
    app.add_exception_handler(Exception, failed)
    app.add_middleware(Guard, refused=server.count_refusal, max_body=max_body, hosts=hosts, key=key,
                       body_timeout=body_timeout, render=server.error)
    add_model_routes(app, server, "", fleet)
    for each in servers if fleet else ():  # each model alone under /models/NAME, as a one-model server
        add_model_routes(app, each, f"{PREFIX}{each.name}", None)
    add_status_routes(app, server, fleet)
    return app


def add_model_routes(app, server: Server, prefix: str, fleet: "Fleet | None"):
    """The routes of one model, each under `prefix` ("" or /models/NAME; those prefixed are left out of /docs):
    bertforge's, TEI's, OpenAI's (its /v1/embeddings routed by `model` through `fleet`, where given), /health and
    /info (the unprefixed ones are add_status_routes')."""
    from . import openai_api, tei

    for route in SERVED.values():
        path = f"{prefix}/v1/{route.name}"
        server.forms[path] = error_body
        app.post(path, summary=f"{route.name}: {route.inputs}", include_in_schema=not prefix)(
            endpoint_handler(server, route, path))
    for protocol in (tei, openai_api):
        server.forms.update({prefix + path: protocol.error_body for path in protocol.ROUTES})
    tei.add_routes(app, server, prefix)
    openai_api.add_routes(app, server, prefix, fleet)
    if prefix:
        server.forms.update({f"{prefix}/health": error_body, f"{prefix}/info": error_body})
        app.get(f"{prefix}/health", include_in_schema=False)(lambda: health_response(server))
        app.get(f"{prefix}/info", include_in_schema=False)(lambda: info_response(server, f"{prefix}/info"))


REQUEST_MODELS = {}  # route name -> the pydantic model of its request body, made once


def endpoint_handler(server: Server, route: Route, path: str | None = None):
    """The handler of POST /v1/NAME (at `path`: under a model's prefix), with its request body's model (for
    validation and /docs): inputs, truncate and the route's options (routes.Route)."""
    from fastapi import Request
    from pydantic import Field, create_model

    if route.name not in REQUEST_MODELS:
        fields = {"inputs": (Any, Field(..., description=route.inputs)),
                  "truncate": (bool, Field(False, description="cut inputs over --max-input-tokens instead of a 413"))}
        fields.update({name: (kind | None, Field(None, description=text))
                       for name, (kind, text) in route.options.items()})
        REQUEST_MODELS[route.name] = create_model(f"{route.name.title().replace('-', '')}Request", **fields,
                                                  __config__=REQUEST)
    body_model = REQUEST_MODELS[route.name]
    path = path or f"/v1/{route.name}"
    prefix = path.removesuffix(f"/v1/{route.name}")

    async def handle(request: Request, body: body_model):  # type: ignore[valid-type]
        return await server.respond(path, lambda: server.answer(route.name, body, request.receive, prefix))

    return handle


def health_response(server: Server):
    try:
        server.ready()
    except Refused as e:
        return json_response({"status": e.kind, "error": scrub(str(e))}, 503)
    return json_response({"status": "ok"})


def info_response(server: Server, path: str):
    from .tei import tei_info

    try:
        server.ready()
    except Refused as e:
        return server.refusal(e.status, e.kind, str(e), path)
    return json_response({**server.info(), **tei_info(server)})


def model_entry(server: Server) -> dict:
    """A model in a Fleet's /info: its name, where it is served, its state, and its /info once loaded."""
    from .tei import tei_info

    entry = {"name": server.name, "prefix": f"{PREFIX}{server.name}", **server.state()}
    return {**entry, **server.info(), **tei_info(server)} if server.pipe is not None else entry


def add_status_routes(app, server: Server, fleet: "Fleet | None" = None):
    """GET /health, /info and /metrics; of a Fleet, /health tells each model (models.Fleet.health) and /info
    holds each model's (`models`) beside the default's."""
    from fastapi.responses import PlainTextResponse

    @app.get("/health")
    async def health():
        if fleet is None:
            return health_response(server)
        status, body = fleet.health()
        return json_response(body, status)

    @app.get("/info")
    async def info():
        if fleet is None:
            return info_response(server, "/info")
        default = info_response(server, "/info") if server.pipe is not None else None
        known = json.loads(default.body) if default is not None else {}
        return json_response({**known, "default": server.name, "models": [model_entry(each) for each in fleet]})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics():
        for each in fleet or [server]:
            server.metrics.set("bertforge_queue_depth", each.batcher.pending if each.batcher else 0, **each.labels)
        return PlainTextResponse(server.metrics.render(), media_type="text/plain; version=0.0.4")


def add_serve_arguments(p):
    p.add_argument("model", nargs="?", help="a checkpoint folder (fine-tuned, pre-trained, or exported with `export "
                   "onnx`), or a Hub model's name (org/name); several models: --model or --models instead")
    p.add_argument("--model", action="append", dest="models_given", metavar="[NAME=]MODEL",
                   help="a model to serve, again for each (the first also answers the unprefixed routes), by its "
                        "NAME (else the folder's or the Hub model's name): on /models/NAME/..., and as OpenAI's "
                        "`model`; the flags below are every model's")
    p.add_argument("--models", type=Path, dest="models_file", metavar="FILE",
                   help="the models to serve, a JSON list of {\"name\", \"model\", \"revision\", \"task\", "
                        "\"default\": true, and any of max_input_tokens, max_batch_tokens, max_concurrent, "
                        "max_client_batch, max_wait_ms, workers, auto_truncate, backend, int8, bf16: that model's own "
                        "value of the flag}")
    add_revision_argument(p)
    p.add_argument("--task", help=f"one of {', '.join(SERVED)} (default: the checkpoint's head's; an encoder "
                                  f"alone serves sentence-embedding)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=count(0, 65535), default=8000, help="TCP port to listen on")
    add_device_argument(p)
    p.add_argument("--backend", default="torch", choices=("torch", "onnx"), help="what runs the model")
    p.add_argument("--int8", action="store_true", help="int8 linear layers (torch) or the int8 ONNX model")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast, the linear weights in bf16 (torch): about "
                   "2x fp32 on CPUs with AVX512-BF16 or AMX (BENCHMARKS.md, \"bf16 inference\")")
    p.add_argument("--max-input-tokens", "--max-length", type=count(1), dest="max_input_tokens",
                   help="tokens per input: a longer one gets a 413 unless its request sends \"truncate\": true, "
                        "which cuts it; QA contexts and texts to tag are windows of this length instead, the whole "
                        "input within --max-batch-tokens (default: the model's positions; QA: 384)")
    old_spellings(p._option_string_actions["--max-length"], "--max-length")
    p.add_argument("--max-batch-tokens", type=count(1), default=8192, help="tokens per request, all its inputs "
                   "together (more get a 413), and padded tokens per model batch")
    p.add_argument("--max-concurrent", "--max-concurrent-requests", type=count(1), default=512,
                   dest="max_concurrent", help="requests waiting or running; more get a 429")
    p.add_argument("--max-client-batch", "--max-client-batch-size", type=count(1), default=64,
                   dest="max_client_batch", help="inputs per request; more get a 413")
    p.add_argument("--auto-truncate", action="store_true", help="cut inputs over --max-input-tokens where a request "
                   "does not say \"truncate\" (and on /v1/embeddings, which cannot say it) instead of a 413")
    p.add_argument("--payload-limit", type=count(1), default=MAX_BODY, metavar="BYTES",
                   help="bytes of request body; more get a 413")
    p.add_argument("--max-wait-ms", type=non_negative, default=2.0, help="how long a batch waits for the next request "
                   "(each arrival restarts the wait, ten times at most)")
    p.add_argument("--threads", type=count(1), help="ONNX Runtime threads (torch: set OMP_NUM_THREADS)")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--api-key", type=header_token, metavar="KEY", help="every request but GET /health must send "
                     f"Authorization: Bearer KEY, else a 401 (default: the environment variable {KEY_VARIABLE}, if "
                     "set; none: anyone who reaches the port). A key given here is visible to every user of this "
                     f"machine in the process list (ps): --api-key-file or {KEY_VARIABLE} keeps it out")
    key.add_argument("--api-key-file", type=Path, metavar="FILE", help="--api-key read from this file (around it "
                     "blanks and line ends are ignored), which keeps it out of the process list")
    p.add_argument("--allowed-hosts", type=host_names, metavar="NAMES", help="the Host header names answered, "
                   "comma-separated (a port is not part of a name), against DNS rebinding; others get a 421; *: any "
                   "(default: localhost, 127.0.0.1, ::1 and --host)")
    p.add_argument("--workers", type=count(1), default=1, help="model batches run at once, each in its own "
                   "thread; torch's threads are divided between them (default: 1)")
    add_connection_arguments(p)


def served_model(args) -> tuple[Path, str]:
    """The model folder (a Hub name's at --revision, in the Hugging Face cache) and the task a command line serves,
    its files and limits checked."""
    if args.model is None:
        raise BertforgeError("serve: no model: give MODEL, --model MODEL (again for each of several) or --models "
                             "FILE")
    folder = served_folder(args.model, args.revision)
    config = read_config(folder / "config.json")
    task = task_served(args.task, config, folder)
    check_limits(args, config, task)
    check_model(folder, args.backend, args.int8, args.bf16)
    return folder, task


def served_folder(model: str, revision: str | None) -> Path:
    folder = model_folder(model, revision)
    if not folder.is_dir():
        raise BertforgeError(f"{folder}: no such model folder")
    return folder


def task_served(given: str | None, config=None, folder=None) -> str:
    """The task a model is served as: `given` (--task), else its head's; a one-line error for one not served."""
    from ..inference.pipelines import ALIASES, head_task

    task = ALIASES.get(given, given) or head_task(config, folder)
    task = served_task(task)  # an encoder's feature-extraction is served as sentence-embedding
    if task not in SERVED:
        raise BertforgeError(f"--task {task!r}: serve answers {', '.join(SERVED)}")
    return task


def fleet_servers(args, shared: Shared) -> list[Server]:
    """A Server per model of --model / --models (models.model_specs), with its own settings over the flags'. What
    is wrong with the command line or the file (a setting, a task, a limit) stops the command with one line; a
    model whose folder is missing or cannot be served (no weights, ...) is kept as a failure that answers 503,
    while the others serve; where none can be served, that stops the command too."""
    servers, failures = [], []
    for spec in model_specs(args):
        settings = argparse.Namespace(**{**vars(args), **spec.settings})
        try:
            if settings.task is not None:
                task_served(settings.task)  # a task no route answers: the command line's mistake
        except BertforgeError as e:
            raise BertforgeError(f"{spec.source}: {e}") from None
        try:
            folder = served_folder(spec.model, settings.revision)
            config = read_config(folder / "config.json")
            task = task_served(settings.task, config, folder)
        except BertforgeError as e:
            servers.append(fleet_server(spec, settings, shared, spec.model, None, str(e)))
            failures.append(f"{spec.source}: {e}")
            continue
        try:
            check_limits(settings, config, task)
        except BertforgeError as e:
            raise BertforgeError(f"{spec.source}: {e}") from None
        try:
            check_model(folder, settings.backend, settings.int8, settings.bf16)
        except BertforgeError as e:
            servers.append(fleet_server(spec, settings, shared, folder, task, str(e)))
            failures.append(f"{spec.source}: {e}")
            continue
        servers.append(fleet_server(spec, settings, shared, folder, task))
    if len(failures) == len(servers):
        raise BertforgeError(f"no model can be served: {'; '.join(failures)}")
    for failure in failures:
        log.error(f"bertforge: {failure} (it answers 503; the other models serve)")
    return servers


def fleet_server(spec: ModelSpec, settings, shared: Shared, folder, task, load_error: str | None = None):
    return Server(folder, task, settings.max_batch_tokens, settings.max_concurrent, settings.max_wait_ms,
                  settings.max_client_batch, settings.workers, settings.auto_truncate, name=spec.name, shared=shared,
                  load_error=load_error, device=settings.device, backend=settings.backend, int8=settings.int8,
                  bf16=settings.bf16, max_length=settings.max_input_tokens, threads=settings.threads, batch_size=None)


def run_serve(args) -> int:
    """Check what can be checked before listening (the model's files, the limits, the address), then serve."""
    several = bool(args.models_given or args.models_file)
    if several:
        served = Fleet(fleet_servers(args, Shared()))
        server = served.default
    else:
        folder, task = served_model(args)
    key, hosts = api_key(args), allowed_hosts(args)
    try:
        import uvicorn
    except ImportError:
        raise BertforgeError("bertforge serve needs FastAPI and uvicorn: pip install -e '.[serve]'") from None
    if not several:
        server = served = Server(folder, task, args.max_batch_tokens, args.max_concurrent, args.max_wait_ms,
                                args.max_client_batch, args.workers, args.auto_truncate, device=args.device,
                                backend=args.backend, int8=args.int8, bf16=args.bf16, max_length=args.max_input_tokens,
                                threads=args.threads, batch_size=None)
    app = create_app(served, hosts, key, args.body_timeout, args.payload_limit)
    sock = listening_socket(args.host, args.port)
    warn_if_open(args.host, key, hosts)
    raise_file_limit(args.max_connections)
    stalled = lambda kind: server.metrics.inc("bertforge_errors_total", kind=kind)  # noqa: E731
    http = protocol_class(args.header_timeout, args.max_connections, server.count_refusal,
                          send_timeout=args.send_timeout, stalled=stalled)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info", timeout_graceful_shutdown=30,
                            http=http)
    log_paths_only()  # a query string (a client's ?api_key=...) is never logged
    uvicorn.Server(config).run(sockets=[sock])
    return 0
