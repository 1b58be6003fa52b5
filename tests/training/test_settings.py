"""A job's settings (bertforge/training/settings.py): one typed object built alike from Python, from the command line
and from a run's args.json; args.json is that object written out, and a resumed run reads it back."""

import dataclasses
import json

import pytest

from bertforge.cli import build_parser
from bertforge.core.errors import BertforgeError
from bertforge.finetuning.finetune import task_settings
from bertforge.training.recipes import DEFAULTS, Facts
from bertforge.training.resume import ARGS_FILE, run_record
from bertforge.training.settings import DistillSettings, EmbeddingSettings, FinetuneSettings, PretrainSettings


def parsed(argv: list[str]):
    args = build_parser(argv[0], argv[1]).parse_args(argv)
    args.command_line = ["bertforge", *argv]
    return args


def written(settings) -> dict:
    """args.json as the loop writes it (training/resume.py), read back."""
    return json.loads(json.dumps(run_record(settings.loop(), "cpu")))


def test_python_and_the_command_line_build_the_same_settings(tmp_path):
    argv = ["finetune", "sst2", "--model", "m", "--data", "d", "--out", str(tmp_path), "--lr", "3e-4", "--seed", "3",
            "--max-train-examples", "40", "--no-length-grouping"]
    from_flags = task_settings(FinetuneSettings, parsed(argv))
    from_python = FinetuneSettings.make(task="sst2", model="m", data="d", out=tmp_path, lr=3e-4, seed=3,
                                        max_train_examples=40, group_by_length=False,
                                        **from_flags.family_options)
    assert dataclasses.replace(from_flags, command=None, arguments=None) == from_python
    assert from_python.batch_size is None and from_python.epochs is None  # the recipe's, once the data is read
    assert from_python.keep == DEFAULTS["finetune"]["keep"] == 1  # the job's row of the one table
    with pytest.raises(TypeError, match="no setting nonsense"):
        EmbeddingSettings.make(teacher="t", out=tmp_path, task="x", nonsense=1)


def test_args_json_is_the_settings_written_out_and_reads_back(tmp_path):
    settings = DistillSettings.make(task="sst2", teacher="/t", model="tiny", data="d", out=tmp_path, prune=True,
                                    unlabelled=["u.txt"], text_column="sentence", cache_dir="/cache")
    settings, choice = settings.complete(Facts(examples=1_000, rows=20_000, start="cut", share=0.3, augmentable=True))
    record = written(settings)
    assert record["lr"] == settings.lr == 1e-4 and record["extra"]["augment"] == settings.augment == 19
    assert record["extra"]["chosen_by"] == choice.reasons() and "lr 0.0001" in record["extra"]["chosen_by"]
    assert record["extra"]["family_options"] == {"text_column": "sentence"}
    assert "cache_dir" not in record["extra"] and "revision" not in record["extra"]  # how it ran, not what
    # and back: all but how it ran and the device it ran on
    assert DistillSettings.from_record(record) == dataclasses.replace(settings, cache_dir=None, device="cpu")
    layers = dataclasses.replace(settings, model=None, student_layers=[0, 2])
    assert written(layers)["extra"]["model"] == "/t layers 0,2"  # what the student is, in the record


def test_a_resumed_run_goes_on_with_what_it_chose_and_refuses_a_change(tmp_path):
    began, _ = FinetuneSettings.make(task="sst2", model=str(tmp_path), out=tmp_path).complete(Facts(examples=40))
    (tmp_path / ARGS_FILE).write_text(json.dumps(written(began)))
    again = FinetuneSettings.make(task="sst2", model=str(tmp_path), out=tmp_path, resume=True)
    resumed = again.resumed()
    assert (resumed.lr, resumed.batch_size, resumed.epochs, resumed.patience) == (1e-4, 16, 20.0, 3)
    assert resumed.chosen_by == began.chosen_by
    assert resumed.complete(Facts(examples=10_000))[0].epochs == 20.0  # read back: not chosen again
    with pytest.raises(BertforgeError, match="--resume: --seed 7, but the run in"):
        dataclasses.replace(again, seed=7).resumed()


def test_pre_training_settings_take_the_recipe_from_python_as_from_the_command_line(tmp_path):
    """`pretrain(recipe="budget")` from Python gets the budget recipe as the command line does (the rate by the
    model's width, bf16 where native), and a time budget runs until it is spent."""
    argv = ["pretrain", "--data", "d", "--out", str(tmp_path), "--recipe", "budget", "--teacher", "t"]
    from_flags = PretrainSettings.from_args(parsed(argv))
    from_python = PretrainSettings.make(data="d", out=tmp_path, recipe="budget", teacher="t")
    assert dataclasses.replace(from_flags, command=None, arguments=None) == from_python
    chosen, _ = from_python.complete(Facts(hidden_size=128, native_bf16=True))
    assert (chosen.lr, chosen.batch_size, chosen.schedule, chosen.bf16, chosen.steps) == (2e-3, 16, "one-cycle", True,
                                                                                          1000)
    assert (chosen.objective, chosen.mask_prob, chosen.dropout, chosen.output_bias) == ("mlm", 0.3, 0.0, "unigram")
    timed = dataclasses.replace(from_python, time_budget=90.0).complete(Facts(hidden_size=256, time_budget=90.0))[0]
    assert timed.steps == 10**12 and timed.lr == 5e-4 and timed.bf16 is False
