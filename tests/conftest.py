import os
from pathlib import Path

import pytest

from bertforge.tokenizer import BertTokenizer

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
