"""The pipelines from texts to vectors (pipelines.py picks one by task): feature-extraction (every token's last
hidden state), sentence-embedding (a vector a text, pooled as sentence-transformers pools it) and sparse-embedding
(SPLADE's {token id: weight} a text, as its SparseEncoder computes it), with the prompts of a sentence-transformers
folder picked by name."""

from dataclasses import replace

import numpy as np
import torch

from ..model.architectures import bert
from ..core.errors import BertforgeError
from .batches import per_row
from .inputs import as_list, check_count, check_ids, check_text, id_row, input_name, is_ids
from .pipeline_base import Pipeline
from .quantize import check_precision, quantize
from ..model.formats.sentence_folder import (ST_CONFIG, SentencePooling, apply_dense, check_pooling, load_dense,
                                             normalized, pool, read_prompts, read_sentence_folder)
from ..model.formats.sparse_folder import SparseDeclaration, read_sparse_folder


class FeatureExtraction(Pipeline):
    """The last hidden states, per text [1][tokens][hidden] as nested lists ([CLS] and [SEP] included). An input
    may also be token ids (a list of whole numbers, as text-embeddings-inference and OpenAI's API take them): the
    model's input as given, no [CLS] or [SEP] added."""

    task = "feature-extraction"

    def parse(self, inputs):
        items, single = as_list(inputs, lambda x: isinstance(x, str) or is_ids(x))
        names = ["inputs" if single else f"inputs[{i}]" for i in range(len(items))]
        return [check_ids(x, name, self.config.vocab_size) if isinstance(x, list) else check_text(x, name)
                for x, name in zip(items, names)], single

    def encode(self, items, prepared, truncate):
        texts = [i for i, x in enumerate(items) if isinstance(x, str)]
        for i, x in enumerate(items):
            if isinstance(x, list) and len(x) > self.max_length:
                self.over_limit(prepared, input_name(prepared, i), str(len(x)), truncate)
        rows = [id_row(x, self.max_length) if isinstance(x, list) else None for x in items]
        if texts:
            enc = self.encode_texts(prepared, [items[i] for i in texts], truncate=truncate,
                                    names=[input_name(prepared, i) for i in texts])
            for i, ids, types in zip(texts, enc["input_ids"], enc["token_type_ids"]):
                rows[i] = {"input_ids": ids, "token_type_ids": types}
        return rows

    def forward(self, batch):
        return per_row(self.outputs(batch)["last_hidden_state"], batch["attention_mask"].sum(1))

    def postprocess(self, prepared, outputs):
        return [[states.tolist()] for states in outputs]


class Prompted:
    """A pipeline on a sentence-transformers folder (`folder`), whose `declared` pooling holds its default prompt
    and `prompts` the others by name: a call's prompt_name picks one."""

    def check_prompt(self, options):
        """A one-line error where the options' prompt_name is none of the folder's prompts."""
        name = options["prompt_name"]
        if name is not None and name not in self.prompts:
            raise BertforgeError(f"prompt_name {name!r}: {self.folder / ST_CONFIG} names no such prompt "
                                 f"({'its prompts: ' + ', '.join(self.prompts) if self.prompts else 'it names none'})")

    def prompted(self, options):
        """The declaration with the prompt the options name (None: the folder's default one)."""
        name = options["prompt_name"]
        return self.declared if name is None else replace(self.declared, prompt=self.prompts[name])


class SentenceEmbedding(Prompted, FeatureExtraction):
    """One vector per text pooled from the last layer's token vectors ([CLS] and [SEP] included) as
    sentence-transformers pools them (sentence_folder.pool), through the folder's Dense modules; with `dimensions`
    (Matryoshka), its first that many values; then unit length with normalize; with `precision` (int8, uint8,
    binary, ubinary), quantized as sentence-transformers' quantize_embeddings (quantize.py; int8 ranges from the
    call's own vectors). A sentence-transformers folder's declaration (pooling, Normalize, max_seq_length, prompt)
    gives the defaults; else mean, normalized; `prompt_name` picks another of the folder's prompts. Token ids are
    pooled as given (no prompt)."""

    task = "sentence-embedding"

    def __init__(self, runtime, tokenizer, config, folder, *args, **kwargs):
        self.declared = read_sentence_folder(folder) or SentencePooling()
        self.prompts = read_prompts(folder)
        self.defaults = {"pooling": self.declared.pooling, "normalize": self.declared.normalize, "dimensions": None,
                         "prompt_name": None, "precision": "float32"}
        self.default_max_length = self.declared.max_seq_length
        super().__init__(runtime, tokenizer, config, folder, *args, **kwargs)
        self.dense = load_dense(folder, self.declared, config.hidden_size)

    def check_options(self, options):
        check_pooling(options["pooling"])
        check_precision(options["precision"], "precision")
        if options["dimensions"] is not None:
            check_count(options, "dimensions")
            size = self.declared.dimension(self.config.hidden_size)
            if options["dimensions"] > size:
                raise BertforgeError(f"dimensions {options['dimensions']} is over the model's {size}")
        self.check_prompt(options)

    def encode(self, items, prepared, truncate):
        declared = self.prompted(prepared.options)
        texts = [isinstance(item, str) for item in items]
        skip = declared.skipped(self.tokenizer)
        prepared.extra["skip"] = [skip if text else 0 for text in texts]  # a prompt's tokens, in texts only
        return super().encode([declared.text(x) if text else x for x, text in zip(items, texts)], prepared,
                              truncate)

    def vectors(self, prepared, outputs) -> np.ndarray:
        """The float vectors [texts, dims] (before any quantization)."""
        vectors = apply_dense(np.stack([pool(states, prepared.options["pooling"], skip)
                                        for states, skip in zip(outputs, prepared.extra["skip"])]), self.dense)
        vectors = vectors[:, :prepared.options["dimensions"]]
        return normalized(vectors) if prepared.options["normalize"] else vectors

    def postprocess(self, prepared, outputs):
        vectors = self.vectors(prepared, outputs)
        precision = prepared.options["precision"]
        return (vectors if precision == "float32" else quantize(vectors, precision)).tolist()


def splade(logits, counts: list[int], pooling: str = "max", activation: str = "relu"):
    """SPLADE's vectors [rows, V] from a masked-LM head's scores at each row's real tokens ([tokens, V], row-major,
    `counts` per row): log(1 + ReLU(x)) (log1p_relu: log1p twice), pooled over each row's tokens (max or sum), as
    sentence-transformers' SpladePooling."""
    weights = logits.relu().log1p_()
    if activation == "log1p_relu":
        weights = weights.log1p_()
    reduce = (lambda part: part.amax(0)) if pooling == "max" else (lambda part: part.sum(0))
    return torch.stack([reduce(part) for part in weights.split(counts)])


class SparseEmbedding(Prompted, Pipeline):
    """A SPLADE vector per text, as sentence-transformers' SparseEncoder computes it (sparse_folder.py): the
    masked-LM head's scores at each token, log(1 + ReLU(x)), max-pooled over the text's tokens ([CLS] and [SEP]
    included): per text {token id: weight} of its non-zero weights, largest first; with `top_k`, the k largest only.
    The folder's declaration gives the pooling, activation, max_seq_length and default prompt; `prompt_name` picks
    another of its prompts (SparseEncoder's "query" and "document"). Torch backend only."""

    task = "sparse-embedding"
    model_class = bert.BertForMaskedLM
    LOGITS_BUDGET = 1 << 26  # vocabulary scores computed at a time: 256 MiB of float32 (2,198 tokens of 30,522)

    def __init__(self, runtime, tokenizer, config, folder, *args, **kwargs):
        self.declared = read_sparse_folder(folder) or SparseDeclaration()
        self.prompts = read_prompts(folder)
        self.defaults = {"top_k": None, "prompt_name": None}
        self.default_max_length = self.declared.max_seq_length
        super().__init__(runtime, tokenizer, config, folder, *args, **kwargs)
        if not hasattr(runtime, "token_logits"):
            raise BertforgeError("sparse-embedding runs on the torch backend (its ONNX export scores the [MASK] "
                                 "positions only)")

    def check_options(self, options):
        if options["top_k"] is not None:
            check_count(options, "top_k")
        self.check_prompt(options)

    def encode(self, items, prepared, truncate):
        declared = self.prompted(prepared.options)
        return super().encode([declared.text(x) for x in items], prepared, truncate)

    def forward(self, batch):
        """Per row its non-zero weights: (token ids ascending, int64; weights, float32). The batch runs in parts of
        at most LOGITS_BUDGET vocabulary scores (real tokens x vocabulary), whatever its own size (the server's
        token budget, embed's --batch-tokens): the scores of every token are the memory a SPLADE model takes."""
        counts = batch["attention_mask"].sum(1).tolist()
        rows, start, most = [], 0, max(1, self.LOGITS_BUDGET // self.config.vocab_size)
        while start < len(counts):
            stop, tokens = start + 1, counts[start]
            while stop < len(counts) and tokens + counts[stop] <= most:
                tokens, stop = tokens + counts[stop], stop + 1
            part = {k: v[start:stop] for k, v in batch.items()}
            pooled = splade(self.runtime.token_logits(part), counts[start:stop], self.declared.pooling,
                            self.declared.activation)
            for vector in pooled.cpu():
                ids = vector.nonzero().squeeze(1)
                rows.append((ids.numpy(), vector[ids].numpy()))
            start = stop
        return rows

    def sparse(self, prepared, outputs) -> list[tuple[np.ndarray, np.ndarray]]:
        """Each text's (token ids ascending, weights), with top_k its k largest weights only."""
        k = prepared.options["top_k"]
        if k is None:
            return list(outputs)
        kept = []
        for ids, values in outputs:
            best = np.sort(np.argsort(-values, kind="stable")[:k])
            kept.append((ids[best], values[best]))
        return kept

    def postprocess(self, prepared, outputs):
        results = []
        for ids, values in self.sparse(prepared, outputs):
            order = np.argsort(-values, kind="stable")
            results.append({int(ids[i]): float(values[i]) for i in order})
        return results
