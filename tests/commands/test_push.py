"""`bertforge push`: a model or a run's model on the Hub of tests/hub_server.py (the `hub` fixture), through the real
huggingface_hub client, with its model card; and downloadable by name afterwards."""

import json

import pytest

from bertforge.cli import main
from bertforge.commands.push import model_card
from bertforge.core.errors import BertforgeError
from bertforge.core.hub import model_folder, push
from bertforge.core.version import __version__
from tests.conftest import fine_tune, one_line_error
from tests.hub_server import TOKEN

BASE = "org/tiny-bert"


@pytest.fixture
def run(hub, hub_bert, tmp_path):
    """A fine-tuning run (your own data) from a model read by name: BASE."""
    hub.add(BASE, hub_bert)
    rows = [("the film was good", "pos"), ("the film was bad", "neg")] * 8
    for split, count in (("train", 16), ("dev", 4)):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + "".join(f"{t},{y}\n" for t, y in rows[:count]))
    return fine_tune("text-classification", model_folder(BASE), tmp_path / "run", "--train", tmp_path / "train.csv",
                     "--dev", tmp_path / "dev.csv", "--epochs", "1")


def test_push_a_run_with_its_model_card(hub, run, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert main(["push", str(run), "me/tiny-sentiment", "--branch", "dev", "--license", "apache-2.0"]) == 0
    assert capsys.readouterr().out.startswith(f"pushed {run / 'best'} to me/tiny-sentiment (dev): {hub.url}/")
    pushed = hub.files("me/tiny-sentiment", "dev")
    best = {p.name: p.read_bytes() for p in (run / "best").iterdir()}
    assert set(pushed) == {".gitattributes", *best} - {"COMPLETE"}
    assert all(pushed[name] == best[name] for name in best if name not in ("COMPLETE", "README.md"))
    assert set(hub.files("me/tiny-sentiment", "main")) == {".gitattributes"}
    results = json.loads((run / "eval_results.json").read_text())
    card = pushed["README.md"].decode()
    assert card == ("---\nbase_model: org/tiny-bert\nlibrary_name: transformers\nlicense: apache-2.0\n"
                    "pipeline_tag: text-classification\ntags:\n- bertforge\n- text-classification\n---\n\n"
                    + best["README.md"].decode())
    assert f"- started from: `org/tiny-bert`, commit `{hub.repos[BASE].refs['main']}`\n" in card  # the run's card
    assert f"| accuracy | {results['accuracy']:.4f} |" in card
    assert f"- command: `bertforge finetune text-classification --model {model_folder(BASE)} --out {run} " in card
    monkeypatch.delenv("HF_TOKEN")
    folder = model_folder("me/tiny-sentiment", revision="dev")
    assert (folder / "model.safetensors").read_bytes() == best["model.safetensors"]


def test_push_a_private_model_folder(hub, hub_bert):
    url = push(hub_bert, "me/private-bert", private=True, token=TOKEN)
    assert url == f"{hub.url}/me/private-bert/commit/{hub.repos['me/private-bert'].refs['main']}"
    with pytest.raises(BertforgeError):
        model_folder("me/private-bert")
    assert (model_folder("me/private-bert", token=TOKEN) / "config.json").read_bytes() == \
        (hub_bert / "config.json").read_bytes()
    assert "README.md" not in hub.files("me/private-bert")


def test_a_card_from_a_run_without_a_readme(hub_bert, tmp_path):
    run, model = tmp_path / "run", tmp_path / "run" / "final"
    model.mkdir(parents=True)
    (model / "config.json").write_bytes((hub_bert / "config.json").read_bytes())
    (model / "modules.json").write_text("[]")
    origin = {"repo_id": "org/base", "commit": "0" * 40}
    (run / "args.json").write_text(json.dumps({"extra": {
        "command": ["bertforge", "distill", "embeddings"], "base_model": origin,
        "family_options": {"dataset": "sentence-transformers/all-nli:pair"}}}))
    (run / "eval_results.json").write_text(json.dumps({"spearman": 0.5, "wall_time_s": 3.0}))
    assert model_card(model, run, "me/mini", None) == (
        "---\nbase_model: org/base\ndatasets:\n- sentence-transformers/all-nli\nlibrary_name: sentence-transformers\n"
        "pipeline_tag: sentence-similarity\ntags:\n- bertforge\n---\n\n# me/mini\n\nPushed with bertforge "
        f"{__version__}.\n\n- command: `bertforge distill embeddings`\n\n"
        "| metric | value |\n|---|---|\n| spearman | 0.5000 |\n\nBase model: `org/base`, commit `" + "0" * 40 + "`.\n")


def test_push_needs_a_token_that_may_write(hub, hub_bert, capsys):
    assert main(["push", str(hub_bert), "me/tiny"]) == 2
    assert capsys.readouterr().err.strip() == ("bertforge: error: me/tiny: pushing needs a token that may write there: "
                                               "log in (`hf auth login`) or set HF_TOKEN (a token with write access)")
    with pytest.raises(BertforgeError) as excinfo:
        push(hub_bert, "tiny", token=TOKEN)
    assert one_line_error(excinfo) == "tiny: not a Hub repository to push to (org/name, or your user name/name)"


def test_push_what_is_no_model(tmp_path, capsys):
    assert main(["push", str(tmp_path), "me/tiny"]) == 2
    assert capsys.readouterr().err.strip() == (f"bertforge: error: {tmp_path}: neither a model folder (config.json) "
                                               "nor a run folder (args.json)")


def test_a_push_with_the_hub_unreachable_is_one_line(hub, hub_bert, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    hub.stop()
    assert main(["push", str(hub_bert), "me/tiny-bert"]) == 2
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("bertforge")]
    assert len(said) == 1 and "Traceback" not in err, err
    assert said[0].startswith("bertforge: error: me/tiny-bert: the Hub (") and "cannot be reached" in said[0]
    assert said[0].endswith("nothing was pushed; check the connection")
