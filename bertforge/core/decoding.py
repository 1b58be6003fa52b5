"""Text files decoded strictly, in blocks, with fallback encodings tried per line; a line that no encoding
decodes is an error that shows how the likely encodings read it."""

import codecs
import io
import re
import unicodedata
from pathlib import Path

from .errors import BertforgeError, where
from .io import unreadable

BLOCK_BYTES = 1 << 22  # text files are read in blocks of this size (ending at a line end)


def decoded_blocks(path: Path, encoding: str = "utf-8", progress=None):
    """The file's text in blocks of about ``BLOCK_BYTES`` that end at a line end, decoded strictly.

    ``encoding`` may list fallbacks, tried in order for each line of a block that does not decode:
    ``utf-8,cp1252`` reads a mix of UTF-8 and Windows-1252 files (a line in another encoding is almost never
    valid UTF-8); ``cp1252`` rather than ``latin-1`` for text written on Windows: its bytes 0x80-0x9f are
    curly quotes, dashes and the euro sign, which latin-1 reads as invisible control characters. cp1252 leaves
    five bytes undefined: ``utf-8,cp1252,latin-1`` decodes any byte. A line no encoding decodes is an error
    naming the file, line and byte offset.
    """
    encodings = encoding.split(",")
    for name in encodings:
        try:
            codecs.lookup(name)
        except LookupError:
            raise BertforgeError(f"--encoding {encoding}: unknown encoding {name!r}") from None
    offset = lines = 0
    try:
        f = open(path, "rb")
    except OSError as e:
        raise unreadable(path, e) from None
    with f:
        while raw := f.read(BLOCK_BYTES):
            raw += f.readline()
            try:
                text = raw.decode(encodings[0])
            except UnicodeDecodeError:
                text = _decode_by_line(raw, encodings, path, offset, lines)
            yield text[1:] if offset == 0 and text.startswith("\ufeff") else text
            offset += len(raw)
            lines += raw.count(b"\n")
            if progress is not None:
                progress.update(len(raw))


def _decode_by_line(raw: bytes, encodings, path, offset: int, lines: int) -> str:
    """Decode a block line by line, each line with the first encoding that decodes it."""
    text = []
    for number, line in enumerate(io.BytesIO(raw), lines + 1):
        for name in encodings:
            try:
                text.append(line.decode(name))
                break
            except UnicodeDecodeError as e:
                if name == encodings[0]:
                    bad = offset + e.start, line[e.start]
        else:
            first, found = encodings[0], readings(line, bad[0] - offset)[:2]
            shown = "; ".join(f"{name} {excerpt!r}" for name, excerpt in found) or "no likely encoding reads it"
            raise BertforgeError(f"{where(path, number)}: byte {bad[0]} (0x{bad[1]:02x}) is not valid {first}; pass "
                                 f"--encoding with the reading that is right, after {first} for a mix (e.g. "
                                 f"{first},{found[0][0] if found else 'cp1252'}): {shown}")
        offset += len(line)
    return "".join(text)


# Encodings a line that is not UTF-8 is likely in: Windows' Western, its Traditional and Simplified Chinese,
# Japanese and Korean code pages. latin-1 is left out: it reads any byte, and cp1252's 0x80-0x9f as controls.
LIKELY_ENCODINGS = ("cp1252", "cp950", "gb18030", "cp932", "cp949")
CJK = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff\uff61-\uff9f]")
LATIN1_MARK_BY_LETTER = re.compile(r"[\u00a1-\u00bf][A-Za-z@]|[A-Za-z][\u00a1-\u00bf](?=[A-Za-z])|[\u00a1-\u00ff]{3}")


def readings(line: bytes, at: int) -> list[tuple[str, str]]:
    """How the likely encodings read `line` around byte `at`, the most plausible first: (encoding, excerpt).
    Implausible: controls, unassigned and private-use characters; Chinese, Japanese or Korean characters in a
    line of mostly Latin letters; a Latin-1 sign run into a word ("¡X", "man¡¦s", "¡@": Big5 punctuation read
    as cp1252) or three Latin-1 letters or signs in a row ("ÖÐÎÄ": Chinese read as cp1252). Chinese read in the
    other Chinese encoding looks as plausible to these rules: both are shown."""
    found = []
    for name in LIKELY_ENCODINGS:
        try:
            text = line.decode(name)
        except UnicodeDecodeError:
            continue
        latin = sum(c.isascii() and c.isalpha() for c in text) > len(text) / 2
        odd = sum(unicodedata.category(c) in ("Cc", "Cn", "Co", "Cs") and c not in "\t\r\n" for c in text) * 3
        odd += len(CJK.findall(text)) * 2 * latin + len(LATIN1_MARK_BY_LETTER.findall(text))
        here = len(line[:at].decode(name, errors="replace"))
        found.append((odd, name, text[max(0, here - 20):here + 12].strip("\r\n")))
    return [(name, excerpt) for _, name, excerpt in sorted(found, key=lambda f: f[0])]
