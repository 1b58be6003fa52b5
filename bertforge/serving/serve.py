"""`bertforge serve MODEL`: the checkpoint's pipeline behind an HTTP JSON API (FastAPI + uvicorn, the `serve` extra);
`bertforge serve --model A --model B` (or --models FILE): several, each under /models/NAME (models.py).

The application (its endpoints, /docs) is app.py's, the model behind it server.py's (Server, Shared); this module
is the command: its flags, the models they name, what is checked before listening, and the start.

A response is a list in input order, each item shaped as the matching `pipeline()` result. A QA context or a
text to tag (/v1/ner) longer than --max-input-tokens is cut into overlapping windows of that length, the whole
input within --max-batch-tokens (a 413 naming it otherwise, before any window is run); with "truncate": true,
/v1/ner tags a text's first window only, and the response's Truncated-Inputs header lists the inputs cut.

Concurrent requests are gathered into batches by a token budget (batcher.py). Errors are typed, as
{"error", "error_type"}: 413 over the size limits, 422 malformed input (naming the field), 429 queue full,
500 a model failure or a bug, 503 while the model loads; what guards the server against hostile requests is
guard.py's, against stalled connections connections.py's (a 408 for a body that stalls). A server
that could never answer (no weights, no model.onnx for --backend onnx, the port in use) stops before it listens
(start.py). SIGTERM stops accepting requests and finishes those in flight.
"""

import argparse
import logging
from pathlib import Path

from .models import Fleet, ModelSpec, model_specs
from ..model.architectures.registry import read_config
from ..core.errors import BertforgeError
from .routes import SERVED, served_task
from ..core.flags import (add_device_argument, add_revision_argument, count, header_token, host_names,
                          non_negative, old_spellings)
from ..core.hub import model_folder
from .guard import MAX_BODY
from .connections import add_connection_arguments, log_paths_only, protocol_class
from .start import (
    KEY_VARIABLE, allowed_hosts, api_key, check_limits, check_model, listening_socket, raise_file_limit, warn_if_open
)
from .server import BUCKETS, RETRY_AFTER, ROUTES, Server, Shared, client_left  # noqa: F401 (imported from here too)
from .app import add_status_routes, create_app, endpoint_handler  # noqa: F401 (imported from here too)

log = logging.getLogger("bertforge")


def add_serve_arguments(p):
    p.add_argument("model", nargs="?", help="a checkpoint folder (fine-tuned, pre-trained, or exported with `export "
                   "onnx`), or a Hub model's name (org/name); several models: --model or --models instead")
    p.add_argument("--model", action="append", dest="models_given", metavar="[NAME=]MODEL",
                   help="a model to serve, again for each (the first also answers the unprefixed routes), by its "
                        "NAME (else the folder's or the Hub model's name): on /models/NAME/..., and as OpenAI's "
                        "`model`; the flags below are every model's")
    p.add_argument("--models", type=Path, dest="models_file", metavar="FILE",
                   help="the models to serve, a JSON list of {\"name\", \"model\", \"revision\", \"task\", "
                        "\"default\": true, and any of max_input_tokens, max_batch_tokens, max_concurrent, "
                        "max_client_batch, max_wait_ms, workers, auto_truncate, backend, int8, bf16: that model's own "
                        "value of the flag}")
    add_revision_argument(p)
    p.add_argument("--task", help=f"one of {', '.join(SERVED)} (default: the checkpoint's head's; an encoder "
                                  f"alone serves sentence-embedding)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (0.0.0.0: every interface)")
    p.add_argument("--port", type=count(0, 65535), default=8000, help="TCP port to listen on")
    add_device_argument(p)
    p.add_argument("--backend", default="torch", choices=("torch", "onnx"), help="what runs the model")
    p.add_argument("--int8", action="store_true", help="int8 linear layers (torch) or the int8 ONNX model")
    p.add_argument("--bf16", action="store_true", help="bfloat16 autocast, the linear weights in bf16 (torch): about "
                   "2x fp32 on CPUs with AVX512-BF16 or AMX (BENCHMARKS.md, \"bf16 inference\")")
    p.add_argument("--max-input-tokens", "--max-length", type=count(1), dest="max_input_tokens",
                   help="tokens per input: a longer one gets a 413 unless its request sends \"truncate\": true, "
                        "which cuts it; QA contexts and texts to tag are windows of this length instead, the whole "
                        "input within --max-batch-tokens (default: the model's positions; QA: 384)")
    old_spellings(p._option_string_actions["--max-length"], "--max-length")
    p.add_argument("--max-batch-tokens", type=count(1), default=8192, help="tokens per request, all its inputs "
                   "together (more get a 413), and padded tokens per model batch")
    p.add_argument("--max-concurrent", "--max-concurrent-requests", type=count(1), default=512,
                   dest="max_concurrent", help="requests waiting or running; more get a 429")
    p.add_argument("--max-client-batch", "--max-client-batch-size", type=count(1), default=64,
                   dest="max_client_batch", help="inputs per request; more get a 413")
    p.add_argument("--auto-truncate", action="store_true", help="cut inputs over --max-input-tokens where a request "
                   "does not say \"truncate\" (and on /v1/embeddings, which cannot say it) instead of a 413")
    p.add_argument("--payload-limit", type=count(1), default=MAX_BODY, metavar="BYTES",
                   help="bytes of request body; more get a 413")
    p.add_argument("--max-wait-ms", type=non_negative, default=2.0, help="how long a batch waits for the next request "
                   "(each arrival restarts the wait, ten times at most)")
    p.add_argument("--threads", type=count(1), help="ONNX Runtime threads (torch: set OMP_NUM_THREADS)")
    key = p.add_mutually_exclusive_group()
    key.add_argument("--api-key", type=header_token, metavar="KEY", help="every request but GET /health must send "
                     f"Authorization: Bearer KEY, else a 401 (default: the environment variable {KEY_VARIABLE}, if "
                     "set; none: anyone who reaches the port). A key given here is visible to every user of this "
                     f"machine in the process list (ps): --api-key-file or {KEY_VARIABLE} keeps it out")
    key.add_argument("--api-key-file", type=Path, metavar="FILE", help="--api-key read from this file (around it "
                     "blanks and line ends are ignored), which keeps it out of the process list")
    p.add_argument("--allowed-hosts", type=host_names, metavar="NAMES", help="the Host header names answered, "
                   "comma-separated (a port is not part of a name), against DNS rebinding; others get a 421; *: any "
                   "(default: localhost, 127.0.0.1, ::1 and --host)")
    p.add_argument("--workers", type=count(1), default=1, help="model batches run at once, each in its own "
                   "thread; torch's threads are divided between them (default: 1)")
    add_connection_arguments(p)


def served_model(args) -> tuple[Path, str]:
    """The model folder (a Hub name's at --revision, in the Hugging Face cache) and the task a command line serves,
    its files and limits checked."""
    if args.model is None:
        raise BertforgeError("serve: no model: give MODEL, --model MODEL (again for each of several) or --models "
                             "FILE")
    folder = served_folder(args.model, args.revision)
    config = read_config(folder / "config.json")
    task = task_served(args.task, config, folder)
    check_limits(args, config, task)
    check_model(folder, args.backend, args.int8, args.bf16)
    return folder, task


def served_folder(model: str, revision: str | None) -> Path:
    folder = model_folder(model, revision)
    if not folder.is_dir():
        raise BertforgeError(f"{folder}: no such model folder")
    return folder


def task_served(given: str | None, config=None, folder=None) -> str:
    """The task a model is served as: `given` (--task), else its head's; a one-line error for one not served."""
    from ..inference.pipelines import ALIASES, head_task

    task = ALIASES.get(given, given) or head_task(config, folder)
    task = served_task(task)  # an encoder's feature-extraction is served as sentence-embedding
    if task not in SERVED:
        raise BertforgeError(f"--task {task!r}: serve answers {', '.join(SERVED)}")
    return task


def fleet_servers(args, shared: Shared) -> list[Server]:
    """A Server per model of --model / --models (models.model_specs), with its own settings over the flags'. What
    is wrong with the command line or the file (a setting, a task, a limit) stops the command with one line; a
    model whose folder is missing or cannot be served (no weights, ...) is kept as a failure that answers 503,
    while the others serve; where none can be served, that stops the command too."""
    servers, failures = [], []
    for spec in model_specs(args):
        settings = argparse.Namespace(**{**vars(args), **spec.settings})
        try:
            if settings.task is not None:
                task_served(settings.task)  # a task no route answers: the command line's mistake
        except BertforgeError as e:
            raise BertforgeError(f"{spec.source}: {e}") from None
        try:
            folder = served_folder(spec.model, settings.revision)
            config = read_config(folder / "config.json")
            task = task_served(settings.task, config, folder)
        except BertforgeError as e:
            servers.append(fleet_server(spec, settings, shared, spec.model, None, str(e)))
            failures.append(f"{spec.source}: {e}")
            continue
        try:
            check_limits(settings, config, task)
        except BertforgeError as e:
            raise BertforgeError(f"{spec.source}: {e}") from None
        try:
            check_model(folder, settings.backend, settings.int8, settings.bf16)
        except BertforgeError as e:
            servers.append(fleet_server(spec, settings, shared, folder, task, str(e)))
            failures.append(f"{spec.source}: {e}")
            continue
        servers.append(fleet_server(spec, settings, shared, folder, task))
    if len(failures) == len(servers):
        raise BertforgeError(f"no model can be served: {'; '.join(failures)}")
    for failure in failures:
        log.error(f"bertforge: {failure} (it answers 503; the other models serve)")
    return servers


def fleet_server(spec: ModelSpec, settings, shared: Shared, folder, task, load_error: str | None = None):
    return Server(folder, task, settings.max_batch_tokens, settings.max_concurrent, settings.max_wait_ms,
                  settings.max_client_batch, settings.workers, settings.auto_truncate, name=spec.name, shared=shared,
                  load_error=load_error, device=settings.device, backend=settings.backend, int8=settings.int8,
                  bf16=settings.bf16, max_length=settings.max_input_tokens, threads=settings.threads, batch_size=None)


def run_serve(args) -> int:
    """Check what can be checked before listening (the model's files, the limits, the address), then serve."""
    several = bool(args.models_given or args.models_file)
    if several:
        served = Fleet(fleet_servers(args, Shared()))
        server = served.default
    else:
        folder, task = served_model(args)
    key, hosts = api_key(args), allowed_hosts(args)
    try:
        import uvicorn
    except ImportError:
        raise BertforgeError("bertforge serve needs FastAPI and uvicorn: pip install -e '.[serve]'") from None
    if not several:
        server = served = Server(folder, task, args.max_batch_tokens, args.max_concurrent, args.max_wait_ms,
                                args.max_client_batch, args.workers, args.auto_truncate, device=args.device,
                                backend=args.backend, int8=args.int8, bf16=args.bf16, max_length=args.max_input_tokens,
                                threads=args.threads, batch_size=None)
    app = create_app(served, hosts, key, args.body_timeout, args.payload_limit)
    sock = listening_socket(args.host, args.port)
    warn_if_open(args.host, key, hosts)
    raise_file_limit(args.max_connections)
    stalled = lambda kind: server.metrics.inc("bertforge_errors_total", kind=kind)  # noqa: E731
    http = protocol_class(args.header_timeout, args.max_connections, server.count_refusal,
                          send_timeout=args.send_timeout, stalled=stalled)
    config = uvicorn.Config(app, host=args.host, port=args.port, log_level="info", timeout_graceful_shutdown=30,
                            http=http)
    log_paths_only()  # a query string (a client's ?api_key=...) is never logged
    uvicorn.Server(config).run(sockets=[sock])
    return 0
