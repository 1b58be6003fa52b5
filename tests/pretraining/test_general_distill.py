"""General distillation (`pretrain --objective distill`): a run end to end (a plain checkpoint that transformers
loads), one-term objectives, exact resume, and bad input (the losses: tests/model/test_representation_loss.py)."""

import json
import math
import shutil
from itertools import islice

import pytest
import torch

from bertforge import BertConfig, BertForPreTraining, BertTokenizer
from bertforge.cli import main
from bertforge.data.create import create_pretraining_data
from bertforge.pretraining.demo import module_documents
from bertforge.pretraining.pretrain import pretrain
from bertforge.training.representation_loss import PROJECTION_FILE
from bertforge.text.wordpiece import train_vocab


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("distill")
    corpus = root / "corpus"
    corpus.mkdir()
    for name, text in islice(module_documents(), 30):
        (corpus / f"{name}.txt").write_text(text, encoding="utf-8")
    train_vocab([corpus], vocab_size=1500, out_dir=root / "vocab")
    create_pretraining_data([corpus], root / "vocab", root / "data", max_seq_length=32, dupe_factor=1, mask=False,
                            nsp=False, eval_docs=3, seed=1)
    return root / "data"


@pytest.fixture(scope="module")
def teacher(data_dir, tmp_path_factory):
    """A random encoder of 2 layers of 96 (6 heads) with the data's vocabulary: wider than the tiny student."""
    folder = tmp_path_factory.mktemp("teacher")
    tokenizer = BertTokenizer.from_pretrained(data_dir)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=96, num_hidden_layers=2, num_attention_heads=6,
                        intermediate_size=192)
    BertForPreTraining(config).save_pretrained(folder, tokenizer=tokenizer)
    return folder


def cli(data_dir, teacher, out, *extra, steps=6):
    return ["pretrain", "--data", str(data_dir), "--objective", "distill", "--teacher", str(teacher), "--config",
            "tiny", "--out", str(out), "--steps", str(steps), "--batch-size", "8", "--eval-every", "3",
            "--save-every", "3", "--no-progress", *extra]


def test_distilled_student_is_a_plain_checkpoint(data_dir, teacher, tmp_path):
    import transformers

    run = tmp_path / "run"
    assert main(cli(data_dir, teacher, run)) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert {"hidden_loss", "relation_loss", "eval_hidden_loss", "eval_relation_loss"} <= set(rows[-1])
    assert all(math.isfinite(r["loss"]) for r in rows)
    args = json.loads((run / "args.json").read_text())["extra"]
    assert args["objective"] == "distill" and args["teacher"] == str(teacher) and args["mask_prob"] is None
    assert args["student_embeddings"] == "random"  # the tiny student (128) is wider than this teacher (96)
    final = run / "final"
    assert (final / PROJECTION_FILE).is_file()  # the 128 -> 96 map, kept for --resume only
    config = json.loads((final / "config.json").read_text())
    assert config["architectures"] == ["BertForPreTraining"] and config["hidden_size"] == 128
    reference = transformers.BertModel.from_pretrained(final).eval()
    ours = BertForPreTraining.from_pretrained(final)
    ids = torch.tensor([[2, 10, 11, 12, 3]])
    with torch.no_grad():
        assert torch.allclose(reference(ids).last_hidden_state, ours.bert(ids).last_hidden_state, atol=1e-5)
    # it fine-tunes as any other checkpoint
    assert main(["finetune", "text-classification", "--model", str(final), "--train", str(sentiment(tmp_path)),
                 "--dev", str(sentiment(tmp_path)), "--out", str(tmp_path / "ft"), "--epochs", "1",
                 "--no-progress"]) == 0


def test_a_pruned_student_starts_as_the_teacher_cut_to_its_size(data_dir, teacher, tmp_path):
    """--prune at learning rate 0: the student saved is the cut it started from, 48 wide of the teacher's 96 (3 of its
    6 heads of 16), its first layer, every weight one of the teacher's."""
    size = tmp_path / "student.json"
    vocab = BertTokenizer.from_pretrained(data_dir).vocab_size
    BertConfig(vocab_size=vocab, hidden_size=48, num_hidden_layers=1, num_attention_heads=4,
               intermediate_size=96).save(size)
    run = tmp_path / "run"
    pretrain(str(data_dir), str(run), config=str(size), objective="distill", teacher=str(teacher), prune=True,
             steps=1, lr=0.0, batch_size=8, seed=0, progress=False)
    student, source = (BertForPreTraining.from_pretrained(f).bert for f in (run / "final", teacher))
    assert student.config.num_attention_heads == 3 and student.config.hidden_size == 48
    assert json.loads((run / "args.json").read_text())["extra"]["prune"] is True
    words, teacher_words = student.embeddings.word_embeddings.weight, source.embeddings.word_embeddings.weight
    kept = [next(j for j in range(96) if torch.equal(words[:, i], teacher_words[:, j])) for i in range(48)]
    assert kept == sorted(kept)  # the teacher's channels, in its order
    ours, theirs = student.encoder.layer[0].intermediate.dense.weight, source.encoder.layer[0].intermediate.dense.weight
    assert all(any(torch.equal(row, t[kept]) for t in theirs) for row in ours)  # 96 of its 192 neurons, layer 0


@pytest.mark.parametrize("objective, trained, left", [("distill-hidden", "hidden_loss", "relation_loss"),
                                                       ("distill-relations", "relation_loss", "hidden_loss")])
def test_a_one_term_objective_trains_on_its_term_and_reports_both(objective, trained, left, data_dir, teacher,
                                                                   tmp_path):
    run = tmp_path / "run"
    argv = cli(data_dir, teacher, run)
    argv[argv.index("distill")] = objective
    assert main(argv) == 0
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    training = [r for r in rows if trained in r]
    assert training and all(r["loss"] == r[trained] and left not in r for r in training)
    assert any({"eval_hidden_loss", "eval_relation_loss"} <= set(r) for r in rows)  # comparable with distill's
    assert json.loads((run / "args.json").read_text())["extra"]["objective"] == objective


def sentiment(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps({"text": t, "label": y}) + "\n"
                            for t, y in [("a good function", "pos"), ("a bad module", "neg")] * 4))
    return path


def test_resume_continues_exactly(data_dir, teacher, tmp_path):
    whole = tmp_path / "whole"
    assert main(cli(data_dir, teacher, whole)) == 0
    resumed = tmp_path / "resumed"
    shutil.copytree(whole, resumed)
    shutil.rmtree(resumed / "step-0000006")
    shutil.rmtree(resumed / "final")
    assert main(cli(data_dir, teacher, resumed, "--resume")) == 0
    for name in ("model.safetensors", PROJECTION_FILE):
        assert (resumed / "final" / name).read_bytes() == (whole / "final" / name).read_bytes()


@pytest.mark.parametrize("case", ["no teacher", "teacher without distill", "not a model", "other vocabulary",
                                  "mask prob", "student embeddings of a checkpoint", "prune without a teacher",
                                  "prune to a wider student"])
def test_bad_input_is_one_line(case, data_dir, teacher, tmp_path, capsys):
    argv = cli(data_dir, teacher, tmp_path / "run")
    if case == "no teacher":
        i = argv.index("--teacher")
        del argv[i:i + 2]
        wanted = "--objective distill needs --teacher"
    elif case == "teacher without distill":
        argv[argv.index("distill")] = "mlm"
        wanted = "--teacher"
    elif case == "not a model":
        argv[argv.index("--teacher") + 1] = str(tmp_path)
        wanted = "not a model folder"
    elif case == "other vocabulary":
        other = tmp_path / "other"
        BertForPreTraining(BertConfig.from_name("tiny", vocab_size=100)).save_pretrained(other)
        argv[argv.index("--teacher") + 1] = str(other)
        wanted = "vocabulary"
    elif case == "mask prob":
        argv += ["--mask-prob", "0.2"]
        wanted = "--mask-prob"
    elif case == "prune without a teacher":
        argv[argv.index("distill")] = "mlm"
        i = argv.index("--teacher")
        del argv[i:i + 2]
        argv.append("--prune")
        wanted = "--prune: it cuts a fresh student from --teacher"
    elif case == "prune to a wider student":
        argv.append("--prune")  # tiny: 128 wide, the teacher 96
        wanted = "--prune: the student tiny is 128 wide"
    else:
        argv += ["--init-from", str(teacher), "--student-embeddings", "teacher"]
        wanted = "--student-embeddings teacher: it starts a fresh student"
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and wanted in err and "Traceback" not in err
    assert not (tmp_path / "run" / "final").exists()
