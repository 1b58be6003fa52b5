"""Several models behind one `bertforge serve` (serve.py): the models a command line names (`--model [NAME=]MODEL`,
again for each, or `--models FILE`, a JSON list of {"name", "model", "revision", "task", limits...}), each with its
own limits (the server-wide flags as defaults), and the `Fleet` the server answers for: the models by name, the
default one (the first, or the one marked "default"), which also answers the unprefixed routes.

Each model is served under /models/NAME: every route of a one-model server (bertforge's /v1/..., TEI's /embed,
/predict, ..., OpenAI's /v1/embeddings and /v1/models, /health, /info) is there too for that model alone; OpenAI's
/v1/embeddings picks the model by the request's `model` field (an unknown name: OpenAI's 404, code
model_not_found). A model that cannot be loaded answers 503 naming it while the others serve; /health reports each.
"""

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import BertforgeError
from ..core.io import read_json

PREFIX = "/models/"  # /models/NAME/<route>: a route of the model NAME alone
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9][A-Za-z0-9._-]*)?")  # a URL path's part; org/name too
TEXTS = ("name", "model", "revision", "task")
# a model's own settings in --models FILE, under the flags' names (their dest): the kind of value each takes
SETTINGS = {"max_input_tokens": "count", "max_batch_tokens": "count", "max_concurrent": "count",
            "max_client_batch": "count", "workers": "count", "max_wait_ms": "number", "auto_truncate": "boolean",
            "int8": "boolean", "bf16": "boolean", "backend": ("torch", "onnx")}
KEYS = (*TEXTS, "default", *SETTINGS)


@dataclass
class ModelSpec:
    """One model to serve, as given: `model` a folder or a Hub name, `settings` its own values of the flags
    (SETTINGS, and revision and task); `source` where it was given, which its errors name."""

    name: str
    model: str
    source: str
    default: bool = False
    settings: dict = field(default_factory=dict)


def model_specs(args) -> list[ModelSpec]:
    """The models of `--model` (each `[NAME=]MODEL`) or `--models FILE`, their names checked and unique, and the
    default first; a one-line error naming the flag or the file otherwise."""
    given, file = args.models_given or [], args.models_file
    if args.model is not None:
        raise BertforgeError(f"serve: MODEL ({args.model}) with --model{'s' if file else ''}: give every model with "
                             "--model, or the models in --models FILE")
    if given and file:
        raise BertforgeError(f"--models {file} with --model: give the models in one of them")
    if args.revision is not None or args.task is not None:  # one model's: each has its own in the file
        flag = "--revision" if args.revision is not None else "--task"
        raise BertforgeError(f"{flag} with --model{'s' if file else ''}: give each model's own \"{flag[2:]}\" in "
                             "--models FILE")
    specs = [flag_spec(value) for value in given] if given else file_specs(file)
    seen = {}
    for spec in specs:
        if spec.name in seen:
            raise BertforgeError(f"{spec.source}: the name {spec.name!r} is {seen[spec.name]}'s already: name each "
                                 f"model once ({'NAME=MODEL' if given else 'its name'})")
        seen[spec.name] = spec.source
    defaults = [spec for spec in specs if spec.default]
    if len(defaults) > 1:
        raise BertforgeError(f"--models {file}: {defaults[0].source} and {defaults[1].source} are both the default: "
                             "mark one")
    return defaults + [spec for spec in specs if not spec.default]


def flag_spec(value: str) -> ModelSpec:
    """--model's `[NAME=]MODEL`: a name before `=` (one NAME takes, with no path of its own), else the model's."""
    source = f"--model {value}"
    name, equals, model = value.partition("=")
    if not (equals and NAME.fullmatch(name)):
        name, model = default_name(value, source), value
    if not model:
        raise BertforgeError(f"{source}: no model after {name}=")
    return ModelSpec(name, model, source)


def default_name(model: str, source: str) -> str:
    """The name a model is served by where none is given: a folder's own name, a Hub model's name (org/name)."""
    path = Path(model)
    name = path.resolve().name if path.exists() else model.rstrip("/")
    if not (path.exists() or NAME.fullmatch(name)):  # a path that is not there: its last name
        name = path.name
    if not NAME.fullmatch(name):
        how = "--model NAME=MODEL" if source.startswith("--model ") else 'give it a "name"'
        raise BertforgeError(f"{source}: {name!r} cannot name a model in a URL (letters, digits, . _ -, one org/): "
                             f"{how}")
    return name


def file_specs(file: Path) -> list[ModelSpec]:
    """--models FILE: a JSON list, an entry per model: {"model", "name", "revision", "task", "default", and
    settings (SETTINGS)}, or the model alone as a text."""
    try:
        entries = read_json(file, expect=None)
    except BertforgeError as e:
        raise BertforgeError(f"--models {e}") from None
    if not isinstance(entries, list) or not entries:
        raise BertforgeError(f"--models {file}: expected a JSON list of models, each {{\"name\", \"model\", ...}}")
    return [file_spec(entry, f"--models {file}, entry {i + 1}") for i, entry in enumerate(entries)]


def file_spec(entry, source: str) -> ModelSpec:
    if isinstance(entry, str):
        entry = {"model": entry}
    if not isinstance(entry, dict):
        raise BertforgeError(f"{source}: expected an object {{\"name\", \"model\", ...}} or a model's name")
    unknown = [key for key in entry if key not in KEYS]
    if unknown:
        raise BertforgeError(f"{source}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    if not isinstance(entry.get("model"), str) or not entry["model"]:
        raise BertforgeError(f"{source}: \"model\" (a folder or a Hub name) is missing")
    for key in TEXTS:
        if key in entry and not isinstance(entry[key], str):
            raise BertforgeError(f"{source}: \"{key}\" must be a text")
    if not isinstance(entry.get("default", False), bool):
        raise BertforgeError(f"{source}: \"default\" must be true or false")
    name = entry.get("name")
    if name is None:
        name = default_name(entry["model"], source)
    elif not NAME.fullmatch(name):
        raise BertforgeError(f"{source}: \"name\" {name!r} cannot name a model in a URL (letters, digits, . _ -, "
                             "one org/)")
    settings = {key: checked(key, entry[key], source) for key in (*SETTINGS, "revision", "task") if key in entry}
    return ModelSpec(name, entry["model"], f"{source} ({name})", entry.get("default", False), settings)


def checked(key: str, value, source: str):
    kind = SETTINGS.get(key, "text")
    if kind == "count" and not (type(value) is int and value >= 1):
        raise BertforgeError(f"{source}: \"{key}\" must be a whole number of at least 1, not {value!r}")
    if kind == "number" and not (type(value) in (int, float) and value >= 0):
        raise BertforgeError(f"{source}: \"{key}\" must be a number, 0 or more, not {value!r}")
    if kind == "boolean" and not isinstance(value, bool):
        raise BertforgeError(f"{source}: \"{key}\" must be true or false, not {value!r}")
    if isinstance(kind, tuple) and value not in kind:
        raise BertforgeError(f"{source}: \"{key}\" must be one of {', '.join(kind)}, not {value!r}")
    return value


class Fleet:
    """The servers (server.Server, one per model: its pipeline, batcher and limits) by name; the first is the
    default, which answers the unprefixed routes too."""

    def __init__(self, servers: list):
        self.servers = {server.name: server for server in servers}
        self.default = servers[0]

    def __iter__(self):
        return iter(self.servers.values())

    def get(self, name: str):
        return self.servers.get(name)

    def names(self) -> str:
        return ", ".join(self.servers)

    def for_model(self, name: str | None):
        """The server of OpenAI's `model` field (None: the default); serve's 404 model_not_found otherwise."""
        from .guard import Refused

        if name is None:
            return self.default
        server = self.servers.get(name)
        if server is None:
            raise Refused(404, "model_not_found", f"model {name[:100]!r} does not exist on this server, which "
                                                  f"serves {self.names()} (GET /v1/models)")
        return server

    def unknown_prefix(self, path: str) -> str | None:
        """The model a /models/NAME/... path names where no model of that name is served; None otherwise."""
        if not path.startswith(PREFIX) or any(path.startswith(f"{PREFIX}{name}/") for name in self.servers):
            return None
        return path[len(PREFIX):].split("/", 1)[0][:100]

    def health(self) -> tuple[int, dict]:
        """Each model's state, and the server's: loading (503) until every model is loaded or has failed, then
        ok (200), degraded (200: some failed, the others serve) or failed (503: none serves)."""
        states = {name: server.state() for name, server in self.servers.items()}
        kinds = {state["status"] for state in states.values()}
        status = ("loading" if "loading" in kinds else "ok" if kinds == {"ok"} else "degraded" if "ok" in kinds
                  else "failed")
        return 503 if status in ("loading", "failed") else 200, {"status": status, "models": states}
