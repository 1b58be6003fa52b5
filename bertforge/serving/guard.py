"""What `bertforge serve` (serve.py) does about hostile or careless requests, in front of the application.

`Guard`, plain ASGI middleware before FastAPI: the Host header checked (--allowed-hosts), the API key
required (--api-key, in one Authorization header), and the request body read as it arrives and refused with a
413 once it passes the limit, whatever its transfer encoding (a chunked body is not read to its end), or with a
408 where it has not arrived whole --body-timeout seconds after the headers (its connection then closed; the
headers' deadline is connections.py's). `Limits`: the limits of a request, checked in one place (JSON nested
more than core.io.MAX_JSON_DEPTH deep among them). `REQUEST`: every route's request body typed strictly, and
`problems`, its validation errors as one line naming each field, or where and why a body is not JSON;
`http_refusal`, Starlette's own refusals (no such route, a body FastAPI could not parse) as typed ones.
`Refused` is a typed refusal, answered as {"error", "error_type"} like every other error; `json_bytes` writes
JSON that is always valid (NaN refused, a lone surrogate escaped); `scrub` makes an error message fit for a
client: one line, and no absolute path of this machine; `unexpected`, what a client is told of an exception
nobody expected (its type).
"""

import asyncio
import functools
import hmac
import json
import re
from pathlib import Path

from ..core.io import MAX_JSON_DEPTH, too_deep

MAX_BODY = 4 << 20  # bytes of request body
CUT = 'send "truncate": true to cut it'  # how a request has an input over --max-input-tokens cut (see Limits)
# Every route's request body, as the pydantic model config of each (app.py, tei.py, openai_api.py): unknown fields
# refused, and each value of the JSON type its route declares, never converted: true is not the number 1 (bool is
# an int in Python), "yes" not true, "5" not 5; a whole number is a float's value. A 422 naming the field otherwise.
REQUEST = {"extra": "forbid", "strict": True}
TOO_DEEP = f"the body's JSON nests more than {MAX_JSON_DEPTH} levels deep, which no request needs"
JSON_TYPES = {bool: "a boolean", int: "a whole number", float: "a decimal number", str: "a text", list: "an array",
              dict: "an object", type(None): "null"}


class Refused(Exception):
    """A request refused with an HTTP status and a kind (the response's error_type)."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind = status, kind


class Limits:
    """The limits of a request, all checked here: inputs per request (--max-client-batch, before they are
    tokenised where the body is a list), tokens per input (--max-input-tokens: the pipeline's max_length, past
    which an input is cut with truncate, else refused; for the inputs that are windowed, a QA context or a text
    to tag, the windows' length) and tokens per request, all its rows together (--max-batch-tokens, as
    text-embeddings-inference names them). A windowed input over that budget alone is refused by its name
    before its windows are run (they hold all its tokens, and more where they overlap)."""

    def __init__(self, max_client_batch: int, max_batch_tokens: int):
        self.max_client_batch, self.max_batch_tokens = max_client_batch, max_batch_tokens

    def prepare(self, pipe, inputs, truncate: bool, options: dict, cut: str = CUT):
        """`pipe.prepare(inputs)` within the limits; Refused (413 over one, 422 malformed) otherwise. `cut` tells
        how the route's request has an input over --max-input-tokens cut (the 413's advice)."""
        from ..core.errors import BertforgeError
        from ..inference.batches import rows_tokens
        from ..inference.inputs import is_ids
        from ..inference.pipeline_base import TooLong

        if too_deep([inputs]):  # the body's depth, inputs one level down
            raise Refused(422, "validation", TOO_DEEP)
        if isinstance(inputs, list) and not is_ids(inputs):  # token ids: one input
            self.check_items(len(inputs))
        try:
            prepared = pipe.prepare(inputs, truncate=truncate, **options)
        except TooLong as e:
            raise Refused(413, "too_large", f"{e} (--max-input-tokens; {cut})") from None
        except BertforgeError as e:
            raise Refused(422, "validation", str(e)) from None
        self.check_items(len(prepared.items))
        for name, tokens in prepared.extra.get("input_tokens", {}).items():  # a long input, before its windows
            if tokens > self.max_batch_tokens:
                raise Refused(413, "too_large", f"{name} is {tokens} tokens, over the limit of {self.max_batch_tokens} "
                                                f"per request (--max-batch-tokens)")
        self.check_tokens(rows_tokens(prepared.rows))
        return prepared

    def check_tokens(self, tokens: int):
        if tokens > self.max_batch_tokens:
            raise Refused(413, "too_large", f"inputs are {tokens} tokens together, over the limit of "
                                            f"{self.max_batch_tokens} per request (--max-batch-tokens)")

    def check_items(self, items: int):
        if items > self.max_client_batch:
            raise Refused(413, "too_large", f"inputs has {items} items, over the limit of {self.max_client_batch} "
                                            "(--max-client-batch)")


def problems(errors: list[dict], body=None) -> str:
    """pydantic's validation errors of a request body (its `errors()`) as one line: a problem per field, with the
    JSON type given where it is not the one declared. Of a field of several shapes (ids: token ids, or lists of
    them), the problem found deepest in the value, where the shape it was checked against fitted longest. A body
    that is not JSON (FastAPI's json_invalid error; `body`: its text) is told where and why."""
    if errors and errors[0]["type"] == "json_invalid":
        return not_json(errors[0], body if isinstance(body, str) else "")
    found = {}
    for e in errors:
        field = e["loc"][1] if len(e["loc"]) > 1 else None
        if field not in found or len(e["loc"]) > len(found[field]["loc"]):
            found[field] = e
    return "; ".join(problem(e) for e in found.values())


def problem(error: dict) -> str:
    """One pydantic error as `field.path: message`, and the JSON type given where it is not the declared one."""
    where = ".".join(map(str, error["loc"][1:])) or "body"
    given = type(error.get("input"))
    wrong_type = error["type"].endswith("_type") and given in JSON_TYPES
    return f"{where}: {error['msg']}{f', not {JSON_TYPES[given]}' if wrong_type else ''}"


def not_json(error: dict, text: str) -> str:
    """Where and why the body `text` is not JSON (json's message, the position in FastAPI's error): its line and
    column, and a control character (a raw NUL, a tab in a text) named, with the escape JSON writes it as."""
    at = error["loc"][1]
    line, column = text.count("\n", 0, at) + 1, at - text.rfind("\n", 0, at)
    why = re.sub(r" (starting )?at$", "", error["ctx"]["error"])
    if at < len(text) and ord(text[at]) < 0x20:
        why += f" U+{ord(text[at]):04X}, which a JSON text writes as \\u{ord(text[at]):04x}"
    return f"the body is not JSON at line {line}, column {column}: {why}"


def http_refusal(exc, method: str, path: str) -> Refused:
    """Starlette's and FastAPI's own refusals (their HTTPException `exc`) as typed ones: a path no route answers,
    a method its route does not take, and a body FastAPI could not parse (why: the exception's cause; not UTF-8,
    or nested too deep for the parser)."""
    status, cause = exc.status_code, exc.__cause__
    if isinstance(cause, RecursionError):
        return Refused(422, "validation", TOO_DEEP)
    if isinstance(cause, UnicodeDecodeError):
        return Refused(422, "validation", f"the body is not UTF-8: {cause.reason} at byte {cause.start}")
    if status == 404:
        return Refused(404, "not_found", f"{path[:100]}: no such route (/docs lists them)")
    if status == 405:
        return Refused(405, "method_not_allowed", f"{path} does not take {method}")
    return Refused(status, "http", str(exc.detail))


def error_body(status: int, kind: str, message: str) -> tuple[int, dict]:
    """A refusal's status and JSON body in bertforge's form, {"error", "error_type"}."""
    return status, {"error": message, "error_type": kind}


def json_bytes(content) -> bytes:
    """JSON as Starlette's JSONResponse writes it, but a lone surrogate in a text is written as its \\u escape
    instead of failing; NaN and infinity raise ValueError (JSON has no such numbers)."""
    return json.dumps(content, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode(
        "utf-8", "backslashreplace")


def json_response(content, status: int = 200, headers: dict | None = None):
    """A Starlette response of `json_bytes(content)`."""
    from starlette.responses import Response

    return Response(json_bytes(content), status, headers, media_type="application/json")


def result_bytes(results: list) -> bytes:
    """The JSON of a request's results (a list in input order); a model output that JSON cannot carry (NaN or
    infinity) is a 500 naming the first input it came from."""
    try:
        return json_bytes(results)
    except ValueError:
        where = next((i for i, item in enumerate(results) if not finite(item)), 0)
        raise Refused(500, "backend", f"inputs[{where}]: the model's output is not a finite number (NaN or "
                                      "infinity), which JSON cannot carry") from None


def finite(item) -> bool:
    try:
        json_bytes(item)
    except ValueError:
        return False
    return True


@functools.cache
def machine_path() -> re.Pattern:
    """An absolute path that starts with a folder of this machine's root (/home/..., /tmp/...; not /v1/...)."""
    roots = sorted((re.escape(p.name) for p in Path("/").iterdir()), key=len, reverse=True)
    return re.compile(rf"(?<![\w.:/~-])/(?:{'|'.join(roots)})(?:/[^\s/'\"`:;,()\[\]{{}}<>]*)*")


def unexpected(e: Exception) -> str:
    """What a client is told of an exception nobody expected (a bug, or a model that fails): its type, not its
    text, which is the library's (torch's, many lines of it) and says nothing the client can act on. The server's
    log has it whole, with its traceback."""
    return f"the server failed on this request ({type(e).__name__}): not the request's fault; its log has the details"


def scrub(message: str) -> str:
    """An error message fit for a client: one line, a lone surrogate written as \\uXXXX, and each absolute path
    of this machine cut to its last name (a folder's name, a file's)."""
    message = " ".join(line.strip() for line in message.splitlines() if line.strip())
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return machine_path().sub(lambda m: m.group(0).rstrip("/").rsplit("/", 1)[-1] or "/", message)


class Guard:
    """ASGI middleware, before the application: the Host header among `hosts` (a 421 otherwise, against DNS
    rebinding; None: any), `Authorization: Bearer KEY` on every route but /health (and a model's
    /models/NAME/health) where there is a `key` (a 401,
    also for a request with more than one Authorization header),
    and the request body read here as it arrives, whatever its transfer encoding, with a 413 once it passes
    MAX_BODY (or declares more), without reading the rest, or a 408 where it has not arrived whole `body_timeout`
    seconds after the headers (None: no limit); the application is handed the body read. Plain ASGI:
    Starlette's @app.middleware costs every request an extra task and stream. `refused(status, kind, path)` counts
    a refusal; `render(path, status, kind, message)` gives its status and JSON body in the route's protocol's
    form (None: {"error", "error_type"})."""

    def __init__(self, app, refused=None, max_body: int = MAX_BODY, hosts=None, key: str | None = None,
                 body_timeout: float | None = None, render=None):
        self.app, self.refused, self.max_body, self.body_timeout = app, refused, max_body, body_timeout
        self.hosts, self.key = hosts, None if key is None else key.encode("ascii")
        self.render = render or (lambda path, status, kind, message: error_body(status, kind, message))

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            self.check_host(scope["headers"])
            self.check_key(scope["path"], scope["headers"])
            body = await self.read_body(dict(scope["headers"]), receive)
        except Refused as e:  # the rest of the body stays unread: the connection is closed after the answer
            extra = {401: (b"www-authenticate", b"Bearer"), 413: (b"connection", b"close"),
                     408: (b"connection", b"close")}.get(e.status)
            return await self.refuse(scope, send, e, [extra] if extra else [])
        if body is not None:  # None: the client went away
            await self.app(scope, replay(body, receive), send)

    def check_host(self, headers: list):
        if self.hosts is None:
            return
        given = [value.decode("latin-1") for name, value in headers if name == b"host"]
        if len(given) != 1 or host_name(given[0]) not in self.hosts:
            shown = repr(given[0][:100]) if len(given) == 1 else f"{len(given)} Host headers"
            raise Refused(421, "misdirected", f"Host {shown}: this server answers {', '.join(sorted(self.hosts))} "
                                              "only (--allowed-hosts)")

    def check_key(self, path: str, headers: list):
        if self.key is None or path == "/health" or (path.startswith("/models/") and path.endswith("/health")):
            return  # a model's own /models/NAME/health too
        given = [value for name, value in headers if name == b"authorization"]
        if len(given) > 1:  # which one would count is the server's guess: none does
            raise Refused(401, "unauthorized", f"{len(given)} Authorization headers: send one, Authorization: "
                                               "Bearer KEY")
        scheme, _, token = (given[0] if given else b"").partition(b" ")
        if not scheme:
            raise Refused(401, "unauthorized", "no Authorization header: this server needs Authorization: Bearer KEY")
        if scheme.lower() != b"bearer" or not hmac.compare_digest(token.strip(), self.key):
            raise Refused(401, "unauthorized", "the Authorization header does not hold this server's API key "
                                               "(Authorization: Bearer KEY)")

    async def read_body(self, headers: dict, receive) -> bytes | None:
        """The whole body, within the size limit and the deadline (Refused otherwise); None if the client left."""
        limit = f"the {self.max_body >> 20} MiB limit" if self.max_body >= 1 << 20 else f"{self.max_body} bytes"
        size = headers.get(b"content-length", b"").decode("latin-1")
        if size.isdigit() and int(size) > self.max_body:
            raise Refused(413, "too_large", f"request body of {size} bytes is over {limit}")
        chunks, read = [], 0
        try:
            async with asyncio.timeout(self.body_timeout):
                while True:
                    message = await receive()
                    if message["type"] == "http.disconnect":
                        return None
                    chunk = message.get("body", b"")
                    read += len(chunk)
                    if read > self.max_body:
                        raise Refused(413, "too_large", f"request body is over {limit} (read {read} bytes, the rest "
                                                        "not)")
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise Refused(408, "timeout", f"the request body did not arrive whole within {self.body_timeout:g} s "
                                          f"(--body-timeout; {read} bytes read)") from None

    async def refuse(self, scope, send, refusal: Refused, headers=()):
        status, body = self.render(scope["path"], refusal.status, refusal.kind, scrub(str(refusal)))
        if self.refused is not None:
            self.refused(status, refusal.kind, scope["path"])
        body = json_bytes(body)
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
                                *headers]})
        await send({"type": "http.response.body", "body": body})


def replay(body: bytes, receive):
    """An ASGI receive that gives `body` whole, then what `receive` gives (a disconnect)."""
    given = False

    async def replayed():
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


def host_name(host: str) -> str:
    """The name in a Host header: without the port, an IPv6 address without its brackets, lower case."""
    host = host.strip().lower()
    if host.startswith("["):
        return host[1:host.find("]")] if "]" in host else host
    return (host.rsplit(":", 1)[0] if host.count(":") == 1 else host).rstrip(".")
