"""The FastAPI application of `bertforge serve` (serve.py) around a Server (server.py), or a Fleet of them (models.py).

Endpoints, with request bodies as text-embeddings-inference spells them ({"inputs": ...} plus options):
POST /v1/classify, /v1/embed, /v1/fill-mask, /v1/ner, /v1/qa, /v1/multiple-choice (a route per pipeline task,
with its options, as routes.py declares them; the one matching the model's task answers, the others say which
does), GET /health, /info, /metrics (Prometheus text), /docs; beside them text-embeddings-inference's routes
(tei.py) and OpenAI's /v1/embeddings (openai_api.py).
"""

import json
import threading
from typing import Any

from .models import PREFIX, Fleet
from ..core.errors import BertforgeError
from .routes import SERVED, Route
from .guard import (
    MAX_BODY, REQUEST, Guard, Refused, error_body, http_refusal, json_response, problems, scrub, unexpected
)
from .server import Server


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
