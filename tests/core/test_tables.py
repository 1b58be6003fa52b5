"""core/tables.py: corpora, queries and qrels read as a stream, each bad row named."""

import json
import sys

import pytest

from bertforge.core.errors import BertforgeError
from bertforge.core.tables import count_rows, passages, qrels
from tests.conftest import one_line_error


def test_text_lines_are_passages_numbered_from_0(tmp_path):
    corpus = tmp_path / "c.txt"
    corpus.write_text("first passage\n\n  second one  \r\nthird\n")
    assert list(passages(corpus)) == [("0", "first passage"), ("1", "second one"), ("2", "third")]
    assert list(passages(corpus, skip=2)) == [("2", "third")]
    assert count_rows(corpus) == 3


def test_tables_by_suffix_with_their_columns(tmp_path):
    rows = [{"doc": "d1", "body": "a, quoted \"text\"\nover two lines"}, {"doc": "d2", "body": "plain"}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "c.csv").write_text('doc,body\nd1,"a, quoted ""text""\nover two lines"\nd2,plain\n')
    (tmp_path / "c.tsv").write_text("doc\tbody\nd1\tone\nd2\tplain\n")
    expected = [("d1", rows[0]["body"]), ("d2", "plain")]
    assert list(passages(tmp_path / "c.jsonl", "body", "doc")) == expected
    assert list(passages(tmp_path / "c.csv", "body", "doc")) == expected
    assert list(passages(tmp_path / "c.tsv", "body", "doc")) == [("d1", "one"), ("d2", "plain")]
    assert list(passages(tmp_path / "c.csv", "body")) == [("0", rows[0]["body"]), ("1", "plain")]


def test_parquet_is_read_in_batches(tmp_path, monkeypatch):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from bertforge.core import tables

    monkeypatch.setattr(tables, "PARQUET_BATCH", 3)
    texts = [f"passage {i}" for i in range(10)]
    pq.write_table(pa.table({"id": list(range(10, 20)), "text": texts}), tmp_path / "c.parquet", row_group_size=3)
    assert list(passages(tmp_path / "c.parquet", id_column="id", skip=8)) == [("18", "passage 8"),
                                                                             ("19", "passage 9")]
    assert [key for key, _ in passages(tmp_path / "c.parquet")] == [str(i) for i in range(10)]
    texts[1] = None  # in the first row group, which a resumed run skips unread
    pq.write_table(pa.table({"text": texts}), tmp_path / "gap.parquet", row_group_size=3)
    assert list(passages(tmp_path / "gap.parquet", skip=4)) == [(str(i), f"passage {i}") for i in range(4, 10)]
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "gap.parquet"))
    assert "gap.parquet row 1: 'text' is empty" in one_line_error(e)
    assert count_rows(tmp_path / "c.parquet") == 10
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "c.parquet", text_column="body"))
    assert "no column 'body' (--text-column); its columns: id, text" in one_line_error(e, "c.parquet")


def test_bad_input_is_named_by_file_and_line(tmp_path):
    (tmp_path / "empty.txt").write_text("\n\n")
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "empty.txt"))
    assert "no passages (empty file)" in one_line_error(e, "empty.txt")
    (tmp_path / "c.csv").write_text("id,text\n1,fine\n2,\n")
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "c.csv"))
    assert "c.csv:3: 'text' is empty" in one_line_error(e)
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "c.csv", "body"))
    assert "no column 'body' (--text-column); its columns: id, text" in one_line_error(e, "c.csv")
    (tmp_path / "c.jsonl").write_text('{"text": "ok"}\n{"body": "no text"}\n')
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "c.jsonl"))
    assert "c.jsonl:2: no column 'text'" in one_line_error(e)
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "c.txt", "body"))
    one_line_error(e, "c.txt")
    (tmp_path / "t.txt").write_text("a\n")
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "t.txt", "body"))
    assert "has no columns" in one_line_error(e, "t.txt")


def test_qrels_beir_and_trec(tmp_path):
    (tmp_path / "beir.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\t2\nq2\td3\t0\n")
    (tmp_path / "trec.txt").write_text("q1 0 d1 1\nq1 0 d2 2\n")
    assert qrels(tmp_path / "beir.tsv") == {"q1": {"d1": 1.0, "d2": 2.0}, "q2": {"d3": 0.0}}
    assert qrels(tmp_path / "trec.txt") == {"q1": {"d1": 1.0, "d2": 2.0}}
    (tmp_path / "bad.tsv").write_text("q1\td1\thigh\n")
    with pytest.raises(BertforgeError) as e:
        qrels(tmp_path / "bad.tsv")
    assert "bad.tsv:1: relevance 'high' is not a number" in one_line_error(e)


def test_parquet_without_pyarrow_is_one_line(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow.parquet", None)  # as if pyarrow were not installed
    (tmp_path / "c.parquet").write_bytes(b"PAR1")
    with pytest.raises(BertforgeError) as e:
        list(passages(tmp_path / "c.parquet"))
    assert "needs pyarrow (pip install pyarrow)" in one_line_error(e, "c.parquet")


def test_tsv_quoting_is_read_from_the_first_lines(tmp_path):
    """GLUE's TSV: quotes are literal text; a spreadsheet's: fields quoted, tabs inside them (core.io.tsv_quoting)."""
    (tmp_path / "glue.tsv").write_text('id\ttext\n1\t"Hello," she said\n2\tplain\n')
    (tmp_path / "pandas.tsv").write_text('id\ttext\n1\t"a tab\there"\n2\tplain\n')
    assert list(passages(tmp_path / "glue.tsv", id_column="id")) == [("1", '"Hello," she said'), ("2", "plain")]
    assert list(passages(tmp_path / "pandas.tsv", id_column="id")) == [("1", "a tab\there"), ("2", "plain")]
