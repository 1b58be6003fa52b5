"""OpenAI's embeddings API on `bertforge serve` (serve.py): POST /v1/embeddings (also /embeddings, as TEI), for an
embedding model (see tei.py for which models are).

{"input": a text, texts, token ids or lists of them, "model", "encoding_format": "float" | "base64", "dimensions",
"user"} -> {"object": "list", "data": [{"object": "embedding", "index": i, "embedding": [...]}], "model",
"usage": {"prompt_tokens", "total_tokens"}}: unit-length vectors (Matryoshka `dimensions`: the first N values,
normalised again), base64 being the little-endian float32 bytes (what OpenAI's client asks for and decodes by
default); token ids are the model's input as given. Inputs over --max-input-tokens are cut with --auto-truncate,
else refused, the 413 saying so (the API has no field for it). `model` is not checked where one model is served
(`bertforge serve MODEL`, and on a model's own /models/NAME/v1/embeddings), as TEI does not; of several models
(models.Fleet) it picks one, None the default, and an unknown name is OpenAI's 404 (code model_not_found).
GET /v1/models lists the models served, in OpenAI's shape (a model that failed to load left out).

Errors are OpenAI's {"error": {"message", "type", "param", "code"}}, with the status codes of TEI's route: the
model runs as for every route (Server.compute: the same limits, batcher and client hang-up), and the Guard's
refusals take this form here too.
"""

import base64
import re
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, Field

from ..inference.batches import rows_tokens
from .guard import REQUEST, result_bytes
from .tei import add_route, not_empty, require
from .tei import error_body as tei_error

FIELDS = ("input", "model", "encoding_format", "dimensions", "user")
CUT = "this route cannot ask to cut it: send shorter inputs, or start the server with --auto-truncate"
TYPES = {401: "authentication_error", 429: "rate_limit_error"}  # else 4xx invalid_request_error, 5xx server_error


class EmbeddingsRequest(BaseModel):
    model_config = REQUEST
    input: Any = Field(..., description="a text, token ids, or a list of them")
    model: str | None = None
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = Field(None, description="Matryoshka: the first N values (then normalised)")
    user: str | None = None


def error_body(status: int, kind: str, message: str) -> tuple[int, dict]:
    """A refusal in OpenAI's form, with TEI's status; bertforge's error kind is the `code`, and the request
    field it is about the `param` (the pipeline's `inputs` named `input`)."""
    status = tei_error(status, kind, message)[0]
    message = re.sub(r"^inputs\b", "input", message)
    field = re.match(r"`?(\w+)", message)
    kind_of = TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return status, {"error": {"message": message, "type": kind_of,
                              "param": field.group(1) if field and field.group(1) in FIELDS else None, "code": kind}}


async def embeddings(server, body: EmbeddingsRequest, receive):
    require(server, "/v1/embeddings")
    not_empty(body.input, "input")

    def finish(prepared, outputs):
        vectors = server.pipe.postprocess(prepared, outputs)
        if body.encoding_format == "base64":
            vectors = [base64.b64encode(np.asarray(v, dtype="<f4").tobytes()).decode("ascii") for v in vectors]
        tokens = rows_tokens(prepared.rows)
        return result_bytes({"object": "list", "data": [{"object": "embedding", "index": i, "embedding": v}
                                                        for i, v in enumerate(vectors)],
                             "model": server.model_name,
                             "usage": {"prompt_tokens": tokens, "total_tokens": tokens}}), {}

    options = {"normalize": True, "dimensions": body.dimensions}
    return await server.compute("/v1/embeddings", body.input, server.auto_truncate, options, receive, finish, CUT)


EMBEDDINGS = ("/v1/embeddings", "/embeddings")  # the second as TEI and Infinity also answer it
ROUTES = (*EMBEDDINGS, "/v1/models")


def model_list(servers) -> dict:
    """OpenAI's list of models (GET /v1/models): those loaded or loading."""
    return {"object": "list", "data": [{"id": server.model_name, "object": "model", "created": server.created,
                                        "owned_by": "bertforge"}
                                       for server in servers if server.state()["status"] != "failed"]}


def add_routes(app, server, prefix: str = "", fleet=None):
    """/v1/embeddings (and /embeddings) answered by `server`, or by the model a request names among `fleet`'s
    (models.Fleet), and GET /v1/models, all under `prefix` (a model's /models/NAME)."""
    from .guard import json_response

    async def routed(_, body: EmbeddingsRequest, receive):
        return await embeddings(fleet.for_model(body.model), body, receive)

    for path in EMBEDDINGS:
        add_route(app, server, path, EmbeddingsRequest, embeddings if fleet is None else routed, prefix)
    servers = list(fleet) if fleet is not None else [server]
    app.get(prefix + "/v1/models", summary="OpenAI's list of the models served", include_in_schema=not prefix)(
        lambda: json_response(model_list(servers)))
