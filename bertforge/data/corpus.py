"""Reading a text corpus into documents of tokenized sentences, stored as flat token arrays.

Two input formats, chosen per file (``auto``) or forced; every file starts a new document:

- ``lines``: Google's format, one sentence per line, blank lines between documents.
- ``raw``: running text, paragraphs wrapped over lines or one per line, blank lines between paragraphs.
  A file is one document; paragraphs are joined and split into sentences by :func:`split_sentences`.
  WikiText-style headings (``= Title =``, ``= = Section = =``) are dropped, and a top-level one starts a
  new document (WikiText files hold many articles).

In both, a Project Gutenberg licence header (up to ``*** START OF THE PROJECT GUTENBERG EBOOK ...``) and
footer (from ``End of the Project Gutenberg EBook ...`` or ``*** END OF ...``) are dropped. Files are
decoded strictly (``utf-8`` by default, a leading BOM ignored); a byte that does not decode is a
:class:`~bertforge.core.errors.BertforgeError` naming the file, line and byte offset.

The result is a :class:`Corpus`: every sentence's token ids concatenated into one flat array (a memory map
on disk for real corpora) plus sentence and document offsets, so Google's algorithm can pick a random
sentence of any document without holding Python lists of lists. As in Google's code, a sentence that
tokenizes to nothing is dropped, and so is a document left without sentences.
"""

import collections
import itertools
import re
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers import AddedToken, Tokenizer
from tqdm import tqdm

from ..core.errors import BertforgeError
from ..core.decoding import decoded_blocks
from ..core.io import text_files

ENCODE_BATCH_CHARS = 1 << 20  # text per encode_batch call: enough to keep the tokenizer's threads busy
GROUP_SENTENCES = 64  # sentences per tokenizer input (SentenceEncoder)
SEPARATOR = "\x00"
GUTENBERG_HEADER_LINES = 400  # the START marker is looked for this far
FORMAT_SAMPLE_LINES = 200  # detect_format looks at the lines of at least FORMAT_MIN_CHARS characters among these:
FORMAT_MIN_CHARS = 40  # (shorter ones are headings, contents, verse: no clue)
LINES_FINAL_SHARE = 0.6  # in Google's format most lines end a sentence...
RAW_LINE_SHARE = 0.2  # ...and few look wrapped or hold several sentences

GUTENBERG_START = re.compile(r"^[^\S\n]*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG.*$", re.I | re.M)
GUTENBERG_END = re.compile(r"^[^\S\n]*(\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg)",
                           re.I | re.M)
WIKI_HEADING = re.compile(r"((?:= )+)[^\n]*?(?: =)+")
PARAGRAPH_BREAK = re.compile(r"\n[^\S\n]*\n")

ABBREVIATIONS = ["mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "rev", "hon", "gen", "col", "capt", "lt", "sgt",
                 "gov", "sen", "rep", "mt", "messrs", "mme", "mlle", "vs", "cf", "viz"]


def _sentence_end() -> re.Pattern:
    """``.``/``!``/``?`` (repeated, then closing quotes or brackets), whitespace, then an opening quote or
    bracket, an ASCII capital or any non-ASCII letter (checked in split_sentences: `re` has no Unicode
    upper-case class). A period does not count after an abbreviation, an initial or a dotted word."""
    by_length = {}
    for word in ABBREVIATIONS:
        by_length.setdefault(len(word), []).append(word)
    # Look-behinds must have a fixed width: one per abbreviation length, each including the period.
    not_after = "".join(rf"(?<!\b(?i:{'|'.join(words)})\.)" for words in by_length.values())
    not_after += r"(?<!\b[A-Z]\.)(?<!\.\w\.)"  # "H. G. Wells", "e.g.", "U.S."
    latin = rf"(?:[!?]|\.{not_after})[.!?]*[\"'”’)\]]*\s+(?=[\"'“‘(\[A-Z]|[^\x00-\x7f])"
    return re.compile(f"{latin}|{CJK_END}")


# Chinese and Japanese: a full stop (。 or the full-width ．), ！ or ？ (and the ASCII ! ?, as they are
# written there) ends a sentence with or without a space after it, closing quotes or brackets included.
CJK_STOPS = "。．！？"
CJK_END = rf"[{CJK_STOPS}][{CJK_STOPS}!?]*[」』）】〕》〉”’\"')]*\s*(?=\S)"
SENTENCE_END = _sentence_end()
OPENERS = "\"'“‘(["
SENTENCE_FINAL = ".!?\"'”’)]" + CJK_STOPS + "」』）"


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences with a simple rule.

    A boundary is ``.``, ``!`` or ``?`` (possibly repeated, possibly followed by closing quotes or brackets),
    then whitespace, then a capital letter or an opening quote/bracket, unless the word before the period
    is a common abbreviation (Mr. Dr. St. ...), a single capital (an initial: "H. G. Wells") or contains a
    period itself (e.g. i.e. U.S.). In Chinese and Japanese text, 。．！？ (then closing quotes or brackets
    such as 」』）) end a sentence whatever follows: those scripts put no space between sentences.
    """
    sentences, start = [], 0
    for m in SENTENCE_END.finditer(text):
        end = m.end()
        latin = m.group()[0] not in CJK_STOPS
        if latin and text[end] >= "\x80" and not text[end].isupper() and text[end] not in OPENERS:
            continue
        sentences.append(text[start:end].rstrip())
        start = end
    if start < len(text):
        sentences.append(text[start:].rstrip())
    return sentences


def detect_format(lines: list[str]) -> str:
    """``lines`` or ``raw``, from a sample of a file's first lines.

    ``lines`` (Google's format) needs most lines of some length to end a sentence, few of them to hold
    several sentences or to wrap into the next line, and blank lines only between blocks of several lines
    (documents). Anything else (wrapped prose, a paragraph per line, verse, front matter only) is raw text.
    """
    texts = [line.strip() for line in lines]
    nonblank = sum(map(bool, texts))
    blocks = sum(1 for prev, cur in zip([""] + texts, texts) if cur and not prev)
    pairs = [(cur, nxt) for cur, nxt in zip(texts, texts[1:] + [""]) if len(cur) >= FORMAT_MIN_CHARS]
    ends = sum(cur[-1] in SENTENCE_FINAL for cur, _ in pairs)
    raw_like = sum(SENTENCE_END.search(cur) is not None or (nxt[:1].islower() and cur[-1] not in SENTENCE_FINAL)
                   for cur, nxt in pairs)
    one_per_line = ends >= LINES_FINAL_SHARE * len(pairs) and raw_like < RAW_LINE_SHARE * len(pairs)
    return "lines" if pairs and one_per_line and nonblank >= 2 * blocks else "raw"


def strip_gutenberg(blocks):
    """Drop a Project Gutenberg header and footer, when the file has a START marker near its top."""
    first = next(blocks, "")
    top = len("\n".join(first.split("\n", GUTENBERG_HEADER_LINES)[:GUTENBERG_HEADER_LINES]))
    start = GUTENBERG_START.search(first, 0, top)
    if start is None:
        yield first
        yield from blocks
        return
    for block in itertools.chain([first[start.end():]], blocks):
        end = GUTENBERG_END.search(block)
        if end is not None:
            yield block[:end.start()]
            return
        yield block


def file_sentences(path: Path, fmt: str = "auto", encoding: str = "utf-8", progress=None):
    """``(format, sentences)``: the file's format and an iterator over its sentences, None between documents."""
    blocks = strip_gutenberg(decoded_blocks(path, encoding, progress))
    if fmt == "auto":
        first = next(blocks, "")
        fmt = detect_format(first.split("\n", FORMAT_SAMPLE_LINES)[:FORMAT_SAMPLE_LINES])
        blocks = itertools.chain([first], blocks)
    return fmt, (_line_sentences(blocks) if fmt == "lines" else _raw_sentences(blocks))


def _line_sentences(blocks):
    for block in blocks:
        for line in block.removesuffix("\n").split("\n"):
            yield line.strip() or None


def _raw_sentences(blocks):
    carry = ""  # the last paragraph of a block may go on in the next one
    for block in itertools.chain(blocks, [None]):
        paragraphs = PARAGRAPH_BREAK.split(carry + (block or ""))
        carry = paragraphs.pop() if block is not None else ""
        for paragraph in paragraphs:
            paragraph = paragraph.strip()
            heading = WIKI_HEADING.fullmatch(paragraph)
            if heading:
                if heading.group(1) == "= ":
                    yield None
            elif paragraph:
                yield from split_sentences(paragraph.replace("\n", " "))


@dataclass
class Corpus:
    """Documents of tokenized sentences as flat arrays.

    tokens: [T] token ids of all sentences, concatenated (a read-only memory map for real corpora).
    sentence_offsets: [S + 1] int64, sentence s is ``tokens[sentence_offsets[s]:sentence_offsets[s + 1]]``.
    document_offsets: [D + 1] int64, document d is sentences ``document_offsets[d]:document_offsets[d + 1]``.
    """

    tokens: np.ndarray
    sentence_offsets: np.ndarray
    document_offsets: np.ndarray

    @property
    def num_documents(self) -> int:
        return len(self.document_offsets) - 1

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_offsets) - 1

    @classmethod
    def from_documents(cls, documents, dtype=np.uint32) -> "Corpus":
        """From nested lists ``documents[d][s] = [token ids]`` (small corpora, tests); empty ones are dropped."""
        sentences = [s for d in documents for s in d if len(s)]
        per_doc = [sum(1 for s in d if len(s)) for d in documents]
        return cls(
            tokens=np.array([t for s in sentences for t in s], dtype=dtype),
            sentence_offsets=np.concatenate([[0], np.cumsum([len(s) for s in sentences])]).astype(np.int64),
            document_offsets=np.concatenate([[0], np.cumsum([n for n in per_doc if n])]).astype(np.int64),
        )


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


class SentenceEncoder:
    """Tokenizes many sentences at once with a tokenizer's ``tokenizers`` backend, each exactly as on its own.

    Sentences are joined ``GROUP_SENTENCES`` at a time with NUL, registered as an extra token: the tokenizer
    then sees few long inputs (each input has a fixed cost) and the sentence ends come back as that token.
    BERT's normalizer deletes NUL, so removing NULs from the text first changes nothing. As with Google's
    tokenizer, ``[SEP]`` and the other special tokens typed in text are read as ordinary text; nothing is
    truncated.
    """

    def __init__(self, tokenizer):
        backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())  # a copy: settings change below
        backend.encode_special_tokens = True
        backend.no_truncation()
        backend.no_padding()
        backend.add_tokens([AddedToken(SEPARATOR, special=False, normalized=False)])
        self.separator_id = backend.token_to_id(SEPARATOR)
        self.encode_batch = getattr(backend, "encode_batch_fast", backend.encode_batch)  # _fast: no offsets
        self.dtype = token_dtype(tokenizer.vocab_size)

    def __call__(self, sentences: list[str]) -> tuple[np.ndarray, np.ndarray]:
        """``(ids, counts)``: the sentences' token ids back to back, and the number of tokens of each."""
        groups = [SEPARATOR.join(s.replace(SEPARATOR, "") for s in sentences[i:i + GROUP_SENTENCES]) + SEPARATOR
                  for i in range(0, len(sentences), GROUP_SENTENCES)]
        encodings = self.encode_batch(groups, add_special_tokens=False)
        ids = np.fromiter(itertools.chain.from_iterable(e.ids for e in encodings), np.int64)
        is_end = ids == self.separator_id
        return ids[~is_end].astype(self.dtype), np.diff(np.flatnonzero(is_end), prepend=-1) - 1


def read_corpus(inputs, tokenizer, token_file: Path, fmt: str = "auto", encoding: str = "utf-8",
                progress: bool = False) -> tuple[Corpus, dict]:
    """Read and tokenize the input files or folders; the tokens are written to ``token_file`` and mapped back.

    Returns the corpus and reading statistics (files, skipped and empty files, formats, documents,
    sentences, tokens).
    """
    files, skipped = text_files(inputs)
    if not files:
        raise BertforgeError(f"{' '.join(map(str, inputs))}: no text files found")
    encode = SentenceEncoder(tokenizer)
    stats = {"files": len(files), "skipped_files": skipped, "empty_files": 0, "formats": {"lines": 0, "raw": 0}}
    lengths, doc_ids = [], []  # per batch: sentence token counts and document numbers

    def write(encoded, docs, out):
        tokens, n = encoded.result()
        tokens.tofile(out)
        lengths.append(n[n > 0])  # Google drops sentences that tokenize to nothing
        doc_ids.append(np.array(docs)[n > 0])

    bar = tqdm(total=sum(f.stat().st_size for f in files), unit="B", unit_scale=True, desc="read+tokenize",
               disable=not progress)
    pending = collections.deque()
    with ThreadPoolExecutor(1) as pool, open(token_file, "wb") as out, bar:
        for texts, docs in _batches(files, fmt, encoding, stats, bar):
            # The tokenizer releases the GIL: the next batch is read while this one is encoded.
            pending.append((pool.submit(encode, texts), docs))
            if len(pending) == 2:
                write(*pending.popleft(), out)
        while pending:
            write(*pending.popleft(), out)

    lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    if not len(lengths):
        raise BertforgeError(f"{' '.join(map(str, inputs))}: no text found (all files empty)")
    doc_ids = np.concatenate(doc_ids)
    new_doc = np.flatnonzero(np.diff(doc_ids, prepend=-1))
    corpus = Corpus(
        tokens=np.memmap(token_file, dtype=encode.dtype, mode="r"),
        sentence_offsets=np.concatenate([[0], np.cumsum(lengths)]),
        document_offsets=np.append(new_doc, len(doc_ids)).astype(np.int64),
    )
    stats.update(documents=corpus.num_documents, sentences=corpus.num_sentences, tokens=int(len(corpus.tokens)))
    return corpus, stats


def _batches(files, fmt: str, encoding: str, stats: dict, progress):
    """``(sentences, document numbers)`` in batches of about ``ENCODE_BATCH_CHARS`` characters."""
    texts, docs, chars, doc = [], [], 0, 0
    for path in files:
        fmt_used, sentences = file_sentences(path, fmt, encoding, progress)
        doc += 1
        found = False
        for sentence in sentences:
            if sentence is None:
                doc += 1
                continue
            texts.append(sentence)
            docs.append(doc)
            chars += len(sentence)
            found = True
            if chars >= ENCODE_BATCH_CHARS:
                yield texts, docs
                texts, docs, chars = [], [], 0
        stats["formats"][fmt_used] += found
        stats["empty_files"] += not found
    if texts:
        yield texts, docs
