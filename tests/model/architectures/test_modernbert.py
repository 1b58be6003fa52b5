"""ModernBERT against transformers' own implementation (the reference), on checkpoints transformers writes: random
weights at a scaled-down shape with every part of the real models (global and sliding-window layers, GeGLU, the
heads), for inputs shorter and longer than the window, batches with padding, and a 4,096-token input."""

import json

import pytest
import torch

from bertforge.model.architectures import modernbert
from bertforge.model.architectures.registry import read_config
from bertforge.model.architectures.modernbert_config import ModernBertConfig
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from tests.conftest import compare

transformers = pytest.importorskip("transformers")

HEADS = ["ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
         "ModernBertForTokenClassification", "ModernBertForQuestionAnswering", "ModernBertForMultipleChoice"]
# rows' real lengths: all under the window's reach; across it; padded; long ones in attention blocks
LENGTHS = [[10], [50, 50], [50, 23, 7], [600, 130]]


def reference_config(**overrides):
    sizes = dict(vocab_size=300, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                 local_attention=16, max_position_embeddings=4200, pad_token_id=0, cls_token_id=1, sep_token_id=2,
                 bos_token_id=1, eos_token_id=2, num_labels=3, attn_implementation="eager")
    return transformers.ModernBertConfig(**{**sizes, **overrides})


def saved(tmp_path, name: str, **overrides):
    """A reference model with random weights (its biases and norms moved off their initial values too), saved."""
    torch.manual_seed(0)
    config = reference_config(num_labels=2 if "Question" in name else 3, **overrides)
    reference = getattr(transformers, name)(config).eval()
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.02)
    reference.save_pretrained(tmp_path / name)
    return reference, tmp_path / name


def batch(lengths: list[int], multiple_choice: bool):
    ids = torch.randint(3, 300, (len(lengths), max(lengths)))
    mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = ids * mask
    if multiple_choice:  # two choices per example
        return ids[None].repeat(2, 1, 1), mask[None].repeat(2, 1, 1)
    return ids, mask


@pytest.mark.parametrize("name", HEADS)
def test_every_head_agrees_with_the_reference_within_1e_5(tmp_path, name):
    reference, folder = saved(tmp_path, name)
    ours = getattr(modernbert, name).from_pretrained(folder)
    for lengths in LENGTHS:
        ids, mask = batch(lengths, "MultipleChoice" in name)
        worst = compare(reference, ours, ids, mask)
        assert max(worst.values()) < 1e-5, (lengths, worst)


def test_mean_pooling_and_biases_agree_with_the_reference(tmp_path):
    name = "ModernBertForSequenceClassification"
    reference, folder = saved(tmp_path, name, classifier_pooling="mean", attention_bias=True, mlp_bias=True,
                              norm_bias=True, classifier_bias=True, global_attn_every_n_layers=2,
                              hidden_activation="gelu_pytorch_tanh")
    ours = getattr(modernbert, name).from_pretrained(folder)
    assert ours.config.classifier_pooling == "mean" and ours.model.layers[0].attn.Wqkv.bias is not None
    for lengths in LENGTHS:
        worst = compare(reference, ours, *batch(lengths, False))
        assert max(worst.values()) < 1e-5, (lengths, worst)


def test_a_4096_token_input_agrees_with_the_reference(tmp_path):
    reference, folder = saved(tmp_path, "ModernBertForMaskedLM")
    ours = modernbert.ModernBertForMaskedLM.from_pretrained(folder)
    worst = compare(reference, ours, *batch([4096], False))
    assert max(worst.values()) < 1e-5, worst


def test_attention_probabilities_agree_with_the_reference(tmp_path):
    reference, folder = saved(tmp_path, "ModernBertModel")
    ours = modernbert.ModernBertModel.from_pretrained(folder)
    ids, mask = batch([50, 23], False)
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        mine = ours(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    real_queries = mask.bool()[:, None, :, None]
    for a, b in zip(theirs, mine, strict=True):
        assert torch.allclose(a * real_queries, b, atol=1e-6)


def test_the_masked_lm_scores_only_the_labelled_positions_with_the_reference_loss(tmp_path):
    reference, folder = saved(tmp_path, "ModernBertForMaskedLM")
    ours = modernbert.ModernBertForMaskedLM.from_pretrained(folder)
    ids, mask = batch([50, 23], False)
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 20] = 7, 9
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, labels=labels)
        mine = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert mine.logits.shape == (2, 300)
    assert torch.allclose(mine.logits, theirs.logits[labels != -100], atol=1e-5)
    assert abs(mine.loss.item() - theirs.loss.item()) < 1e-5


def test_the_decoder_reads_the_token_table_and_loads_with_nothing_fresh(tmp_path):
    _, folder = saved(tmp_path, "ModernBertForMaskedLM")
    ours = modernbert.ModernBertForMaskedLM.from_pretrained(folder)
    assert ours.decoder.weight is None and ours.fresh_parts == []
    ids, mask = batch([12], False)
    before = ours(input_ids=ids, attention_mask=mask).logits
    with torch.no_grad():
        ours.model.embeddings.tok_embeddings.weight[:, 0] += 1
    assert not torch.allclose(before, ours(input_ids=ids, attention_mask=mask).logits)


def test_a_bert_head_class_loads_a_modernbert_folder_as_the_modernbert_model_with_that_head(tmp_path):
    _, folder = saved(tmp_path, "ModernBertForSequenceClassification")
    model = BertForSequenceClassification.from_pretrained(folder)
    assert type(model) is modernbert.ModernBertForSequenceClassification


def test_saved_students_load_in_transformers_with_the_same_outputs(tmp_path):
    reference, folder = saved(tmp_path, "ModernBertForSequenceClassification")
    ours = modernbert.ModernBertForSequenceClassification.from_pretrained(folder)
    ours.save_pretrained(tmp_path / "again")
    again = transformers.ModernBertForSequenceClassification.from_pretrained(tmp_path / "again",
                                                                            attn_implementation="eager").eval()
    ids, mask = batch([50, 23], False)
    worst = compare(again, ours, ids, mask)
    assert max(worst.values()) < 1e-5, worst


def test_both_forms_of_config_json_are_read_and_written(tmp_path):
    first_release = {"model_type": "modernbert", "num_hidden_layers": 6, "global_attn_every_n_layers": 3,
                     "global_rope_theta": 160000.0, "local_rope_theta": 10000.0, "local_attention": 128}
    (tmp_path / "config.json").write_text(json.dumps(first_release))
    config = read_config(tmp_path / "config.json")
    assert isinstance(config, ModernBertConfig)
    assert config.layer_types == ["full_attention", "sliding_attention", "sliding_attention"] * 2
    assert config.rope_theta("full_attention") == 160000.0 and config.window == 64
    written = config.to_dict()
    assert written["global_attn_every_n_layers"] == 3 and written["layer_types"] == config.layer_types
    theirs = transformers.ModernBertConfig(**{k: v for k, v in written.items() if k != "model_type"})
    assert theirs.layer_types == config.layer_types
    assert theirs.rope_parameters["sliding_attention"]["rope_theta"] == 10000.0
    assert ModernBertConfig.from_dict(theirs.to_dict()).layer_types == config.layer_types


@pytest.mark.parametrize("field, value, says", [
    ("layer_types", ["full_attention", "nearby"], "layer_types must name"),
    ("rope_parameters", {"full_attention": {"rope_type": "yarn", "rope_theta": 1e4}}, "rope_type 'yarn'"),
    ("classifier_pooling", "max", "classifier_pooling 'max'"),
    ("local_attention", 0, "local_attention"),
])
def test_a_config_bertforge_cannot_run_is_one_line(field, value, says):
    with pytest.raises(Exception, match=says):
        ModernBertConfig.from_dict({"num_hidden_layers": 2, field: value})


def test_a_model_type_bertforge_does_not_read_says_which_it_reads(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(Exception, match="model_type is 'llama'; bertforge reads 'bert', 'modernbert'"):
        read_config(tmp_path / "config.json")


def test_a_head_loads_the_encoder_of_a_bare_encoder_checkpoint(tmp_path):
    """transformers saves ModernBertModel's parts without the `model.` prefix; a task head reads them all."""
    _, folder = saved(tmp_path, "ModernBertModel")
    encoder = modernbert.ModernBertModel.from_pretrained(folder)
    head = modernbert.ModernBertForSequenceClassification.from_pretrained(folder, new_head=True)
    assert set(head.fresh_parts) == {"prediction head", "classifier"}
    for key, value in encoder.state_dict().items():
        assert torch.equal(head.model.state_dict()[key], value), key


@pytest.mark.parametrize("tied", [True, False])
@pytest.mark.parametrize("new", [307, 295])
def test_resize_token_embeddings_as_the_reference(tmp_path, tied, new):
    reference, folder = saved(tmp_path, "ModernBertForMaskedLM", tie_word_embeddings=tied)
    ours = modernbert.ModernBertForMaskedLM.from_pretrained(folder)
    assert (ours.decoder.weight is None) == tied and ours.fresh_parts == []
    torch.manual_seed(1)
    ours.resize_token_embeddings(new)
    torch.manual_seed(1)
    reference.resize_token_embeddings(new)
    kept = min(300, new)
    assert ours.decoder.bias.shape == (new,) and ours.config.vocab_size == new
    assert torch.equal(ours.decoder.bias[:kept], reference.decoder.bias[:kept])
    if new > 300:
        assert not ours.decoder.bias[kept:].any()
    if not tied:
        assert ours.decoder.weight.shape == (new, 64)
        assert torch.equal(ours.decoder.weight[:kept], reference.decoder.weight[:kept])
    ids = torch.tensor([[1, kept - 1, 10, 2]])  # old tokens: new rows are drawn at random
    with torch.no_grad():
        mine, theirs = ours(input_ids=ids).logits, reference(input_ids=ids).logits
    assert mine.shape == theirs.shape == (1, 4, new)
    assert (mine[..., :kept] - theirs[..., :kept]).abs().max() < 1e-4


def test_a_checkpoint_that_stores_the_tied_decoder_again_loads_with_nothing_unused(tmp_path, caplog):
    """Checkpoints written before transformers dropped tied copies hold `decoder.weight` beside the token table."""
    from safetensors.torch import load_file, save_file

    reference, folder = saved(tmp_path, "ModernBertForMaskedLM")
    weights = load_file(folder / "model.safetensors")
    weights["decoder.weight"] = weights["model.embeddings.tok_embeddings.weight"].clone()
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with caplog.at_level("INFO", logger="bertforge"):
        ours = modernbert.ModernBertForMaskedLM.from_pretrained(folder)
    assert "not used" not in caplog.text and ours.fresh_parts == []
    ids, mask = batch([12], False)
    assert compare(reference, ours, ids, mask)["logits"] < 1e-5


@pytest.mark.parametrize("lengths", [[50, 23, 7], [600, 130]])
def test_the_gradients_of_a_training_step_agree_with_the_reference(tmp_path, lengths):
    """Every parameter's gradient of the sequence-classification loss (rotary positions, the sliding window,
    padded and row-by-row attention on the way back) against transformers'."""
    reference, folder = saved(tmp_path, "ModernBertForSequenceClassification")
    ours = modernbert.ModernBertForSequenceClassification.from_pretrained(folder)
    ids, mask = batch(lengths, False)
    labels = torch.tensor([1, 2, 0][:len(lengths)])
    reference.train(), ours.train()  # the dropout rates are 0: train mode changes nothing else
    reference(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    ours(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    theirs = dict(reference.named_parameters())
    worst = max((p.grad - theirs[name].grad).abs().max().item() / (theirs[name].grad.abs().max().item() + 1e-12)
                for name, p in ours.named_parameters())
    assert worst < 1e-4, worst
