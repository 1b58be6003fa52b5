"""Models by name: `org/name` (or `name`) on the Hugging Face Hub, read through its own client, huggingface_hub.

`model_folder` turns what a user gives for a model into a folder: a path that exists is that folder; anything else
is a Hub repository whose files bertforge reads are downloaded into the Hugging Face cache (HF_HOME / HF_HUB_CACHE)
by `huggingface_hub.snapshot_download`, which also brings the rest: a revision (branch, tag or commit), the token
(given, else HF_TOKEN or the saved login), HF_HUB_OFFLINE=1 reading the cache alone, and its progress bars. A
cached name costs one request (which commit its revision is now) and nothing offline. Only the files bertforge
reads are fetched: the config, the tokenizer's and sentence-transformers' files, then the weights as safetensors,
or as a pickle only where the caller trusts one and the repository has no safetensors. Nothing a repository holds
is run: a config that names the repository's own Python code (`auto_map`) is refused, and no .py file is fetched.
The folder returned is a cache snapshot named by its commit (`hub_origin`), so that a run can record what it read.

`push` uploads a folder to a repository (made where missing, on a branch where given), with its model card.
Every failure of either is a BertforgeError of one line that says what to do.
"""

import re
import tempfile
from contextlib import nullcontext
from pathlib import Path

from .errors import BertforgeError
from .io import has_model_file, read_model_json

CONFIG = "config.json"
# What bertforge reads of a repository besides weights: the config, the tokenizer, sentence-transformers' modules.
READ = (CONFIG, "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "vocab.txt", "modules.json",
        "sentence_bert_config.json", "config_sentence_transformers.json", "*_Pooling/config.json",
        "*_Dense/config.json", "*_Normalize/config.json")
SAFETENSORS = ("model.safetensors", "model.safetensors.index.json", "model-*-of-*.safetensors",
               "*_Dense/model.safetensors")
PICKLE = ("pytorch_model.bin",)
CODE_KEY = "auto_map"  # a config's classes from the repository's own Python files (transformers' remote code)
CODE_CONFIGS = (CONFIG, "tokenizer_config.json")
SNAPSHOT = re.compile(r"models--(?P<repo>[^/]+)/snapshots/(?P<commit>[0-9a-f]{40})")  # a cache snapshot's path
LOGIN = "log in (`hf auth login`) or set HF_TOKEN"


def model_folder(name, revision: str | None = None, token: str | None = None, weights: bool = True,
                 trust_pickle: bool = False) -> Path:
    """The folder of the model `name`: a path that exists, as is; else the Hub repository `name` at `revision`
    (default: its main branch), its files that bertforge reads in the Hugging Face cache, downloaded where missing.
    `weights=False` fetches the config and the tokenizer alone; `trust_pickle` lets a repository without
    safetensors give its pytorch_model.bin (read later only as trusted weights)."""
    path = Path(name)
    if path.exists():
        if revision is not None:
            raise BertforgeError(f"{name}: a local folder; a revision picks one of a Hub repository's")
        return path
    repo_id = str(name)
    if not is_repo_id(repo_id):
        raise BertforgeError(f"{name}: no such model folder (nor a Hub name, org/name)")
    folder = snapshot(repo_id, revision, token, READ)
    if not has_model_file(folder / CONFIG, folder):
        raise BertforgeError(f"{repo_id}: the Hub repository holds no {CONFIG}: not a model that bertforge reads")
    for file in CODE_CONFIGS:
        code = read_model_json(folder / file, folder).get(CODE_KEY) if has_model_file(folder / file, folder) else None
        if code:
            raise BertforgeError(f"{repo_id}: its {file} names the repository's own Python code ({CODE_KEY}: "
                                 f"{', '.join(code) if isinstance(code, dict) else code}); bertforge never runs a "
                                 "repository's code")
    if weights:
        commit = folder.name  # the files of the commit the names were read at, whatever the branch is now
        if not any(snapshot(repo_id, commit, token, SAFETENSORS).glob("model*.safetensors*")):
            if not trust_pickle:
                raise BertforgeError(f"{repo_id}: the Hub repository holds no model.safetensors (a pickled "
                                     "pytorch_model.bin can run code: it is fetched only with trust_pickle=True)")
            if not any(snapshot(repo_id, commit, token, PICKLE).glob(PICKLE[0])):
                raise BertforgeError(f"{repo_id}: the Hub repository holds no model.safetensors or {PICKLE[0]}")
    return folder


def progress_bars(shown: bool):
    """The client's download bars, shown or (`bertforge COMMAND --no-progress`) hidden while a command runs: a
    context."""
    if shown:
        return nullcontext()
    from huggingface_hub.utils import disable_progress_bars

    return disable_progress_bars()


def is_repo_id(name: str) -> bool:
    """Whether `name` is spelled as a Hub repository's id: `name` or `org/name`."""
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return False
    return True


def snapshot(repo_id: str, revision: str | None, token: str | None, patterns) -> Path:
    """The cache snapshot of `repo_id` at `revision` holding the files `patterns` match, downloaded where missing
    (HF_HUB_OFFLINE: from the cache alone); the client's errors said in one line."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import (GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError,
                                        RepositoryNotFoundError, RevisionNotFoundError)

    try:
        return Path(snapshot_download(repo_id, revision=revision, token=token, allow_patterns=list(patterns)))
    except GatedRepoError:
        raise BertforgeError(f"{repo_id}: a gated Hub repository: accept its conditions on "
                             f"{constants.ENDPOINT}/{repo_id}, then {LOGIN}") from None
    except RepositoryNotFoundError:
        raise BertforgeError(f"{repo_id}: no such model folder, nor a Hub repository of that name (a private one "
                             f"needs a token: {LOGIN})") from None
    except RevisionNotFoundError:
        raise BertforgeError(f"{repo_id}: the Hub repository has no revision {revision!r} (a branch, tag or "
                             "commit)") from None
    except LocalEntryNotFoundError:
        if constants.HF_HUB_OFFLINE:
            raise BertforgeError(f"{repo_id}: no such model folder, and HF_HUB_OFFLINE is set but the Hugging Face "
                                 f"cache ({constants.HF_HUB_CACHE}) does not hold the model's files: download it once "
                                 "with HF_HUB_OFFLINE unset") from None
        raise BertforgeError(f"{repo_id}: no such model folder, and the Hub ({constants.ENDPOINT}) cannot be reached "
                             f"nor does the Hugging Face cache ({constants.HF_HUB_CACHE}) hold the model's files: "
                             "check the path or the connection") from None
    except HfHubHTTPError as e:
        raise hub_refused(repo_id, e) from None


def hub_refused(repo_id: str, e) -> BertforgeError:
    """A request the Hub answered with an error: a token it does not take, or another status."""
    if e.response.status_code == 401:
        return BertforgeError(f"{repo_id}: the Hub refused the token (given, HF_TOKEN or the saved login): {LOGIN} "
                              "with a valid one")
    return BertforgeError(f"{repo_id}: the Hub answered {e.response.status_code}: {str(e).strip().splitlines()[0]}")


def hub_origin(folder) -> dict | None:
    """The Hub repository and commit of a cache snapshot folder ({"repo_id", "commit"}), which a run records;
    None for any other folder (or None)."""
    if not folder:
        return None
    found = SNAPSHOT.fullmatch("/".join(Path(folder).absolute().parts[-3:]))
    return None if found is None else {"repo_id": found["repo"].replace("--", "/"), "commit": found["commit"]}


def push_saved(saving, repo_id: str, private: bool = False, branch: str | None = None,
               token: str | None = None) -> str:
    """`push` of the files `saving.save_pretrained(folder)` writes (a model's or a tokenizer's `push_to_hub`),
    through a temporary folder; the commit's URL."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / repo_id.rsplit("/", 1)[-1]
        saving.save_pretrained(folder)
        return push(folder, repo_id, private, branch, token)


def push(folder, repo_id: str, private: bool = False, branch: str | None = None, token: str | None = None,
         card: str | None = None, leave_out=()) -> str:
    """Upload the files of `folder` (but those named in `leave_out`) to the Hub repository `repo_id`, made where
    missing (private if asked), in one commit on `branch` (made from main where missing; default: main), with
    `card` as its README.md where given; the commit's URL. The token: given, else HF_TOKEN or the saved login."""
    from huggingface_hub import CommitOperationAdd, HfApi
    from huggingface_hub.errors import HfHubHTTPError

    folder = Path(folder)
    if not is_repo_id(repo_id) or "/" not in repo_id:
        raise BertforgeError(f"{repo_id}: not a Hub repository to push to (org/name, or your user name/name)")
    names = {"README.md", *leave_out} if card is not None else set(leave_out)
    files = [CommitOperationAdd(p.relative_to(folder).as_posix(), p) for p in sorted(folder.rglob("*"))
             if p.is_file() and p.relative_to(folder).as_posix() not in names]
    if card is not None:
        files.append(CommitOperationAdd("README.md", card.encode()))
    api = HfApi(token=token)
    try:
        api.create_repo(repo_id, private=private, exist_ok=True)
        if branch is not None:
            api.create_branch(repo_id, branch=branch, exist_ok=True)
        commit = api.create_commit(repo_id, files, commit_message=f"Upload {folder.name} with bertforge",
                                   revision=branch)
    except HfHubHTTPError as e:
        if e.response.status_code in (401, 403):
            raise BertforgeError(f"{repo_id}: pushing needs a token that may write there: {LOGIN} (a token with "
                                 "write access)") from None
        raise hub_refused(repo_id, e) from None
    except Exception as e:
        if not unreachable(e):
            raise
        from huggingface_hub import constants

        raise BertforgeError(f"{repo_id}: the Hub ({constants.ENDPOINT}) cannot be reached ({e}): nothing was "
                             "pushed; check the connection") from None
    return commit.commit_url


def unreachable(e: Exception) -> bool:
    """Whether `e` is the HTTP client's failure to reach the Hub: a TransportError of httpx, or of the fork of it
    that the client's version uses."""
    return any(kind.__name__ == "TransportError" for kind in type(e).__mro__)
