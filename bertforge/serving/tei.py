"""text-embeddings-inference's HTTP API on `bertforge serve` (serve.py), beside bertforge's /v1/... routes.

The request and response shapes are TEI's (router/src/http/types.rs): POST /embed, /embed_all, /embed_sparse,
/predict, /rerank, /tokenize and /decode, and its fields added to GET /info. Which routes a model answers follows
from its head, as TEI's model types: an embedding model (served as sentence-embedding: an encoder alone, or any
model with --task sentence-embedding) /embed, /embed_all and OpenAI's /v1/embeddings (openai_api.py); a SPLADE
model (a SparseEncoder folder, served as sparse-embedding; TEI's embedding model with splade pooling)
/embed_sparse; a sequence classifier /predict; a one-output sequence classifier (a pair scorer, TEI's reranker)
/rerank and /predict; every model /tokenize and /decode. Another route answers TEI's 424 naming those that fit.

Errors are TEI's {"error", "error_type"}, its types spelt as TEI writes them ("Validation", "Backend", ...), with
its status codes: 400 an empty batch, 413 over a size limit, 422 malformed input, 424 a model failure or a route
the model does not answer, 429 overloaded, 503 while the model loads. The model runs as for bertforge's routes
(Server.compute: the same limits, batcher and client hang-up); the Guard's refusals (401, 408, 413, 421) take
this form on these routes too.
"""

import asyncio
from typing import Any, Literal

from fastapi import Request
from pydantic import BaseModel, Field

from ..core.version import __version__
from ..core.errors import BertforgeError
from ..inference.inputs import check_text
from .routes import SERVED
from .guard import REQUEST, Refused, json_bytes, result_bytes

MODEL_ROUTES = {"embedding": ("/embed", "/embed_all", "/v1/embeddings"), "classifier": ("/predict",),
                "reranker": ("/rerank", "/predict"), "splade": ("/embed_sparse",), None: ()}
EVERY_MODEL = ("/tokenize", "/decode")
TYPES = {"validation": "Validation", "too_large": "Validation", "empty": "Empty", "tokenizer": "Tokenizer",
         "backend": "Backend", "internal": "Backend", "overloaded": "Overloaded", "loading": "Unhealthy"}


def error_body(status: int, kind: str, message: str) -> tuple[int, dict]:
    """A refusal in TEI's form: its error types, and 424 for a model failure (bertforge's 500 "backend")."""
    return 424 if kind == "backend" else status, {"error": message, "error_type": TYPES.get(kind, kind)}


def model_type(pipe) -> str | None:
    """TEI's type of the served model, as its route declares it (routes.Route.tei): embedding, classifier, or a
    classifier with one output, which TEI serves as a reranker; None: no TEI type."""
    kind = SERVED[pipe.task].tei if pipe.task in SERVED else None
    return "reranker" if kind == "classifier" and pipe.config.num_labels == 1 else kind


def model_routes(pipe) -> tuple[str, ...]:
    """The routes of this module and openai_api.py that answer for the served model."""
    return (*MODEL_ROUTES[model_type(pipe)], *EVERY_MODEL)


def require(server, path: str):
    """Refused (TEI's 424, as TEI answers a route the model does not fit) unless the model answers `path`."""
    server.ready()
    kind = model_type(server.pipe)
    if path not in MODEL_ROUTES[kind]:
        fits = ", ".join(model_routes(server.pipe))
        what = f"a{'n' if kind == 'embedding' else ''} {kind} model" if kind else f"a {server.pipe.task} model"
        raise Refused(424, "backend", f"{path}: this server's model is {what}, which answers {fits} (and bertforge's "
                                      f"/v1/{server.endpoint})")


def tei_info(server) -> dict:
    """TEI's /info fields (Info in router/src/lib.rs)."""
    pipe, kind = server.pipe, model_type(server.pipe)
    labels = {"id2label": {str(i): pipe.labels[i] for i in range(pipe.config.num_labels)},
              "label2id": {pipe.labels[i]: i for i in range(pipe.config.num_labels)}}
    types = {"embedding": {"pooling": pipe.defaults.get("pooling")}, "classifier": labels, "reranker": labels,
             "splade": {"pooling": "splade"}}
    name = server.model_name
    return {"model_id": name, "model_sha": server.model_sha, "model_dtype": "int8" if server.options.get("int8") else
            "bfloat16" if server.options.get("bf16") else "float32",
            "served_model_name": name,
            "model_type": {"embedding" if kind == "splade" else kind: types[kind]} if kind else None,
            "max_concurrent_requests": server.max_concurrent, "max_input_length": pipe.max_length,
            "max_batch_tokens": server.max_batch_tokens, "max_batch_requests": None,
            "max_client_batch_size": server.max_client_batch, "auto_truncate": server.auto_truncate,
            "tokenization_workers": server.tokenizing_threads, "version": __version__, "sha": None,
            "docker_label": None}


class TeiRequest(BaseModel):
    """A TEI request body: unknown fields and values of another type are refused (a 422 naming them)."""

    model_config = REQUEST
    truncate: bool | None = Field(None, description="cut inputs over --max-input-tokens instead of a 413 (default: "
                                                    "--auto-truncate)")
    truncation_direction: Literal["Right", "right"] = Field("Right", description="Right only: the end is cut")

    def truncation(self, server) -> bool:
        return server.auto_truncate if self.truncate is None else self.truncate


class EmbedRequest(TeiRequest):
    inputs: Any = Field(..., description="a text, token ids, or a list of them")
    prompt_name: str | None = Field(None, description="one of the model folder's prompts "
                                                      "(config_sentence_transformers.json), put before each text")
    normalize: bool = True
    dimensions: int | None = Field(None, description="Matryoshka: the first N values (then normalised)")


class EmbedSparseRequest(TeiRequest):
    inputs: Any = Field(..., description="a text or a list of texts")
    prompt_name: str | None = Field(None, description="one of the model folder's prompts "
                                                      "(config_sentence_transformers.json), put before each text")


class EmbedAllRequest(TeiRequest):
    inputs: Any = Field(..., description="a text, token ids, or a list of them")
    prompt_name: None = None


class PredictRequest(TeiRequest):
    inputs: Any = Field(..., description="a text; a pair [text, text_pair] (a list of two texts is one pair); or a "
                                         "batch, a list of [text] / [text, text_pair]")
    raw_scores: bool = False


class RerankRequest(TeiRequest):
    query: str
    texts: list[str]
    raw_scores: bool = False
    return_text: bool = False


class TokenizeRequest(BaseModel):
    model_config = REQUEST
    inputs: str | list[str]
    add_special_tokens: bool = True
    prompt_name: None = None


class DecodeRequest(BaseModel):
    model_config = REQUEST
    ids: list[int] | list[list[int]]
    skip_special_tokens: bool = True


def not_empty(values, name: str):
    if isinstance(values, list) and not values:
        raise Refused(400, "empty", f"`{name}` cannot be empty")


async def embed(server, body: EmbedRequest, receive):
    require(server, "/embed")
    not_empty(body.inputs, "inputs")
    options = {"normalize": body.normalize, "dimensions": body.dimensions, "prompt_name": body.prompt_name}

    def finish(prepared, outputs):
        return result_bytes(server.pipe.postprocess(prepared, outputs)), {}  # a list, even of one input

    return await server.compute("/embed", body.inputs, body.truncation(server), options, receive, finish)


async def embed_sparse(server, body: EmbedSparseRequest, receive):
    """A SPLADE model's vectors: per input its non-zero weights, [{"index": token id, "value"}, ...] by index."""
    require(server, "/embed_sparse")
    not_empty(body.inputs, "inputs")

    def finish(prepared, outputs):
        return result_bytes([[{"index": int(i), "value": float(v)} for i, v in zip(ids, values)]
                             for ids, values in server.pipe.sparse(prepared, outputs)]), {}

    return await server.compute("/embed_sparse", body.inputs, body.truncation(server),
                                {"prompt_name": body.prompt_name}, receive, finish)


async def embed_all(server, body: EmbedAllRequest, receive):
    require(server, "/embed_all")
    not_empty(body.inputs, "inputs")

    def finish(prepared, outputs):  # each input's token vectors, [CLS] and [SEP] included
        return result_bytes([states.tolist() for states in outputs]), {}

    return await server.compute("/embed_all", body.inputs, body.truncation(server), {}, receive, finish)


# How /predict read its inputs, in the response's Input-Read-As header: TEI reads a list of two texts as one
# pair, which a newcomer sending two texts to classify would not guess from the one answer it gets.
READ_AS = "Input-Read-As"


def predict_items(inputs) -> tuple[list, str]:
    """TEI's /predict inputs as the text-classification pipeline's, and how they were read: a text ("text"), a
    pair [text, text_pair] ("pair"), or a batch, a list of [text] or [text, text_pair] (or of texts) ("batch")."""
    if isinstance(inputs, str):
        return [inputs], "text"
    not_empty(inputs, "inputs")
    if isinstance(inputs, list) and all(isinstance(x, str) for x in inputs):
        if len(inputs) > 2:
            raise Refused(422, "validation", "inputs: a list of texts is one input, [text] or [text, text_pair]; a "
                                             "batch is a list of them")
        return ([inputs[0]], "text") if len(inputs) == 1 else ([inputs], "pair")
    if isinstance(inputs, list):
        return [x[0] if isinstance(x, list) and len(x) == 1 else x for x in inputs], "batch"
    return inputs, "batch"  # refused by the pipeline, by name


async def predict(server, body: PredictRequest, receive):
    """Per input, its labels and scores best first: softmax (sigmoid for one output) unless raw_scores."""
    require(server, "/predict")
    items, read_as = predict_items(body.inputs)
    one = server.pipe.config.num_labels == 1
    function = "none" if body.raw_scores else "sigmoid" if one else None  # None: the model's (softmax)

    def finish(prepared, outputs):
        ranked = [[{"score": r["score"], "label": r["label"]} for r in result]
                  for result in server.pipe.postprocess(prepared, outputs)]
        return result_bytes(ranked if read_as == "batch" else ranked[0]), {READ_AS: read_as}

    return await server.compute("/predict", items, body.truncation(server),
                                {"top_k": None, "function_to_apply": function}, receive, finish)


async def rerank(server, body: RerankRequest, receive):
    """The texts ranked by their score against the query, best first: sigmoid of the logit unless raw_scores."""
    require(server, "/rerank")
    not_empty(body.texts, "texts")
    try:
        for name, text in [("query", body.query), *((f"texts[{i}]", t) for i, t in enumerate(body.texts))]:
            check_text(text, name)
    except BertforgeError as e:
        raise Refused(422, "validation", str(e)) from None

    def finish(prepared, outputs):
        scores = [result[0]["score"] for result in server.pipe.postprocess(prepared, outputs)]
        order = sorted(range(len(scores)), key=lambda i: -scores[i])
        return result_bytes([{"index": i, **({"text": body.texts[i]} if body.return_text else {}),
                              "score": scores[i]} for i in order]), {}

    function = "none" if body.raw_scores else "sigmoid"
    return await server.compute("/rerank", [[body.query, text] for text in body.texts], body.truncation(server),
                                {"top_k": None, "function_to_apply": function}, receive, finish)


def tokens(server, texts: list[str], special: bool) -> bytes:
    """Each text's tokens as TEI gives them: id, text, special, and start/stop as byte offsets in the text (null
    for special tokens). Within --max-client-batch texts and --max-batch-tokens tokens together (only the
    beginning of a text that could hold that many is tokenized: windows.text_head)."""
    from ..inference.windows import text_head

    server.limits.check_items(len(texts))
    try:
        texts = [check_text(text, "inputs" if len(texts) == 1 else f"inputs[{i}]") for i, text in enumerate(texts)]
    except BertforgeError as e:
        raise Refused(422, "validation", str(e)) from None
    backend, limit = server.pipe.tokenizer.backend_tokenizer, server.limits.max_batch_tokens
    encodings = backend.encode_batch([text_head(backend, t, limit) for t in texts], add_special_tokens=special)
    server.limits.check_tokens(sum(len(e.ids) for e in encodings))
    return json_bytes([text_tokens(e, text) for e, text in zip(encodings, texts)])


def text_tokens(encoding, text: str) -> list[dict]:
    found, byte, char = [], 0, 0  # the byte offset of character `char`, moving forward
    for token_id, token, (start, stop), special in zip(encoding.ids, encoding.tokens, encoding.offsets,
                                                       encoding.special_tokens_mask):
        if special:
            found.append({"id": token_id, "text": token, "special": True, "start": None, "stop": None})
            continue
        byte, char = byte + len(text[char:start].encode("utf-8")), start
        found.append({"id": token_id, "text": text[start:stop], "special": False, "start": byte,
                      "stop": byte + len(text[start:stop].encode("utf-8"))})
    return found


def decoded(server, ids: list[list[int]], skip_special: bool) -> bytes:
    server.limits.check_items(len(ids))
    server.limits.check_tokens(sum(map(len, ids)))
    tokenizer = server.pipe.tokenizer
    for i, row in enumerate(ids):
        outside = next((t for t in row if not 0 <= t < len(tokenizer)), None)
        if outside is not None:
            raise Refused(422, "tokenizer", f"ids{f'[{i}]' if len(ids) > 1 else ''}: token id {outside} is outside "
                                            f"the vocabulary (0 to {len(tokenizer) - 1})")
    return json_bytes([tokenizer.decode(row, skip_special_tokens=skip_special) for row in ids])


async def in_thread(server, function, *args) -> tuple[bytes, dict]:
    """function(server, *args) in the tokenising threads (never on the event loop), once the model is loaded."""
    server.ready()
    content = await asyncio.get_running_loop().run_in_executor(server.tokenizing, function, server, *args)
    return content, {}


async def tokenize(server, body: TokenizeRequest, receive):
    texts = [body.inputs] if isinstance(body.inputs, str) else body.inputs
    not_empty(texts, "inputs")
    return await in_thread(server, tokens, texts, body.add_special_tokens)


async def decode(server, body: DecodeRequest, receive):
    ids = body.ids if body.ids and isinstance(body.ids[0], list) else [body.ids]
    return await in_thread(server, decoded, ids, body.skip_special_tokens)


ANSWERS = {"/embed": (EmbedRequest, embed), "/embed_all": (EmbedAllRequest, embed_all),
           "/embed_sparse": (EmbedSparseRequest, embed_sparse),
           "/predict": (PredictRequest, predict), "/rerank": (RerankRequest, rerank),
           "/tokenize": (TokenizeRequest, tokenize), "/decode": (DecodeRequest, decode)}


ROUTES = tuple(ANSWERS)


def add_routes(app, server, prefix: str = ""):
    """TEI's POST routes on `app`, answered by `server` (a server.Server), under `prefix` (a model's /models/NAME)."""
    for path, (body_model, answer) in ANSWERS.items():
        add_route(app, server, path, body_model, answer, prefix)


def add_route(app, server, path: str, body_model, answer, prefix: str = ""):
    """POST `prefix + path` (a prefixed route left out of /docs)."""
    path, summary = prefix + path, f"text-embeddings-inference's {path}"

    async def handle(request: Request, body: body_model):  # type: ignore[valid-type]
        return await server.respond(path, lambda: answer(server, body, request.receive))

    app.post(path, summary=summary, include_in_schema=not prefix)(handle)
