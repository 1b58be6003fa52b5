"""Sentence-transformers folders (bertforge/sentence_folder.py): read, pooled and written as sentence-transformers
does, checked against the sentence-transformers library itself (a test-only dependency)."""

import json
from pathlib import Path

import numpy as np
import pytest

from bertforge.core.errors import BertforgeError
from bertforge.model.formats.sentence_folder import (
    POOLINGS, SentencePooling, keep_sentence_folder, pool, read_sentence_folder, write_sentence_folder
)
from tests.conftest import one_line_error, place_file, require_shared

MODULE_TYPES = {"Transformer": "sentence_transformers.models.Transformer",
                "Pooling": "sentence_transformers.models.Pooling",
                "Normalize": "sentence_transformers.models.Normalize"}
LEGACY = {"cls": "pooling_mode_cls_token", "max": "pooling_mode_max_tokens", "mean": "pooling_mode_mean_tokens",
          "mean_sqrt_len_tokens": "pooling_mode_mean_sqrt_len_tokens",
          "weightedmean": "pooling_mode_weightedmean_tokens", "lasttoken": "pooling_mode_lasttoken"}


def sentence_transformers():
    return pytest.importorskip("sentence_transformers", reason="the reference: pip install sentence-transformers")


def write(path: Path, value) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(value))


def st_folder(root: Path, pooling="mean", normalize=True, legacy=True, max_seq_length=256, include_prompt=True,
              prompt=None) -> Path:
    """A sentence-transformers folder written by hand, in the layout the library reads: all-MiniLM-L6-v2's files
    linked in, then modules.json, 1_Pooling (legacy flags or the newer pooling_mode) and 2_Normalize."""
    source = require_shared("models", "all-MiniLM-L6-v2")
    root.mkdir(parents=True, exist_ok=True)
    for file in source.iterdir():
        if file.is_file():
            place_file(file, root / file.name)
    modules = [{"idx": 0, "name": "0", "path": "", "type": MODULE_TYPES["Transformer"]},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": MODULE_TYPES["Pooling"]}]
    if normalize:
        modules.append({"idx": 2, "name": "2", "path": "2_Normalize", "type": MODULE_TYPES["Normalize"]})
        (root / "2_Normalize").mkdir()
    write(root / "modules.json", modules)
    if legacy:
        config = {"word_embedding_dimension": 384, **{key: mode == pooling for mode, key in LEGACY.items()}}
    else:
        config = {"embedding_dimension": 384, "pooling_mode": pooling}
    write(root / "1_Pooling" / "config.json", {**config, "include_prompt": include_prompt})
    write(root / "sentence_bert_config.json", {"max_seq_length": max_seq_length, "do_lower_case": False})
    if prompt is not None:
        write(root / "config_sentence_transformers.json",
              {"prompts": {"query": prompt, "document": ""}, "default_prompt_name": "query"})
    return root


def test_plain_folder_declares_nothing(tmp_path):
    assert read_sentence_folder(tmp_path) is None


@pytest.mark.parametrize("legacy", [True, False])
def test_read_declared_pooling(tmp_path, legacy):
    folder = st_folder(tmp_path / "st", "lasttoken", normalize=False, legacy=legacy, max_seq_length=128,
                       include_prompt=False, prompt="query: ")
    assert read_sentence_folder(folder) == SentencePooling("lasttoken", False, 128, False, False, "query: ")
    folder = st_folder(tmp_path / "norm", "cls", normalize=True, legacy=legacy)
    assert read_sentence_folder(folder) == SentencePooling("cls", True, 256)


def test_pool_matches_sentence_transformers_pooling():
    """Every mode, with and without a prompt left out, on rows of different lengths padded to one batch."""
    sentence_transformers()
    import torch
    try:
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:  # before version 6
        from sentence_transformers.models import Pooling

    generator = torch.Generator().manual_seed(0)
    lengths = [7, 3, 12, 5]
    states = torch.randn(len(lengths), max(lengths), 16, generator=generator)
    mask = torch.tensor([[1] * n + [0] * (max(lengths) - n) for n in lengths])
    for mode in POOLINGS:
        for prompt_length in (0, 2):
            reference = Pooling(16, pooling_mode=mode, include_prompt=prompt_length == 0)
            features = {"token_embeddings": states.clone(), "attention_mask": mask}
            if prompt_length:
                features["prompt_length"] = prompt_length
            expected = reference(features)["sentence_embedding"].numpy()
            ours = np.stack([pool(states[i, :n].numpy(), mode, prompt_length) for i, n in enumerate(lengths)])
            np.testing.assert_allclose(ours, expected, rtol=1e-5, atol=1e-6, err_msg=f"{mode}, prompt {prompt_length}")


@pytest.mark.parametrize("pooling,normalize", [("mean", True), ("cls", False), ("max", True), ("lasttoken", False)])
def test_written_folder_loads_in_sentence_transformers(tmp_path, pooling, normalize):
    sentence_transformers()
    from sentence_transformers import SentenceTransformer

    folder = tmp_path / "model"
    folder.mkdir()
    for file in require_shared("models", "all-MiniLM-L6-v2").iterdir():
        place_file(file, folder / file.name)
    write_sentence_folder(folder, pooling, normalize, max_seq_length=64)
    assert read_sentence_folder(folder) == SentencePooling(pooling, normalize, 64)
    model = SentenceTransformer(str(folder), device="cpu")
    names = [type(module).__name__ for module in model]
    assert names == ["Transformer", "Pooling"] + (["Normalize"] if normalize else [])
    assert model[1].pooling_mode == pooling and model.max_seq_length == 64
    assert_same_embeddings(folder, sst2_sentences(8) + ["a text " * 100])
    write_sentence_folder(folder, pooling, normalize=not normalize)  # a second declaration replaces the first
    assert read_sentence_folder(folder).normalize is not normalize


def test_keep_sentence_folder_copies_the_declaration(tmp_path):
    source = st_folder(tmp_path / "st", "max", normalize=True, include_prompt=False, prompt="query: ")
    target = tmp_path / "copy"
    target.mkdir()
    assert keep_sentence_folder(source, target)
    assert read_sentence_folder(target) == read_sentence_folder(source)
    assert not keep_sentence_folder(tmp_path / "copy" / "1_Pooling", tmp_path / "other")


def test_write_needs_a_model_folder_and_a_known_pooling(tmp_path):
    with pytest.raises(BertforgeError) as e:
        write_sentence_folder(tmp_path)
    one_line_error(e, "config.json")
    write(tmp_path / "config.json", {"hidden_size": 8})
    with pytest.raises(BertforgeError) as e:
        write_sentence_folder(tmp_path, pooling="median")
    one_line_error(e, "pooling", "median")
    assert not (tmp_path / "modules.json").exists()


MALFORMED = [
    ("modules.json", {"not": "a list"}, "modules.json"),
    ("modules.json", [{"path": ""}], "modules.json: [0]"),
    ("modules.json", [{"type": "sentence_transformers.models.Transformer", "path": "0_BERT"}], "0_BERT"),
    ("modules.json", [{"type": "sentence_transformers.models.Transformer", "path": ""},
                      {"type": "sentence_transformers.models.Dense", "path": "1_Dense"}], "Dense"),
    ("modules.json", [{"type": "sentence_transformers.models.Transformer", "path": ""}], "no Pooling"),
    ("modules.json", [{"type": "sentence_transformers.models.Transformer", "path": ""},
                      {"type": "sentence_transformers.models.Pooling", "path": "../x"}], "outside"),
    ("1_Pooling/config.json", {"pooling_mode_mean_tokens": "yes"}, "pooling_mode_mean_tokens"),
    ("1_Pooling/config.json", {"pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": True},
     "pooling_mode_max_tokens"),
    ("1_Pooling/config.json", {"pooling_mode": "median"}, "pooling_mode"),
    ("1_Pooling/config.json", {"pooling_mode": "mean", "include_prompt": 0}, "include_prompt"),
    ("2_Normalize/config.json", {"module_input_name": "token_embeddings"}, "module_input_name"),
    ("sentence_bert_config.json", {"max_seq_length": "256"}, "max_seq_length"),
    ("sentence_bert_config.json", {"max_seq_length": 256, "do_lower_case": "no"}, "do_lower_case"),
    ("config_sentence_transformers.json", {"prompts": {}, "default_prompt_name": "query"}, "default_prompt_name"),
]


@pytest.mark.parametrize("name,value,expected", MALFORMED)
def test_malformed_files_give_one_line_naming_file_and_key(tmp_path, name, value, expected):
    folder = tmp_path / "st"
    folder.mkdir()
    write(folder / "modules.json", [{"idx": i, "name": str(i), "path": path, "type": MODULE_TYPES[kind]}
                                    for i, (kind, path) in enumerate([("Transformer", ""), ("Pooling", "1_Pooling"),
                                                                      ("Normalize", "2_Normalize")])])
    write(folder / "1_Pooling" / "config.json", {"pooling_mode_mean_tokens": True})
    write(folder / name, value)
    with pytest.raises(BertforgeError) as e:
        read_sentence_folder(folder)
    one_line_error(e, name.split("/")[-1], expected)
    (folder / name).write_text("{")
    with pytest.raises(BertforgeError) as e:
        read_sentence_folder(folder)
    one_line_error(e, name, "not valid JSON")


def sst2_sentences(count=None) -> list[str]:
    lines = require_shared("data", "glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0] for line in lines][:count]


def cosine_distances(ours: np.ndarray, theirs: np.ndarray) -> np.ndarray:
    norms = np.linalg.norm(ours, axis=1) * np.linalg.norm(theirs, axis=1)
    return 1 - (ours.astype(np.float64) * theirs).sum(1) / norms


def assert_same_embeddings(folder: Path, texts: list[str], **options) -> float:
    """bertforge's pipeline (its task from the folder) against SentenceTransformer(folder).encode; the largest
    cosine distance."""
    from sentence_transformers import SentenceTransformer

    import bertforge

    theirs = SentenceTransformer(str(folder), device="cpu").encode(texts, batch_size=32, convert_to_numpy=True)
    ours = np.array(bertforge.pipeline(model=folder)(texts, **options), dtype=np.float32)
    worst = float(cosine_distances(ours, theirs).max())
    assert worst < 1e-5
    np.testing.assert_allclose(ours, theirs, atol=2e-5 * float(np.abs(theirs).max()))
    return worst


SETTINGS = [(pooling, normalize) for pooling in ("mean", "cls", "max", "lasttoken") for normalize in (True, False)]


@pytest.mark.parametrize("pooling,normalize", SETTINGS)
def test_embeddings_equal_sentence_transformers(tmp_path, pooling, normalize):
    sentence_transformers()
    folder = st_folder(tmp_path / "st", pooling, normalize, legacy=normalize)
    assert_same_embeddings(folder, sst2_sentences(12) + ["a text " * 300])  # and one over max_seq_length


def test_default_prompt_left_out_of_the_pooling(tmp_path):
    sentence_transformers()
    for include_prompt in (False, True):
        folder = st_folder(tmp_path / str(include_prompt), "mean", include_prompt=include_prompt, prompt="query: ")
        assert_same_embeddings(folder, sst2_sentences(8))


@pytest.mark.slow
@pytest.mark.parametrize("pooling,normalize", SETTINGS)
def test_embeddings_equal_sentence_transformers_on_sst2_dev(tmp_path, pooling, normalize):
    sentence_transformers()
    folder = st_folder(tmp_path / "st", pooling, normalize, legacy=normalize)
    assert_same_embeddings(folder, sst2_sentences())


@pytest.mark.parametrize("pooling,normalize", [("max", False), ("lasttoken", True)])
def test_features_take_the_declaration_as_defaults(tmp_path, pooling, normalize):
    """`bertforge features --level sentence` on a sentence-transformers folder: the last layer, its pooling and
    Normalize, as SentenceTransformer.encode; a flag given wins."""
    sentence_transformers()
    from sentence_transformers import SentenceTransformer

    from bertforge.cli import main

    folder = st_folder(tmp_path / "st", pooling, normalize, include_prompt=False, prompt="query: ")
    texts = sst2_sentences(10)
    (tmp_path / "in.txt").write_text("\n".join(texts) + "\n", encoding="utf-8")
    arguments = ["features", "--model", str(folder), "--input", str(tmp_path / "in.txt"), "--level", "sentence",
                 "--no-progress", "--out"]
    assert main([*arguments, str(tmp_path / "declared.npy")]) == 0
    ours = np.load(tmp_path / "declared.npy")
    theirs = SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True)
    assert ours.shape == theirs.shape and cosine_distances(ours, theirs).max() < 1e-5
    np.testing.assert_allclose(ours, theirs, atol=2e-5 * float(np.abs(theirs).max()))
    assert main([*arguments, str(tmp_path / "cls.npy"), "--pooling", "cls", "--no-normalize", "--layers", "-2"]) == 0
    import torch
    import transformers

    tokenizer, model = (cls.from_pretrained(folder) for cls in (transformers.AutoTokenizer, transformers.AutoModel))
    prompt_tokens = len(tokenizer("query: ")["input_ids"]) - 1  # [CLS] query : (its [SEP] not counted)
    with torch.no_grad():
        states = [model(**tokenizer("query: " + text, return_tensors="pt"), output_hidden_states=True).hidden_states[-2]
                  for text in texts]
    expected = np.stack([s[0, prompt_tokens].numpy() for s in states])  # the first token after the prompt
    np.testing.assert_allclose(np.load(tmp_path / "cls.npy"), expected, atol=1e-4)


def test_convert_and_export_keep_the_declaration(tmp_path, tiny_model, capsys):
    """`bertforge convert` (a pickled folder, as older sentence-transformers models ship) and `export onnx` carry
    the files over, and writing over such a folder with --overwrite is allowed (its files are a model's)."""
    import torch
    from safetensors.torch import load_file

    from bertforge.cli import main

    source = tmp_path / "pickled"
    source.mkdir()
    for file in tiny_model.iterdir():
        if file.suffix != ".safetensors":
            place_file(file, source / file.name)
    torch.save(load_file(tiny_model / "model.safetensors"), source / "pytorch_model.bin")
    write_sentence_folder(source, "max", normalize=False, max_seq_length=32)
    for argv in (["convert", str(source), str(tmp_path / "out")],
                 ["export", "onnx", str(tmp_path / "out"), str(tmp_path / "onnx")]):
        for again in ([], ["--overwrite"]):  # the second time over the folder the first wrote
            assert main([*argv, *again]) == 0
            assert read_sentence_folder(argv[-1]) == SentencePooling("max", False, 32)
    capsys.readouterr()


def test_a_declared_length_over_the_model_positions_is_capped(tmp_path):
    import bertforge
    from bertforge.inference.features import extract_features

    folder = st_folder(tmp_path / "st", max_seq_length=1000)
    assert bertforge.pipeline(model=folder).max_length == 512
    assert extract_features(folder, ["a text " * 400], level="sentence").vectors.shape == (1, 384)


def test_token_ids_are_pooled_as_given(tmp_path):
    """Token ids (TEI's and OpenAI's inputs) are the model's input as given: no prompt is added to them, none
    left out of their pooling; a text gets the folder's prompt."""
    import bertforge
    from bertforge.text.tokenizer import BertTokenizer

    folder = st_folder(tmp_path / "st", "mean", include_prompt=True, prompt="query: ")
    embed = bertforge.pipeline(model=folder)
    prompted = BertTokenizer.from_pretrained(folder)("query: hello there")["input_ids"]
    by_ids, by_text = embed([prompted, "hello there"], dimensions=64)
    np.testing.assert_allclose(by_ids, by_text, atol=1e-6)
    assert len(by_ids) == 64 and np.linalg.norm(by_ids) == pytest.approx(1, abs=1e-6)


def test_a_dense_module_maps_the_pooled_vector(tmp_path):
    """A Dense module after the pooling (a distilled student's map to its teacher's dimension): written, read,
    applied by the pipeline as sentence-transformers applies it, carried over by keep_sentence_folder."""
    sentence_transformers()
    import bertforge
    from bertforge.model.formats.sentence_folder import Dense

    folder = tmp_path / "model"
    folder.mkdir()
    for file in require_shared("models", "all-MiniLM-L6-v2").iterdir():
        place_file(file, folder / file.name)
    rng = np.random.default_rng(0)
    weight, bias = rng.normal(0, 0.1, (100, 384)).astype(np.float32), rng.normal(0, 0.1, 100).astype(np.float32)
    write_sentence_folder(folder, "mean", normalize=True, max_seq_length=64, dense=(weight, bias))
    declared = read_sentence_folder(folder)
    assert declared.dense == (Dense("2_Dense", 384, 100),) and declared.dimension(384) == 100
    assert "Dense 384 -> 100" in declared.summary()
    assert_same_embeddings(folder, sst2_sentences(8))
    with pytest.raises(BertforgeError, match="over the model's 100"):
        bertforge.pipeline(model=folder)("a text", dimensions=200)
    copy = tmp_path / "copy"
    copy.mkdir()
    assert keep_sentence_folder(folder, copy)
    assert read_sentence_folder(copy) == declared
    dense_weights = [f / "2_Dense" / "model.safetensors" for f in (copy, folder)]
    assert dense_weights[0].read_bytes() == dense_weights[1].read_bytes()
    write_sentence_folder(folder, "mean", normalize=False)  # declared again without: the module's files go
    assert read_sentence_folder(folder).dense == () and not (folder / "2_Dense" / "config.json").exists()


@pytest.mark.parametrize("config, weights, expected", [
    ({"activation_function": "torch.nn.modules.activation.ReLU"}, None, "activation_function"),
    ({"use_residual": True}, None, "use_residual"),
    ({"in_features": 0}, None, "in_features"),
    ({}, {"linear.weight": np.zeros((4, 8), np.float32)}, "linear.weight"),
    ({}, "none", "model.safetensors"),
    ({"in_features": 16}, None, "the encoder gives 8"),
])
def test_malformed_dense_modules_give_one_line_naming_file_and_key(tmp_path, config, weights, expected):
    from safetensors.numpy import save_file

    from bertforge.model.formats.sentence_folder import load_dense

    folder = tmp_path / "st"
    write(folder / "config.json", {"hidden_size": 8})
    write_sentence_folder(folder, "mean", dense=(np.zeros((4, 8), np.float32), np.zeros(4, np.float32)))
    write(folder / "2_Dense" / "config.json", {"in_features": 8, "out_features": 4, **config})
    if weights == "none":
        (folder / "2_Dense" / "model.safetensors").unlink()
    elif weights is not None:
        save_file(weights, folder / "2_Dense" / "model.safetensors")
    with pytest.raises(BertforgeError) as e:
        load_dense(folder, read_sentence_folder(folder), 8)
    one_line_error(e, "2_Dense", expected)
