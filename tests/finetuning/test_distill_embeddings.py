"""Sentence-embedding distillation (`distill embeddings`): the loss and the pooling against hand computations and
sentence_folder.pool, the texts read, whole runs from a tiny random teacher (a sentence-transformers folder written
here) to a student that sentence-transformers, the pipeline and the server read alike, and its one-line errors.

These prove the paths; how close a student comes to its teacher is measured by
benchmarks/bench_embedding_student.py."""

import json
import shutil

import numpy as np
import pytest
import torch

from bertforge.model.architectures.registry import load_config
from bertforge import BertConfig, BertModel, BertTokenizer
from bertforge.cli import main
from bertforge.core.errors import BertforgeError
from bertforge.finetuning.distill_embeddings import held_out_rows, read_texts
from bertforge.model.sentence_encoder import SentenceEncoder, embedding_mse, pooled
from bertforge.model.formats.sentence_folder import POOLINGS, pool, read_sentence_folder, write_sentence_folder
from tests.conftest import one_line_error, require_shared, write_jsonl
from tests.training.test_train import nan_weights

TEACHER = dict(hidden_size=192, num_hidden_layers=3, num_attention_heads=6, intermediate_size=768)


@pytest.fixture(scope="module")
def sentences():
    lines = require_shared("data", "glue", "SST-2", "dev.tsv").read_text(encoding="utf-8").splitlines()[1:]
    return [line.split("\t")[0].strip() for line in lines[:60]]


@pytest.fixture(scope="module")
def teacher(tmp_path_factory):
    """A random encoder 192 wide (3 layers, 6 heads of 32) as a sentence-transformers folder: cls pooling,
    normalized, max_seq_length 32."""
    folder = tmp_path_factory.mktemp("teacher")
    torch.manual_seed(0)
    tokenizer = BertTokenizer.from_pretrained(require_shared("models", "all-MiniLM-L6-v2"))
    BertModel(BertConfig(vocab_size=tokenizer.vocab_size, **TEACHER)).save_pretrained(folder, tokenizer)
    write_sentence_folder(folder, "cls", normalize=True, max_seq_length=32)
    return folder


@pytest.fixture(scope="module")
def texts(tmp_path_factory, sentences):
    """The sentences in a text file (a text a line) and a table (its sentence column)."""
    folder = tmp_path_factory.mktemp("texts")
    (folder / "lines.txt").write_text("\n".join(sentences[:40]) + "\n\n", encoding="utf-8")
    write_jsonl(folder / "table.jsonl", [{"sentence": s, "label": 1} for s in sentences[30:]])
    return [folder / "lines.txt", folder / "table.jsonl"]


def distill(teacher, texts, out, *flags, cache=None):
    return main(["distill", "embeddings", "--teacher", str(teacher), "--input", *map(str, texts), "--out", str(out),
                 "--epochs", "1", "--batch-size", "8", "--held-out", "0.2", "--lr", "1e-3", "--no-progress",
                 "--cache-dir", str(cache or out.parent / "cache"), *map(str, flags)])


def test_the_loss_is_the_mean_squared_difference_per_value():
    student = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    teacher = torch.tensor([[2.0, 0.0, 1.0], [1.0, 1.0, -2.0]])
    expected = [(1 + 4 + 0.25) / 3, (1 + 4 + 25) / 3]
    assert embedding_mse(student, teacher).tolist() == pytest.approx(expected)
    torch.manual_seed(0)
    encoder = BertModel(BertConfig(vocab_size=50, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                   intermediate_size=64)).eval()
    model = SentenceEncoder(encoder, "mean", normalize=True, dimension=3).eval()
    batch = dict(input_ids=torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]]),
                 attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]))
    out = model(**batch, teacher_embedding=teacher)
    assert out["embedding"].norm(dim=-1).tolist() == pytest.approx([1.0, 1.0])  # mapped to 3, then unit length
    embedding = out["embedding"].tolist()
    by_hand = np.mean([np.mean([(s - t) ** 2 for s, t in zip(row, goal)]) for row, goal in
                       zip(embedding, teacher.tolist())])
    assert out["loss"].item() == pytest.approx(by_hand, rel=1e-6)


def test_pooling_a_batch_is_pooling_each_text():
    """model.sentence_encoder.pooled on padded rows equals sentence_folder.pool on each row's real tokens."""
    generator = torch.Generator().manual_seed(0)
    lengths = [7, 3, 12, 1]
    states = torch.randn(len(lengths), max(lengths), 16, generator=generator)
    mask = torch.tensor([[1] * n + [0] * (max(lengths) - n) for n in lengths])
    for mode in POOLINGS:
        expected = np.stack([pool(states[i, :n].numpy(), mode) for i, n in enumerate(lengths)])
        np.testing.assert_allclose(pooled(states, mask, mode).numpy(), expected, rtol=1e-5, atol=1e-6, err_msg=mode)


def test_texts_of_lines_tables_and_squad_each_once(tmp_path, texts, sentences):
    found = read_texts(texts)
    assert found == list(dict.fromkeys(sentences))  # the table's first ten repeat the file's last ten
    squad = {"version": "1.1", "data": [{"title": "t", "paragraphs": [{"context": "Ghent lies on the Lys.", "qas": [
        {"id": "1", "question": "Where is Ghent?", "answers": [{"text": "on the Lys", "answer_start": 11}]}]}]}]}
    (tmp_path / "squad.json").write_text(json.dumps(squad))
    (tmp_path / "pairs.tsv").write_text("#1 String\t#2 String\nA cat.\tA dog.\n")
    assert read_texts([tmp_path / "squad.json"]) == ["Ghent lies on the Lys.", "Where is Ghent?"]
    assert read_texts([tmp_path / "pairs.tsv"], "#1 String", "#2 String") == ["A cat.", "A dog."]
    with pytest.raises(BertforgeError) as e:
        read_texts([tmp_path / "pairs.tsv"])
    one_line_error(e, "pairs.tsv", "--text-column")
    train, held = held_out_rows(100, 0.05, None, 0)
    assert len(held) == 5 and sorted([*train, *held]) == list(range(100))
    assert len(held_out_rows(3, 0.05, None, 0)[1]) == 1 and len(held_out_rows(100, 0.5, 7, 0)[1]) == 7


def assert_sentence_transformers_reads_it_as_the_pipeline(folder, texts):
    """SentenceTransformer(folder).encode against bertforge's pipeline of the folder."""
    sentence_transformers = pytest.importorskip("sentence_transformers")
    import bertforge

    theirs = sentence_transformers.SentenceTransformer(str(folder), device="cpu").encode(texts, convert_to_numpy=True)
    ours = np.array(bertforge.pipeline("sentence-embedding", model=folder)(texts), dtype=np.float32)
    assert ours.shape == theirs.shape
    np.testing.assert_allclose(ours, theirs, atol=1e-5)
    return ours


@pytest.mark.parametrize("student", [["--student", "tiny", "--prune"], ["--student", "tiny"]])
def test_a_student_learns_the_teachers_vectors(teacher, texts, sentences, tmp_path, capsys, student):
    """A run of a few steps: the held-out figures logged, the best kept; the student (128 wide against the
    teacher's 192) saved with its map as a Dense module, read alike by sentence-transformers and the pipeline."""
    out = tmp_path / "run"
    assert distill(teacher, texts, out, *student) == 0
    results = json.loads(capsys.readouterr().out)
    assert results["texts"] == 60 and results["held_out_texts"] == 12 and results["dimension"] == 192
    logged = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged if "cosine" in r] == [6]
    assert all(r["loss"] > 0 for r in logged) and 0 < results["mse"] and -1 <= results["cosine"] <= 1
    declared = read_sentence_folder(out / "best")
    assert (declared.pooling, declared.normalize, declared.max_seq_length) == ("cls", True, 32)
    assert [(d.in_features, d.out_features) for d in declared.dense] == [(128, 192)]
    assert load_config(str(out / "best")).hidden_size == 128
    vectors = assert_sentence_transformers_reads_it_as_the_pipeline(out / "best", sentences[:12])
    assert np.linalg.norm(vectors, axis=1) == pytest.approx(1.0, abs=1e-5)


def test_the_cut_student_starts_near_the_teacher(teacher, texts, tmp_path, capsys):
    """The cut keeps the parts the teacher uses and its map starts as the least-squares fit: before any step its
    held-out cosine is above the random student's."""
    figures = {}
    for name, flags in {"cut": ["--prune"], "random": []}.items():
        assert distill(teacher, texts, tmp_path / name, "--student", "tiny", "--lr", "1e-12", *flags) == 0
        figures[name] = json.loads(capsys.readouterr().out)["cosine"]
    assert figures["cut"] > figures["random"]


def test_the_teachers_vectors_are_cached_and_a_run_resumes_exactly(teacher, texts, tmp_path, capsys):
    cache = tmp_path / "cache"
    whole = tmp_path / "whole"
    flags = ["--student", "tiny", "--prune", "--save-every", "2", "--keep", "5", "--keep-checkpoints"]
    assert distill(teacher, texts, whole, *flags, cache=cache) == 0
    assert "written to" in capsys.readouterr().err
    assert len(list((cache / "embeddings").glob("*.npy"))) == 1
    resumed = tmp_path / "resumed"
    shutil.copytree(whole, resumed)
    for name in ("step-0000004", "step-0000006", "final", "best", "eval_results.json"):
        target = resumed / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    assert distill(teacher, texts, resumed, *flags, "--resume", cache=cache) == 0
    assert "read from" in capsys.readouterr().err
    saved = torch.load(whole / "step-0000002" / "training_state.pt", weights_only=True)["wall_s"]
    before = json.loads((resumed / "args.json").read_text())["resumed"][-1]["wall_s_before"]
    assert before == round(saved, 1) > 0  # the wall time of the part that wrote the checkpoint, recorded
    assert json.loads((resumed / "eval_results.json").read_text())["wall_time_s"] > before  # and counted
    for name in ("model.safetensors", "2_Dense/model.safetensors"):  # the map resumes too
        assert (resumed / "final" / name).read_bytes() == (whole / "final" / name).read_bytes()
    assert distill(teacher, texts[:1], resumed, *flags, "--resume", cache=cache) == 2  # other texts
    assert "--resume: --input" in capsys.readouterr().err


def test_the_served_student_answers_as_the_pipeline(teacher, texts, sentences, tmp_path, capsys):
    """`serve` of the saved student: TEI's /embed and OpenAI's /v1/embeddings give the pipeline's vectors."""
    httpx = pytest.importorskip("httpx")
    pytest.importorskip("fastapi")
    pytest.importorskip("uvicorn")
    import bertforge
    from tests.serving.test_serve import Served

    out = tmp_path / "run"
    assert distill(teacher, texts, out, "--student", "tiny", "--prune") == 0
    capsys.readouterr()
    expected = bertforge.pipeline("sentence-embedding", model=out / "best")(sentences[:4])
    server = Served(out / "best", "--max-input-tokens", 32).wait()
    try:
        tei = httpx.post(server.url + "/embed", json={"inputs": sentences[:4]}, timeout=60)
        openai = httpx.post(server.url + "/v1/embeddings", json={"input": sentences[:4]}, timeout=60)
    finally:
        server.stop()
    assert tei.status_code == 200 and openai.status_code == 200, (tei.text, openai.text)
    np.testing.assert_allclose(tei.json(), expected, atol=1e-6)
    np.testing.assert_allclose([d["embedding"] for d in openai.json()["data"]], expected, atol=1e-6)
    assert len(expected[0]) == 192


def test_bad_input_is_a_one_line_error(teacher, texts, tmp_path, capsys):
    (tmp_path / "empty.txt").write_text("\n  \n")
    inputs = ["--input", *map(str, texts)]
    cases = [
        (["--teacher", teacher, "--student", "tiny", "--input", tmp_path / "empty.txt"], "--input"),
        (["--teacher", teacher, "--student", "tiny", "--input", tmp_path / "missing.txt"], "missing.txt"),
        (["--teacher", tmp_path, "--student", "tiny", *inputs], "--teacher"),
        (["--teacher", teacher, "--student", "tiny"], "--input"),
        (["--teacher", teacher, *inputs], "--student"),
        (["--teacher", teacher, "--student", "tiny", "--data", tmp_path, *inputs], "--data"),
        (["--teacher", teacher, "--student", "small", "--prune", *inputs], "--prune"),
    ]
    for flags, culprit in cases:
        argv = ["distill", "embeddings", "--out", str(tmp_path / "run"), "--no-progress", "--cache-dir",
                str(tmp_path / "cache"), *map(str, flags)]
        assert main(argv) == 2, argv
        error = capsys.readouterr().err.strip()
        assert error.startswith("bertforge: error:") and "\n" not in error and culprit in error, (argv, error)
    assert main(["distill", "sst2", "--teacher", str(teacher), "--student", "tiny", "--out", str(tmp_path / "r"),
                 *inputs]) == 2
    assert "--input" in capsys.readouterr().err


def test_a_student_with_nan_weights_fails_where_the_run_would_end_without_best(teacher, texts, tmp_path, capsys):
    out = tmp_path / "run"
    assert distill(teacher, texts, out, "--student", str(nan_weights(teacher, tmp_path / "student"))) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("bertforge: error: step 6: the loss or its gradient "
                                                               "has not been finite for 6 steps")
    assert not any((out / name).exists() for name in ("best", "final", "eval_results.json"))
