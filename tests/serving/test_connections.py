"""`bertforge serve` against stalled connections (serve_connections.py, serve_guard.Guard's body deadline): real
uvicorn servers on 127.0.0.1, in this process around a small application (both of uvicorn's HTTP protocols),
and `bertforge serve` itself.

A connection that sends nothing, or its headers a byte at a time, is closed after --header-timeout; a body that
stalls is a 408 in JSON; connections over --max-connections are refused at once while those open are served.
"""

import contextlib
import json
import logging
import re
import socket
import threading
import time

import pytest

from bertforge.serving.connections import PathOnly, log_paths_only, protocol_class
from bertforge.serving.guard import Guard
from tests.inference.test_pipelines import random_model
from tests.serving.test_serve import HEADS, Served, httpx
from tests.serving.test_guard import raw_response as response

uvicorn = pytest.importorskip("uvicorn")
HEADER_TIMEOUT = BODY_TIMEOUT = SEND_TIMEOUT = 1.0
SLACK = 2.0  # seconds past a deadline by which the server must have acted
GET = b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"


async def echo(scope, receive, send):
    """The length of the request body, as JSON; padded to about N bytes with ?size=N."""
    if scope["type"] != "http":
        return
    body = (await receive())["body"]
    size = int(scope["query_string"].decode().partition("size=")[2] or 0)
    content = json.dumps({"bytes": len(body), "pad": "x" * size}).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(content))]})
    await send({"type": "http.response.body", "body": content})


class InProcess:
    """uvicorn in a thread of this process, with the protocol of serve_connections: `app` (its lifespan run), by
    default `echo` behind Guard."""

    def __init__(self, implementation: str, max_connections: int = 64, keep_alive: int = 5, app=None):
        self.stalled = []  # kinds of the connections closed for a client that does not read
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        http = protocol_class(HEADER_TIMEOUT, max_connections, implementation=implementation,
                              send_timeout=SEND_TIMEOUT, stalled=self.stalled.append)
        config = uvicorn.Config(app or Guard(echo, body_timeout=BODY_TIMEOUT), http=http,
                                lifespan="off" if app is None else "on", log_level="warning",
                                timeout_keep_alive=keep_alive)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        deadline = time.time() + 10
        while not self.server.started:
            assert time.time() < deadline, "uvicorn did not start"
            time.sleep(0.02)

    def stop(self):
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(params=["httptools", "h11"])
def implementation(request):
    if request.param == "httptools":
        pytest.importorskip("httptools")
    return request.param


@pytest.fixture
def local(implementation):
    s = InProcess(implementation)
    yield s
    s.stop()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=10)


def closed(sock) -> bool:
    """Whether the server has closed `sock` (waiting for it as long as the socket's timeout); False where it sent
    something instead."""
    try:
        return sock.recv(65536) == b""
    except ConnectionResetError:
        return True


def seconds_until_closed(sock, drip: bytes = b"", every: float = 0.2, limit: float = 10) -> float:
    """How long the server takes to close `sock`, while `drip` is sent a byte at a time, one each `every` s."""
    started = time.perf_counter()
    sock.settimeout(every)
    for i in range(int(limit / every)):
        try:
            if i < len(drip):
                sock.sendall(drip[i:i + 1])
            if closed(sock):
                return time.perf_counter() - started
        except TimeoutError:
            continue
        except (BrokenPipeError, ConnectionResetError):
            return time.perf_counter() - started
    raise AssertionError(f"still open after {limit} s")


def assert_answers(port: int):
    with connect(port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 2\r\n\r\n{}")
        assert response(sock)[0] == 200


SLOW_HEADERS = b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n" * 10


@pytest.mark.parametrize("drip", [b"", SLOW_HEADERS], ids=["silent", "slow-headers"])
def test_a_connection_without_headers_is_closed_after_the_header_timeout(local, drip):
    with connect(local.port) as sock:
        waited = seconds_until_closed(sock, drip)
    assert HEADER_TIMEOUT - 0.1 < waited < HEADER_TIMEOUT + SLACK, waited
    assert_answers(local.port)


def test_the_header_timeout_runs_from_the_first_byte_of_a_keep_alive_request(local):
    with connect(local.port) as sock:
        for _ in range(2):  # each request within the deadline, the two together past it
            time.sleep(HEADER_TIMEOUT * 0.7)
            sock.sendall(GET)
            assert response(sock)[0] == 200
        sock.sendall(GET[:10])
        assert seconds_until_closed(sock) < HEADER_TIMEOUT + SLACK


def test_a_stalled_body_is_a_408_in_json(local):
    with connect(local.port) as sock:
        sock.sendall(b"POST / HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-length: 1000\r\n\r\n{\"inputs\": \"sl")
        started = time.perf_counter()
        status, headers, body = response(sock)
        waited = time.perf_counter() - started
        assert status == 408 and headers["connection"] == "close" and headers["content-type"] == "application/json"
        error = json.loads(body)
        assert error["error_type"] == "timeout" and "--body-timeout" in error["error"], error
        assert BODY_TIMEOUT - 0.1 < waited < BODY_TIMEOUT + SLACK, waited
        sock.settimeout(SLACK)
        assert closed(sock)
    assert_answers(local.port)


def responses(sock, n: int) -> list[tuple[int, dict, bytes]]:
    """The next `n` HTTP/1.1 responses read from `sock` (the answers to pipelined requests): status, headers, and
    a body of Content-Length bytes each."""
    data, found = b"", []
    while len(found) < n:
        head, end, rest = data.partition(b"\r\n\r\n")
        if end:
            lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.lower().split(": ", 1) for line in lines[1:])
            size = int(headers["content-length"])
            if len(rest) >= size:
                found.append((int(lines[0].split()[1]), headers, rest[:size]))
                data = rest[size:]
                continue
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed after {len(found)} responses: {data!r}"
        data += chunk
    return found


def post(body: bytes, length: int, path: bytes = b"/") -> bytes:
    return (b"POST %s HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
            % (path, length, body))


def test_a_body_past_its_content_length_is_the_next_request(local):
    """A Content-Length shorter than the body sent: the request is answered from the bytes it names (HTTP/1.1);
    the rest is the next request, answered after it: another request, or a 400 in JSON for bytes that are not
    one, and the connection closed. (httptools' protocol sent that 400 at once and closed: the first answer was
    lost.)"""
    with connect(local.port) as sock:
        sock.sendall(post(b'{"inputs": "more than ten bytes"}', 10))
        (status, _, body), (status_next, headers, body_next) = responses(sock, 2)
        assert status == 200 and json.loads(body)["bytes"] == 10, body
        assert status_next == 400 and headers["connection"] == "close" and headers["content-type"] == "application/json"
        error = json.loads(body_next)
        assert error["error_type"] == "bad_request" and "Content-Length" in error["error"], error
        assert closed(sock)
    with connect(local.port) as sock:
        sock.sendall(post(b"{}" + GET, 2))
        assert [status for status, _, _ in responses(sock, 2)] == [200, 200]  # the rest: a request
        sock.sendall(GET)
        assert response(sock)[0] == 200
    assert_answers(local.port)


BIG = b"GET /?size=16000000 HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n"  # a 16 MB answer: more than the socket buffers


def test_a_client_that_reads_no_answers_is_closed_after_the_send_timeout(local):
    """Requests sent, answers never read: the connection (and the answer in its buffer) is dropped --send-timeout
    after the buffers filled, not held forever; the server answers others meanwhile and counts it."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.connect(("127.0.0.1", local.port))
        sock.sendall(BIG * 3)  # pipelined: uvicorn answers one at a time
        started = time.perf_counter()
        assert_answers(local.port)
        time.sleep(SEND_TIMEOUT + SLACK)
        sock.settimeout(SLACK)
        read = 0
        with contextlib.suppress(ConnectionResetError):  # aborted: what the server still held is gone
            while chunk := sock.recv(1 << 20):
                read += len(chunk)
    assert read < 2 * len(BIG) * 1_000_000 and time.perf_counter() - started < SEND_TIMEOUT + 2 * SLACK
    assert local.stalled == ["send_timeout"]
    assert_answers(local.port)


def test_a_slow_reader_that_keeps_reading_gets_its_whole_answer(local):
    """The send deadline is for a stall, not for the answer: a client reading a 16 MB answer for longer than the
    send timeout, never pausing that long, gets all of it."""
    with connect(local.port) as sock:
        sock.sendall(BIG)
        started, data = time.perf_counter(), b""
        while b"}" not in data[-2:]:
            time.sleep(SEND_TIMEOUT / 4)
            chunk = sock.recv(1 << 20)
            assert chunk, f"closed after {len(data)} bytes"
            data += chunk
        assert time.perf_counter() - started > 1.5 * SEND_TIMEOUT
        assert json.loads(data.split(b"\r\n\r\n", 1)[1])["pad"] == "x" * 16_000_000
    assert local.stalled == []


def test_an_idle_keep_alive_connection_is_closed_after_the_keep_alive_timeout(implementation):
    s = InProcess(implementation, keep_alive=1)
    try:
        with connect(s.port) as sock:
            sock.sendall(GET)
            assert response(sock)[0] == 200
            assert seconds_until_closed(sock) < 1 + SLACK
    finally:
        s.stop()


def test_connections_over_the_limit_are_refused_while_those_open_are_served(implementation):
    s = InProcess(implementation, max_connections=3)
    try:
        held = [connect(s.port) for _ in range(3)]
        for sock in held[:2]:  # two idle after an answer, one that has sent nothing yet
            sock.sendall(GET)
            assert response(sock)[0] == 200
        with connect(s.port) as extra:
            status, headers, body = response(extra)
            assert status == 503 and headers["connection"] == "close"
            error = json.loads(body)
            assert error["error_type"] == "too_many_connections" and "--max-connections" in error["error"], error
            assert closed(extra)
        for sock in held:
            sock.sendall(GET)
            assert response(sock)[0] == 200
        held.pop().close()
        time.sleep(0.2)
        assert_answers(s.port)
        for sock in held:
            sock.close()
    finally:
        s.stop()


@pytest.fixture(scope="module")
def served(tmp_path_factory, tokenizer):
    """`bertforge serve` of a small classifier with short deadlines and few connections."""
    name, config = HEADS["classify"]
    folder = random_model(tmp_path_factory.mktemp("classify"), name, tokenizer, **config)
    s = Served(folder, "--header-timeout", HEADER_TIMEOUT, "--body-timeout", BODY_TIMEOUT,
               "--max-connections", 8).wait()
    try:
        yield s
    finally:
        s.stop()


def classifies(s) -> bool:
    return s.post("classify", {"inputs": "still here"}).status_code == 200


def test_serve_closes_stalled_connections_and_answers_meanwhile(served):
    stalled = [connect(served.port) for _ in range(3)]
    stalled[1].sendall(b"POST /v1/classify HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-ty")
    stalled[2].sendall(b"POST /v1/classify HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
                       b"content-length: 1000\r\n\r\n{\"inputs\": \"sl")
    started = time.perf_counter()
    while time.perf_counter() - started < HEADER_TIMEOUT:
        assert classifies(served)
    for sock in stalled[:2]:
        sock.settimeout(HEADER_TIMEOUT + SLACK - (time.perf_counter() - started))
        assert closed(sock)
    status, headers, body = response(stalled[2])
    assert status == 408 and json.loads(body)["error_type"] == "timeout", body
    assert time.perf_counter() - started < HEADER_TIMEOUT + SLACK
    for sock in stalled:
        sock.close()
    assert classifies(served)
    assert 'bertforge_errors_total{kind="timeout"} 1' in httpx.get(served.url + "/metrics").text


def test_serve_answers_a_body_cut_by_its_content_length(served):
    """bertforge serve answers the body that Content-Length names (here JSON cut short: a 422 saying where), then
    refuses the rest."""
    with connect(served.port) as sock:
        sock.sendall(post(b'{"inputs": "cut"}', 10, b"/v1/classify"))
        (status, _, body), (status_next, _, _) = responses(sock, 2)
        error = json.loads(body)
        assert status == 422 and error["error"] == "the body is not JSON at line 1, column 11: Expecting value", body
        assert status_next == 400 and closed(sock)
    assert classifies(served)


def test_serve_refuses_connections_over_max_connections(served):
    time.sleep(0.2)  # the connections of the requests before closed on the server's side too
    held = [connect(served.port) for _ in range(8)]
    for sock in held:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        assert response(sock)[0] == 200
    with connect(served.port) as extra:
        status, headers, body = response(extra)
        assert status == 503 and json.loads(body)["error_type"] == "too_many_connections", body
        assert headers.get("retry-after") == "1", headers
    for sock in held:
        sock.sendall(b"GET /health HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n")
        assert response(sock)[0] == 200
        sock.close()
    time.sleep(0.2)
    assert classifies(served)


def test_the_deadlines_and_the_limit_are_in_help_and_range_checked(capsys):
    from bertforge.cli import main

    assert main(["serve", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for flag, default in (("--header-timeout SECONDS", 10), ("--body-timeout SECONDS", 10),
                          ("--send-timeout SECONDS", 30),
                          ("--max-connections MAX_CONNECTIONS", 1024)):
        assert re.search(rf"{flag} [^-]*\(default: {default}\)", text), text
    for flags in (["--header-timeout", "0"], ["--body-timeout", "-1"], ["--send-timeout", "0"],
                  ["--max-connections", "0"]):
        assert main(["serve", "model", *flags]) == 2
        error = capsys.readouterr().err
        assert flags[0] in error and error.count("\n") == 1, error


def test_the_access_log_names_the_path_without_the_query():
    """uvicorn's access log record (client, method, target, version, status) passes its logger's filters with the
    path only."""
    log_paths_only()
    log_paths_only()  # once is enough: not a second filter
    logger = logging.getLogger("uvicorn.access")
    assert sum(isinstance(f, PathOnly) for f in logger.filters) == 1
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 0, '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "POST", "/v1/embeddings?api_key=SECRET", "1.1", 401), None)
    assert logger.filter(record)
    assert record.getMessage() == '127.0.0.1:5000 - "POST /v1/embeddings HTTP/1.1" 401'
