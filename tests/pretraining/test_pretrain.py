"""Pre-training through the command line: the log contract, exact resume after SIGKILL, SIGTERM, DDP, accumulation.

The corpus is the demo's (standard-library docstrings), so these run without ../shared.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from itertools import islice

import numpy as np
import pytest
import torch

from bertforge.cli import main
from bertforge.data.create import create_pretraining_data
from bertforge.pretraining.pretrain import collapse_warning
from bertforge.pretraining.demo import module_documents
from bertforge.text.wordpiece import train_vocab
from tests.training.test_train import nan_weights

ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    corpus = root / "corpus"
    corpus.mkdir()
    for name, text in islice(module_documents(), 40):
        (corpus / f"{name}.txt").write_text(text, encoding="utf-8")
    train_vocab([corpus], vocab_size=2000, out_dir=root / "vocab")
    create_pretraining_data([corpus], root / "vocab", root / "data", max_seq_length=64, max_predictions=10,
                            dupe_factor=2, mask=False, eval_docs=4, seed=1)
    return root / "data"


def cli(data_dir, out, *extra, steps=16):
    return ["--data", str(data_dir), "--config", "tiny", "--out", str(out), "--steps", str(steps),
            "--batch-size", "8", "--seed", "3", "--save-every", "4", "--eval-every", "0", "--log-every", "1",
            "--no-progress", "--lr", "1e-3", *extra]


def losses(run):
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: (r["loss"], r["mlm_loss"], r["nsp_loss"]) for r in rows}


def test_log_contract_checkpoints_and_final(data_dir, tmp_path):
    run = tmp_path / "run"
    assert main(["pretrain", *cli(data_dir, run, "--eval-every", "8", "--eval-rows", "16", "--keep", "2")]) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 17))
    for r in rows:
        assert r["loss"] == pytest.approx(r["mlm_loss"] + r["nsp_loss"])
    evaluated = [r for r in rows if "eval_mlm_accuracy" in r]
    assert [r["step"] for r in evaluated] == [8, 16]
    assert {"eval_mlm_loss", "eval_mlm_perplexity", "eval_nsp_accuracy"} <= set(evaluated[0])
    assert sorted(p.name for p in run.glob("step-*")) == ["step-0000012", "step-0000016"]  # --keep 2
    for folder in (run / "step-0000016", run / "final"):
        assert {"config.json", "model.safetensors", "vocab.txt"} <= {p.name for p in folder.iterdir()}
    assert not list(run.glob(".*tmp"))


def test_sigkill_then_resume_gives_the_uninterrupted_losses(data_dir, tmp_path):
    """Dropout stays on: the random state is part of what a checkpoint restores.

    All three runs are processes with the same settings: float sums depend on the number of threads.
    """
    command = [sys.executable, "-m", "bertforge", "pretrain"]
    subprocess.run(command + cli(data_dir, tmp_path / "whole", steps=40), env=ENV, check=True, capture_output=True)
    run = tmp_path / "killed"
    proc = subprocess.Popen(command + cli(data_dir, run, steps=40), env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while not (run / "step-0000008" / "training_state.pt").exists() and time.time() < deadline:
        time.sleep(0.05)
    running = proc.poll() is None
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert running, "the run ended before it could be killed"
    subprocess.run(command + cli(data_dir, run, "--resume", steps=40), env=ENV, check=True, capture_output=True)
    whole, resumed = losses(tmp_path / "whole"), losses(run)
    assert sorted(resumed) == list(range(1, 41))
    assert resumed == whole


def test_sigterm_saves_and_resume_finishes(data_dir, tmp_path):
    run = tmp_path / "run"
    proc = subprocess.Popen([sys.executable, "-m", "bertforge", "pretrain",
                             *cli(data_dir, run, "--save-every", "1000", steps=2000)],
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while (not (run / "metrics.jsonl").exists() or len((run / "metrics.jsonl").read_text().splitlines()) < 3) \
            and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    output, errors = proc.communicate(timeout=120)
    assert proc.returncode == 130, errors  # stopped, not finished: `pretrain && finetune` goes no further
    saved = sorted(run.glob("step-*"))
    assert len(saved) == 1 and not (run / "final").exists()
    assert errors.strip().splitlines()[-1] == (f"bertforge: stopped at step {int(saved[0].name[5:])}: checkpoint "
                                               f"saved in {saved[0]}; continue with --resume")
    stopped_at = int(saved[0].name.split("-")[1])
    assert 3 <= stopped_at < 2000
    assert main(["pretrain", *cli(data_dir, run, "--resume", steps=stopped_at + 2)]) == 0
    assert max(losses(run)) == stopped_at + 2


def test_two_processes_match_one(data_dir, tmp_path):
    """Same global batch over 2 gloo processes: the same loss curve as one process (dropout off)."""
    one = tmp_path / "one"
    assert main(["pretrain", *cli(data_dir, one, "--dropout", "0", steps=6)]) == 0
    two = tmp_path / "two"
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                           "-m", "bertforge", "pretrain", *cli(data_dir, two, "--dropout", "0", steps=6)],
                          env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    a, b = losses(one), losses(two)
    assert sorted(a) == sorted(b) == list(range(1, 7))
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-5)


def test_gradient_accumulation_matches_one_pass(data_dir, tmp_path):
    assert main(["pretrain", *cli(data_dir, tmp_path / "one", "--dropout", "0", steps=4)]) == 0
    assert main(["pretrain", *cli(data_dir, tmp_path / "acc", "--dropout", "0", "--grad-accum", "4", steps=4)]) == 0
    a, b = losses(tmp_path / "one"), losses(tmp_path / "acc")
    for step in a:
        assert b[step] == pytest.approx(a[step], rel=1e-5, abs=1e-5)


@pytest.mark.parametrize("objective", ["mlm+nsp", "ltr"])
def test_the_loop_gets_each_process_s_rows_as_the_earlier_path_made_them(data_dir, objective):
    """The rows go from the shards (padded to the global batch's longest, the width the masks are drawn at) to the
    loop, which cuts each micro-batch to its own longest row: the tensors the earlier path made, which cut each
    process's rows before their labels were made (the same losses for the same seed)."""
    from bertforge.pretraining.pretrain import PretrainJob
    from bertforge.text.tokenizer import BertTokenizer
    from bertforge.training.train import split_rows, trim

    job = PretrainJob(data_dir, BertTokenizer.from_pretrained(data_dir), 8, 3, objective=objective)
    for step in range(3):
        order = np.random.default_rng([3, 0]).permutation(len(job.train))[step * 8:(step + 1) * 8]
        whole = job.train.batch(order, rng=np.random.default_rng([3, step])) if job.objective.masks else None
        for rank, mine in enumerate(np.array_split(np.arange(8), 2)):
            rows = {k: v[mine] for k, v in whole.items()} if whole else job.train.batch(order[mine])
            rows.pop("special_tokens_mask")
            earlier = job.objective.finish(trim(rows))
            now = split_rows(job.batch(step, rank, 2), 1)[0]
            assert now.keys() == earlier.keys()
            for key in now:
                assert torch.equal(now[key], earlier[key]), (step, rank, key)


def test_data_from_another_vocabulary_is_refused(data_dir, tmp_path, capsys):
    other = tmp_path / "other"
    corpus = tmp_path / "c"
    corpus.mkdir()
    (corpus / "a.txt").write_text("Some words here. And more words there.\n", encoding="utf-8")
    train_vocab([corpus], vocab_size=200, out_dir=other)
    (other / "config.json").write_text(json.dumps({"vocab_size": 200, "hidden_size": 8, "num_hidden_layers": 1,
                                                   "num_attention_heads": 2, "intermediate_size": 16}))
    assert main(["pretrain", *cli(data_dir, tmp_path / "run", "--init-from", str(other), steps=2)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "vocabulary" in err


def test_missing_data_folder_is_one_line(tmp_path, capsys):
    assert main(["pretrain", *cli(tmp_path / "nowhere", tmp_path / "run", steps=2)]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "nowhere" in err


def test_args_file_reruns_with_the_recipe_left_to_decide(data_dir, tmp_path, capsys):
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["pretrain", *cli(data_dir, first, "--recipe", "budget", "--keep", "1", steps=4)]) == 0
    assert main(["pretrain", "--args-file", str(first / "args.json"), "--out", str(again)]) == 0
    capsys.readouterr()
    args = [json.loads((run / "args.json").read_text()) for run in (first, again)]
    arguments = [a["extra"].pop("arguments") for a in args]
    commands = [a["extra"].pop("command") for a in args]  # each run's own command line
    assert commands[1] == ["bertforge", "pretrain", "--args-file", str(first / "args.json"), "--out", str(again)]
    assert arguments[0]["recipe"] == "budget" and arguments[0]["mask_prob"] is None  # as given: the recipe's
    assert args[0]["extra"]["mask_prob"] == 0.3 and args[0]["extra"]["max_length"] == 64
    assert {**arguments[0], "out": str(again)} == arguments[1]
    assert {**args[0], "out": str(again)} == args[1]
    strip = [{k: v for k, v in json.loads(line).items() if k != "tokens_per_s"}
             for run in (first, again) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert strip[:4] == strip[4:]


def test_a_run_that_learnt_only_token_frequencies_is_warned_about():
    baseline = {"mlm_most_frequent_token_accuracy": 0.0751}
    said = collapse_warning({"eval_mlm_accuracy": 0.0751, **baseline}, 2e-3)
    assert "always guessing the most frequent token (7.51%)" in said and "lower --lr than 0.002" in said
    assert collapse_warning({"eval_mlm_accuracy": 0.101, **baseline}, 5e-4) is None
    assert collapse_warning({"eval_mlm_accuracy": 0.0751}, 2e-3) is None  # no held-out data: nothing to say


def test_args_json_records_the_config_of_the_init_checkpoint(data_dir, tmp_path, caplog):
    """--init-from gives the model, its config with it: --config (mini, the default) is not what was used."""
    import logging

    from bertforge.model.architectures.registry import load_config

    caplog.set_level(logging.INFO, logger="bertforge")
    first, again = tmp_path / "first", tmp_path / "again"
    assert main(["pretrain", *cli(data_dir, first, "--keep", "1", steps=2)]) == 0  # --config tiny
    assert main(["pretrain", *cli(data_dir, again, "--config", "mini", "--init-from", str(first / "final"),
                                  steps=2)]) == 0
    assert f"config {first / 'final'}," in caplog.text  # the first log line says so too
    extra = json.loads((again / "args.json").read_text())["extra"]
    assert extra["config"] == extra["init_from"] == str(first / "final")
    assert extra["arguments"]["config"] == "mini"  # the command line as typed, for --args-file
    used = load_config(str(again / "final"))
    assert (used.num_hidden_layers, used.hidden_size) == (2, 128) == \
        (load_config("tiny").num_hidden_layers, load_config("tiny").hidden_size)


def folder_bytes(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def stopped_run(data_dir, tmp_path_factory):
    """A run of 4 steps of 16 with its step checkpoint and final/: --resume continues it (--keep-checkpoints)."""
    run = tmp_path_factory.mktemp("stopped") / "run"
    assert main(["pretrain", *cli(data_dir, run, steps=4)]) == 0
    return run


@pytest.mark.parametrize("change, words", [
    (["--objective", "ltr"], ["--objective ltr", "started with mlm+nsp"]),  # causal attention mid-run, silently
    (["--objective", "mlm"], ["--objective mlm", "started with mlm+nsp"]),
    (["--config", "mini"], ["--config mini", "started with tiny"]),
    (["--init-from", "RUN/final"], ["--init-from RUN/final", "started with none"]),
    (["--data", "OTHER"], ["--data OTHER", "started with DATA"]),
    (["--batch-size", "4"], ["--batch-size 4", "started with 8"]),
    (["--seed", "4"], ["--seed 4", "started with 3"]),
    (["--lr", "1e-4"], ["--lr 0.0001", "started with 0.001"]),
    (["--recipe", "budget"], ["--recipe budget", "started with paper"]),
])
def test_resume_refuses_a_change_to_what_the_run_is(data_dir, stopped_run, tmp_path, capsys, change, words):
    """One line naming the flag, the run's value and the new one; exit 2; the run folder as it was."""
    other = tmp_path / "other"
    if "OTHER" in change:
        shutil.copytree(data_dir, other)
    fill = {"RUN": str(stopped_run), "OTHER": str(other), "DATA": str(data_dir)}

    def filled(text):
        for key, path in fill.items():
            text = text.replace(key, path)
        return text
    before = folder_bytes(stopped_run)
    assert main(["pretrain", *cli(data_dir, stopped_run, "--resume", *map(filled, change), steps=8)]) == 2
    err = capsys.readouterr().err
    said = [line for line in err.splitlines() if line.startswith("bertforge")]
    assert len(said) == 1 and "Traceback" not in err, err
    for word in [*map(filled, words), str(stopped_run / "args.json")]:
        assert word in said[0], said[0]
    assert folder_bytes(stopped_run) == before  # args.json, metrics, checkpoints: nothing written


def test_resume_refuses_data_remade_with_another_row_length(data_dir, tmp_path, capsys):
    data = tmp_path / "data"
    shutil.copytree(data_dir, data)
    run = tmp_path / "run"
    assert main(["pretrain", *cli(data, run, steps=4)]) == 0
    shutil.rmtree(data)
    create_pretraining_data([data_dir.parent / "corpus"], data_dir.parent / "vocab", data, max_seq_length=48,
                            max_predictions=8, dupe_factor=1, mask=False, eval_docs=4, seed=1)
    args = (run / "args.json").read_bytes()
    assert main(["pretrain", *cli(data, run, "--resume", steps=8)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--data (its rows' length) 48" in err and "started with 64" in err, err
    assert (run / "args.json").read_bytes() == args


def test_resume_keeps_the_record_and_adds_each_part(data_dir, tmp_path, capsys):
    """Extending the run, with other checkpoints, logging and device: allowed, and recorded as a resumption."""
    run = tmp_path / "run"
    assert main(["pretrain", *cli(data_dir, run, steps=4)]) == 0
    first = json.loads((run / "args.json").read_text())
    assert main(["pretrain", *cli(data_dir, run, "--resume", "--save-every", "2", "--log-every", "2",
                                  "--device", "cpu", steps=6)]) == 0
    assert main(["pretrain", *cli(data_dir, run, "--resume", steps=8)]) == 0
    capsys.readouterr()
    record = json.loads((run / "args.json").read_text())
    parts = record.pop("resumed")
    assert record == first  # the first part's record, as it was
    assert [p["step"] for p in parts] == [4, 6]
    assert parts[0]["changed"] == {"steps": 6, "save_every": 2, "log_every": 2}
    assert parts[1]["changed"] == {"steps": 8}  # against the first part
    assert all(p["time"] and p["command"][0] == "bertforge" for p in parts)
    assert 0 < parts[0]["wall_s_before"] < parts[1]["wall_s_before"]  # every part's time, by each checkpoint
    assert max(losses(run)) == 8


def test_data_without_held_out_documents_is_said_at_the_start(data_dir, tmp_path, caplog):
    root = data_dir.parent
    create_pretraining_data([root / "corpus"], root / "vocab", tmp_path / "data", max_seq_length=64,
                            max_predictions=10, dupe_factor=1, mask=False, eval_docs=0, seed=1)
    with caplog.at_level("WARNING", logger="bertforge"):
        assert main(["pretrain", *cli(tmp_path / "data", tmp_path / "run", "--eval-every", "2", steps=2)]) == 0
    warned = [r.getMessage() for r in caplog.records if "no held-out documents" in r.getMessage()]
    assert len(warned) == 1 and "--eval-docs" in warned[0]
    assert json.loads((tmp_path / "run" / "baselines.json").read_text()) == {}
    caplog.clear()
    with caplog.at_level("WARNING", logger="bertforge"):
        assert main(["pretrain", *cli(data_dir, tmp_path / "run2", "--eval-every", "2", steps=2)]) == 0
    assert not [r for r in caplog.records if "no held-out documents" in r.getMessage()]


def test_a_missing_data_folder_is_named_and_a_finished_run_says_where_it_saved(data_dir, tmp_path, capsys):
    assert main(["pretrain", *cli(tmp_path / "nowhere", tmp_path / "run")]) == 2
    assert f"--data {tmp_path / 'nowhere'}: no such folder" in capsys.readouterr().err
    assert main(["pretrain", *cli(data_dir, tmp_path / "run", steps=2)]) == 0
    assert capsys.readouterr().out.splitlines()[-1].startswith(f"saved: {tmp_path / 'run' / 'final'} ")


MODERNBERT = {"model_type": "modernbert", "num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4,
              "intermediate_size": 96, "max_position_embeddings": 128, "local_attention": 16,
              "global_attn_every_n_layers": 3}


def test_a_modernbert_config_pre_trains_with_the_masked_lm_and_resumes_exactly(data_dir, tmp_path):
    """The budget recipe's objective (masked LM, no next-sentence head) on a ModernBERT shape; the checkpoint is a
    ModernBertForMaskedLM that transformers loads with the same logits; a stopped run resumes to the same losses."""
    transformers = pytest.importorskip("transformers")
    (tmp_path / "config.json").write_text(json.dumps(MODERNBERT))
    flags = ["--data", str(data_dir), "--config", str(tmp_path / "config.json"), "--objective", "mlm", "--steps",
             "12", "--batch-size", "8", "--seed", "3", "--eval-every", "12", "--eval-rows", "16", "--log-every", "1",
             "--no-progress", "--lr", "1e-3", "--output-bias", "unigram", "--save-every", "6"]
    assert main(["pretrain", *flags, "--out", str(tmp_path / "whole")]) == 0
    rows = [json.loads(line) for line in (tmp_path / "whole" / "metrics.jsonl").read_text().splitlines()]
    assert "eval_mlm_accuracy" in rows[-1] and all("nsp_loss" not in r for r in rows)
    final = tmp_path / "whole" / "final"
    assert json.loads((final / "config.json").read_text())["architectures"] == ["ModernBertForMaskedLM"]
    from bertforge.model.architectures.modernbert import ModernBertForMaskedLM

    ids = torch.tensor([[2, 40, 50, 60, 3]])
    ours = ModernBertForMaskedLM.from_pretrained(final)(input_ids=ids).logits
    theirs = transformers.ModernBertForMaskedLM.from_pretrained(final).eval()(input_ids=ids).logits
    assert torch.allclose(ours, theirs, atol=1e-4)

    stopped = tmp_path / "stopped"  # the run as if stopped after its checkpoint at step 6
    shutil.copytree(tmp_path / "whole", stopped)
    for folder in ("step-0000012", "final"):
        shutil.rmtree(stopped / folder)
    assert main(["pretrain", *flags, "--out", str(stopped), "--resume"]) == 0
    first = {r["step"]: r["loss"] for r in rows}
    again = {r["step"]: r["loss"] for r in map(json.loads, (stopped / "metrics.jsonl").read_text().splitlines())}
    assert again == first


def test_a_modernbert_config_refuses_the_next_sentence_objective(data_dir, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps(MODERNBERT))
    assert main(["pretrain", "--data", str(data_dir), "--config", str(tmp_path / "config.json"), "--objective",
                 "mlm+nsp", "--steps", "1", "--out", str(tmp_path / "run")]) == 2
    assert "has no next-sentence head: pre-train it with --objective mlm" in capsys.readouterr().err


SMALL = {"num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96}
FAMILIES = {  # config.json of a small model of each family the masked LM pre-trains, and its class
    "distilbert": ({"model_type": "distilbert", "n_layers": 2, "dim": 64, "n_heads": 4, "hidden_dim": 96,
                    "max_position_embeddings": 128}, "DistilBertForMaskedLM"),
    "roberta": ({"model_type": "roberta", **SMALL, "max_position_embeddings": 130, "type_vocab_size": 1},
                "RobertaForMaskedLM"),
    "xlm-roberta": ({"model_type": "xlm-roberta", **SMALL, "max_position_embeddings": 130, "type_vocab_size": 1},
                    "XLMRobertaForMaskedLM"),
    "electra": ({"model_type": "electra", **SMALL, "embedding_size": 32, "max_position_embeddings": 128},
                "ElectraForMaskedLM"),
}


@pytest.mark.parametrize("family", FAMILIES)
def test_a_config_of_each_family_pre_trains_with_the_masked_lm_that_transformers_reads(data_dir, tmp_path, family):
    """A family's own names in config.json (DistilBERT's, RoBERTa's positions after the padding id, ELECTRA's
    narrow tables): the checkpoint is that family's masked LM, which transformers
    loads with the same logits."""
    transformers = pytest.importorskip("transformers")
    config, name = FAMILIES[family]
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert main(["pretrain", "--data", str(data_dir), "--config", str(tmp_path / "config.json"), "--objective", "mlm",
                 "--steps", "6", "--batch-size", "8", "--seed", "3", "--eval-every", "6", "--eval-rows", "16",
                 "--no-progress", "--lr", "1e-3", "--out", str(tmp_path / "run")]) == 0
    final = tmp_path / "run" / "final"
    assert json.loads((final / "config.json").read_text())["architectures"] == [name]
    import bertforge

    ids = torch.tensor([[2, 40, 50, 60, 3]])
    ours = bertforge.AutoModelForMaskedLM.from_pretrained(final)(input_ids=ids).logits
    theirs = getattr(transformers, name).from_pretrained(final).eval()(input_ids=ids).logits
    assert torch.allclose(ours, theirs, atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_family_without_left_to_right_attention_refuses_the_ltr_objective(data_dir, tmp_path, capsys, family):
    (tmp_path / "config.json").write_text(json.dumps(FAMILIES[family][0]))
    assert main(["pretrain", "--data", str(data_dir), "--config", str(tmp_path / "config.json"), "--objective", "ltr",
                 "--steps", "1", "--out", str(tmp_path / "run")]) == 2
    assert f"a {family} model has no causal attention: --objective ltr pre-trains BERTs" in capsys.readouterr().err


def test_an_mpnet_config_needs_a_vocabulary_whose_padding_is_id_1(data_dir, tmp_path, capsys):
    """MPNet counts positions from id 1 + 1 whatever pad_token_id says (as transformers does): the data's WordPiece
    vocabulary ([PAD] 0) is refused in one line, not trained into a model transformers reads otherwise."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mpnet", **SMALL, "max_position_embeddings": 130}))
    assert main(["pretrain", "--data", str(data_dir), "--config", str(tmp_path / "config.json"), "--objective", "mlm",
                 "--steps", "1", "--out", str(tmp_path / "run")]) == 2
    assert "pad_token_id 0 is not supported: MPNet counts positions from the padding id 1" in capsys.readouterr().err


def test_a_start_with_nan_weights_fails_at_the_end_without_any_checkpoint(data_dir, tmp_path, capsys):
    """Six steps, each loss NaN (fewer than NONFINITE_STEPS): the run fails where it would end; its --save-every
    checkpoint and final/ are not written from the NaN model."""
    start, run = tmp_path / "start", tmp_path / "run"
    assert main(["pretrain", *cli(data_dir, start, steps=1)]) == 0
    broken = nan_weights(start / "final", tmp_path / "broken")
    capsys.readouterr()
    assert main(["pretrain", *cli(data_dir, run, "--init-from", str(broken), steps=6)]) == 2
    error = capsys.readouterr().err.splitlines()[-1]
    assert error.startswith("bertforge: error: step 6: the loss or its gradient has not been finite for 6 steps")
    assert error.endswith("start it over with --overwrite")
    assert not list(run.glob("step-*")) and not (run / "final").exists()
    assert main(["pretrain", *cli(data_dir, run, "--init-from", str(broken), "--resume", steps=6)]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_an_mpnet_config_pre_trains_on_data_of_an_mpnet_tokenizer_that_transformers_reads(data_dir, tmp_path, capsys):
    """MPNet's positions skip the padding id 1 (transformers' padding_idx, whatever pad_token_id says): data made
    with a tokenizer laid out as MPNet's (<pad> at 1) pre-trains its masked LM, which transformers loads with the
    same logits; data of a BERT vocabulary (its [PAD] at 0) is refused in one line before anything is built."""
    transformers = pytest.importorskip("transformers")
    from tests.conftest import mpnet_tokenizer

    tokenizer = mpnet_tokenizer(tmp_path / "tokenizer")
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("".join(f"The film number {i} was a gripping story of people and places in Zürich.\n\n"
                              for i in range(100)))
    create_pretraining_data([corpus], tokenizer, tmp_path / "rows", max_seq_length=32, max_predictions=5,
                            dupe_factor=1, mask=False, eval_docs=0, seed=1)
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "mpnet", **SMALL, "max_position_embeddings": 130}))
    flags = ["--config", str(tmp_path / "config.json"), "--objective", "mlm", "--steps", "4", "--batch-size", "8",
             "--no-progress", "--lr", "1e-3"]
    assert main(["pretrain", "--data", str(data_dir), *flags, "--out", str(tmp_path / "bert-vocab")]) == 2
    err = capsys.readouterr().err
    assert "pad_token_id 0 is not supported: MPNet counts positions from the padding id 1 + 1" in err
    assert main(["pretrain", "--data", str(tmp_path / "rows"), *flags, "--out", str(tmp_path / "run")]) == 0
    final = tmp_path / "run" / "final"
    assert json.loads((final / "config.json").read_text())["architectures"] == ["MPNetForMaskedLM"]
    import bertforge

    ids = torch.tensor([[0, 40, 50, 60, 2]])
    ours = bertforge.AutoModelForMaskedLM.from_pretrained(final)(input_ids=ids).logits
    theirs = transformers.MPNetForMaskedLM.from_pretrained(final).eval()(input_ids=ids).logits
    assert torch.allclose(ours, theirs, atol=1e-4)


def test_a_resumed_run_keeps_what_its_recipe_chose_when_it_began(data_dir, tmp_path, capsys):
    """What --resume leaves unsaid is the run's own (args.json), not what the recipe would choose now: a run whose
    recipe chose another rate (on another machine, or in another version) goes on with it."""
    run = tmp_path / "run"
    command = cli(data_dir, run, steps=4)[:-2]  # no --lr: the recipe's
    assert main(["pretrain", *command]) == 0
    record = json.loads((run / "args.json").read_text())
    record["lr"] /= 2
    (run / "args.json").write_text(json.dumps(record))
    assert main(["pretrain", *cli(data_dir, run, steps=8)[:-2], "--resume"]) == 0
    capsys.readouterr()
    resumed = json.loads((run / "args.json").read_text())["resumed"]
    assert resumed[0]["changed"] == {"steps": 8}
    rates = {r["step"]: r["lr"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())}
    assert max(rates[s] for s in range(5, 9)) <= record["lr"]
