"""Task distillation: the losses against hand computations, the teacher's cached outputs, the students it starts
from, the checkpoint it leaves (read by evaluate, pipeline() and transformers), and its one-line errors.

The teacher is a tiny random encoder fine-tuned on a few dozen SST-2 examples: these prove the paths; what
distillation buys is measured by benchmarks and recorded in BENCHMARKS.md."""

import json
import math
import shutil

import numpy as np
import pytest
import torch

from bertforge.model.architectures.registry import load_config
from bertforge import (
    BertConfig, BertForPreTraining, BertForQuestionAnswering, BertForSequenceClassification,
    BertForTokenClassification, BertTokenizer
)
from bertforge.cli import main
from bertforge.finetuning.distill import distill, distill_rows, make_distiller, soft_target_loss
from bertforge.finetuning.distill_student import build_student, load_teacher
from bertforge.finetuning.distill_student import encoder_share, student_start
from bertforge.training import recipes
from bertforge.finetuning.soft_targets import span_loss, token_loss
from bertforge.finetuning.distill_data import augment_words, augmented, read_unlabelled, read_unlabelled_questions
from bertforge.core.errors import BertforgeError
from bertforge.finetuning.finetune import finetune
from bertforge.tasks import make_family
from bertforge.inference.answer_spans import SquadExample
from bertforge.tasks.glue import GlueExample
from tests.conftest import one_line_error, require_shared, write_jsonl
from tests.training.test_train import nan_weights

OPTIONS = dict(epochs=1, batch_size=8, max_train_examples=48, max_eval_examples=16, lr=1e-3, progress=False)
DISTILLED = {**OPTIONS, "augment": 0}  # the recipe's variants left out: these tests count rows and steps


@pytest.fixture(scope="module")
def sst2():
    return require_shared("data", "glue", "SST-2")


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, sst2):
    """A tiny encoder of three layers fine-tuned on 48 SST-2 examples: RUN/best."""
    vocab = require_shared("models", "all-MiniLM-L6-v2", "vocab.txt")
    folder = tmp_path_factory.mktemp("teacher")
    torch.manual_seed(0)
    tokenizer = BertTokenizer.from_pretrained(vocab)
    config = BertConfig.from_name("tiny", vocab_size=tokenizer.vocab_size, num_hidden_layers=3)
    BertForPreTraining(config).save_pretrained(folder / "base", tokenizer)
    finetune("sst2", folder / "base", sst2, folder / "run", **OPTIONS)
    return folder / "run" / "best"


def test_soft_target_loss_matches_a_hand_computation_at_t1_and_t2():
    student = torch.tensor([[1.0, 2.0, 0.5], [0.0, -1.0, 3.0]])
    teacher = torch.tensor([[2.0, 0.0, 1.0], [1.0, 1.0, -2.0]])
    for t in (1.0, 2.0):
        expected = []
        for s_row, t_row in zip(student.tolist(), teacher.tolist()):
            p = [math.exp(v / t) / sum(math.exp(u / t) for u in t_row) for v in t_row]
            q = [math.exp(v / t) / sum(math.exp(u / t) for u in s_row) for v in s_row]
            expected.append(t * t * sum(pi * math.log(pi / qi) for pi, qi in zip(p, q)))
        assert soft_target_loss(student, teacher, t).tolist() == pytest.approx(expected, rel=1e-5)
    # equal outputs: nothing to learn; a regressor: the squared error to the teacher's score
    assert soft_target_loss(teacher, teacher, 2.0).tolist() == pytest.approx([0.0, 0.0], abs=1e-6)
    assert soft_target_loss(torch.tensor([[0.5]]), torch.tensor([[2.0]]), 1.0, regression=True).tolist() == [2.25]


def kl(teacher: list[float], student: list[float], t: float) -> float:
    """T^2 KL(softmax(teacher / T) || softmax(student / T)), by hand."""
    p = [math.exp(v / t) / sum(math.exp(u / t) for u in teacher) for v in teacher]
    q = [math.exp(v / t) / sum(math.exp(u / t) for u in student) for v in student]
    return t * t * sum(pi * math.log(pi / qi) for pi, qi in zip(p, q))


def test_token_loss_is_the_mean_kl_over_the_tokens_that_carry_a_label():
    """Two rows of 4 tokens, the second padded after 3: only the tokens whose label is not -100 count ([CLS],
    [SEP], later pieces and the padding do not), each the same, averaged over them."""
    torch.manual_seed(0)
    student, teacher = torch.randn(2, 4, 3), torch.randn(2, 4, 3)
    labels = torch.tensor([[-100, 2, -100, 0], [-100, 1, -100, -100]])
    teacher[1, 3] = 0.0  # the padding's teacher outputs, as PerToken pads them
    for t in (1.0, 2.0):
        counted = [(0, 1), (0, 3), (1, 1)]
        expected = sum(kl(teacher[i, j].tolist(), student[i, j].tolist(), t) for i, j in counted) / len(counted)
        loss = token_loss({"logits": student}, teacher, {"labels": labels}, t)
        assert loss.item() == pytest.approx(expected, rel=1e-5)
    changed = student.clone()
    changed[labels == -100] = 50.0  # what the student says where no label is read changes nothing
    assert token_loss({"logits": changed}, teacher, {"labels": labels}, 2.0).item() == pytest.approx(loss.item())
    nothing = token_loss({"logits": student}, teacher, {"labels": torch.full_like(labels, -100)}, 2.0)
    assert nothing.item() == 0.0


def test_span_loss_is_half_the_start_and_end_kl_over_each_windows_tokens():
    """Two windows, the second 3 tokens of 5 (its padding: the student's scores lowest, as the head masks them; the
    teacher's zeros): per window (KL(start) + KL(end)) / 2 over its real tokens, averaged over the windows."""
    torch.manual_seed(1)
    start, end, teacher = torch.randn(2, 5), torch.randn(2, 5), torch.randn(2, 5, 2)
    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    lowest = torch.finfo(torch.float32).min
    start, end = (x.masked_fill(mask == 0, lowest) for x in (start, end))
    teacher[mask == 0] = 0.0
    t = 2.0
    expected = [(kl(teacher[i, :n, 0].tolist(), start[i, :n].tolist(), t)
                 + kl(teacher[i, :n, 1].tolist(), end[i, :n].tolist(), t)) / 2 for i, n in enumerate((5, 3))]
    loss = span_loss({"start_logits": start, "end_logits": end}, teacher, {"attention_mask": mask}, t)
    assert loss.item() == pytest.approx(sum(expected) / 2, rel=1e-5)


def test_token_and_span_distillers_add_the_models_own_loss_on_the_labels():
    """The label term of a token classifier is its token cross-entropy over the labelled tokens, of a span model
    its span loss over the labelled windows, a window without the answer pointed at [CLS] (position 0) as
    fine-tuning does; the soft term is token_loss's or span_loss's on the student's outputs."""
    torch.manual_seed(0)
    config = BertConfig.from_name("tiny", vocab_size=50, id2label={0: "O", 1: "B-X", 2: "I-X"})
    ids, mask = torch.tensor([[2, 5, 6, 7, 3], [2, 8, 9, 3, 0]]), torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 1, 0]])
    batch = dict(input_ids=ids, attention_mask=mask, token_type_ids=torch.zeros_like(ids))
    targets = dict(labelled=torch.tensor([1, 1]))

    tagger = BertForTokenClassification(config).eval()
    labels = torch.tensor([[-100, 1, 2, 0, -100], [-100, 0, -100, -100, -100]])
    teacher = torch.randn(2, 5, 3)
    logits = tagger(**batch)["logits"]
    out = make_distiller(tagger, 2.0, 0.25, regression=False).eval()(teacher_logits=teacher, labels=labels,
                                                                     **targets, **batch)
    kept = labels != -100
    ce = torch.nn.functional.cross_entropy(logits[kept], labels[kept]).item()
    assert out["label_loss"].item() == pytest.approx(0.25 * ce, rel=1e-5)
    assert out["distill_loss"].item() == pytest.approx(
        0.75 * token_loss({"logits": logits}, teacher, {"labels": labels}, 2.0).item(), rel=1e-5)

    reader = BertForQuestionAnswering(config).eval()
    positions = dict(start_positions=torch.tensor([1, 0]), end_positions=torch.tensor([3, 0]))  # 2nd: no answer
    teacher = torch.randn(2, 5, 2).masked_fill(mask[..., None] == 0, 0.0)
    scores = reader(**batch)
    out = make_distiller(reader, 2.0, 0.25, regression=False).eval()(teacher_logits=teacher, **positions,
                                                                     **targets, **batch)
    span = sum(-torch.log_softmax(scores[key], -1)[range(2), positions[f"{key[:-7]}_positions"]].mean()
               for key in ("start_logits", "end_logits")) / 2
    assert out["label_loss"].item() == pytest.approx(0.25 * span.item(), rel=1e-5)
    assert out["distill_loss"].item() == pytest.approx(
        0.75 * span_loss(scores, teacher, batch, 2.0).item(), rel=1e-5)
    # --unlabelled questions' windows: the teacher's outputs alone, whatever their placeholder positions
    placeholders = dict(start_positions=torch.tensor([1, 4]), end_positions=torch.tensor([3, 4]))
    distiller = make_distiller(reader, 2.0, 0.25, regression=False).eval()
    first = sum(-torch.log_softmax(scores[key][0], -1)[p] for key, p in (("start_logits", 1), ("end_logits", 3))) / 2
    for labelled, expected in (([1, 0], 0.25 * first.item()), ([0, 0], 0.0)):
        out = distiller(teacher_logits=teacher, labelled=torch.tensor(labelled), **placeholders, **batch)
        assert out["label_loss"].item() == pytest.approx(expected, rel=1e-5, abs=1e-7)
        assert out["distill_loss"].item() == pytest.approx(
            0.75 * span_loss(scores, teacher, batch, 2.0).item(), rel=1e-5)


def test_missing_choices_add_nothing_and_give_finite_gradients():
    student = torch.tensor([[1.0, 0.0, -math.inf]], requires_grad=True)
    teacher = torch.tensor([[0.0, 1.0, -math.inf]])
    loss = soft_target_loss(student, teacher, 1.0)
    loss.sum().backward()
    assert loss.item() == pytest.approx(soft_target_loss(student[:, :2].detach(), teacher[:, :2], 1.0).item())
    assert torch.isfinite(student.grad[:, :2]).all() and student.grad[0, 2] == 0


def test_distiller_weighs_soft_targets_by_one_minus_alpha_and_labels_by_alpha():
    torch.manual_seed(0)
    config = BertConfig.from_name("tiny", vocab_size=50, id2label={0: "0", 1: "1"})
    student = BertForSequenceClassification(config).eval()
    batch = dict(input_ids=torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]]),
                 attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]), labels=torch.tensor([1, 0]))
    teacher_logits = torch.tensor([[0.0, 3.0], [2.0, -1.0]])
    logits = student(**{k: v for k, v in batch.items() if k != "labels"})["logits"]
    distiller = make_distiller(student, 2.0, 0.25, regression=False).eval()
    out = distiller(teacher_logits=teacher_logits, labelled=torch.tensor([1, 0]), **batch)
    soft = soft_target_loss(logits, teacher_logits, 2.0).mean().item()
    assert out["distill_loss"].item() == pytest.approx(0.75 * soft)
    # only the labelled row counts in the label loss
    ce = torch.nn.functional.cross_entropy(logits[:1], batch["labels"][:1]).item()
    assert out["label_loss"].item() == pytest.approx(0.25 * ce)
    # without teacher outputs (evaluation), the student's own forward
    assert torch.equal(distiller(**batch)["logits"], logits)


def test_representation_terms_are_general_distillations_on_the_students_own_pass(teacher):
    """--representations: the hidden and relation terms, taken from the student's task forward pass, equal
    general distillation's own (which runs the student's encoder on its own), times the weight."""
    from bertforge.pretraining.general_distill import GeneralDistiller

    torch.manual_seed(0)
    teacher_model = BertForSequenceClassification.from_pretrained(teacher).eval()
    student = BertForSequenceClassification(BertConfig.from_name(
        "mini", vocab_size=teacher_model.config.vocab_size, id2label={0: "0", 1: "1"})).eval()
    general = GeneralDistiller(student, teacher_model.bert).eval()
    match = general.match
    assert isinstance(match.projection, torch.nn.Linear)  # 256 wide against the teacher's 128
    batch = dict(input_ids=torch.tensor([[2, 5, 6, 3], [2, 7, 3, 0]]),
                 attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]),
                 token_type_ids=torch.zeros(2, 4, dtype=torch.long))
    targets = dict(teacher_logits=torch.zeros(2, 2), labelled=torch.tensor([1, 1]), labels=torch.tensor([0, 1]))
    out = make_distiller(student, 2.0, 0.5, regression=False, representations=match,
                         representation_weight=0.5).eval()(**targets, **batch)
    expected = general(**batch)
    assert expected["hidden_loss"] > 0 and expected["relation_loss"] > 0
    for term in ("hidden_loss", "relation_loss"):
        assert out[term].item() == pytest.approx(0.5 * expected[term].item(), rel=1e-5)
    without = make_distiller(student, 2.0, 0.5, regression=False).eval()(**targets, **batch)
    assert set(without) == {"distill_loss", "label_loss"}
    assert out["distill_loss"].item() == pytest.approx(without["distill_loss"].item())


def test_representations_run_logs_their_terms_and_resumes_exactly(teacher, sst2, tmp_path, capsys):
    def run(out, *extra):
        return main(["distill", "sst2", "--teacher", str(teacher), "--student", "mini", "--data", str(sst2),
                     "--out", str(out), "--max-train-examples", "48", "--max-eval-examples", "16", "--epochs", "1",
                     "--batch-size", "8", "--no-progress", "--cache-dir", str(tmp_path / "cache"), "--augment", "0",
                     "--representations", "both", "--representation-weight", "2", "--save-every", "3", "--keep", "2",
                     "--keep-checkpoints", *extra])

    whole = tmp_path / "whole"
    assert run(whole) == 0
    logged = [json.loads(line) for line in (whole / "metrics.jsonl").read_text().splitlines()]
    trained = [r for r in logged if "hidden_loss" in r]
    assert trained and all(r["hidden_loss"] > 0 and r["relation_loss"] > 0 for r in trained)
    assert json.loads((whole / "args.json").read_text())["extra"]["representations"] == "both"
    best = BertForSequenceClassification.from_pretrained(whole / "best")  # an ordinary checkpoint
    assert best.config.hidden_size == 256
    resumed = tmp_path / "resumed"
    shutil.copytree(whole, resumed)
    for name in ("step-0000006", "final", "best", "eval_results.json"):
        target = resumed / name
        shutil.rmtree(target) if target.is_dir() else target.unlink()
    capsys.readouterr()
    assert run(resumed, "--resume") == 0
    for name in ("model.safetensors", "distill_projection.safetensors"):  # the width map resumes too
        assert (resumed / "final" / name).read_bytes() == (whole / "final" / name).read_bytes()


def test_augmented_variants_mask_replace_and_cut_words():
    rng = np.random.default_rng(0)
    words = "a b c d e f g h i j".split()
    variants = [augment_words(words, ["x", "y"], rng) for _ in range(400)]
    flat = [w for v in variants for w in v]
    assert all(v for v in variants)
    assert 0.05 < flat.count("[MASK]") / len(flat) < 0.15
    assert 0.05 < sum(w in ("x", "y") for w in flat) / len(flat) < 0.15
    cut = sum(len(v) < len(words) for v in variants) / len(variants)
    assert 0.15 < cut < 0.35  # n-grams of 1 to 5 words from 10, with probability 0.25
    examples = [GlueExample("train-0", "good film", "so good", 1)]
    out = augmented(examples, 3, seed=1)
    assert [e.guid for e in out] == ["train-0-aug0", "train-0-aug1", "train-0-aug2"]
    assert all(e.label is None and e.text_b is not None for e in out)
    assert [e.text_a for e in augmented(examples, 3, seed=1)] == [e.text_a for e in out]  # seeded
    question = SquadExample("q1", "Where was the tall man from the north born ?", "He was born in Oslo.", ["Oslo"],
                            [15])
    out = augmented([question], 20, seed=1)
    assert [e.id for e in out[:2]] == ["q1-aug0", "q1-aug1"]
    assert {(e.context, tuple(e.answer_texts), tuple(e.answer_starts)) for e in out} == \
        {(question.context, ("Oslo",), (15,))}  # the paragraph, so the answer's place, kept
    assert len({e.question for e in out}) > 10 and all(set(e.question.split()) <= set(question.question.split())
                                                       | {"[MASK]"} for e in out)  # words of the questions only


def test_unlabelled_text_lines_pairs_and_tables(tmp_path, sst2):
    family = make_family("sst2", sst2)
    (tmp_path / "a.txt").write_text("one text\n\nanother text\n")
    assert [e.text_a for e in read_unlabelled([tmp_path / "a.txt"], family, pairs=False)] == ["one text",
                                                                                             "another text"]
    (tmp_path / "t.jsonl").write_text(json.dumps({"sentence": "from a table"}) + "\n")
    assert read_unlabelled([tmp_path / "t.jsonl"], family, pairs=False)[0].text_a == "from a table"
    (tmp_path / "p.txt").write_text("a\tb\nno tab here\n")
    with pytest.raises(BertforgeError) as e:
        read_unlabelled([tmp_path / "p.txt"], make_family("mrpc", sst2), pairs=True)
    assert one_line_error(e, "p.txt:2", "tab")


def test_teacher_outputs_are_cached_and_recomputed_when_teacher_or_data_change(teacher, sst2, tmp_path,
                                                                               monkeypatch):
    from bertforge.inference import batches as inference

    teacher_runs = []
    run_model = inference.run_model  # evaluation calls its own import of it: only the teacher's calls count
    monkeypatch.setattr(inference, "run_model", lambda *a, **k: teacher_runs.append(1) or run_model(*a, **k))
    cache = tmp_path / "cache"

    def runs_teacher(name, teacher_dir=teacher, **kw) -> bool:
        before = len(teacher_runs)
        distill("sst2", teacher_dir, "tiny", sst2, tmp_path / name, cache_dir=cache, **{**DISTILLED, **kw})
        recorded = json.loads((tmp_path / name / "args.json").read_text())["extra"]["teacher_outputs_cached"]
        assert recorded == (len(teacher_runs) == before)
        return len(teacher_runs) > before

    assert runs_teacher("first")
    assert not runs_teacher("second", seed=5, epochs=2, lr=5e-4)  # another student run on the same rows
    assert len(list(cache.glob("*.npy"))) == 1
    assert runs_teacher("fewer", max_train_examples=40)  # other data
    assert runs_teacher("shorter", max_length=8)  # other rows
    changed = tmp_path / "teacher2"
    shutil.copytree(teacher, changed)
    model = BertForSequenceClassification.from_pretrained(changed)
    with torch.no_grad():
        model.classifier.bias += 1.0
    model.save_pretrained(changed)
    assert runs_teacher("changed", teacher_dir=changed)  # other weights
    assert not runs_teacher("changed-again", teacher_dir=changed)
    (changed / "unused.safetensors").write_bytes(b"not read")  # only the files the teacher is read from count
    assert not runs_teacher("beside-another-file", teacher_dir=changed)
    assert len(list(cache.glob("*.npy"))) == 4


def test_student_is_an_ordinary_checkpoint_for_evaluate_pipeline_and_transformers(teacher, sst2, tmp_path, capsys):
    import transformers

    from bertforge import pipeline

    assert main(["distill", "sst2", "--teacher", str(teacher), "--student", "tiny", "--data", str(sst2),
                 "--out", str(tmp_path / "run"), "--max-train-examples", "48", "--max-eval-examples", "16",
                 "--augment", "1", "--epochs", "1", "--batch-size", "8", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache")]) == 0
    printed = capsys.readouterr()
    results = json.loads(printed.out)
    assert "--augment 1: 48 variants of the 48 training examples" in printed.err  # said before they are made
    best = tmp_path / "run" / "best"
    assert main(["evaluate", "sst2", "--model", str(best), "--data", str(sst2), "--max-eval-examples", "16",
                 "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(results["accuracy"])
    # the teacher's score on the same split beside it, and the share the student keeps, said and recorded
    assert main(["evaluate", "sst2", "--model", str(teacher), "--data", str(sst2), "--max-eval-examples", "16",
                 "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["accuracy"] == pytest.approx(results["teacher"]["accuracy"])
    assert results["of_teacher"] == pytest.approx(results["accuracy"] / results["teacher"]["accuracy"], abs=1e-4)
    assert f"the student keeps {results['of_teacher']:.1%}" in printed.err
    assert json.loads((tmp_path / "run" / "eval_results.json").read_text())["of_teacher"] == results["of_teacher"]
    args = json.loads((tmp_path / "run" / "args.json").read_text())["extra"]
    assert args["distill_rows"] == 96 and args["teacher"] == str(teacher)
    texts = ["a gorgeous , witty , seductive movie .", "the plot is nothing but boilerplate clichés ."]
    ours = [r["score"] for r in pipeline("text-classification", model=best)(texts)]
    reference = transformers.AutoModelForSequenceClassification.from_pretrained(best).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(best)
    with torch.no_grad():
        probs = reference(**tokenizer(texts, padding=True, return_tensors="pt")).logits.softmax(-1)
    assert ours == pytest.approx(probs.max(-1).values.tolist(), abs=1e-5)
    assert load_config(str(best)).num_hidden_layers == 2


def test_student_layers_copy_exactly_the_named_layers(teacher, sst2):
    model = BertForSequenceClassification.from_pretrained(teacher)
    tokenizer = BertTokenizer.from_pretrained(teacher)
    family = make_family("sst2", sst2)
    student = build_student(None, [0, 2], model, teacher, tokenizer, family)
    ours, theirs = student.state_dict(), model.state_dict()
    assert student.config.num_hidden_layers == 2
    for key, value in ours.items():
        source = key.replace("layer.1.", "layer.2.") if "encoder.layer.1." in key else key
        assert torch.equal(value, theirs[source]), key
    assert not torch.equal(ours["bert.encoder.layer.1.output.dense.weight"],
                           theirs["bert.encoder.layer.1.output.dense.weight"])


def test_a_pruned_student_at_the_teachers_width_is_its_evenly_spaced_layers(teacher, sst2, tmp_path):
    """--prune: a student as wide as the teacher keeps every channel, head and neuron of the layers it takes (the
    cutting itself is tested in tests/model/test_student.py); a run leaves a checkpoint that evaluates."""
    model = BertForSequenceClassification.from_pretrained(teacher)
    tokenizer = BertTokenizer.from_pretrained(teacher)
    family = make_family("sst2", sst2)
    rows = family.read("train", tokenizer, 32).encoded
    layers = build_student(None, [0, 2], model, teacher, tokenizer, family).state_dict()
    cut = build_student("tiny", None, model, teacher, tokenizer, family, prune_on=rows).state_dict()
    assert cut.keys() == layers.keys() and all(torch.equal(cut[k], layers[k]) for k in cut)
    result = distill("sst2", teacher, "tiny", sst2, tmp_path / "run", cache_dir=tmp_path / "cache", prune=True,
                     **DISTILLED)
    assert 0 <= result["accuracy"] <= 1
    assert json.loads((tmp_path / "run" / "args.json").read_text())["extra"]["prune"] is True


def test_prune_from_cuts_the_named_model_not_the_teacher(teacher, sst2, tmp_path, capsys):
    """--prune-from: the student is cut from that model (a student distilled before), ranked on the same rows, and
    the line it prints says so."""
    model = BertForSequenceClassification.from_pretrained(teacher)
    tokenizer = BertTokenizer.from_pretrained(teacher)
    family = make_family("sst2", sst2)
    rows = family.read("train", tokenizer, 32).encoded
    other = BertForSequenceClassification.from_pretrained(teacher)
    torch.manual_seed(3)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    capsys.readouterr()
    cut = build_student("tiny", [0, 2], model, teacher, tokenizer, family, prune_on=rows, cut_from=other).state_dict()
    assert "student cut from the --prune-from model's layers 0,2" in capsys.readouterr().err
    wanted = build_student("tiny", [0, 2], other, teacher, tokenizer, family, prune_on=rows).state_dict()
    of_teacher = build_student("tiny", [0, 2], model, teacher, tokenizer, family, prune_on=rows).state_dict()
    assert "student cut from the teacher's layers 0,2" in capsys.readouterr().err
    assert all(torch.equal(cut[k], wanted[k]) for k in cut)
    assert not torch.equal(cut["bert.encoder.layer.1.output.dense.weight"],
                           of_teacher["bert.encoder.layer.1.output.dense.weight"])


def embeddings(model):
    return model.bert.embeddings


def random_teacher(teacher, folder, **config):
    """A random (never trained) teacher of the task with the fixture teacher's labels and vocabulary: one layer,
    256 wide (wider than a tiny student), with these config fields."""
    torch.manual_seed(0)
    fields = {**load_config(str(teacher)).to_dict(), "num_hidden_layers": 1, "hidden_size": 256,
              "num_attention_heads": 4, "intermediate_size": 512, **config}
    BertForSequenceClassification(BertConfig.from_dict(fields)).save_pretrained(
        folder, tokenizer=BertTokenizer.from_pretrained(teacher))
    return folder


@pytest.mark.parametrize("positions, types, more_words", [(128, 2, 0), (1024, 1, 6)])
def test_a_student_of_a_size_takes_the_teachers_positions_token_types_and_vocabulary(
        positions, types, more_words, teacher, sst2, tmp_path):
    """Teachers of 128 and 1024 positions against the size's 512 (one with a single token type, one with a table
    of words padded past the vocabulary): the student of a size has the teacher's tables, its embeddings
    projected from them, and distils end to end."""
    vocab = load_config(str(teacher)).vocab_size + more_words
    other = random_teacher(teacher, tmp_path / "teacher", max_position_embeddings=positions, type_vocab_size=types,
                           vocab_size=vocab)
    distill("sst2", other, "tiny", sst2, tmp_path / "run", cache_dir=tmp_path / "cache",
            **{**DISTILLED, "max_train_examples": 16, "max_eval_examples": 8})
    student = load_config(str(tmp_path / "run" / "best"))
    assert (student.max_position_embeddings, student.type_vocab_size, student.vocab_size) == (positions, types, vocab)
    assert (student.num_hidden_layers, student.hidden_size) == (2, 128)  # the size's


def test_a_student_of_a_size_starts_with_the_teachers_embeddings_unless_asked_or_wider(teacher, sst2):
    model = BertForSequenceClassification.from_pretrained(teacher)
    tokenizer = BertTokenizer.from_pretrained(teacher)
    family = make_family("sst2", sst2)
    words = {choice: embeddings(build_student("tiny", None, model, teacher, tokenizer, family, choice))
             .word_embeddings.weight for choice in (None, "teacher", "random")}
    assert torch.equal(words[None], words["teacher"]) and not torch.allclose(words[None], words["random"])
    wider = build_student("mini", None, model, teacher, tokenizer, family)  # 256 wide, the teacher 128
    assert wider.config.hidden_size == 256
    with pytest.raises(BertforgeError, match="wider"):
        build_student("mini", None, model, teacher, tokenizer, family, "teacher")


@pytest.mark.parametrize("flags, culprit", [
    (["--augment", "10000"], "--augment"),
    (["--augment", "65"], "--augment"),
    (["--augment", "-1"], "--augment"),
    (["--temperature", "0"], "--temperature"),
    (["--temperature", "-1"], "--temperature"),
    (["--alpha", "1.5"], "--alpha"),
    (["--alpha", "-0.1"], "--alpha"),
    (["--student-layers", "0,x"], "--student-layers"),
])
def test_bad_flag_values_are_one_line_errors(flags, culprit, teacher, sst2, tmp_path, capsys):
    argv = ["distill", "sst2", "--teacher", str(teacher), "--student", "tiny", "--data", str(sst2),
            "--out", str(tmp_path / "run"), *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and culprit in err and "Traceback" not in err
    assert not (tmp_path / "run").exists()


def test_bad_teachers_and_students_are_one_line_errors(teacher, sst2, tmp_path, uncased_vocab):
    def fails(*names, **kw):
        options = {"student": "tiny", **kw}
        with pytest.raises(BertforgeError) as e:
            distill(options.pop("task", "sst2"), options.pop("teacher_dir", teacher), options.pop("student"), sst2,
                    tmp_path / "run", cache_dir=tmp_path / "cache", **{**DISTILLED, **options})
        one_line_error(e, *names)
        assert not (tmp_path / "run").exists()
        return str(e.value)

    assert "not a model folder" in fails("--teacher", teacher_dir=tmp_path)
    assert "layers" in fails("--student-layers", student=None, student_layers=[0, 5])
    assert "wide" in fails("--student-layers", student="mini", student_layers=[0, 1])
    base = teacher.parent.parent / "base"
    assert "needs a BertForSequenceClassification" in fails(str(base), teacher_dir=base)  # no head for the task
    assert "labels" in fails("--teacher", teacher_dir=three_labels(teacher, tmp_path))
    other = tmp_path / "other-vocab"
    tokens = uncased_vocab.read_text().splitlines()[:2000]
    other.mkdir()
    (other / "vocab.txt").write_text("\n".join(tokens) + "\n")
    BertForPreTraining(BertConfig.from_name("tiny", vocab_size=len(tokens))).save_pretrained(other)
    assert "vocabulary" in fails("--student", str(other), student=str(other))
    assert "vocabulary" in fails("--prune-from", str(other), prune_from=other)
    assert "BertBiEncoder" in fails("retrieval", task="retrieval")  # a head task distillation does not cover
    assert "question-answering" in fails("--augment", task="conll2003", augment=2)
    assert "question-answering" in fails("--unlabelled", task="conll2003", unlabelled=[tmp_path / "a.txt"])
    assert "text-pair" in fails("--representations", task="squad", representations="both")
    assert "one of" in fails("--representations", representations="attention")
    assert "above 0" in fails("--representation-weight", representations="both", representation_weight=0.0)
    assert "not a size" in fails("--prune", student=str(teacher), prune=True)
    assert "wide" in fails("--prune", student="mini", prune=True)  # 256 wide, the teacher 128
    assert "layers" in fails("--student-layers", student="tiny", student_layers=[0, 1, 2], prune=True)
    assert "no such model folder" in fails("--prune-from", prune_from=tmp_path / "nothing")
    assert "at most 64" in fails("--augment", augment=10000)
    assert "adaptive, fixed" in fails("--recipe", recipe="paper", teacher_dir=tmp_path)  # before the teacher is read


def test_augment_takes_up_to_its_bound():
    import argparse

    from bertforge.finetuning.distill import MAX_AUGMENT, add_distill_arguments

    parser = argparse.ArgumentParser()
    add_distill_arguments(parser)
    given = parser.parse_args(["sst2", "--teacher", "t", "--out", "o", "--augment", str(MAX_AUGMENT)])
    assert given.augment == MAX_AUGMENT == 64


def test_resume_checks_the_runs_fixed_flags_before_any_model_is_loaded(teacher, sst2, tmp_path, monkeypatch):
    """A resumed run with another teacher (here one that could not be loaded), student, rows or representation
    terms is refused naming the flag, before a teacher or a student is loaded or built."""
    from bertforge.finetuning import distill as module

    options = {**DISTILLED, "max_train_examples": 16, "max_eval_examples": 8, "cache_dir": tmp_path / "cache"}
    run = tmp_path / "run"
    distill("sst2", teacher, "tiny", sst2, run, **options)
    record = (run / "args.json").read_bytes()
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{")

    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded or built before --resume was checked")

    for name in ("load_teacher", "build_student", "student_folder"):
        monkeypatch.setattr(module, name, no_model)
    monkeypatch.setattr(BertForSequenceClassification, "from_pretrained", no_model)
    monkeypatch.setattr(BertTokenizer, "from_pretrained", no_model)
    for flag, change in [("--teacher", {"teacher_dir": broken}), ("--student", {"student": "mini"}),
                         ("--augment", {"augment": 2}), ("--representations", {"representations": "hidden"}),
                         ("--batch-size", {"batch_size": 4})]:
        given = {"teacher_dir": teacher, "student": "tiny", **options, **change}
        with pytest.raises(BertforgeError) as e:
            distill("sst2", given.pop("teacher_dir"), given.pop("student"), sst2, run, resume=True, **given)
        assert one_line_error(e, "--resume", flag).startswith(f"--resume: {flag} ")
    assert (run / "args.json").read_bytes() == record


def three_labels(teacher, tmp_path):
    folder = tmp_path / "three"
    model = BertForSequenceClassification.from_pretrained(teacher, num_labels=3, ignore_mismatched_sizes=True)
    model.save_pretrained(folder, tokenizer=BertTokenizer.from_pretrained(teacher))
    return folder


def test_multiple_choice_with_missing_choices_distils_with_finite_losses(teacher, tmp_path):
    """Questions with 2 and 3 choices share batches: the teacher's outputs for a missing choice are -inf and add
    nothing. The student is cut from the teacher (--prune)."""
    rows = [{"question": f"which {w} is it", "choices": ["a cat", "a dog", "a bird"][:2 + i % 2], "label": i % 2}
            for i, w in enumerate("one two three four five six seven eight nine ten eleven twelve".split())]
    train = write_jsonl(tmp_path / "quiz.jsonl", rows)
    options = {**OPTIONS, "train": train, "dev": train}
    finetune("multiple-choice", teacher.parent.parent / "base", None, tmp_path / "teacher", **options)
    result = distill("multiple-choice", tmp_path / "teacher" / "best", "tiny", None, tmp_path / "run",
                     cache_dir=tmp_path / "c", prune=True, **options)
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(math.isfinite(r["distill_loss"]) and math.isfinite(r["label_loss"]) for r in logged)
    assert 0 <= result["accuracy"] <= 1
    logits = np.load(next((tmp_path / "c").glob("*.npy")))
    assert logits.shape == (12, 3) and np.isneginf(logits[0::2, 2]).all() and np.isfinite(logits[1::2]).all()


# ---------------------------------------------------------------------------------------------------------
# Token classification and question answering: a few CoNLL sentences and SQuAD questions written here, teachers
# fine-tuned from a random encoder 256 wide, so that --prune cuts the tiny student's channels to half.

PEOPLE, PLACES = ["Alice Smith", "Bob", "Carol Jones", "Dan"], ["Berlin", "New York", "Zanzibar", "Rome"]


@pytest.fixture(scope="module")
def wide_base(tmp_path_factory):
    """A random encoder of two layers, 256 wide (BERT-Mini's width and head size)."""
    vocab = require_shared("models", "all-MiniLM-L6-v2", "vocab.txt")
    folder = tmp_path_factory.mktemp("wide")
    torch.manual_seed(0)
    tokenizer = BertTokenizer.from_pretrained(vocab)
    config = BertConfig.from_name("mini", vocab_size=tokenizer.vocab_size, num_hidden_layers=2)
    BertForPreTraining(config).save_pretrained(folder, tokenizer)
    return folder


@pytest.fixture(scope="module")
def conll(tmp_path_factory):
    """16 CoNLL-2003 sentences (word POS chunk tag) as train.txt, valid.txt and test.txt."""
    lines = ["-DOCSTART- -X- -X- O", ""]
    for i in range(16):
        person, place = PEOPLE[i % 4].split(), PLACES[(i // 4 + i) % 4].split()
        tags = ([f"{'B' if k == 0 else 'I'}-PER" for k in range(len(person))] + ["O", "O"]
                + [f"{'B' if k == 0 else 'I'}-LOC" for k in range(len(place))] + ["O"])
        words = [*person, "went", "to", *place, "."]
        lines += [f"{w} X X {t}" for w, t in zip(words, tags)] + [""]
    folder = tmp_path_factory.mktemp("conll")
    for name in ("train.txt", "valid.txt", "test.txt"):
        (folder / name).write_text("\n".join(lines))
    return folder


@pytest.fixture(scope="module")
def ner_teacher(wide_base, conll, tmp_path_factory):
    out = tmp_path_factory.mktemp("ner-teacher")
    finetune("conll2003", wide_base, conll, out, **{**OPTIONS, "epochs": 3, "batch_size": 4})
    return out / "best"


def trained_rows(run) -> list[dict]:
    logged = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in logged if "distill_loss" in r]
    assert rows and all(math.isfinite(r["distill_loss"]) and math.isfinite(r["label_loss"]) for r in rows)
    return rows


def per_token_cache(cache, rows: int, outputs: int) -> np.ndarray:
    """The one cached file of the teacher's outputs per token: [rows, longest row, outputs] float16."""
    (path,) = cache.glob("*.npy")
    logits = np.load(path)
    assert logits.dtype == np.float16 and logits.shape[0] == rows and logits.shape[2] == outputs
    return logits


def test_ner_distils_a_cut_student_per_token_that_evaluate_and_transformers_read(ner_teacher, conll, tmp_path,
                                                                                capsys):
    import transformers

    run, cache = tmp_path / "run", tmp_path / "cache"
    assert main(["distill", "conll2003", "--teacher", str(ner_teacher), "--student", "tiny", "--prune",
                 "--data", str(conll), "--out", str(run), "--epochs", "2", "--batch-size", "4", "--no-progress",
                 "--cache-dir", str(cache)]) == 0
    results = json.loads(capsys.readouterr().out)
    assert 0 <= results["f1"] <= 1
    assert all(r["label_loss"] > 0 and r["distill_loss"] > 0 for r in trained_rows(run))
    tokenizer = BertTokenizer.from_pretrained(ner_teacher)
    family = make_family("conll2003", conll)
    lengths = [len(r) for r in family.read("train", tokenizer).encoded["input_ids"]]
    logits = per_token_cache(cache, 16, 5)  # O, B-LOC, I-LOC, B-PER, I-PER
    assert logits.shape[1] == max(lengths)
    assert all(not logits[i, n:].any() and logits[i, :n].any() for i, n in enumerate(lengths))
    best = run / "best"
    assert (load_config(str(best)).hidden_size, load_config(str(best)).num_hidden_layers) == (128, 2)
    assert main(["evaluate", "conll2003", "--model", str(best), "--data", str(conll), "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(results["f1"])
    inputs = tokenizer(["Carol Jones went to Zanzibar ."], return_tensors="pt")
    ours = BertForTokenClassification.from_pretrained(best).eval()
    theirs = transformers.AutoModelForTokenClassification.from_pretrained(best).eval()
    with torch.no_grad():
        torch.testing.assert_close(theirs(**inputs).logits, ours(**inputs)["logits"], atol=1e-5, rtol=1e-4)
    assert theirs.config.id2label == ours.config.id2label

    again = tmp_path / "again"  # --prune-from the student: a student cut from it, the teacher's outputs cached
    distill("conll2003", ner_teacher, "tiny", conll, again, prune_from=best, cache_dir=cache,
            **{**OPTIONS, "batch_size": 4})
    assert json.loads((again / "args.json").read_text())["extra"]["teacher_outputs_cached"] is True
    trained_rows(again)


JOBS = ["baker", "pilot", "nurse", "judge", "tailor", "farmer", "singer", "doctor"]


def squad_folder(folder, version_2: bool):
    """8 passages of about 70 tokens, two questions each (their answers in different 72-token windows), and for
    v2.0 an unanswerable third question on every other passage: train and dev files of the version."""
    paragraphs = []
    for i, (name, job) in enumerate(zip("Anna Boris Clara David Elena Felix Greta Hugo".split(), JOBS)):
        city = PLACES[i % 4]
        context = (f"{name} was born in {city}. " + "The weather there is mild and the streets are old. " * 5
                   + f"Today {name} works as a {job}.")
        qas = [{"id": f"{i}-city", "question": f"Where was {name} born?",
                "answers": [{"text": city, "answer_start": context.index(city)}]},
               {"id": f"{i}-job", "question": f"What does {name} work as?",
                "answers": [{"text": job, "answer_start": context.index(job)}]}]
        if version_2 and i % 2:
            qas.append({"id": f"{i}-school", "question": f"Where did {name} study?", "answers": [],
                        "is_impossible": True})
        paragraphs.append({"context": context, "qas": qas})
    version = "2.0" if version_2 else "1.1"
    data = json.dumps({"version": version, "data": [{"title": "people", "paragraphs": paragraphs}]})
    folder.mkdir()
    for split in ("train", "dev"):
        (folder / f"{split}-v{version}.json").write_text(data)
    return folder


QA = {**OPTIONS, "epochs": 2, "batch_size": 8, "max_length": 72}


@pytest.mark.parametrize("task", ["squad", "squad_v2"])
def test_question_answering_distils_start_and_end_per_window(task, wide_base, tmp_path, capsys):
    """SQuAD v1.1 (windows without the answer: every question has one) with a cut student and a variant of each
    question, evaluated and read by transformers; v2.0 with unanswerable questions."""
    import transformers

    data = squad_folder(tmp_path / "data", version_2=task == "squad_v2")
    finetune(task, wide_base, data, tmp_path / "teacher", **QA)
    teacher = tmp_path / "teacher" / "best"
    variants = int(task == "squad")
    results = distill(task, teacher, "tiny", data, tmp_path / "run", cache_dir=tmp_path / "cache",
                      prune=task == "squad", augment=variants, **QA)
    assert 0 <= results["f1"] <= 100 and ("best_f1" in results) == (task == "squad_v2")
    trained_rows(tmp_path / "run")
    tokenizer = BertTokenizer.from_pretrained(teacher)
    family = make_family(task, data, 72)
    train = family.read("train", tokenizer)
    windows = train.encoded["start_positions"]
    assert len(windows) > len(train.examples) and windows.count(0) >= len(train.examples)  # windows without it
    seed = json.loads((tmp_path / "run" / "args.json").read_text())["seed"]
    varied = family.encode("extra", augmented(train.examples, variants, seed), tokenizer).encoded
    logits = per_token_cache(tmp_path / "cache", len(windows) + len(varied["input_ids"]), 2)  # start and end
    rows = train.encoded["input_ids"] + varied["input_ids"]
    assert all(not logits[i, len(r):].any() for i, r in enumerate(rows))
    answered = [(ids, s, e) for ids, s, e in zip(varied["input_ids"], varied["start_positions"],
                                                  varied["end_positions"]) if s]
    assert len(answered) == len(train.examples) * variants  # a variant's window over its answer points at it
    assert sorted(tokenizer.decode(ids[s:e + 1]) for ids, s, e in answered) == \
        sorted(a.lower() for e in train.examples * variants for a in e.answer_texts)  # uncased
    best = tmp_path / "run" / "best"
    if task == "squad":
        assert load_config(str(best)).hidden_size == 128
    assert main(["evaluate", task, "--model", str(best), "--data", str(data), "--max-length", "72",
                 "--max-eval-examples", "16", "--no-progress"]) == 0
    assert json.loads(capsys.readouterr().out)["f1"] == pytest.approx(results["f1"])
    inputs = tokenizer(["Where was Anna born?"], ["Anna was born in Berlin. She works as a baker."],
                       return_tensors="pt")
    ours = BertForQuestionAnswering.from_pretrained(best).eval()
    theirs = transformers.AutoModelForQuestionAnswering.from_pretrained(best).eval()
    with torch.no_grad():
        mine, reference = ours(**inputs), theirs(**inputs)
    for key in ("start_logits", "end_logits"):
        torch.testing.assert_close(reference[key], mine[key], atol=1e-5, rtol=1e-4)


def test_unlabelled_questions_get_the_teachers_spans_and_no_label_loss(wide_base, tmp_path, capsys):
    """Questions without answers from a table and from a SQuAD file (its answers not read): their windows join
    the training windows and the question variants with the teacher's outputs, unlabelled (the span loss skips
    them); `distill --unlabelled` runs on them end to end."""
    data = squad_folder(tmp_path / "data", version_2=False)
    finetune("squad", wide_base, data, tmp_path / "teacher", **QA)
    teacher = tmp_path / "teacher" / "best"
    paragraphs = json.loads((data / "train-v1.1.json").read_text())["data"][0]["paragraphs"]
    table = write_jsonl(tmp_path / "questions.jsonl",
                        [{"question": f"Who works in {PLACES[i % 4]}?", "context": p["context"]}
                         for i, p in enumerate(paragraphs[:3])])
    answered = tmp_path / "more.json"  # a SQuAD file: its questions count, their answers are not read
    answered.write_text(json.dumps({"version": "1.1", "data": [{"title": "t", "paragraphs": paragraphs[3:5]}]}))
    family = make_family("squad", data, 72)
    questions = read_unlabelled_questions([table, answered], family)
    assert [(q.question, q.answer_texts) for q in questions[:4]] == [
        ("Who works in Berlin?", []), ("Who works in New York?", []), ("Who works in Zanzibar?", []),
        (paragraphs[3]["qas"][0]["question"], [])]
    assert len(questions) == 3 + 4

    tokenizer = BertTokenizer.from_pretrained(teacher)
    train = family.read("train", tokenizer)
    encoded, cached = distill_rows(family, train, tokenizer, load_teacher(family, teacher), teacher, 1,
                                   [table, answered], False, tmp_path / "rows", batch_size=8, seed=1, progress=False)
    windows = len(train.encoded["input_ids"])
    varied = len(family.encode("extra", augmented(train.examples, 1, 1), tokenizer).encoded["input_ids"])
    added = len(family.encode("extra", questions, tokenizer).encoded["input_ids"])
    assert added > len(questions)  # a paragraph longer than a window: several windows a question
    assert encoded["labelled"] == [1] * (windows + varied) + [0] * added and not cached
    assert len(encoded["teacher_logits"]) == len(encoded["input_ids"]) == windows + varied + added

    results = distill("squad", teacher, "tiny", data, tmp_path / "run", cache_dir=tmp_path / "cache", prune=True,
                      augment=0, unlabelled=[table, answered], **QA)
    assert 0 <= results["f1"] <= 100
    trained_rows(tmp_path / "run")
    per_token_cache(tmp_path / "cache", windows + added, 2)
    record = json.loads((tmp_path / "run" / "args.json").read_text())["extra"]
    assert record["distill_rows"] == windows + added and record["unlabelled"] == [str(table), str(answered)]

    (tmp_path / "bad.jsonl").write_text(json.dumps({"question": "Where?"}) + "\n")
    with pytest.raises(BertforgeError) as e:
        read_unlabelled_questions([tmp_path / "bad.jsonl"], family)
    assert one_line_error(e, "bad.jsonl:1", "'context'")


def test_the_default_command_says_and_records_its_choices_and_resumes_them(teacher, sst2, tmp_path, capsys,
                                                                            monkeypatch):
    """With no recipe flag, 48 examples (the row count and step floor made small) get variants and epochs; a
    resumed run goes on with them, though the command line still names none."""
    monkeypatch.setitem(recipes.DISTILL, "augment_rows", 96)
    monkeypatch.setitem(recipes.DISTILL, "min_steps", 20)

    def run(out, *extra):
        return main(["distill", "sst2", "--teacher", str(teacher), "--student", "tiny", "--prune", "--data",
                     str(sst2), "--out", str(out), "--max-train-examples", "48", "--max-eval-examples", "16",
                     "--batch-size", "8", "--no-progress", "--cache-dir", str(tmp_path / "cache"), "--save-every",
                     "5", "--keep", "5", "--keep-checkpoints", *extra])

    whole = tmp_path / "whole"
    assert run(whole) == 0
    said = capsys.readouterr().err
    assert "distilling at lr 0.0001, batch 8, --augment 1, 2 epochs (lr 0.0001: a student that starts trained; " \
           "--augment 1: 48 training examples, under 96; 2 epochs: 24 steps over 96 rows" in said, said
    extra = json.loads((whole / "args.json").read_text())["extra"]
    assert (extra["recipe"], extra["augment"], extra["epochs"], extra["distill_rows"]) == ("adaptive", 1, 2, 96)
    assert "--augment 1" in extra["chosen_by"]
    resumed = tmp_path / "resumed"
    shutil.copytree(whole, resumed)
    for name in ("step-0000015", "step-0000020", "step-0000024", "final", "best", "eval_results.json"):
        target = resumed / name
        shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)
    monkeypatch.setitem(recipes.DISTILL, "augment_rows", 20_000)  # another rule now: the run goes on as it began
    assert run(resumed, "--resume") == 0
    assert "--augment 1, 2 epochs (lr 0.0001: a student that starts trained; --augment 1: 48" in \
        capsys.readouterr().err  # and says why, as it began
    record = json.loads((resumed / "args.json").read_text())
    assert record["extra"]["chosen_by"] == extra["chosen_by"]
    assert list(record["resumed"][-1]["changed"]) == ["out"]  # the copy's folder; not why, nor the teacher's
    # outputs now read from the cache
    final = [run / "final" / "model.safetensors" for run in (resumed, whole)]
    assert final[0].read_bytes() == final[1].read_bytes()


def test_the_labels_alone_never_run_the_teacher_on_training_rows_and_match_the_distillations_steps(
        teacher, sst2, tmp_path, capsys, monkeypatch):
    """--alpha 1, the control of a distillation: no teacher outputs computed or cached, the training rows alone,
    and the epochs that make the steps the distillation makes with its variants (48 examples and 1 variant each:
    2 epochs of 12 steps; the labels alone: 4 epochs of 6); --augment with it refused in one line."""
    monkeypatch.setitem(recipes.DISTILL, "augment_rows", 96)
    monkeypatch.setitem(recipes.DISTILL, "min_steps", 20)

    def run(out, *extra):
        return main(["distill", "sst2", "--teacher", str(teacher), "--student", "tiny", "--prune", "--data",
                     str(sst2), "--out", str(out), "--max-train-examples", "48", "--max-eval-examples", "16",
                     "--batch-size", "8", "--no-progress", "--cache-dir", str(tmp_path / f"cache-{out.name}"), *extra])

    assert run(tmp_path / "distilled") == 0 and run(tmp_path / "labels", "--alpha", "1") == 0
    said = capsys.readouterr().err
    assert "training on the labels alone at lr 0.0001, batch 8, --augment 0, 4 epochs (lr 0.0001: a student that " \
           "starts trained; 4 epochs: the 24 steps a distillation with --augment 1 makes over 96 rows)" in said
    distilled, labels = (json.loads((tmp_path / name / "args.json").read_text()) for name in ("distilled", "labels"))
    assert distilled["steps"] == labels["steps"] == 24
    assert (labels["extra"]["distill_rows"], labels["extra"]["augment"], labels["extra"]["epochs"]) == (48, 0, 4)
    assert list((tmp_path / "cache-distilled").glob("*.npy")) and not list((tmp_path / "cache-labels").glob("*"))
    logged = [json.loads(line) for line in (tmp_path / "labels" / "metrics.jsonl").read_text().splitlines()]
    assert all("distill_loss" not in row for row in logged)  # the student's own loss
    assert run(tmp_path / "refused", "--alpha", "1", "--augment", "2") == 2
    assert "--augment with --alpha 1: the labels alone are trained on" in capsys.readouterr().err


def test_a_student_with_nan_weights_stops_the_run_without_best(teacher, sst2, tmp_path, capsys):
    run = tmp_path / "run"
    assert main(["distill", "sst2", "--teacher", str(teacher), "--student", str(nan_weights(teacher, tmp_path / "s")),
                 "--data", str(sst2), "--out", str(run), "--max-train-examples", "48", "--max-eval-examples", "16",
                 "--augment", "0", "--epochs", "2", "--batch-size", "8", "--no-progress",
                 "--cache-dir", str(tmp_path / "cache")]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("bertforge: error: step 10: the loss or its gradient")
    assert not any((run / name).exists() for name in ("best", "final", "eval_results.json"))


def test_encoder_share_counts_the_layers_not_the_embeddings_nor_the_head():
    config = dict(vocab_size=100, max_position_embeddings=32, intermediate_size=64)
    teacher = BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=4, num_attention_heads=2,
                                                       **config))
    student = BertForSequenceClassification(BertConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                       **{**config, "vocab_size": 5000}).with_labels(list("abcdefghi")))
    layer = sum(p.numel() for p in teacher.bert.encoder.layer[0].parameters())
    pooler = sum(p.numel() for p in teacher.bert.pooler.parameters())
    assert encoder_share(student, teacher) == pytest.approx((layer + pooler) / (4 * layer + pooler))
    assert encoder_share(teacher, teacher) == 1


def test_a_students_start():
    assert [student_start(*a) for a in (("mini", None, True), ("tiny", [0, 1], False), ("mini", None, False),
                                        ("/a/model", None, False))] == ["cut", "layers", "random", "checkpoint"]
