"""Adding a head is one class and one registry entry: a head declared in this file, outside the package (a sequence
classifier with a hidden layer on the [CLS] token, RoBERTa's classification head), is saved and loaded, runs in the
runtime, answers `pipeline()`, is served on its task's route and exports to ONNX, with no other change anywhere."""

import json
import time

import pytest
import torch
from torch import nn

import bertforge
from bertforge.core.errors import BertforgeError
from bertforge.model.architectures.bert import BertModel, BertPreTrainedModel
from bertforge.model.compat import finish
from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.heads import BATCH, HEADS, Head, head_class
from bertforge.text.tokenizer import BertTokenizer

NAME = "BertForSequenceClassificationWithHiddenLayer"
WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "good", "bad", "film", "a", "very", "not", "the", "plot"]
TEXTS = ["a very good film", "not a good plot", "bad", "the film the plot the film"]


class BertForSequenceClassificationWithHiddenLayer(BertPreTrainedModel):
    """Labels from the [CLS] token's last hidden state through dense, tanh and an output layer (no pooler)."""

    def __init__(self, config: BertConfig):
        super().__init__(config)
        self.bert = BertModel(config, add_pooling_layer=False)
        self.classifier = nn.Sequential(nn.Linear(config.hidden_size, config.hidden_size), nn.Tanh(),
                                        nn.Linear(config.hidden_size, config.num_labels))
        self.init_weights()

    def forward(self, input_ids=None, attention_mask=None, token_type_ids=None, *, labels=None, return_dict=True,
                **inputs):
        enc = self.bert.encode(input_ids, attention_mask, token_type_ids, **inputs)
        logits = self.classifier(enc.pooled_tokens())
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels)
        return finish(return_dict, loss=loss, logits=logits, hidden_states=enc.hidden_states,
                      attentions=enc.attentions)


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """The head registered (its one entry: served as a text classifier) and a random checkpoint of it saved."""
    entry = Head(NAME, "text-classification", {"logits": BATCH}, {"classifier": "classifier"}, module=__name__)
    monkeypatch.setitem(HEADS, NAME, entry)
    (tmp_path / "vocab.txt").write_text("\n".join(WORDS) + "\n")
    config = BertConfig.from_name("tiny", vocab_size=len(WORDS), id2label={0: "negative", 1: "positive"})
    torch.manual_seed(0)
    model = BertForSequenceClassificationWithHiddenLayer(config).eval()
    with torch.no_grad():
        for p in model.classifier.parameters():
            p.normal_(0, 1)  # scores far apart, so that every consumer's label is the same
    model.save_pretrained(tmp_path)
    return tmp_path


def expected_scores(folder) -> torch.Tensor:
    """The class's own forward on each text alone: its softmax over the labels."""
    model = head_class(NAME).from_pretrained(folder).eval()
    tokenizer = BertTokenizer.from_pretrained(folder)
    with torch.no_grad():
        return torch.stack([model(**tokenizer(t, return_tensors="pt")).logits[0].softmax(-1) for t in TEXTS])


def assert_answers(answers: list[dict], scores: torch.Tensor, tolerance: float):
    labels = ["negative", "positive"]
    assert [a["label"] for a in answers] == [labels[i] for i in scores.argmax(-1).tolist()]
    assert [a["score"] for a in answers] == pytest.approx(scores.max(-1).values.tolist(), abs=tolerance)


def test_the_new_head_is_saved_and_loaded_by_its_registry_entry(folder):
    assert json.loads((folder / "config.json").read_text())["architectures"] == [NAME]
    model = head_class(NAME).from_pretrained(folder)
    assert type(model) is BertForSequenceClassificationWithHiddenLayer
    saved = BertForSequenceClassificationWithHiddenLayer.from_pretrained(folder).state_dict()
    assert all(torch.equal(v, saved[k]) for k, v in model.state_dict().items())


def test_pipeline_answers_with_the_new_head(folder):
    """The pipeline finds the head from config.json, runs it in batches of mixed lengths and names the labels."""
    classify = bertforge.pipeline(model=folder)
    assert classify.task == "text-classification"
    assert_answers(classify(TEXTS), expected_scores(folder), 1e-5)


def test_the_server_answers_with_the_new_head_on_its_route(folder):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from fastapi.testclient import TestClient

    from bertforge.serving.serve import Server, create_app

    with TestClient(create_app(Server(folder))) as client:
        for _ in range(300):  # the model loads in the background
            if client.get("/health").status_code == 200:
                break
            time.sleep(0.1)
        answer = client.post("/v1/classify", json={"inputs": TEXTS})
        assert answer.status_code == 200, answer.text
        assert_answers(answer.json(), expected_scores(folder), 1e-5)
        assert client.post("/predict", json={"inputs": TEXTS[0]}).status_code == 200  # text-embeddings-inference's


def test_onnx_export_runs_the_new_head_s_forward(folder, tmp_path_factory):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    from bertforge.inference.export import export_onnx

    out = tmp_path_factory.mktemp("onnx")
    differences = export_onnx(folder, out)
    assert json.loads((out / "onnx.json").read_text()) == {"architecture": NAME, "outputs": ["logits"]}
    assert max(differences.values()) <= 1e-4
    assert_answers(bertforge.pipeline(model=out, backend="onnx")(TEXTS), expected_scores(folder), 1e-4)


def test_a_head_without_a_registry_entry_is_refused_by_name(folder, monkeypatch):
    monkeypatch.delitem(HEADS, NAME)
    with pytest.raises(BertforgeError, match=NAME):
        bertforge.pipeline(model=folder)
