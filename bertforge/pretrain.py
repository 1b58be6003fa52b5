"""Pre-training (spec section 6): masked LM + next sentence prediction on data made by `bertforge data create`.

The batch of step s is a deterministic function of (seed, s): an epoch is a seeded permutation of the
instances, and a global batch is split by rows across processes. Data written without masks is masked
afresh every time a row is drawn (dynamic masking), with a generator seeded by (seed, step, row in the global
batch), so the masks do not depend on the number of processes either.
"""

import math
from pathlib import Path

import numpy as np
import torch

from .io import check_output, write_json
from .options import add_training_arguments, count, probability, training_options
from .config import BertConfig
from .data.shards import check_vocab, load_pretraining_data
from .errors import BertforgeError
from .model import BertForPreTraining
from .plot import BASELINES_FILE
from .tokenizer import BertTokenizer
from .train import TrainArgs, fit, setup_distributed, trim

# The command's defaults (the paper's recipe at a size that runs on a CPU); any TrainArgs field may be given.
PRETRAIN_DEFAULTS = dict(steps=1000, batch_size=64, lr=1e-4, warmup=0.05, log_every=10, eval_every=200,
                         save_every=500)
EVAL_STEP = 2**40  # seeds the held-out masks: the same at every evaluation, unlike any training step's


def labels_from_positions(input_ids: torch.Tensor, positions: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[B, L] labels (-100 where nothing is predicted) from per-row masked positions and labels (-100 padded)."""
    full = torch.full_like(input_ids, -100)
    keep = labels != -100
    rows = torch.arange(len(input_ids)).unsqueeze(1).expand_as(positions)
    full[rows[keep], positions[keep]] = labels[keep]
    return full


class PretrainJob:
    """Batches, losses and evaluation for BertForPreTraining (the training loop's view, see train.TrainingJob)."""

    loss_units = {
        "mlm_loss": lambda b: int((b["labels"] != -100).sum()),
        "nsp_loss": lambda b: len(b["next_sentence_label"]),
    }
    best_metric = None

    def __init__(self, data_dir, tokenizer: BertTokenizer, batch_size: int, seed: int, eval_rows: int = 1024):
        self.tokenizer = tokenizer
        self.train = load_pretraining_data(data_dir, "train")
        check_vocab(self.train.index, tokenizer)
        held_out = (Path(data_dir) / "eval" / "index.json").is_file()
        self.eval = load_pretraining_data(data_dir, "eval") if held_out else None
        self.batch_size, self.seed = batch_size, seed
        self.eval_rows = min(eval_rows, len(self.eval)) if self.eval is not None else 0
        self.steps_per_epoch = len(self.train) // batch_size
        self._order = (None, None)  # (epoch, its permutation of the instances)
        if self.steps_per_epoch == 0:
            raise BertforgeError(f"{data_dir}: {len(self.train)} training instances, "
                                 f"fewer than one batch of {batch_size}")

    def rows_of(self, data, indices, first_row: int, step: int) -> dict:
        """Instances with [B, L] masked-LM labels; unmasked data is masked now, row by row (see module doc)."""
        if data.static_masked:
            b = data.batch(indices)
        else:
            rows = [data.batch([i], rng=np.random.default_rng([self.seed, step, first_row + j]),
                               pad_to=data.max_seq_length) for j, i in enumerate(indices)]
            b = {k: torch.cat([r[k] for r in rows]) for k in rows[0]}
        b.pop("special_tokens_mask")
        b = trim(b)
        b["labels"] = labels_from_positions(b["input_ids"], b.pop("mlm_positions"), b.pop("mlm_labels"))
        return b

    def batch(self, step: int, rank: int, world: int) -> dict:
        epoch, i = divmod(step, self.steps_per_epoch)
        if self._order[0] != epoch:
            self._order = (epoch, np.random.default_rng([self.seed, epoch]).permutation(len(self.train)))
        global_rows = self._order[1][i * self.batch_size:(i + 1) * self.batch_size]
        parts = np.array_split(np.arange(self.batch_size), world)
        mine = parts[rank]
        return self.rows_of(self.train, global_rows[mine], int(mine[0]) if len(mine) else 0, step)

    @torch.no_grad()
    def evaluate(self, model) -> dict:
        """Held-out masked-LM loss, accuracy and perplexity, NSP accuracy (same rows and masks every time)."""
        if not self.eval_rows:
            return {}
        device = next(model.parameters()).device
        mlm_loss = mlm_correct = mlm_count = nsp_correct = 0.0
        for start in range(0, self.eval_rows, self.batch_size):
            rows = np.arange(start, min(start + self.batch_size, self.eval_rows))
            b = {k: v.to(device) for k, v in self.rows_of(self.eval, rows, start, EVAL_STEP).items()}
            labels = b.pop("labels")
            nsp = b.pop("next_sentence_label")
            out = model(**b, labels=labels)
            count = int((labels != -100).sum())
            mlm_loss += float(out.mlm_loss) * count
            mlm_correct += float((out.prediction_logits.argmax(-1) == labels[labels != -100]).sum())
            mlm_count += count
            nsp_correct += float((out.seq_relationship_logits.argmax(-1) == nsp).sum())
        loss = mlm_loss / mlm_count
        return {"eval_mlm_loss": loss, "eval_mlm_accuracy": mlm_correct / mlm_count,
                "eval_mlm_perplexity": math.exp(min(loss, 50)), "eval_nsp_accuracy": nsp_correct / self.eval_rows}

    def baselines(self) -> dict:
        """The trivial predictors on the evaluation rows: the most frequent masked token, the majority NSP label."""
        if not self.eval_rows:
            return {}
        labels, nsp = [], []
        for start in range(0, self.eval_rows, self.batch_size):
            rows = np.arange(start, min(start + self.batch_size, self.eval_rows))
            b = self.rows_of(self.eval, rows, start, EVAL_STEP)
            labels.append(b["labels"][b["labels"] != -100])
            nsp.append(b["next_sentence_label"])
        labels, nsp = torch.cat(labels), torch.cat(nsp)
        return {"mlm_most_frequent_token_accuracy": float(labels.bincount().max() / len(labels)),
                "nsp_majority_accuracy": float(nsp.bincount().max() / len(nsp))}

    def save(self, model, folder: Path):
        model.save_pretrained(folder, tokenizer=self.tokenizer)


def build_model(config_name: str, tokenizer: BertTokenizer, init_from: str | None, dropout: float | None,
                data_index: dict | None = None):
    if init_from:
        if data_index is not None and (Path(init_from) / "vocab.txt").is_file():
            check_vocab(data_index, BertTokenizer.from_pretrained(init_from))
        model = BertForPreTraining.from_pretrained(init_from)
        if model.config.vocab_size != tokenizer.vocab_size:
            raise BertforgeError(f"{init_from}: the model's vocabulary has {model.config.vocab_size} entries, "
                                 f"the data's {tokenizer.vocab_size}: the data was made with another vocabulary")
        return model
    overrides = {"vocab_size": tokenizer.vocab_size, "pad_token_id": tokenizer.pad_token_id}
    if dropout is not None:
        overrides |= {"hidden_dropout_prob": dropout, "attention_probs_dropout_prob": dropout}
    config = BertConfig.load(config_name)
    config = BertConfig.from_dict({**config.to_dict(), **overrides})
    return BertForPreTraining(config)


def pretrain(data: str, out: str, config: str = "mini", init_from: str | None = None, dropout: float | None = None,
             eval_rows: int = 1024, **options) -> dict:
    """Pre-train and return the last held-out evaluation (with the trivial baselines beside it).

    `options`: TrainArgs fields (defaults PRETRAIN_DEFAULTS)."""
    options = {**PRETRAIN_DEFAULTS, **options}
    ctx = setup_distributed(options.get("device"))
    tokenizer = BertTokenizer.from_pretrained(data)
    job = PretrainJob(data, tokenizer, options["batch_size"], options["seed"], eval_rows)
    torch.manual_seed(options["seed"])
    model = build_model(config, tokenizer, init_from, dropout, job.train.index)
    if job.train.max_seq_length > model.config.max_position_embeddings:
        raise BertforgeError(f"{data}: rows of {job.train.max_seq_length} tokens, but the model has "
                             f"{model.config.max_position_embeddings} positions (--config, --init-from)")
    args = TrainArgs(out=Path(out), **options)
    baselines = {}
    if ctx.main:  # beside metrics.jsonl, for `bertforge plot`
        baselines = job.baselines()
        write_json(args.out / BASELINES_FILE, baselines)
    result = fit(model, job, args, ctx)
    return {**result, **baselines}


def add_pretrain_arguments(p):
    p.add_argument("--data", required=True, help="folder written by `bertforge data create`")
    p.add_argument("--out", required=True, help="run folder: metrics.jsonl, step-*/ checkpoints, final/")
    p.add_argument("--config", default="mini", help="tiny|mini|small|medium|base|large or a config.json (default mini)")
    p.add_argument("--init-from", help="start from this checkpoint folder instead of random weights")
    p.add_argument("--dropout", type=probability, help="override the config's dropout (0.1)")
    p.add_argument("--eval-rows", type=count(1), default=1024, help="held-out instances per evaluation (default 1024)")
    add_training_arguments(p, PRETRAIN_DEFAULTS)


def run_pretrain(args) -> int:
    check_output(args.out, "--out", inputs=[args.data])
    result = pretrain(args.data, args.out, config=args.config, init_from=args.init_from, dropout=args.dropout,
                      eval_rows=args.eval_rows, **training_options(args))
    for key, value in result.items():
        print(f"{key}: {value:.4f}")
    return 0
