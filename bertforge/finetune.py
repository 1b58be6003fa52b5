"""Fine-tuning (spec section 7): one pre-trained encoder, one small head per task, the whole network trained.

A task family (GLUE, SQuAD, CoNLL NER, multiple choice) is a `Job`: it reads a split into examples and
encoded rows, names its head and labels, and turns the model's outputs into metrics and submission files.
For predictions on plain text (see predict.py) it also names its text fields, builds an example from them
and describes each prediction as a JSON object.
Everything else is shared: length-grouped batches (little padding), the training loop of `train.py`,
evaluation every epoch with the best checkpoint kept in RUN/best/, and RUN/eval_results.json.
"""

import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from . import model as models
from .io import rounded, write_text_atomic
from .errors import BertforgeError
from .tasks import glue, multiple_choice, ner, squad
from .tasks.metrics import GLUE_METRICS, accuracy, glue_metrics, ner_metrics
from .tokenizer import BertTokenizer
from .train import TrainArgs, fit, setup_distributed

SEQUENCE_KEYS = ("input_ids", "token_type_ids", "attention_mask")


# ---------------------------------------------------------------------------------------------------------
# Rows and batches


def pad_batch(features: dict[str, list], rows, pad_id: int = 0) -> dict[str, torch.Tensor]:
    """Tensors for the given rows, sequences padded to the longest (token labels with -100)."""
    batch = {}
    for key, column in features.items():
        values = [column[r] for r in rows]
        if key in SEQUENCE_KEYS or (key == "labels" and isinstance(values[0], list)):
            fill = pad_id if key == "input_ids" else (-100 if key == "labels" else 0)
            batch[key] = pad_nested(values, fill)
        elif key in ("labels", "start_positions", "end_positions", "choice_mask"):
            batch[key] = torch.tensor(values)
    return batch


def pad_nested(values: list, fill: int) -> torch.Tensor:
    """[rows][len] or [rows][choices][len] lists of ints as one tensor padded on the last axis."""
    flat = [v for row in values for v in row] if isinstance(values[0][0], list) else values
    length = max(len(v) for v in flat)
    out = torch.full((len(flat), length), fill, dtype=torch.long)
    for i, v in enumerate(flat):
        out[i, :len(v)] = torch.tensor(v, dtype=torch.long)
    return out.view(len(values), -1, length) if flat is not values else out


def row_lengths(features: dict[str, list]) -> np.ndarray:
    ids = features["input_ids"]
    return np.array([max(map(len, r)) if r and isinstance(r[0], list) else len(r) for r in ids])


def shuffled_order(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Batches of a plain shuffle, as transformers' Trainer draws them."""
    order = rng.permutation(len(lengths))
    return [order[i:i + batch_size] for i in range(0, len(order), batch_size)]


def length_grouped_order(lengths: np.ndarray, batch_size: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Shuffled batches of similar lengths: sort within random windows of 50 batches, shuffle the batches."""
    order = rng.permutation(len(lengths))
    window = batch_size * 50
    for start in range(0, len(order), window):
        part = order[start:start + window]
        order[start:start + window] = part[np.argsort(lengths[part], kind="stable")]
    batches = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    return [batches[i] for i in rng.permutation(len(batches))]


class FinetuneTask:
    """The training loop's view of a fine-tuning job (see train.Task)."""

    best_metric = None

    def __init__(self, job, train_features, batch_size: int, seed: int, evaluate, tokenizer, group_by_length=True):
        self.features, self.batch_size, self.seed = train_features, batch_size, seed
        self.order = length_grouped_order if group_by_length else shuffled_order
        self.lengths = row_lengths(train_features)
        self.steps_per_epoch = math.ceil(len(self.lengths) / batch_size)
        self.evaluate, self.tokenizer, self.job = evaluate, tokenizer, job
        self.best_metric = job.best_metric
        token_labels = "labels" in train_features and isinstance(train_features["labels"][0], list)
        self.loss_units = {"loss": (lambda b: int((b["labels"] != -100).sum())) if token_labels
                           else (lambda b: len(b["input_ids"]))}
        self._epoch, self._batches = None, None

    def batch(self, step: int, rank: int, world: int) -> dict:
        epoch, i = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            rng = np.random.default_rng([self.seed, epoch])
            self._batches = self.order(self.lengths, self.batch_size, rng)
        rows = np.array_split(self._batches[i], world)[rank]
        return pad_batch(self.features, rows, self.tokenizer.pad_token_id)

    def save(self, model, folder: Path):
        model.save_pretrained(folder, tokenizer=self.tokenizer)


@torch.no_grad()
def predict_rows(model, features: dict[str, list], keys: tuple[str, ...], batch_size: int, pad_id: int,
                 bf16: bool = False, progress: str | None = None) -> dict[str, list[np.ndarray]]:
    """The model's outputs `keys` for every row, in row order, with per-token outputs cut to the row's length.
    A `progress` label shows a bar (rows/s, ETA) on stderr."""
    model.eval()
    device = next(model.parameters()).device
    lengths = row_lengths(features)
    order = np.argsort(lengths, kind="stable")
    out = {k: [None] * len(lengths) for k in keys}
    inputs = {k: v for k, v in features.items() if k in SEQUENCE_KEYS or k == "choice_mask"}
    bar = tqdm(total=len(order), desc=progress, unit="row", disable=progress is None, leave=False)
    for start in range(0, len(order), batch_size):
        rows = order[start:start + batch_size]
        bar.update(len(rows))
        batch = {k: v.to(device) for k, v in pad_batch(inputs, rows, pad_id).items()}
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            result = model(**batch)
        for k in keys:
            values = result[k].float().cpu().numpy()
            for j, r in enumerate(rows):
                per_token = values.ndim == 3 or (values.ndim == 2 and k != "logits")
                out[k][r] = values[j, :lengths[r]] if per_token else values[j]
    bar.close()
    return out


# ---------------------------------------------------------------------------------------------------------
# Task families


def softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def find_file(folder: Path, patterns: tuple[str, ...], what: str) -> Path:
    for pattern in patterns:
        found = sorted(folder.glob(pattern))
        if found:
            return found[0]
    raise BertforgeError(f"{folder}: no {what} file (looked for {', '.join(patterns)})")


@dataclass
class Split:
    name: str
    examples: list
    features: dict
    extra: dict = field(default_factory=dict)


class GlueJob:
    model_class = models.BertForSequenceClassification
    output_keys = ("logits",)

    def __init__(self, task: str, data: Path, max_length: int):
        self.task = glue.glue_task(task)
        self.root = data.parent if data and (data / "train.tsv").is_file() else data
        self.max_length = max_length
        self.labels = list(self.task.labels) if self.task.labels else [self.task.name]
        self.best_metric = GLUE_METRICS[task][0]
        self.eval_splits = ["dev_matched", "dev_mismatched"] if task == "mnli" else ["dev"]
        self.text_fields = tuple(name for name in self.task.hf_text if name)

    def read(self, split: str, tokenizer, limit=None) -> Split:
        return self.encode(split, glue.read_glue(self.task.name, self.root, split)[:limit], tokenizer)

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        return Split(name, examples, glue.encode_glue(examples, tokenizer, self.max_length))

    def example(self, record: dict, guid: str) -> glue.GlueExample:
        a, b = self.task.hf_text
        return glue.GlueExample(guid, record[a], record[b] if b else None, None)

    def predictions(self, outputs) -> np.ndarray:
        logits = np.stack(outputs["logits"])
        return logits[:, 0] if self.task.labels is None else logits.argmax(-1)

    def score(self, split: Split, outputs) -> dict:
        preds = self.predictions(outputs)
        labels = np.array([e.label for e in split.examples])
        metrics = glue_metrics(self.task.name, preds, labels)
        suffix = "_mismatched" if split.name == "dev_mismatched" else ""
        return {f"{k}{suffix}": v for k, v in metrics.items()}

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"{self.task.folder}_{split.name}.tsv"
        glue.write_glue_submission(self.task.name, self.predictions(outputs), path)
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        logits = np.stack(outputs["logits"])
        if self.task.labels is None:
            return [{"score": rounded(row[0])} for row in logits]
        return [{"label": self.labels[int(p.argmax())], "probabilities": dict(zip(self.labels, rounded(p)))}
                for p in softmax(logits)]


class NerJob:
    model_class = models.BertForTokenClassification
    output_keys = ("logits",)
    best_metric = "f1"
    eval_splits = ["valid", "test"]
    files = {"train": "train.txt", "valid": "valid.txt", "test": "test.txt"}
    text_fields = ("sentence",)

    def __init__(self, task: str, data: Path, max_length: int, labels=None):
        self.data, self.max_length = data, max_length
        # Without data the labels are the fine-tuned model's (see load_finetuned).
        self.labels = labels or (ner.label_list(ner.read_conll(self.path("train"))) if data else None)

    def path(self, split):
        return self.data / self.files[split] if self.data.is_dir() else self.data

    def read(self, split: str, tokenizer, limit=None) -> Split:
        return self.encode(split, ner.read_conll(self.path(split))[:limit], tokenizer)

    def encode(self, name: str, sentences: list, tokenizer) -> Split:
        label_to_id = {label: i for i, label in enumerate(self.labels)}
        return Split(name, sentences, ner.encode_ner(sentences, tokenizer, label_to_id, self.max_length))

    def example(self, record: dict, guid: str) -> ner.NerSentence:
        words = record["sentence"].split()
        return ner.NerSentence(words, [self.labels[0]] * len(words))  # placeholder tags: encode_ner wants one per word

    def tags(self, split: Split, outputs):
        predictions = [logits.argmax(-1) for logits in outputs["logits"]]
        return ner.predictions_to_words(split.examples, split.features, predictions, self.labels)

    def score(self, split: Split, outputs) -> dict:
        m = ner_metrics([s.tags for s in split.examples], self.tags(split, outputs))
        prefix = "" if split.name == "valid" else f"{split.name}_"
        return {f"{prefix}{k}": v for k, v in m.items() if k != "per_type"}

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"conll_{split.name}_predictions.txt"
        ner.write_conll(path, split.examples, self.tags(split, outputs))
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        return [{"words": s.words, "tags": tags} for s, tags in zip(split.examples, self.tags(split, outputs))]


class MultipleChoiceJob:
    model_class = models.BertForMultipleChoice
    output_keys = ("logits",)
    best_metric = "accuracy"
    eval_splits = ["dev"]
    patterns = {"train": ("train*.jsonl", "train*.csv", "train*.json"),
                "dev": ("dev*.jsonl", "validation*.jsonl", "val*.csv", "dev*.csv", "val*.json", "dev*.json"),
                "test": ("test*.jsonl", "test*.csv", "test*.json")}
    text_fields = ("question", "choices")

    def __init__(self, task: str, data: Path, max_length: int):
        self.task, self.data, self.max_length = task, data, max_length
        self.labels = ["choice"]

    def read(self, split: str, tokenizer, limit=None) -> Split:
        path = self.data if self.data.is_file() else find_file(self.data, self.patterns[split], split)
        return self.encode(split, multiple_choice.read_multiple_choice(self.task, path)[:limit], tokenizer)

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        return Split(name, examples, multiple_choice.encode_multiple_choice(examples, tokenizer, self.max_length))

    def example(self, record: dict, guid: str) -> multiple_choice.MultipleChoiceExample:
        # laid out as CommonsenseQA, OpenBookQA and ARC are: [CLS] question [SEP] choice [SEP]
        return multiple_choice.MultipleChoiceExample(guid, record["question"], "", record["choices"], None)

    def score(self, split: Split, outputs) -> dict:
        preds = np.stack(outputs["logits"]).argmax(-1)
        return {"accuracy": accuracy(preds, [e.label for e in split.examples])}

    def write(self, split: Split, outputs, folder: Path) -> Path:
        path = folder / f"{self.task}_{split.name}_predictions.jsonl"
        preds = np.stack(outputs["logits"]).argmax(-1)
        with path.open("w", encoding="utf-8") as f:
            for e, p in zip(split.examples, preds):
                f.write(json.dumps({"id": e.guid, "prediction": int(p)}) + "\n")
        return path

    def describe(self, split: Split, outputs) -> list[dict]:
        probabilities = [softmax(logits[:len(e.endings)]) for e, logits in zip(split.examples, outputs["logits"])]
        return [{"prediction": int(p.argmax()), "probabilities": rounded(p)} for p in probabilities]


class SquadJob:
    model_class = models.BertForQuestionAnswering
    output_keys = ("start_logits", "end_logits")
    best_metric = "f1"
    eval_splits = ["dev"]
    labels = ["start", "end"]
    text_fields = ("question", "context")

    def __init__(self, task: str, data: Path, max_length: int, doc_stride=128, max_query_length=64,
                 null_threshold=0.0):
        self.version_2 = task == "squad_v2"
        self.data, self.max_length = data, max_length
        self.doc_stride, self.max_query_length, self.null_threshold = doc_stride, max_query_length, null_threshold

    def path(self, split):
        if self.data.is_file():
            return self.data
        version = "2.0" if self.version_2 else "1.1"
        return find_file(self.data, (f"{split}-v{version}*.json",), f"SQuAD v{version} {split}")

    def read(self, split: str, tokenizer, limit=None) -> Split:
        return self.encode(split, squad.read_squad(self.path(split))[:limit], tokenizer)

    def encode(self, name: str, examples: list, tokenizer) -> Split:
        windows = squad.featurize(examples, tokenizer, self.max_length, self.doc_stride, self.max_query_length)
        features = {"input_ids": [w.input_ids.tolist() for w in windows],
                    "token_type_ids": [w.token_type_ids.tolist() for w in windows],
                    "attention_mask": [[1] * len(w.input_ids) for w in windows],
                    "start_positions": [w.start_position for w in windows],
                    "end_positions": [w.end_position for w in windows]}
        return Split(name, examples, features, {"windows": windows})

    def example(self, record: dict, guid: str) -> squad.SquadExample:
        return squad.SquadExample(guid, record["question"], record["context"], [], [])

    def result(self, split: Split, outputs):
        return squad.postprocess(split.examples, split.extra["windows"], outputs["start_logits"],
                                 outputs["end_logits"], version_2=self.version_2, null_threshold=self.null_threshold)

    def score(self, split: Split, outputs) -> dict:
        result = self.result(split, outputs)
        return squad.squad_metrics(split.examples, result.predictions, result.null_odds or None, self.version_2,
                                   result.best_spans or None)

    def write(self, split: Split, outputs, folder: Path) -> Path:
        squad.write_predictions(folder, self.result(split, outputs))
        return folder / "predictions.json"

    def describe(self, split: Split, outputs) -> list[dict]:
        result = self.result(split, outputs)
        described = []
        for ex in split.examples:
            answer = result.predictions[ex.id]
            best = next((b for b in result.nbest[ex.id] if b["text"] == answer), None)  # None: v1 found no span
            start, end = best["offsets"] if answer else (None, None)
            described.append({"answer": answer, "start": start, "end": end,
                              "probability": rounded(best["probability"]) if best else None})
            if self.version_2:
                described[-1]["no_answer"] = not answer
        return described


JOBS = {**{t: GlueJob for t in glue.GLUE_TASKS}, "conll2003": NerJob, "ner": NerJob,
        **{t: MultipleChoiceJob for t in multiple_choice.MULTIPLE_CHOICE_TASKS},
        "squad": SquadJob, "squad_v1": SquadJob, "squad_v2": SquadJob}
DEFAULT_MAX_LENGTH = {SquadJob: 384}


def make_job(task: str, data=None, max_length: int | None = None, null_threshold: float = 0.0):
    """The task's job, reading `data` (None: a job for plain-text examples only). null_threshold: SQuAD v2
    answers "no answer" where the null score beats the best span's by more than this."""
    if task not in JOBS:
        raise BertforgeError(f"unknown task {task!r}: choose one of {', '.join(JOBS)}")
    cls = JOBS[task]
    options = {"null_threshold": null_threshold} if cls is SquadJob else {}
    return cls(task, None if data is None else Path(data), max_length or DEFAULT_MAX_LENGTH.get(cls, 128), **options)


# ---------------------------------------------------------------------------------------------------------
# Commands


def evaluate_job(job, model, splits: list[Split], batch_size: int, pad_id: int, bf16=False, progress=False) -> dict:
    metrics = {}
    for split in splits:
        outputs = predict_rows(model, split.features, job.output_keys, batch_size, pad_id, bf16,
                               f"evaluate {split.name}" if progress else None)
        metrics.update(job.score(split, outputs))
    return metrics


def finetune(task: str, model_dir, data, out, epochs: float = 3.0, lr: float = 2e-5, batch_size: int = 32,
             max_length: int | None = None, max_train_examples: int | None = None,
             max_eval_examples: int | None = None, seed: int = 42, warmup: float = 0.1, bf16: bool = False,
             device: str | None = None, progress: bool = True, group_by_length: bool = True,
             null_threshold: float = 0.0, **train_options) -> dict:
    """Fine-tune `model_dir` on a task; writes RUN/best/, RUN/eval_results.json and returns the best metrics."""
    started = time.perf_counter()
    ctx = setup_distributed(device)
    out = Path(out)
    job = make_job(task, data, max_length, null_threshold)
    tokenizer = BertTokenizer.from_pretrained(model_dir)
    train_split = job.read("train", tokenizer, max_train_examples)
    eval_splits = [job.read(s, tokenizer, max_eval_examples) for s in job.eval_splits]
    torch.manual_seed(seed)
    overrides = {"id2label": dict(enumerate(job.labels))} if job.model_class is not models.BertForQuestionAnswering \
        else {}
    model = job.model_class.from_pretrained(model_dir, **overrides)

    history = []

    def evaluate(m):
        metrics = evaluate_job(job, m, eval_splits, batch_size * 2, tokenizer.pad_token_id, bf16, progress)
        history.append(metrics)
        return metrics

    fit_task = FinetuneTask(job, train_split.features, batch_size, seed, evaluate, tokenizer, group_by_length)
    steps = max(1, round(epochs * fit_task.steps_per_epoch))
    args = TrainArgs(out=out, steps=steps, batch_size=batch_size, lr=lr, warmup=warmup, seed=seed, bf16=bf16,
                     eval_every=fit_task.steps_per_epoch, progress=progress,
                     **{"log_every": 10, "save_every": 0, "weight_decay": 0.01, "adam_eps": 1e-6, **train_options})
    fit(model, fit_task, args, ctx)
    if not ctx.main:
        return {}
    best = max(history, key=lambda m: m.get(job.best_metric, -math.inf)) if history else {}
    results = {"task": task, **best, "epoch_of_best": history.index(best) + 1 if history else None,
               "history": history, "train_examples": len(train_split.examples),
               "wall_time_s": round(time.perf_counter() - started, 1)}
    write_text_atomic(out / "eval_results.json", json.dumps(results, indent=2) + "\n")
    return results


def add_null_threshold_argument(p):
    p.add_argument("--null-threshold", type=float, default=0.0,
                   help="squad_v2: answer nothing where the null score beats the best span's by more than this "
                        "(eval_results' best_f1_thresh is the dev set's best value)")


def add_finetune_arguments(p):
    p.add_argument("task", help=f"one of {', '.join(JOBS)}")
    p.add_argument("--model", required=True, help="pre-trained checkpoint folder (Hugging Face layout)")
    p.add_argument("--data", required=True, help="the task's data folder (or file)")
    p.add_argument("--out", required=True, help="run folder: best/, eval_results.json, metrics.jsonl")
    p.add_argument("--epochs", type=float, default=3.0)
    p.add_argument("--lr", type=float, default=2e-5)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--max-length", type=int, help="tokens per input (default 128; 384 for SQuAD)")
    p.add_argument("--warmup", type=float, default=0.1, help="fraction of the steps (<1) or a step count")
    p.add_argument("--max-train-examples", type=int, help="use only the first N training examples")
    p.add_argument("--max-eval-examples", type=int, help="evaluate on only the first N examples")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--device")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--no-length-grouping", action="store_true",
                   help="batches of a plain shuffle (default: batches of similar lengths, little padding)")
    add_null_threshold_argument(p)


def run_finetune(args) -> int:
    results = finetune(args.task, args.model, args.data, args.out, epochs=args.epochs, lr=args.lr,
                       batch_size=args.batch_size, max_length=args.max_length,
                       max_train_examples=args.max_train_examples, max_eval_examples=args.max_eval_examples,
                       seed=args.seed, warmup=args.warmup, bf16=args.bf16, device=args.device,
                       progress=not args.no_progress, group_by_length=not args.no_length_grouping,
                       null_threshold=args.null_threshold)
    print(json.dumps({k: v for k, v in results.items() if k != "history"}, indent=2))
    return 0


def add_evaluate_arguments(p):
    p.add_argument("task", help=f"one of {', '.join(JOBS)}")
    p.add_argument("--model", required=True, help="a fine-tuned folder (e.g. RUN/best)")
    p.add_argument("--data", required=True)
    p.add_argument("--split", help="split to score (default: the task's dev splits)")
    p.add_argument("--max-length", type=int)
    p.add_argument("--max-eval-examples", type=int)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--bf16", action="store_true")
    add_null_threshold_argument(p)


def load_finetuned(args):
    """The job, tokenizer and model of a fine-tuned folder; label names are the model's where it has as many
    as the data (and always without data)."""
    job = make_job(args.task, args.data, args.max_length, args.null_threshold)
    tokenizer = BertTokenizer.from_pretrained(args.model)
    model = job.model_class.from_pretrained(args.model)
    if job.model_class in (models.BertForSequenceClassification, models.BertForTokenClassification) and (
            args.data is None or model.config.num_labels == len(job.labels)):
        job.labels = [model.config.id2label[i] for i in range(model.config.num_labels)]
    return job, tokenizer, model


def run_evaluate(args) -> int:
    job, tokenizer, model = load_finetuned(args)
    splits = [job.read(s, tokenizer, args.max_eval_examples) for s in ([args.split] if args.split else job.eval_splits)]
    metrics = evaluate_job(job, model, splits, args.batch_size, tokenizer.pad_token_id, args.bf16, progress=True)
    print(json.dumps(metrics, indent=2))
    return 0
