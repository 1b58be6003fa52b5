"""Long inputs for pipelines and the server, linear in their length: a long text tokenized in pieces
(`encode_long`), so that the tokenizer's working memory is a piece's, whatever the text's length.
"""

import re
from collections.abc import Sequence

import numpy as np

PIECE_CHARS = 1 << 16  # characters of a long text tokenized at once: the tokenizer's working memory is some
CALL_CHARS = 1 << 18  # 170 bytes a character (166 MB for 1 MB of text at once); and per call, all pieces together
LAST_SPACE = re.compile(r".*[ \t\n\r]", re.S)  # what every BERT tokenizer splits words at (not all of \s: its
NEXT_SPACE = re.compile(r"[ \t\n\r]")  # normaliser deletes control characters such as \x1c, which \s matches)


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
