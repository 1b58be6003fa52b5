"""Your own questions and passages: fine-tuned (SQuAD v1 and v2 kinds), predicted, and checked against transformers'
model on the saved folder."""

import csv
import json

import numpy as np
import pytest

import bertforge
from bertforge.model.architectures.registry import load_config
from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.tasks import make_family
from tests.conftest import fine_tune, one_line_error, write_jsonl

FACTS = [("Who wrote Emma?", "Emma is a novel written by Jane Austen and published in 1815.", "Jane Austen"),
         ("When was Emma published?", "Emma is a novel written by Jane Austen and published in 1815.", "1815"),
         ("Which river flows through Ghent?", "The Lys and the Scheldt meet in Ghent, in Flanders.", "The Lys"),
         ("Where is Ghent?", "The Lys and the Scheldt meet in Ghent, in Flanders.", "Flanders"),
         ("What colour is the door?", "Her house had a red door and two small windows.", "red"),
         ("How many windows?", "Her house had a red door and two small windows.", "two")]
UNANSWERABLE = [("Who painted the door?", "Her house had a red door and two small windows."),
                ("What is the capital of Flanders?", "The Lys and the Scheldt meet in Ghent, in Flanders.")]


def squad_rows(with_unanswerable: bool) -> list[dict]:
    rows = [{"question": q, "context": c, "answers": {"text": [a], "answer_start": [c.index(a)]}} for q, c, a in FACTS]
    if with_unanswerable:
        rows += [{"question": q, "context": c, "answers": {"text": [], "answer_start": []}} for q, c in UNANSWERABLE]
    return rows


@pytest.fixture(scope="module")
def fine_tuned(tiny_model, tmp_path_factory):
    """A model fine-tuned on answerable and unanswerable questions: SQuAD v2.0's kind."""
    folder = tmp_path_factory.mktemp("qa")
    data = write_jsonl(folder / "train.jsonl", squad_rows(with_unanswerable=True))
    return fine_tune("question-answering", tiny_model, folder / "run", "--train", data, "--dev", data, "--epochs", 4,
                     "--batch-size", 4)


def test_unanswerable_questions_make_a_v2_model(fine_tuned):
    results = json.loads((fine_tuned / "eval_results.json").read_text())
    assert results["HasAns_total"] == len(FACTS) and results["NoAns_total"] == len(UNANSWERABLE)
    assert {"exact_match", "f1", "best_f1", "best_f1_thresh"} <= set(results)
    assert load_config(str(fine_tuned / "best")).extra["version_2_with_negative"] is True


def test_predict_is_the_best_span_of_the_transformers_model(fine_tuned, capsys):
    """transformers 5 has no question-answering pipeline (it points to text generation), so the check is on its
    BertForQuestionAnswering: with one window per question, bertforge's answer is the best-scoring span of the
    reference's logits over the context, or no answer where [CLS] scores higher; and bertforge's own pipeline,
    told the model may answer nothing, answers the same."""
    transformers = pytest.importorskip("transformers")
    import torch

    from tests.inference.test_pipelines import best_span

    items = [{"question": q, "context": c} for q, c, _ in FACTS[::2]] + [{"question": UNANSWERABLE[0][0],
                                                                           "context": UNANSWERABLE[0][1]}]
    capsys.readouterr()
    flags = [flag for item in items for flag in ("--text", f"{item['question']}\t{item['context']}")]
    assert main(["predict", "question-answering", "--model", str(fine_tuned / "best"), *flags, "--no-progress"]) == 0
    ours = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert {p["no_answer"] for p in ours} == {True, False}  # the config says the model may answer nothing
    model = transformers.BertForQuestionAnswering.from_pretrained(fine_tuned / "best").eval()
    reference = transformers.AutoTokenizer.from_pretrained(fine_tuned / "best")
    for item, prediction in zip(items, ours):
        enc = reference(item["question"], item["context"], return_offsets_mapping=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            out = model(**enc)
        start, end = out.start_logits[0].numpy(), out.end_logits[0].numpy()
        context = [i for i, t in enumerate(enc["token_type_ids"][0].tolist()) if t == 1][:-1]
        (s, e), score = best_span(start, end, context[0], context[-1])
        if start[0] + end[0] > score:
            assert prediction["no_answer"] and prediction["answer"] == ""
        else:
            assert (prediction["start"], prediction["end"]) == (offsets[s][0], offsets[e][1])
            assert prediction["answer"] == item["context"][prediction["start"]:prediction["end"]]
    pipe = bertforge.pipeline(model=fine_tuned / "best")
    assert [a["answer"] for a in pipe(items, handle_impossible_answer=True)] == [p["answer"] for p in ours]


def test_answerable_csv_makes_a_v1_model(tokenizer, tmp_path):
    """Answers as JSON in a CSV cell; no unanswerable question, so SQuAD v1.1's metric and no null answer."""
    rows = squad_rows(with_unanswerable=False)[:2]
    with open(tmp_path / "train.csv", "w", newline="") as f:
        csv.writer(f).writerows([["q", "passage", "gold"]] + [[r["question"], r["context"], json.dumps(r["answers"])]
                                                              for r in rows])
    family = make_family("question-answering", options={"train": tmp_path / "train.csv", "question_column": "q",
                                                        "context_column": "passage", "answers_column": "gold"})
    split = family.read("train", tokenizer)
    assert not family.version_2 and family.config_entries() == {"version_2_with_negative": False}
    assert [(e.question, e.answer_texts, e.answer_starts) for e in split.examples] == [
        (r["question"], r["answers"]["text"], r["answers"]["answer_start"]) for r in rows]
    window = split.extra["windows"][0]  # the answer's tokens are the training target
    tokens = tokenizer.convert_ids_to_tokens(window.input_ids[window.start_position:window.end_position + 1].tolist())
    assert tokens == ["jane", "austen"]
    gold = {"start_logits": [np.eye(len(w.input_ids))[w.start_position] for w in split.extra["windows"]],
            "end_logits": [np.eye(len(w.input_ids))[w.end_position] for w in split.extra["windows"]]}
    assert family.score(split, gold) == {"exact_match": 100.0, "f1": 100.0}


CONTEXT = "Emma is a novel written by Jane Austen."


@pytest.mark.parametrize("answers, message", [
    ({"text": ["Jane Austen"], "answer_start": [3]},
     "train.jsonl:1: answer 'Jane Austen' is not at answer_start 3 in the context (which reads 'a is a nove' there)"),
    ({"text": ["Jane Austen"], "answer_start": []}, "train.jsonl:1: 'answers' must be {\"text\": [...], "),
    ([{"text": "Jane Austen", "answer_start": 27}], "train.jsonl:1: 'answers' must be {\"text\": [...], "),
    ({"text": [""], "answer_start": [0]}, "train.jsonl:1: answer '' at 0: expected a non-empty text"),
])
def test_bad_answers_are_one_line_errors(tokenizer, tmp_path, answers, message):
    path = write_jsonl(tmp_path / "train.jsonl", [{"question": "Who?", "context": CONTEXT, "answers": answers}])
    with pytest.raises(BertforgeError) as e:
        make_family("question-answering", options={"train": path}).read("train", tokenizer)
    one_line_error(e, message)


def test_a_missing_column_or_question_is_named(tokenizer, tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"question": "Who?", "passage": CONTEXT, "answers": {}}])
    with pytest.raises(BertforgeError) as e:
        make_family("question-answering", options={"train": path}).read("train", tokenizer)
    one_line_error(e, "train.jsonl:1: no column 'context' (see --context-column; the columns are question, passage, "
                      "answers)")
    path = write_jsonl(tmp_path / "test.jsonl", [{"question": " ", "context": CONTEXT}])
    with pytest.raises(BertforgeError) as e:  # a test split needs no answers, but a question
        make_family("question-answering", options={"test": path}).read("test", tokenizer)
    one_line_error(e, "test.jsonl:1: 'question' must be a non-empty text")
