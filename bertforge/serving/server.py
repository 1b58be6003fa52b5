"""The model behind `bertforge serve` (serve.py): a `Server` loads a checkpoint's pipeline in the background and
answers its requests through the token-budget batcher (batcher.py), every route's one way to run the model
(`compute`) and to answer or refuse (`respond`), counted in the metrics that the models of one server share
(`Shared`). The HTTP application around it is app.py's.
"""

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from .batcher import Batcher, Overloaded
from .models import PREFIX
from .prometheus import Registry
from .routes import SERVED
from ..core.hub import hub_origin
from .guard import CUT, Limits, Refused, error_body, json_response, result_bytes, scrub, unexpected
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
