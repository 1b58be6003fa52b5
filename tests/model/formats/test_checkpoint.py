"""Checkpoint folders: loading across classes, refusing pickles by default, and one-line errors for bad input."""

import json
import logging
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

import bertforge.model.architectures.bert as bf
from bertforge.model.formats.checkpoint import PICKLE, SAFETENSORS, SAFETENSORS_INDEX
from bertforge.model.architectures.config import BertConfig
from bertforge.core.errors import BertforgeError
from bertforge.model.architectures.task_heads import BertForSequenceClassification, BertForTokenClassification
from tests.conftest import built_devices, modernbert_folder, one_line_error

TINY = dict(vocab_size=500, hidden_size=64, num_hidden_layers=2, num_attention_heads=2, intermediate_size=256)


def save(model_class, folder, **config):
    torch.manual_seed(0)
    model = model_class(BertConfig(**{**TINY, **config})).eval()
    model.save_pretrained(folder)
    return model


def encoder_weights(model) -> dict:
    bert = model if isinstance(model, bf.BertModel) else model.bert
    return {k: v for k, v in bert.state_dict().items() if not k.startswith("pooler.")}


def assert_same_encoder(a, b):
    wa, wb = encoder_weights(a), encoder_weights(b)
    assert wa.keys() == wb.keys()
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


def bertforge_warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "bertforge"]


# ---------------------------------------------------------------------------------------------------------
# Loading across classes


def test_pretraining_folder_into_classifier_says_what_is_fresh_and_unused(tmp_path, caplog):
    source = save(bf.BertForPreTraining, tmp_path)
    with caplog.at_level(logging.WARNING, logger="bertforge"):
        model = BertForSequenceClassification.from_pretrained(tmp_path)
    assert_same_encoder(model, source)
    assert torch.equal(model.bert.pooler.dense.weight, source.bert.pooler.dense.weight)
    assert sorted(bertforge_warnings(caplog)) == [
        "classifier initialised fresh: fine-tune it before use",
        "masked-LM head in the checkpoint is not used by BertForSequenceClassification",
        "next-sentence head in the checkpoint is not used by BertForSequenceClassification",
    ]


def test_bare_encoder_folder_into_head_class(tmp_path, caplog):
    source = save(bf.BertModel, tmp_path)  # keys without the "bert." prefix
    with caplog.at_level(logging.WARNING, logger="bertforge"):
        model = BertForTokenClassification.from_pretrained(tmp_path, id2label={0: "O", 1: "B-PER", 2: "I-PER"})
    assert_same_encoder(model, source)
    assert model.classifier.out_features == 3
    assert bertforge_warnings(caplog) == ["classifier initialised fresh: fine-tune it before use",
                                          "pooler in the checkpoint is not used by BertForTokenClassification"]
    ids = torch.tensor([[2, 40, 41, 3, 0]])
    with torch.no_grad():
        assert torch.allclose(model.bert(ids, ids.ne(0)).last_hidden_state, source(ids, ids.ne(0)).last_hidden_state)


def test_head_folder_into_bare_encoder(tmp_path, caplog):
    source = save(bf.BertForMaskedLM, tmp_path)  # keys with the "bert." prefix, and no pooler
    with caplog.at_level(logging.WARNING, logger="bertforge"):
        model = bf.BertModel.from_pretrained(tmp_path)
    assert_same_encoder(model, source)
    assert bertforge_warnings(caplog) == ["pooler initialised fresh: fine-tune it before use",
                                          "masked-LM head in the checkpoint is not used by BertModel"]


def test_same_class_loads_silently(tmp_path, caplog):
    source = save(bf.BertForPreTraining, tmp_path)
    with caplog.at_level(logging.WARNING, logger="bertforge"):
        model = bf.BertForPreTraining.from_pretrained(tmp_path)
    assert bertforge_warnings(caplog) == []
    theirs = source.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items())


def test_old_layernorm_names_and_sharded_weights_load(tmp_path):
    """gamma/beta LayerNorm names (old checkpoints), split over two files with an index (large checkpoints)."""
    source = save(bf.BertForPreTraining, tmp_path)
    weights = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias", "LayerNorm.beta"): v
               for k, v in load_file(tmp_path / SAFETENSORS).items()}
    (tmp_path / SAFETENSORS).unlink()
    names = sorted(weights)
    shards = {"model-00001-of-00002.safetensors": names[:20], "model-00002-of-00002.safetensors": names[20:]}
    for file, keys in shards.items():
        save_file({k: weights[k] for k in keys}, tmp_path / file)
    index = {"metadata": {}, "weight_map": {k: file for file, keys in shards.items() for k in keys}}
    (tmp_path / SAFETENSORS_INDEX).write_text(json.dumps(index))
    model = bf.BertForPreTraining.from_pretrained(tmp_path)
    theirs = source.state_dict()
    assert all(torch.equal(v, theirs[k]) for k, v in model.state_dict().items())


# ---------------------------------------------------------------------------------------------------------
# Pickles run code when loaded: refused unless trusted


def test_pickle_only_folder_is_refused_unless_trusted(tmp_path):
    source = save(BertForSequenceClassification, tmp_path)
    torch.save(source.state_dict(), tmp_path / PICKLE)
    (tmp_path / SAFETENSORS).unlink()
    with pytest.raises(BertforgeError) as excinfo:
        BertForSequenceClassification.from_pretrained(tmp_path)
    assert "trust" in one_line_error(excinfo, tmp_path / PICKLE)

    model = BertForSequenceClassification.from_pretrained(tmp_path, trust_pickle=True).eval()
    ids = torch.tensor([[2, 40, 41, 3, 50, 3], [2, 7, 3, 0, 0, 0]])
    types = torch.tensor([[0, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, 0]])
    with torch.no_grad():
        assert torch.equal(model(ids, ids.ne(0), types).logits, source(ids, ids.ne(0), types).logits)


# ---------------------------------------------------------------------------------------------------------
# Bad input: one line naming the file and the problem


def test_missing_folder(tmp_path):
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertModel.from_pretrained(tmp_path / "nowhere")
    one_line_error(excinfo, tmp_path / "nowhere")


def test_folder_without_weights(tmp_path):
    BertConfig(**TINY).save(tmp_path / "config.json")
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertModel.from_pretrained(tmp_path)
    assert SAFETENSORS in one_line_error(excinfo, tmp_path)


def test_invalid_json_config(tmp_path):
    save(bf.BertModel, tmp_path)
    (tmp_path / "config.json").write_text('{\n  "hidden_size": 64,\n  "num_hidden_layers": 2\n  "vocab_size": 5\n}')
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertModel.from_pretrained(tmp_path)
    assert "JSON" in one_line_error(excinfo, f"{tmp_path / 'config.json'}:4")


def edit_config(folder, **changes):
    path = folder / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))


@pytest.mark.parametrize("changes,problem", [
    (dict(hidden_size=128, num_attention_heads=2), "has shape"),
    (dict(intermediate_size=512), "has shape"),
    (dict(vocab_size=600), "has shape"),
    (dict(num_hidden_layers=4), "layer 2, layer 3 not in the weights"),
    (dict(num_hidden_layers=1), "weights have layer 1 beyond the config"),
])
def test_config_that_contradicts_the_weights(tmp_path, changes, problem):
    save(bf.BertForPreTraining, tmp_path)
    edit_config(tmp_path, **changes)
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertForPreTraining.from_pretrained(tmp_path)
    message = one_line_error(excinfo, tmp_path / SAFETENSORS)
    assert problem in message and "config.json does not describe these weights" in message


@pytest.mark.parametrize("changes,file,culprit", [
    (dict(num_hidden_layers=1000, hidden_size=4096, num_attention_heads=16, intermediate_size=16384), "config.json",
     "num_hidden_layers 1000 is over 256"),
    (dict(max_position_embeddings=10**9), "config.json", "max_position_embeddings 1000000000 is over"),
    (dict(max_position_embeddings=1e9), "config.json", "max_position_embeddings must be a whole number"),
    (dict(num_labels=10**9, id2label=None, label2id=None), "config.json", "num_labels 1000000000 is over"),
    (dict(num_hidden_layers=60, hidden_size=4096, num_attention_heads=16, intermediate_size=16384), "config.json",
     "parameters, more than"),
    (dict(num_hidden_layers=200), SAFETENSORS, "num_hidden_layers 200, the weights have 2 layers"),
    (dict(max_position_embeddings=100_000), SAFETENSORS, "(max_position_embeddings 100000)"),
    (dict(id2label={"0": "a", "7": "b"}), "config.json", "id2label keys must be the label ids 0 to 1"),
])
def test_sizes_are_checked_before_the_model_is_built(tmp_path, monkeypatch, changes, file, culprit):
    """A config.json asking for more than its weights hold (or than any BERT) is refused before a tensor is
    allocated: only meta-device models (no memory) are built on the way to the error."""
    save(bf.BertForPreTraining, tmp_path)
    config = {**json.loads((tmp_path / "config.json").read_text()), **changes}
    (tmp_path / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    devices = built_devices(monkeypatch)
    for model_class in (bf.BertForPreTraining, BertForSequenceClassification, bf.BertModel):
        with pytest.raises(BertforgeError) as excinfo:
            model_class.from_pretrained(tmp_path)
        assert culprit in one_line_error(excinfo, tmp_path / file)
    assert set(devices) <= {"meta"}


def test_sizes_from_keywords_and_random_init(tmp_path):
    save(BertForSequenceClassification, tmp_path)
    with pytest.raises(BertforgeError, match="num_labels 1000000000 is over"):
        BertForSequenceClassification.from_pretrained(tmp_path, num_labels=10**9, ignore_mismatched_sizes=True)
    model = BertForSequenceClassification(BertConfig.from_name("tiny", max_position_embeddings=1024))
    assert model.bert.embeddings.position_embeddings.weight.shape == (1024, 128)  # no weights: the config's sizes


def test_missing_embeddings_are_an_error_not_fresh(tmp_path):
    save(bf.BertModel, tmp_path)
    weights = load_file(tmp_path / SAFETENSORS)
    del weights["embeddings.word_embeddings.weight"]
    save_file(weights, tmp_path / SAFETENSORS)
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertModel.from_pretrained(tmp_path)
    assert "embeddings.word_embeddings not in the weights" in one_line_error(excinfo, tmp_path / SAFETENSORS)


def test_tensor_with_wrong_shape(tmp_path):
    save(bf.BertModel, tmp_path)
    weights = load_file(tmp_path / SAFETENSORS)
    weights["encoder.layer.1.attention.self.value.weight"] = torch.zeros(64, 32)
    save_file(weights, tmp_path / SAFETENSORS)
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertModel.from_pretrained(tmp_path)
    message = one_line_error(excinfo, tmp_path / SAFETENSORS, "encoder.layer.1.attention.self.value.weight")
    assert "(64, 32)" in message and "(64, 64)" in message


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_corrupted_safetensors(tmp_path, damage):
    save(bf.BertModel, tmp_path)
    path = tmp_path / SAFETENSORS
    data = path.read_bytes()
    damaged = {"truncated": data[:len(data) // 2], "garbage": b"not a tensor file " * 10, "empty": b""}
    path.write_bytes(damaged[damage])
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertModel.from_pretrained(tmp_path)
    assert "not a valid safetensors file" in one_line_error(excinfo, path)


def test_invalid_shard_index(tmp_path):
    save(bf.BertModel, tmp_path)
    (tmp_path / SAFETENSORS).unlink()
    (tmp_path / SAFETENSORS_INDEX).write_text('{"weight_map": ')
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertModel.from_pretrained(tmp_path)
    one_line_error(excinfo, tmp_path / SAFETENSORS_INDEX)


@pytest.mark.parametrize("shard", ["../outside/model.safetensors", "{outside}/model.safetensors",
                                   "sub/../../outside/model.safetensors", "..", None])
def test_shard_index_names_only_files_of_its_folder(tmp_path, shard):
    """A weight_map naming a file outside its folder (a valid one, here) is refused, not read: the rule of every
    file of a model folder (core.io.model_file)."""
    save(bf.BertModel, tmp_path / "outside")
    folder = tmp_path / "model"
    save(bf.BertModel, folder)
    weights = load_file(folder / SAFETENSORS)
    (folder / SAFETENSORS).unlink()
    save_file({k: v for k, v in weights.items() if "layer.1." not in k}, folder / "model-00001-of-00002.safetensors")
    shard = None if shard is None else shard.format(outside=tmp_path / "outside")
    index = {"weight_map": {k: shard if "layer.1." in k else "model-00001-of-00002.safetensors" for k in weights}}
    (folder / SAFETENSORS_INDEX).write_text(json.dumps(index))
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertModel.from_pretrained(folder)
    message = one_line_error(excinfo, folder / SAFETENSORS_INDEX)
    assert any(why in message for why in ("outside the model folder", "a folder, not a regular file",
                                          "not a file name", "file not found")), message


def test_shard_index_may_name_a_file_in_a_subfolder(tmp_path):
    """By the same rule, a shard in a folder of the model's own is read."""
    source = save(bf.BertModel, tmp_path)
    weights = load_file(tmp_path / SAFETENSORS)
    (tmp_path / SAFETENSORS).unlink()
    (tmp_path / "shards").mkdir()
    save_file(weights, tmp_path / "shards" / "all.safetensors")
    (tmp_path / SAFETENSORS_INDEX).write_text(json.dumps({"weight_map": {k: "shards/all.safetensors"
                                                                         for k in weights}}))
    loaded = bf.BertModel.from_pretrained(tmp_path)
    assert all(torch.equal(loaded.state_dict()[k], v) for k, v in source.state_dict().items())


def test_save_pretrained_round_trip_keeps_config(tmp_path):
    source = save(BertForSequenceClassification, tmp_path, id2label={0: "neg", 1: "pos"}, hidden_act="gelu_new")
    model = BertForSequenceClassification.from_pretrained(tmp_path)
    assert model.config.to_dict() == {**source.config.to_dict(), "architectures": ["BertForSequenceClassification"],
                                      "dtype": "float32"}  # the weights' dtype, written as transformers 5 does
    assert not model.training  # ready for inference, as the reference library's models are
    assert not list(tmp_path.glob("*.tmp"))  # atomic writes leave nothing behind


# ---------------------------------------------------------------------------------------------------------
# transformers' keyword arguments of from_pretrained, against transformers on the same folder


def reference_folder(folder):
    import transformers

    transformers.logging.set_verbosity_error()
    torch.manual_seed(0)
    transformers.BertModel(transformers.BertConfig(**TINY)).save_pretrained(folder)
    return transformers


@pytest.mark.parametrize("labels", [dict(num_labels=3), dict(id2label={0: "neg", 1: "neu", 2: "pos"}),
                                    dict(id2label={0: "neg", 1: "pos"}, label2id={"neg": 0, "pos": 1}),
                                    dict(num_labels=1)])
def test_labels_keywords_build_the_head_transformers_builds(labels, tmp_path, caplog):
    transformers = reference_folder(tmp_path)
    ref = transformers.BertForSequenceClassification.from_pretrained(tmp_path, **labels)
    ours = BertForSequenceClassification.from_pretrained(tmp_path, **labels)
    assert ours.config.id2label == ref.config.id2label
    # label2id is always id2label's inverse here; transformers keeps its old label2id when given id2label alone
    assert ours.config.label2id == {v: k for k, v in ref.config.id2label.items()}
    assert ours.classifier.weight.shape == ref.classifier.weight.shape
    ours.save_pretrained(tmp_path / "again")
    again = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "again")
    assert again.config.id2label == ref.config.id2label and torch.equal(again.classifier.weight, ours.classifier.weight)


def test_label_keywords_that_disagree(tmp_path, caplog):
    reference_folder(tmp_path)
    with pytest.raises(BertforgeError, match="not the inverse"):
        BertForSequenceClassification.from_pretrained(tmp_path, id2label={0: "a", 1: "b"}, label2id={"a": 1, "b": 0})
    caplog.set_level(logging.WARNING, logger="bertforge")
    model = BertForSequenceClassification.from_pretrained(tmp_path, label2id={"a": 0, "b": 1, "c": 2})
    assert model.config.id2label == {0: "a", 1: "b", 2: "c"}  # transformers would keep LABEL_0, LABEL_1
    assert any("label2id without id2label" in w for w in bertforge_warnings(caplog))


@pytest.mark.parametrize("keyword", ["dtype", "torch_dtype"])
def test_dtype_casts_the_weights_and_saves(keyword, tmp_path):
    transformers = reference_folder(tmp_path)
    ours = BertForSequenceClassification.from_pretrained(tmp_path, **{keyword: torch.bfloat16})
    ref = transformers.BertForSequenceClassification.from_pretrained(tmp_path, **{keyword: torch.bfloat16})
    assert ours.dtype == ref.dtype == torch.bfloat16
    assert {p.dtype for p in ours.parameters()} == {torch.bfloat16}
    ours.save_pretrained(tmp_path / "bf16")
    ref.save_pretrained(tmp_path / "ref")
    saved = json.loads((tmp_path / "bf16" / "config.json").read_text())
    assert saved["dtype"] == json.loads((tmp_path / "ref" / "config.json").read_text())["dtype"] == "bfloat16"
    assert load_file(tmp_path / "bf16" / SAFETENSORS)["bert.embeddings.word_embeddings.weight"].dtype == torch.bfloat16
    for model_class in (BertForSequenceClassification, transformers.BertForSequenceClassification):
        assert model_class.from_pretrained(tmp_path / "bf16", dtype="auto").dtype == torch.bfloat16
    assert BertForSequenceClassification.from_pretrained(tmp_path / "bf16").dtype == torch.float32
    with pytest.raises(BertforgeError, match="int8"):
        bf.BertModel.from_pretrained(tmp_path, dtype="int8")


def test_device_moves_the_model(tmp_path):
    transformers = reference_folder(tmp_path)
    assert bf.BertModel.from_pretrained(tmp_path, device="cpu").device == torch.device("cpu")
    assert bf.BertModel.from_pretrained(tmp_path, device_map="cpu").device == torch.device("cpu")
    with pytest.raises(TypeError, match="device"):  # transformers 5 has device_map only: bertforge's extension
        transformers.BertModel.from_pretrained(tmp_path, device="cpu")
    with pytest.raises(BertforgeError, match="one device"):
        bf.BertModel.from_pretrained(tmp_path, device_map="auto")


def test_config_fields_and_unknown_keywords(tmp_path, caplog):
    transformers = reference_folder(tmp_path)
    ours = BertForSequenceClassification.from_pretrained(tmp_path, hidden_dropout_prob=0.3, classifier_dropout=0.2)
    ref = transformers.BertForSequenceClassification.from_pretrained(tmp_path, hidden_dropout_prob=0.3,
                                                                     classifier_dropout=0.2)
    assert ours.config.hidden_dropout_prob == ref.config.hidden_dropout_prob == 0.3
    assert ours.dropout.p == ref.dropout.p == 0.2
    for model_class in (BertForSequenceClassification, transformers.BertForSequenceClassification):
        with pytest.raises(TypeError, match="num_lables"):
            model_class.from_pretrained(tmp_path, num_lables=3)
    with pytest.raises(TypeError, match="output_attentions"):  # kept in transformers' config; bertforge: forward
        bf.BertModel.from_pretrained(tmp_path, output_attentions=True)
    caplog.set_level(logging.WARNING, logger="bertforge")
    bf.BertModel.from_pretrained(tmp_path, attn_implementation="eager")
    assert any("attn_implementation is ignored" in w for w in bertforge_warnings(caplog))


def test_head_of_another_size_with_ignore_mismatched_sizes(tmp_path):
    transformers = reference_folder(tmp_path)
    transformers.BertForSequenceClassification.from_pretrained(tmp_path).save_pretrained(tmp_path / "two")
    for model_class in (BertForSequenceClassification, transformers.BertForSequenceClassification):
        with pytest.raises(Exception, match="ignore_mismatched_sizes"):
            model_class.from_pretrained(tmp_path / "two", num_labels=4)
        model = model_class.from_pretrained(tmp_path / "two", num_labels=4, ignore_mismatched_sizes=True)
        assert model.classifier.weight.shape == (4, TINY["hidden_size"])


def test_fine_tuning_s_new_head_is_information_not_a_warning(tmp_path, caplog):
    save(bf.BertForPreTraining, tmp_path)
    with caplog.at_level(logging.INFO, logger="bertforge"):
        BertForSequenceClassification.from_pretrained(tmp_path, new_head=True)
    said = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "bertforge"]
    assert sorted(said) == [
        (logging.INFO, "classifier: a new head, initialised at random; fine-tuning trains it"),
        (logging.INFO, "masked-LM head in the checkpoint is not used by BertForSequenceClassification"),
        (logging.INFO, "next-sentence head in the checkpoint is not used by BertForSequenceClassification")]


@pytest.fixture(scope="module")
def modernbert(tmp_path_factory):
    return modernbert_folder(tmp_path_factory.mktemp("modernbert"), "ModernBertForSequenceClassification")


def broken(modernbert, tmp_path, change):
    """A copy of the ModernBERT folder whose weights `change` edits in place."""
    folder = tmp_path / "broken"
    shutil.copytree(modernbert, folder)
    weights = load_file(folder / SAFETENSORS)
    change(weights)
    save_file({k: v.contiguous() for k, v in weights.items()}, folder / SAFETENSORS)
    return folder


def drop_layer(weights):
    for key in [k for k in weights if k.startswith("model.layers.3.")]:
        del weights[key]


def add_layer(weights):
    weights.update({k.replace("layers.3.", "layers.4."): v.clone() for k, v in list(weights.items())
                    if ".layers.3." in k})


@pytest.mark.parametrize("change, says", [
    (drop_layer, "layer 3 not in the weights; num_hidden_layers 4, the weights have 3 layers"),
    (add_layer, "weights have layer 4 beyond the config; num_hidden_layers 4, the weights have 5 layers"),
    (lambda w: w.pop("model.final_norm.weight"), "final_norm not in the weights"),
    (lambda w: w.update({"model.layers.1.mlp.Wi.weight": w["model.layers.1.mlp.Wi.weight"][:100]}),
     "layers.1.mlp.Wi.weight has shape (100, 64) but the config gives (192, 64) (intermediate_size 96)"),
    (lambda w: w.update({"model.layers.1.mlp.Wo.weight": w["model.layers.1.mlp.Wo.weight"][:, :50]}),
     "(intermediate_size 96)"),
    (lambda w: w.update({"model.layers.0.attn.Wqkv.weight": w["model.layers.0.attn.Wqkv.weight"].to(torch.int8)}),
     "layers.0.attn.Wqkv.weight holds int8 values; the model's weights are floating point"),
    (lambda w: w.update({"classifier.weight": w["classifier.weight"] > 0}), "classifier.weight holds bool values"),
])
def test_a_modernbert_checkpoint_is_checked_against_its_own_parameter_list(modernbert, tmp_path, monkeypatch,
                                                                           change, says):
    """Weights checked by ModernBERT's own layer names, as BERT's are: a missing or extra layer, a missing final
    norm, a tensor of another shape (named by the field behind it) or of integers is refused before anything is
    built, by every head class, never loaded with a part drawn at random."""
    folder = broken(modernbert, tmp_path, change)
    devices = built_devices(monkeypatch)
    for model_class in (BertForSequenceClassification, bf.BertModel, bf.BertForMaskedLM):
        if "classifier" in says and model_class is not BertForSequenceClassification:
            continue
        with pytest.raises(BertforgeError) as excinfo:
            model_class.from_pretrained(folder)
        assert says in one_line_error(excinfo, folder / SAFETENSORS)
    assert set(devices) <= {"meta"}


def test_the_mismatched_sizes_hint_and_reset_apply_to_heads_only(modernbert, tmp_path):
    folder = broken(modernbert, tmp_path, lambda w: w.update(
        {"model.embeddings.tok_embeddings.weight": w["model.embeddings.tok_embeddings.weight"][:-1]}))
    for ignore in (False, True):
        with pytest.raises(BertforgeError) as excinfo:
            BertForSequenceClassification.from_pretrained(folder, ignore_mismatched_sizes=ignore)
        assert "(vocab_size " in str(excinfo.value) and "ignore_mismatched_sizes" not in str(excinfo.value)
    with pytest.raises(BertforgeError, match=r"\(num_labels 5\).*pass ignore_mismatched_sizes=True"):
        BertForSequenceClassification.from_pretrained(modernbert, num_labels=5)
    model = BertForSequenceClassification.from_pretrained(modernbert, num_labels=5, ignore_mismatched_sizes=True)
    assert model.classifier.weight.shape[0] == 5
