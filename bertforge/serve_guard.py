"""What `bertforge serve` (serve.py) does about hostile or careless requests, in front of the application.

`Guard`, plain ASGI middleware before FastAPI: a 413 for a request body over the limit. `Refused` is a typed
refusal, answered as {"error", "error_type"} like every other error; `json_bytes` writes JSON that is always
valid (NaN refused, a lone surrogate escaped); `scrub` makes an error message fit for a client: one line,
and no absolute path of this machine.
"""

import functools
import json
import re
from pathlib import Path

MAX_BODY = 4 << 20  # bytes of request body


class Refused(Exception):
    """A request refused with an HTTP status and a kind (the response's error_type)."""

    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind = status, kind


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


def scrub(message: str) -> str:
    """An error message fit for a client: one line, a lone surrogate written as \\uXXXX, and each absolute path
    of this machine cut to its last name (a folder's name, a file's)."""
    message = " ".join(line.strip() for line in message.splitlines() if line.strip())
    message = message.encode("utf-8", "backslashreplace").decode("utf-8")
    return machine_path().sub(lambda m: m.group(0).rstrip("/").rsplit("/", 1)[-1] or "/", message)


class Guard:
    """ASGI middleware: a 413 for a body declared over MAX_BODY, before it is read. Plain ASGI: Starlette's
    @app.middleware costs every request an extra task and stream. `refused(status, kind, path)` counts a
    refusal."""

    def __init__(self, app, refused=None):
        self.app, self.refused = app, refused

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            size = dict(scope["headers"]).get(b"content-length", b"").decode("latin-1")
            if size.isdigit() and int(size) > MAX_BODY:
                return await self.refuse(scope, send, Refused(
                    413, "too_large", f"request body of {size} bytes is over the {MAX_BODY >> 20} MiB limit"))
        await self.app(scope, receive, send)

    async def refuse(self, scope, send, refusal: Refused, headers=()):
        if self.refused is not None:
            self.refused(refusal.status, refusal.kind, scope["path"])
        body = json_bytes({"error": scrub(str(refusal)), "error_type": refusal.kind})
        await send({"type": "http.response.start", "status": refusal.status,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body)),
                                *headers]})
        await send({"type": "http.response.body", "body": body})
