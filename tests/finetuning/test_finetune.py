"""Fine-tuning end to end on a few dozen real examples per task family, with a tiny random encoder.

These prove the paths (reading, featurising, training, evaluating, best checkpoint, submission files); the
accuracy of real fine-tuning is measured by benchmarks/ and recorded in BENCHMARKS.md.
"""

import json
import logging
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from bertforge import BertTokenizer
from bertforge.cli import main
from bertforge.finetuning.distill import distill
from bertforge.finetuning.evaluate import SPEED_FIGURES, speed_line, weights_bytes
from bertforge.finetuning.finetune import (FinetuneJob, finetune, grouped_order, length_grouped_order,
                                           query_groups, shuffled_order)
from bertforge.inference.batches import pad_batch
from bertforge.tasks import make_family
from bertforge.tasks.glue import read_glue
from bertforge.model.architectures.task_heads import (BertForMultipleChoice, BertForSequenceClassification,
                                                      BertForTokenClassification)
from tests.conftest import require_shared
from tests.training.test_train import nan_weights


def run(task, model, data, out, **kw):
    options = dict(epochs=1, batch_size=8, max_train_examples=32, max_eval_examples=24, lr=1e-3, progress=False)
    return finetune(task, model, data, out, **{**options, **kw})


def rescored(capsys, task, folder, data, examples) -> dict:
    """What `bertforge evaluate` gives for a saved model on the first `examples` evaluation examples."""
    capsys.readouterr()
    assert main(["evaluate", task, "--model", str(folder), "--data", str(data),
                 "--max-eval-examples", str(examples)]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_misspelt_keyword_is_refused_by_name(tmp_path):
    """From Python, a keyword that is neither a setting nor a task family's option is refused before anything runs
    (a family's option, such as `text_column`, is taken)."""
    with pytest.raises(TypeError, match=r"finetune\(\): no setting or task option 'lerning_rate'"):
        finetune("sst2", tmp_path / "no-model", tmp_path, tmp_path / "run", lerning_rate=1e-5)
    with pytest.raises(TypeError, match=r"distill\(\): no setting or task option 'alhpa', 'epoch'"):
        distill("sst2", tmp_path / "no-model", "tiny", tmp_path, tmp_path / "run", alhpa=0.5, epoch=2)
    assert not (tmp_path / "run").exists()


def test_glue_classification_writes_results_and_best(tiny_model, tmp_path):
    data = require_shared("data", "glue", "SST-2")
    result = run("sst2", tiny_model, data, tmp_path / "run", epochs=2)
    saved = json.loads((tmp_path / "run" / "eval_results.json").read_text())
    assert saved["accuracy"] == result["accuracy"] == max(h["accuracy"] for h in saved["history"])
    assert saved["history"][saved["epoch_of_best"] - 1]["accuracy"] == saved["accuracy"]
    assert len(saved["history"]) == 2 and saved["train_examples"] == 32
    best = BertForSequenceClassification.from_pretrained(tmp_path / "run" / "best")
    assert best.config.id2label == {0: "negative", 1: "positive"}  # GLUE's names, as transformers' run_glue
    assert (tmp_path / "run" / "best" / "vocab.txt").is_file()
    rows = [json.loads(x) for x in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["step"] == 8 and "accuracy" in rows[-1]


def test_glue_regression_and_submission(tiny_model, tmp_path, capsys):
    data = require_shared("data", "glue", "STS-B")
    result = run("stsb", tiny_model, data, tmp_path / "run")
    assert {"pearson", "spearman"} <= set(result)
    # the same checkpoint and pairs in batches of another size: fp32 sums differ in their last bits (AVX2 kernels),
    # and a barely trained regressor's scores lie so close together that its Pearson moves in the fifth decimal
    rescore = rescored(capsys, "stsb", tmp_path / "run" / "best", data, 24)
    assert rescore["pearson"] == pytest.approx(result["pearson"], abs=1e-4)
    assert main(["predict", "stsb", "--model", str(tmp_path / "run" / "best"), "--data", str(data),
                 "--out", str(tmp_path / "pred"), "--max-eval-examples", "5"]) == 0
    lines = (tmp_path / "pred" / "STS-B_test.tsv").read_text().splitlines()
    assert lines[0] == "index\tprediction" and [line.split("\t")[0] for line in lines[1:]] == list("01234")
    # each submitted score is the model's output on that test pair, to the file's 3 decimals
    model = BertForSequenceClassification.from_pretrained(tmp_path / "run" / "best")
    tokenizer = BertTokenizer.from_pretrained(tmp_path / "run" / "best")
    test = read_glue("stsb", data.parent, "test")[:5]
    enc = tokenizer([e.text_a for e in test], [e.text_b for e in test], padding=True, truncation=True,
                    max_length=128, return_tensors="pt")
    with torch.no_grad():
        scores = model(**enc).logits[:, 0].tolist()
    assert [float(line.split("\t")[1]) for line in lines[1:]] == pytest.approx(scores, abs=1e-3)


def test_ner_scores_valid_and_test_and_writes_columns(tiny_model, tmp_path):
    data = require_shared("data", "conll2003")
    result = run("conll2003", tiny_model, data, tmp_path / "run")
    assert {"f1", "precision", "recall", "test_f1"} <= set(result)
    model = BertForTokenClassification.from_pretrained(tmp_path / "run" / "best")
    assert "B-PER" in model.config.id2label.values()
    assert main(["predict", "conll2003", "--model", str(tmp_path / "run" / "best"), "--data", str(data),
                 "--out", str(tmp_path / "pred"), "--max-eval-examples", "3"]) == 0
    first = (tmp_path / "pred" / "conll_test_predictions.txt").read_text().splitlines()[0].split()
    assert len(first) == 3 and first[2] in model.config.id2label.values()


def test_multiple_choice(tiny_model, tmp_path, capsys):
    data = require_shared("data", "multiple_choice", "commonsenseqa")
    result = run("commonsenseqa", tiny_model, data, tmp_path / "run")
    assert rescored(capsys, "commonsenseqa", tmp_path / "run" / "best", data, 24) == {"accuracy": result["accuracy"]}
    assert result["accuracy"] * 24 == round(result["accuracy"] * 24)  # a share of the 24 questions
    assert BertForMultipleChoice.from_pretrained(tmp_path / "run" / "best").classifier.out_features == 1


@pytest.mark.parametrize("task, data", [("squad", "squad"), ("squad_v2", "squad/dev-v2.0.rebuilt.json")])
def test_squad(tiny_model, tmp_path, capsys, task, data):
    data = require_shared("data", *data.split("/"))
    result = run(task, tiny_model, data, tmp_path / "run", max_train_examples=16, max_eval_examples=16)
    again = rescored(capsys, task, tmp_path / "run" / "best", data, 16)
    assert again["exact_match"] == pytest.approx(result["exact_match"]) and again["f1"] == pytest.approx(result["f1"])
    assert result["exact_match"] <= result["f1"]  # an exact match scores F1 100 too
    if task == "squad_v2":
        assert {"HasAns_f1", "NoAns_f1"} <= set(result)
        assert result["f1"] == pytest.approx((result["HasAns_f1"] * result["HasAns_total"]
                                              + result["NoAns_f1"] * result["NoAns_total"]) / 16)


def test_evaluate_reproduces_the_best_epoch(tiny_model, tmp_path, capsys):
    data = require_shared("data", "glue", "SST-2")
    result = run("sst2", tiny_model, data, tmp_path / "run")
    capsys.readouterr()
    main(["evaluate", "sst2", "--model", str(tmp_path / "run" / "best"), "--data", str(data),
          "--max-eval-examples", "24"])
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(result["accuracy"])


def test_unknown_task_is_one_line(tmp_path, capsys):
    out = str(tmp_path / "run")
    assert main(["finetune", "nosuch", "--model", str(tmp_path), "--data", str(tmp_path), "--out", out]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("bertforge: error: unknown task 'nosuch'") and "\n" not in err


def test_length_grouped_batches_cover_every_row_once_with_little_padding():
    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 128, size=1000)
    batches = length_grouped_order(lengths, 32, np.random.default_rng(1))
    rows = np.concatenate(batches)
    assert sorted(rows.tolist()) == list(range(1000))
    padded = sum(len(b) * lengths[b].max() for b in batches)
    assert lengths.sum() / padded > 0.9  # random batches of these lengths are about 50% padding
    again = length_grouped_order(lengths, 32, np.random.default_rng(1))
    assert [b.tolist() for b in batches] == [b.tolist() for b in again]


def test_plain_shuffle_covers_every_row_once_in_random_batches():
    lengths = np.random.default_rng(0).integers(5, 128, size=1000)
    batches = shuffled_order(lengths, 32, np.random.default_rng(1))
    assert sorted(np.concatenate(batches).tolist()) == list(range(1000))
    assert [len(b) for b in batches] == [32] * 31 + [8]
    padded = sum(len(b) * lengths[b].max() for b in batches)
    assert lengths.sum() / padded < 0.6  # no grouping: rows of any length share a batch


def test_a_rerankers_batches_hold_each_querys_passages_whole():
    """Rows with a query id ("groups") are batched by whole queries, about batch_size rows, every row once."""
    rng = np.random.default_rng(0)
    ids = np.repeat(np.arange(50), rng.integers(2, 7, size=50))  # 50 queries of 2 to 6 passages
    ids = ids[rng.permutation(len(ids))].tolist()  # their rows anywhere in the file
    groups = query_groups(ids)
    assert [sorted(set(ids[r] for r in g)) for g in groups] == [[q] for q in dict.fromkeys(ids)]
    encoded = {"input_ids": [[101, 7, 102]] * len(ids), "labels": [0.0] * len(ids), "groups": ids}
    job = FinetuneJob(make_family("rerank"), encoded, 16, 0, None, SimpleNamespace(pad_token_id=0))
    assert {"input_ids", "labels", "groups"} <= set(job.batch(0, 0, 1))  # the model's loss ranks within a query
    batches = job._batches
    assert sorted(np.concatenate(batches).tolist()) == list(range(len(ids)))
    for batch in batches:
        queries = {ids[r] for r in batch}
        assert sum(ids.count(q) for q in queries) == len(batch)  # every passage of each query in the batch
    assert job.per_batch == round(16 * 50 / len(ids)) and job.steps_per_epoch == -(-50 // job.per_batch)
    again = grouped_order(groups, job.per_batch, np.random.default_rng([0, 0]))
    assert [b.tolist() for b in batches] == [b.tolist() for b in again]


def test_pad_batch_pads_tokens_and_token_labels():
    features = {"input_ids": [[101, 5, 102], [101, 102]], "attention_mask": [[1, 1, 1], [1, 1]],
                "labels": [[-100, 3, -100], [-100, -100]]}
    batch = pad_batch(features, [0, 1], {"input_ids": 0, "attention_mask": 0, "labels": -100})
    assert batch["input_ids"].tolist() == [[101, 5, 102], [101, 102, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 1, 0]]
    assert batch["labels"].tolist() == [[-100, 3, -100], [-100, -100, -100]]


def test_patience_stops_early_and_the_model_card_says_what_was_trained(tiny_model, tmp_path):
    data = require_shared("data", "glue", "SST-2")
    result = run("sst2", tiny_model, data, tmp_path / "run", epochs=6, lr=0.0, patience=1)
    # lr 0: the first evaluation stays the best, so one more without improvement ends the run
    assert len(result["history"]) == 2 and result["epoch_of_best"] == 1
    assert (tmp_path / "run" / "final").is_dir()
    card = (tmp_path / "run" / "best" / "README.md").read_text()
    assert "# sst2, fine-tuned with bertforge" in card and "labels: negative, positive" in card
    assert f"| accuracy | {result['accuracy']:.4f} |" in card and "32 training examples" in card
    saved = json.loads((tmp_path / "run" / "args.json").read_text())
    assert saved["patience"] == 1 and saved["extra"]["task"] == "sst2" and saved["extra"]["data"] == str(data)


def test_the_adaptive_recipe_stops_early_by_default_where_it_runs_many_epochs(tiny_model, tmp_path):
    """40 examples: the adaptive recipe's 20 epochs, and its patience of 3; lr 0 keeps the first evaluation the
    best, so the run ends at the fourth, the best model kept."""
    data = require_shared("data", "glue", "SST-2")
    result = run("sst2", tiny_model, data, tmp_path / "run", recipe="adaptive", lr=0.0, max_train_examples=40,
                 epochs=None, batch_size=None)
    saved = json.loads((tmp_path / "run" / "args.json").read_text())
    assert saved["patience"] == 3 and saved["extra"]["epochs"] == 20.0
    assert len(result["history"]) == 4 and result["epoch_of_best"] == 1
    assert (tmp_path / "run" / "best" / "model.safetensors").is_file()


def sizes(folder) -> dict[str, int]:
    return {str(p.relative_to(folder)): p.stat().st_size for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_finished_run_keeps_best_and_final_without_optimizer_state(tiny_model, tmp_path, capsys):
    data = require_shared("data", "glue", "SST-2")
    run("sst2", tiny_model, data, tmp_path / "run", save_every=1)
    files = sizes(tmp_path / "run")
    assert {name.split("/")[0] for name in files} == {"args.json", "metrics.jsonl", "eval_results.json", "best",
                                                      "final"}
    assert not [name for name in files if name.endswith("training_state.pt")]
    weights = files["final/model.safetensors"]
    assert files["best/model.safetensors"] == weights
    assert sum(files.values()) < 2.2 * weights  # the two models, and small files
    assert main(["finetune", "sst2", "--model", str(tiny_model), "--data", str(data), "--out", str(tmp_path / "run"),
                 "--max-train-examples", "32", "--epochs", "1", "--batch-size", "8", "--resume"]) == 2
    assert "the run is complete (final/)" in capsys.readouterr().err

    # --keep-checkpoints: the last --keep step checkpoints stay, with the optimizer state that --resume needs
    run("sst2", tiny_model, data, tmp_path / "kept", save_every=1, keep=2, keep_checkpoints=True)
    files = sizes(tmp_path / "kept")
    assert sorted({name.split("/")[0] for name in files if name.startswith("step-")}) == ["step-0000003",
                                                                                          "step-0000004"]
    assert files["step-0000004/training_state.pt"] > 1.9 * weights  # Adam's two moments per weight


def test_a_rerun_from_args_file_gives_the_same_args_and_metrics(tiny_model, tmp_path, capsys):
    data = require_shared("data", "glue", "SST-2")
    first, again, other = tmp_path / "first", tmp_path / "again", tmp_path / "other"
    assert main(["finetune", "sst2", "--model", str(tiny_model), "--data", str(data), "--out", str(first),
                 "--max-train-examples", "32", "--max-eval-examples", "16", "--batch-size", "8", "--epochs", "2",
                 "--lr", "1e-3", "--grad-accum", "2", "--log-every", "1", "--no-progress"]) == 0
    assert main(["finetune", "--args-file", str(first / "args.json"), "--out", str(again)]) == 0
    assert main(["finetune", "--args-file", str(first / "args.json"), "--out", str(other), "--seed", "2"]) == 0
    capsys.readouterr()

    def recorded(folder):
        args = json.loads((folder / "args.json").read_text())
        args["extra"].pop("command")
        return args

    def figures(folder):
        return [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"}
                for line in (folder / "metrics.jsonl").read_text().splitlines()]

    expected = recorded(first)
    assert expected["device"] == "cpu" and expected["bertforge"] and expected["extra"]["max_length"] == 128
    assert expected["grad_accum"] == 2 and expected["extra"]["arguments"]["task"] == "sst2"
    expected["out"] = expected["extra"]["arguments"]["out"] = str(again)
    assert recorded(again) == expected
    assert figures(again) == figures(first)
    expected["out"] = expected["extra"]["arguments"]["out"] = str(other)
    expected["seed"] = expected["extra"]["arguments"]["seed"] = 2
    assert recorded(other) == expected
    assert figures(other) != figures(first)


def test_evaluate_writes_results_and_predictions_to_out(tiny_model, tmp_path, capsys):
    data = require_shared("data", "glue", "SST-2")
    run("sst2", tiny_model, data, tmp_path / "run")
    capsys.readouterr()
    out = tmp_path / "scores"
    assert main(["evaluate", "sst2", "--model", str(tmp_path / "run" / "best"), "--data", str(data),
                 "--max-eval-examples", "24", "--out", str(out), "--no-progress"]) == 0
    streams = capsys.readouterr()
    printed = json.loads(streams.out)
    saved = json.loads((out / "eval_results.json").read_text())
    speed = saved.pop("speed")
    assert saved == {"task": "sst2", "model": str(tmp_path / "run" / "best"), "splits": ["dev"], **printed}
    rows = [line.split("\t") for line in (out / "SST-2_dev.tsv").read_text().splitlines()[1:]]
    gold = [e.label for e in read_glue("sst2", data.parent, "dev")[:24]]
    assert len(rows) == 24
    assert sum(int(p) == g for (_, p), g in zip(rows, gold)) / 24 == pytest.approx(printed["accuracy"])
    assert streams.err.splitlines()[-1] == speed_line(speed)


def test_evaluate_records_the_speed_line(tiny_model, tmp_path, capsys):
    """examples/s (not checked: tests do not time), and how they were run; the parameters are the model's, the size
    on disk its weights file's."""
    data = require_shared("data", "glue", "SST-2")
    run("sst2", tiny_model, data, tmp_path / "run")
    best = tmp_path / "run" / "best"
    capsys.readouterr()
    assert main(["evaluate", "sst2", "--model", str(best), "--data", str(data), "--max-eval-examples", "8",
                 "--batch-size", "4", "--device", "cpu", "--out", str(tmp_path / "scores"), "--no-progress"]) == 0
    speed = json.loads((tmp_path / "scores" / "eval_results.json").read_text())["speed"]
    assert set(speed) == set(SPEED_FIGURES)
    model = BertForSequenceClassification.from_pretrained(best)
    assert speed["parameters"] == sum(p.numel() for p in model.parameters())
    assert speed["bytes_on_disk"] == (best / "model.safetensors").stat().st_size == weights_bytes(best)
    assert speed["examples_per_s"] > 0 and speed["threads"] == torch.get_num_threads() > 0
    assert (speed["batch_size"], speed["device"], speed["bf16"]) == (4, "cpu", False)
    line = capsys.readouterr().err.splitlines()[-1]
    assert line == speed_line(speed)
    threads = f"{speed['threads']} thread{'s' if speed['threads'] > 1 else ''}"
    assert line.startswith("speed: ") and f" examples/s (batch 4, cpu, {threads}) · " in line
    assert line.endswith(f" · {speed['parameters'] / 1e6:.1f}M parameters · "
                         f"{speed['bytes_on_disk'] / 2**20:.1f} MiB on disk")


@pytest.fixture(scope="module")
def resumable(tiny_model, tmp_path_factory):
    """A finished sst2 run whose step checkpoints stay: --resume may continue it."""
    run = tmp_path_factory.mktemp("resumable") / "run"
    assert main(["finetune", "sst2", "--model", str(tiny_model), "--data", str(require_shared("data", "glue", "SST-2")),
                 "--out", str(run), "--max-train-examples", "16", "--max-eval-examples", "8", "--batch-size", "8",
                 "--epochs", "1", "--save-every", "1", "--keep-checkpoints", "--no-progress"]) == 0
    return run


@pytest.mark.parametrize("change, words", [
    (["mrpc", "--data", "GLUE/MRPC"], ["the task mrpc", "started with sst2"]),
    (["sst2", "--data", "COPY"], ["--data COPY", "started with GLUE/SST-2"]),
    (["sst2", "--model", "MODEL"], ["--model MODEL", "started with TINY"]),
    (["sst2", "--max-length", "64"], ["--max-length 64", "started with 128"]),
    (["sst2", "--batch-size", "4"], ["--batch-size 4", "started with 8"]),
])
def test_resume_refuses_another_task_data_model_or_length(tiny_model, resumable, tmp_path, capsys, change, words):
    import shutil

    glue = require_shared("data", "glue")
    fill = {"GLUE": str(glue), "COPY": str(tmp_path / "copy" / "SST-2"), "MODEL": str(tmp_path / "model"),
            "TINY": str(tiny_model)}
    shutil.copytree(glue / "SST-2", tmp_path / "copy" / "SST-2")
    shutil.copytree(tiny_model, tmp_path / "model")

    def filled(text):
        for key, path in fill.items():
            text = text.replace(key, path)
        return text
    before = {p: p.read_bytes() for p in sorted(resumable.rglob("*")) if p.is_file()}
    argv = ["finetune", "--model", str(tiny_model), "--data", str(glue / "SST-2"), "--out", str(resumable),
            "--max-train-examples", "16", "--max-eval-examples", "8", "--batch-size", "8", "--epochs", "2",
            "--no-progress", "--resume"]
    assert main([argv[0], filled(change[0]), *argv[1:], *map(filled, change[1:])]) == 2  # the last flag wins
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("bertforge")]
    assert len(said) == 1 and "Traceback" not in err, err
    for word in [*map(filled, words), str(resumable / "args.json")]:
        assert word in said[0], said[0]
    assert {p: p.read_bytes() for p in sorted(resumable.rglob("*")) if p.is_file()} == before


def relabelled(best, folder, names, swap=False):
    """A copy of a fine-tuned SST-2 model whose config names its labels `names`; with swap, its outputs in the
    other order (the classifier's rows swapped: the same model, labelled as transformers' models may be)."""
    import shutil

    from safetensors.torch import load_file, save_file

    shutil.copytree(best, folder)
    config = json.loads((folder / "config.json").read_text())
    config["id2label"] = {str(i): n for i, n in enumerate(names)}
    config["label2id"] = {n: i for i, n in enumerate(names)}
    (folder / "config.json").write_text(json.dumps(config))
    if swap:
        weights = load_file(folder / "model.safetensors")
        for key in ("classifier.weight", "classifier.bias"):
            weights[key] = weights[key].flip(0).contiguous()
        save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def test_glue_label_names_in_predict_and_pipeline_and_for_older_models(tiny_model, tmp_path, capsys):
    """A fine-tuned SST-2 model answers negative/positive in predict and pipeline(); a model fine-tuned before label
    names (ids "0"/"1"), one named as transformers' models may be, in the other order, and one with LABEL_i,
    evaluate to the same score and predict the same labels and probabilities."""
    import bertforge

    data = require_shared("data", "glue", "SST-2")
    result = run("sst2", tiny_model, data, tmp_path / "run", epochs=2)
    best = tmp_path / "run" / "best"
    texts = [e.text_a for e in read_glue("sst2", data.parent, "dev")[:24]]

    def predicted(folder):
        capsys.readouterr()
        assert main(["predict", "sst2", "--model", str(folder), *(f"--text={t}" for t in texts)]) == 0
        return [json.loads(line) for line in capsys.readouterr().out.splitlines()]

    ours = predicted(best)
    assert all(list(p["probabilities"]) == ["negative", "positive"] for p in ours)
    piped = bertforge.pipeline(model=best)(texts, top_k=None)
    assert [p["label"] for p in ours] == [r[0]["label"] for r in piped]
    assert [p["probabilities"]["positive"] for p in ours] == pytest.approx(
        [next(x["score"] for x in r if x["label"] == "positive") for r in piped], abs=1e-5)
    for name, names, swap in (("old", ["0", "1"], False), ("theirs", ["POSITIVE", "NEGATIVE"], True),
                              ("generic", ["LABEL_0", "LABEL_1"], False)):
        folder = relabelled(best, tmp_path / name, names, swap)
        assert rescored(capsys, "sst2", folder, data, 24)["accuracy"] == pytest.approx(result["accuracy"])
        theirs = predicted(folder)
        assert [p["label"] for p in theirs] == [p["label"] for p in ours], name
        for mine, other in zip(ours, theirs):
            assert list(other["probabilities"]) == ["negative", "positive"]
            assert list(other["probabilities"].values()) == pytest.approx(list(mine["probabilities"].values()),
                                                                          abs=1e-5)


def test_without_rate_batch_or_epochs_the_run_adapts_and_says_so(tiny_model, tmp_path, caplog):
    data = require_shared("data", "glue", "SST-2")
    argv = ["finetune", "sst2", "--model", str(tiny_model), "--data", str(data), "--max-train-examples", "40",
            "--max-eval-examples", "16", "--no-progress"]
    with caplog.at_level(logging.INFO, logger="bertforge"):
        assert main([*argv, "--out", str(tmp_path / "adaptive"), "--lr", "3e-4"]) == 0
    said = ("fine-tuning with lr 0.0003, batch 16, 20 epochs, warm-up 0.1, weight decay 0.01, patience 3 (batch_size, "
            "warmup, weight_decay, patience, epochs from 40 training examples")
    assert said in caplog.text
    saved = json.loads((tmp_path / "adaptive" / "args.json").read_text())
    assert (saved["lr"], saved["batch_size"], saved["steps"]) == (3e-4, 16, 60)  # 3 steps an epoch, 20 epochs
    assert (saved["warmup"], saved["weight_decay"]) == (0.1, 0.01)
    assert saved["extra"]["recipe"] == "adaptive" and "40 training examples" in saved["extra"]["chosen_by"]
    assert main([*argv, "--out", str(tmp_path / "paper"), "--recipe", "paper"]) == 0
    saved = json.loads((tmp_path / "paper" / "args.json").read_text())
    assert (saved["lr"], saved["batch_size"], saved["steps"], saved["extra"]["epochs"]) == (2e-5, 32, 6, 3.0)


def test_a_log_gets_the_training_bar_without_cursor_codes(tiny_model, tmp_path, capfd):
    """Off a terminal (a log file), the evaluation's bar under the training bar is left out: no cursor codes."""
    data = require_shared("data", "glue", "SST-2")
    assert main(["finetune", "sst2", "--model", str(tiny_model), "--data", str(data), "--out", str(tmp_path / "run"),
                 "--max-train-examples", "32", "--max-eval-examples", "16", "--epochs", "1", "--lr", "1e-3",
                 "--batch-size", "8"]) == 0
    err = capfd.readouterr().err
    assert "step" in err and "\x1b[A" not in err and "evaluate dev" not in err


def test_a_model_with_nan_weights_stops_in_one_line_and_saves_no_model(tiny_model, tmp_path, capsys):
    """Every loss NaN: the tenth step stops the run (the evaluations after epochs 1 and 2 save no best/)."""
    data, run = require_shared("data", "glue", "SST-2"), tmp_path / "run"
    assert main(["finetune", "sst2", "--model", str(nan_weights(tiny_model, tmp_path / "nan")), "--data", str(data),
                 "--out", str(run), "--epochs", "3", "--batch-size", "8", "--max-train-examples", "32",
                 "--max-eval-examples", "16", "--lr", "1e-3", "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert err.splitlines()[-1].startswith("bertforge: error: step 10: the loss or its gradient has not been finite "
                                           "for 10 steps in a row (the last loss: nan)")
    assert "--overwrite" in err and "Traceback" not in err
    assert not any((run / name).exists() for name in ("best", "final", "eval_results.json"))
    assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "accuracy" in r] == [4, 8]
