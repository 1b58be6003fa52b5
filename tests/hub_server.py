"""A Hugging Face Hub in the test process, for the real `huggingface_hub` client: the routes it calls to download
(a repository's info, its file tree, `resolve` with HEAD and GET) and to upload (create-repo, preupload, commit,
branch), answered as the Hub answers them, errors included (the `X-Error-Code` the client turns into
RepositoryNotFoundError, RevisionNotFoundError, GatedRepoError, EntryNotFoundError).

Repositories are made from local folders (`HubServer.add`) or pushed through the client; every file is served
from memory, the large ones (weights) as the Hub serves LFS files (`X-Linked-Etag`, `X-Linked-Size`), and no answer
names Xet storage, so that the client downloads and uploads over plain HTTP. `connect` points the client at the
server (its endpoint is read from the environment when huggingface_hub is imported, so the module's constants are
set too) with a cache of its own and no token; the `hub` fixture (tests/conftest.py) does both.
"""

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import unquote, urlsplit

TOKEN = "hf_local_test_token"  # the one token this Hub knows: it reads private and gated repositories and writes
LFS_SUFFIXES = (".safetensors", ".bin", ".h5", ".msgpack", ".onnx")  # served as the Hub serves LFS files
FIRST_FILES = {".gitattributes": b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"}  # a new repository's

REPO = r"(?P<repo>[^/]+(?:/[^/]+)?)"
API = re.compile(rf"/api/models/{REPO}(?:/(?P<action>revision|tree|preupload|commit|branch)/(?P<rev>[^/]+))?")
RESOLVE = re.compile(rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)")


def git_oid(content: bytes) -> str:
    """A file's git blob id: the ETag of a file the Hub keeps in git."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class Repo:
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit -> {path: content}
    refs: dict[str, str] = field(default_factory=dict)  # branch or tag -> commit
    private: bool = False
    gated: bool = False

    def resolve(self, revision: str) -> str | None:
        """The commit a branch, tag or commit names (None: no such revision)."""
        return self.refs.get(revision) or (revision if revision in self.commits else None)

    def commit(self, branch: str, changes: dict[str, bytes | None], summary: str) -> str:
        """A new commit on `branch` (made where missing, from main): the files of its last commit with `changes`
        (path -> content, None to delete a file or a folder)."""
        parent = self.refs.get(branch) or self.refs.get("main")
        files = dict(self.commits.get(parent, {}))
        for path, content in changes.items():
            if content is None:
                files = {p: c for p, c in files.items() if p != path and not p.startswith(path.rstrip("/") + "/")}
            else:
                files[path] = content
        listing = json.dumps([parent, summary, sorted((p, git_oid(c)) for p, c in files.items())])
        sha = hashlib.sha1(listing.encode()).hexdigest()
        self.commits[sha] = files
        self.refs[branch] = sha
        return sha


class Refused(Exception):
    """An error answer: its status, the X-Error-Code the client reads (None: none) and the message."""

    def __init__(self, status: int, code: str | None, message: str, commit: str | None = None):
        super().__init__(message)
        self.status, self.code, self.commit = status, code, commit


class HubServer:
    """The Hub on 127.0.0.1 (a free port) in a thread, started and stopped as a context manager. `requests` holds
    every (method, path) it was asked, in order."""

    def __init__(self):
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler(self))
        self.http.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)
        self.monkeypatch = None

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def stop(self):
        """Stop answering (the network is down); the port is closed, so the client's connections are refused."""
        if self.thread.is_alive():
            self.http.shutdown()
        self.http.server_close()

    def connect(self, monkeypatch, home: Path):
        """Point huggingface_hub at this server, in this process and in the processes it starts: its cache under
        `home`, no token (neither HF_TOKEN nor a saved login), online."""
        from huggingface_hub import constants

        self.monkeypatch = monkeypatch
        for name, value in {"HF_ENDPOINT": self.url, "HF_HOME": str(home), "HF_HUB_CACHE": str(home / "hub")}.items():
            monkeypatch.setenv(name, value)
        for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
            monkeypatch.delenv(name, raising=False)
        files = {name: value.replace(constants.HF_HOME, str(home), 1) for name, value in vars(constants).items()
                 if isinstance(value, str) and value.startswith(constants.HF_HOME)}  # the token, the caches, ...
        for name, value in {**files, "HF_HUB_CACHE": str(home / "hub"), "HF_HUB_OFFLINE": False, "ENDPOINT": self.url,
                            "HUGGINGFACE_CO_URL_TEMPLATE": constants.HUGGINGFACE_CO_URL_TEMPLATE.replace(
                                constants.ENDPOINT, self.url)}.items():
            monkeypatch.setattr(constants, name, value)

    def offline(self):
        """HF_HUB_OFFLINE=1, as a user sets it (the client reads it when imported: its constant too)."""
        from huggingface_hub import constants

        self.monkeypatch.setenv("HF_HUB_OFFLINE", "1")
        self.monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)

    def add(self, repo_id: str, folder: Path, branch: str = "main", private: bool = False,
            gated: bool = False) -> str:
        """Commit every file under `folder` (paths relative to it) to `branch` of `repo_id` (made where missing,
        private or gated as asked, with the Hub's first commit); the commit."""
        with self.lock:
            repo = self.new_repo(repo_id, private, gated) if repo_id not in self.repos else self.repos[repo_id]
            files = {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
            return repo.commit(branch, files, f"add {folder.name}")

    def tag(self, repo_id: str, tag: str, commit: str):
        self.repos[repo_id].refs[tag] = commit

    def files(self, repo_id: str, revision: str = "main") -> dict[str, bytes]:
        """The files of a revision of a repository, by path."""
        repo = self.repos[repo_id]
        return repo.commits[repo.resolve(revision)]

    def downloaded(self) -> list[str]:
        """The files GET asked for, as repo/path, in order."""
        return [f"{unquote(m['repo'])}/{unquote(m['path'])}" for method, path in self.requests
                if method == "GET" and (m := RESOLVE.fullmatch(path))]

    def new_repo(self, repo_id: str, private: bool, gated: bool) -> Repo:
        repo = self.repos[repo_id] = Repo(private=private, gated=gated)
        repo.commit("main", FIRST_FILES, "initial commit")
        return repo

    # what the routes answer: (status, headers, body); a Refused for an error

    def repo(self, repo_id: str, token: str | None, read_files: bool = False, write: bool = False) -> Repo:
        """The repository, where the request may see it: a private one with the token only, and a gated one's
        files (not its info or file tree) too; writing needs the token."""
        repo = self.repos.get(repo_id)
        if repo is None or (repo.private and token != TOKEN):
            raise Refused(404 if token == TOKEN else 401, "RepoNotFound", "Repository not found")
        if write and token != TOKEN:
            raise Refused(401, None, "Invalid username or password.")
        if read_files and repo.gated and token != TOKEN:
            raise Refused(401, "GatedRepo",
                          f"Access to model {repo_id} is restricted. You must have access to it and be authenticated "
                          "to access it. Please log in.")
        return repo

    def commit_of(self, repo: Repo, revision: str) -> str:
        commit = repo.resolve(revision)
        if commit is None:
            raise Refused(404, "RevisionNotFound", f"Invalid rev id: {revision}")
        return commit

    def info(self, repo_id: str, revision: str, token) -> tuple:
        repo = self.repo(repo_id, token)
        commit = self.commit_of(repo, revision)
        return 200, {}, {"_id": repo_id, "id": repo_id, "modelId": repo_id, "sha": commit, "private": repo.private,
                         "gated": "manual" if repo.gated else False, "disabled": False, "downloads": 0, "likes": 0,
                         "tags": [], "siblings": [{"rfilename": p} for p in sorted(repo.commits[commit])]}

    def tree(self, repo_id: str, revision: str, token) -> tuple:
        """Every file and folder of a revision (the client asks for the whole tree, recursively)."""
        repo = self.repo(repo_id, token)
        files = repo.commits[self.commit_of(repo, revision)]
        folders = sorted({p.rsplit("/", 1)[0] for p in files if "/" in p})
        entries = [{"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "size": 0, "path": d}
                   for d in folders]
        for path, content in sorted(files.items()):
            entry = {"type": "file", "oid": git_oid(content), "size": len(content), "path": path}
            if path.endswith(LFS_SUFFIXES):
                entry["lfs"] = {"oid": hashlib.sha256(content).hexdigest(), "size": len(content), "pointerSize": 134}
            entries.append(entry)
        return 200, {}, entries

    def resolve(self, repo_id: str, revision: str, path: str, token) -> tuple:
        """A file, with the headers the client keeps it by: the commit, the ETag (an LFS file's content: its sha256,
        as X-Linked-Etag, with X-Linked-Size)."""
        repo = self.repo(repo_id, token, read_files=True)
        commit = self.commit_of(repo, revision)
        content = repo.commits[commit].get(path)
        if content is None:
            raise Refused(404, "EntryNotFound", f"{path} does not exist on \"{revision}\"", commit)
        headers = {"X-Repo-Commit": commit, "ETag": f'"{git_oid(content)}"', "Accept-Ranges": "bytes",
                   "Content-Type": "application/octet-stream"}
        if path.endswith(LFS_SUFFIXES):
            sha256 = hashlib.sha256(content).hexdigest()
            headers.update({"X-Linked-Etag": f'"{sha256}"', "X-Linked-Size": str(len(content))})
        return 200, headers, content

    def create(self, body: dict, token) -> tuple:
        if token != TOKEN:
            raise Refused(401, None, "Invalid username or password.")
        repo_id = "/".join(filter(None, (body.get("organization"), body["name"])))
        if repo_id in self.repos:  # with the repository's URL, as the Hub answers: the client reads it (exist_ok)
            message = "You already created this model repo"
            return 409, {"X-Error-Message": message}, {"error": message, "url": f"{self.url}/{repo_id}"}
        self.new_repo(repo_id, body.get("visibility") == "private" or bool(body.get("private")), False)
        return 200, {}, {"url": f"{self.url}/{repo_id}", "name": repo_id}

    def preupload(self, repo_id: str, revision: str, body: dict, token) -> tuple:
        """Every file goes inline in the commit ("regular"), none to LFS or Xet storage."""
        repo = self.repo(repo_id, token, write=True)
        files = repo.commits[self.commit_of(repo, revision)]
        return 200, {}, {"files": [{"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
                                    "oid": git_oid(files[f["path"]]) if f["path"] in files else None}
                                   for f in body["files"]]}

    def commit(self, repo_id: str, branch: str, lines: list[dict], token) -> tuple:
        repo = self.repo(repo_id, token, write=True)
        self.commit_of(repo, branch)
        changes, summary = {}, ""
        for line in lines:
            value = line["value"]
            if line["key"] == "header":
                summary = value["summary"]
            elif line["key"] == "file":
                changes[value["path"]] = base64.b64decode(value["content"])
            elif line["key"] in ("deletedFile", "deletedFolder"):
                changes[value["path"]] = None
            else:
                raise Refused(400, None, f"this Hub takes files inline only, not {line['key']}")
        sha = repo.commit(branch, changes, summary)
        return 200, {}, {"success": True, "commitOid": sha, "commitUrl": f"{self.url}/{repo_id}/commit/{sha}",
                         "pullRequestUrl": None}

    def branch(self, repo_id: str, branch: str, body: dict, token) -> tuple:
        repo = self.repo(repo_id, token, write=True)
        if branch in repo.refs:
            raise Refused(409, None, "Reference already exists")
        repo.refs[branch] = self.commit_of(repo, body.get("startingPoint") or "main")
        return 200, {}, {}

    def answer(self, method: str, path: str, body: bytes, token: str | None) -> tuple:
        if (match := RESOLVE.fullmatch(path)) and method in ("GET", "HEAD"):
            return self.resolve(unquote(match["repo"]), unquote(match["rev"]), unquote(match["path"]), token)
        if method == "POST" and path == "/api/repos/create":
            return self.create(json.loads(body), token)
        if method == "POST" and path == "/api/validate-yaml":
            return 200, {}, {"errors": [], "warnings": []}
        if match := API.fullmatch(path):
            repo_id, revision = unquote(match["repo"]), unquote(match["rev"] or "main")
            route = (method, match["action"] or "revision")
            if route in (("GET", "revision"), ("HEAD", "revision")):
                return self.info(repo_id, revision, token)
            if route == ("GET", "tree"):
                return self.tree(repo_id, revision, token)
            if route == ("POST", "preupload"):
                return self.preupload(repo_id, revision, json.loads(body), token)
            if route == ("POST", "commit"):
                return self.commit(repo_id, revision, [json.loads(line) for line in body.splitlines() if line], token)
            if route == ("POST", "branch"):
                return self.branch(repo_id, revision, json.loads(body or b"{}"), token)
        raise Refused(404, None, f"this Hub has no route {method} {path}")


def handler(hub: HubServer) -> type:
    class Handler(BaseHTTPRequestHandler):  # HTTP/1.0: a connection per request, so that `stop` ends them all
        def handle_one(self):
            path = urlsplit(self.path).path
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            auth = self.headers.get("Authorization", "")
            token = auth.removeprefix("Bearer ") if auth.startswith("Bearer ") else None
            with hub.lock:
                hub.requests.append((self.command, path))
                try:
                    if token not in (None, TOKEN):
                        raise Refused(401, None, "Invalid credentials in Authorization header")
                    status, headers, content = hub.answer(self.command, path, body, token)
                except Refused as e:
                    status, content = e.status, {"error": str(e)}
                    headers = {"X-Error-Message": str(e), **({"X-Error-Code": e.code} if e.code else {}),
                               **({"X-Repo-Commit": e.commit} if e.commit else {})}
            if not isinstance(content, bytes):
                content = json.dumps(content).encode()
                headers.setdefault("Content-Type", "application/json")
            self.send_response(status)
            for name, value in {**headers, "Content-Length": str(len(content))}.items():
                self.send_header(name, value)
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(content)

        do_GET = do_HEAD = do_POST = handle_one

        def log_message(self, *args):
            pass

    return Handler
