"""`pipeline(task, model=DIR)`: a checkpoint folder as a function from texts to predictions.

Task names, inputs and output shapes are transformers' `pipeline()`'s: fill-mask, text-classification
(alias sentiment-analysis), token-classification (alias ner), feature-extraction; plus question-answering
(windowed and post-processed as fine-tuning does, see answer_spans.py), sentence-embedding and
multiple-choice. Without a task, the checkpoint's head (config.json `architectures`) decides, and a
sentence-transformers folder (modules.json, sentence_folder.py) is a sentence-embedding one. The steps every
task takes are pipeline_base.py's; the pipelines from texts to vectors (feature-extraction, sentence-embedding,
sparse-embedding) are embedding_pipelines.py's, the others here."""

from pathlib import Path

import numpy as np

from . import answer_spans
from ..model.architectures import bert, task_heads
from ..model.architectures.registry import heads_of, read_config
from ..model.architectures.config import BertConfig
from .entities import STRATEGIES, Entities, entities, softmax, token_entries
from ..core.errors import BertforgeError
from ..core.hub import model_folder
from .batches import per_row
from ..model.architectures.heads import HEADS
from .inputs import as_list, check_count, check_masks, check_text, input_name
from .pipeline_base import Pipeline, Prepared, TooLong
from .runtime import head_for, load_runtime
from ..model.formats.sentence_folder import read_sentence_folder
from ..model.formats.sparse_folder import is_sparse_folder
from ..text.tokenizer import BertTokenizer
from .windows import TextWindows
from .embedding_pipelines import FeatureExtraction, SentenceEmbedding, SparseEmbedding, splade  # noqa: F401


class FillMask(Pipeline):
    task = "fill-mask"
    model_class = bert.BertForMaskedLM
    defaults = {"top_k": 5}

    @classmethod
    def check_tokenizer(cls, tokenizer, folder):
        if tokenizer.mask_token is None:
            raise BertforgeError(f"{folder}: fill-mask needs a mask token, and the tokenizer files name none "
                                 "(mask_token in tokenizer_config.json)")

    def check_options(self, options):
        check_count(options, "top_k")

    def encode(self, items, prepared, truncate):
        rows = super().encode(items, prepared, truncate)  # a text's first max_length tokens (windows.text_head)
        check_masks(prepared, rows, self.tokenizer.mask_token, self.tokenizer.mask_token_id, self.max_length, TooLong)
        return rows

    def forward(self, batch):
        scores = self.outputs(batch)["mask_logits"].float().softmax(-1).cpu().numpy()
        counts = (batch["input_ids"] == self.tokenizer.mask_token_id).sum(1).tolist()
        return np.split(scores, np.cumsum(counts)[:-1])

    def postprocess(self, prepared, outputs):
        tok, k = self.tokenizer, min(prepared.options["top_k"], self.config.vocab_size)
        results = []
        for row, probs in zip(prepared.rows, outputs):
            ids = np.array(row["input_ids"])
            where = np.flatnonzero(ids == tok.mask_token_id)
            per_mask = []
            for position, p in zip(where, probs):
                best = np.argsort(-p, kind="stable")[:k]
                filled = []
                for token in best.tolist():
                    ids_filled = ids.copy()
                    ids_filled[position] = token
                    filled.append({"score": float(p[token]), "token": token, "token_str": tok.decode([token]),
                                   "sequence": tok.decode(ids_filled.tolist(), skip_special_tokens=len(where) == 1)})
                per_mask.append(filled)
            results.append(per_mask[0] if len(per_mask) == 1 else per_mask)
        return results


FUNCTIONS = (None, "softmax", "sigmoid", "none")


class TextClassification(Pipeline):
    """Labels from the model's id2label. A one-output model (num_labels 1, e.g. STS-B) gives its raw score
    (regression, as bertforge trains it) unless function_to_apply says otherwise; multi-label models a sigmoid."""

    task = "text-classification"
    model_class = task_heads.BertForSequenceClassification
    defaults = {"top_k": "", "function_to_apply": None}  # top_k "" : transformers' legacy (best label) output

    def check_options(self, options):
        if options["top_k"] not in ("", None):
            check_count(options, "top_k")
        if options["function_to_apply"] not in FUNCTIONS:
            raise BertforgeError(f"function_to_apply must be one of softmax, sigmoid, none, not "
                                 f"{options['function_to_apply']!r}")

    def parse(self, inputs):
        items, single = as_list(inputs, lambda x: isinstance(x, (str, dict)))
        checked = []
        for i, item in enumerate(items):
            name = "inputs" if single else f"inputs[{i}]"
            if isinstance(item, dict):
                extra = set(item) - {"text", "text_pair"}
                if extra or "text" not in item:
                    raise BertforgeError(f"{name}: a text pair is {{\"text\", \"text_pair\"}}, not keys "
                                         f"{', '.join(sorted(item))}")
                item = (item["text"], item.get("text_pair"))
            elif isinstance(item, (list, tuple)) and len(item) == 2:
                item = tuple(item)
            elif not isinstance(item, str):
                raise BertforgeError(f"{name} is {type(item).__name__}, expected a text or a [text, text_pair]")
            if isinstance(item, tuple):
                check_text(item[0], f"{name}.text")
                if item[1] is not None:
                    check_text(item[1], f"{name}.text_pair")
                item = item if item[1] is not None else item[0]
            checked.append(check_text(item, name) if isinstance(item, str) else item)
        return checked, single

    def encode(self, items, prepared, truncate):
        rows = [None] * len(items)
        for is_pair in (False, True):
            index = [i for i, x in enumerate(items) if isinstance(x, tuple) == is_pair]
            if index:
                texts = [items[i][0] if is_pair else items[i] for i in index]
                enc = self.encode_texts(prepared, texts, [items[i][1] for i in index] if is_pair else None,
                                        truncate, [input_name(prepared, i) for i in index])
                for i, ids, types in zip(index, enc["input_ids"], enc["token_type_ids"]):
                    rows[i] = {"input_ids": ids, "token_type_ids": types}
        return rows

    def forward(self, batch):
        return per_row(self.outputs(batch)["logits"])

    def function(self, chosen):
        if chosen is not None:
            return chosen
        if self.config.problem_type == "multi_label_classification":
            return "sigmoid"
        return "none" if self.config.problem_type == "regression" or self.config.num_labels == 1 else "softmax"

    def postprocess(self, prepared, outputs):
        function, top_k = self.function(prepared.options["function_to_apply"]), prepared.options["top_k"]
        results = []
        for logits in outputs:
            scores = {"softmax": softmax, "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "none": lambda x: x}[function](
                logits.astype(np.float64))
            if top_k == "":
                best = int(scores.argmax())
                results.append({"label": self.labels[best], "score": float(scores[best])})
                continue
            ranked = [{"label": self.labels[i], "score": float(scores[i])} for i in np.argsort(-scores, kind="stable")]
            results.append(ranked[:top_k] if top_k is not None else ranked)
        if prepared.single and top_k == "" and isinstance(prepared.items[0], str):
            return [results]  # transformers' legacy shape: one text (not a pair) gives a list of one
        return results


class TokenClassification(Pipeline):
    """Texts longer than max_length are cut into overlapping windows (windows.py), each token tagged from the
    window where it has the most context: a text is tagged to its end. With truncate=True, a text keeps its
    first window only, and its result (an entities.Entities list) says it was cut."""

    task = "token-classification"
    model_class = task_heads.BertForTokenClassification
    defaults = {"aggregation_strategy": "none", "ignore_labels": ("O",), "doc_stride": None}  # None: half a window

    def prepare(self, inputs, truncate: bool = False, **options) -> Prepared:
        return super().prepare(inputs, truncate, **options)

    def check_options(self, options):
        if options["aggregation_strategy"] not in STRATEGIES:
            raise BertforgeError(f"aggregation_strategy must be one of {', '.join(STRATEGIES)}, not "
                                 f"{options['aggregation_strategy']!r}")
        if options["doc_stride"] is not None:
            check_count(options, "doc_stride")

    def encode(self, items, prepared, truncate):
        windows = TextWindows(self.tokenizer, items, self.max_length, prepared.options["doc_stride"], truncate)
        prepared.extra["windows"] = windows
        prepared.extra["input_tokens"] = {input_name(prepared, i): windows.tagged(i) for i in range(len(items))}
        return windows.rows

    def forward(self, batch):
        return per_row(self.outputs(batch)["logits"], batch["attention_mask"].sum(1))

    def postprocess(self, prepared, outputs):
        windows, options = prepared.extra["windows"], prepared.options
        results = []
        for i, text in enumerate(prepared.items):
            tokens, offsets, special = windows.tokens(i, self.tokenizer.convert_ids_to_tokens)
            entries = token_entries(text, tokens, offsets, special, softmax(windows.scores(i, outputs)),
                                    self.tokenizer.unk_token)
            found = entities(entries, options["aggregation_strategy"], self.labels,
                             self.tokenizer.backend_tokenizer.decoder.decode, tuple(options["ignore_labels"]))
            results.append(Entities(found, truncated=windows.texts[i].truncated))
        return results


class QuestionAnswering(Pipeline):
    """Contexts cut into Google's windows and answers post-processed as `bertforge evaluate` does
    (answer_spans.py). `score` is the answer's probability among the n best spans; `start`/`end` are character
    offsets in the context. With handle_impossible_answer (SQuAD v2 models) the answer may be "" (no answer)."""

    task = "question-answering"
    model_class = task_heads.BertForQuestionAnswering
    defaults = {"top_k": 1, "handle_impossible_answer": False, "null_threshold": 0.0, "max_answer_len": 30,
                "doc_stride": 128, "max_question_len": 64}
    default_max_length = 384  # as fine-tuning on SQuAD

    def __call__(self, inputs=None, question=None, context=None, **options):
        if inputs is None:
            inputs = {"question": question, "context": context}
        return super().__call__(inputs, **options)

    def check_options(self, options):
        for name in ("top_k", "max_answer_len", "doc_stride", "max_question_len"):
            check_count(options, name)

    def parse(self, inputs):
        items, single = as_list(inputs, lambda x: isinstance(x, dict))
        checked = []
        for i, item in enumerate(items):
            name = "inputs" if single else f"inputs[{i}]"
            if not isinstance(item, dict) or set(item) != {"question", "context"}:
                raise BertforgeError(f"{name} must be an object {{\"question\", \"context\"}}")
            checked.append(answer_spans.SquadExample(str(i), check_text(item["question"], f"{name}.question"),
                                              check_text(item["context"], f"{name}.context"), [], []))
        return checked, single

    def encode(self, items, prepared, truncate):
        o = prepared.options
        windows = answer_spans.squad_windows(items, self.tokenizer, self.max_length, o["doc_stride"],
                                             o["max_question_len"])
        prepared.extra["windows"] = windows
        prepared.extra["input_tokens"] = {f"{input_name(prepared, i)}.context": n
                                          for i, n in enumerate(windows.context_tokens)}
        return windows.rows()  # each window made when its batch runs: memory linear in the contexts

    def forward(self, batch):
        out, lengths = self.outputs(batch), batch["attention_mask"].sum(1)
        return list(zip(per_row(out["start_logits"], lengths), per_row(out["end_logits"], lengths)))

    def postprocess(self, prepared, outputs):
        o = prepared.options
        result = answer_spans.postprocess(prepared.items, prepared.extra["windows"], [s for s, _ in outputs],
                                   [e for _, e in outputs], version_2=o["handle_impossible_answer"],
                                   n_best=max(20, o["top_k"]), max_answer_length=o["max_answer_len"],
                                   null_threshold=o["null_threshold"])
        answers = []
        for ex in prepared.items:
            best = result.nbest[ex.id]
            chosen = next((b for b in best if b["text"] == result.predictions[ex.id]), None)
            ranked = [chosen] + [b for b in best if b is not chosen] if chosen else best
            found = [{"score": b["probability"], "start": b["offsets"][0], "end": b["offsets"][1],
                      "answer": b["text"]} for b in ranked[:o["top_k"]]]
            if not found:  # no span at all (v1, a context without tokens)
                found = [{"score": 0.0, "start": 0, "end": 0, "answer": ""}]
            answers.append(found[0] if o["top_k"] == 1 else found)
        return answers


class MultipleChoice(Pipeline):
    """{"question", "choices"} -> {"choice": index, "score", "scores"}: [CLS] question [SEP] choice [SEP] each."""

    task = "multiple-choice"
    model_class = task_heads.BertForMultipleChoice

    def parse(self, inputs):
        items, single = as_list(inputs, lambda x: isinstance(x, dict))
        for i, item in enumerate(items):
            name = "inputs" if single else f"inputs[{i}]"
            if not isinstance(item, dict) or set(item) != {"question", "choices"}:
                raise BertforgeError(f"{name} must be an object {{\"question\", \"choices\"}}")
            check_text(item["question"], f"{name}.question")
            if not isinstance(item["choices"], list) or len(item["choices"]) < 2:
                raise BertforgeError(f"{name}.choices must be a list of at least 2 texts")
            for c, choice in enumerate(item["choices"]):
                check_text(choice, f"{name}.choices[{c}]")
        return items, single

    def encode(self, items, prepared, truncate):
        rows = []
        for n, item in enumerate(items):
            enc = self.encode_texts(prepared, [item["question"]] * len(item["choices"]), item["choices"], truncate,
                                    [f"{input_name(prepared, n)}.choices[{c}]" for c in range(len(item["choices"]))])
            rows.append({"input_ids": list(enc["input_ids"]), "token_type_ids": list(enc["token_type_ids"])})
        return rows

    def forward(self, batch):
        return per_row(self.outputs(batch)["logits"], batch["choice_mask"].sum(1))

    def postprocess(self, prepared, outputs):
        results = []
        for logits in outputs:
            p = softmax(logits.astype(np.float64))
            results.append({"choice": int(p.argmax()), "score": float(p.max()), "scores": p.tolist()})
        return results


TASKS = {p.task: p for p in (FillMask, TextClassification, TokenClassification, QuestionAnswering,
                             FeatureExtraction, SentenceEmbedding, SparseEmbedding, MultipleChoice)}
ALIASES = {"sentiment-analysis": "text-classification", "ner": "token-classification",
           "embedding": "sentence-embedding", "splade": "sparse-embedding"}


def head_task(config: BertConfig, folder: Path) -> str:
    """The task of the checkpoint's head, from config.json `architectures`; a sentence-transformers folder's is
    sentence-embedding, a SparseEncoder one's (SPLADE) sparse-embedding."""
    if is_sparse_folder(folder):
        return "sparse-embedding"
    if read_sentence_folder(folder) is not None:
        return "sentence-embedding"
    heads = config.extra.get("architectures") or []
    known = [HEADS[h].task for h in heads_of(config)]
    if not known:
        raise BertforgeError(f"{folder / 'config.json'}: architectures {heads or 'missing'} name no head bertforge "
                             f"serves; give the task ({', '.join(TASKS)})")
    return known[0]


def pipeline(task: str | None = None, model=None, device: str | None = None, backend: str = "torch",
             int8: bool = False, batch_size: int = 32, max_batch_tokens: int | None = None,
             max_length: int | None = None, threads: int | None = None, bf16: bool = False,
             revision: str | None = None, token: str | None = None) -> Pipeline:
    """A pipeline for `task` (None: the checkpoint's head's) on the checkpoint folder `model`, or the Hub model of
    that name (org/name, `core.hub.model_folder`: at `revision`, with `token`; a folder that exists wins).

    backend "onnx" runs the folder's model.onnx (model_int8.onnx with int8) written by `bertforge export onnx`;
    int8 on the torch backend quantises the linear layers (CPU); bf16 runs the torch model under bfloat16
    autocast (about 2x fp32 on CPUs with AVX512-BF16 or AMX: BENCHMARKS.md, "bf16 inference"). Batches hold at
    most batch_size inputs and, with max_batch_tokens, at most that many padded tokens; inputs are sorted by
    length and answered in order.
    """
    if model is None:
        raise BertforgeError("pipeline needs model=, a checkpoint folder or a Hub name")
    folder = model_folder(model, revision, token)
    if not folder.is_dir():
        raise BertforgeError(f"{folder}: no such model folder")
    config = read_config(folder / "config.json")
    task = ALIASES.get(task, task) or head_task(config, folder)
    if task not in TASKS:
        raise BertforgeError(f"unknown task {task!r}: choose one of {', '.join([*TASKS, *ALIASES])}")
    cls = TASKS[task]
    tokenizer = BertTokenizer.from_pretrained(folder)
    cls.check_tokenizer(tokenizer, folder)
    runtime = load_runtime(folder, head_for(config, task, cls.model_class), backend, device, int8,
                           tokenizer.mask_token_id, threads, bf16)
    return cls(runtime, tokenizer, config, folder, batch_size, max_batch_tokens, max_length)
