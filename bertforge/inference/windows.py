"""Long inputs for pipelines and the server, linear in their length: a long text tokenized in pieces
(`encode_long`), so that the tokenizer's working memory is a piece's, whatever the text's length; and texts to
tag (the token-classification pipeline, so the server's /v1/ner) cut into overlapping windows as question
answering cuts its contexts (tasks/squad.py): each window is [CLS] a stretch of the text's tokens [SEP],
Google's doc spans (inference.batches.doc_spans), and each token's scores are read from the window where it has
the most context (inference.batches.max_context_window). The rows are made when their batch runs
(inference.batches.LazyRows): what a text keeps is its tokens, their offsets and best windows.

With truncation asked for, a text keeps its first window only, and says so (`Text.truncated`).
"""

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ..core.errors import BertforgeError
from .batches import LazyRows, doc_spans, max_context_window

PIECE_CHARS = 1 << 16  # characters of a long text tokenized at once: the tokenizer's working memory is some
CALL_CHARS = 1 << 18  # 170 bytes a character (166 MB for 1 MB of text at once); and per call, all pieces together
LAST_SPACE = re.compile(r".*[ \t\n\r]", re.S)  # what every BERT tokenizer splits words at (not all of \s: its
NEXT_SPACE = re.compile(r"[ \t\n\r]")  # normaliser deletes control characters such as \x1c, which \s matches)
HEAD_CHARS = 1 << 12  # characters of a text's first beginning tried by text_head


def piece_starts(text: str) -> list[int]:
    """Where the pieces of a text start: about PIECE_CHARS characters each, cut after a space (or a tab, a line
    end), so that every piece holds whole words."""
    starts = [0]
    while len(text) - starts[-1] > PIECE_CHARS:
        start = starts[-1]
        cut = LAST_SPACE.match(text, start + 1, start + PIECE_CHARS) or NEXT_SPACE.search(text, start + PIECE_CHARS)
        if cut is None:  # one word to the end
            break
        starts.append(cut.end())
    return starts


def text_head(backend, text: str, tokens: int, chars: int = HEAD_CHARS) -> str:
    """`text`, or a beginning of it that the `tokenizers` pipeline `backend` gives the same first `tokens` + 1
    tokens (without special tokens): all that a tokenizer keeping at most `tokens` of its tokens needs to read.
    So an input near the server's body limit, cut to --max-input-tokens or refused for its length, costs
    milliseconds of tokenizing, not seconds and ~170 bytes of the tokenizer's memory a character (700 MB for
    4 MiB of words, 2 GB for 4 MiB of full stops). A beginning's tokens are the whole text's but for its last
    word, which the cut may have shortened, and an added token ([MASK]) the cut may have split: those are not
    counted. Beginnings of `chars` characters, doubled until enough; a text whose first `tokens` tokens need
    more than half of it (a word of a million letters, say) is given whole."""
    margin = max((len(t.content) for t in backend.get_added_tokens_decoder().values()), default=0)
    while 2 * chars < len(text):
        encoding = backend.encode(text[:chars], add_special_tokens=False)
        last = encoding.word_ids[-1] if encoding.ids else None
        whole = sum(word != last and end <= chars - margin for word, (_, end) in zip(encoding.word_ids,
                                                                                    encoding.offsets))
        if whole > tokens:
            return text[:chars]
        chars *= 2
    return text


def encode_long(backend, texts: Sequence[str]) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each text's token ids [n] and character offsets [n, 2] (int64), without special tokens, from the
    `tokenizers` pipeline `backend`. A long text is tokenized in pieces (piece_starts), which give its tokens:
    BERT's tokenizer splits on whitespace before anything else, and normalises character by character. So the
    tokenizer's working memory is a piece's, whatever the text's length."""
    pieces = []  # (text, start, end)
    for t, text in enumerate(texts):
        starts = piece_starts(text)
        pieces += [(t, start, end) for start, end in zip(starts, [*starts[1:], len(text)])]
    ids, offsets = [[] for _ in texts], [[] for _ in texts]
    first = 0
    while first < len(pieces):
        last, chars = first + 1, pieces[first][2] - pieces[first][1]
        while last < len(pieces) and chars + pieces[last][2] - pieces[last][1] <= CALL_CHARS:
            chars += pieces[last][2] - pieces[last][1]
            last += 1
        call, first = pieces[first:last], last
        encodings = backend.encode_batch([texts[t][start:end] for t, start, end in call], add_special_tokens=False)
        for (t, start, _), encoding in zip(call, encodings):
            ids[t].append(np.array(encoding.ids, dtype=np.int64))
            offsets[t].append(np.array(encoding.offsets, dtype=np.int64).reshape(-1, 2) + start)
    return [(np.concatenate(i), np.concatenate(o)) for i, o in zip(ids, offsets)]


@dataclass
class Text:
    """One text's tokens (without [CLS] and [SEP]) and its windows."""
    ids: np.ndarray
    offsets: np.ndarray  # [tokens, 2] character span of each token in the text
    spans: list[tuple[int, int]]  # (first token, tokens) of each window
    best: np.ndarray  # [tokens] the window each token is read from
    first: int  # the row of its first window
    truncated: bool  # cut to its first window (truncate=True), tokens after it not tagged


class TextWindows:
    """The windows of texts: `rows` (lazy model inputs, in text order), and each text's `Text`."""

    def __init__(self, tokenizer, texts: Sequence[str], max_length: int, stride: int | None = None,
                 truncate: bool = False):
        room = max_length - 2  # [CLS] and [SEP]
        if room < 1:
            raise BertforgeError(f"max_length {max_length} leaves no room for a text's tokens beside [CLS] and [SEP]")
        stride = stride or max(1, room // 2)  # by default a token is in at most two windows
        self.cls, self.sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        self.texts, lengths, first = [], [], 0
        for ids, offsets in encode_long(tokenizer.backend_tokenizer, texts):
            spans = doc_spans(len(ids), room, stride) or [(0, 0)]  # no tokens: one row [CLS] [SEP]
            truncated, spans = truncate and len(spans) > 1, spans[:1] if truncate else spans
            best = max_context_window(spans[-1][0] + spans[-1][1], spans)
            self.texts.append(Text(ids, offsets, spans, best, first, truncated))
            lengths += [length + 2 for _, length in spans]
            first += len(spans)
        self.where = [(t, k) for t, text in enumerate(self.texts) for k in range(len(text.spans))]
        self.rows = LazyRows(lengths, self.row)

    def row(self, r: int) -> dict:
        text, k = self.where[r]
        start, length = self.texts[text].spans[k]
        ids = [self.cls, *self.texts[text].ids[start:start + length].tolist(), self.sep]
        return {"input_ids": ids, "token_type_ids": [0] * len(ids)}

    def tagged(self, t: int) -> int:
        """The tokens of text t that its windows hold (fewer than it has where it was truncated)."""
        start, length = self.texts[t].spans[-1]
        return start + length

    def scores(self, t: int, outputs: list) -> np.ndarray:
        """Text t's per-token outputs [tagged + 2, ...] as one row of [CLS] text [SEP] would give them: each
        token's from its best window (`outputs`: one array [window length, ...] per row, in row order); the
        [CLS] and [SEP] rows are zeros."""
        text = self.texts[t]
        n = self.tagged(t)
        rows = outputs[text.first:text.first + len(text.spans)]
        out = np.zeros((n + 2, *rows[0].shape[1:]), dtype=rows[0].dtype)
        for k, ((start, length), values) in enumerate(zip(text.spans, rows)):
            mine = np.flatnonzero(text.best[start:start + length] == k)
            out[1 + start + mine] = values[1 + mine]
        return out

    def tokens(self, t: int, convert) -> tuple[list[str], list, list[int]]:
        """Text t's tokens as one row [CLS] text [SEP] (`convert`: the tokenizer's convert_ids_to_tokens), their
        character offsets ((0, 0) for the special ones) and its special tokens mask."""
        n, text = self.tagged(t), self.texts[t]
        tokens = convert([self.cls, *text.ids[:n].tolist(), self.sep])
        return tokens, [(0, 0), *text.offsets[:n].tolist(), (0, 0)], [1] + [0] * n + [1]
