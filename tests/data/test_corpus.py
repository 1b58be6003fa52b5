import itertools

import numpy as np
import pytest

from bertforge.data.corpus import SentenceEncoder, detect_format, file_sentences, split_sentences
from bertforge.core.errors import BertforgeError
from bertforge.text.tokenizer import BertTokenizer
from tests.conftest import require_shared

HEADER = """\ufeffThe Project Gutenberg EBook of A Book, by Someone

This eBook is for the use of anyone anywhere at no cost.

*** START OF THIS PROJECT GUTENBERG EBOOK A BOOK ***




Produced by volunteers.

It was a dark night. The rain fell.
"""
FOOTER = """

End of the Project Gutenberg EBook of A Book, by Someone

*** END OF THIS PROJECT GUTENBERG EBOOK A BOOK ***

***** This file should be named 1234.txt *****
Section 1. General Terms of Use.
"""


def sentences(path, **kw):
    return list(file_sentences(path, **kw)[1])


def test_split_sentences():
    text = ('Mr. Smith met Dr. Watson at St. Paul\'s. They talked, e.g. about H. G. Wells and the U.S. Navy. '
            '"Really?" she asked. "Yes!" He left... Then it rained! (It did.) the end. In 1999. Fin')
    assert split_sentences(text) == [
        "Mr. Smith met Dr. Watson at St. Paul's.",
        "They talked, e.g. about H. G. Wells and the U.S. Navy.",
        '"Really?" she asked.',
        '"Yes!"',
        "He left...",
        "Then it rained!",
        "(It did.) the end.",  # not followed by a capital
        "In 1999.",
        "Fin",
    ]


def test_detect_format():
    google = ["The cat sat on the mat in the kitchen all day long.", "It was happy there, and nobody disturbed it.",
              "", "A second document starts with this sentence here.", "It ends with another fairly long sentence."]
    wrapped = ["It was the best of times, it was the worst of times,", "it was the age of wisdom, it was the age of",
               "foolishness, it was the epoch of belief, it was the", "",
               "There were a king with a large jaw and a queen"]
    paragraphs = ["First paragraph of the text. It has two sentences in it.", "",
                  "Second paragraph, with more words. It also has two.", "", "Third. Yes, it is also quite long."]
    verse = ["Piping down the valleys wild, piping songs of glee,", "On a cloud I saw a child, and he laughing said:",
             "", "Pipe a song about a Lamb! So I piped with merry cheer;", "Piper, pipe that song again, so I piped;"]
    contents = ["CHAPTER I.", "CHAPTER II.", "A Short Title.", "", "PRELUDE."]
    assert detect_format(google) == "lines"
    assert [detect_format(x) for x in (wrapped, paragraphs, verse, contents)] == ["raw"] * 4


def test_gutenberg_header_and_footer_dropped(tmp_path):
    path = tmp_path / "book.txt"
    path.write_text(HEADER + "He waited for\nthe morning. It came.\n" + FOOTER, encoding="utf-8")
    got = sentences(path)
    assert got == ["Produced by volunteers.", "It was a dark night.", "The rain fell.", "He waited for the morning.",
                   "It came."]


def test_gutenberg_real_book():
    folder = require_shared("data", "corpus", "gutenberg_books")
    path = folder / "11-0.txt"
    got = sentences(path)
    text = " ".join(got)
    assert "Gutenberg" not in text and "gutenberg" not in text
    assert got[0].startswith("ALICE") and "Alice" in text


def test_lines_format_documents(tmp_path):
    path = tmp_path / "google.txt"
    path.write_text("One sentence.\nTwo sentences here.\n\n\nOnly one.\n\nThird doc.\nEnd.", encoding="utf-8")
    assert sentences(path, fmt="lines") == ["One sentence.", "Two sentences here.", None, None, "Only one.", None,
                                            "Third doc.", "End."]


def test_raw_format_and_wikitext_headings(tmp_path):
    path = tmp_path / "wiki.raw"
    path.write_text(" \n = Lobster = \n \n The lobster is blue . It is big . \n \n = = Life = = \n \n"
                    " It lives long . \n \n = Crab = \n \n Crabs walk sideways . \n", encoding="utf-8")
    assert sentences(path) == [None, "The lobster is blue .", "It is big .", "It lives long .", None,
                               "Crabs walk sideways ."]


def test_non_utf8_is_an_error_naming_file_line_and_offset(tmp_path):
    path = tmp_path / "latin.txt"
    path.write_bytes(b"Hello there.\n\nCaf\xe9 au lait. Good.\n")
    with pytest.raises(BertforgeError, match=r"latin\.txt:3: byte 17 \(0xe9\) is not valid utf-8; pass --encoding"):
        sentences(path)
    assert sentences(path, encoding="latin-1")[-2:] == ["Café au lait.", "Good."]
    assert sentences(path, encoding="utf-8,latin-1")[-2:] == ["Café au lait.", "Good."]
    with pytest.raises(BertforgeError, match="unknown encoding"):
        sentences(path, encoding="nope")


def test_real_latin1_file():
    path = require_shared("data", "corpus", "state_union", "1954-Eisenhower.txt")
    with pytest.raises(BertforgeError, match=r"1954-Eisenhower\.txt:\d+: byte \d+ \(0x[0-9a-f]{2}\) is not valid"):
        sentences(path)


def test_blocks_do_not_split_paragraphs(tmp_path, monkeypatch):
    monkeypatch.setattr("bertforge.core.decoding.BLOCK_BYTES", 16)
    path = tmp_path / "raw.txt"
    path.write_text("This paragraph is wrapped\nover three lines and\nends here. Next one.\n\nSecond paragraph.\n")
    assert sentences(path, fmt="raw") == ["This paragraph is wrapped over three lines and ends here.", "Next one.",
                                          "Second paragraph."]
    assert list(itertools.islice(sentences(path, fmt="lines"), 2)) == ["This paragraph is wrapped",
                                                                       "over three lines and"]


def test_sentence_encoder_matches_one_by_one():
    tokenizer = BertTokenizer.from_pretrained(require_shared("models", "all-MiniLM-L6-v2", "vocab.txt"))
    sentences = ["Hello, world!", "", "Typed [SEP], [MASK] and [CLS] stay text.", "NUL\x00inside and\x00\x00 out",
                 "\x01\x02", "Café déjà vu.", "supercalifragilisticexpialidocious " * 40] * 30
    ids, counts = SentenceEncoder(tokenizer)(sentences)
    backend = tokenizer.backend_tokenizer
    expected = [backend.encode(s.replace("[", "[ "), add_special_tokens=False).ids for s in sentences]
    assert counts.tolist() == [len(e) for e in expected] and ids.tolist() == [t for e in expected for t in e]
    assert ids.dtype == np.uint16 and counts[1] == counts[4] == 0 and tokenizer.sep_token_id not in ids


def test_chinese_and_japanese_sentences():
    from bertforge.data.corpus import split_sentences

    assert split_sentences("今天天气很好。我们去公园吧！你来吗？「好的。」他说。") == [
        "今天天气很好。", "我们去公园吧！", "你来吗？", "「好的。」", "他说。"]
    assert split_sentences("東京は首都です．人口は多い！ 本当に？（はい。）次。") == [
        "東京は首都です．", "人口は多い！", "本当に？", "（はい。）", "次。"]
    assert split_sentences("中文，没有句号") == ["中文，没有句号"]


def test_chinese_corpus_with_a_vocabulary_trained_on_it(tmp_path):
    import json

    from bertforge.cli import main
    from bertforge.text.tokenizer import BertTokenizer

    paragraph = "今天是第{}天。天气很好，我们去公园散步吧！你想一起来吗？「当然想。」他笑着说。"
    (tmp_path / "zh.txt").write_text("\n\n".join(paragraph.format(i) for i in range(10)) + "\n", encoding="utf-8")
    assert main(["tokenizer", "train", "--input", str(tmp_path / "zh.txt"), "--vocab-size", "200",
                 "--min-frequency", "1", "--out", str(tmp_path / "vocab")]) == 0
    tokenizer = BertTokenizer.from_pretrained(tmp_path / "vocab")
    tokens = tokenizer.tokenize("天气很好，你想一起来吗？")
    assert tokens == list("天气很好，你想一起来吗？")  # one token per character, full-width punctuation its own
    assert tokenizer.unk_token not in tokens
    assert main(["data", "create", "--input", str(tmp_path / "zh.txt"), "--vocab", str(tmp_path / "vocab"),
                 "--out", str(tmp_path / "data"), "--max-length", "32", "--dupe-factor", "1"]) == 0
    stats = json.loads((tmp_path / "data" / "stats.json").read_text())
    assert stats["corpus"]["sentences"] == 10 * 5
