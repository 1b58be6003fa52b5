"""What every pipeline does (pipelines.py's task classes override the steps): options checked, inputs parsed
and encoded into rows, too-long inputs cut to the length (truncate, the default; a call names them in a logged
warning, with the limit and what sets it) or refused by name (`TooLong`), batches run by the runtime, results put
back in input order.

Every task is three steps, so that the server (serve.py) can batch rows of many requests together:
`prepare` checks and encodes the inputs into rows, `forward` runs a padded batch (batches.run) and returns
one result per row, `finish` turns the rows' results into predictions in input order."""

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..model.architectures import bert as models
from ..model.architectures.config import BertConfig
from ..core.errors import BertforgeError
from .batches import run
from .inputs import as_list, check_count, check_text, input_name
from ..text.tokenizer import BertTokenizer
from .windows import text_head

log = logging.getLogger("bertforge")


class TooLong(BertforgeError):
    """An input over the length limit with truncation off (the server's 413)."""


@dataclass
class Prepared:
    items: list  # the checked inputs
    rows: Sequence  # model inputs, several per item where an item is windowed (inference.batches.LazyRows)
    single: bool  # one input given, not a list
    options: dict
    extra: dict = field(default_factory=dict)  # windowed tasks: "input_tokens", name -> tokens of a long input;
    # "cut": the names of the inputs cut to max_length


class Pipeline:
    task = ""
    model_class = models.BertModel
    defaults: dict = {}
    default_max_length: int | None = None  # None: the model's positions

    def __init__(self, runtime, tokenizer: BertTokenizer, config: BertConfig, folder: Path, batch_size: int = 32,
                 max_batch_tokens: int | None = None, max_length: int | None = None):
        self.runtime, self.tokenizer, self.config, self.folder = runtime, tokenizer, config, folder
        self.batch_size, self.max_batch_tokens = batch_size, max_batch_tokens
        limits = [(tokenizer.model_max_length, "the tokenizer's model_max_length (tokenizer_config.json)"),
                  (config.max_tokens, "the model's positions (config.json)")]
        if max_length or self.default_max_length:
            limits.insert(0, (max_length, "max_length") if max_length else (self.default_max_length,
                                                                             f"{self.task}'s default max_length"))
        self.max_length, self.length_source = min(limits, key=lambda limit: limit[0])  # the first of equal ones
        self.labels = config.id2label

    @classmethod
    def check_tokenizer(cls, tokenizer: BertTokenizer, folder: Path) -> None:
        """What the task needs of the folder's tokenizer, checked before the model is loaded."""

    def __call__(self, inputs, progress: str | None = None, batch_size: int | None = None, **options):
        """`batch_size` for this call only (as transformers' pipelines take it); else the pipeline's."""
        if batch_size is not None:
            check_count({"batch_size": batch_size}, "batch_size")
        prepared = self.prepare(inputs, **options)
        if cut := prepared.extra.get("cut"):
            more = f" and {len(cut) - 3} more" if len(cut) > 3 else ""
            log.warning(f"{', '.join(cut[:3])}{more} cut to {self.max_length} tokens: {self.length_source} is "
                        f"{self.max_length} (truncate=False refuses an input over it instead)")
        outputs = run(self.forward, prepared.rows, batch_size or self.batch_size, self.max_batch_tokens,
                      self.tokenizer.pad_token_id, progress, self.runtime.call_tokens)
        return self.finish(prepared, outputs)

    def prepare(self, inputs, truncate: bool = True, **options) -> Prepared:
        unknown = set(options) - set(self.defaults)
        if unknown:
            raise BertforgeError(f"{self.task} takes no option {', '.join(sorted(unknown))} "
                                 f"(options: {', '.join(self.defaults) or 'none'})")
        options = {**self.defaults, **options}
        self.check_options(options)
        items, single = self.parse(inputs)
        prepared = Prepared(items, [], single, options)
        prepared.rows = self.encode(items, prepared, truncate)
        return prepared

    def finish(self, prepared: Prepared, outputs: list):
        results = self.postprocess(prepared, outputs)
        return results[0] if prepared.single else results

    def check_options(self, options: dict):
        pass

    def parse(self, inputs) -> tuple[list, bool]:
        items, single = as_list(inputs, lambda x: isinstance(x, str))
        return [check_text(x, "inputs" if single else f"inputs[{i}]") for i, x in enumerate(items)], single

    def encode_texts(self, prepared: Prepared, texts, pairs=None, truncate=True, names=None) -> list:
        """Tokenized rows, each input over max_length cut or refused (`over_limit`; `names`: each text's name, by
        default inputs[i]). Of a long text, only the beginning that gives its first max_length tokens is tokenized
        (windows.text_head): a refused one's length is then a lower bound ("more than")."""
        heads = [self.heads(part) for part in (texts, pairs)]
        enc = self.tokenizer(*heads)
        over = [i for i, ids in enumerate(enc["input_ids"]) if len(ids) > self.max_length]
        for i in over:
            cut = any(part is not None and head[i] is not part[i] for head, part in zip(heads, (texts, pairs)))
            self.over_limit(prepared, names[i] if names else f"inputs[{i}]",
                            f"{'more than ' if cut else ''}{len(enc['input_ids'][i])}", truncate)
        return self.tokenizer(*heads, truncation=True, max_length=self.max_length) if over else enc

    def over_limit(self, prepared: Prepared, name: str, tokens: str, truncate: bool) -> None:
        """An input of `tokens` tokens, over max_length: with truncate cut to it (and named in prepared.extra's
        "cut", which a call of the pipeline logs), else refused by name (TooLong, the server's 413)."""
        if not truncate:
            raise TooLong(f"{name} is {tokens} tokens, over the limit of {self.max_length}")
        prepared.extra.setdefault("cut", []).append(name)

    def heads(self, texts):
        """Each text's beginning that holds its first max_length tokens, or the text (windows.text_head)."""
        if texts is None:
            return None
        return [text_head(self.tokenizer.backend_tokenizer, text, self.max_length) for text in texts]

    def encode(self, items, prepared: Prepared, truncate: bool) -> list:
        enc = self.encode_texts(prepared, items, truncate=truncate,
                                names=[input_name(prepared, i) for i in range(len(items))])
        return [{"input_ids": ids, "token_type_ids": types} for ids, types in zip(enc["input_ids"],
                                                                                 enc["token_type_ids"])]

    def outputs(self, batch: dict) -> dict:
        return self.runtime(batch)
