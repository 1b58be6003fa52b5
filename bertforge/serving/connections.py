"""What `bertforge serve` (serve.py) does about connections, below the application: uvicorn's HTTP protocol
(httptools', or h11's where httptools is not installed) with a deadline for a request's headers and a limit on
open connections.

uvicorn closes an idle keep-alive connection (5 s after its last answer) but times out neither a request's
headers nor its body, and its --limit-concurrency is checked only once a request's headers are complete: a
client that connects and sends nothing, or its headers a byte at a time, held a connection (a file handle)
forever, and enough of them exhausted the server's. Here a connection whose request headers are not complete
--header-timeout seconds after it opened, or after the first byte of its next request, is closed (one whose
previous answer is still being written is closed after it); every open connection, whatever it is doing,
counts against --max-connections, and one over it gets a 503 (error_type too_many_connections) and is closed at
once. The body's deadline (--body-timeout, a 408) is guard.Guard's, which reads the body.

A client that sends requests but reads none of the answers (or too slowly) fills the socket's buffers, then the
transport's, where uvicorn waits for room before writing the next answer: a connection so held kept an answer
or two in memory (up to 60 MB each from /embed_all) and its request's task forever, and SIGTERM waited for it.
Here a connection whose answer waits --send-timeout seconds for the client to read any of it is aborted (its
buffered answer dropped), so each holds at most two answers for at most that long.

uvicorn's access log writes each request's target, query string and all, and a query string may hold a secret (a
client's ?api_key=...): `log_paths_only` cuts it from every line of that log.
"""

import logging

from ..core.flags import count, positive
from .guard import json_bytes

HEADER_TIMEOUT = 10.0  # seconds
BODY_TIMEOUT = 10.0  # seconds, for the whole body
SEND_TIMEOUT = 30.0  # seconds an answer may wait for its client to read
MAX_CONNECTIONS = 1024


def add_connection_arguments(p):
    p.add_argument("--header-timeout", type=positive, default=HEADER_TIMEOUT, metavar="SECONDS",
                   help="a connection whose request headers are not complete this long after it opened (or after the "
                        "first byte of its next request) is closed")
    p.add_argument("--body-timeout", type=positive, default=BODY_TIMEOUT, metavar="SECONDS",
                   help="a request whose body has not arrived whole this long after its headers gets a 408, and its "
                        "connection is closed")
    p.add_argument("--send-timeout", type=positive, default=SEND_TIMEOUT, metavar="SECONDS",
                   help="a connection whose client reads nothing of its answer this long (the buffers full) is closed, "
                        "the answer dropped")
    p.add_argument("--max-connections", type=count(1), default=MAX_CONNECTIONS,
                   help="open connections, whatever they are doing (idle, sending, waiting for an answer); one more "
                        "gets a 503 and is closed at once (the soft limit on open files is raised to hold them)")


def refusal_bytes(status: int, reason: str, kind: str, message: str) -> bytes:
    """A whole HTTP/1.1 response of a typed refusal ({"error", "error_type"}), closing the connection."""
    body = json_bytes({"error": message, "error_type": kind})
    retry = b"retry-after: 1\r\n" if status in (429, 503) else b""
    return (b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\ncontent-length: %d\r\n%sconnection: close\r\n\r\n%s"
            % (status, reason.encode("ascii"), len(body), retry, body))


class Deadlines:
    """Mixed in before uvicorn's protocol class (see protocol_class): the header deadline and the connection
    limit. A subclass says whether the connection is waiting for a request's headers (headers_pending)."""

    header_timeout, max_connections, refused = HEADER_TIMEOUT, MAX_CONNECTIONS, None  # set by protocol_class
    send_timeout, stalled = SEND_TIMEOUT, None
    header_timer = send_timer = None
    over_limit = False
    not_http = False  # bytes that are not a request came while an answer was due: the 400 follows that answer

    def connection_made(self, transport):
        if len(self.connections) >= self.max_connections:
            self.over_limit, self.transport = True, transport
            transport.write(refusal_bytes(503, "Service Unavailable", "too_many_connections",
                                          f"this server holds {self.max_connections} connections already "
                                          "(--max-connections)"))
            transport.close()
            if self.refused is not None:
                self.refused(503, "too_many_connections", "")
            return
        super().connection_made(transport)
        self.arm()

    def data_received(self, data: bytes):
        if self.over_limit:
            return
        super().data_received(data)
        if self.headers_pending() and not self.transport.is_closing():
            self.arm()
        else:
            self.disarm()

    def connection_lost(self, exc):
        self.disarm()
        self.reading()
        if not self.over_limit:  # one over the limit was never counted, nor given a request
            super().connection_lost(exc)

    def headers_pending(self) -> bool:
        raise NotImplementedError

    def send_400_response(self, msg: str):
        """Bytes that are not an HTTP request: a typed 400, and the connection closed. Where they follow a request
        whose answer is still due (what a client sent past its Content-Length is read as the next request), the
        400 comes after that answer, in order; uvicorn's httptools protocol wrote it at once and closed, and the
        answer was lost."""
        if self.transport.is_closing():
            return
        if self.cycle is not None and not self.cycle.response_complete:
            self.not_http = True
            return
        self.transport.write(refusal_bytes(400, "Bad Request", "bad_request", "the bytes received are not an HTTP "
                                           "request (those sent past a body's Content-Length begin the next one)"))
        self.transport.close()
        if self.refused is not None:
            self.refused(400, "bad_request", "")

    def on_response_complete(self):
        super().on_response_complete()
        if self.not_http:
            self.send_400_response("")

    def pause_writing(self):
        """The transport's buffer is over its high-water mark: the client reads slower than the answer comes, or
        not at all (uvicorn writes nothing more to this connection until the buffer drains). The send deadline
        starts."""
        super().pause_writing()
        if self.send_timer is None:
            self.send_timer = self.loop.call_later(self.send_timeout, self.reader_stalled,
                                                   self.transport.get_write_buffer_size())

    def resume_writing(self):
        self.reading()
        if not self.transport.is_closing():  # else uvicorn's connection_lost resumes its writer, told it has gone
            super().resume_writing()

    def reading(self):
        if self.send_timer is not None:
            self.send_timer.cancel()
            self.send_timer = None

    def reader_stalled(self, buffered: int):
        """Where the client has read some of the answer since (the buffer has shrunk), the deadline starts again;
        else the connection is aborted: the buffered answer dropped, uvicorn told the client has gone (its
        request's task ends)."""
        left = self.transport.get_write_buffer_size()
        if left < buffered:
            self.send_timer = self.loop.call_later(self.send_timeout, self.reader_stalled, left)
            return
        self.send_timer = None
        self.transport.abort()
        if self.stalled is not None:
            self.stalled("send_timeout")

    def arm(self):
        """Start the header deadline, unless it runs already: it is not restarted by the bytes that arrive."""
        if self.header_timer is None:
            self.header_timer = self.loop.call_later(self.header_timeout, self.headers_late)

    def disarm(self):
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def headers_late(self):
        """uvicorn's graceful close: at once, or after the answer being written (a pipelined request's headers)."""
        self.header_timer = None
        if not self.transport.is_closing():
            self.shutdown()


class HttpToolsDeadlines(Deadlines):
    """httptools calls back when a request begins (its first byte) and when its headers are complete."""

    awaiting = True  # a new connection waits for its first request's headers

    def on_message_begin(self):
        self.awaiting = True
        super().on_message_begin()

    def on_headers_complete(self):
        self.awaiting = False
        super().on_headers_complete()

    def headers_pending(self) -> bool:
        return self.awaiting


class H11Deadlines(Deadlines):
    """h11's state: IDLE until a request's headers are complete."""

    def headers_pending(self) -> bool:
        import h11

        return self.conn.their_state is h11.IDLE


def protocol_class(header_timeout: float, max_connections: int, refused=None, implementation: str = "auto",
                   send_timeout: float = SEND_TIMEOUT, stalled=None):
    """The class to hand uvicorn.Config as `http`: httptools' protocol ("auto": where installed, as uvicorn's own
    choice) or h11's, with the header and send deadlines and the connection limit; `refused(status, kind, path)`
    counts a connection refused over the limit, `stalled(kind)` one closed for a client that does not read."""
    if implementation in ("auto", "httptools"):
        try:
            from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as base
            mixin = HttpToolsDeadlines
        except ImportError:
            if implementation == "httptools":
                raise
            implementation = "h11"
    if implementation == "h11":
        from uvicorn.protocols.http.h11_impl import H11Protocol as base
        mixin = H11Deadlines
    settings = {"header_timeout": header_timeout, "max_connections": max_connections, "send_timeout": send_timeout,
                "refused": None if refused is None else staticmethod(refused),
                "stalled": None if stalled is None else staticmethod(stalled)}
    return type(f"Bertforge{base.__name__}", (mixin, base), settings)


class PathOnly(logging.Filter):
    """A log record's text arguments cut at their first "?": uvicorn's access log (client, method, target, HTTP
    version, status) with the target's path only. A path has no "?" of its own (it starts the query)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(a.split("?", 1)[0] if isinstance(a, str) else a for a in record.args)
        return True


def log_paths_only():
    """No query string in uvicorn's access log (after uvicorn.Config, which configures its loggers)."""
    logger = logging.getLogger("uvicorn.access")
    if not any(isinstance(f, PathOnly) for f in logger.filters):
        logger.addFilter(PathOnly())
