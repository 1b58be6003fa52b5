"""`bertforge export onnx` and the int8 runtimes: ONNX Runtime against PyTorch, and the pipelines on each backend."""

import re

import pytest
import torch

import bertforge
from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from tests.inference.test_pipelines import PAIRS, QA, TAGS, TEXTS, assert_same, random_model

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

CASES = {  # head -> (task, inputs, options)
    "BertForSequenceClassification": ("text-classification", TEXTS + PAIRS, {"top_k": None}),
    "BertForTokenClassification": ("token-classification", TEXTS, {"aggregation_strategy": "simple"}),
    "BertForQuestionAnswering": ("question-answering", QA, {"top_k": 3}),
    "BertForMaskedLM": ("fill-mask", ["Paris is the [MASK] of France.", "two [MASK] in one [MASK]."], {}),
    "BertModel": ("sentence-embedding", TEXTS, {}),
    "BertForMultipleChoice": ("multiple-choice", [{"question": "Where?", "choices": ["here", "over there"]},
                                                  {"question": "Who?", "choices": ["me", "you", "nobody at all"]}],
                              {}),
}
CONFIGS = {"BertForSequenceClassification": {"id2label": {0: "neg", 1: "neutral", 2: "pos"}},
           "BertForTokenClassification": {"id2label": dict(enumerate(TAGS))}}


@pytest.fixture(scope="module")
def exported(tmp_path_factory, tokenizer):
    """head -> (checkpoint folder, exported folder with model.onnx and model_int8.onnx, printed report)."""
    made = {}

    def make(head, capsys):
        if head not in made:
            src = random_model(tmp_path_factory.mktemp(head), head, tokenizer, **CONFIGS.get(head, {}))
            out = tmp_path_factory.mktemp(f"{head}-onnx")
            capsys.readouterr()
            assert main(["export", "onnx", str(src), str(out), "--int8"]) == 0
            made[head] = src, out, capsys.readouterr().out
        return made[head]
    return make


@pytest.mark.parametrize("head", list(CASES))
def test_onnx_export_matches_pytorch(exported, capsys, head):
    src, out, report = exported(head, capsys)
    differences = dict(re.findall(r"(model(?:_int8)?\.onnx): max \|ONNX Runtime - PyTorch\| = (\S+)", report))
    assert float(differences["model.onnx"]) <= 1e-4 and "model_int8.onnx" in differences
    assert "(within 1e-4 of PyTorch: the same model)" in report and "outputs differ by design" in report
    task, inputs, options = CASES[head]
    expected = bertforge.pipeline(task, model=src)(inputs, **options)
    assert_same(bertforge.pipeline(task, model=out, backend="onnx")(inputs, **options), expected)
    assert bertforge.pipeline(task, model=out, backend="onnx", int8=True)(inputs, **options)  # runs; close, not equal


def test_left_to_right_classifier_exports(tmp_path, tokenizer, capsys):
    """A causal (is_decoder) classifier keeps its left-only attention and last-token pooling in ONNX."""
    src = random_model(tmp_path / "model", "BertForSequenceClassification", tokenizer, is_decoder=True)
    assert main(["export", "onnx", str(src), str(tmp_path / "onnx")]) == 0
    report = capsys.readouterr().out
    assert float(re.search(r"model\.onnx: max \|ONNX Runtime - PyTorch\| = (\S+)", report)[1]) <= 1e-4
    expected = bertforge.pipeline(model=src)(TEXTS, top_k=None)
    assert_same(bertforge.pipeline(model=tmp_path / "onnx", backend="onnx")(TEXTS, top_k=None), expected)


def test_int8_runtimes_stay_close(exported, capsys):
    src, out, _ = exported("BertForSequenceClassification", capsys)
    fp32 = bertforge.pipeline(model=src)(TEXTS, top_k=None)
    for int8 in (bertforge.pipeline(model=src, int8=True), bertforge.pipeline(model=out, backend="onnx", int8=True)):
        got = int8(TEXTS, top_k=None)
        for a, b in zip(got, fp32):
            scores = {x["label"]: x["score"] for x in a}
            assert all(abs(scores[x["label"]] - x["score"]) < 0.05 for x in b)
    model = bertforge.pipeline(model=src, int8=True).runtime.model
    quantised = [name for name, m in model.named_modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert any(name.endswith("intermediate.dense") for name in quantised) and "classifier" in quantised
    assert any(name.endswith("attention.self.fused") for name in quantised)


def test_onnx_errors(exported, capsys, tmp_path):
    src, out, _ = exported("BertForSequenceClassification", capsys)
    with pytest.raises(BertforgeError, match="exported with the head BertForSequenceClassification"):
        bertforge.pipeline("feature-extraction", model=out, backend="onnx")
    with pytest.raises(BertforgeError, match="model.onnx: no such file"):
        bertforge.pipeline(model=src, backend="onnx")
    with pytest.raises(BertforgeError, match="--backend must be one of"):
        bertforge.pipeline(model=src, backend="tensorrt")


def test_sentence_transformers_folder_exports_with_its_pooling(tmp_path, tokenizer, capsys):
    """The export keeps the folder's declaration, so the ONNX folder embeds as the checkpoint does (max pooling,
    not normalized, at most 16 tokens: none of the defaults)."""
    from bertforge.model.formats.sentence_folder import read_sentence_folder, write_sentence_folder

    src = random_model(tmp_path / "model", "BertModel", tokenizer)
    write_sentence_folder(src, "max", normalize=False, max_seq_length=16)
    assert main(["export", "onnx", str(src), str(tmp_path / "onnx")]) == 0
    assert read_sentence_folder(tmp_path / "onnx") == read_sentence_folder(src)
    embed = bertforge.pipeline(model=tmp_path / "onnx", backend="onnx")  # sentence-embedding: the folder says so
    assert embed.max_length == 16
    expected = bertforge.pipeline("sentence-embedding", model=src, max_length=16)(TEXTS, pooling="max", normalize=False)
    assert_same(embed(TEXTS), expected)
