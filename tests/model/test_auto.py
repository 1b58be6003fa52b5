"""transformers' Auto classes (bertforge/model/auto.py) on checkpoints transformers writes, BERT and ModernBERT: the
class of the folder's architecture with the head asked for, the outputs of transformers' Auto classes, by folder and
by Hub name (the `hub` fixture); and push_to_hub of models and tokenizers, downloaded again by the real client."""

import pytest
import torch

import bertforge
from bertforge.core.errors import BertforgeError
from bertforge.model import auto
from bertforge.model.auto import (AutoConfig, AutoModel, AutoModelClass, AutoModelForMaskedLM,
                                  AutoModelForPreTraining, AutoModelForSequenceClassification, AutoTokenizer)
from bertforge.model.architectures.bert import BertForMaskedLM
from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.modernbert_config import ModernBertConfig
from bertforge.model.architectures.heads import HEADS, head_class
from bertforge.model.architectures.modernbert import ModernBertForMaskedLM, ModernBertForSequenceClassification
from bertforge.text.tokenizer import BertTokenizer, PipelineTokenizer
from tests.conftest import modernbert_folder, one_line_error
from tests.hub_server import TOKEN

transformers = pytest.importorskip("transformers")

TEXTS = ["the film was good", "it was not a good film, it was bad"]
AUTO_NAMES = {name for name in dir(auto) if name.startswith("Auto") and name != "AutoModelClass"}


@pytest.fixture(scope="module")
def modernbert_dir(tmp_path_factory):
    return modernbert_folder(tmp_path_factory.mktemp("modernbert"))


def outputs(tokenizer, model, key):
    with torch.no_grad():
        return model.eval()(**tokenizer(TEXTS, padding=True, return_tensors="pt"))[key]


def real(tokenizer, values):
    """The values at real tokens (bertforge's hidden states are zeros at padding)."""
    mask = tokenizer(TEXTS, padding=True, return_tensors="pt")["attention_mask"].bool()
    return values[mask]


def test_every_head_has_an_auto_class_exported_from_bertforge():
    assert {cls.head for cls in AutoModelClass.__subclasses__()} == set(HEADS)
    assert {f"AutoModel{cls.head.removeprefix('Bert').removeprefix('Model')}"
            for cls in AutoModelClass.__subclasses__()} == AUTO_NAMES - {"AutoConfig", "AutoTokenizer"}
    assert AUTO_NAMES <= set(bertforge.__all__) and all(getattr(bertforge, name) is getattr(auto, name)
                                                        for name in AUTO_NAMES)


def test_bert_folder_as_transformers_auto_classes_read_it(hub_bert):
    tokenizer = AutoTokenizer.from_pretrained(hub_bert)
    reference_tokenizer = transformers.AutoTokenizer.from_pretrained(hub_bert)
    assert type(tokenizer) is BertTokenizer and tokenizer(TEXTS) == dict(reference_tokenizer(TEXTS))
    config = AutoConfig.from_pretrained(hub_bert)
    assert type(config) is BertConfig and config.hidden_size == 32
    for ours, theirs, key in ((AutoModel, transformers.AutoModel, "last_hidden_state"),
                              (AutoModelForMaskedLM, transformers.AutoModelForMaskedLM, "logits")):
        model = ours.from_pretrained(hub_bert)
        assert type(model) is head_class(ours.head)
        mine, reference = outputs(tokenizer, model, key), outputs(tokenizer, theirs.from_pretrained(hub_bert), key)
        torch.testing.assert_close(real(tokenizer, mine), real(tokenizer, reference), atol=1e-5, rtol=1e-4)


def test_labels_and_config_fields_as_transformers_takes_them(hub_bert):
    for kwargs in ({"num_labels": 3}, {"id2label": {0: "neg", 1: "pos"}, "label2id": {"neg": 0, "pos": 1}}):
        config = AutoConfig.from_pretrained(hub_bert, hidden_dropout_prob=0.0, **kwargs)
        reference = transformers.AutoConfig.from_pretrained(hub_bert, hidden_dropout_prob=0.0, **kwargs)
        assert (config.id2label, config.label2id, config.hidden_dropout_prob) == \
            (reference.id2label, reference.label2id, reference.hidden_dropout_prob)
        model = AutoModelForSequenceClassification.from_pretrained(hub_bert, **kwargs)
        assert model.classifier.out_features == len(reference.id2label) and model.config.id2label == reference.id2label
        fresh = AutoModelForSequenceClassification.from_config(config)
        assert type(fresh) is type(model) and fresh.config.id2label == reference.id2label
    with pytest.raises(TypeError, match="AutoConfig.from_pretrained.. got unexpected keyword arguments: hiden_size"):
        AutoConfig.from_pretrained(hub_bert, hiden_size=8)


def test_modernbert_folder_gives_its_own_classes(modernbert_dir):
    tokenizer = AutoTokenizer.from_pretrained(modernbert_dir)
    assert type(tokenizer) is PipelineTokenizer
    config = AutoConfig.from_pretrained(modernbert_dir, num_labels=2)
    assert type(config) is ModernBertConfig
    model = AutoModelForMaskedLM.from_pretrained(modernbert_dir)
    assert type(model) is ModernBertForMaskedLM
    reference = transformers.AutoModelForMaskedLM.from_pretrained(modernbert_dir, attn_implementation="eager")
    torch.testing.assert_close(real(tokenizer, outputs(tokenizer, model, "logits")),
                               real(tokenizer, outputs(tokenizer, reference, "logits")), atol=1e-4, rtol=1e-4)
    assert type(AutoModelForSequenceClassification.from_config(config)) is ModernBertForSequenceClassification
    with pytest.raises(BertforgeError) as excinfo:
        AutoModelForPreTraining.from_pretrained(modernbert_dir)
    assert one_line_error(excinfo) == "modernbert has no ForPreTraining head in bertforge"


def test_a_hub_name_as_the_tutorial_gives_it(hub, hub_bert):
    hub.tag("bert-base-uncased", "v1", hub.add("bert-base-uncased", hub_bert))
    tokenizer = AutoTokenizer.from_pretrained("bert-base-uncased")
    assert tokenizer(TEXTS) == BertTokenizer.from_pretrained(hub_bert)(TEXTS)
    assert AutoConfig.from_pretrained("bert-base-uncased", num_labels=2).id2label == {0: "LABEL_0", 1: "LABEL_1"}
    for revision in (None, "v1"):
        model = AutoModelForMaskedLM.from_pretrained("bert-base-uncased", revision=revision)
        assert torch.equal(outputs(tokenizer, model, "logits"),
                           outputs(tokenizer, BertForMaskedLM.from_pretrained(hub_bert), "logits"))
    with pytest.raises(BertforgeError) as excinfo:
        AutoModel.from_pretrained("bert-base-uncased", revision="v9")
    assert "has no revision 'v9'" in one_line_error(excinfo)


def test_push_to_hub_a_model_and_its_tokenizer(hub, hub_bert):
    tokenizer = AutoTokenizer.from_pretrained(hub_bert)
    model = AutoModelForSequenceClassification.from_pretrained(hub_bert, num_labels=2)
    url = model.push_to_hub("me/tiny-classifier", token=TOKEN)
    assert url == f"{hub.url}/me/tiny-classifier/commit/{hub.repos['me/tiny-classifier'].refs['main']}"
    tokenizer.push_to_hub("me/tiny-classifier", token=TOKEN)
    assert {"config.json", "model.safetensors", "vocab.txt", "tokenizer.json"} <= set(hub.files("me/tiny-classifier"))
    pushed_tokenizer = AutoTokenizer.from_pretrained("me/tiny-classifier")
    pushed = AutoModelForSequenceClassification.from_pretrained("me/tiny-classifier")
    assert pushed_tokenizer(TEXTS) == tokenizer(TEXTS)
    assert torch.equal(outputs(tokenizer, pushed, "logits"), outputs(tokenizer, model, "logits"))


def test_push_to_hub_private_and_on_a_branch(hub, hub_bert):
    model = AutoModelForMaskedLM.from_pretrained(hub_bert)
    model.push_to_hub("me/private-bert", private=True, branch="dev", token=TOKEN)
    assert set(hub.files("me/private-bert", "main")) == {".gitattributes"}
    assert "config.json" in hub.files("me/private-bert", "dev")
    with pytest.raises(BertforgeError):
        AutoModelForMaskedLM.from_pretrained("me/private-bert", revision="dev")
    pushed = AutoModelForMaskedLM.from_pretrained("me/private-bert", revision="dev", token=TOKEN)
    tokenizer = BertTokenizer.from_pretrained(hub_bert)
    assert torch.equal(outputs(tokenizer, pushed, "logits"), outputs(tokenizer, model, "logits"))
    with pytest.raises(BertforgeError) as excinfo:
        model.push_to_hub("me/other-bert")
    assert "pushing needs a token that may write there" in one_line_error(excinfo)
