import csv
import json

import pytest

from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.tasks import make_family
from bertforge.tasks.multiple_choice import MultipleChoiceExample, encode_multiple_choice, read_multiple_choice
from tests.conftest import fine_tune, one_line_error, require_shared, write_jsonl


# (task, folder, file stems, counts, choices per question): the README's table.
REAL = [
    ("commonsenseqa", "commonsenseqa", ("train_rand_split", "dev_rand_split", "test_rand_split_no_answers"),
     (9_741, 1_221, 1_140), {5}),
    ("openbookqa", "openbookqa", ("train", "validation", "test"), (4_957, 500, 500), {4}),
    ("arc", "arc_easy", ("train", "validation", "test"), (2_251, 570, 2_376), {3, 4, 5}),
    ("copa", "copa", ("train", "validation", "test"), (400, 100, 500), {2}),
]


@pytest.mark.parametrize("task,folder,stems,counts,choices", REAL)
def test_real_counts(task, folder, stems, counts, choices):
    root = require_shared("data", "multiple_choice", folder)
    for stem, count in zip(stems, counts):
        examples = read_multiple_choice(task, root / f"{stem}.jsonl")
        assert len(examples) == count
        assert {len(e.endings) for e in examples} <= choices
        unlabelled = task in ("commonsenseqa", "copa") and stem.startswith("test")
        assert all((e.label is None) == unlabelled for e in examples)
        assert all(e.label is None or 0 <= e.label < len(e.endings) for e in examples)


def test_real_arc_digit_keys():
    path = require_shared("data", "multiple_choice", "arc_easy", "train.jsonl")
    records = {r["id"]: r for r in map(json.loads, path.read_text().splitlines())}
    digits = [e for e in read_multiple_choice("arc", path) if records[e.guid]["choices"]["label"][0] == "1"]
    assert digits and all(e.label == int(records[e.guid]["answerKey"]) - 1 for e in digits)


def test_real_copa_and_swag():
    copa = read_multiple_choice("copa", require_shared("data", "multiple_choice", "copa", "train.jsonl"))[0]
    assert copa == MultipleChoiceExample("0", "My body cast a shadow over the grass.", "What was the cause?",
                                         ["The sun was rising.", "The grass was cut."], 0)
    swag_dir = require_shared("data", "multiple_choice", "swag_sample")
    swag = read_multiple_choice("swag", next(swag_dir.glob("*.jsonl")))
    assert len(swag) == 10 and swag[0].question == "A drum line" and swag[0].label == 0


def test_swag_csv(tmp_path):
    header = ",video-id,fold-ind,startphrase,sent1,sent2,gold-source,ending0,ending1,ending2,ending3"
    row = "0,lsmdc0001,17,She sits. He,She sits.,He,gold,stands.,runs.,\"sleeps, then wakes.\",eats."
    (tmp_path / "val.csv").write_text(f"{header},label\n{row},2\n")
    (tmp_path / "test.csv").write_text(f"{header}\n{row}\n")
    example = read_multiple_choice("swag", tmp_path / "val.csv")[0]
    endings = ["stands.", "runs.", "sleeps, then wakes.", "eats."]
    assert example == MultipleChoiceExample("0", "She sits.", "He", endings, 2)
    assert read_multiple_choice("swag", tmp_path / "test.csv")[0].label is None
    records = [{"sent1": "s", "sent2": "t", "ending0": "a", "ending1": "b", "ending2": "c", "ending3": "d"}] * 2
    (tmp_path / "swag.json").write_text(json.dumps(records, indent=1))
    assert [e.label for e in read_multiple_choice("swag", tmp_path / "swag.json")] == [None, None]
    (tmp_path / "swag.json").write_text(json.dumps([*records, []]))
    with pytest.raises(BertforgeError, match=r"swag.json\[2\]: expected a JSON object$"):
        read_multiple_choice("swag", tmp_path / "swag.json")
    (tmp_path / "short.csv").write_text(f"{header},label\n{row}\n")
    with pytest.raises(BertforgeError, match=r"short.csv:2: expected 12 columns$"):
        read_multiple_choice("swag", tmp_path / "short.csv")


def test_official_qa_layout(tmp_path):
    record = {"id": "q1", "answerKey": "2", "question": {"stem": "Which?", "choices": [
        {"label": "1", "text": "this"}, {"label": "2", "text": "that"}, {"label": "3", "text": "neither"}]}}
    (tmp_path / "arc.jsonl").write_text(json.dumps(record) + "\n")
    assert read_multiple_choice("arc", tmp_path / "arc.jsonl") == [
        MultipleChoiceExample("q1", "Which?", "", ["this", "that", "neither"], 1)]


@pytest.mark.parametrize("task,lines,error", [
    ("commonsenseqa", ['{"answerKey": "F", "question": {"stem": "?", "choices": [{"label": "A", "text": "a"}]}}'],
     "1: answerKey 'F' is not one of the choice labels A"),
    ("copa", ['{"premise": "p", "choice1": "a", "choice2": "b", "question": "cause", "label": 0}', "{oops"],
     "2: not valid JSON (Expecting property name enclosed in double quotes)"),
    ("copa", ['{"premise": "p", "choice1": "a", "question": "effect", "label": 1}'], "1: missing field 'choice2'"),
    ("copa", ['{"premise": "p", "choice1": "a", "choice2": "b", "question": "why", "label": 1}'],
     "1: question 'why' is not cause or effect"),
    ("swag", ['{"sent1": "s", "sent2": "t", "ending0": "a", "ending1": "b", "ending2": "c", "ending3": "d", '
              '"label": 4}'], "1: label 4 is not one of 0..3"),
    ("openbookqa", ["[1]"], "1: expected a JSON object"),
])
def test_bad_records_name_file_and_line(tmp_path, task, lines, error):
    path = tmp_path / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(BertforgeError) as e:
        read_multiple_choice(task, path)
    assert str(e.value) == f"{path}:{error}"


def test_empty_file_and_unknown_task(tmp_path):
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(BertforgeError, match="empty.jsonl: no examples"):
        read_multiple_choice("copa", tmp_path / "empty.jsonl")
    with pytest.raises(BertforgeError, match="unknown multiple-choice task 'race'"):
        read_multiple_choice("race", tmp_path / "empty.jsonl")


def test_encode_layout_and_choice_padding(tokenizer):
    examples = [
        MultipleChoiceExample("a", "The man turned on the faucet.", "What was the effect?",
                              ["Water flowed.", "It froze."], 1),
        MultipleChoiceExample("b", "Which is a mammal?", "", ["whale", "shark", "trout"], 0),
    ]
    features = encode_multiple_choice(examples, tokenizer, max_length=64)
    assert features["choice_mask"] == [[1, 1, 0], [1, 1, 1]] and features["labels"] == [1, 0]
    assert [len(choices) for choices in features["input_ids"]] == [3, 3]
    first = tokenizer.decode(features["input_ids"][0][0], skip_special_tokens=False)
    assert first == "[CLS] the man turned on the faucet. [SEP] what was the effect? water flowed. [SEP]"
    last = tokenizer.decode(features["input_ids"][1][2], skip_special_tokens=False)
    assert last == "[CLS] which is a mammal? [SEP] trout [SEP]"
    ids, types = features["input_ids"][1][0], features["token_type_ids"][1][0]
    assert types == [0] * (ids.index(tokenizer.sep_token_id) + 1) + [1] * 2  # "whale [SEP]"

    unlabelled = [MultipleChoiceExample("c", "x", "", ["a", "b"], None)]
    assert "labels" not in encode_multiple_choice(unlabelled, tokenizer, max_length=64)


def test_encode_real_arc_truncates(tokenizer):
    path = require_shared("data", "multiple_choice", "arc_easy", "validation.jsonl")
    features = encode_multiple_choice(read_multiple_choice("arc", path), tokenizer, max_length=32)
    assert {len(c) for c in features["input_ids"]} == {5} and {sum(m) for m in features["choice_mask"]} == {3, 4, 5}
    assert max(len(ids) for choices in features["input_ids"] for ids in choices) == 32


# Your own data: the multiple-choice family

QUIZ = [("What colour is the sky?", ["blue", "green", "salty", "loud"], "blue"),
        ("What do cows drink?", ["petrol", "water", "light", "songs"], "water"),
        ("Which animal barks?", ["a fish", "a snail", "a dog", "a moth"], "a dog"),
        ("What is frozen water?", ["steam", "sand", "smoke", "ice"], "ice")]


def quiz_csv(path, rows=QUIZ):
    with open(path, "w", newline="") as f:
        csv.writer(f).writerows([["question", "A", "B", "C", "D", "answer"]] + [[q, *c, a] for q, c, a in rows])
    return path


def test_own_choices_fine_tune_predict_and_load_in_transformers(tiny_model, tmp_path, capsys):
    transformers = pytest.importorskip("transformers")
    import torch

    import bertforge

    data = quiz_csv(tmp_path / "quiz.csv", QUIZ * 4)
    out = fine_tune("multiple-choice", tiny_model, tmp_path / "run", "--train", data, "--dev", data,
                    "--choices-columns", "A", "B", "C", "D", "--label-column", "answer", "--epochs", 2,
                    "--batch-size", 4)
    assert "accuracy" in json.loads((out / "eval_results.json").read_text())
    capsys.readouterr()
    texts = ["\t".join([q, *c]) for q, c, _ in QUIZ]
    assert main(["predict", "multiple-choice", "--model", str(out / "best"),
                 *[flag for t in texts for flag in ("--text", t)], "--no-progress"]) == 0
    ours = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [p["input"] for p in ours] == [{"question": q, "choices": c} for q, c, _ in QUIZ]
    model = transformers.BertForMultipleChoice.from_pretrained(out / "best").eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(out / "best")
    for (question, choices, _), prediction in zip(QUIZ, ours):
        enc = tokenizer([question] * len(choices), choices, padding=True, return_tensors="pt")
        with torch.no_grad():
            p = model(**{k: v[None] for k, v in enc.items()}).logits[0].softmax(-1).numpy()
        assert prediction["prediction"] == int(p.argmax())
        assert prediction["probabilities"] == pytest.approx(p.tolist(), abs=1e-5)
    found = bertforge.pipeline(model=out / "best")([{"question": q, "choices": c} for q, c, _ in QUIZ])
    assert [f["choice"] for f in found] == [p["prediction"] for p in ours]


def test_own_choices_in_a_list_column_with_a_context(tokenizer, tmp_path):
    """Choices in one column holding a list, the label an index (or a text: the one equal to a choice wins),
    and a context before the question, laid out as SWAG."""
    rows = [{"scene": "She opens the fridge.", "stem": "She", "options": ["takes milk.", "flies away."], "gold": 0},
            {"scene": "He reads.", "stem": "He", "options": ["1", "0"], "gold": "0"}]
    family = make_family("multiple-choice", options={
        "train": write_jsonl(tmp_path / "train.jsonl", rows), "context_column": "scene", "question_column": "stem",
        "choices_columns": ["options"], "label_column": "gold"})
    split = family.read("train", tokenizer)
    assert split.examples == [MultipleChoiceExample("train-0", "She opens the fridge.", "She",
                                                    ["takes milk.", "flies away."], 0),
                              MultipleChoiceExample("train-1", "He reads.", "He", ["1", "0"], 1)]
    first = tokenizer.decode(split.encoded["input_ids"][0][0], skip_special_tokens=False)
    assert first == "[CLS] she opens the fridge. [SEP] she takes milk. [SEP]"
    assert family.text_fields == {"context": str, "question": str, "choices": list}  # predict --text's fields
    typed = family.example({"context": "He reads.", "question": "He", "choices": ["sleeps.", "runs."]}, "0")
    assert typed == MultipleChoiceExample("0", "He reads.", "He", ["sleeps.", "runs."], None)


@pytest.mark.parametrize("row, options, message", [
    (["Sky?", "blue", "green", "red", "grey", "purple"], {},
     "quiz.csv:2: label 'purple' is not among the choices (blue | green | red | grey) nor an index 0..3"),
    (["Sky?", "blue", "green", "red", "grey", "blue"], {"choices_columns": ["A", "B", "E"]},
     "quiz.csv:2: no column 'E' (see --choices-columns; the columns are question, A, B, C, D, answer)"),
    (["Sky?", "blue", "green", "red", "grey", "blue"], {"choices_columns": ["A"]},
     "quiz.csv:2: the choices ('A') must be at least 2 texts"),
])
def test_own_choices_bad_rows_are_one_line(tokenizer, tmp_path, row, options, message):
    path = quiz_csv(tmp_path / "quiz.csv", [(row[0], row[1:5], row[5])])
    family = make_family("multiple-choice", options={"train": path, "choices_columns": ["A", "B", "C", "D"],
                                                     "label_column": "answer", **options})
    with pytest.raises(BertforgeError) as e:
        family.read("train", tokenizer)
    one_line_error(e, message)


def test_the_right_choice_as_a_number_or_its_text():
    from bertforge.tasks.multiple_choice import choice_index

    choices = ["here", "there", "2"]
    assert [choice_index(v, choices, "f:1") for v in (1, "1", 1.0, "1.0", " 0 ", "there", "2")] == [1, 1, 1, 1, 0, 1, 2]
    for value, words in ((float("nan"), "f:2: label nan is not a class"), ("", "f:2: the label is empty"),
                         (3, "f:2: label 3 is not among the choices")):
        with pytest.raises(BertforgeError, match=words):
            choice_index(value, choices, "f:2")


@pytest.mark.parametrize("column", ["choices", "choices.text"])
def test_own_choices_in_hugging_face_arc_layout_as_the_built_in_task(tokenizer, column):
    """choices {"text", "label"} (the column, or its dotted path to the texts) and answerKey letters or 1-based
    digits: the same examples as the `arc` task."""
    path = require_shared("data", "multiple_choice", "arc_easy", "train.jsonl")
    family = make_family("multiple-choice", options={"train": path, "choices_columns": [column],
                                                     "label_column": "answerKey"})
    own = family.read("train", tokenizer, limit=400).examples
    built_in = read_multiple_choice("arc", path)[:400]
    assert [(e.context, e.endings, e.label) for e in own] == [(e.context, e.endings, e.label) for e in built_in]
    records = [json.loads(line) for line in path.read_text().splitlines()[:400]]
    digits = [e for e, r in zip(own, records) if r["choices"]["label"][0] == "1"]
    assert digits and all(e.label == int(r["answerKey"]) - 1 for e, r in zip(own, records) if e in digits)


def test_dotted_columns_name_nested_fields(tokenizer, tmp_path):
    rows = [{"q": {"stem": "Sky?"}, "opts": {"all": ["blue", "red"]}, "gold": {"index": 1}}]
    family = make_family("multiple-choice", options={"train": write_jsonl(tmp_path / "train.jsonl", rows),
                                                     "question_column": "q.stem", "choices_columns": ["opts.all"],
                                                     "label_column": "gold.index"})
    assert family.read("train", tokenizer).examples == [MultipleChoiceExample("train-0", "Sky?", "", ["blue", "red"],
                                                                               1)]
    family = make_family("multiple-choice", options={"train": tmp_path / "train.jsonl", "question_column": "q.text"})
    with pytest.raises(BertforgeError) as e:
        family.read("train", tokenizer)
    one_line_error(e, "train.jsonl:1: no column 'q.text' (see --question-column; the columns are q, opts, gold)")


def test_an_object_of_choices_without_texts_is_named(tokenizer, tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"question": "Sky?", "choices": {"A": "blue", "B": "red"},
                                                   "label": "A"}])
    family = make_family("multiple-choice", options={"train": path})
    with pytest.raises(BertforgeError) as e:
        family.read("train", tokenizer)
    one_line_error(e, "train.jsonl:1: 'choices' holds an object with 'A', 'B', not {\"text\": [choices], \"label\": "
                      "[keys]} (Hugging Face's ARC layout); the ARC data sets themselves are the built-in task `arc`")


def test_encoding_pads_choices_as_a_batch_does(tokenizer):
    """One padding of choices: a split encoded for fine-tuning (padded to its most choices) makes the same batch as
    the pipelines' rows of each example's own choices padded by `pad` (a missing choice: one [PAD] token, 0 in
    choice_mask)."""
    from bertforge.inference.batches import pad, pad_batch, padding
    from bertforge.tasks.multiple_choice import MultipleChoiceFamily

    examples = [MultipleChoiceExample("a", "The man turned on the faucet.", "What was the effect?",
                                      ["Water flowed.", "It froze."], 1),
                MultipleChoiceExample("b", "Which is a mammal?", "", ["whale", "shark", "trout"], 0)]
    split = encode_multiple_choice(examples, tokenizer, max_length=64)
    inputs = padding(MultipleChoiceFamily.inputs, tokenizer.pad_token_id)
    encoded = pad_batch(split, [0, 1], inputs)
    alone = [encode_multiple_choice([e], tokenizer, max_length=64) for e in examples]
    rows = [{k: one[k][0] for k in ("input_ids", "token_type_ids")} for one in alone]
    batched = pad(rows, tokenizer.pad_token_id)
    assert set(encoded) == set(batched) == {"input_ids", "token_type_ids", "attention_mask", "choice_mask"}
    for key in encoded:
        assert encoded[key].tolist() == batched[key].tolist(), key
    assert encoded["input_ids"][0, 2, 0] == tokenizer.pad_token_id and encoded["attention_mask"][0, 2].sum() == 1
