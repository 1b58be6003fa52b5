"""Models by name wherever a model is taken: each command and Python entry point given a Hub name (org/name) reads
the model of the same folder given as a path, and gives the same outputs; at a revision, offline from the cache,
and each failure one line through the CLI. The Hub is tests/hub_server.py's (the `hub` fixture), talked to by the
real huggingface_hub client."""

import json

import numpy as np
import pytest
import torch

import bertforge
from bertforge.cli import build_parser, main
from bertforge.core.errors import BertforgeError
from bertforge.model.architectures.registry import load_config
from bertforge.model.architectures.bert import BertForMaskedLM, BertForSequenceClassification
from bertforge.text.tokenizer import BertTokenizer
from tests.conftest import fine_tune, modernbert_tokenizer
from tests.hub_server import TOKEN
from tests.inference.test_pipelines import assert_same

NAME, CLASSIFIER = "org/tiny-bert", "org/tiny-sentiment"
MASKED = ["the film was [MASK] .", "it is not [MASK] ."]
REVIEWS = [("the film was good", "pos"), ("the film was bad", "neg"), ("it is good", "pos"), ("it is bad", "neg")]


@pytest.fixture(scope="session")
def hub_classifier(tmp_path_factory, hub_bert):
    """A tiny sentiment classifier as transformers writes one (random weights, labels neg and pos), with the
    tokenizer of `hub_bert`."""
    import transformers

    folder = tmp_path_factory.mktemp("hub-classifier")
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (folder / name).write_bytes((hub_bert / name).read_bytes())
    config = transformers.BertConfig.from_pretrained(hub_bert, id2label={0: "neg", 1: "pos"},
                                                     label2id={"neg": 0, "pos": 1})
    torch.manual_seed(0)
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    return folder


@pytest.fixture
def named(hub, hub_bert, hub_classifier) -> dict:
    """Both tiny models on the Hub: name -> the commit of its main branch."""
    return {NAME: hub.add(NAME, hub_bert), CLASSIFIER: hub.add(CLASSIFIER, hub_classifier)}


@pytest.fixture
def reviews(tmp_path):
    path = tmp_path / "reviews.csv"
    path.write_text("text,label\n" + "".join(f"{text},{label}\n" for text, label in REVIEWS * 2))
    return path


def printed(capsys, *argv) -> str:
    """What `bertforge ARGV` prints on stdout (it must succeed)."""
    capsys.readouterr()
    assert main(list(map(str, argv))) == 0, capsys.readouterr().err
    return capsys.readouterr().out


def failure(capsys, *argv) -> str:
    """The one line `bertforge ARGV` fails with (exit 2), without its 'bertforge: error: ' (after the client's
    progress bar, where a download began)."""
    capsys.readouterr()
    assert main(list(map(str, argv))) == 2
    *bars, line = capsys.readouterr().err.rstrip("\n").split("\n")
    assert line.startswith("bertforge: error: ") and all("Fetching" in bar for bar in bars), (bars, line)
    return line.removeprefix("bertforge: error: ")


def logits(model, tokenizer, texts):
    with torch.no_grad():
        return model(**tokenizer(texts, padding=True, return_tensors="pt")).logits


def test_python_entry_points_read_a_name_as_its_folder(named, hub_bert, hub_classifier):
    assert_same(bertforge.pipeline("fill-mask", model=NAME)(MASKED),
                bertforge.pipeline("fill-mask", model=hub_bert)(MASKED))
    assert bertforge.pipeline(model=CLASSIFIER)(MASKED) == bertforge.pipeline(model=hub_classifier)(MASKED)
    tokenizer = BertTokenizer.from_pretrained(NAME)
    assert tokenizer(MASKED)["input_ids"] == BertTokenizer.from_pretrained(hub_bert)(MASKED)["input_ids"]
    assert load_config(NAME) == load_config(str(hub_bert))  # pretrain --config, suite --model random:NAME
    for cls, name, folder in ((BertForMaskedLM, NAME, hub_bert), (BertForSequenceClassification, CLASSIFIER,
                                                                    hub_classifier)):
        assert torch.equal(logits(cls.from_pretrained(name), tokenizer, MASKED),
                           logits(cls.from_pretrained(folder), tokenizer, MASKED))


def test_a_name_is_never_read_as_a_path_in_the_current_folder(hub, hub_bert, tmp_path, monkeypatch):
    """`BertTokenizer.from_pretrained("bert-base-uncased")` read the tokenizer.json of the current folder."""
    hub.add("bert-base-uncased", hub_bert)
    monkeypatch.chdir(modernbert_tokenizer(tmp_path / "elsewhere"))  # another tokenizer.json, here
    assert BertTokenizer.from_pretrained("bert-base-uncased").get_vocab() == \
        BertTokenizer.from_pretrained(hub_bert).get_vocab()
    with pytest.raises(BertforgeError, match="^bert-base-cased: no such model folder, nor a Hub repository"):
        BertTokenizer.from_pretrained("bert-base-cased")


def test_a_revision_and_a_token_in_python(hub, hub_bert, tmp_path):
    first = hub.add(NAME, hub_bert, private=True)
    hub.tag(NAME, "v1", first)
    config = json.loads((hub_bert / "config.json").read_text())
    changed = tmp_path / "changed"
    changed.mkdir()
    for file in hub_bert.iterdir():
        (changed / file.name).write_bytes(file.read_bytes())
    (changed / "config.json").write_text(json.dumps({**config, "layer_norm_eps": 0.5}))
    hub.add(NAME, changed)
    assert BertForMaskedLM.from_pretrained(NAME, token=TOKEN).config.layer_norm_eps == 0.5
    for revision in ("v1", first):
        assert BertForMaskedLM.from_pretrained(NAME, revision=revision, token=TOKEN).config.layer_norm_eps == 1e-12
        assert bertforge.pipeline("fill-mask", model=NAME, revision=revision, token=TOKEN).folder.name == first
        assert BertTokenizer.from_pretrained(NAME, revision=revision, token=TOKEN).get_vocab() == \
            BertTokenizer.from_pretrained(hub_bert).get_vocab()


def test_info_predict_evaluate_features_and_tokenizer_by_name(named, hub_bert, hub_classifier, reviews, tmp_path,
                                                             capsys):
    by_name, by_path = (printed(capsys, "info", NAME).splitlines(), printed(capsys, "info", hub_bert).splitlines())
    assert by_name[0].startswith("folder:") and by_name[0].endswith(f"/snapshots/{named[NAME]}")
    assert by_name[1:] == [f"hub:           {NAME}, commit {named[NAME]}", *by_path[1:]]
    for command in (["predict", "text-classification", "--text", "the film was good", "--text", "it is bad"],
                    ["evaluate", "text-classification", "--dev", reviews, "--no-progress"]):
        assert printed(capsys, *command, "--model", CLASSIFIER) == printed(capsys, *command, "--model", hub_classifier)
    texts = tmp_path / "texts.txt"
    texts.write_text("the film was good\nit is not bad\n")
    for model, out in ((NAME, tmp_path / "name.npy"), (hub_bert, tmp_path / "path.npy")):
        printed(capsys, "features", "--model", model, "--input", texts, "--out", out, "--level", "sentence",
                "--layers", "-1", "--no-progress")
    assert np.array_equal(np.load(tmp_path / "name.npy"), np.load(tmp_path / "path.npy"))
    assert printed(capsys, "tokenizer", "encode", "--vocab", NAME, "the film") == \
        printed(capsys, "tokenizer", "encode", "--vocab", hub_bert, "the film")


def test_finetune_from_a_name_records_the_commit(hub, hub_bert, reviews, tmp_path):
    """The issue's first command: `finetune --model bert-base-uncased` said "neither a model size (tiny, ...)"."""
    commit = hub.add("bert-base-uncased", hub_bert)
    runs = {model: fine_tune("text-classification", model, tmp_path / f"run-{i}", "--train", reviews, "--dev",
                             reviews, "--epochs", "1")
            for i, model in enumerate(("bert-base-uncased", hub_bert))}
    named, local = (json.loads((run / "eval_results.json").read_text()) for run in runs.values())
    assert named["history"] == local["history"]
    extra = json.loads((runs["bert-base-uncased"] / "args.json").read_text())["extra"]
    assert extra["base_model"] == {"repo_id": "bert-base-uncased", "commit": commit}
    assert extra["arguments"]["model"] == "bert-base-uncased" and extra["model"].endswith(f"/snapshots/{commit}")
    card = (runs["bert-base-uncased"] / "best" / "README.md").read_text()
    assert f"- started from: `bert-base-uncased`, commit `{commit}`\n" in card
    assert json.loads((runs[hub_bert] / "args.json").read_text())["extra"]["base_model"] is None


def test_serve_by_name_at_a_revision(hub, named, hub_bert):
    pytest.importorskip("uvicorn")
    import httpx

    from bertforge.serving.serve import Server, create_app, served_model
    from tests.serving.test_connections import InProcess

    hub.tag(NAME, "v1", named[NAME])
    folder, task = served_model(build_parser("serve").parse_args(["serve", NAME, "--revision", "v1"]))
    assert (folder.name, task) == (named[NAME], "fill-mask")
    s = InProcess("h11", app=create_app(Server(folder, task)))
    try:
        while httpx.get(s.url + "/health").status_code != 200:
            pass
        info = httpx.get(s.url + "/info").json()
        assert (info["model"], info["model_id"], info["model_sha"]) == (NAME, NAME, named[NAME])
        answer = httpx.post(s.url + "/v1/fill-mask", json={"inputs": MASKED}).json()
    finally:
        s.stop()
    assert_same(answer, bertforge.pipeline("fill-mask", model=hub_bert)(MASKED))


def test_export_and_convert_by_name(hub, named, hub_bert, tmp_path, capsys):
    pytest.importorskip("onnxruntime")
    from bertforge.model.formats.checkpoint import read_weights

    printed(capsys, "export", "onnx", NAME, tmp_path / "onnx")
    assert_same(bertforge.pipeline("fill-mask", model=tmp_path / "onnx", backend="onnx")(MASKED),
                bertforge.pipeline("fill-mask", model=hub_bert)(MASKED))
    weights = read_weights(hub_bert)[0]
    pickled = tmp_path / "pickled"
    pickled.mkdir()
    for name in ("config.json", "tokenizer.json", "tokenizer_config.json"):
        (pickled / name).write_bytes((hub_bert / name).read_bytes())
    torch.save(weights, pickled / "pytorch_model.bin")
    hub.add("org/pickled", pickled)
    printed(capsys, "convert", "org/pickled", tmp_path / "converted")  # converting is trusting the pickle
    converted = read_weights(tmp_path / "converted")[0]
    assert all(torch.equal(converted[k], v) for k, v in weights.items() if k in converted)


def test_distill_from_a_teacher_by_name(named, hub_classifier, reviews, tmp_path, capsys):
    results = {}
    for teacher in (CLASSIFIER, hub_classifier):
        out = tmp_path / f"run-{len(results)}"
        printed(capsys, "distill", "text-classification", "--teacher", teacher, "--student", "tiny", "--train",
                reviews, "--dev", reviews, "--out", out, "--recipe", "fixed", "--epochs", "1", "--no-progress",
                "--cache-dir", tmp_path / f"cache-{len(results)}")
        results[teacher] = json.loads((out / "eval_results.json").read_text())
    assert results[CLASSIFIER]["history"] == results[hub_classifier]["history"]
    extra = json.loads((tmp_path / "run-0" / "args.json").read_text())["extra"]
    assert extra["base_model"] == {"repo_id": CLASSIFIER, "commit": named[CLASSIFIER]}


def test_data_and_pretrain_from_a_name(hub, named, tmp_path, capsys):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the film was good .\nit is not bad .\n\n" * 40)
    printed(capsys, "data", "create", "--input", corpus, "--vocab", NAME, "--out", tmp_path / "rows",
            "--max-length", "32", "--dupe-factor", "1", "--no-progress")
    printed(capsys, "pretrain", "--data", tmp_path / "rows", "--init-from", NAME, "--out", tmp_path / "run",
            "--steps", "2", "--batch-size", "4", "--no-progress")
    extra = json.loads((tmp_path / "run" / "args.json").read_text())["extra"]
    assert extra["base_model"] == {"repo_id": NAME, "commit": named[NAME]}


def test_offline_a_cached_name_works_without_the_hub(hub, named, hub_bert, capsys):
    online = printed(capsys, "info", NAME)
    pipe = bertforge.pipeline("fill-mask", model=NAME)
    asked = len(hub.requests)
    hub.offline()
    hub.stop()
    assert printed(capsys, "info", NAME) == online
    assert bertforge.pipeline("fill-mask", model=NAME)(MASKED) == pipe(MASKED)
    assert len(hub.requests) == asked


@pytest.fixture
def client_bars():
    """The client's bars on, as in a fresh process (tests/model/test_bert.py turns transformers', and so the
    client's, off for the whole session when it is imported)."""
    from huggingface_hub.utils import are_progress_bars_disabled, disable_progress_bars, enable_progress_bars

    were_off = are_progress_bars_disabled()
    enable_progress_bars()
    yield
    if were_off:
        disable_progress_bars()


def test_a_download_shows_the_client_s_bars_unless_no_progress(hub, hub_bert, tmp_path, capfd, client_bars):
    texts = tmp_path / "texts.txt"
    texts.write_text("the film\n")
    for name, flags, shown in (("org/quiet", ["--no-progress"], False), ("org/shown", [], True)):
        hub.add(name, hub_bert)
        argv = ["features", "--model", name, "--input", texts, "--out", tmp_path / "f.npy", "--level",
                "sentence", "--layers", "-1"]
        assert main(list(map(str, argv + flags))) == 0
        assert ("Fetching" in capfd.readouterr().err) == shown


def test_each_failure_is_one_line(hub, named, hub_bert, hub_classifier, tmp_path, capsys):
    assert failure(capsys, "info", "org/missing") == (
        "org/missing: no such model folder, nor a Hub repository of that name (a private one needs a token: log in "
        "(`hf auth login`) or set HF_TOKEN)")
    assert failure(capsys, "predict", "text-classification", "--model", CLASSIFIER, "--revision", "v9", "--text",
                   "x") == f"{CLASSIFIER}: the Hub repository has no revision 'v9' (a branch, tag or commit)"
    assert failure(capsys, "info", hub_bert, "--revision", "main") == (
        f"{hub_bert}: a local folder; a revision picks one of a Hub repository's")
    assert failure(capsys, "finetune", "text-classification", "--model", "./missing", "--out", tmp_path / "run",
                   "--train", tmp_path / "x.csv") == "./missing: no such model folder (nor a Hub name, org/name)"
    hub.add("org/private", hub_bert, private=True)
    assert "no such model folder, nor a Hub repository" in failure(capsys, "serve", "org/private")
    hub.add("org/gated", hub_bert, gated=True)
    assert failure(capsys, "export", "onnx", "org/gated", tmp_path / "out") == (
        f"org/gated: a gated Hub repository: accept its conditions on {hub.url}/org/gated, then log in (`hf auth "
        "login`) or set HF_TOKEN")
    hub.offline()
    assert failure(capsys, "distill", "text-classification", "--teacher", "org/elsewhere", "--student", "tiny",
                   "--train", tmp_path / "x.csv", "--out", tmp_path / "run").startswith(
        "org/elsewhere: no such model folder, and HF_HUB_OFFLINE is set but the Hugging Face cache (")
