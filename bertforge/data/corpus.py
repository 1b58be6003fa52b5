"""Reading a text corpus into documents of tokenized sentences, stored as flat token arrays.

Two input formats, chosen per file (``auto``) or forced:

- ``lines``: Google's format, one sentence per line, blank lines between documents.
- ``raw``: running text, paragraphs wrapped over lines or one per line, blank lines between paragraphs.
  A file is one document; paragraphs are joined and split into sentences by :func:`split_sentences`.
  WikiText-style headings (``= Title =``, ``= = Section = =``) are dropped, and a top-level one starts a
  new document (WikiText files hold many articles).

In both, a Project Gutenberg licence header (up to ``*** START OF THE PROJECT GUTENBERG EBOOK ...``) and
footer (from ``End of the Project Gutenberg EBook ...`` or ``*** END OF ...``) are dropped. Files are
decoded strictly (``utf-8`` by default, a leading BOM ignored); a byte that does not decode is a
:class:`~bertforge.errors.BertforgeError` naming the file, line and byte offset.

The result is a :class:`Corpus`: every sentence's token ids concatenated into one flat array (a memory map
on disk for real corpora) plus sentence and document offsets, so Google's algorithm can pick a random
sentence of any document without holding Python lists of lists. As in Google's code, a sentence that
tokenizes to nothing is dropped, and so is a document left without sentences.
"""

import codecs
import itertools
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bertforge.errors import BertforgeError, where

TEXT_SUFFIXES = {".txt", ".raw", ".text"}  # what is read when recursing into a folder
ENCODE_BATCH_CHARS = 1 << 21  # text per encode_batch call: enough to keep the tokenizer's threads busy
GUTENBERG_HEADER_LINES = 400  # the START marker is looked for this far
FORMAT_SAMPLE_LINES = 200
LINES_FINAL_SHARE = 0.6  # detect_format: in Google's format most lines end a sentence...
RAW_LINE_SHARE = 0.2  # ...and few look wrapped or hold several sentences

GUTENBERG_START = re.compile(r"^\s*\*\*\*\s*START OF (THE|THIS) PROJECT GUTENBERG", re.I)
GUTENBERG_END = re.compile(r"^\s*(\*\*\*\s*END OF (THE|THIS) PROJECT GUTENBERG|End of (the )?Project Gutenberg)", re.I)
WIKI_HEADING = re.compile(r"^((?:= )+).*?(?: =)+$")

# A sentence ends at . ! ? (and closing quotes/brackets) followed by whitespace, then an opening
# quote/bracket or a capital letter (checked in split_sentences: `re` has no Unicode upper-case class).
SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*\s+(?=[\"'“‘(\[]|[^\W\d_])")
OPENERS = "\"'“‘(["
SENTENCE_FINAL = ".!?\"'”’)]"
ABBREVIATIONS = {"mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "rev", "hon", "gen", "col", "capt", "lt",
                 "sgt", "gov", "sen", "rep", "mt", "messrs", "mme", "mlle", "vs", "cf", "viz"}


def split_sentences(text: str) -> list[str]:
    """Split running text into sentences with a simple rule.

    A boundary is ``.``, ``!`` or ``?`` (possibly repeated, possibly followed by closing quotes or brackets),
    then whitespace, then a capital letter or an opening quote/bracket, unless the word before the period
    is a common abbreviation (Mr. Dr. St. ...), a single capital (an initial: "H. G. Wells") or contains a
    period itself (e.g. i.e. U.S.).
    """
    sentences, start = [], 0
    for m in SENTENCE_END.finditer(text):
        nxt = text[m.end()]
        if nxt not in OPENERS and not nxt.isupper():
            continue
        if text[m.start()] == ".":
            before = text[max(start, m.start() - 24):m.start()].rsplit(None, 1)
            word = before[-1].lstrip(OPENERS) if before else ""
            if word.lower() in ABBREVIATIONS or "." in word or (len(word) == 1 and word.isupper()):
                continue
        sentences.append(text[start:m.end()].rstrip())
        start = m.end()
    if start < len(text):
        sentences.append(text[start:].rstrip())
    return sentences


def detect_format(lines: list[str]) -> str:
    """``lines`` or ``raw``, from a sample of a file's first lines.

    ``lines`` (Google's format) needs most lines to end a sentence, few lines holding several sentences or
    wrapping into the next, and blank lines between blocks of several lines (documents); anything else
    (wrapped prose, paragraphs per line, verse, tables of contents) is read as raw text.
    """
    texts = [line.strip() for line in lines]
    nonblank = sum(map(bool, texts))
    blocks = sum(1 for prev, cur in zip([""] + texts, texts) if cur and not prev)
    ends = sum(1 for t in texts if t and t[-1] in SENTENCE_FINAL)
    raw_like = sum(
        1 for cur, nxt in zip(texts, texts[1:] + [""])
        if cur and (len(split_sentences(cur)) > 1 or (nxt[:1].islower() and cur[-1] not in SENTENCE_FINAL))
    )
    one_per_line = ends >= LINES_FINAL_SHARE * nonblank and raw_like < RAW_LINE_SHARE * nonblank
    return "lines" if one_per_line and nonblank >= 2 * blocks else "raw"


def list_input_files(inputs) -> tuple[list[Path], int]:
    """Files to read, in a fixed order, and how many files inside folders were skipped (not text by suffix).

    Files named explicitly are always read; folders are searched recursively for ``*.txt``, ``*.raw`` and
    ``*.text`` files (so READMEs and JSON side files next to a corpus are left alone).
    """
    files, skipped = [], 0
    for item in map(Path, inputs):
        if item.is_dir():
            found = sorted(p for p in item.rglob("*") if p.is_file() and not p.name.startswith("."))
            text = [p for p in found if p.suffix.lower() in TEXT_SUFFIXES]
            skipped += len(found) - len(text)
            files += text
        elif item.is_file():
            files.append(item)
        else:
            raise BertforgeError(f"{item}: no such file or folder")
    return files, skipped


def decoded_lines(path: Path, encoding: str = "utf-8", progress=None):
    """The file's lines, decoded strictly; a bad byte is an error naming the file, line and byte offset.

    ``encoding`` may list fallbacks, tried in order for each line: ``utf-8,latin-1`` reads a mix of UTF-8
    and ISO-8859-1 files (a Latin-1 line is almost never valid UTF-8).
    """
    encodings = encoding.split(",")
    for name in encodings:
        try:
            codecs.lookup(name)
        except LookupError:
            raise BertforgeError(f"--encoding {encoding}: unknown encoding {name!r}") from None
    offset = 0
    with open(path, "rb") as f:
        for number, raw in enumerate(f, 1):
            try:
                line = raw.decode(encodings[0])
            except UnicodeDecodeError as e:
                line = _decode_fallback(raw, encodings[1:])
                if line is None:
                    raise BertforgeError(
                        f"{where(path, number)}: byte {offset + e.start} (0x{raw[e.start]:02x}) is not valid "
                        f"{encodings[0]}; pass --encoding (e.g. latin-1, or utf-8,latin-1 for a mix)") from None
            offset += len(raw)
            if progress is not None:
                progress.update(len(raw))
            yield line.lstrip("\ufeff") if number == 1 else line


def _decode_fallback(raw: bytes, encodings) -> str | None:
    for name in encodings:
        try:
            return raw.decode(name)
        except UnicodeDecodeError:
            pass
    return None


def strip_gutenberg(lines):
    """Drop a Project Gutenberg header and footer, when the file has a START marker near its top."""
    head = list(itertools.islice(lines, GUTENBERG_HEADER_LINES))
    start = next((i for i, line in enumerate(head) if GUTENBERG_START.match(line)), None)
    if start is None:
        yield from head
        yield from lines
        return
    for line in itertools.chain(head[start + 1:], lines):
        if GUTENBERG_END.match(line):
            return
        yield line


def file_sentences(path: Path, fmt: str = "auto", encoding: str = "utf-8", progress=None):
    """``(format, sentences)``: the file's format and an iterator over its sentences, None between documents."""
    lines = strip_gutenberg(decoded_lines(path, encoding, progress))
    if fmt == "auto":
        head = list(itertools.islice(lines, FORMAT_SAMPLE_LINES))
        fmt = detect_format(head)
        lines = itertools.chain(head, lines)
    return fmt, (_line_sentences(lines) if fmt == "lines" else _raw_sentences(lines))


def _line_sentences(lines):
    for line in lines:
        yield line.strip() or None


def _raw_sentences(lines):
    paragraph = []
    for line in itertools.chain(lines, [""]):
        text = line.strip()
        heading = WIKI_HEADING.match(text)
        if text and not heading:
            paragraph.append(text)
            continue
        if paragraph:
            yield from split_sentences(" ".join(paragraph))
            paragraph = []
        if heading and heading.group(1) == "= ":
            yield None


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


def corpus_encoder(tokenizer):
    """A copy of the tokenizer's backend that reads ``[SEP]`` etc. in text as ordinary text (as Google's
    tokenizer does) and never truncates or pads."""
    from tokenizers import Tokenizer

    backend = Tokenizer.from_str(tokenizer.backend_tokenizer.to_str())
    backend.encode_special_tokens = True
    backend.no_truncation()
    backend.no_padding()
    return backend


def token_dtype(vocab_size: int):
    return np.uint16 if vocab_size <= 1 << 16 else np.uint32


def read_corpus(inputs, tokenizer, token_file: Path, fmt: str = "auto", encoding: str = "utf-8",
                progress: bool = False) -> tuple[Corpus, dict]:
    """Read and tokenize the input files or folders; the tokens are written to ``token_file`` and mapped back.

    Returns the corpus and reading statistics (files, skipped and empty files, formats, documents,
    sentences, tokens).
    """
    files, skipped = list_input_files(inputs)
    if not files:
        raise BertforgeError(f"{' '.join(map(str, inputs))}: no text files found")
    encoder = corpus_encoder(tokenizer)
    encode = getattr(encoder, "encode_batch_fast", encoder.encode_batch)  # same ids, skips offsets
    dtype = token_dtype(tokenizer.vocab_size)
    stats = {"files": len(files), "skipped_files": skipped, "empty_files": 0, "formats": {"lines": 0, "raw": 0}}
    lengths, doc_ids = [], []  # per encode batch: sentence token counts and document numbers
    texts, text_docs, chars = [], [], 0

    def flush(out):
        encodings = encode(texts, add_special_tokens=False)
        ids = [e.ids for e in encodings]
        n = np.fromiter(map(len, ids), np.int64, count=len(ids))
        np.fromiter(itertools.chain.from_iterable(ids), dtype, count=int(n.sum())).tofile(out)
        keep = n > 0  # Google drops sentences that tokenize to nothing
        lengths.append(n[keep])
        doc_ids.append(np.array(text_docs, np.int64)[keep])
        texts.clear()
        text_docs.clear()

    doc = 0
    bar = tqdm(total=sum(f.stat().st_size for f in files), unit="B", unit_scale=True, desc="read+tokenize",
               disable=not progress)
    with open(token_file, "wb") as out, bar:
        for path in files:
            fmt_used, sentences = file_sentences(path, fmt, encoding, bar)
            doc += 1
            found = False
            for sentence in sentences:
                if sentence is None:
                    doc += 1
                    continue
                texts.append(sentence)
                text_docs.append(doc)
                chars += len(sentence)
                found = True
                if chars >= ENCODE_BATCH_CHARS:
                    flush(out)
                    chars = 0
            stats["formats"][fmt_used] += found
            stats["empty_files"] += not found
        if texts:
            flush(out)

    lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int64)
    doc_ids = np.concatenate(doc_ids) if doc_ids else np.zeros(0, np.int64)
    if not len(lengths):
        raise BertforgeError(f"{' '.join(map(str, inputs))}: no text found (all files empty)")
    new_doc = np.flatnonzero(np.diff(doc_ids, prepend=-1))
    corpus = Corpus(
        tokens=np.memmap(token_file, dtype=dtype, mode="r"),
        sentence_offsets=np.concatenate([[0], np.cumsum(lengths)]),
        document_offsets=np.append(new_doc, len(doc_ids)).astype(np.int64),
    )
    stats.update(documents=corpus.num_documents, sentences=corpus.num_sentences, tokens=int(len(corpus.tokens)))
    return corpus, stats
