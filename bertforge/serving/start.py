"""What `bertforge serve` (serve.py) checks before it listens, so that a server that could never answer stops at
once with a one-line error instead of running: the model's files (its tokenizer, and the weights or the exported
ONNX model the backend reads), the limits (check_limits) and the address (the socket is bound here and handed to
uvicorn). Also who may ask: the API key (--api-key, --api-key-file or BERTFORGE_API_KEY) and the Host names
answered (--allowed-hosts), with a warning where the server listens beyond this machine without a key. And the
soft limit on open files, raised to hold --max-connections (connections.py).
"""

import argparse
import errno
import ipaddress
import logging
import os
import socket
from pathlib import Path

from ..core.errors import BertforgeError
from ..core.io import read_text
from ..core.flags import header_token

log = logging.getLogger("bertforge")
LOOPBACK = ("localhost", "127.0.0.1", "::1")
FILE_MARGIN = 256  # open files beside the connections: the model's, the listening socket, the threads', the logs
KEY_VARIABLE = "BERTFORGE_API_KEY"


def check_model(folder: Path, backend: str, int8: bool, bf16: bool = False):
    """A one-line error where the folder lacks what loading it in the background would need, or the precision
    asked for does not fit the backend."""
    from ..model.formats.checkpoint import check_weights
    from ..inference.runtime import check_precision, onnx_file
    from ..text.tokenizer import BertTokenizer

    check_precision(backend, int8, bf16)
    BertTokenizer.from_pretrained(folder)
    if backend == "onnx":
        onnx_file(folder, int8)
    else:
        check_weights(folder)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to host:port (not yet listening: uvicorn listens on it); a one-line error where it cannot be
    (the port in use, an address this machine does not have)."""
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
    except socket.gaierror as e:
        raise BertforgeError(f"--host {host}: not an address to listen on ({e.strerror})") from None
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn: a port in TIME_WAIT is free
    try:
        sock.bind(address)
    except OSError as e:
        sock.close()
        if e.errno == errno.EADDRINUSE:
            raise BertforgeError(f"--port {port}: in use on {host} (another server listens there)") from None
        raise BertforgeError(f"--host {host} --port {port}: cannot listen there ({e.strerror})") from None
    return sock


def api_key(args) -> str | None:
    """The key every request but /health must send: --api-key, else --api-key-file's first line, else the
    BERTFORGE_API_KEY environment variable; None: no key."""
    if args.api_key is not None:
        return args.api_key
    if args.api_key_file is not None:
        text, source = read_text(args.api_key_file).strip(), f"--api-key-file {args.api_key_file}"
    elif os.environ.get(KEY_VARIABLE) is not None:
        text, source = os.environ[KEY_VARIABLE].strip(), KEY_VARIABLE
    else:
        return None
    try:
        return header_token(text)
    except argparse.ArgumentTypeError as e:
        raise BertforgeError(f"{source}: the API key {e}") from None


def allowed_hosts(args) -> frozenset[str] | None:
    """The Host names answered (None: any): --allowed-hosts, else the loopback names and --host, unless --host is
    every interface's address (0.0.0.0, ::): an address to listen on, not one a client reaches the server by (a
    Host header naming it comes from a browser that another site sent to 0.0.0.0; it gets the Guard's 421)."""
    if args.allowed_hosts == ("*",):
        return None
    if args.allowed_hosts:
        every = next((name for name in args.allowed_hosts if is_every_interface(name)), None)
        if every is not None:
            raise BertforgeError(f"--allowed-hosts {every}: an address to listen on (every interface), not a name a "
                                 "client reaches this server by")
        return frozenset(args.allowed_hosts)
    host = args.host.lower().removeprefix("[").removesuffix("]")
    return frozenset((*LOOPBACK, *(() if is_every_interface(host) else (host,))))


def is_every_interface(host: str) -> bool:
    """Whether `host` is the address of every interface (0.0.0.0, ::), as given to --host or in a Host header."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host.removeprefix("[").removesuffix("]")).is_loopback
    except ValueError:
        return host.lower() == "localhost"


def warn_if_open(host: str, key: str | None, hosts: frozenset[str] | None):
    if is_loopback(host):
        return
    if key is None:
        log.warning(f"bertforge: warning: listening on {host} without an API key: whoever reaches this port can "
                    f"use the model (--api-key, --api-key-file or {KEY_VARIABLE})")
    if hosts is not None:
        log.warning(f"bertforge: answering requests whose Host is {', '.join(sorted(hosts))} only (--allowed-hosts "
                    "names others; *: any)")


def raise_file_limit(connections: int):
    """The soft limit on open files raised, within the hard limit, to hold `connections` and FILE_MARGIN more (a
    server that runs out of them can accept no connection, not even its own health check); a warning where the
    hard limit is lower."""
    try:
        import resource
    except ImportError:  # not on Windows
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + FILE_MARGIN
    if soft == resource.RLIM_INFINITY or soft >= wanted:
        return
    raised = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if raised > soft:
        resource.setrlimit(resource.RLIMIT_NOFILE, (raised, hard))
    if raised < wanted:
        log.warning(f"bertforge: warning: {raised} open files at most (ulimit -n), too few for --max-connections "
                    f"{connections} and the server's own {FILE_MARGIN}: lower --max-connections or raise the limit")


def check_limits(args, config, task: str):
    """One-line errors, before the model loads, for limits that the model or each other make impossible."""
    positions = config.max_tokens
    if args.max_input_tokens is not None and args.max_input_tokens > positions:
        raise BertforgeError(f"--max-input-tokens {args.max_input_tokens} is over the model's {positions} positions")
    per_input = args.max_input_tokens or min(positions, 384 if task == "question-answering" else positions)
    if args.max_batch_tokens < per_input:
        raise BertforgeError(f"--max-batch-tokens {args.max_batch_tokens} is below the {per_input} tokens that one "
                             f"input may have (--max-input-tokens): such a request could never be answered")
