"""The tutorial's script of docs/transformers.md, as it stands there: bertforge's Auto classes read
`bert-base-uncased` (a tiny BERT that transformers wrote, served under that name by the local Hub, or the folder
itself), and transformers' Trainer trains, evaluates and saves the model; bertforge and transformers read the folder
it ends with to the same logits."""

import math

import pytest
import torch

from bertforge import AutoModelForSequenceClassification, AutoTokenizer
from tests.conftest import REPO
from tests.docs.test_commands import blocks

transformers = pytest.importorskip("transformers")
pytest.importorskip("datasets")
pytest.importorskip("accelerate")  # transformers' Trainer needs it

NAME = "bert-base-uncased"


def tutorial() -> str:
    """The script of docs/transformers.md."""
    return next(b.code for b in blocks(REPO / "docs" / "transformers.md") if "Trainer(" in b.code)


@pytest.mark.parametrize("by_name", [True, False], ids=["hub name", "folder"])
def test_the_tutorial_trains_evaluates_and_saves_a_folder_both_libraries_read(hub, hub_bert, tmp_path, monkeypatch,
                                                                               by_name):
    if by_name:
        hub.add(NAME, hub_bert)
    script = tutorial()
    assert f'model_name = "{NAME}"' in script
    monkeypatch.chdir(tmp_path)
    run = {}
    exec(compile(script if by_name else script.replace(f'"{NAME}"', repr(str(hub_bert))), "tutorial", "exec"), run)

    assert math.isfinite(run["training"].training_loss) and run["trainer"].state.global_step == 8
    assert math.isfinite(run["metrics"]["eval_loss"]) and 0 <= run["metrics"]["eval_accuracy"] <= 1
    texts = ["a good film", "it was bad, and dull"]
    batch = run["tokenizer"](texts, padding=True, return_tensors="pt")
    with torch.no_grad():
        trained = run["model"].eval()(**batch).logits
        ours = AutoModelForSequenceClassification.from_pretrained("sentiment")(**batch).logits
        theirs = transformers.AutoModelForSequenceClassification.from_pretrained("sentiment").eval()(**batch).logits
    assert torch.equal(ours, trained)
    torch.testing.assert_close(theirs, trained, atol=1e-5, rtol=1e-5)
    assert AutoTokenizer.from_pretrained("sentiment")(texts) == \
        dict(transformers.AutoTokenizer.from_pretrained("sentiment")(texts)) == run["tokenizer"](texts)
