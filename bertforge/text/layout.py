"""How a tokenizer's encodings become the rows a model reads: where its post-processor puts the special tokens
(`layout`: BERT's [CLS] A [SEP] B [SEP], RoBERTa's <s> A </s></s> B </s>, with their segment ids), a text and its
pair joined so (`join`), a long text cut into overlapping windows (`windows`), and rows padded to one length
(`padded_length`, `pad_rows`). The tokenizer (tokenizer.py) makes its rows with them; inference/ reads `layout` to
find where a text lies among the ids."""

from tokenizers import Tokenizer

from ..core.errors import BertforgeError


def layout(backend: Tokenizer, token: str, pair: bool) -> list[tuple]:
    """Where `backend`'s post-processor puts a text ("A") and a pair's second ("B") among the ids of its special
    tokens, each with its segment id, in order: [(101, 0), ("A", 0), (102, 0), ("B", 1), (102, 1)] for BERT's pairs.
    Found by post-processing texts of one `token` (one the vocabulary holds)."""
    one = backend.encode(token, add_special_tokens=False)
    e = backend.post_process(one, one if pair else None, add_special_tokens=True)
    parts, texts = [], 0
    for token_id, special, segment in zip(e.ids, e.special_tokens_mask, e.type_ids):
        if special:
            parts.append((token_id, segment))
        else:
            if texts % len(one) == 0:
                parts.append(("AB"[texts // len(one)], segment))
            texts += 1
    return parts


def join(parts: list[tuple], first, n1: int, second, n2: int, add_special_tokens: bool) -> dict[str, list]:
    """The first n1 tokens of encoding A and n2 of B, laid out as `parts` (`layout`: BERT's [CLS] A [SEP] B [SEP],
    segment 1 from B on; RoBERTa's <s> A </s></s> B </s>, all of segment 0), with the special tokens where asked."""
    row = {"input_ids": [], "token_type_ids": [], "attention_mask": [], "offset_mapping": [],
           "special_tokens_mask": [], "word_ids": [], "sequence_ids": []}

    def add(ids, segment, offsets, special, word_ids, sequence):
        row["input_ids"] += ids
        row["token_type_ids"] += [segment] * len(ids)
        row["attention_mask"] += [1] * len(ids)
        row["offset_mapping"] += offsets
        row["special_tokens_mask"] += [special] * len(ids)
        row["word_ids"] += word_ids
        row["sequence_ids"] += [sequence] * len(ids)

    texts = {"A": (first, n1, 0), "B": (second, n2, 1)}
    for part, segment in parts:
        if part in texts:
            e, n, sequence = texts[part]
            add(e.ids[:n], segment, e.offsets[:n], 0, e.word_ids[:n], sequence)
        elif add_special_tokens:
            add([part], segment, [(0, 0)], 1, [None], None)
    return row


def windows(backend: Tokenizer, texts, pairs, max_length, stride, truncation, add_special_tokens, words: bool):
    """Rows of at most max_length tokens covering each text, by the `tokenizers` truncation transformers'
    fast tokenizers use, on a copy of `backend` (so the windows are theirs); and the text of each row."""
    backend = Tokenizer.from_str(backend.to_str())
    strategy = "longest_first" if truncation is True else truncation
    backend.enable_truncation(max_length, stride=stride, strategy=strategy)
    inputs = texts if pairs is None else list(zip(texts, pairs))
    try:
        encodings = backend.encode_batch(inputs, is_pretokenized=words, add_special_tokens=add_special_tokens)
    except Exception as e:  # the library's error for a window that cannot hold the stride, say
        raise BertforgeError(f"cannot cut windows of max_length={max_length}, stride={stride}: {e}") from None
    rows, sample_of_row = [], []
    for i, encoding in enumerate(encodings):
        for e in (encoding, *encoding.overflowing):
            rows.append({"input_ids": e.ids, "token_type_ids": e.type_ids, "attention_mask": e.attention_mask,
                         "offset_mapping": e.offsets, "special_tokens_mask": e.special_tokens_mask,
                         "word_ids": e.word_ids, "sequence_ids": e.sequence_ids})
            sample_of_row.append(i)
    return rows, sample_of_row


def padded_length(rows: list[dict], padding, max_length: int | None, pad_to_multiple_of: int | None) -> int:
    """The length rows are padded to: max_length for padding="max_length", else the longest row's; rounded up to a
    multiple of pad_to_multiple_of where given."""
    length = max_length if padding == "max_length" else max((len(row["input_ids"]) for row in rows), default=0)
    return -(-length // pad_to_multiple_of) * pad_to_multiple_of if pad_to_multiple_of else length


def pad_rows(rows: list[dict], length: int, pad_id: int) -> None:
    """Each row's per-token lists padded on the right to `length` tokens (a longer row is left as it is)."""
    pad_values = {"input_ids": pad_id, "token_type_ids": 0, "attention_mask": 0, "offset_mapping": (0, 0),
                  "special_tokens_mask": 1, "word_ids": None, "sequence_ids": None}
    for row in rows:
        missing = length - len(row["input_ids"])
        for key in pad_values.keys() & row.keys():
            row[key] = row[key] + [pad_values[key]] * missing
