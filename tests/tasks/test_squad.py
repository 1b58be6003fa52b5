import json
import logging

import numpy as np
import pytest

from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.tasks import make_family
from bertforge.tasks.metrics import normalize_answer, squad_metrics, squad_v1_evaluate, squad_v2_evaluate
from bertforge.inference.answer_spans import SquadExample, featurize, postprocess
from bertforge.tasks.squad import read_squad, split_by_article, squad_counts, write_predictions
from tests.conftest import require_shared


def example(id, gold, impossible=False):
    return SquadExample(id, "q?", "c", list(gold), [0] * len(gold), impossible)


# ---------------------------------------------------------------------------------------------------------
# Metrics, by hand

def test_normalize_answer():
    assert normalize_answer("The  Cat!") == "cat"
    assert normalize_answer("a\tb\n c") == "b c"
    assert normalize_answer("An apple, the theater; another") == "apple theater another"  # whole words only
    assert normalize_answer("don't (U.S.)") == "dont us"
    assert normalize_answer("...") == ""


def test_v1_exact_and_f1_take_the_best_gold():
    examples = [example("1", ["a big dog"]), example("2", ["big dog", "cat"]), example("3", ["x"])]
    predictions = {"1": "the Big  dog!", "2": "big cat"}  # "3" unanswered: scores 0
    out = squad_v1_evaluate(examples, predictions)
    # 2: "big cat" vs "cat": precision 1/2, recall 1 -> 2/3, better than 1/2 against "big dog"
    assert out == pytest.approx({"exact_match": 100 / 3, "f1": 100 * (1 + 2 / 3) / 3})


def test_v1_and_v2_differ_only_on_empty_answers():
    examples = [example("1", ["."])]  # gold normalising to nothing, as 3 answers in dev-v1.1
    assert squad_v1_evaluate(examples, {"1": "."}) == {"exact_match": 100.0, "f1": 0.0}
    assert squad_v2_evaluate(examples, {"1": "."})["f1"] == 100.0


def test_v2_no_answer_scoring():
    examples = [example("a", ["cat"]), example("b", [], impossible=True), example("c", [], impossible=True),
                example("d", ["dog"])]
    out = squad_v2_evaluate(examples, {"a": "", "b": "", "c": "bird", "d": "dog"})
    # "" vs answerable = 0, "" vs [""] = 1, text vs [""] = 0
    assert out == pytest.approx({"exact": 50.0, "f1": 50.0, "total": 4, "HasAns_exact": 50.0, "HasAns_f1": 50.0,
                                 "HasAns_total": 2, "NoAns_exact": 50.0, "NoAns_f1": 50.0, "NoAns_total": 2})


def threshold_case():
    examples = [example("1", ["cat"]), example("2", ["big dog"]), example("3", [], True), example("4", [], True)]
    predictions = {"1": "cat", "2": "dog", "3": "bird", "4": ""}
    na_probs = {"1": 0.1, "2": 0.2, "3": 0.3, "4": 0.9}
    return examples, predictions, na_probs


def test_v2_best_threshold_search():
    examples, predictions, na_probs = threshold_case()
    out = squad_v2_evaluate(examples, predictions, na_probs)
    # answering nothing scores 2 (the two no-answers); then in rising na_prob: 1 (+1) -> 3, 2 (+0 exact,
    # +2/3 f1), 3 (-1: answered an unanswerable one), 4 (+0: answered nothing anyway)
    assert out["best_exact"] == pytest.approx(75.0) and out["best_exact_thresh"] == 0.1
    assert out["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4) and out["best_f1_thresh"] == 0.2
    assert out["exact"] == 50.0 and out["f1"] == pytest.approx(100 * (2 + 2 / 3) / 4)
    # above na_prob_thresh a question counts as answered "no answer": 3 now scores 1
    assert squad_v2_evaluate(examples, predictions, na_probs, na_prob_thresh=0.25)["exact"] == 75.0


def test_threshold_search_on_best_spans_finds_lower_thresholds():
    examples, spans, null_odds = threshold_case()
    at_zero = {k: "" for k in spans}  # every null score beat its best span: predicting at 0 answers nothing
    official = squad_metrics(examples, at_zero, null_odds, version_2=True)
    assert official["f1"] == official["best_f1"] == 50.0  # the official search cannot undo a no-answer
    out = squad_metrics(examples, at_zero, null_odds, version_2=True, best_spans=spans)
    assert out["f1"] == 50.0 and out["best_f1_thresh"] == 0.2
    assert out["best_f1"] == pytest.approx(100 * (3 + 2 / 3) / 4)
    # predicting at the threshold found gives that score
    at_best = {k: "" if null_odds[k] > out["best_f1_thresh"] else text for k, text in spans.items()}
    assert squad_metrics(examples, at_best, null_odds, version_2=True)["f1"] == pytest.approx(out["best_f1"])


def test_squad_metrics_names():
    examples, predictions, na_probs = threshold_case()
    assert set(squad_metrics(examples, predictions)) == {"exact_match", "f1"}
    out = squad_metrics(examples, predictions, na_probs, version_2=True)
    assert {"exact_match", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_f1"} <= set(out)
    # the predictions are scored as they are: high null odds do not turn "bird" into a no-answer
    assert out["exact_match"] == squad_v2_evaluate(examples, predictions)["exact"] == 50.0


# ---------------------------------------------------------------------------------------------------------
# Reading

@pytest.fixture(scope="module")
def dev():
    return read_squad(require_shared("data", "squad", "dev-v1.1.json"))


@pytest.fixture(scope="module")
def dev_v2():
    return read_squad(require_shared("data", "squad", "dev-v2.0.rebuilt.json"))


@pytest.fixture(scope="module")
def train():
    return read_squad(require_shared("data", "squad", "train-v1.1.rebuilt.json"))


def test_read_shared_files(dev, dev_v2, train):
    assert len(dev) == 10570 and not any(ex.is_impossible for ex in dev)
    assert len(dev_v2) == 11873 and sum(ex.is_impossible for ex in dev_v2) == 5945
    assert all(ex.answer_texts == [] for ex in dev_v2 if ex.is_impossible)
    assert len(train) == 87599
    for ex in dev[:500] + train[::200]:
        for text, start in zip(ex.answer_texts, ex.answer_starts):
            assert ex.context[start:start + len(text)] == text


def write(tmp_path, data, name="s.json"):
    path = tmp_path / name
    path.write_text(json.dumps(data) if not isinstance(data, str) else data)
    return path


def squad_file(*qas, context="Paris is the capital of France."):
    return {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": context, "qas": list(qas)}]}]}


def test_answer_not_in_context_is_skipped_and_counted(tmp_path, caplog):
    path = write(tmp_path, squad_file(
        {"id": "ok", "question": "What?", "answers": [{"text": "Paris", "answer_start": 0}]},
        {"id": "moved", "question": "What?", "answers": [{"text": "France", "answer_start": 3}]},
        {"id": "gone", "question": "What?", "answers": [{"text": "Berlin", "answer_start": 0}]},
        {"id": "half", "question": "What?", "answers": [{"text": "Rome", "answer_start": 0},
                                                        {"text": "capital", "answer_start": 13}]},
    ))
    with caplog.at_level(logging.WARNING):
        examples = read_squad(path)
    assert [ex.id for ex in examples] == ["ok", "moved", "half"]
    assert examples[1].answer_starts == [24] and examples[2].answer_texts == ["capital"]
    [record] = caplog.records
    assert "2 answers not found" in record.getMessage() and "skipped 1 of 4 questions" in record.getMessage()
    assert "1 answers moved" in record.getMessage()
    assert "\n" not in record.getMessage()


@pytest.mark.parametrize("data, expected", [
    ({"version": "1.1"}, "has no 'data' field"),
    ('{"data": [', "s.json:1: not valid JSON"),
    (squad_file({"id": "1", "answers": []}), "data[0].paragraphs[0].qas[0] has no 'question' field"),
    (squad_file({"id": "1", "question": "q", "answers": [{"text": "Paris", "answer_start": "0"}]}),
     "answers[0].answer_start is str, expected int"),
])
def test_bad_files_give_one_line_errors(tmp_path, data, expected):
    path = write(tmp_path, data)
    with pytest.raises(BertforgeError) as err:
        read_squad(path)
    assert str(path) in str(err.value) and expected in str(err.value) and "\n" not in str(err.value)


# ---------------------------------------------------------------------------------------------------------
# Featurisation and post-processing on real data

@pytest.fixture(scope="module")
def dev_sample(dev):
    """~300 dev-v1.1 questions: a spread over the file plus the longest passages (several windows)."""
    longest = sorted(range(len(dev)), key=lambda i: -len(dev[i].context))[:100]
    return [dev[i] for i in sorted(set(longest) | set(range(0, len(dev), 50)))]


def passage_tokens(tokenizer, context):
    enc = tokenizer(context, return_offsets_mapping=True)
    return [tuple(o) for o in enc["offset_mapping"][1:-1]]


@pytest.mark.parametrize("max_length, doc_stride", [(384, 128), (96, 32)])
def test_windows_follow_google(tokenizer, dev_sample, max_length, doc_stride):
    windows = featurize(dev_sample, tokenizer, max_length=max_length, doc_stride=doc_stride)
    assert len({w.example_index for w in windows}) == len(dev_sample)
    hits = found = 0
    for e, ex in enumerate(dev_sample):
        mine = [w for w in windows if w.example_index == e]
        tokens = passage_tokens(tokenizer, ex.context)
        max_context = np.zeros(len(tokens), dtype=int)
        first = []
        for w in mine:
            passage = w.offsets[:, 0] >= 0
            c0 = int(np.argmax(passage))
            assert len(w.input_ids) <= max_length and c0 - 2 <= 64
            assert (w.token_type_ids == passage | (np.arange(len(w.input_ids)) == len(w.input_ids) - 1)).all()
            start = tokens.index(tuple(w.offsets[c0]))
            assert [tuple(o) for o in w.offsets[passage]] == tokens[start:start + passage.sum()]
            max_context[start:start + passage.sum()] += w.is_max_context[passage]
            first.append((start, start + passage.sum()))
            if w.start_position:
                found += 1
                text = ex.context[w.offsets[w.start_position, 0]:w.offsets[w.end_position, 1]]
                hits += normalize_answer(text) == normalize_answer(ex.answer_texts[0])
        assert [s for s, _ in first] == [k * doc_stride for k in range(len(first))]  # Google's stride
        assert all(b[0] < a[1] for a, b in zip(first, first[1:]))  # consecutive windows overlap
        assert first[-1][1] == len(tokens)  # the last window reaches the end
        assert (max_context == 1).all()
    assert len(windows) > len(dev_sample)  # some passages need several windows
    assert hits >= 0.99 * found and found >= len(dev_sample)


def one_hot(windows, position):
    rows = [np.zeros(len(w.input_ids), dtype=np.float32) for w in windows]
    for row, w in zip(rows, windows):
        row[getattr(w, position)] = 1.0
    return rows


@pytest.mark.parametrize("max_length, doc_stride", [(384, 128), (96, 32)])
def test_gold_logits_give_gold_answers(tokenizer, dev_sample, max_length, doc_stride, tmp_path):
    windows = featurize(dev_sample, tokenizer, max_length=max_length, doc_stride=doc_stride)
    # padded [N, L] logits, as the model returns them, work as well as per-window rows
    starts = np.zeros((len(windows), max(len(w.input_ids) for w in windows)), dtype=np.float32)
    for row, w in zip(starts, windows):
        row[w.start_position] = 1.0
    result = postprocess(dev_sample, windows, starts, one_hot(windows, "end_position"))
    assert squad_metrics(dev_sample, result.predictions)["exact_match"] >= 98.0
    assert all(1 <= len(result.nbest[ex.id]) <= 20 for ex in dev_sample)
    best = result.nbest[dev_sample[0].id]
    assert best[0]["text"] == result.predictions[dev_sample[0].id]
    assert sum(b["probability"] for b in best) == pytest.approx(1.0)
    assert all(ex.context[slice(*b["offsets"])] == b["text"] for ex in dev_sample for b in result.nbest[ex.id])
    write_predictions(tmp_path, result)
    assert json.loads((tmp_path / "predictions.json").read_text()) == result.predictions
    assert not (tmp_path / "null_odds.json").exists()


def test_v2_null_answers(tokenizer, dev_v2, tmp_path):
    examples = dev_v2[::40]
    windows = featurize(examples, tokenizer)
    result = postprocess(examples, windows, one_hot(windows, "start_position"), one_hot(windows, "end_position"),
                         version_2=True)
    for ex in examples:
        if ex.is_impossible:  # [CLS] scores highest in every window
            assert result.predictions[ex.id] == "" and result.null_odds[ex.id] > 0
    out = squad_metrics(examples, result.predictions, result.null_odds, version_2=True)
    assert out["NoAns_exact"] == 100.0 and out["HasAns_exact"] >= 98.0 and out["best_exact"] >= out["exact_match"]
    write_predictions(tmp_path, result)
    assert json.loads((tmp_path / "null_odds.json").read_text()) == result.null_odds
    # the threshold moves answers between the best span and no answer, nothing else
    for threshold, expected in ((np.inf, result.best_spans), (-np.inf, {k: "" for k in result.best_spans})):
        assert postprocess(examples, windows, one_hot(windows, "start_position"), one_hot(windows, "end_position"),
                           version_2=True, null_threshold=threshold).predictions == expected


def test_long_question_is_cut_to_64_tokens(tokenizer):
    ex = SquadExample("1", "why " * 100, "It rained. " * 200, ["rained"], [3])
    windows = featurize([ex], tokenizer)
    assert len(windows) > 1 and all(len(w.input_ids) <= 384 for w in windows)
    assert all(int(np.argmax(w.offsets[:, 0] >= 0)) == 64 + 2 for w in windows)
    assert windows[0].start_position == 67 and windows[1].start_position == 0  # "rained": passage token 1


def test_train_sample_featurizes(tokenizer, train):
    train = train[::300]
    windows = featurize(train, tokenizer)
    found = [w for w in windows if w.start_position]
    assert len(found) >= len(train)
    texts = [train[w.example_index].context[w.offsets[w.start_position, 0]:w.offsets[w.end_position, 1]]
             for w in found]
    same = sum(normalize_answer(t) == normalize_answer(train[w.example_index].answer_texts[0])
               for t, w in zip(texts, found))
    assert same >= 0.98 * len(found)


# ---------------------------------------------------------------------------------------------------------
# Splitting a file by article

def question_ids(data) -> list[str]:
    return [qa["id"] for article in data["data"] for p in article["paragraphs"] for qa in p["qas"]]


def articles_file(n: int, version="v2.0") -> dict:
    """n articles of 1-3 paragraphs of 1-3 questions, every third one unanswerable."""
    data, k = [], 0
    for a in range(n):
        paragraphs = []
        for p in range(1 + a % 3):
            qas = []
            for _ in range(1 + (a + p) % 3):
                qas.append({"id": f"q{k}", "question": f"Question {k}?", "is_impossible": k % 3 == 0,
                            "answers": [] if k % 3 == 0 else [{"text": "Paris", "answer_start": 0}]})
                k += 1
            paragraphs.append({"context": f"Paris, article {a} paragraph {p}.", "qas": qas})
        data.append({"title": f"Article {a}", "paragraphs": paragraphs})
    return {"version": version, "data": data}


def test_split_by_article_keeps_articles_whole(tmp_path, capsys):
    data = articles_file(9)
    path = write(tmp_path, data, "all.json")
    assert main(["squad-split", str(path), "--out", str(tmp_path / "split"), "--train-fraction", "0.6"]) == 0
    train, dev = (json.loads((tmp_path / "split" / name).read_text()) for name in ("train-v2.0.json", "dev-v2.0.json"))
    assert len(train["data"]) == 5 and len(dev["data"]) == 4 and train["version"] == dev["version"] == "v2.0"
    # every article on exactly one side, as it was, each side in file order
    assert sorted(train["data"] + dev["data"], key=data["data"].index) == data["data"]
    for side in (train, dev):
        assert [data["data"].index(a) for a in side["data"]] == sorted(data["data"].index(a) for a in side["data"])
    assert not set(question_ids(train)) & set(question_ids(dev))
    assert sorted(question_ids(train) + question_ids(dev)) == sorted(question_ids(data))
    # the printed counts
    out = capsys.readouterr().out.splitlines()
    for line, side, name in zip(out, (train, dev), ("train", "dev")):
        counts = squad_counts(side, name)
        assert line.startswith(f"{name}: {counts['articles']} articles, {counts['questions']} questions "
                               f"({counts['unanswerable']} unanswerable) -> ")
    # what finetune squad_v2 reads from the folder
    family = make_family("squad_v2", tmp_path / "split")
    assert [family.path(split).name for split in ("train", "dev")] == ["train-v2.0.json", "dev-v2.0.json"]


def test_split_by_article_is_seeded():
    data = articles_file(12)
    first = split_by_article(data, 0.5, seed=1)
    assert split_by_article(data, 0.5, seed=1) == first
    assert split_by_article(data, 0.5, seed=2) != first
    assert [len(part["data"]) for part in split_by_article(data, 0.25, seed=1)] == [3, 9]


def test_split_names_files_by_version_and_refuses_bad_requests(tmp_path, capsys):
    path = write(tmp_path, articles_file(4, version="1.1"), "v1.json")
    assert main(["squad-split", str(path), "--out", str(tmp_path / "v1")]) == 0
    assert sorted(p.name for p in (tmp_path / "v1").iterdir()) == ["dev-v1.1.json", "train-v1.1.json"]
    for data, options, expected in [
        (articles_file(4), ["--train-fraction", "0.9"], "a train fraction of 0.9 of 4 articles leaves one part empty"),
        (articles_file(4, version="3"), [], "version is '3', expected 1.1 or 2.0"),
        ({"version": "v2.0", "data": [{"title": "t"}]}, [], "data[0] has no 'paragraphs' field"),
    ]:
        path = write(tmp_path, data, "bad.json")
        assert main(["squad-split", str(path), "--out", str(tmp_path / "bad"), *options]) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"bertforge: error: {path}: ") and expected in err and "\n" not in err
    assert not (tmp_path / "bad").exists()


def test_split_real_v2_dev(dev_v2, tmp_path, capsys):
    path = require_shared("data", "squad", "dev-v2.0.rebuilt.json")
    assert main(["squad-split", str(path), "--out", str(tmp_path)]) == 0
    train, dev = (json.loads((tmp_path / name).read_text()) for name in ("train-v2.0.json", "dev-v2.0.json"))
    counts = [squad_counts(side, "") for side in (train, dev)]
    assert [c["articles"] for c in counts] == [18, 17]
    assert sum(c["questions"] for c in counts) == 11873 and sum(c["unanswerable"] for c in counts) == 5945
    train_ids, dev_ids = ({ex.id for ex in read_squad(tmp_path / f"{name}-v2.0.json")} for name in ("train", "dev"))
    assert not train_ids & dev_ids and train_ids | dev_ids == {ex.id for ex in dev_v2}
