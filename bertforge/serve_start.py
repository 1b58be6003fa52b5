"""What `bertforge serve` (serve.py) checks before it listens, so that a server that could never answer stops at
once with a one-line error instead of running: the model's files (its tokenizer, and the weights or the exported
ONNX model the backend reads) and the address (the socket is bound here and handed to uvicorn).
"""

import errno
import socket
from pathlib import Path

from .errors import BertforgeError


def check_model(folder: Path, backend: str, int8: bool):
    """A one-line error where the folder lacks what loading it in the background would need."""
    from .checkpoint import check_weights
    from .runtime import onnx_file
    from .tokenizer import BertTokenizer

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
