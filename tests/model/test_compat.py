"""transformers' model API on bertforge's models, against transformers on the same weights: outputs as
tuples, output_attentions, inputs_embeds, keyword errors, model.device, resize_token_embeddings and gradient
checkpointing."""

import pytest
import torch
import transformers

from bertforge.model.architectures.heads import head_class
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from tests.model.architectures.test_bert import CASE_IDS, CASES, MINI, inputs_and_labels, max_diff, perturb

transformers.logging.set_verbosity_error()


def pair_of_models(name, num_labels, tmp_path, **config):
    """The reference (eager attention, so that it returns probabilities) and bertforge on the same weights."""
    torch.manual_seed(0)
    reference_config = transformers.BertConfig(**{**MINI, **config}, num_labels=num_labels)
    reference_config._attn_implementation = "eager"
    ref = perturb(getattr(transformers, name)(reference_config))
    ref.save_pretrained(tmp_path)
    return head_class(name).from_pretrained(tmp_path), ref.eval()


@pytest.mark.parametrize("name,num_labels", CASES, ids=CASE_IDS)
def test_attention_probabilities_match_the_reference(name, num_labels, tmp_path):
    ours, ref = pair_of_models(name, num_labels, tmp_path)
    batch, _ = inputs_and_labels(name, num_labels)
    with torch.no_grad():
        a = ours(**batch, output_attentions=True).attentions
        b = ref(**batch, output_attentions=True).attentions
    real = batch["attention_mask"].bool().flatten(0, -2)  # [rows, L]
    assert len(a) == len(b) == MINI["num_hidden_layers"]
    for layer, (x, y) in enumerate(zip(a, b)):
        assert x.shape == y.shape == (real.shape[0], MINI["num_attention_heads"], real.shape[1], real.shape[1])
        query_real = real[:, None, :, None].expand_as(x)
        assert max_diff(x[query_real], y[query_real]) <= 1e-4, f"layer {layer}"
        assert not x[~query_real].any(), "padded query rows hold zeros"
        assert not x[~real[:, None, None, :].expand_as(x)].any(), "no attention to padded keys"
        assert torch.allclose(x.sum(-1)[real[:, None, :].expand(x.shape[:3])], torch.tensor(1.0))


def test_attentions_do_not_change_the_outputs(tmp_path):
    ours, _ = pair_of_models("BertModel", 2, tmp_path)
    batch, _ = inputs_and_labels("BertModel", 2)
    with torch.no_grad():
        plain, asked = ours(**batch), ours(**batch, output_attentions=True)
    assert plain.attentions is None
    assert max_diff(plain.last_hidden_state, asked.last_hidden_state) <= 1e-5


@pytest.mark.parametrize("name,num_labels", CASES, ids=CASE_IDS)
def test_tuples_in_the_reference_order(name, num_labels, tmp_path):
    """out[i], out.to_tuple() and return_dict=False hold the reference's fields, in its order, Nones left out.
    The reference's BertModel adds an empty cross_attentions last with output_attentions; bertforge has none."""
    ours, ref = pair_of_models(name, num_labels, tmp_path)
    batch, labels = inputs_and_labels(name, num_labels)
    with torch.no_grad():
        for options in ({}, labels, dict(output_hidden_states=True, output_attentions=True, **labels)):
            a, b = ours(**batch, **options), ref(**batch, **options)
            names = [k for k, v in b.items() if v is not None and k != "cross_attentions"]
            assert [k for k, v in a.items() if v is not None and k in b] == names
            assert len(a.to_tuple()) == len(names) == len(b.to_tuple()) - ("cross_attentions" in b)
            for i, key in enumerate(names):
                assert a[i] is a[key] and a.to_tuple()[i] is a[key]
            plain = ours(**batch, **options, return_dict=False)
            assert isinstance(plain, tuple) and len(plain) == len(names)  # zip stops before cross_attentions
            for x, y in zip(plain, ref(**batch, **options, return_dict=False)):
                assert type(x) is type(y)
                if torch.is_tensor(x) and x.shape == y.shape and x.dim() < 2:  # losses, pooled logits
                    assert max_diff(x, y) <= 1e-4 or name == "BertForQuestionAnswering"


@pytest.mark.parametrize("name,num_labels", [("BertModel", 2), ("BertForSequenceClassification", 3),
                                             ("BertForMultipleChoice", 2)])
def test_inputs_embeds_match_the_reference_and_input_ids(name, num_labels, tmp_path):
    ours, ref = pair_of_models(name, num_labels, tmp_path)
    batch, _ = inputs_and_labels(name, num_labels)
    embeds = ref.bert.embeddings.word_embeddings(batch["input_ids"]) if name != "BertModel" else \
        ref.embeddings.word_embeddings(batch["input_ids"])
    embeds = (embeds + 0.01 * torch.randn(embeds.shape, generator=torch.Generator().manual_seed(3))).detach()
    rest = {k: v for k, v in batch.items() if k != "input_ids"}
    key = "last_hidden_state" if name == "BertModel" else "logits"
    with torch.no_grad():
        a, b = ours(inputs_embeds=embeds, **rest)[key], ref(inputs_embeds=embeds, **rest)[key]
        same_as_ids = ours(inputs_embeds=ours.word_embeddings(batch["input_ids"]), **rest)[key]
        from_ids = ours(**batch)[key]
    real = batch["attention_mask"].bool() if name == "BertModel" else slice(None)
    assert max_diff(a[real], b[real]) <= 1e-4
    assert max_diff(same_as_ids, from_ids) <= 1e-6
    for wrong in (dict(input_ids=batch["input_ids"], inputs_embeds=embeds), {}):
        with pytest.raises(ValueError, match="exactly one of input_ids or inputs_embeds"):
            ours(**wrong)
        # (the reference's multiple-choice head, given neither, fails on None.shape first)
        with pytest.raises(AttributeError if name == "BertForMultipleChoice" and not wrong else ValueError):
            ref(**wrong)


def test_unknown_keywords_are_a_type_error_naming_them(tmp_path):
    """transformers ignores an unknown forward keyword; bertforge says so instead of dropping it."""
    ours, ref = pair_of_models("BertForSequenceClassification", 2, tmp_path)
    ids = torch.tensor([[2, 10, 11, 3]])
    ref(ids, outptu_attentions=True)  # the reference drops the misspelt keyword
    with pytest.raises(TypeError, match="outptu_attentions"):
        ours(ids, outptu_attentions=True)
    with pytest.raises(TypeError, match="positional"):  # the reference's 4th positional is position_ids
        ours(ids, None, None, torch.arange(4)[None])
    for model in (BertForSequenceClassification, transformers.BertForSequenceClassification):
        with pytest.raises(TypeError, match="colour"):
            model.from_pretrained(tmp_path, colour="blue")


def test_device_and_dtype(tmp_path):
    ours, ref = pair_of_models("BertModel", 2, tmp_path)
    assert ours.device == ref.device == torch.device("cpu")
    assert ours.to(torch.float64).dtype == torch.float64


@pytest.mark.parametrize("new", [MINI["vocab_size"] + 7, MINI["vocab_size"] - 5])
def test_resize_token_embeddings_as_the_reference(new, tmp_path):
    ours, ref = pair_of_models("BertForMaskedLM", 2, tmp_path)
    old = MINI["vocab_size"]
    torch.manual_seed(1)
    ours.resize_token_embeddings(new)
    ref.resize_token_embeddings(new)
    ours_table, ref_table = ours.word_embeddings.weight, ref.bert.embeddings.word_embeddings.weight
    assert ours_table.shape == ref_table.shape == (new, MINI["hidden_size"])
    assert ours.config.vocab_size == ref.config.vocab_size == new
    kept = min(old, new)
    assert torch.equal(ours_table[:kept], ref_table[:kept])
    assert torch.equal(ours.cls.predictions.bias[:kept], ref.cls.predictions.bias[:kept])
    # new rows: the old rows' mean, drawn with 1e-9 of their covariance (so within about 1e-5 of it)
    if new > old:
        assert max_diff(ours_table[kept:], ref_table[kept:]) <= 1e-4
        assert not ours.cls.predictions.bias[kept:].any() and not ref.cls.predictions.bias[kept:].any()
    ids = torch.tensor([[2, new - 1, 10, 3]])
    with torch.no_grad():
        a, b = ours(ids).logits, ref(ids).logits
        assert a.shape == b.shape == (1, 4, new) and max_diff(a, b) <= 1e-3
        ours_table[new - 1] += 1.0  # the decoder reads the table itself: still tied
        assert max_diff(ours(ids).logits[..., new - 1], a[..., new - 1]) > 1e-3
    assert ours.resize_token_embeddings(new + 1, pad_to_multiple_of=8).weight.shape[0] % 8 == 0


def test_gradient_checkpointing_gives_the_same_gradients_and_recomputes(tmp_path):
    ours, _ = pair_of_models("BertForSequenceClassification", 3, tmp_path, hidden_dropout_prob=0.1,
                             attention_probs_dropout_prob=0.1)
    batch, labels = inputs_and_labels("BertForSequenceClassification", 3)
    calls = []
    for layer in ours.bert.encoder.layer:
        layer.register_forward_pre_hook(lambda *_: calls.append(1))  # (a recomputation may stop early)

    def gradients():
        ours.train().zero_grad()
        calls.clear()
        torch.manual_seed(5)  # the same dropout masks in both runs
        ours(**batch, **labels).loss.backward()
        return {k: p.grad.clone() for k, p in ours.named_parameters()}, len(calls)

    plain, plain_calls = gradients()
    assert not ours.is_gradient_checkpointing
    ours.gradient_checkpointing_enable()
    assert ours.is_gradient_checkpointing
    checkpointed, checkpointed_calls = gradients()
    assert plain_calls == MINI["num_hidden_layers"] and checkpointed_calls == 2 * plain_calls  # recomputed
    for key, grad in plain.items():
        assert torch.allclose(checkpointed[key], grad, atol=1e-6, rtol=1e-5), key
    ours.gradient_checkpointing_disable()
    assert gradients()[1] == plain_calls
