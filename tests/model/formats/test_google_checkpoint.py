"""Google's BERT checkpoints: the outputs of Google's own code on its tiny checkpoint (expected.npz), through
bertforge directly and through a converted folder in transformers; heads, optimizer state, casing, bad configs."""

import json
import logging

import numpy as np
import pytest
import torch

import bertforge.model.architectures.bert as bf
from bertforge.model.architectures.heads import head_class
from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.commands.info import describe
from bertforge.model.formats.tf_checkpoint import TFCheckpoint
from bertforge.text.tokenizer import BertTokenizer
from bertforge.model.architectures.task_heads import (BertForMultipleChoice, BertForQuestionAnswering,
                                                      BertForSequenceClassification, BertForTokenClassification)
from tests.conftest import built_devices, place_file, require_shared
from tests.tf_bundle import write_checkpoint

TOL = 1e-5


@pytest.fixture(scope="module")
def google_dir():
    return require_shared("models", "google-tf-tiny")


@pytest.fixture(scope="module")
def expected(google_dir):
    return dict(np.load(google_dir / "expected.npz"))


def linked_copy(google_dir, folder, config_changes=None):
    """The fixture under another folder name, files linked (never written), bert_config.json edited if asked."""
    folder.mkdir()
    for path in google_dir.iterdir():
        if path.name == "bert_config.json" and config_changes:
            config = {**json.loads(path.read_text()), **config_changes}
            (folder / path.name).write_text(json.dumps(config))
        else:
            place_file(path, folder / path.name)
    return folder


def inputs(e):
    ids, mask, segments = (torch.tensor(e[k]).long() for k in ("input_ids", "input_mask", "segment_ids"))
    labels = torch.full_like(ids, -100)
    for row, (positions, targets) in enumerate(zip(e["masked_lm_positions"], e["masked_lm_ids"])):
        labels[row, positions] = torch.tensor(targets).long()
    return dict(input_ids=ids, attention_mask=mask, token_type_ids=segments, labels=labels,
                next_sentence_label=torch.tensor(e["next_sentence_labels"][:, 0]).long())


def masked_order(e):
    """Google's masked-LM rows are batch-major in the order of masked_lm_positions; ours are row-major by
    position: the permutation that takes ours to Google's."""
    flat = (np.arange(len(e["masked_lm_positions"]))[:, None] * e["input_ids"].shape[1] + e["masked_lm_positions"])
    return np.argsort(np.argsort(flat.reshape(-1)))


def google_mlm_loss(example_loss, e):
    """Google's masked-LM loss: a weighted sum over (sum of weights + 1e-5), from per-position losses."""
    weights = e["masked_lm_weights"].reshape(-1)
    return float((example_loss * weights).sum() / (weights.sum() + 1e-5))


def check_outputs(e, hidden_states, sequence, pooled, mlm_logits, nsp_logits, mlm_loss, nsp_loss) -> dict:
    """Every output of expected.npz within TOL; returns the largest difference of each, for the record."""
    real = e["input_mask"].astype(bool)
    mlm_logits = mlm_logits[masked_order(e)]
    log_probs = torch.log_softmax(torch.from_numpy(mlm_logits).double(), -1).numpy()
    example_loss = -log_probs[np.arange(len(log_probs)), e["masked_lm_ids"].reshape(-1)]
    nsp_log_probs = torch.log_softmax(torch.from_numpy(nsp_logits).double(), -1).numpy()
    diffs = {
        "embedding_output": hidden_states[0][real] - e["embedding_output"][real],
        **{f"encoder_layer_{i}": h[real] - e["all_encoder_layers"][i][real] for i, h in enumerate(hidden_states[1:])},
        "sequence_output": sequence[real] - e["sequence_output"][real],
        "pooled_output": pooled - e["pooled_output"],
        "masked_lm_logits": mlm_logits - e["masked_lm_logits"],
        "masked_lm_log_probs": log_probs - e["masked_lm_log_probs"],
        "masked_lm_example_loss": example_loss - e["masked_lm_example_loss"],
        "masked_lm_loss": google_mlm_loss(example_loss, e) - e["masked_lm_loss"],
        # a plain mean, as the model computes, against Google's sum / (weights + 1e-5)
        "model_masked_lm_loss": mlm_loss - google_mlm_loss(e["masked_lm_example_loss"], e) * (
            1 + 1e-5 / e["masked_lm_weights"].sum()),
        "next_sentence_logits": nsp_logits - e["next_sentence_logits"],
        "next_sentence_log_probs": nsp_log_probs - e["next_sentence_log_probs"],
        "next_sentence_loss": nsp_loss - e["next_sentence_loss"],
    }
    assert len(hidden_states) == 1 + len(e["all_encoder_layers"])
    worst = {k: float(np.abs(v).max()) for k, v in diffs.items()}
    assert all(v < TOL for v in worst.values()), worst
    return worst


def bertforge_outputs(model, e):
    with torch.no_grad():
        out = model(**inputs(e), output_hidden_states=True)
        base = model.bert(*(inputs(e)[k] for k in ("input_ids", "attention_mask", "token_type_ids")))
    return ([h.numpy() for h in out.hidden_states], base.last_hidden_state.numpy(), base.pooler_output.numpy(),
            out.prediction_logits.numpy(), out.seq_relationship_logits.numpy(), out.mlm_loss.item(),
            out.nsp_loss.item())


def test_outputs_are_googles(google_dir, expected):
    model = bf.BertForPreTraining.from_pretrained(google_dir)
    assert model.config.hidden_act == "gelu_new" and model.config.layer_norm_eps == 1e-12
    print(check_outputs(expected, *bertforge_outputs(model, expected)))


def test_googles_gelu_on_the_grid(google_dir, expected):
    model = bf.BertModel.from_pretrained(google_dir)
    act = model.encoder.layer[0].intermediate.act
    y = act(torch.from_numpy(expected["gelu_x"])).numpy()
    assert np.abs(y - expected["gelu_y"]).max() < 1e-6


def test_convert_and_transformers_agree(google_dir, expected, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert main(["convert", str(google_dir), str(out)]) == 0
    assert "BertForPreTraining, hidden_act gelu_new, uncased" in capsys.readouterr().out
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "model.safetensors", "special_tokens_map.json",
                                                     "tokenizer.json", "tokenizer_config.json", "vocab.txt"]
    assert json.loads((out / "tokenizer_config.json").read_text())["do_lower_case"] is True

    theirs = transformers.BertForPreTraining.from_pretrained(out).eval()
    with torch.no_grad():
        o = theirs(**inputs(expected), output_hidden_states=True)
        base = theirs.bert(*(inputs(expected)[k] for k in ("input_ids", "attention_mask", "token_type_ids")))
    mlm_logits = o.prediction_logits[inputs(expected)["labels"] != -100].numpy()
    nsp_loss = torch.nn.functional.cross_entropy(o.seq_relationship_logits, inputs(expected)["next_sentence_label"])
    print(check_outputs(expected, [h.numpy() for h in o.hidden_states], base.last_hidden_state.numpy(),
                        base.pooler_output.numpy(), mlm_logits, o.seq_relationship_logits.numpy(),
                        o.loss.item() - nsp_loss.item(), nsp_loss.item()))

    ours = bf.BertForPreTraining.from_pretrained(out)
    check_outputs(expected, *bertforge_outputs(ours, expected))
    assert dict(line.split(":", 1) for line in describe(out))["activation"].strip().startswith("gelu_new (tanh")


def test_tokenizers_of_the_converted_folder_give_googles_ids(google_dir, expected, tmp_path):
    transformers = pytest.importorskip("transformers")
    out = tmp_path / "hf"
    assert main(["convert", str(google_dir), str(out)]) == 0
    pairs = json.loads((google_dir / "fixture_meta.json").read_text())["pairs"]
    first, second = [p[0] for p in pairs], [p[1] for p in pairs]
    length = expected["original_input_ids"].shape[1]
    for tokenizer in (BertTokenizer.from_pretrained(out), BertTokenizer.from_pretrained(google_dir),
                      transformers.AutoTokenizer.from_pretrained(out)):
        ids = tokenizer(first, second, padding="max_length", max_length=length, return_tensors="np")["input_ids"]
        assert np.array_equal(ids, expected["original_input_ids"]), type(tokenizer)


@pytest.mark.parametrize("cls", [bf.BertModel, bf.BertForMaskedLM, BertForSequenceClassification,
                                 BertForTokenClassification, BertForQuestionAnswering, BertForMultipleChoice])
def test_every_class_loads_the_folder_or_the_prefix(google_dir, cls):
    reference = TFCheckpoint(google_dir / "bert_model.ckpt")
    for source in (google_dir, google_dir / "bert_model.ckpt", google_dir / "bert_model.ckpt.index"):
        model = cls.from_pretrained(source)
        bert = model if isinstance(model, bf.BertModel) else model.bert
        kernel = reference.read("bert/encoder/layer_1/output/dense/kernel")
        assert torch.equal(bert.encoder.layer[1].output.dense.weight, torch.from_numpy(kernel).t())
        assert torch.equal(bert.embeddings.LayerNorm.bias,
                           torch.from_numpy(reference.read("bert/embeddings/LayerNorm/beta")))


def fine_tuned(google_dir, tmp_path, head: str, outputs: int):
    """A checkpoint as Google's fine-tuning scripts leave it: the fixture's encoder, a head, Adam's slots and
    global_step, in two shards with a `checkpoint` state file."""
    reference = TFCheckpoint(google_dir / "bert_model.ckpt")
    tensors = {n: np.array(reference.read(n)) for n in reference.entries if n.startswith("bert/")}
    rng = np.random.default_rng(0)
    tensors[f"{head}output_weights"] = rng.standard_normal((outputs, 128)).astype(np.float32)
    tensors[f"{head}output_bias"] = rng.standard_normal(outputs).astype(np.float32)
    for name in list(tensors):
        tensors[f"{name}/adam_m"] = tensors[f"{name}/adam_v"] = np.zeros_like(tensors[name])
    tensors["global_step"] = np.array(1000, np.int64)
    folder = tmp_path / "finetuned"
    folder.mkdir()
    for name in ("bert_config.json", "vocab.txt"):
        place_file(google_dir / name, folder / name)
    write_checkpoint(folder / "model.ckpt-1000", tensors, num_shards=2)
    (folder / "checkpoint").write_text('model_checkpoint_path: "model.ckpt-1000"\n')
    return folder, tensors


@pytest.mark.parametrize("head,outputs,cls,attribute", [
    ("", 3, "BertForSequenceClassification", "classifier"),  # run_classifier.py
    ("cls/squad/", 2, "BertForQuestionAnswering", "qa_outputs"),  # run_squad.py
])
def test_fine_tuned_checkpoint(google_dir, expected, tmp_path, caplog, head, outputs, cls, attribute):
    transformers = pytest.importorskip("transformers")
    folder, tensors = fine_tuned(google_dir, tmp_path, head, outputs)
    with caplog.at_level(logging.INFO, logger="bertforge"):
        model = head_class(cls).from_pretrained(folder)
    messages = [r.getMessage() for r in caplog.records]
    assert f"skipped the optimizer's adam_m and adam_v ({2 * (len(tensors) - 1) // 3} tensors)" in messages
    assert "skipped the training state: global_step" in messages
    layer = getattr(model, attribute)
    assert torch.equal(layer.weight, torch.from_numpy(tensors[f"{head}output_weights"]))
    assert torch.equal(layer.bias, torch.from_numpy(tensors[f"{head}output_bias"]))

    out = tmp_path / "hf"
    assert main(["convert", str(folder), str(out)]) == 0
    assert json.loads((out / "config.json").read_text())["architectures"] == [cls]
    theirs = getattr(transformers, cls).from_pretrained(out).eval()
    args = {k: inputs(expected)[k] for k in ("input_ids", "attention_mask", "token_type_ids")}
    with torch.no_grad():
        ours_out, theirs_out = model(**args), theirs(**args)
    if cls == "BertForSequenceClassification":
        assert (ours_out.logits - theirs_out.logits).abs().max() < TOL
    else:  # span scores on the real tokens (ours give the padding the lowest score)
        real = args["attention_mask"].bool()
        for key in ("start_logits", "end_logits"):
            assert (ours_out[key][real] - theirs_out[key][real]).abs().max() < TOL


# ---------------------------------------------------------------------------------------------------------
# Casing and bad configs


@pytest.mark.parametrize("name,setting,lower", [
    ("google-tf-tiny", None, True),  # the name says nothing: the vocabulary (no capitals) says uncased
    ("uncased_L-2_H-128_A-2", None, True),
    ("uncased_L-2_H-128_A-2", True, True),
    ("uncased_L-2_H-128_A-2", False, "do_lower_case=False contradicts it"),
    ("cased_L-2_H-128_A-2", None, "vocab.txt has no capitals, which contradicts it"),
    ("multi_cased_L-2_H-128_A-2", None, "vocab.txt has no capitals, which contradicts it"),
])
def test_casing(google_dir, tmp_path, name, setting, lower):
    folder = linked_copy(google_dir, tmp_path / name)
    if isinstance(lower, bool):
        assert BertTokenizer.from_pretrained(folder, do_lower_case=setting).do_lower_case is lower
        return
    with pytest.raises(BertforgeError) as excinfo:
        BertTokenizer.from_pretrained(folder, do_lower_case=setting)
    message = str(excinfo.value)
    assert "\n" not in message and str(folder) in message and lower in message
    assert message.startswith(f"{folder}: the checkpoint was trained ")


def test_convert_refuses_a_casing_contradiction(google_dir, tmp_path, capsys):
    folder = linked_copy(google_dir, tmp_path / "uncased_L-2_H-128_A-2")
    assert main(["convert", str(folder), str(tmp_path / "out"), "--no-do-lower-case"]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "trained uncased" in err and "contradicts" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("changes,tensor", [
    (dict(intermediate_size=1024), "bert/encoder/layer_0/intermediate/dense/bias"),
    (dict(hidden_size=256), "bert/embeddings/LayerNorm/beta"),
    (dict(vocab_size=30000), "bert/embeddings/word_embeddings"),
    (dict(max_position_embeddings=128), "bert/embeddings/position_embeddings"),
])
def test_config_that_contradicts_the_tensors(google_dir, tmp_path, changes, tensor):
    folder = linked_copy(google_dir, tmp_path / "google", changes)
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertForPreTraining.from_pretrained(folder)
    message = str(excinfo.value)
    assert "\n" not in message and "has shape" in message, message
    for part in (folder / "bert_model.ckpt.index", tensor, folder / "bert_config.json"):
        assert str(part) in message, message


def test_config_with_more_layers_than_the_checkpoint(google_dir, tmp_path, capsys):
    folder = linked_copy(google_dir, tmp_path / "google", dict(num_hidden_layers=3))
    assert main(["convert", str(folder), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "bert_model.ckpt.index" in err and "layer 2 not in the weights" in err
    assert "bert_config.json does not describe these weights" in err


@pytest.mark.parametrize("changes, culprit", [
    (dict(num_hidden_layers=200), "num_hidden_layers 200, the weights have 2 layers"),
    (dict(max_position_embeddings=100_000), "bert/embeddings/position_embeddings has shape"),
])
def test_sizes_are_checked_before_the_model_is_built(google_dir, tmp_path, monkeypatch, changes, culprit):
    folder = linked_copy(google_dir, tmp_path / "google", changes)
    devices = built_devices(monkeypatch)
    with pytest.raises(BertforgeError) as excinfo:
        bf.BertForPreTraining.from_pretrained(folder)
    message = str(excinfo.value)
    assert "\n" not in message and culprit in message and str(folder / "bert_model.ckpt.index") in message, message
    assert set(devices) <= {"meta"}


def test_erf_gelu_on_request_and_it_matters(google_dir, expected, tmp_path):
    out = tmp_path / "erf"
    assert main(["convert", str(google_dir), str(out), "--hidden-act", "gelu"]) == 0
    model = bf.BertForPreTraining.from_pretrained(out)
    assert model.config.hidden_act == "gelu"
    with pytest.raises(AssertionError):  # the fixture tells the two GELUs apart
        check_outputs(expected, *bertforge_outputs(model, expected))


def test_info_reads_the_index_alone(google_dir):
    out = dict(line.split(":", 1) for line in describe(google_dir))
    out = {k: v.strip() for k, v in out.items()}
    assert out["architecture"] == "BertForPreTraining"
    assert out["sizes"] == "2 layers, hidden 128, 2 heads, feed-forward 512, 512 positions, vocabulary 30522"
    model = bf.BertForPreTraining.from_pretrained(google_dir)
    assert out["parameters"].startswith(f"{sum(p.numel() for p in model.parameters()):,} total")
    assert out["heads"] == "pooler, masked-LM head, next-sentence head"
    assert out["activation"].startswith("gelu_new (tanh approximation")
    assert out["weights"].startswith("bert_model.ckpt.index, bert_model.ckpt.data-00000-of-00001, float32")


def truncate(folder):
    data = folder / "bert_model.ckpt.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[:-5000])  # into the tensor before the last three
    return data, "cls/predictions/transform/dense/kernel"


def flip_byte(folder):
    data = folder / "bert_model.ckpt.data-00000-of-00001"
    entry = TFCheckpoint(folder / "bert_model.ckpt").entries["bert/pooler/dense/kernel"]
    content = bytearray(data.read_bytes())
    content[entry.offset + entry.size // 2] ^= 0x80
    data.write_bytes(bytes(content))
    return data, entry.name


def drop_index(folder):
    (folder / "bert_model.ckpt.index").unlink()
    return folder / "bert_model.ckpt.index", "not found"


def garble_index(folder):
    (folder / "bert_model.ckpt.index").write_text("not a table\n" * 20)
    return folder / "bert_model.ckpt.index", "not a TensorFlow checkpoint index"


@pytest.mark.parametrize("damage", [truncate, flip_byte, drop_index, garble_index])
def test_damaged_checkpoint_is_one_line_from_the_command(google_dir, tmp_path, capsys, damage):
    folder = tmp_path / "google"
    folder.mkdir()
    for path in google_dir.iterdir():  # real copies: these are damaged
        (folder / path.name).write_bytes(path.read_bytes())
    file, what = damage(folder)
    assert main(["convert", str(folder), str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and str(file) in err and what in err, err
    with pytest.raises(BertforgeError):
        bf.BertForPreTraining.from_pretrained(folder)
