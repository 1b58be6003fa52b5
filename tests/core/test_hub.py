"""Models by name (bertforge/core/hub.py), downloaded by the real huggingface_hub client from the Hub of
tests/hub_server.py (the `hub` fixture): only the files bertforge reads, at a revision, from the cache offline, and
each failure said in one line."""

import json
import shutil
from pathlib import Path

import pytest
import torch

from bertforge.core.errors import BertforgeError
from bertforge.core.hub import hub_origin, model_folder
from bertforge.model.architectures.bert import BertForMaskedLM
from bertforge.text.tokenizer import BertTokenizer
from tests.conftest import one_line_error
from tests.hub_server import TOKEN

NAME = "org/tiny-bert"
READ = {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"}


def repo_folder(hub_bert, tmp_path, files=None, config=None):
    """A copy of the checkpoint with `files` added, changed (path -> bytes or a JSON object) or removed (None), and
    `config` entries added to its config.json."""
    folder = tmp_path / f"repo-{len(list(tmp_path.glob('repo-*')))}"
    shutil.copytree(hub_bert, folder)
    if config:
        files = {"config.json": {**json.loads((hub_bert / "config.json").read_text()), **config}, **(files or {})}
    for name, content in (files or {}).items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if content is None:
            path.unlink()
        else:
            path.write_bytes(content if isinstance(content, bytes) else json.dumps(content).encode())
    return folder


def fill_mask_logits(folder):
    tokenizer = BertTokenizer.from_pretrained(folder)
    model = BertForMaskedLM.from_pretrained(folder).eval()
    with torch.no_grad():
        return model(**tokenizer(["the film was [MASK] ."], return_tensors="pt")).logits


def error(call, *args, **kwargs) -> str:
    with pytest.raises(BertforgeError) as excinfo:
        call(*args, **kwargs)
    return one_line_error(excinfo)


def test_a_name_gives_the_files_bertforge_reads_and_the_outputs_of_the_folder(hub, hub_bert, tmp_path):
    sentence_files = {"modules.json": [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models."
                                        "Transformer"}, {"idx": 1, "name": "1", "path": "1_Pooling",
                                                         "type": "sentence_transformers.models.Pooling"}],
                      "1_Pooling/config.json": {"word_embedding_dimension": 32, "pooling_mode_mean_tokens": True},
                      "sentence_bert_config.json": {"max_seq_length": 128, "do_lower_case": False}}
    commit = hub.add(NAME, repo_folder(hub_bert, tmp_path, {
        **sentence_files, "pytorch_model.bin": b"a pickle", "flax_model.msgpack": bytes(3 * 2**20),
        "README.md": b"# tiny", "modeling_tiny.py": b"import os", "onnx/model.onnx": b"onnx"}))
    folder = model_folder(NAME)
    assert sorted(hub.downloaded()) == sorted(f"{NAME}/{name}" for name in {
        *READ, "modules.json", "1_Pooling/config.json", "sentence_bert_config.json"})
    assert folder.name == commit and hub_origin(folder) == {"repo_id": NAME, "commit": commit}
    assert torch.equal(fill_mask_logits(folder), fill_mask_logits(hub_bert))
    asked = len(hub.requests)
    assert model_folder(NAME) == folder
    assert [method for method, _ in hub.requests[asked:]] == ["GET"]  # a cached name: which commit main is now


def test_an_existing_path_wins_over_a_name_and_is_not_a_snapshot(hub, hub_bert, tmp_path, monkeypatch):
    hub.add(NAME, hub_bert)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(hub_bert, tmp_path / NAME)
    assert model_folder(NAME) == tmp_path.joinpath(NAME).relative_to(tmp_path) and hub.requests == []
    assert hub_origin(NAME) is None
    assert "a revision picks one of a Hub repository's" in error(model_folder, NAME, revision="main")


def test_a_path_that_is_no_name(hub):
    for name in ("./missing", "/no/such/folder", "a/b/c", "bad--name"):
        assert error(model_folder, name) == f"{name}: no such model folder (nor a Hub name, org/name)"
    assert hub.requests == []


def test_weights_false_fetches_the_config_and_tokenizer_only(hub, hub_bert):
    hub.add(NAME, hub_bert)
    model_folder(NAME, weights=False)
    assert sorted(hub.downloaded()) == sorted(f"{NAME}/{name}" for name in READ - {"model.safetensors"})


def test_a_branch_a_tag_and_a_commit(hub, hub_bert, tmp_path):
    first = hub.add(NAME, hub_bert)
    hub.tag(NAME, "v1", first)
    second = hub.add(NAME, repo_folder(hub_bert, tmp_path, config={"layer_norm_eps": 1e-5}))
    dev = hub.add(NAME, repo_folder(hub_bert, tmp_path, config={"layer_norm_eps": 1e-6}), branch="dev")
    for revision, commit in ((None, second), ("main", second), ("v1", first), ("dev", dev), (first, first)):
        folder = model_folder(NAME, revision=revision)
        assert folder.name == commit, revision
    eps = {r: json.loads((model_folder(NAME, revision=r) / "config.json").read_text())["layer_norm_eps"]
           for r in ("v1", "main", "dev")}
    assert eps == {"v1": 1e-12, "main": 1e-5, "dev": 1e-6}


def test_offline_a_cached_name_is_read_from_the_cache_without_the_network(hub, hub_bert):
    commit = hub.add(NAME, hub_bert)
    hub.tag(NAME, "v1", commit)
    online = model_folder(NAME), model_folder(NAME, revision="v1")
    asked = len(hub.requests)
    hub.offline()
    assert (model_folder(NAME), model_folder(NAME, revision="v1"), model_folder(NAME, revision=commit)) == \
        (*online, online[0])
    assert len(hub.requests) == asked


def test_offline_not_cached(hub, hub_bert):
    hub.add(NAME, hub_bert)
    model_folder(NAME, weights=False)
    hub.offline()
    message = error(model_folder, NAME)  # the weights were never downloaded
    assert message.startswith(f"{NAME}: no such model folder, and HF_HUB_OFFLINE is set but the Hugging Face cache "
                              "(") and message.endswith("does not hold the model's files: download it once with "
                                                        "HF_HUB_OFFLINE unset")
    assert error(model_folder, "org/other").startswith("org/other: no such model folder, and HF_HUB_OFFLINE is set")


def test_the_hub_down(hub, hub_bert):
    hub.add(NAME, hub_bert)
    cached = model_folder(NAME)
    hub.stop()
    assert model_folder(NAME) == cached
    message = error(model_folder, "org/other")
    assert message.startswith(f"org/other: no such model folder, and the Hub ({hub.url}) cannot be reached nor "
                              "does the Hugging Face cache (") and \
        message.endswith(") hold the model's files: check the path or the connection")


def test_no_such_repository_or_revision(hub, hub_bert):
    hub.add(NAME, hub_bert)
    assert error(model_folder, "org/missing") == ("org/missing: no such model folder, nor a Hub repository of that "
                                                  "name (a private one needs a token: log in (`hf auth login`) or "
                                                  "set HF_TOKEN)")
    assert error(model_folder, NAME, revision="v9") == (f"{NAME}: the Hub repository has no revision 'v9' (a branch, "
                                                        "tag or commit)")


def test_a_private_repository_needs_the_token(hub, hub_bert, monkeypatch):
    from huggingface_hub import constants

    commit = hub.add(NAME, hub_bert, private=True)
    assert "no such model folder, nor a Hub repository" in error(model_folder, NAME)
    assert error(model_folder, NAME, token="hf_wrong") == (
        f"{NAME}: the Hub refused the token (given, HF_TOKEN or the saved login): log in (`hf auth login`) or set "
        "HF_TOKEN with a valid one")
    assert model_folder(NAME, token=TOKEN).name == commit
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    assert model_folder(NAME).name == commit
    monkeypatch.delenv("HF_TOKEN")
    Path(constants.HF_TOKEN_PATH).write_text(TOKEN)  # the saved login
    assert model_folder(NAME).name == commit


def test_a_gated_repository_needs_the_token(hub, hub_bert):
    hub.add(NAME, hub_bert, gated=True)
    assert error(model_folder, NAME) == (f"{NAME}: a gated Hub repository: accept its conditions on {hub.url}/{NAME}, "
                                         "then log in (`hf auth login`) or set HF_TOKEN")
    assert (model_folder(NAME, token=TOKEN) / "model.safetensors").is_file()


def test_a_repository_s_code_is_never_run_nor_fetched(hub, hub_bert, tmp_path):
    auto_map = {"AutoConfig": "configuration_tiny.TinyConfig", "AutoModel": "modeling_tiny.TinyModel"}
    hub.add(NAME, repo_folder(hub_bert, tmp_path, {"modeling_tiny.py": b"raise SystemExit('ran')"},
                              config={"auto_map": auto_map}))
    assert error(model_folder, NAME) == (f"{NAME}: its config.json names the repository's own Python code (auto_map: "
                                         "AutoConfig, AutoModel); bertforge never runs a repository's code")
    assert not any(name.endswith((".py", ".safetensors")) for name in hub.downloaded())
    tokenizer_config = json.loads((hub_bert / "tokenizer_config.json").read_text())
    hub.add("org/coded-tokenizer", repo_folder(hub_bert, tmp_path, {"tokenizer_config.json": {
        **tokenizer_config, "auto_map": {"AutoTokenizer": ["tokenization_tiny.TinyTokenizer", None]}}}))
    assert "its tokenizer_config.json names the repository's own Python code (auto_map: AutoTokenizer)" in \
        error(model_folder, "org/coded-tokenizer", weights=False)


def test_a_repository_without_the_files_a_model_needs(hub, hub_bert, tmp_path):
    hub.add("org/no-config", repo_folder(hub_bert, tmp_path, {"config.json": None}))
    assert error(model_folder, "org/no-config") == ("org/no-config: the Hub repository holds no config.json: not a "
                                                    "model that bertforge reads")
    hub.add("org/no-weights", repo_folder(hub_bert, tmp_path, {"model.safetensors": None}))
    assert error(model_folder, "org/no-weights", trust_pickle=True) == (
        "org/no-weights: the Hub repository holds no model.safetensors or pytorch_model.bin")
    assert model_folder("org/no-weights", weights=False).is_dir()


def test_a_pickle_only_where_trusted_and_without_safetensors(hub, hub_bert, tmp_path):
    from bertforge.model.formats.checkpoint import read_weights

    weights = read_weights(hub_bert)[0]
    pickled = tmp_path / "pickled.bin"
    torch.save(weights, pickled)
    hub.add("org/pickled", repo_folder(hub_bert, tmp_path, {"model.safetensors": None,
                                                            "pytorch_model.bin": pickled.read_bytes()}))
    assert error(model_folder, "org/pickled") == (
        "org/pickled: the Hub repository holds no model.safetensors (a pickled pytorch_model.bin can run code: it is "
        "fetched only with trust_pickle=True)")
    assert "org/pickled/pytorch_model.bin" not in hub.downloaded()
    folder = model_folder("org/pickled", trust_pickle=True)
    assert torch.equal(read_weights(folder, trust_pickle=True)[0]["bert.embeddings.word_embeddings.weight"],
                       weights["bert.embeddings.word_embeddings.weight"])
    hub.add(NAME, repo_folder(hub_bert, tmp_path, {"pytorch_model.bin": pickled.read_bytes()}))
    model_folder(NAME, trust_pickle=True)
    assert f"{NAME}/pytorch_model.bin" not in hub.downloaded()  # safetensors first
