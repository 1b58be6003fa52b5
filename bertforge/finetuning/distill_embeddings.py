"""Sentence-embedding distillation (`bertforge distill embeddings`): a student learns the vectors a sentence-embedding
teacher gives (Reimers and Gurevych, 2020): its loss is the mean squared error between its sentence embedding and
the teacher's of the same text, so that any text teaches it and none needs a label.

The teacher is read as `pipeline("sentence-embedding")` reads it: a sentence-transformers folder by its declaration,
any other BERT folder with mean pooling and unit length (all-MiniLM-L6-v2's own sentence-transformers files declare
those). The texts are `--input`'s: a text a line of a text file (a folder: its text files), the text columns of a
table, the questions and paragraphs of a SQuAD file; each distinct text once. A share of them (`--held-out`) is kept
aside and scored at the end of each epoch, the MSE and the mean cosine of the student's vectors to the teacher's
(RUN/best: the best cosine). The teacher's vectors are computed once, in batches without autograd, and kept on disk
under a hash of the teacher's files and the texts' tokens, as task distillation keeps its teacher's outputs
(distill_data.py).

The student is a size name (its layers random, its embeddings the teacher's projected onto its width), with
`--prune` the teacher cut to that size (its layers evenly spaced, in each the channels, heads and neurons it uses
most on the texts: model/student.py), or a checkpoint folder. It pools as the teacher pools, of unit length where the
teacher's vectors are; where its width is not the teacher's dimension, a linear map to it (started as the
least-squares fit of its pooled vectors to the teacher's on up to PRUNE_ROWS training texts) is trained with it and
saved as a sentence-transformers Dense module. It reads each text as the teacher's folder does, without the
teacher's default prompt: it learns the prompted vectors from the plain text. RUN/best and RUN/final are
sentence-transformers folders (model/sentence_encoder.py) that `SentenceTransformer(folder)`,
`pipeline("sentence-embedding")` and `serve` read alike.
"""

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from ..core.errors import BertforgeError
from ..core.flags import add_revision_argument, probability
from ..core.hub import hub_origin, model_folder
from ..core.io import check_output, read_json_lines, write_json
from ..model.architectures.registry import load_config
from ..model.architectures.config import SIZES, BertConfig
from ..model.formats.sentence_folder import SentencePooling, read_sentence_folder
from ..text.tokenizer import BertTokenizer
from ..training.recipes import DEFAULTS, DISTILL, EMBEDDING_EPOCHS, Facts
from ..training.resume import EMBEDDINGS_FIXED, run_wall_seconds
from ..training.settings import EmbeddingSettings
from .embedding_data import HELD_OUT, MAX_HELD_OUT, TEXT_COLUMNS, held_out_rows, read_texts, scores, teacher_embeddings

TASKS = ("embeddings", "sentence-embedding")  # `distill embeddings` and its other name (cli.SUBCOMMANDS)
DEFAULT_LENGTH = 256  # tokens per text where the teacher's folder declares none (all-MiniLM-L6-v2 declares 256)


# ---------------------------------------------------------------------------------------------------------
# The student


def build_encoder(spec: str, teacher_dir: Path, tokenizer, rows: dict, prune: bool, embeddings: str | None,
                  device: str | None):
    """The student's encoder (a BertModel): of the size `spec`, cut from the teacher with `prune` (its parts ranked
    on `rows`), or a checkpoint folder. Random weights are drawn from the current torch seed."""
    from ..model.architectures.bert import BertModel

    if spec not in SIZES:
        from .distill_student import student_folder

        return BertModel.from_pretrained(student_folder(spec, tokenizer))
    teacher = BertModel.from_pretrained(teacher_dir)
    if not prune:
        from ..model.student import start_embeddings, student_config

        student = BertModel(student_config(teacher.config, spec, pad_token_id=tokenizer.pad_token_id))
        start_embeddings(student, teacher, embeddings)
        return student
    from ..inference.batches import SEQUENCE_INPUTS, padding, run_model
    from ..inference.runtime import pick_device
    from ..model.student import activation_ranks, cut_config, evenly_spaced, pruned_student

    config = cut_config(teacher.config, BertConfig.from_name(spec), spec)
    layers = evenly_spaced(teacher.config.num_hidden_layers, config.num_hidden_layers)
    teacher.to(pick_device(device))
    ranks = activation_ranks(teacher, lambda: run_model(teacher, rows, padding(SEQUENCE_INPUTS, tokenizer.pad_token_id),
                                                        ("last_hidden_state",), ("last_hidden_state",)))
    print(f"student cut from the teacher's layers {','.join(map(str, layers))}: {config.hidden_size} wide, "
          f"{config.num_attention_heads} heads, feed-forward {config.intermediate_size}", file=sys.stderr)
    return pruned_student(teacher.cpu(), config, layers, ranks)


def fit_map(student, rows: dict, targets: np.ndarray, pad_id: int) -> None:
    """The student's linear map set to the least-squares fit (lightly regularised) of its pooled vectors of `rows`
    to the teacher's vectors `targets`."""
    import torch

    from ..inference.batches import SEQUENCE_INPUTS, padding, run_model

    pooled = np.stack(run_model(student, rows, padding(SEQUENCE_INPUTS, pad_id), ("pooled",))["pooled"])
    x = np.concatenate([pooled, np.ones((len(pooled), 1))], 1).astype(np.float64)
    gram = x.T @ x
    gram[np.diag_indices(len(gram) - 1)] += 1e-3 * np.trace(gram) / len(gram)
    solution = np.linalg.solve(gram, x.T @ targets.astype(np.float64))  # [width + 1, dimension]
    with torch.no_grad():
        student.dense.weight.copy_(torch.from_numpy(solution[:-1].T.astype(np.float32)))
        student.dense.bias.copy_(torch.from_numpy(solution[-1].astype(np.float32)))


# ---------------------------------------------------------------------------------------------------------
# Training


class EmbeddingJob:
    """The training loop's view of sentence-embedding distillation (see train.TrainingJob): batches of training
    texts with the teacher's vectors, the held-out texts scored, the student saved as a sentence-transformers
    folder."""

    resume_fixed = EMBEDDINGS_FIXED

    def __init__(self, encoded: dict, teacher: np.ndarray, train: np.ndarray, held: np.ndarray, batch_size: int,
                 seed: int, tokenizer, group_by_length: bool = True):
        from ..inference.batches import SEQUENCE_INPUTS, padding, row_lengths
        from .finetune import length_grouped_order, shuffled_order

        self.encoded, self.teacher, self.train, self.held = encoded, teacher, train, held
        self.batch_size, self.seed, self.tokenizer = batch_size, seed, tokenizer
        self.keys = padding(SEQUENCE_INPUTS, tokenizer.pad_token_id)
        self.order = length_grouped_order if group_by_length else shuffled_order
        self.lengths = row_lengths(encoded)[train]
        self.steps_per_epoch = math.ceil(len(train) / batch_size)
        self.loss_units = {"loss": lambda batch: len(batch["input_ids"])}
        self.best_metric = "cosine" if len(held) else None
        self._epoch, self._batches = None, None

    def batch(self, step: int, rank: int, world: int) -> dict:
        import torch

        from ..inference.batches import pad_batch

        epoch, i = divmod(step, self.steps_per_epoch)
        if epoch != self._epoch:
            self._epoch = epoch
            self._batches = self.order(self.lengths, self.batch_size, np.random.default_rng([self.seed, epoch]))
        rows = self.train[np.array_split(self._batches[i], world)[rank]]
        return {**pad_batch(self.encoded, rows, self.keys), "teacher_embedding": torch.from_numpy(self.teacher[rows])}

    def evaluate(self, model) -> dict[str, float]:
        from ..inference.batches import run_model

        held = {k: [v[i] for i in self.held] for k, v in self.encoded.items()}
        vectors = run_model(model, held, self.keys, ("embedding",), batch_size=self.batch_size * 2)["embedding"]
        return scores(np.stack(vectors), self.teacher[self.held])

    def save(self, model, folder: Path):
        model.save_pretrained(folder, tokenizer=self.tokenizer)


def distill_embeddings(teacher_dir, student: str | None, inputs, out, **options) -> dict:
    """Distil the sentence-embedding teacher `teacher_dir` (a folder, or a Hub model's name at `revision`) into
    `student` on the texts of `inputs`; writes the run folder (best/ and final/ sentence-transformers folders,
    metrics.jsonl, eval_results.json) and returns the best held-out figures. `options`: EmbeddingSettings fields
    (TrainArgs' among them; the lr and epochs not given are the recipe's: recipes.embeddings_recipe)."""
    return distil_embeddings(EmbeddingSettings.make(teacher=teacher_dir, model=student,
                                                    input=list(map(str, inputs or [])), out=out, **options))


def distil_embeddings(settings: EmbeddingSettings) -> dict:
    """`distill embeddings` from its settings, which the run completes (recipes.choose) and records (args.json)."""
    from .distill_data import default_cache
    from .distill_student import student_start

    started = time.perf_counter()
    teacher_dir = check_options(settings)
    declared = read_sentence_folder(teacher_dir) or SentencePooling()
    tokenizer = BertTokenizer.from_pretrained(teacher_dir)
    limit = min(tokenizer.model_max_length, load_config(teacher_dir).max_tokens)
    max_length = min(settings.max_length or declared.max_seq_length or DEFAULT_LENGTH, limit)
    s = dataclasses.replace(settings, teacher=str(teacher_dir), base_model=hub_origin(teacher_dir),
                            max_length=max_length).resumed()
    s, _ = s.complete(Facts(start=student_start(s.model, None, s.prune)))
    texts = read_texts(s.input, s.text_column, s.text_pair_column)[:s.max_train_examples]
    train, held = held_out_rows(len(texts), s.held_out, s.max_eval_examples, s.seed)
    if not len(train):
        raise BertforgeError(f"--input {' '.join(s.input)}: {len(texts)} text, none left to train on")
    encoded = tokenizer([t.lower() for t in texts] if declared.do_lower_case else texts, truncation=True,
                        max_length=max_length)
    encoded = {k: list(encoded[k]) for k in ("input_ids", "token_type_ids")}
    cache = Path(s.cache_dir) if s.cache_dir else default_cache()
    teacher, cached = teacher_embeddings(teacher_dir, texts, encoded, max_length, cache, s.batch_size * 2, s.device,
                                         s.progress)
    print(f"teacher vectors of {len(texts):,} texts ({teacher.shape[1]} values each) "
          f"{'read from' if cached else 'written to'} {cache}; {len(held):,} kept aside", file=sys.stderr)
    s = dataclasses.replace(s, texts=len(texts), teacher_embeddings_cached=cached)
    model = student_model(s, teacher_dir, tokenizer, encoded, teacher, train, declared)
    return train_student(model, EmbeddingJob(encoded, teacher, train, held, s.batch_size, s.seed, tokenizer,
                                             s.group_by_length), s, started)


def check_options(s: EmbeddingSettings) -> Path:
    """The teacher's folder, once the flags are checked (and --prune's shape, before any text is read)."""
    student, prune = s.model, s.prune
    if not s.input:
        raise BertforgeError("distill embeddings needs --input: the text files (or tables, SQuAD files, folders) "
                             "whose texts the student learns the teacher's vectors of")
    if student is None:
        raise BertforgeError(f"distill embeddings needs --student: a size ({', '.join(SIZES)}) or a model folder")
    if prune and student not in SIZES:
        raise BertforgeError(f"--prune: --student {student} is not a size ({', '.join(SIZES)}) to cut the teacher to")
    if not 0 <= s.held_out < 1:
        raise BertforgeError(f"--held-out {s.held_out}: must be at least 0 and below 1")
    teacher_dir = model_folder(s.teacher, s.revision)
    if not (teacher_dir / "config.json").is_file():
        raise BertforgeError(f"--teacher {teacher_dir}: not a model folder (no config.json)")
    if prune:
        from ..model.student import cut_config

        cut_config(load_config(teacher_dir), BertConfig.from_name(student), student)
    return teacher_dir


def student_model(s: EmbeddingSettings, teacher_dir: Path, tokenizer, encoded: dict, teacher: np.ndarray,
                  train: np.ndarray, declared: SentencePooling):
    """The student: its encoder (build_encoder), pooled as the teacher, its map to the teacher's dimension fitted."""
    import torch

    from ..model.sentence_encoder import SentenceEncoder
    from ..model.student import ranking_rows

    torch.manual_seed(s.seed)
    sample = train[ranking_rows(len(train), s.seed)]
    rows = {k: [v[i] for i in sample] for k, v in encoded.items()}
    encoder = build_encoder(s.model, teacher_dir, tokenizer, rows, s.prune, s.student_embeddings, s.device)
    if s.max_length > encoder.config.max_tokens:
        raise BertforgeError(f"--student {s.model}: {encoder.config.max_tokens} positions, texts of up to "
                             f"{s.max_length} tokens (--max-length)")
    model = SentenceEncoder(encoder, declared.pooling, declared.normalize, teacher.shape[1], s.max_length,
                            declared.do_lower_case)
    if model.dense is not None:
        fit_map(model, rows, teacher[sample], tokenizer.pad_token_id)
    return model


def train_student(model, job: EmbeddingJob, s: EmbeddingSettings, started: float) -> dict:
    """The training loop over `s.epochs`, held-out figures each epoch; RUN/eval_results.json."""
    from ..training.run_folder import best_score
    from ..training.train import fit, setup_distributed

    ctx = setup_distributed(s.device)
    steps = max(1, round(s.epochs * job.steps_per_epoch))
    fit(model, job, s.loop(steps, job.steps_per_epoch if len(job.held) else 0), ctx, started)
    if not ctx.main:
        return {}
    rows = [row for row in read_json_lines(s.out / "metrics.jsonl") if "cosine" in row]
    history = [{k: row[k] for k in ("step", "mse", "cosine")} for row in rows]
    scores = [best_score(row, "cosine") for row in rows]
    best = history[scores.index(max(scores))] if history else {}
    results = {"task": "embeddings", "teacher": s.teacher, "student": s.model, "prune": s.prune,
               **{k: v for k, v in best.items() if k != "step"}, "step_of_best": best.get("step"),
               "dimension": model.dimension, "texts": s.texts, "held_out_texts": len(job.held),
               "history": history, "wall_time_s": run_wall_seconds(s.out, started)}
    write_json(s.out / "eval_results.json", results)
    return results


# ---------------------------------------------------------------------------------------------------------
# The command line: `bertforge distill embeddings` (cli.SUBCOMMANDS), its own flags


def add_distill_embeddings_arguments(p):
    from .finetune import add_run_arguments

    p.add_argument("task", choices=TASKS, help="embeddings (or sentence-embedding): a sentence-embedding student")
    p.add_argument("--teacher", required=True, help="a sentence-embedding model: a sentence-transformers folder, any "
                   "BERT folder (mean pooling, unit length), or a Hub model's name (org/name)")
    add_revision_argument(p, "--teacher")
    p.add_argument("--student", help=f"a size ({', '.join(SIZES)}: its layers random, its embeddings the teacher's "
                   "projected onto its width; with --prune the teacher cut to it) or a checkpoint folder (or a Hub "
                   "model's name) with the teacher's vocabulary")
    p.add_argument("--prune", action="store_true", help="the student of the size --student names starts as the "
                   "teacher cut to that size: its layers evenly spaced, in each the channels, heads and neurons most "
                   "active on the texts")
    p.add_argument("--student-embeddings", choices=("teacher", "random"),
                   help="a student of a size name starts with the teacher's embeddings projected onto its width, or "
                        "random ones (default: the teacher's, unless the student is wider)")
    p.add_argument("--input", nargs="+", type=Path, metavar="FILE",
                   help="the texts: a text a line of each text file (a folder: its .txt files), the text columns of "
                        f"a table (.csv, .tsv, .jsonl, .json: --text-column's, else those named "
                        f"{', '.join(TEXT_COLUMNS[:4])}, ...) or a SQuAD file's questions and paragraphs; each "
                        "distinct text once")
    p.add_argument("--text-column", default="text", help="a table's column of texts")
    p.add_argument("--text-pair-column", help="a table's second column of texts, read as texts too")
    p.add_argument("--held-out", type=probability, default=HELD_OUT, metavar="SHARE",
                   help=f"the share of the texts kept aside and scored each epoch (MSE and mean cosine to the "
                        f"teacher's vectors; at most --max-eval-examples, else {MAX_HELD_OUT}; 0: none, and no best/)")
    p.add_argument("--cache-dir", type=Path, help="where the teacher's vectors are kept (default: "
                   "$BERTFORGE_CACHE/teacher-outputs, or ~/.cache/bertforge/teacher-outputs)")
    add_run_arguments(p, DEFAULTS["embeddings"], f"the teacher folder's max_seq_length, else {DEFAULT_LENGTH}",
                      notes={"lr": f" (default: {DISTILL['trained_lr']:g} for a student that starts trained: "
                                   f"--prune, a folder; {DISTILL['random_lr']:g} for random layers)",
                             "epochs": f" (default: {EMBEDDING_EPOCHS:g})"})


def run_distill_embeddings(args) -> int:
    from .finetune import task_settings

    check_output(args.out, "--out", inputs=[p for p in (args.teacher, args.student) if p])
    results = distil_embeddings(task_settings(EmbeddingSettings, args, model=args.student,
                                              input=list(map(str, args.input or []))))
    print(json.dumps({k: v for k, v in results.items() if k != "history"}, indent=2))
    return 0
