import json
import os

import pytest

from bertforge.core.decoding import decoded_blocks
from bertforge.core.errors import BertforgeError
from bertforge.core.io import (
    MAX_JSON_DEPTH, MODEL_TEXT_LIMIT, has_model_file, model_file, outside_folder, read_json, read_json_lines,
    read_model_json, read_model_text, read_records, read_text, text_files
)
from tests.conftest import require_shared


def test_text_files(tmp_path):
    (tmp_path / "a").mkdir()
    for name in ["a/x.txt", "a/y.raw", "a/README", "a/books.json", "b.dat", "a/.hidden.txt"]:
        (tmp_path / name).write_text("Text.")
    files, skipped = text_files([tmp_path / "a", tmp_path / "b.dat"])
    assert [f.name for f in files] == ["x.txt", "y.raw", "b.dat"] and skipped == 2
    with pytest.raises(BertforgeError, match="no such file or folder"):
        text_files([tmp_path / "missing"])


def test_vocabulary_and_data_read_the_same_files(tmp_path, monkeypatch):
    """`tokenizer train` and `data create` pick the same files from one folder (one rule for both)."""
    from bertforge.data import corpus
    from bertforge.text import wordpiece

    for name in ["x.txt", "README", "notes.json", "y.text"]:
        (tmp_path / name).write_text("Some text here. More text.\n")
    read = []
    real = text_files
    monkeypatch.setattr(corpus, "text_files", lambda inputs: read.append(real(inputs)[0]) or real(inputs))
    monkeypatch.setattr(wordpiece, "text_files", lambda inputs: read.append(real(inputs)[0]) or real(inputs))
    wordpiece.train_vocab([tmp_path], vocab_size=60, min_frequency=1)
    vocab = wordpiece.train_vocab([tmp_path], vocab_size=60, min_frequency=1)
    corpus.read_corpus([tmp_path], vocab, tmp_path / "tokens.bin")
    assert read[0] == read[-1] and [p.name for p in read[0]] == ["x.txt", "y.text"]


def test_json_errors_name_file_and_line(tmp_path):
    path = tmp_path / "a.json"
    path.write_text('{"a": 1,\n "b": }\n')
    with pytest.raises(BertforgeError, match=r"a\.json:2: not valid JSON"):
        read_json(path)
    path.write_text("[1, 2]")
    with pytest.raises(BertforgeError, match="expected a JSON object"):
        read_json(path)
    lines = tmp_path / "a.jsonl"
    lines.write_text(json.dumps({"x": 1}) + "\n\n" + "{oops\n")
    with pytest.raises(BertforgeError, match=r"a\.jsonl:3: not valid JSON"):
        read_json_lines(lines)
    lines.write_text(json.dumps({"x": 1}) + "\n" + json.dumps({"x": 2}) + "\n")
    assert read_json_lines(lines) == [{"x": 1}, {"x": 2}]


def test_read_text_errors(tmp_path):
    with pytest.raises(BertforgeError, match="file not found"):
        read_text(tmp_path / "none.txt")
    with pytest.raises(BertforgeError, match="is a folder"):
        read_text(tmp_path)
    (tmp_path / "latin.txt").write_bytes("caf\xe9".encode("latin-1"))
    with pytest.raises(BertforgeError, match=r"latin\.txt: not valid utf-8 at byte 3"):
        read_text(tmp_path / "latin.txt")
    assert read_text(tmp_path / "latin.txt", "latin-1") == "café"


def test_cp1252_fallback_reads_windows_quotes(tmp_path):
    path = tmp_path / "speech.txt"
    utf8, windows = "\u201cWe the people\u201d \u2014 caf\u00e9\n", "It\u2019s \u20ac5.\n"
    path.write_bytes(utf8.encode("utf-8") + windows.encode("cp1252"))
    assert "".join(decoded_blocks(path, "utf-8,cp1252")) == utf8 + windows
    latin = "".join(decoded_blocks(path, "utf-8,latin-1"))
    assert "\u2019" not in latin.splitlines()[1]  # latin-1 reads 0x92 as a control character, not a quote


def test_decoded_blocks_errors_name_the_file(tmp_path):
    for path, problem in ((tmp_path / "none.txt", "file not found"), (tmp_path, "is a folder")):
        with pytest.raises(BertforgeError, match=f"{path}: {problem}"):
            list(decoded_blocks(path))
    with pytest.raises(BertforgeError, match="--encoding utf-8,nope: unknown encoding 'nope'"):
        list(decoded_blocks(tmp_path / "none.txt", "utf-8,nope"))



@pytest.mark.parametrize("line, encoding, reading, rank", [
    ("years of sabbatical\u2014and then there came", "cp950", "sabbatical\u2014and", 0),  # Big5 punctuation
    ("completing what man\u2019s genius has begun", "cp950", "man\u2019s genius", 0),
    ("It\u2019s \u20ac5 and \u00bd\u00a2, said the people.", "cp1252", "It\u2019s \u20ac5 and \u00bd\u00a2", 0),
    ("\u4e2d\u6587\u7684\u53e5\u5b50\u3002", "gb18030", "\u4e2d\u6587\u7684\u53e5\u5b50", 1),  # after cp950's
])
def test_a_line_that_is_not_utf8_is_shown_as_the_likely_encodings_read_it(tmp_path, line, encoding, reading, rank):
    path = tmp_path / "text.txt"
    path.write_bytes(b"A first line in ASCII.\n" + line.encode(encoding) + b"\n")
    with pytest.raises(BertforgeError) as e:
        list(decoded_blocks(path))
    message = str(e.value)
    assert message.startswith(f"{path}:2: byte ") and "is not valid utf-8; pass --encoding" in message
    shown = message.split("): ", 1)[1].split("; ")
    assert shown[rank].startswith(f"{encoding} '") and reading in shown[rank]
    assert "cp1252" not in shown[0] or encoding == "cp1252"
    assert "".join(decoded_blocks(path, f"utf-8,{encoding}")).splitlines()[1] == line


def test_the_shared_inaugural_address_in_big5_is_named_so():
    path = require_shared("data", "corpus", "inaugural", "2005-Bush.txt")
    with pytest.raises(BertforgeError, match="e.g. utf-8,cp950\\): cp950 ' years of sabbatical\u2014and"):
        list(decoded_blocks(path))


def test_tsv_texts_may_start_with_a_literal_quote_as_glue_writes_them(tmp_path):
    """GLUE's TSV files do not quote: a text that starts with a quote is read as it is, line by line."""
    path = tmp_path / "train.tsv"
    lines = ["index\tquestion\tsentence\tlabel", '0\tWho said it?\t"Hello," she said, and left.\tentailment',
             '1\tWhat is "it"?\t"It" is a word.\tnot_entailment', "2\tWhere?\tHere.\tentailment"]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    records = [record for _, record in read_records(path)]
    assert [r["sentence"] for r in records] == ['"Hello," she said, and left.', '"It" is a word.', "Here."]
    assert [location for location, _ in read_records(path)] == [f"{path}:{n}" for n in (2, 3, 4)]


def test_tsv_written_by_a_spreadsheet_or_pandas_is_unquoted(tmp_path):
    """Quoted fields (a tab or a line break inside, doubled quotes) are read as CSV reads them."""
    path = tmp_path / "mine.tsv"
    path.write_text('text\tlabel\n"a tab\there"\tpos\n"she said ""hi""\nand left"\tneg\nplain\tpos\n', encoding="utf-8")
    assert [r["text"] for _, r in read_records(path)] == ["a tab\there", 'she said "hi"\nand left', "plain"]


# ---------------------------------------------------------------------------------------------------------
# The rule every file of a model folder is read by (model_file); end to end in tests/test_bad_input.py


def model_folder(tmp_path):
    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "config.json").write_text('{"hidden_size": 8}')
    return folder


def test_a_model_file_inside_its_folder_is_read(tmp_path):
    folder = model_folder(tmp_path)
    (folder / "sub").mkdir()
    (folder / "sub" / "link.json").symlink_to(folder / "config.json")  # a link that stays inside
    assert read_model_json(folder / "config.json") == read_model_json(folder / "sub" / "link.json", folder) \
        == {"hidden_size": 8}
    assert has_model_file(folder / "config.json") and not has_model_file(folder / "absent.json")


@pytest.mark.parametrize("make, words", [
    (lambda f: os.mkfifo(f), "a FIFO, not a regular file"),
    (lambda f: f.symlink_to("/dev/zero"), "resolves to /dev/zero, outside the model folder"),
    (lambda f: f.mkdir(), "a folder, not a regular file"),
    (lambda f: f.symlink_to(f.parent.parent / "elsewhere.json"), "outside the model folder"),
    (lambda f: f.symlink_to(f), "cannot be read"),  # a loop of links
    (lambda f: f.symlink_to(f.parent / "gone.json"), "which does not exist"),
])
def test_what_is_no_regular_file_of_the_folder_is_refused_by_name(tmp_path, make, words):
    """Refused before it is opened: opening a FIFO would wait for a writer, /dev/zero would be read until memory
    runs out. An optional file that breaks the rule is an error too, not a file ignored."""
    folder = model_folder(tmp_path)
    (tmp_path / "elsewhere.json").write_text("{}")
    make(folder / "tokenizer.json")
    for read in (read_model_json, read_model_text, has_model_file):
        with pytest.raises(BertforgeError) as excinfo:
            read(folder / "tokenizer.json", folder)
        message = str(excinfo.value)
        assert "\n" not in message and message.startswith(str(folder / "tokenizer.json")) and words in message


def test_a_name_leading_out_of_the_folder_is_refused_whether_or_not_it_exists(tmp_path):
    folder = model_folder(tmp_path)
    (tmp_path / "other.json").write_text("{}")
    for name in ("../other.json", "../absent.json", str(tmp_path / "other.json")):
        assert outside_folder(folder / name, folder) == "names a file"
        with pytest.raises(BertforgeError, match="outside the model folder"):
            read_model_json(folder / name, folder)


def test_a_hugging_face_cache_snapshot_may_link_into_its_repository(tmp_path):
    """The cache keeps each file once, in blobs/, and links it from every snapshot that holds it."""
    repo = tmp_path / "models--org--name"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "0123abcd").write_text('{"hidden_size": 8}')
    snapshot = repo / "snapshots" / "c0ffee"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").symlink_to("../../blobs/0123abcd")
    (snapshot / "vocab.txt").symlink_to(tmp_path / "outside.txt")
    (tmp_path / "outside.txt").write_text("[PAD]\n")
    assert read_model_json(snapshot / "config.json") == {"hidden_size": 8}
    with pytest.raises(BertforgeError, match="outside the model folder"):
        read_model_text(snapshot / "vocab.txt")


def test_a_text_file_over_the_limit_is_refused_unread(tmp_path):
    folder = model_folder(tmp_path)
    with open(folder / "tokenizer.json", "wb") as f:
        f.truncate(MODEL_TEXT_LIMIT + 1)  # sparse: no disk used, and not read
    with pytest.raises(BertforgeError, match=r"tokenizer.json: 128 MiB, more than the 128 MiB"):
        read_model_json(folder / "tokenizer.json")
    assert model_file(folder / "tokenizer.json", limit=None) == (folder / "tokenizer.json").resolve()  # weights


@pytest.mark.parametrize("depth, refused", [(MAX_JSON_DEPTH, False), (MAX_JSON_DEPTH + 1, True), (100_000, True)])
def test_json_nested_too_deep_is_one_line(tmp_path, depth, refused):
    path = tmp_path / "deep.json"
    path.write_text("[" * depth + "]" * depth)
    if not refused:
        assert read_json(path, expect=list)
        return
    with pytest.raises(BertforgeError) as excinfo:
        read_json(path, expect=list)
    assert str(excinfo.value) == f"{path}:1: JSON nested more than {MAX_JSON_DEPTH} levels deep, which no model or " \
                                 "data file needs"
