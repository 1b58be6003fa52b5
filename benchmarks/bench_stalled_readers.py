"""Clients that send requests but never read the answers, against `bertforge serve` on loopback (issue 33).

`python3 -m benchmarks.bench_stalled_readers [--connections 8] [--send-timeout 5] [--seconds 40]`; before the
flag: `--send-timeout 0 --repo OLD_CHECKOUT`

all-MiniLM-L6-v2 served with --max-input-tokens 128; each stalled client opens a connection with a 4 KiB receive
buffer, sends two pipelined /embed_all requests of 16 inputs of 128 tokens (about 1.7 MB of answer each) and reads
nothing. Every 3 s: the server's RSS, how long one good /embed request takes, and how many stalled connections
the server still holds; at the end the send_timeout count of /metrics and how long SIGTERM takes. Before
--send-timeout existed the stalled connections were held forever (with their answers in memory) and SIGTERM
waited for them.
"""

import argparse
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import httpx

from benchmarks.common import REPO, SHARED, machine

MINILM = SHARED / "models" / "all-MiniLM-L6-v2"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mb(pid: int) -> int:
    return int(re.search(r"VmRSS:\s+(\d+)", open(f"/proc/{pid}/status").read()).group(1)) >> 10


def still_open(sock) -> bool:
    """Reads what the server sent; False once it has closed the connection."""
    sock.settimeout(0.05)
    try:
        while sock.recv(1 << 20):
            pass
        return False
    except TimeoutError:
        return True
    except OSError:
        return False


def stalled_request(port: int, inputs: int) -> socket.socket:
    body = json.dumps({"inputs": [" ".join(["word"] * 126)] * inputs}).encode()
    request = (b"POST /embed_all HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
               b"content-length: %d\r\n\r\n" % len(body)) + body
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.connect(("127.0.0.1", port))
    sock.sendall(request * 2)
    return sock


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--connections", type=int, default=8)
    p.add_argument("--inputs", type=int, default=16, help="inputs per stalled request")
    p.add_argument("--send-timeout", type=float, default=5,
                   help="given to serve; 0: not given (a server from before the flag, with --repo)")
    p.add_argument("--repo", default=str(REPO), help="the checkout whose bertforge serves")
    p.add_argument("--seconds", type=float, default=40)
    args = p.parse_args()
    print(machine())
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": args.repo}
    timeout = ["--send-timeout", str(args.send_timeout)] if args.send_timeout else []
    server = subprocess.Popen([sys.executable, "-m", "bertforge", "serve", str(MINILM), "--port", str(port),
                               "--max-input-tokens", "128", *timeout], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        for _ in range(300):
            try:
                if httpx.get(url + "/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.3)
        print(f"RSS at start {rss_mb(server.pid)} MB")
        socks = [stalled_request(port, args.inputs) for _ in range(args.connections)]
        started = time.time()
        while time.time() - started < args.seconds:
            time.sleep(3)
            asked = time.time()
            status = httpx.post(url + "/embed", json={"inputs": "still here"}, timeout=60).status_code
            held = sum(still_open(s) for s in socks)
            print(f"t={asked - started:5.1f} s  RSS {rss_mb(server.pid)} MB  good request {status} in "
                  f"{time.time() - asked:.2f} s  stalled connections held {held}/{args.connections}", flush=True)
        counted = re.search(r'kind="send_timeout"\} (\d+)', httpx.get(url + "/metrics").text)
        print(f"send_timeout counted: {counted.group(1) if counted else 0}")
    finally:
        asked = time.time()
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(45)
            print(f"SIGTERM: stopped in {time.time() - asked:.1f} s")
        except subprocess.TimeoutExpired:
            server.kill()
            print("SIGTERM: still running after 45 s (killed)")


if __name__ == "__main__":
    main()
