"""The parts of transformers' model API that are not the paper: outputs that are at once dicts, attributes
and tuples (in the reference's field order), `model.device`, `resize_token_embeddings` and the gradient
checkpointing switches. The model classes take `ModelApiMixin`; bert.py and task_heads.py build their outputs
with `finish`.
"""

import logging

import torch
from torch import nn

log = logging.getLogger("bertforge")

# Outputs of bertforge's own, beyond the reference's fields: attributes and keys, but not in the tuple.
OWN_KEYS = ("mlm_loss", "nsp_loss")


class ModelOutput(dict):
    """A dict whose entries are also attributes and, by number, the items of `to_tuple()`, as the reference's
    outputs are: keys in the reference's order; a field that is None is no entry (transformers' Trainer reads
    the entries as the predictions), its attribute None."""

    def __init__(self, fields: dict):
        super().__init__({k: v for k, v in fields.items() if v is not None})
        self.__dict__.update({k: None for k, v in fields.items() if v is None})

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def __getitem__(self, key):
        if isinstance(key, (int, slice)):
            return self.to_tuple()[key]
        return super().__getitem__(key)

    def to_tuple(self) -> tuple:
        return tuple(v for k, v in self.items() if k not in OWN_KEYS)


def finish(return_dict: bool, **fields):
    """A forward pass's result: a ModelOutput, or its tuple when return_dict=False."""
    out = ModelOutput(fields)
    return out if return_dict else out.to_tuple()


def added_rows(old: torch.Tensor, count: int) -> torch.Tensor:
    """`count` new rows for an [N, H] table as transformers' mean_resizing draws them: from a normal with the
    rows' mean and 1e-9 times their covariance (the mean alone where that covariance is not positive definite)."""
    rows = old.float()
    mean = rows.mean(0)
    centred = rows - mean
    covariance = 1e-9 * (centred.T @ centred / rows.shape[0])
    if bool(torch.distributions.constraints.positive_definite.check(covariance)):
        sample = torch.distributions.MultivariateNormal(mean, covariance_matrix=covariance).sample((count,))
    else:
        sample = mean.expand(count, -1)
    return sample.to(old.dtype)


class ModelApiMixin:
    """model.device, resize_token_embeddings and gradient checkpointing, with transformers' names."""

    # transformers' Trainer passes num_items_in_batch to a forward that takes **kwargs unless told not to: the
    # heads' losses are means over their own batch, and an unknown keyword is a TypeError
    accepts_loss_kwargs = False

    @property
    def base_model(self) -> nn.Module:
        """The encoder (BertModel) of a head, or the model itself."""
        return getattr(self, self.base_model_prefix, self)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def get_input_embeddings(self) -> nn.Embedding:
        return self.word_embeddings

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        """Grow or shrink the token table (and the masked-LM output bias) to `new_num_tokens` rows, rounded up to
        `pad_to_multiple_of`. New rows are the old rows' mean (mean_resizing, as transformers) or drawn as at
        initialisation, new output biases 0; a tied masked-LM decoder reads the table, an untied one's own table grows
        as the table does."""
        table = self.word_embeddings
        if new_num_tokens is None and pad_to_multiple_of is None:
            return table
        old, dim = table.weight.shape
        new = old if new_num_tokens is None else new_num_tokens
        if pad_to_multiple_of is not None:
            new = -(-new // pad_to_multiple_of) * pad_to_multiple_of
        if new != old:
            with torch.no_grad():
                table.weight = nn.Parameter(resized(table.weight, new, mean_resizing, self.config.initializer_range))
                table.num_embeddings = new
                for head in (m for m in self.modules() if getattr(m, "scores_vocabulary", False)):
                    if head.bias is not None:
                        head.bias = nn.Parameter(resized_bias(head.bias, new))
                    if getattr(head, "weight", None) is not None:  # an untied decoder's own table
                        head.weight = nn.Parameter(resized(head.weight, new, mean_resizing,
                                                           self.config.initializer_range))
            self.config.vocab_size = new
        return table

    def gradient_checkpointing_enable(self, gradient_checkpointing_kwargs: dict | None = None):
        """Recompute each encoder layer in the backward pass instead of keeping its activations (training only)."""
        if gradient_checkpointing_kwargs and gradient_checkpointing_kwargs.get("use_reentrant", False):
            log.warning("bertforge checkpoints with use_reentrant=False whatever gradient_checkpointing_kwargs say")
        self.base_model.encoder.gradient_checkpointing = True

    def gradient_checkpointing_disable(self):
        self.base_model.encoder.gradient_checkpointing = False

    @property
    def is_gradient_checkpointing(self) -> bool:
        return self.base_model.encoder.gradient_checkpointing


def resized(weight: torch.Tensor, rows: int, mean_resizing: bool, std: float) -> torch.Tensor:
    old = weight.shape[0]
    if rows <= old:
        return weight[:rows].clone()
    if mean_resizing:
        extra = added_rows(weight, rows - old)
    else:
        extra = torch.nn.init.trunc_normal_(weight.new_empty(rows - old, weight.shape[1]), std=std, a=-2 * std,
                                            b=2 * std)
    return torch.cat([weight, extra])


def resized_bias(bias: torch.Tensor, rows: int) -> torch.Tensor:
    """The masked-LM output bias: new entries 0, as transformers 5 leaves the bias of a tied decoder."""
    return bias[:rows].clone() if rows <= bias.shape[0] else torch.cat([bias, bias.new_zeros(rows - bias.shape[0])])
