"""The training loop against a plain reference loop: transformers' model, torch's AdamW, transformers' schedule."""

import json
import math
import shutil
import sys
from pathlib import Path

import pytest
import safetensors.torch
import torch
import transformers

from bertforge.model.architectures.config import BertConfig
from bertforge.core.errors import BertforgeError
from bertforge.core.io import remove_folder
from bertforge.training.optim import GoogleAdamW
from bertforge.training.options import NONFINITE_STEPS
from bertforge.training.train import TrainArgs, fit
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from tests.conftest import one_line_error
from tests.model.architectures.test_bert import MINI, VOCAB

STEPS, WARMUP, LR = 10, 3, 1e-3


def batches(count: int) -> list[dict]:
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(count):
        lengths = torch.randint(3, 20, (8,), generator=g)
        mask = (torch.arange(20)[None] < lengths[:, None]).long()
        out.append({"input_ids": torch.randint(5, VOCAB, (8, 20), generator=g) * mask,
                    "token_type_ids": torch.zeros(8, 20, dtype=torch.long), "attention_mask": mask,
                    "labels": torch.randint(0, 3, (8,), generator=g)})
    return out


class FixedBatches:
    loss_units = {"loss": lambda b: len(b["input_ids"])}
    best_metric = None

    def __init__(self, data):
        self.data = data

    def batch(self, step, rank, world):
        return self.data[step]

    def evaluate(self, model):
        return {}

    def save(self, model, folder):
        model.save_pretrained(folder)


def reference_losses(model, data) -> list[float]:
    """What transformers' Trainer does per step: AdamW without decay on biases and LayerNorm, linear warm-up
    and decay, gradients clipped at 1."""
    no_decay = [p for n, p in model.named_parameters() if "bias" in n or "LayerNorm" in n]
    decay = [p for n, p in model.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01}, {"params": no_decay, "weight_decay": 0.0}],
                                  lr=LR, eps=1e-6)
    scheduler = transformers.get_linear_schedule_with_warmup(optimizer, WARMUP, STEPS)
    losses = []
    model.train()
    for batch in data:
        loss = model(**batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses


def test_fit_follows_the_reference_loop_step_by_step(tmp_path):
    """Same weights, same batches, dropout off: every step's loss equals the reference loop's."""
    config = BertConfig(**{**MINI, "id2label": {0: "a", 1: "b", 2: "c"}, "hidden_dropout_prob": 0.0,
                          "attention_probs_dropout_prob": 0.0})
    torch.manual_seed(0)
    ours = BertForSequenceClassification(config)
    ours.save_pretrained(tmp_path / "start")
    theirs = transformers.BertForSequenceClassification.from_pretrained(tmp_path / "start", attn_implementation="eager")
    data = batches(2) * (STEPS // 2)  # two batches seen in turn: the losses must fall as they are learnt
    expected = reference_losses(theirs, data)

    args = TrainArgs(out=tmp_path / "run", steps=STEPS, batch_size=8, lr=LR, warmup=WARMUP, progress=False)
    fit(ours, FixedBatches(data), args)
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    got = [r["loss"] for r in rows]
    assert [r["step"] for r in rows] == list(range(1, STEPS + 1))
    assert rows[0]["lr"] == LR / WARMUP and rows[WARMUP - 1]["lr"] == LR  # the rate after each step's update
    assert max(abs(a - b) for a, b in zip(got, expected)) < 1e-4, (got, expected)
    assert expected[-1] < expected[0] - 0.3  # the comparison covers real learning, not a flat line


def test_google_adam_has_no_bias_correction():
    """One step of Google's optimiser by its formula:
    m = (1 - b1) g, v = (1 - b2) g^2, p -= lr (m / (sqrt(v) + eps) + wd p)."""
    p = torch.nn.Parameter(torch.tensor([1.0, -2.0, 3.0]))
    p.grad = torch.tensor([0.5, 0.1, -1.0])
    GoogleAdamW([p], lr=0.1, betas=(0.9, 0.999), eps=1e-6, weight_decay=0.01).step()
    g = torch.tensor([0.5, 0.1, -1.0])
    m, v = 0.1 * g, 0.001 * g * g
    expected = torch.tensor([1.0, -2.0, 3.0]) - 0.1 * (m / (v.sqrt() + 1e-6) + 0.01 * torch.tensor([1.0, -2.0, 3.0]))
    assert torch.allclose(p.detach(), expected, atol=1e-6)


class EvaluatedBatches(FixedBatches):
    """FixedBatches with an evaluation figure that moves as the weights do."""

    def evaluate(self, model):
        return {"eval_weight_norm": float(sum(p.detach().norm() for p in model.parameters()))}


def scalars(folder) -> dict[str, list[tuple[int, float]]]:
    """What TensorBoard reads from a run folder's event files: (step, value) per tag."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(folder))
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def test_tensorboard_events_hold_the_metrics_log_also_after_resume(tmp_path):
    pytest.importorskip("tensorboard")
    config = BertConfig(**{**MINI, "id2label": {0: "a", 1: "b", 2: "c"}})
    torch.manual_seed(0)
    model = BertForSequenceClassification(config)
    run = tmp_path / "run"
    options = dict(out=run, steps=6, batch_size=8, lr=LR, warmup=WARMUP, progress=False, eval_every=2, save_every=3,
                   keep=2, report_to="tensorboard")
    fit(model, EvaluatedBatches(batches(6)), TrainArgs(**options))
    # a run killed after step 6, before its last checkpoint: resumed from step 3, steps 4-6 are logged again
    remove_folder(run / "step-0000006")
    fit(model, EvaluatedBatches(batches(6)), TrainArgs(**options, resume=True))
    assert len(list(run.glob("events.out.tfevents.*"))) == 2
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    expected = {}
    for row in rows:
        for key, value in row.items():
            if key != "step":
                expected.setdefault(key, []).append((row["step"], pytest.approx(value, rel=1e-6)))
    assert set(expected) == {"loss", "lr", "tokens_per_s", "eval_weight_norm"}
    assert scalars(run) == expected  # each step once: TensorBoard drops what the first writer logged past step 3


def test_tensorboard_missing_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # as if the package were not installed
    args = TrainArgs(out=tmp_path / "run", steps=1, batch_size=8, progress=False, report_to="tensorboard")
    with pytest.raises(BertforgeError) as excinfo:
        fit(BertForSequenceClassification(BertConfig(**MINI)), FixedBatches(batches(1)), args)
    one_line_error(excinfo, "--report-to tensorboard", "pip install -e '.[tensorboard]'")


def test_micro_batches_are_trimmed_to_their_longest_row_per_token_values_too():
    """Gradient accumulation cuts each micro-batch to its own longest row: the inputs, and values per token ([B, L,
    ...], a teacher's logits), not values per row."""
    from bertforge.training.train import split_rows

    mask = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1]])
    batch = {"attention_mask": mask, "input_ids": mask * 5, "soft": torch.ones(2, 4, 3), "labels": torch.zeros(2, 4),
             "per_row": torch.ones(2, 3)}
    first, second = split_rows(batch, 2)
    assert {k: tuple(v.shape) for k, v in first.items()} == {"attention_mask": (1, 2), "input_ids": (1, 2),
                                                            "soft": (1, 2, 3), "labels": (1, 2), "per_row": (1, 3)}
    assert second["soft"].shape == (1, 4, 3)


def nan_weights(model_dir, folder) -> Path:
    """A copy of the checkpoint folder `model_dir` whose embeddings' LayerNorm weight starts with NaN: every loss of a
    model that starts from it is NaN."""
    shutil.copytree(model_dir, folder)
    weights = safetensors.torch.load_file(folder / "model.safetensors")
    weights[next(k for k in weights if k.endswith("embeddings.LayerNorm.weight"))][0] = math.nan
    safetensors.torch.save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    return folder


def classifier() -> BertForSequenceClassification:
    torch.manual_seed(0)
    return BertForSequenceClassification(BertConfig(**{**MINI, "id2label": {0: "a", 1: "b", 2: "c"}}))


def unlearnable(data: list[dict], steps) -> list[dict]:
    """`data` with the batches of `steps` (from 0) labelled -100 throughout: their mean loss is 0 / 0, NaN."""
    return [{**b, "labels": torch.full_like(b["labels"], -100)} if i in steps else b for i, b in enumerate(data)]


class Scored(FixedBatches):
    """FixedBatches whose evaluations give `scores` in turn (the best metric)."""
    best_metric = "score"

    def __init__(self, data, scores):
        super().__init__(data)
        self.scores = iter(scores)

    def evaluate(self, model):
        return {"score": next(self.scores)}


def metrics(run) -> list[dict]:
    return [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]


def best_step(run) -> str:
    return (run / "best" / "COMPLETE").read_text()


def test_a_step_whose_loss_is_not_finite_leaves_the_weights_and_writes_no_checkpoint(tmp_path):
    run = tmp_path / "run"
    args = TrainArgs(out=run, steps=6, batch_size=8, lr=LR, warmup=WARMUP, progress=False, save_every=1, keep=6)
    fit(classifier(), FixedBatches(unlearnable(batches(6), {2, 3})), args)
    rows = metrics(run)
    assert [r["step"] for r in rows if r.get("skipped")] == [3, 4] and all(math.isnan(rows[i]["loss"]) for i in (2, 3))
    assert sorted(p.name for p in run.glob("step-*")) == ["step-0000001", "step-0000002", "step-0000005",
                                                         "step-0000006"]
    state = torch.load(run / "step-0000006" / "training_state.pt", weights_only=True)
    assert {float(s["step"]) for s in state["optimizer"]["state"].values()} == {4.0}  # 4 updates in 6 steps
    final = BertForSequenceClassification.from_pretrained(run / "final")
    assert all(bool(p.isfinite().all()) for p in final.parameters())


def test_a_loss_that_stays_not_finite_stops_the_run_which_resumes_from_its_last_checkpoint(tmp_path):
    """Steps 4 on give NaN: the tenth of them stops the run; the evaluations after step 3 (of a model that no
    longer trains, whatever they score) save no best/, and no checkpoint is written after step 3."""
    run, data = tmp_path / "run", batches(20)
    options = dict(out=run, steps=20, batch_size=8, lr=LR, warmup=WARMUP, progress=False, save_every=2,
                   eval_every=2)
    with pytest.raises(BertforgeError) as excinfo:
        fit(classifier(), Scored(unlearnable(data, range(3, 20)), range(10)), TrainArgs(**options))
    one_line_error(excinfo, f"step {3 + NONFINITE_STEPS}: ", f"for {NONFINITE_STEPS} steps", "nan",
                   run / "step-0000002")
    assert sorted(p.name for p in run.glob("step-*")) == ["step-0000002"] and not (run / "final").exists()
    assert best_step(run) == "step 2\n"
    fit(classifier(), Scored(data, range(10, 20)), TrainArgs(**options, resume=True))
    rows = metrics(run)
    assert [r["step"] for r in rows] == list(range(1, 21)) and not any(r.get("skipped") for r in rows)
    assert best_step(run) == "step 20\n" and (run / "final").is_dir()


def test_a_run_that_ends_on_a_loss_not_finite_fails_and_has_nothing_to_resume_without_checkpoints(tmp_path):
    run = tmp_path / "run"
    args = TrainArgs(out=run, steps=3, batch_size=8, lr=LR, warmup=WARMUP, progress=False, eval_every=1)
    with pytest.raises(BertforgeError) as excinfo:
        fit(classifier(), Scored(unlearnable(batches(3), {1, 2}), [0.1, 0.9, 0.8]), args)
    one_line_error(excinfo, "step 3: ", "for 2 steps", "--overwrite")
    assert best_step(run) == "step 1\n" and not (run / "final").exists()


def test_a_score_that_is_not_finite_is_never_best_also_after_resume(tmp_path):
    run = tmp_path / "run"
    options = dict(out=run, batch_size=8, lr=LR, warmup=WARMUP, progress=False, eval_every=2, save_every=2)
    fit(classifier(), Scored(batches(6), [math.nan, 0.5]), TrainArgs(**options, steps=4))
    assert best_step(run) == "step 4\n"
    fit(classifier(), Scored(batches(6), [0.6]), TrainArgs(**options, steps=6, resume=True))
    assert best_step(run) == "step 6\n"  # 0.6 beats 0.5: the NaN before it is no score to beat
