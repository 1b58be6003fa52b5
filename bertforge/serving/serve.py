"""`bertforge serve MODEL`: the checkpoint's pipeline behind an HTTP JSON API (FastAPI + uvicorn, the `serve` extra).

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

import asyncio
import logging
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from .batcher import Batcher, Overloaded
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
RETRY_AFTER = "1"  # seconds: the Retry-After of a 429 (queue full; a 503 over --max-connections says the same)


class Server:
    """The model (loaded in the background), its batcher and metrics."""

    def __init__(self, model_dir, task=None, max_batch_tokens=8192, max_concurrent=512, max_wait_ms=2.0,
                 max_client_batch=64, workers=1, auto_truncate=False, **pipeline_options):
        self.model_dir, self.task, self.options = Path(model_dir), task, pipeline_options
        origin = hub_origin(self.model_dir)  # a Hub model is named by its repository, and its commit is told
        self.model_name, self.model_sha = (origin["repo_id"], origin["commit"]) if origin else (self.model_dir.name,
                                                                                               None)
        self.max_batch_tokens, self.max_concurrent, self.max_wait = max_batch_tokens, max_concurrent, max_wait_ms / 1e3
        self.max_client_batch, self.workers, self.auto_truncate = max_client_batch, workers, auto_truncate
        self.limits = Limits(max_client_batch, max_batch_tokens)
        self.pipe = self.batcher = self.load_error = None
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

    def load(self):
        from ..inference.pipelines import pipeline

        try:
            if self.workers > 1:  # the workers share the cores: torch's threads are divided between them
                import torch

                torch.set_num_threads(max(1, torch.get_num_threads() // self.workers))
            pipe = pipeline(self.task, model=self.model_dir, **self.options)
            self.batcher = Batcher(pipe.forward, pipe.tokenizer.pad_token_id, self.max_batch_tokens,
                                   self.max_concurrent, self.max_wait, self.on_batch, self.workers,
                                   pipe.runtime.call_tokens)
            self.pipe = pipe
            from .tei import model_routes

            log.info(f"bertforge: serving {pipe.task} from {self.model_dir} on /v1/{self.endpoint}, and as "
                     f"text-embeddings-inference on {', '.join(model_routes(pipe))}")
        except Exception as e:  # reported by /health and every request
            self.load_error = str(e)
            log.error(f"bertforge: cannot load {self.model_dir}: {e}")

    def on_batch(self, rows: int, tokens: int):
        self.metrics.observe("bertforge_batch_size", rows)
        self.metrics.observe("bertforge_batch_tokens", tokens)

    def ready(self):
        if self.pipe is None:
            raise Refused(503, "loading", f"the model cannot be loaded: {self.load_error}" if self.load_error
                          else "the model is loading")

    async def answer(self, endpoint: str, body, receive) -> tuple[bytes, dict]:
        """The JSON of the results of a request to /v1/ENDPOINT, in input order, and the response's headers (see
        finish); Refused for what is not answered."""
        self.ready()
        if endpoint != self.endpoint:
            raise Refused(404, "not_found", f"this model ({self.pipe.task}) answers on /v1/{self.endpoint}")
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


def create_app(server: Server, hosts=None, key: str | None = None, body_timeout: float | None = None,
               max_body: int = MAX_BODY):
    """The FastAPI application around a Server (whose model loads in a thread when the app starts), answering the
    Host names `hosts` (None: any) and, with a `key`, requests that send it, their body of at most `max_body`
    bytes whole within `body_timeout` seconds (guard.Guard); bertforge's routes, text-embeddings-inference's
    (tei.py) and OpenAI's /v1/embeddings (openai_api.py)."""
    try:
        from contextlib import asynccontextmanager

        from fastapi import FastAPI
        from fastapi.exceptions import RequestValidationError
        from starlette.exceptions import HTTPException

        from . import openai_api as serve_openai, tei as serve_tei
    except ImportError:
        raise BertforgeError("bertforge serve needs FastAPI and uvicorn: pip install -e '.[serve]'") from None

    @asynccontextmanager
    async def lifespan(app):
        threading.Thread(target=server.load, name="bertforge-load", daemon=True).start()
        yield
        if server.batcher is not None:
            server.batcher.close()  # uvicorn has let the requests in flight finish first
        server.tokenizing.shutdown()

    app = FastAPI(title="bertforge", description=__doc__.split("\n\n")[1], lifespan=lifespan)

    async def malformed(request, exc: RequestValidationError):
        return server.refusal(422, "validation", problems(exc.errors(), exc.body), request.url.path)

    async def unanswered(request, exc: HTTPException):  # no such route, or a body FastAPI could not parse
        e = http_refusal(exc, request.method, request.url.path)
        return server.refusal(e.status, e.kind, str(e), request.url.path, exc.headers)

    async def failed(request, exc: Exception):  # a bug: JSON like every error (Starlette logs the traceback)
        return server.refusal(500, "internal", unexpected(exc), request.url.path)

    app.add_exception_handler(RequestValidationError, malformed)
    app.add_exception_handler(HTTPException, unanswered)
    app.add_exception_handler(Exception, failed)
    app.add_middleware(Guard, refused=server.count_refusal, max_body=max_body, hosts=hosts, key=key,
                       body_timeout=body_timeout, render=server.error)
    for route in SERVED.values():
        app.post(f"/v1/{route.name}", summary=f"{route.name}: {route.inputs}")(endpoint_handler(server, route))
    for protocol in (serve_tei, serve_openai):
        server.forms.update(dict.fromkeys(protocol.ROUTES, protocol.error_body))
        protocol.add_routes(app, server)
    add_status_routes(app, server)
    return app


def endpoint_handler(server: Server, route: Route):
    """The handler of POST /v1/NAME, with its request body's model (for validation and /docs): inputs, truncate
    and the route's options (routes.Route)."""
    from fastapi import Request
    from pydantic import Field, create_model

    fields = {"inputs": (Any, Field(..., description=route.inputs)),
              "truncate": (bool, Field(False, description="cut inputs over --max-input-tokens instead of a 413"))}
    fields.update({name: (kind | None, Field(None, description=text))
                   for name, (kind, text) in route.options.items()})
    body_model = create_model(f"{route.name.title().replace('-', '')}Request", **fields, __config__=REQUEST)
    path = f"/v1/{route.name}"

    async def handle(request: Request, body: body_model):  # type: ignore[valid-type]
        return await server.respond(path, lambda: server.answer(route.name, body, request.receive))

    return handle


def add_status_routes(app, server: Server):
    """GET /health, /info and /metrics."""
    from fastapi.responses import PlainTextResponse

    @app.get("/health")
    async def health():
        try:
            server.ready()
        except Refused as e:
            return json_response({"status": e.kind, "error": scrub(str(e))}, 503)
        return {"status": "ok"}

    @app.get("/info")
    async def info():
        from .tei import tei_info

        try:
            server.ready()
        except Refused as e:
            return server.refusal(e.status, e.kind, str(e), "/info")
        return json_response({**server.info(), **tei_info(server)})

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics():
        server.metrics.set("bertforge_queue_depth", server.batcher.pending if server.batcher else 0)
        return PlainTextResponse(server.metrics.render(), media_type="text/plain; version=0.0.4")


def add_serve_arguments(p):
    p.add_argument("model", help="a checkpoint folder (fine-tuned, pre-trained, or exported with `export onnx`), or "
                   "a Hub model's name (org/name)")
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
    from ..inference.pipelines import ALIASES, head_task

    folder = model_folder(args.model, args.revision)
    if not folder.is_dir():
        raise BertforgeError(f"{folder}: no such model folder")
    config = read_config(folder / "config.json")
    task = ALIASES.get(args.task, args.task) or head_task(config, folder)
    task = served_task(task)  # an encoder's feature-extraction is served as sentence-embedding
    if task not in SERVED:
        raise BertforgeError(f"--task {task!r}: serve answers {', '.join(SERVED)}")
    check_limits(args, config, task)
    check_model(folder, args.backend, args.int8, args.bf16)
    return folder, task


def run_serve(args) -> int:
    """Check what can be checked before listening (the model's files, the limits, the address), then serve."""
    folder, task = served_model(args)
    key, hosts = api_key(args), allowed_hosts(args)
    try:
        import uvicorn
    except ImportError:
        raise BertforgeError("bertforge serve needs FastAPI and uvicorn: pip install -e '.[serve]'") from None
    server = Server(folder, task, args.max_batch_tokens, args.max_concurrent, args.max_wait_ms,
                    args.max_client_batch, args.workers, args.auto_truncate, device=args.device, backend=args.backend,
                    int8=args.int8, bf16=args.bf16, max_length=args.max_input_tokens, threads=args.threads,
                    batch_size=None)
    app = create_app(server, hosts, key, args.body_timeout, args.payload_limit)
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
