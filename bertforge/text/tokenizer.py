"""BERT's WordPiece tokenizer (spec sections 2-3) on the `tokenizers` library, and vocabulary training (reading
the files and counting their words with the tokenizer's own normalizer and pre-tokenizer; wordpiece.py learns).

The `tokenizers` pipeline does the per-character work (BertNormalizer, BertPreTokenizer, WordPiece); this module
owns the BERT-specific parts: the vocabulary file, cased/uncased checkpoints (casing.py), the [CLS] A [SEP] B [SEP]
layout (layout.py; the special tokens a folder names, specials.py), truncation, padding and the Hugging Face folder
layout.
"""

import json
from collections.abc import Mapping
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors

from .casing import casing_contradiction, casing_from_name, google_casing, lower_case  # noqa: F401 (also here)
from .encoding import Encoding, as_list, as_tensors, check_texts, tensor_kind, truncated_lengths
from ..core.errors import BertforgeError
from ..core.hub import model_folder, push_saved
from ..core.io import atomic_path, has_model_file, read_model_json, write_json, write_text_atomic
from .specials import named_specials, own_specials
from .layout import join, layout, pad_rows, padded_length, windows
from .vocab import (  # noqa: F401 (looks_uncased: also here)
    SPECIAL_NAMES, SPECIAL_TOKENS, added_tokens, check_fits, check_pipeline, looks_uncased, max_length_of,
    read_pipeline, read_vocab, vocab_of_pipeline
)

MAX_CHARS_PER_WORD = 100  # longer words become [UNK]
DEFAULT_MAX_LENGTH = 512  # the position embeddings of every released BERT

PADDING = (False, True, "longest", "max_length")
TRUNCATION = (False, True, "longest_first", "only_first", "only_second")
TENSORS = (None, "pt", "np")


def build_backend(vocab: dict[str, int], lowercase: bool) -> Tokenizer:
    """The `tokenizers` pipeline BERT uses; with an empty vocab, ready to be trained."""
    model = models.WordPiece(vocab, unk_token="[UNK]", max_input_chars_per_word=MAX_CHARS_PER_WORD)
    backend = Tokenizer(model)
    # Uncased checkpoints also strip accents; cased ones keep them (Google's do_lower_case does both).
    backend.normalizer = normalizers.BertNormalizer(
        clean_text=True, handle_chinese_chars=True, strip_accents=lowercase, lowercase=lowercase
    )
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.decoder = decoders.WordPiece(prefix="##")
    if vocab:
        # Registered as special so "[MASK]" typed in a text stays one token and decode can skip them.
        backend.add_special_tokens(SPECIAL_TOKENS)
        cls, sep = ("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])
        backend.post_processor = processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[cls, sep]
        )
    return backend


def check_options(**options) -> None:
    """Each option's value among those allowed (name=(value, allowed)), or a one-line error naming it."""
    for name, (value, allowed) in options.items():
        if value not in allowed:
            raise BertforgeError(f"{name} must be one of {allowed}, got {value!r}")


class BertTokenizer:
    """BERT's WordPiece tokenizer; `from_pretrained` also reads a folder whose tokenizer.json is another kind
    (ModernBERT's byte-level BPE, say), as a `PipelineTokenizer`."""

    specials = SPECIAL_NAMES  # the special tokens by attribute name
    # as transformers' BertTokenizer: what a model reads (the first is what `pad` pads), and where padding goes
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    padding_side = "right"

    def __init__(self, vocab: str | Path | dict[str, int] | None = None, do_lower_case: bool = True,
                 model_max_length: int = DEFAULT_MAX_LENGTH, *, vocab_file: str | Path | None = None,
                 tokenize_chinese_chars: bool = True, strip_accents: bool | None = None, **special_tokens):
        """As transformers' BertTokenizer: `vocab` a token -> id dict or a vocab.txt path (or `vocab_file=`, as
        transformers 4 took it); uncased (lower case, accents stripped) unless do_lower_case=False. BERT's
        special tokens ([UNK], [SEP], [PAD], [CLS], [MASK]) may be named (unk_token="[UNK]"), not changed."""
        if (vocab is None) == (vocab_file is None):
            raise BertforgeError("BertTokenizer takes a vocabulary: vocab (a token -> id dict or a vocab.txt path) "
                                 "or vocab_file, one of them")
        vocab = vocab if isinstance(vocab, dict) else read_vocab(vocab if vocab_file is None else vocab_file)
        for name, token in special_tokens.items():
            if name not in self.specials:
                raise TypeError(f"BertTokenizer() got an unexpected keyword argument {name!r}")
            if token != self.specials[name]:
                raise BertforgeError(f"{name}={token!r}: bertforge's WordPiece tokenizer uses BERT's "
                                     f"{self.specials[name]} (a tokenizer.json folder may name its own)")
        for option, value, supported in (("strip_accents", strip_accents, (None, do_lower_case)),
                                         ("tokenize_chinese_chars", tokenize_chinese_chars, (True,))):
            if value not in supported:
                raise BertforgeError(f"{option}={value} is not supported with do_lower_case={do_lower_case}")
        missing = [t for t in SPECIAL_TOKENS if t not in vocab]
        if missing:
            raise BertforgeError(f"vocabulary lacks the special tokens {' '.join(missing)}")
        self.setup(vocab, build_backend(dict(vocab), do_lower_case), do_lower_case, model_max_length)

    def setup(self, vocab: dict[str, int], backend: Tokenizer, do_lower_case: bool, model_max_length: int):
        self._vocab = dict(vocab)
        self._added: dict[str, int] = {}  # add_tokens: matched whole before the model, ids after the vocabulary
        self._given = set(self.specials.values())  # every token added to the pipeline, new or in the vocabulary
        self._id_to_token = {i: t for t, i in self._vocab.items()}
        self._backend = backend
        self.do_lower_case = do_lower_case
        self.model_max_length = model_max_length
        self.pad_token_id, self.unk_token_id, self.cls_token_id, self.sep_token_id, self.mask_token_id = (
            self._vocab.get(self.specials[name]) for name in ("pad_token", "unk_token", "cls_token", "sep_token",
                                                               "mask_token"))
        self._layout = {pair: layout(backend, self.specials["cls_token"], pair) for pair in (False, True)}

    @classmethod
    def from_pretrained(cls, path, do_lower_case: bool | None = None, *, revision: str | None = None,
                        token: str | None = None) -> "BertTokenizer":
        """From a folder holding vocab.txt or tokenizer.json (as transformers 5 saves it), maybe with
        tokenizer_config.json; or from a vocab.txt or tokenizer.json file; or from a Hub name (org/name,
        `core.hub.model_folder`: at `revision`, with `token`), read as a path only where that path exists. Tokens
        added with add_tokens (in tokenizer.json) come back too."""
        path = model_folder(path, revision, token, weights=False)
        vocab_file = path / "vocab.txt" if path.is_dir() else path
        json_file = vocab_file.parent / "tokenizer.json" if vocab_file.name != "tokenizer.json" else vocab_file
        pipeline = read_pipeline(json_file)
        model = (pipeline or {}).get("model")
        own = own_specials(vocab_file.parent)  # MPNet's WordPiece: <s> A </s></s> B </s>
        if own and pipeline is None:
            raise BertforgeError(f"{vocab_file.parent}: the tokenizer names {', '.join(own)}, not BERT's; bertforge "
                                 f"lays such a tokenizer's inputs out by its tokenizer.json, which is not there")
        if pipeline is not None and (own or (model.get("type") if isinstance(model, dict) else None) != "WordPiece"
                                     and not has_model_file(vocab_file.parent / "vocab.txt")):
            if do_lower_case is not None:
                raise BertforgeError(f"{json_file}: do_lower_case applies to WordPiece vocabularies; this "
                                     "tokenizer's own normalizer decides")
            return PipelineTokenizer.from_file(json_file, pipeline)
        if has_model_file(vocab_file) and vocab_file.name != "tokenizer.json":
            vocab, vocab_source = read_vocab(vocab_file), vocab_file
        elif pipeline is not None:
            vocab, vocab_source = vocab_of_pipeline(json_file, pipeline), json_file
        else:
            raise BertforgeError(f"{vocab_file}: vocabulary file not found (nor {json_file})")
        config_file = vocab_file.parent / "tokenizer_config.json"
        config = read_model_json(config_file) if has_model_file(config_file) else {}
        do_lower_case = lower_case(do_lower_case, vocab_file, vocab, config, json_file, pipeline)
        added = added_tokens(json_file, pipeline, len(vocab))
        check_fits(len(vocab) + len(added), json_file if added else vocab_source, vocab_file.parent)
        tokenizer = cls(vocab, do_lower_case, max_length_of(config_file, config, DEFAULT_MAX_LENGTH))
        for _, token, special in added:
            tokenizer.add_tokens([token], special_tokens=special)
        return tokenizer

    def save_pretrained(self, out_dir):
        """Write vocab.txt, tokenizer.json, tokenizer_config.json and special_tokens_map.json (Hugging Face layout)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        tokens = sorted(self._vocab, key=self._vocab.get)
        # Tokens added with add_tokens are kept in tokenizer.json, as transformers keeps them.
        write_text_atomic(out_dir / "vocab.txt", "".join(t + "\n" for t in tokens))
        with atomic_path(out_dir / "tokenizer.json") as tmp:
            self._backend.save(str(tmp))
        special = SPECIAL_NAMES
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": self.do_lower_case,
                  "model_max_length": self.model_max_length, "tokenize_chinese_chars": True,
                  "strip_accents": None, **special}
        write_json(out_dir / "tokenizer_config.json", config)
        write_json(out_dir / "special_tokens_map.json", special)

    def push_to_hub(self, repo_id: str, private: bool = False, branch: str | None = None,
                    token: str | None = None) -> str:
        """Upload the files save_pretrained writes to the Hub repository `repo_id` in one commit (made where
        missing, private if asked, on `branch`: core.hub.push); the commit's URL."""
        return push_saved(self, repo_id, private, branch, token)

    @property
    def vocab(self) -> dict[str, int]:
        """token -> id. Shared with the tokenizer: do not modify it."""
        return self._vocab

    @property
    def vocab_size(self) -> int:
        """The WordPiece vocabulary, without the tokens added with add_tokens (as transformers)."""
        return len(self._vocab)

    def __len__(self) -> int:
        return len(self._vocab) + len(self._added)

    def get_vocab(self) -> dict[str, int]:
        """token -> id, the added tokens included: a copy."""
        return {**self._vocab, **self._added}

    def add_tokens(self, new_tokens, special_tokens: bool = False) -> int:
        """Tokens matched whole in a text before WordPiece, with the next free ids; returns how many were not
        added before (as transformers: a token already in the vocabulary counts, and keeps its id).
        Give the model room for them with `model.resize_token_embeddings(len(tokenizer))`."""
        new_tokens = [new_tokens] if isinstance(new_tokens, str) else list(new_tokens)
        (self._backend.add_special_tokens if special_tokens else self._backend.add_tokens)(new_tokens)
        fresh = [t for t in dict.fromkeys(new_tokens) if t not in self._given]
        self._given.update(fresh)
        for token in fresh:
            if token not in self._vocab and token not in self._added:
                self._added[token] = self._backend.token_to_id(token)
                self._id_to_token[self._added[token]] = token
        return len(fresh)

    @property
    def all_special_tokens(self) -> list[str]:
        return [t for t in self.specials.values() if t is not None]

    @property
    def all_special_ids(self) -> list[int]:
        return [self._vocab[t] for t in self.all_special_tokens]

    pad_token = property(lambda self: self.specials["pad_token"])
    unk_token = property(lambda self: self.specials["unk_token"])
    cls_token = property(lambda self: self.specials["cls_token"])
    sep_token = property(lambda self: self.specials["sep_token"])
    mask_token = property(lambda self: self.specials["mask_token"])

    @property
    def backend_tokenizer(self) -> Tokenizer:
        """The `tokenizers` pipeline, for fast batch encoding (`encode_batch(texts, add_special_tokens=False)`).

        Shared with this object: enabling truncation or padding on it changes what __call__ returns.
        """
        return self._backend

    def __call__(self, text, text_pair=None, *, padding=False, truncation=False, max_length=None, stride=0,
                 is_split_into_words=False, pad_to_multiple_of=None, return_tensors=None, return_token_type_ids=None,
                 return_attention_mask=None, return_overflowing_tokens=False, return_offsets_mapping=False,
                 return_special_tokens_mask=False, add_special_tokens=True) -> Encoding:
        """As transformers' tokenizers. `is_split_into_words`: each text is a list of words. With truncation,
        `return_overflowing_tokens` returns the rest of each text as more rows (windows overlapping by `stride`
        tokens, for a pair in the text that is truncated) and `overflow_to_sample_mapping`, each row's text."""
        texts, pairs, single = check_texts(text, text_pair, words=is_split_into_words)
        check_options(padding=(padding, PADDING), truncation=(truncation, TRUNCATION),
                      return_tensors=(return_tensors, TENSORS))
        if max_length is None and (truncation or padding == "max_length"):
            max_length = self.model_max_length
        if truncation and padding and pad_to_multiple_of and max_length % pad_to_multiple_of:
            raise BertforgeError(f"max_length={max_length} (truncation) is not a multiple of "
                                 f"pad_to_multiple_of={pad_to_multiple_of} (padding)")

        if return_overflowing_tokens and truncation:
            rows, sample_of_row = windows(self._backend, texts, pairs, max_length, stride, truncation,
                                          add_special_tokens, is_split_into_words)
        else:
            rows = self._rows(texts, pairs, truncation, max_length, add_special_tokens, is_split_into_words)
            sample_of_row = list(range(len(rows)))

        if padding:
            pad_rows(rows, padded_length(rows, padding, max_length, pad_to_multiple_of), self.pad_token_id)

        keys = ["input_ids"] + ["token_type_ids"] * (return_token_type_ids is not False)
        keys += ["attention_mask"] * (return_attention_mask is not False)
        keys += ["offset_mapping"] * return_offsets_mapping + ["special_tokens_mask"] * return_special_tokens_mask
        data = {key: [row[key] for row in rows] for key in keys}
        if return_overflowing_tokens:
            data["overflow_to_sample_mapping"] = sample_of_row
        if return_tensors:
            data = as_tensors(data, return_tensors)
        elif single and not return_overflowing_tokens:
            data = {key: value[0] for key, value in data.items()}
        return Encoding(data, [{"word_ids": r["word_ids"], "sequence_ids": r["sequence_ids"],
                                "offsets": r["offset_mapping"]} for r in rows])

    def pad(self, encoded_inputs, padding=True, max_length=None, pad_to_multiple_of=None, padding_side=None,
            return_attention_mask=None, return_tensors=None) -> Encoding:
        """Encoded inputs padded to one length, as transformers' tokenizers pad them, so that its collators
        (DataCollatorWithPadding, DataCollatorForTokenClassification, ...) take this tokenizer: one example or a
        batch, as a list of feature dicts (rows of a `datasets.Dataset`) or a dict of lists; padding True or
        "longest" (to the longest row), "max_length" (to max_length, else model_max_length) or False, the length
        rounded up to pad_to_multiple_of. input_ids are padded with the pad id, attention_mask (made where missing,
        unless return_attention_mask=False) and token_type_ids with 0, special_tokens_mask with 1, on the right;
        other keys (labels) stay as given. Tensors or arrays given come back so unless return_tensors ("pt", "np",
        None: lists) says otherwise."""
        if isinstance(encoded_inputs, (list, tuple)) and encoded_inputs and isinstance(encoded_inputs[0], Mapping):
            encoded_inputs = {key: [row[key] for row in encoded_inputs] for key in encoded_inputs[0]}
        if not isinstance(encoded_inputs, Mapping) or "input_ids" not in encoded_inputs:
            raise BertforgeError("pad takes encoded inputs with input_ids: a dict of lists or a list of dicts")
        check_options(padding=(padding, PADDING), return_tensors=(return_tensors, TENSORS),
                      padding_side=(padding_side, (None, self.padding_side)))
        ids = encoded_inputs["input_ids"]
        given = tensor_kind(ids) or tensor_kind(next(iter(ids), None))
        data = {key: as_list(value) for key, value in encoded_inputs.items()}
        single = not isinstance(next(iter(data["input_ids"]), []), list)
        rows = [data] if single else [dict(zip(data, values)) for values in zip(*data.values(), strict=True)]
        if return_attention_mask is not False:
            for row in rows:
                row.setdefault("attention_mask", [1] * len(row["input_ids"]))
        if padding:
            if padding == "max_length" and max_length is None:
                max_length = self.model_max_length
            pad_rows(rows, padded_length(rows, padding, max_length, pad_to_multiple_of), self.pad_token_id)
        data = rows[0] if single else {key: [row[key] for row in rows] for key in rows[0]} if rows else data
        return Encoding(as_tensors(data, return_tensors or given))

    def _rows(self, texts, pairs, truncation, max_length, add_special_tokens, words: bool) -> list[dict]:
        firsts = self._encode_distinct(texts, words)
        seconds = [None] * len(texts) if pairs is None else self._encode_distinct(pairs, words)
        rows = []
        for first, second in zip(firsts, seconds):
            n1, n2 = len(first), 0 if second is None else len(second)
            if truncation:
                n_special = self._backend.num_special_tokens_to_add(second is not None) if add_special_tokens else 0
                n1, n2 = truncated_lengths(n1, n2, second is not None, max_length - n_special, truncation, max_length)
            rows.append(join(self._layout[second is not None], first, n1, second, n2, add_special_tokens))
        return rows

    def _encode_distinct(self, texts: list, words: bool = False) -> list:
        """Encodings without special tokens, each distinct text encoded once (QA pairs repeat a context)."""
        keys = [tuple(t) if words else t for t in texts]
        distinct = list(dict.fromkeys(keys))
        inputs = [list(t) for t in distinct] if words else distinct
        encoded = dict(zip(distinct, self._backend.encode_batch(inputs, is_pretokenized=words,
                                                               add_special_tokens=False)))
        return [encoded[t] for t in keys]

    def tokenize(self, text) -> list[str]:
        check_texts(text, None, batch=False)
        return self._backend.encode(text, add_special_tokens=False).tokens

    def encode(self, text, text_pair=None, **kw) -> list[int]:
        check_texts(text, text_pair, batch=False)
        return self(text, text_pair, **kw)["input_ids"]

    def decode(self, ids, skip_special_tokens=False) -> str:
        return self._backend.decode(as_list(ids), skip_special_tokens=skip_special_tokens)

    def batch_decode(self, sequences, skip_special_tokens=False) -> list[str]:
        return self._backend.decode_batch([as_list(ids) for ids in as_list(sequences)],
                                          skip_special_tokens=skip_special_tokens)

    def convert_tokens_to_ids(self, tokens):
        """A token or a list of tokens; unknown tokens map to [UNK]."""
        if isinstance(tokens, str):
            return self._vocab.get(tokens, self._added.get(tokens, self.unk_token_id))
        return [self._vocab.get(t, self._added.get(t, self.unk_token_id)) for t in tokens]

    def convert_ids_to_tokens(self, ids):
        """An id or a list (or tensor) of ids."""
        ids = as_list(ids)
        if isinstance(ids, int):
            return self._token(ids)
        return [self._token(i) for i in ids]

    def _token(self, i: int) -> str:
        if i not in self._id_to_token:
            raise BertforgeError(f"token id {i} is outside the vocabulary (size {len(self)})")
        return self._id_to_token[i]


class PipelineTokenizer(BertTokenizer):
    """A tokenizer.json of any kind `tokenizers` reads (byte-level BPE as ModernBERT's and Ettin's, Unigram,
    WordLevel), run as the file says, with the special tokens tokenizer_config.json (or special_tokens_map.json)
    names; inputs are laid out by the file's post-processor, as transformers' fast tokenizer lays them out (BERT's
    [CLS] A [SEP] B [SEP], RoBERTa's <s> A </s></s> B </s>, with their segment ids). Padding and truncation are the
    call's, as in transformers, never the file's `padding` and `truncation`. Without a pad token named, the model's
    (config.json pad_token_id) is taken: every batch of inputs is padded."""

    @classmethod
    def from_file(cls, json_file: Path, pipeline: dict) -> "PipelineTokenizer":
        folder = json_file.parent
        check_pipeline(json_file, pipeline)
        try:
            backend = Tokenizer.from_str(json.dumps(pipeline))
        except Exception as e:  # the library's message says what it could not read
            raise BertforgeError(f"{json_file}: not a tokenizer `tokenizers` reads ({e})") from None
        backend.no_padding()
        backend.no_truncation()
        config_file = folder / "tokenizer_config.json"
        config = read_model_json(config_file) if has_model_file(config_file) else {}
        vocab = backend.get_vocab(with_added_tokens=True)
        specials = named_specials(json_file, config, vocab)
        tokenizer = cls.__new__(cls)
        tokenizer.specials = specials
        tokenizer.setup(vocab, backend, False, max_length_of(config_file, config, DEFAULT_MAX_LENGTH))
        return tokenizer

    def save_pretrained(self, out_dir):
        """Write tokenizer.json, tokenizer_config.json and special_tokens_map.json."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        with atomic_path(out_dir / "tokenizer.json") as tmp:
            self._backend.save(str(tmp))
        special = {name: token for name, token in self.specials.items() if token is not None}
        write_json(out_dir / "tokenizer_config.json", {"tokenizer_class": "PreTrainedTokenizerFast",
                                                       "model_max_length": self.model_max_length, **special})
        write_json(out_dir / "special_tokens_map.json", special)
