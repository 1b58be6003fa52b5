"""What the tokenizer returns: the model's inputs by name (a dict, also read as attributes), and per row where
each token came from (its word, its text of the pair, its characters), as transformers' BatchEncoding."""

import logging

log = logging.getLogger("bertforge")


class Encoding(dict):
    """input_ids, token_type_ids, attention_mask (and offset_mapping, special_tokens_mask,
    overflow_to_sample_mapping when asked); `rows` hold each row's word_ids, sequence_ids and offsets."""

    def __init__(self, data, rows: list[dict]):
        super().__init__(data)
        self._rows = rows

    def __getattr__(self, name):
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None

    def to(self, device) -> "Encoding":
        """The tensors moved to `device` (in place, as transformers does); returns self. Anything but a device
        (a dtype, say) leaves them as they are, with a warning, as transformers does."""
        import torch

        if not isinstance(device, (str, torch.device, int)):
            log.warning(f"Encoding.to({device!r}): not a device, so the tensors stay as they are (ids must stay "
                        "integers)")
            return self
        for key, value in self.items():
            if isinstance(value, torch.Tensor):
                self[key] = value.to(device)
        return self

    def word_ids(self, batch_index=0) -> list[int | None]:
        """For each token, the index of the word it came from in its own text; None for special tokens and padding."""
        return list(self._rows[batch_index]["word_ids"])

    def sequence_ids(self, batch_index=0) -> list[int | None]:
        """For each token, 0 (the text) or 1 (the pair text); None for special tokens and padding."""
        return list(self._rows[batch_index]["sequence_ids"])

    def char_to_token(self, batch_or_char_index: int, char_index: int | None = None, sequence_index: int = 0):
        """The token holding character `char_index` of the text (sequence_index 0) or of the pair text (1);
        None where no token does (a space). As transformers: with one argument, the character of row 0."""
        row, char = (0, batch_or_char_index) if char_index is None else (batch_or_char_index, char_index)
        meta = self._rows[row]
        for token, (sequence, (start, end)) in enumerate(zip(meta["sequence_ids"], meta["offsets"])):
            if sequence == sequence_index and start <= char < end:
                return token
        return None
