import json
import os
import shutil
from pathlib import Path

import pytest

from bertforge.text.tokenizer import BertTokenizer

REPO = Path(__file__).resolve().parent.parent


def shared_path(*parts) -> Path:
    """A path under the shared data folder (BERTFORGE_SHARED, else ../shared beside the repo)."""
    root = Path(os.environ.get("BERTFORGE_SHARED", REPO.parent / "shared"))
    return root.joinpath(*parts)


def require_shared(*parts) -> Path:
    """The shared path, or skip the test saying what is missing."""
    path = shared_path(*parts)
    if not path.exists():
        pytest.skip(f"needs {path} (set BERTFORGE_SHARED to the folder holding data/ and models/)")
    return path


def place_file(source: Path, target: Path) -> Path:
    """`source` as a file of another model folder: a hard link where the file system allows, else a copy (a model
    folder's files are read only from inside it, so a symbolic link out of it would be refused)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return target


def one_line_error(excinfo, *names) -> str:
    """The message of a BertforgeError: one line that names each of `names` (file names)."""
    message = str(excinfo.value)
    assert "\n" not in message, message
    for name in names:
        assert str(name) in message, message
    return message


def built_devices(monkeypatch) -> list:
    """The default device of every BertModel built from now on (the meta device allocates nothing)."""
    import torch

    from bertforge.model.bert import BertModel

    devices, build = [], BertModel.__init__

    def recording(self, *args, **kwargs):
        devices.append(torch.get_default_device().type)
        build(self, *args, **kwargs)
    monkeypatch.setattr(BertModel, "__init__", recording)
    return devices


def write_jsonl(path, rows) -> Path:
    """A JSON-lines file of the rows (objects)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def fine_tune(task: str, model, out, *flags) -> Path:
    """`bertforge finetune TASK` of a tiny model on small data: a high learning rate, no progress bars; the run
    folder."""
    from bertforge.cli import main

    assert main(["finetune", task, "--model", str(model), "--out", str(out), "--lr", "1e-3", "--no-progress",
                 *map(str, flags)]) == 0
    return Path(out)


@pytest.fixture
def minilm_dir() -> Path:
    return require_shared("models", "all-MiniLM-L6-v2")


@pytest.fixture
def uncased_vocab() -> Path:
    return require_shared("models", "all-MiniLM-L6-v2", "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizer:
    """The uncased vocabulary of bert-base-uncased (shared by the MiniLM checkpoint)."""
    return BertTokenizer.from_pretrained(require_shared("models", "all-MiniLM-L6-v2"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny pre-training checkpoint (random weights) with the real uncased vocabulary."""
    import torch

    from bertforge import BertConfig, BertForPreTraining

    vocab = require_shared("models", "all-MiniLM-L6-v2", "vocab.txt")
    folder = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    tokenizer = BertTokenizer.from_pretrained(vocab)
    BertForPreTraining(BertConfig.from_name("tiny", vocab_size=tokenizer.vocab_size)).save_pretrained(folder, tokenizer)
    return folder
