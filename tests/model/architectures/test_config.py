"""Model sizes and the Hugging Face config.json, both ways."""

import dataclasses
import json
import re

import pytest
import torch
import transformers

import bertforge.model.architectures.bert as bf
from bertforge.model.architectures.registry import ARCHITECTURES, load_config
from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.modernbert_config import ModernBertConfig
from bertforge.core.errors import BertforgeError

transformers.logging.set_verbosity_error()

SIZE_FIELDS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")


@pytest.mark.parametrize("name,layers,hidden,heads", [
    ("tiny", 2, 128, 2), ("mini", 4, 256, 4), ("small", 4, 512, 8),
    ("medium", 8, 512, 8), ("base", 12, 768, 12), ("large", 24, 1024, 16),
])
def test_named_sizes_are_the_papers(name, layers, hidden, heads):
    config = load_config(name)
    assert [getattr(config, f) for f in SIZE_FIELDS] == [layers, hidden, heads, 4 * hidden]
    assert (config.vocab_size, config.max_position_embeddings, config.type_vocab_size) == (30522, 512, 2)
    assert (config.hidden_act, config.hidden_dropout_prob, config.layer_norm_eps) == ("gelu", 0.1, 1e-12)


def parameter_count(model) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name,expected", [("base", 109_482_240), ("large", 335_141_888)])
def test_parameter_counts_match_the_paper_and_the_reference(name, expected):
    """Base ~110M and Large ~340M (the paper's rounding), equal to the reference's counts, heads included."""
    config = BertConfig.from_name(name)
    ref_config = transformers.BertConfig(**{f: getattr(config, f) for f in SIZE_FIELDS})
    with torch.device("meta"):  # shapes only: no memory, no initialisation time
        assert parameter_count(bf.BertModel(config)) == expected
        assert parameter_count(transformers.BertModel(ref_config)) == expected
        ours = parameter_count(bf.BertForPreTraining(config))
        assert ours == parameter_count(transformers.BertForPreTraining(ref_config))
    # The heads add the LM transform (H*H + 3H), the vocabulary bias (V) and NSP (2H + 2); the decoder is tied.
    hidden = config.hidden_size
    assert ours - expected == hidden * hidden + 3 * hidden + config.vocab_size + 2 * hidden + 2


def test_reference_reads_our_config_json(tmp_path):
    config = BertConfig.from_name("mini", vocab_size=8000, hidden_act="gelu_new", id2label={0: "neg", 1: "pos"},
                                  classifier_dropout=0.2)
    config.save(tmp_path / "config.json")
    ref = transformers.BertConfig.from_pretrained(tmp_path)
    for key, value in config.to_dict().items():
        if key not in ("id2label", "label2id"):
            assert getattr(ref, key) == value, key
    assert ref.id2label == {0: "neg", 1: "pos"} and ref.label2id == {"neg": 0, "pos": 1}
    assert ref.num_labels == 2


def test_we_read_the_references_config_json(tmp_path):
    ref = transformers.BertConfig(vocab_size=8000, hidden_size=256, num_hidden_layers=4, num_attention_heads=4,
                                  intermediate_size=1024, id2label={0: "O", 1: "B-LOC", 2: "I-LOC"},
                                  problem_type="single_label_classification", position_embedding_type="absolute")
    ref.save_pretrained(tmp_path)
    config = load_config(str(tmp_path))
    assert (config.vocab_size, config.num_hidden_layers, config.hidden_size) == (8000, 4, 256)
    assert config.id2label == {0: "O", 1: "B-LOC", 2: "I-LOC"} and config.num_labels == 3
    assert config.problem_type == "single_label_classification"
    # Fields bertforge does not use survive a save, so the reference still sees them.
    assert config.extra["position_embedding_type"] == "absolute"
    config.save(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["position_embedding_type"] == "absolute"
    ours, theirs = (transformers.BertConfig.from_json_file(tmp_path / name).to_dict()
                    for name in ("again.json", "config.json"))
    assert ours.pop("label2id") == {"O": 0, "B-LOC": 1, "I-LOC": 2}  # the reference writes null when not given
    theirs.pop("label2id")
    assert ours == theirs


def test_dict_round_trip():
    config = BertConfig.from_name("small", id2label={0: "entailment", 1: "neutral", 2: "contradiction"},
                                  problem_type="single_label_classification", extra={"note": "kept"})
    assert BertConfig.from_dict(config.to_dict()) == config
    assert BertConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config  # keys become strings in JSON


def test_old_configs_with_num_labels_only():
    assert BertConfig.from_dict({"num_labels": 3}).id2label == {0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"}


def test_with_labels_sets_the_head_size():
    config = BertConfig.from_name("tiny").with_labels(["neg", "pos", "mixed"])
    assert config.num_labels == 3 and config.label2id == {"neg": 0, "pos": 1, "mixed": 2}
    assert config.with_labels(["score"]).num_labels == 1  # regression


@pytest.mark.parametrize("kwargs,problem", [
    (dict(hidden_size=100, num_attention_heads=12), "not a multiple of num_attention_heads"),
    (dict(hidden_act="swish2"), "hidden_act 'swish2' is not one of"),
])
def test_impossible_sizes_are_refused(kwargs, problem):
    with pytest.raises(BertforgeError, match=problem):
        BertConfig(**kwargs)


def test_unknown_size_name():
    with pytest.raises(BertforgeError, match="unknown model size 'huge': choose one of tiny, mini"):
        BertConfig.from_name("huge")


@pytest.mark.parametrize("text,problem", [
    ('{"hidden_size": 768,\n "vocab_size": }', "config.json:2: not valid JSON"),
    ('{"model_type": "llama"}', "config.json: model_type is 'llama'; bertforge reads 'bert', 'modernbert', "
                                "'roberta', 'xlm-roberta'"),
])
def test_bad_config_files(tmp_path, text, problem):
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(BertforgeError) as excinfo:
        load_config(str(tmp_path))
    message = str(excinfo.value)
    assert "\n" not in message and f"{tmp_path}/{problem}" in message


def test_missing_config_file(tmp_path):
    with pytest.raises(BertforgeError, match="config file not found"):
        load_config(str(tmp_path))  # a folder without config.json
    with pytest.raises(BertforgeError) as excinfo:  # neither a size nor a path: the sizes are listed
        load_config(str(tmp_path / "nowhere.json"))
    message = str(excinfo.value)
    assert "nowhere.json: neither a model size (tiny, mini, small, medium, base, large)" in message


def wrong_values(rule):
    """Values that break `rule`: of another type, and out of its range where it has one."""
    values = {"whole": ["3", 2.5, True, -1], "number": ["x", True, float("nan")], "choice": ["no-such", 3],
              "flag": ["yes", 1], "object": [[1], "x"], "list": ["x", {}]}[rule.kind]
    if rule.kind in ("whole", "number") and rule.high is not None:
        values.append(rule.high * 10 + 1)
    if rule.kind == "number" and rule.low is not None:
        values.append(rule.low - 1)
    return values


@pytest.mark.parametrize("arch", ARCHITECTURES.values(), ids=lambda arch: arch.model_type)
def test_every_field_of_every_architecture_is_checked_by_its_rule(arch):
    """Each architecture's schema: every field the model reads, given a value of another type or out of range in
    config.json, is refused by a one-line error naming the field and the value, before anything is built."""
    assert {"vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"} \
        <= set(arch.config.schema)
    for name, rule in arch.config.schema.items():
        for value in wrong_values(rule):
            with pytest.raises(BertforgeError) as excinfo:
                arch.config.from_dict({"num_hidden_layers": 2, name: value})
            message = str(excinfo.value)
            assert message.startswith(name) and repr(value)[:20] in message and "\n" not in message, message


@pytest.mark.parametrize("arch", ARCHITECTURES.values(), ids=lambda arch: arch.model_type)
def test_the_schema_covers_what_the_config_class_reads(arch):
    """Every dataclass field of a config class has a rule, but the labels (their own checks) and `extra`."""
    fields = {f.name for f in dataclasses.fields(arch.config)} - {"id2label", "extra"}
    assert fields <= set(arch.config.schema), fields - set(arch.config.schema)


def test_a_config_of_ten_billion_layers_is_refused_before_the_layer_pattern_is_built():
    with pytest.raises(BertforgeError, match="num_hidden_layers 10000000000 is over 256"):
        ModernBertConfig.from_dict({"num_hidden_layers": 10**10})


@pytest.mark.parametrize("fields, says", [
    ({"global_attn_every_n_layers": None}, "global_attn_every_n_layers is null and no layer_types"),
    ({"global_attn_every_n_layers": 2, "layer_types": ["full_attention"] * 4},
     "disagrees with global_attn_every_n_layers 2"),
    ({"local_rope_theta": 5000.0, "rope_parameters": {"sliding_attention": {"rope_theta": 10000.0}}},
     "local_rope_theta 5000 disagrees with rope_parameters.sliding_attention.rope_theta 10000"),
    ({"rope_parameters": {"global": {"rope_theta": 1e4}}}, "rope_parameters has 'global'"),
    ({"rope_parameters": {"full_attention": [1e4]}}, "rope_parameters.full_attention must be an object"),
    ({"rope_parameters": {"full_attention": {"rope_theta": "1e4"}}},
     "rope_parameters.full_attention.rope_theta must be a number above 1"),
])
def test_modernberts_two_forms_must_agree_and_hold_what_they_should(fields, says):
    with pytest.raises(BertforgeError, match=re.escape(says)):
        ModernBertConfig.from_dict({"num_hidden_layers": 4, **fields})
    assert ModernBertConfig.from_dict({"num_hidden_layers": 4, "layer_types": ["full_attention"] * 4}).layer_types \
        == ["full_attention"] * 4  # layer_types alone, as transformers 5 writes it
