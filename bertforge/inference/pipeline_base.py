"""What every pipeline does (pipelines.py's task classes override the steps): options checked, inputs parsed
and encoded into rows, too-long inputs refused by name (`TooLong`), batches run by the runtime, results put back
in input order.

Every task is three steps, so that the server (serve.py) can batch rows of many requests together:
`prepare` checks and encodes the inputs into rows, `forward` runs a padded batch (batches.run) and returns
one result per row, `finish` turns the rows' results into predictions in input order."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..model import bert as models
from ..model.config import BertConfig
from ..core.errors import BertforgeError
from .batches import run
from .inputs import as_list, check_count, check_text, input_name
from ..text.tokenizer import BertTokenizer
from .windows import text_head


class TooLong(BertforgeError):
    """An input over the length limit with truncation off (the server's 413)."""


@dataclass
class Prepared:
    items: list  # the checked inputs
    rows: Sequence  # model inputs, several per item where an item is windowed (inference.LazyRows)
    single: bool  # one input given, not a list
    options: dict
    extra: dict = field(default_factory=dict)  # windowed tasks: "input_tokens", name -> tokens of a long input


class Pipeline:
    task = ""
    model_class = models.BertModel
    defaults: dict = {}
    default_max_length: int | None = None  # None: the model's positions

    def __init__(self, runtime, tokenizer: BertTokenizer, config: BertConfig, folder: Path, batch_size: int = 32,
                 max_batch_tokens: int | None = None, max_length: int | None = None):
        self.runtime, self.tokenizer, self.config, self.folder = runtime, tokenizer, config, folder
        self.batch_size, self.max_batch_tokens = batch_size, max_batch_tokens
        limit = min(tokenizer.model_max_length, config.max_position_embeddings)
        self.max_length = min(max_length or self.default_max_length or limit, limit)
        self.labels = config.id2label

    def __call__(self, inputs, progress: str | None = None, batch_size: int | None = None, **options):
        """`batch_size` for this call only (as transformers' pipelines take it); else the pipeline's."""
        if batch_size is not None:
            check_count({"batch_size": batch_size}, "batch_size")
        prepared = self.prepare(inputs, **options)
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

    def encode_texts(self, texts, pairs=None, truncate=True, names=None, **kw) -> list:
        """Tokenized rows; with truncate off, an input over max_length is a TooLong error naming it (`names`: each
        text's name, by default inputs[i]). Of a long text, only the beginning that gives its first max_length
        tokens is tokenized (windows.text_head): a refused one's length is then a lower bound ("more than")."""
        heads = [self.heads(part) for part in (texts, pairs)]
        enc = self.tokenizer(*heads, truncation=truncate, max_length=self.max_length, **kw)
        for i, ids in enumerate(enc["input_ids"]):
            if len(ids) > self.max_length:
                cut = any(part is not None and head[i] is not part[i] for head, part in zip(heads, (texts, pairs)))
                raise TooLong(f"{names[i] if names else f'inputs[{i}]'} is {'more than ' if cut else ''}{len(ids)} "
                              f"tokens, over the limit of {self.max_length}")
        return enc

    def heads(self, texts):
        """Each text's beginning that holds its first max_length tokens, or the text (windows.text_head)."""
        if texts is None:
            return None
        return [text_head(self.tokenizer.backend_tokenizer, text, self.max_length) for text in texts]

    def encode(self, items, prepared: Prepared, truncate: bool) -> list:
        enc = self.encode_texts(items, truncate=truncate, names=[input_name(prepared, i) for i in range(len(items))])
        return [{"input_ids": ids, "token_type_ids": types} for ids, types in zip(enc["input_ids"],
                                                                                 enc["token_type_ids"])]

    def outputs(self, batch: dict) -> dict:
        return self.runtime(batch)
