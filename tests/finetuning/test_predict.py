"""`bertforge predict` on plain text: the same predictions as through a task's split, in JSON lines.

The fine-tuned folders are tiny random encoders with a task head, saved as `finetune` saves RUN/best/;
each test writes the same examples as the task's own files and runs both paths of the command.
"""

import json

import numpy as np
import pytest
import torch

from bertforge import BertConfig
from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.inference.batches import run_model
from bertforge.tasks import make_family
from bertforge.inference.batches import SEQUENCE_INPUTS, padding
from bertforge.tasks.base import softmax
from bertforge.model.architectures.task_heads import (
    BertForMultipleChoice, BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification
)
from bertforge.finetuning.predict import read_examples
from bertforge.tasks import glue


@pytest.fixture(scope="module")
def finetuned(tmp_path_factory, tokenizer):
    """make(model class, label names) -> a fine-tuned folder: tiny random encoder, head, vocabulary."""
    def make(model_class, labels=("LABEL_0", "LABEL_1")):
        folder = tmp_path_factory.mktemp(model_class.__name__)
        torch.manual_seed(0)
        # weights ten times the usual scale, so that a random encoder tells the examples apart
        config = BertConfig.from_name("tiny", vocab_size=tokenizer.vocab_size, id2label=dict(enumerate(labels)),
                                      initializer_range=0.2)
        model_class(config).save_pretrained(folder, tokenizer)
        return folder
    return make


def predict_text(capsys, task, model, *options) -> list[dict]:
    capsys.readouterr()
    assert main(["predict", task, "--model", str(model), *map(str, options)]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def predict_split(task, model, data, out, split="test") -> None:
    assert main(["predict", task, "--model", str(model), "--data", str(data), "--out", str(out),
                 "--split", split]) == 0


SENTENCES = ["a gripping , beautifully acted film .", "Dull.", "It's not bad — but it isn't good either!",
             "the plot , such as it is , goes nowhere fast and the jokes land with a thud ."]
PAIRS = [("The cat sat on the mat.", "A cat was sitting on a mat."), ("He left early.", "Stocks fell 3% on Monday."),
         ("Amrozi accused his brother of distorting evidence.",
          "Referring to him as the witness, Amrozi accused his brother of deliberately distorting his evidence.")]


@pytest.mark.parametrize("task, examples, labels", [
    ("sst2", [(s,) for s in SENTENCES], ("negative", "positive")),
    ("mrpc", PAIRS, ("different", "paraphrase")),
    ("stsb", PAIRS, ("stsb",)),
])
def test_glue_text_matches_the_test_split(finetuned, tokenizer, tmp_path, capsys, task, examples, labels):
    model = finetuned(BertForSequenceClassification, labels)
    t = glue.glue_task(task)
    # the examples as the task's test file...
    (tmp_path / t.folder).mkdir()
    header = ["index", *(c for c in (t.text_a, t.text_b) if c)]
    rows = ["\t".join(header)] + ["\t".join([str(i), *e]) for i, e in enumerate(examples)]
    (tmp_path / t.folder / "test.tsv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    predict_split(task, model, tmp_path, tmp_path / "submission")
    submitted = [line.split("\t")[1] for line in (tmp_path / "submission" / f"{t.folder}_test.tsv").read_text()
                 .splitlines()[1:]]
    split = make_family(task, tmp_path).read("test", tokenizer)
    logits = np.stack(run_model(BertForSequenceClassification.from_pretrained(model), split.encoded,
                                padding(SEQUENCE_INPUTS, tokenizer.pad_token_id), ("logits",), batch_size=8)["logits"])
    # ...and as plain text: the first on the command line, the others in a .txt file
    (tmp_path / "mine.txt").write_text("".join("\t".join(e) + "\n" for e in examples[1:]), encoding="utf-8")
    got = predict_text(capsys, task, model, "--text", "\t".join(examples[0]), "--input", tmp_path / "mine.txt")

    fields = [f for f in t.hf_text if f]
    assert [g["input"] for g in got] == [dict(zip(fields, e)) for e in examples]
    if t.labels is None:
        assert [g["score"] for g in got] == pytest.approx(logits[:, 0].tolist(), abs=1e-5)
        assert [g["score"] for g in got] == pytest.approx([float(s) for s in submitted], abs=1e-3)
        return
    assert [g["label"] for g in got] == [labels[t.labels.index(s)] for s in submitted]
    assert {g["label"] for g in got} == set(labels)  # the two paths agree on more than a constant
    for g, p in zip(got, softmax(logits)):
        assert list(g["probabilities"]) == list(labels)  # the model's label names, in its order
        assert list(g["probabilities"].values()) == pytest.approx(p.tolist(), abs=1e-5)
        assert sum(g["probabilities"].values()) == pytest.approx(1.0, abs=1e-5)
        assert g["label"] == max(g["probabilities"], key=g["probabilities"].get)


def test_bf16_probabilities_within_its_precision_of_fp32(finetuned, capsys):
    model = finetuned(BertForSequenceClassification, ("negative", "positive"))
    fp32 = predict_text(capsys, "sst2", model, "--text", SENTENCES[0], "--text", SENTENCES[3])
    bf16 = predict_text(capsys, "sst2", model, "--text", SENTENCES[0], "--text", SENTENCES[3], "--bf16")
    for a, b in zip(bf16, fp32):
        assert list(a["probabilities"].values()) == pytest.approx(list(b["probabilities"].values()), abs=0.02)
        assert list(a["probabilities"].values()) != list(b["probabilities"].values())  # bf16 did run


def test_out_folder_holds_the_same_lines(finetuned, tmp_path, capsys):
    model = finetuned(BertForSequenceClassification)
    shown = predict_text(capsys, "cola", model, "--text", SENTENCES[0], "--text", SENTENCES[1])
    assert main(["predict", "cola", "--model", str(model), "--text", SENTENCES[0], "--text", SENTENCES[1],
                 "--out", str(tmp_path / "out")]) == 0
    written = (tmp_path / "out" / "predictions.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in written] == shown and len(shown) == 2


def test_a_model_with_nan_weights_is_an_error_not_invalid_json(finetuned, tmp_path, capsys):
    """NaN in the weights: one line naming the example (it printed NaN, which no JSON reader takes); nothing
    written."""
    from safetensors.torch import load_file, save_file

    model = finetuned(BertForSequenceClassification)
    weights = load_file(model / "model.safetensors")
    weights["classifier.bias"][:] = float("nan")
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    for file in model.iterdir():
        if file.name != "model.safetensors":
            (tmp_path / file.name).write_bytes(file.read_bytes())
    capsys.readouterr()
    assert main(["predict", "sst2", "--model", str(tmp_path), "--text", "fine", "--text", "odd", "--out",
                 str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1, captured
    assert "example 1: the model's output is not a finite number (NaN or infinity)" in captured.err
    assert not (tmp_path / "out").exists()


def test_ner_gives_a_tag_per_word(finetuned, tmp_path, capsys):
    labels = ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]
    model = finetuned(BertForTokenClassification, labels)
    sentences = ["John  Smith lives in New York .",
                 "Schwarzenegger's  unprecedented re-election , in Sacramento on Tuesday , surprised nobody", "Hi"]
    got = predict_text(capsys, "conll2003", model, *[x for s in sentences for x in ("--text", s)])
    for g, sentence in zip(got, sentences, strict=True):
        assert g["words"] == sentence.split() and len(g["tags"]) == len(g["words"])
        assert set(g["tags"]) <= set(labels)
    # the same sentences as a CoNLL test file (the train file only names the tags)
    (tmp_path / "train.txt").write_text("".join(f"w{i} {tag}\n" for i, tag in enumerate(labels)))
    (tmp_path / "test.txt").write_text("\n".join("".join(f"{w} O\n" for w in s.split()) for s in sentences))
    predict_split("conll2003", model, tmp_path, tmp_path / "pred")
    columns = [line.split() for line in (tmp_path / "pred" / "conll_test_predictions.txt").read_text().splitlines()]
    assert [c[2] for c in columns if c] == [tag for g in got for tag in g["tags"]]
    assert len({tag for g in got for tag in g["tags"]}) > 1


@pytest.mark.parametrize("task", ["squad", "squad_v2"])
def test_squad_answers_are_spans_of_the_context(finetuned, tmp_path, capsys, task):
    model = finetuned(BertForQuestionAnswering)
    long_context = " ".join(f"In {1900 + i} the river flooded the town of Kells for the {i}th time." for i in range(60))
    records = [{"question": "Where is the capital of France?", "context": "Paris is the capital of France."},
               {"question": "When did the river flood Kells?", "context": long_context},  # several windows
               {"question": "Who?", "context": "Ünïcode — spaces  and\ttabs; 42 km² of text."}]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                                         encoding="utf-8")
    got = predict_text(capsys, task, model, "--input", tmp_path / "mine.jsonl")
    assert [g["input"] for g in got] == records
    for g, r in zip(got, records):
        if g["answer"]:
            assert r["context"][g["start"]:g["end"]] == g["answer"] and 0 < g["probability"] <= 1
        else:
            assert g["start"] is None and g["end"] is None
        assert ("no_answer" in g) == (task == "squad_v2")
        if task == "squad_v2":
            assert g["no_answer"] == (g["answer"] == "")
    # the same questions as a SQuAD file
    paragraphs = [{"context": r["context"], "qas": [{"id": f"q{i}", "question": r["question"], "answers": []}]}
                  for i, r in enumerate(records)]
    (tmp_path / "dev.json").write_text(json.dumps({"version": "1.1", "data": [{"title": "t",
                                                                              "paragraphs": paragraphs}]}))
    predict_split(task, model, tmp_path / "dev.json", tmp_path / "pred", split="dev")
    official = json.loads((tmp_path / "pred" / "predictions.json").read_text())
    assert [g["answer"] for g in got] == [official[f"q{i}"] for i in range(len(records))]
    if task == "squad_v2":  # the threshold's two ends: always the best span, never an answer
        always = predict_text(capsys, task, model, "--input", tmp_path / "mine.jsonl", "--null-threshold", "inf")
        never = predict_text(capsys, task, model, "--input", tmp_path / "mine.jsonl", "--null-threshold=-inf")
        assert all(g["answer"] for g in always) and not any(g["answer"] for g in never)


def test_multiple_choice(finetuned, tmp_path, capsys):
    model = finetuned(BertForMultipleChoice)
    records = [{"question": "Where would you keep milk?", "choices": ["fridge", "oven", "garden", "car", "roof"]},
               {"question": "What do bees make?", "choices": ["honey", "steel", "glass"]}]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records[1:]))
    got = predict_text(capsys, "commonsenseqa", model, "--text", "\t".join([records[0]["question"],
                       *records[0]["choices"]]), "--input", tmp_path / "mine.jsonl")
    assert [g["input"] for g in got] == records
    for g, r in zip(got, records):
        assert len(g["probabilities"]) == len(r["choices"])
        assert sum(g["probabilities"]) == pytest.approx(1.0, abs=1e-5)
        assert g["prediction"] == int(np.argmax(g["probabilities"]))
    # the same questions in the Hugging Face layout of the task's files
    hf = [{"id": str(i), "question": r["question"], "answerKey": "",
           "choices": {"label": list("ABCDE"[:len(r["choices"])]), "text": r["choices"]}}
          for i, r in enumerate(records)]
    (tmp_path / "dev.jsonl").write_text("".join(json.dumps(r) + "\n" for r in hf))
    predict_split("commonsenseqa", model, tmp_path / "dev.jsonl", tmp_path / "pred", split="dev")
    lines = (tmp_path / "pred" / "commonsenseqa_dev_predictions.jsonl").read_text().splitlines()
    assert [g["prediction"] for g in got] == [json.loads(line)["prediction"] for line in lines]


def kinds(names) -> dict:
    """Text fields as a task family declares them: a choices field holds several texts."""
    return {name: list if name == "choices" else str for name in names}


@pytest.mark.parametrize("name, content, fields, expected", [
    ("a.txt", "fine\n\nalso fine\n", ("sentence",), "a.txt:2: empty line"),
    ("a.txt", "one\ttwo\nno tab here\n", ("sentence1", "sentence2"),
     "a.txt:2: expected 2 tab-separated field(s) (sentence1, sentence2), found 1"),
    ("a.txt", "one\t \n", ("sentence1", "sentence2"), "a.txt:1: 'sentence2' must be a non-empty text"),
    ("a.txt", "a question\tone choice\n", ("question", "choices"),
     "a.txt:1: 'choices' must be a list of at least 2 non-empty texts"),
    ("a.jsonl", '{"sentence": "ok"}\n{"sentence": "cut\n', ("sentence",), "a.jsonl:2: not valid JSON"),
    ("a.jsonl", '{"sentence": "ok"}\n["a list"]\n', ("sentence",), "a.jsonl:2: expected a JSON object"),
    ("a.jsonl", '{"question": "q?"}\n', ("question", "context"), "a.jsonl:1: missing field 'context'"),
    ("a.jsonl", '{"question": "q?", "context": 3}\n', ("question", "context"), "a.jsonl:1: 'context' must be"),
    ("a.txt", "", ("sentence",), "a.txt: no examples"),
])
def test_bad_input_is_one_line_naming_file_and_line(tmp_path, name, content, fields, expected):
    path = tmp_path / name
    path.write_text(content)
    with pytest.raises(BertforgeError) as err:
        read_examples(kinds(fields), [], path)
    assert str(err.value).startswith(f"{tmp_path}/{expected}") and "\n" not in str(err.value)


def test_text_values_and_file_lines_in_order(tmp_path):
    (tmp_path / "a.txt").write_text("\ufeffsecond\r\nthird\n", encoding="utf-8")  # a byte-order mark, CRLF
    assert read_examples(kinds(["sentence"]), ["first"], tmp_path / "a.txt") == [
        {"sentence": "first"}, {"sentence": "second"}, {"sentence": "third"}]
    with pytest.raises(BertforgeError, match=r"^--text:2: expected 2 tab-separated"):
        read_examples(kinds(["sentence1", "sentence2"]), ["a\tb", "a b"])


def test_command_errors(finetuned, tmp_path, capsys):
    model = str(finetuned(BertForSequenceClassification))
    for options in (["--text", "x", "--data", str(tmp_path)], []):
        assert main(["predict", "sst2", "--model", model, *options]) == 2
        assert "give either --data" in capsys.readouterr().err
    (tmp_path / "bad.txt").write_text("a\tb\n")
    assert main(["predict", "sst2", "--model", model, "--input", str(tmp_path / "bad.txt")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"bertforge: error: {tmp_path / 'bad.txt'}:1: expected 1 tab-separated field(s) (sentence), found 2"
    # the input is checked before a model is loaded: no model folder is needed to find its fault
    assert main(["predict", "sst2", "--model", str(tmp_path / "absent"), "--input", str(tmp_path / "bad.txt")]) == 2
    assert capsys.readouterr().err.strip() == err
