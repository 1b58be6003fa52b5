"""Every job on a ModernBERT folder, a RoBERTa, an XLM-RoBERTa, a DistilBERT, an ELECTRA and an MPNet one, as
transformers writes them (conftest.modernbert_folder, conftest.roberta_folder, ...: tokenizers of their own kind,
random weights at a scaled-down shape): pipelines against transformers' pipelines, info, fine-tuning, evaluation,
prediction, ONNX export, serving and distillation, each through the architecture registry."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import bertforge
from bertforge.model.architectures.registry import ARCHITECTURES, heads_of, read_config
from bertforge.model.architectures.heads import HEADS
from tests.conftest import REPO, distilbert_folder, modernbert_folder, roberta_folder
from tests.conftest import electra_folder, mpnet_folder
from tests.inference.test_pipelines import assert_same, best_span

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

TEXTS = ["A gripping film, beautifully shot.", "George Washington was born in Virginia in 1732.",
         "A dull mess that never finds its feet, " * 6 + "and it goes on.", "Paris"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {}

    def make(head, **config):
        key = (head, repr(sorted(config.items())))
        if key not in made:
            made[key] = modernbert_folder(tmp_path_factory.mktemp(head), head, **config)
        return made[key]
    return make


def reference(task, folder, **kw):
    return transformers.pipeline(task, model=str(folder), device="cpu", **kw)


def test_every_head_of_the_registry_has_a_modernbert_class_but_the_pre_training_one():
    arch = ARCHITECTURES["modernbert"]
    assert set(HEADS) - set(arch.heads()) == {"BertForPreTraining"}  # ModernBERT pre-trains without NSP


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_text_classification_is_the_references(folders, pooling):
    folder = folders("ModernBertForSequenceClassification", num_labels=3, classifier_pooling=pooling)
    assert_same(bertforge.pipeline(model=folder)(TEXTS, top_k=None),
                reference("text-classification", folder)(TEXTS, top_k=None))


def test_fill_mask_is_the_references(folders):
    folder = folders("ModernBertForMaskedLM")
    texts = ["The capital of France is [MASK].", "George [MASK] was born in Virginia."]
    assert_same(bertforge.pipeline("fill-mask", model=folder)(texts, top_k=3),
                reference("fill-mask", folder)(texts, top_k=3))


def test_token_classification_is_the_references(folders):
    folder = folders("ModernBertForTokenClassification", num_labels=5,
                     id2label={0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"})
    ours = bertforge.pipeline(model=folder)(TEXTS, aggregation_strategy="none")
    theirs = reference("token-classification", folder)(TEXTS, aggregation_strategy="none")
    for a, b in zip(ours, theirs, strict=True):
        assert_same([{k: e[k] for k in ("entity", "score", "index", "start", "end")} for e in a],
                    [{k: e[k] for k in ("entity", "score", "index", "start", "end")} for e in b])


def test_question_answering_answers_the_reference_models_best_span(folders):
    """One window: the answer is the brute-force best span of transformers' logits, sliced by the reference
    tokenizer's character offsets (byte-level BPE's include the space before a word, as transformers' do)."""
    folder = folders("ModernBertForQuestionAnswering")
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    ref_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    question, context = "Who wrote it?", "The novel was written by Jane Austen in 1813, in Hampshire."
    answer = bertforge.pipeline(model=folder)(question=question, context=context)
    enc = ref_tokenizer(question, context, return_offsets_mapping=True, return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].tolist()
    in_context = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
    with torch.no_grad():
        out = model(**enc)
    (s, e), _ = best_span(out.start_logits[0].numpy(), out.end_logits[0].numpy(), in_context[0], in_context[-1])
    assert (answer["start"], answer["end"]) == (offsets[s][0], offsets[e][1])
    assert answer["answer"] == context[answer["start"]:answer["end"]] and 0 < answer["score"] <= 1


def test_feature_extraction_is_the_reference_models_hidden_states(folders):
    folder = folders("ModernBertForMaskedLM")
    tokens = bertforge.pipeline("feature-extraction", model=folder)(TEXTS[0])
    model = transformers.AutoModel.from_pretrained(folder).eval()
    ids = transformers.AutoTokenizer.from_pretrained(folder)(TEXTS[0], return_tensors="pt")
    with torch.no_grad():
        expected = model(**ids).last_hidden_state[0]
    assert torch.allclose(torch.tensor(tokens), expected, atol=1e-4)


def sentence_folder(folder: Path, **config) -> Path:
    """gte-modernbert's layout: a ModernBERT encoder, mean pooling, unit vectors."""
    folder = modernbert_folder(folder, "ModernBertModel", **config)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    width = config.get("hidden_size", 64)
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": width,
                                                                  "pooling_mode": "mean"}))
    (folder / "2_Normalize").mkdir()
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 512, "do_lower_case": False}))
    return folder


def test_a_sentence_transformers_folder_of_modernbert_embeds_as_sentence_transformers(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    folder = sentence_folder(tmp_path / "st")
    ours = bertforge.pipeline(model=folder)(TEXTS)
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(TEXTS)
    assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-4)


def bertforge_cli(*args, timeout=300, env_cache=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"BERTFORGE_CACHE": str(env_cache)} if env_cache else {})}
    return subprocess.run([sys.executable, "-m", "bertforge", *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, env=env)


def test_info_describes_the_attention_and_the_tokenizer(folders):
    result = bertforge_cli("info", folders("ModernBertForMaskedLM"))
    assert result.returncode == 0, result.stderr
    assert "architecture:  ModernBertForMaskedLM" in result.stdout
    assert "global in layers 0, 3, a window of 8 tokens each side elsewhere" in result.stdout
    assert "BPE (tokenizer.json)" in result.stdout and "prediction head, masked-LM decoder" in result.stdout


def test_finetune_evaluate_predict_and_export_run_on_modernbert(folders, tmp_path):
    rows = [("a gripping film and beautifully shot", "pos"), ("a dull mess", "neg"), ("wonderful and moving", "pos"),
            ("tedious and flat and long", "neg")] * 8
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in rows))
    run = tmp_path / "run"
    result = bertforge_cli("finetune", "text-classification", "--model", folders("ModernBertForMaskedLM"),
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv", "--epochs", 3,
                           "--out", run, "--no-progress", "--seed", 1)
    assert result.returncode == 0, result.stderr
    config = read_config(run / "best" / "config.json")
    assert config.model_type == "modernbert" and heads_of(config) == ["BertForSequenceClassification"]
    saved = transformers.AutoModelForSequenceClassification.from_pretrained(run / "best").eval()
    ours = bertforge.pipeline(model=run / "best")(TEXTS, top_k=None)
    assert_same(ours, reference("text-classification", run / "best")(TEXTS, top_k=None))
    assert type(saved).__name__ == "ModernBertForSequenceClassification"

    result = bertforge_cli("evaluate", "text-classification", "--model", run / "best", "--dev", tmp_path / "dev.csv")
    assert result.returncode == 0 and json.loads(result.stdout)["accuracy"] >= 0.5, result.stderr
    result = bertforge_cli("predict", "text-classification", "--model", run / "best", "--input", tmp_path / "dev.csv")
    assert result.returncode == 0 and json.loads(result.stdout.splitlines()[0])["label"] in ("pos", "neg")

    pytest.importorskip("onnxruntime")
    result = bertforge_cli("export", "onnx", run / "best", tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    assert_same(bertforge.pipeline(model=tmp_path / "onnx", backend="onnx")(TEXTS, top_k=None), ours)


def test_an_exported_window_holds_rows_longer_than_those_it_was_traced_on(folders, tmp_path):
    """The graph is traced on short samples, which a window of 24 tokens each side holds whole (where the torch
    runtime skips the band); a longer row must still see only its window in the exported graph."""
    pytest.importorskip("onnxruntime")
    from bertforge.inference.export import SAMPLES
    folder = folders("ModernBertForSequenceClassification", num_labels=3, local_attention=48)
    tokenizer = bertforge.BertTokenizer.from_pretrained(folder)
    assert max(len(tokenizer(t)["input_ids"]) for t in SAMPLES[:2]) <= 25 < len(tokenizer(TEXTS[2])["input_ids"])
    result = bertforge_cli("export", "onnx", folder, tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    expected = reference("text-classification", folder)(TEXTS, top_k=None)
    assert_same(bertforge.pipeline(model=folder)(TEXTS, top_k=None), expected)
    assert_same(bertforge.pipeline(model=tmp_path / "onnx", backend="onnx")(TEXTS, top_k=None), expected)


def test_serve_answers_tei_openai_and_bertforge_routes_on_modernbert(folders):
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from tests.serving.test_serve import Served

    classifier = Served(folders("ModernBertForSequenceClassification", num_labels=3)).wait()
    embedder = Served(folders("ModernBertForMaskedLM"), "--task", "sentence-embedding").wait()
    try:
        expected = bertforge.pipeline(model=folders("ModernBertForSequenceClassification", num_labels=3))
        assert_same(classifier.post("classify", {"inputs": TEXTS[:2]}).json(), expected(TEXTS[:2]))
        tei = httpx.post(classifier.url + "/predict", json={"inputs": TEXTS[0]}, timeout=60).json()
        assert {s["label"] for s in tei} == {"LABEL_0", "LABEL_1", "LABEL_2"}
        vectors = httpx.post(embedder.url + "/embed", json={"inputs": TEXTS[:2]}, timeout=60).json()
        openai = httpx.post(embedder.url + "/v1/embeddings", json={"input": TEXTS[:2]}, timeout=60).json()
        assert len(vectors) == 2 and len(vectors[0]) == 64
        assert torch.allclose(torch.tensor(vectors), torch.tensor([d["embedding"] for d in openai["data"]]),
                              atol=1e-6)
    finally:
        classifier.stop()
        embedder.stop()


def distil_tiny(tmp_path, width: int, *flags) -> tuple[subprocess.CompletedProcess, Path]:
    """`distill --student tiny` (and `flags`) from a ModernBERT classifier `width` wide, on a few reviews."""
    teacher = modernbert_folder(tmp_path / "teacher", "ModernBertForSequenceClassification", hidden_size=width,
                                intermediate_size=width * 3 // 2, num_attention_heads=4, num_labels=2,
                                id2label={0: "neg", 1: "pos"})
    rows = "".join(f"a gripping film {i},pos\na dull mess {i},neg\n" for i in range(20))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student", "tiny", *flags,
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "tiny", "--no-progress",
                           env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    return result, tmp_path / "tiny" / "best"


def test_distill_cuts_a_modernbert_student_that_transformers_loads_with_the_same_outputs(tmp_path):
    result, best = distil_tiny(tmp_path, 128, "--prune")
    assert "student cut from the teacher's layers 0,3: 128 wide, 4 heads, feed-forward 192" in result.stderr
    student = read_config(best / "config.json")
    assert student.layer_types == ["full_attention", "full_attention"]  # the teacher's layers 0 and 3: global
    reference_model = transformers.AutoModelForSequenceClassification.from_pretrained(best)
    assert type(reference_model).__name__ == "ModernBertForSequenceClassification"
    assert_same(bertforge.pipeline(model=best)(TEXTS, top_k=None),
                reference("text-classification", best)(TEXTS, top_k=None))


def test_distill_makes_a_random_modernbert_student_of_a_size_with_the_teachers_embeddings(tmp_path):
    _, best = distil_tiny(tmp_path, 256)
    student = read_config(best / "config.json")
    assert (student.model_type, student.num_hidden_layers, student.hidden_size) == ("modernbert", 2, 128)
    assert student.intermediate_size == 192 and student.layer_types == ["full_attention", "sliding_attention"]
    assert type(transformers.AutoModelForSequenceClassification.from_pretrained(best)).__name__ \
        == "ModernBertForSequenceClassification"


def test_distill_representations_learn_a_modernbert_teachers_last_layer(tmp_path):
    _, best = distil_tiny(tmp_path, 128, "--prune", "--representations", "both")
    logged = [json.loads(line) for line in (best.parent / "metrics.jsonl").read_text().splitlines()]
    assert logged and all(r["hidden_loss"] > 0 and r["relation_loss"] > 0 for r in logged if "hidden_loss" in r)


def test_the_relations_read_the_query_key_and_value_the_references_attention_reads(tmp_path):
    """ModernBERT's last-layer vectors for the relation term: those transformers' attention computes (before
    the rotary positions) from that layer's input."""
    folder = modernbert_folder(tmp_path / "mb", "ModernBertModel")
    ours = bertforge.BertModel.from_pretrained(folder)
    reference = transformers.ModernBertModel.from_pretrained(folder, attn_implementation="eager").eval()
    seen = []
    reference.layers[-1].attn.Wqkv.register_forward_hook(lambda module, args, out: seen.append(out))
    ids = torch.tensor([[1, 40, 41, 42, 43, 2]])
    with torch.no_grad():
        reference(input_ids=ids)
        hidden_in = ours(input_ids=ids, output_hidden_states=True).hidden_states[-2]
        mine = torch.cat(ours.last_layer_qkv(hidden_in), -1)
    assert torch.allclose(mine, seen[0].reshape(mine.shape), atol=1e-5)


def test_general_distillation_cuts_a_modernbert_student_from_a_modernbert_teacher(tmp_path):
    teacher = modernbert_folder(tmp_path / "teacher", "ModernBertModel", hidden_size=128, intermediate_size=192,
                                num_attention_heads=4)
    lines = "".join(f"The film number {i} was a gripping story of people and places.\n\n" for i in range(200))
    (tmp_path / "corpus.txt").write_text(lines)
    made = bertforge_cli("data", "create", "--input", tmp_path / "corpus.txt", "--vocab", teacher, "--out",
                         tmp_path / "rows", "--max-length", 32, "--no-mask", "--no-nsp", "--no-progress")
    assert made.returncode == 0, made.stderr
    run = bertforge_cli("pretrain", "--data", tmp_path / "rows", "--objective", "distill", "--teacher", teacher,
                        "--config", "tiny", "--prune", "--steps", 3, "--batch-size", 4, "--out", tmp_path / "gd",
                        "--no-progress")
    assert run.returncode == 0, run.stderr
    student = read_config(tmp_path / "gd" / "final" / "config.json")
    assert (student.model_type, student.num_hidden_layers, student.hidden_size) == ("modernbert", 2, 128)
    assert type(transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "gd" / "final")).__name__ \
        == "ModernBertForMaskedLM"


def test_distill_embeddings_cuts_a_modernbert_student_that_sentence_transformers_reads(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    teacher = sentence_folder(tmp_path / "teacher", hidden_size=128, intermediate_size=192, num_attention_heads=4)
    (tmp_path / "lines.txt").write_text("".join(f"a gripping film, number {i}\n" for i in range(40)))
    result = bertforge_cli("distill", "embeddings", "--teacher", teacher, "--student", "tiny", "--prune", "--input",
                           tmp_path / "lines.txt", "--epochs", 1, "--batch-size", 8, "--held-out", 0.2, "--out",
                           tmp_path / "run", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    best = tmp_path / "run" / "best"
    assert read_config(best / "config.json").model_type == "modernbert"
    ours = bertforge.pipeline(model=best)(TEXTS)
    theirs = st.SentenceTransformer(str(best), device="cpu").encode(TEXTS)
    assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-4)


# ---------------------------------------------------------------------------------------------------------
# RoBERTa and XLM-RoBERTa (conftest.roberta_folder: byte-level BPE or a SentencePiece unigram model, random weights
# at a scaled-down shape, positions counted from pad_token_id + 1): every job on each family

FAMILIES = ["Roberta", "XLMRoberta"]
SHORT = TEXTS[:2] + ["北京是中国的首都 🙂, naïve résumé", "Paris"]  # within 128 tokens: the reference's windows
ROWS = [("a gripping film and beautifully shot", "pos"), ("a dull mess", "neg"), ("wonderful and moving 🙂", "pos"),
        ("tedious and flat and long", "neg"), ("北京 很好", "pos"), ("naïve et ennuyeux", "neg")] * 6


@pytest.fixture(scope="module")
def roberta_folders(tmp_path_factory):
    made = {}

    def make(head, **config):
        key = (head, repr(sorted(config.items())))
        if key not in made:
            made[key] = roberta_folder(tmp_path_factory.mktemp(head), head, **config)
        return made[key]
    return make


@pytest.mark.parametrize("family", FAMILIES)
def test_every_head_of_the_registry_but_pre_training_has_a_class_of_each_family(family):
    arch = ARCHITECTURES["xlm-roberta" if family == "XLMRoberta" else "roberta"]
    assert set(HEADS) - set(arch.heads()) == {"BertForPreTraining"}
    assert arch.classes["BertForMaskedLM"] == f"bertforge.model.architectures.roberta:{family}ForMaskedLM"


@pytest.mark.parametrize("family", FAMILIES)
def test_pipelines_on_each_family_are_the_references(roberta_folders, family):
    """Text classification (a text over the 128 tokens cut as transformers truncates it), fill-mask with <mask>,
    token classification and feature extraction."""
    folder = roberta_folders(family + "ForSequenceClassification", num_labels=3)
    assert_same(bertforge.pipeline(model=folder)(TEXTS, top_k=None),
                reference("text-classification", folder)(TEXTS, top_k=None, truncation=True))
    folder = roberta_folders(family + "ForMaskedLM")
    texts = ["The capital of France is <mask>.", "George <mask> was born in Virginia."]
    assert_same(bertforge.pipeline("fill-mask", model=folder)(texts, top_k=3),
                reference("fill-mask", folder)(texts, top_k=3))
    tokens = bertforge.pipeline("feature-extraction", model=folder)(SHORT[2])
    ids = transformers.AutoTokenizer.from_pretrained(folder)(SHORT[2], return_tensors="pt")
    with torch.no_grad():
        expected = transformers.AutoModel.from_pretrained(folder).eval()(**ids).last_hidden_state[0]
    assert torch.allclose(torch.tensor(tokens), expected, atol=1e-4)
    folder = roberta_folders(family + "ForTokenClassification", num_labels=5,
                             id2label={0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"})
    keys = ("entity", "score", "index", "start", "end")
    ours = bertforge.pipeline(model=folder)(SHORT, aggregation_strategy="none")
    theirs = reference("token-classification", folder)(SHORT, aggregation_strategy="none")
    for a, b in zip(ours, theirs, strict=True):
        assert_same([{k: e[k] for k in keys} for e in a], [{k: e[k] for k in keys} for e in b])
    unknown = "George Жуков was born in Virginia."  # letters the vocabulary lacks: <unk>, its word the text's
    ours = bertforge.pipeline(model=folder)(unknown, aggregation_strategy="none")
    theirs = reference("token-classification", folder)(unknown, aggregation_strategy="none")
    assert [e["word"] for e in ours] == [e["word"] for e in theirs]


@pytest.mark.parametrize("family", FAMILIES)
def test_question_answering_on_each_family_answers_the_reference_models_best_span(roberta_folders, family):
    """The windows laid out as the tokenizer lays out a pair (<s> question </s></s> passage </s>): the answer is
    the brute-force best span of transformers' logits on its own encoding, sliced by its offsets."""
    folder = roberta_folders(family + "ForQuestionAnswering")
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    question, context = "Who wrote it?", "The novel was written by Jane Austen in 1813, in Hampshire."
    answer = bertforge.pipeline(model=folder)(question=question, context=context)
    enc = transformers.AutoTokenizer.from_pretrained(folder)(question, context, return_offsets_mapping=True,
                                                             return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].tolist()
    in_context = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
    with torch.no_grad():
        out = model(**enc)
    (s, e), _ = best_span(out.start_logits[0].numpy(), out.end_logits[0].numpy(), in_context[0], in_context[-1])
    assert (answer["start"], answer["end"]) == (offsets[s][0], offsets[e][1])


def roberta_sentence_folder(folder: Path, head: str, make=roberta_folder, **config) -> Path:
    """multilingual-e5's layout (all-distilroberta-v1's on RoBERTa): the encoder (`make`'s), mean pooling, unit
    vectors."""
    folder = make(folder, head, **config)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "embedding_dimension": config.get("hidden_size", 64), "pooling_mode": "mean"}))
    (folder / "2_Normalize").mkdir()
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    return folder


@pytest.mark.parametrize("family", FAMILIES)
def test_a_sentence_transformers_folder_of_each_family_embeds_as_sentence_transformers(tmp_path, family):
    st = pytest.importorskip("sentence_transformers")
    folder = roberta_sentence_folder(tmp_path / "st", family + "Model")
    ours = bertforge.pipeline(model=folder)(TEXTS + SHORT)
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(TEXTS + SHORT)
    assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-4)


@pytest.mark.parametrize("family", FAMILIES)
def test_finetune_evaluate_predict_info_and_export_run_on_each_family(roberta_folders, tmp_path, family):
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in ROWS))
    run = tmp_path / "run"
    result = bertforge_cli("finetune", "text-classification", "--model", roberta_folders(family + "ForMaskedLM"),
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv", "--epochs", 2,
                           "--out", run, "--no-progress", "--seed", 1)
    assert result.returncode == 0, result.stderr
    config = read_config(run / "best" / "config.json")
    assert config.model_type == ARCHITECTURES[config.model_type].model_type == \
        ("xlm-roberta" if family == "XLMRoberta" else "roberta")
    assert heads_of(config) == ["BertForSequenceClassification"]
    saved = transformers.AutoModelForSequenceClassification.from_pretrained(run / "best").eval()
    assert type(saved).__name__ == family + "ForSequenceClassification"
    ours = bertforge.pipeline(model=run / "best")(TEXTS, top_k=None)
    assert_same(ours, reference("text-classification", run / "best")(TEXTS, top_k=None, truncation=True))

    result = bertforge_cli("evaluate", "text-classification", "--model", run / "best", "--dev", tmp_path / "dev.csv")
    assert result.returncode == 0 and 0 <= json.loads(result.stdout)["accuracy"] <= 1, result.stderr
    result = bertforge_cli("predict", "text-classification", "--model", run / "best", "--input", tmp_path / "dev.csv")
    assert result.returncode == 0 and json.loads(result.stdout.splitlines()[0])["label"] in ("pos", "neg")
    result = bertforge_cli("info", run / "best")
    assert result.returncode == 0 and f"architecture:  {family}ForSequenceClassification" in result.stdout
    assert "128 positions" in result.stdout and "classifier (2 outputs: neg, pos)" in result.stdout

    pytest.importorskip("onnxruntime")
    result = bertforge_cli("export", "onnx", run / "best", tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    assert_same(bertforge.pipeline(model=tmp_path / "onnx", backend="onnx")(TEXTS, top_k=None), ours)


@pytest.mark.parametrize("family", FAMILIES)
def test_an_exported_masked_lm_of_each_family_fills_masks_as_pytorch_does(roberta_folders, tmp_path, family):
    """Traced on sample rows holding the tokenizer's own mask token, <mask>."""
    pytest.importorskip("onnxruntime")
    folder = roberta_folders(family + "ForMaskedLM")
    result = bertforge_cli("export", "onnx", folder, tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    texts = ["The capital of France is <mask>.", "George <mask> was born in Virginia, " * 3 + "in 1732."]
    assert_same(bertforge.pipeline("fill-mask", model=tmp_path / "onnx", backend="onnx")(texts, top_k=3),
                bertforge.pipeline("fill-mask", model=folder)(texts, top_k=3))


def test_serve_answers_tei_openai_and_bertforge_routes_on_xlm_roberta(roberta_folders, tmp_path):
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from tests.serving.test_serve import Served

    folder = roberta_folders("XLMRobertaForSequenceClassification", num_labels=3)
    classifier = Served(folder).wait()
    embedder = Served(roberta_sentence_folder(tmp_path / "e5", "XLMRobertaModel")).wait()
    try:
        assert_same(classifier.post("classify", {"inputs": SHORT}).json(), bertforge.pipeline(model=folder)(SHORT))
        tei = httpx.post(classifier.url + "/predict", json={"inputs": SHORT[2]}, timeout=60).json()
        assert {s["label"] for s in tei} == {"LABEL_0", "LABEL_1", "LABEL_2"}
        vectors = httpx.post(embedder.url + "/embed", json={"inputs": SHORT}, timeout=60).json()
        openai = httpx.post(embedder.url + "/v1/embeddings", json={"input": SHORT}, timeout=60).json()
        expected = bertforge.pipeline(model=tmp_path / "e5")(SHORT)
        assert torch.allclose(torch.tensor(vectors), torch.tensor(expected), atol=1e-5)
        assert torch.allclose(torch.tensor(vectors), torch.tensor([d["embedding"] for d in openai["data"]]),
                              atol=1e-6)
    finally:
        classifier.stop()
        embedder.stop()


@pytest.mark.parametrize("family", FAMILIES)
def test_distill_cuts_a_student_of_each_family_that_transformers_loads_with_the_same_outputs(tmp_path, family):
    """A teacher 256 wide cut to tiny (2 layers of 128, heads of the teacher's size; the sentence classifier's
    dense layer cut as a pooler), and a student of two of its layers."""
    teacher = roberta_folder(tmp_path / "teacher", family + "ForSequenceClassification", hidden_size=256,
                             intermediate_size=1024, num_attention_heads=4, num_labels=2,
                             id2label={0: "neg", 1: "pos"})
    rows = "".join(f"a gripping film {i},pos\na dull mess {i},neg\n" for i in range(20))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student", "tiny", "--prune",
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "tiny", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "student cut from the teacher's layers 0,3: 128 wide, 2 heads, feed-forward 512" in result.stderr
    best = tmp_path / "tiny" / "best"
    student = read_config(best / "config.json")
    assert (type(student), student.max_tokens, student.type_vocab_size) == (type(read_config(teacher / "config.json")),
                                                                           128, 1)
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(best)
    assert type(loaded).__name__ == family + "ForSequenceClassification"
    assert_same(bertforge.pipeline(model=best)(TEXTS, top_k=None),
                reference("text-classification", best)(TEXTS, top_k=None, truncation=True))
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student-layers", "0,3",
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "layers", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert type(transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "layers" / "best")) \
        is type(loaded)


def test_distill_embeddings_cuts_an_xlm_roberta_student_that_sentence_transformers_reads(tmp_path):
    """multilingual-e5's case: a student cut from a sentence-transformers folder of XLM-RoBERTa."""
    st = pytest.importorskip("sentence_transformers")
    teacher = roberta_sentence_folder(tmp_path / "teacher", "XLMRobertaModel", hidden_size=256,
                                      intermediate_size=1024, num_attention_heads=4)
    (tmp_path / "lines.txt").write_text("".join(f"a gripping film, number {i}, 北京 🙂\n" for i in range(40)))
    result = bertforge_cli("distill", "embeddings", "--teacher", teacher, "--student", "tiny", "--prune", "--input",
                           tmp_path / "lines.txt", "--epochs", 1, "--batch-size", 8, "--held-out", 0.2, "--out",
                           tmp_path / "run", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    best = tmp_path / "run" / "best"
    assert read_config(best / "config.json").model_type == "xlm-roberta"
    ours = bertforge.pipeline(model=best)(TEXTS + SHORT)
    theirs = st.SentenceTransformer(str(best), device="cpu").encode(TEXTS + SHORT)
    assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-4)


# ---------------------------------------------------------------------------------------------------------
# DistilBERT (conftest.distilbert_folder: WordPiece, random weights at a scaled-down shape, no token types): the
# default sentiment model's layout (an SST-2 classifier) through pipeline(), fine-tuning, export and distillation

SST2 = {"num_labels": 2, "id2label": {0: "NEGATIVE", 1: "POSITIVE"}}


def test_every_head_of_the_registry_but_pre_training_has_a_distilbert_class():
    arch = ARCHITECTURES["distilbert"]
    assert set(HEADS) - set(arch.heads()) == {"BertForPreTraining"} and not arch.segments
    assert arch.classes["BertForSequenceClassification"] == \
        "bertforge.model.architectures.distilbert:DistilBertForSequenceClassification"


def test_pipelines_on_distilbert_are_the_references(tmp_path):
    """transformers' default sentiment model's layout (text classification, a text over the 128 tokens cut as
    transformers truncates it), fill-mask with [MASK], token classification and question answering."""
    folder = distilbert_folder(tmp_path / "sst2", "DistilBertForSequenceClassification", **SST2)
    assert_same(bertforge.pipeline(model=folder)(TEXTS, top_k=None),
                reference("text-classification", folder)(TEXTS, top_k=None, truncation=True))
    folder = distilbert_folder(tmp_path / "mlm", "DistilBertForMaskedLM")
    texts = ["The capital of France is [MASK].", "George [MASK] was born in Virginia."]
    assert_same(bertforge.pipeline("fill-mask", model=folder)(texts, top_k=3),
                reference("fill-mask", folder)(texts, top_k=3))
    folder = distilbert_folder(tmp_path / "ner", "DistilBertForTokenClassification", num_labels=3,
                               id2label={0: "O", 1: "B-PER", 2: "I-PER"})
    keys = ("entity", "score", "index", "start", "end")
    ours = bertforge.pipeline(model=folder)(SHORT, aggregation_strategy="none")
    theirs = reference("token-classification", folder)(SHORT, aggregation_strategy="none")
    for a, b in zip(ours, theirs, strict=True):
        assert_same([{k: e[k] for k in keys} for e in a], [{k: e[k] for k in keys} for e in b])
    folder = distilbert_folder(tmp_path / "qa", "DistilBertForQuestionAnswering")
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    question, context = "Who wrote it?", "The novel was written by Jane Austen in 1813, in Hampshire."
    answer = bertforge.pipeline(model=folder)(question=question, context=context)
    enc = transformers.AutoTokenizer.from_pretrained(folder)(question, context, return_offsets_mapping=True,
                                                             return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].tolist()
    in_context = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
    with torch.no_grad():
        out = model(**enc)
    (s, e), _ = best_span(out.start_logits[0].numpy(), out.end_logits[0].numpy(), in_context[0], in_context[-1])
    assert (answer["start"], answer["end"]) == (offsets[s][0], offsets[e][1])


def test_finetune_and_export_run_on_distilbert(tmp_path):
    """A sentiment classifier fine-tuned from a masked LM on own data, read by transformers with the same
    predictions, exported to ONNX with the same outputs."""
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in ROWS))
    run = tmp_path / "run"
    result = bertforge_cli("finetune", "text-classification", "--model",
                           distilbert_folder(tmp_path / "mlm", "DistilBertForMaskedLM"), "--train",
                           tmp_path / "train.csv", "--dev", tmp_path / "dev.csv", "--epochs", 2, "--out", run,
                           "--no-progress", "--seed", 1)
    assert result.returncode == 0, result.stderr
    assert heads_of(read_config(run / "best" / "config.json")) == ["BertForSequenceClassification"]
    saved = transformers.AutoModelForSequenceClassification.from_pretrained(run / "best").eval()
    assert type(saved).__name__ == "DistilBertForSequenceClassification"
    ours = bertforge.pipeline(model=run / "best")(TEXTS, top_k=None)
    assert_same(ours, reference("text-classification", run / "best")(TEXTS, top_k=None, truncation=True))
    pytest.importorskip("onnxruntime")
    result = bertforge_cli("export", "onnx", run / "best", tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    assert_same(bertforge.pipeline(model=tmp_path / "onnx", backend="onnx")(TEXTS, top_k=None), ours)


def test_finetune_every_family_of_tasks_on_distilbert(tmp_path):
    """Token classification, question answering and multiple choice fine-tuned from a masked LM on own data, each
    read back by transformers as its DistilBERT class."""
    from tests.conftest import fine_tune, write_jsonl

    mlm = distilbert_folder(tmp_path / "mlm", "DistilBertForMaskedLM")
    people, places = ["alice", "bob", "maria", "omar"], ["paris", "lima", "berlin"]
    ner = write_jsonl(tmp_path / "ner.jsonl", [{"tokens": [p, "lives", "in", c, "."],
                                                "tags": ["B-PER", "O", "O", "B-LOC", "O"]}
                                               for p in people for c in places])
    context = "The novel was written by Jane Austen in 1813, in Hampshire."
    squad = write_jsonl(tmp_path / "squad.jsonl", [
        {"question": q, "context": context, "answers": {"text": [a], "answer_start": [context.index(a)]}}
        for q, a in (("Who wrote it?", "Jane Austen"), ("When?", "1813"), ("Where?", "Hampshire"))] * 3)
    quiz = "a gripping film,good,bad,0\na dull mess,good,bad,1\n" * 6
    (tmp_path / "quiz.csv").write_text("question,A,B,answer\n" + quiz)
    runs = {"DistilBertForTokenClassification": ("token-classification", "--train", ner, "--dev", ner),
            "DistilBertForQuestionAnswering": ("question-answering", "--train", squad, "--dev", squad,
                                               "--max-length", 128),
            "DistilBertForMultipleChoice": ("multiple-choice", "--train", tmp_path / "quiz.csv", "--dev",
                                            tmp_path / "quiz.csv", "--choices-columns", "A", "B",
                                            "--label-column", "answer")}
    for name, (task, *flags) in runs.items():
        run = fine_tune(task, mlm, tmp_path / task, *flags, "--epochs", 1, "--batch-size", 4)
        assert type(transformers.AutoConfig.from_pretrained(run / "best")).__name__ == "DistilBertConfig"
        assert json.loads((run / "best" / "config.json").read_text())["architectures"] == [name]
        assert type(getattr(transformers, name).from_pretrained(run / "best")).__name__ == name


@pytest.mark.parametrize("head, task", [("DistilBertForMaskedLM", "fill-mask"),
                                        ("DistilBertForTokenClassification", "token-classification"),
                                        ("DistilBertForQuestionAnswering", "question-answering")])
def test_an_exported_distilbert_head_runs_as_pytorch_does(tmp_path, head, task):
    """Traced on sample rows holding the tokenizer's own mask token, [MASK]; no token_type_ids in the graph."""
    pytest.importorskip("onnxruntime")
    folder = distilbert_folder(tmp_path / "model", head)
    result = bertforge_cli("export", "onnx", folder, tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    exported, ours = (bertforge.pipeline(task, model=tmp_path / "onnx", backend="onnx"),
                      bertforge.pipeline(task, model=folder))
    if task == "question-answering":
        kw = dict(question="Who wrote it?", context="The novel was written by Jane Austen in 1813, in Hampshire.")
        a, b = exported(**kw), ours(**kw)
        assert (a["start"], a["end"]) == (b["start"], b["end"]) and abs(a["score"] - b["score"]) < 1e-5
        return
    texts = ["The capital of France is [MASK].", "George [MASK] was born in Virginia, " * 3 + "in 1732."]
    assert_same(exported(texts, top_k=3) if task == "fill-mask" else exported(texts),
                ours(texts, top_k=3) if task == "fill-mask" else ours(texts))


def test_distill_cuts_a_distilbert_student_that_transformers_loads_with_the_same_outputs(tmp_path):
    """An SST-2 classifier 256 wide of 4 layers cut to tiny (2 layers of 128, heads of the teacher's size;
    pre_classifier cut as a pooler), and a student of two of its layers (distill.teacher_layers asks the registry
    where the layers are)."""
    teacher = distilbert_folder(tmp_path / "teacher", "DistilBertForSequenceClassification", dim=256,
                                hidden_dim=1024, n_heads=4, n_layers=4, **SST2)
    rows = "".join(f"a gripping film {i},POSITIVE\na dull mess {i},NEGATIVE\n" for i in range(20))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student", "tiny", "--prune",
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "tiny", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "student cut from the teacher's layers 0,3: 128 wide, 2 heads, feed-forward 512" in result.stderr
    best = tmp_path / "tiny" / "best"
    student = read_config(best / "config.json")
    assert (student.model_type, student.n_layers, student.dim, student.max_tokens) == ("distilbert", 2, 128, 128)
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(best)
    assert type(loaded).__name__ == "DistilBertForSequenceClassification"
    assert_same(bertforge.pipeline(model=best)(TEXTS, top_k=None),
                reference("text-classification", best)(TEXTS, top_k=None, truncation=True))
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student-layers", "0,3",
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "layers", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert type(transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "layers" / "best")) \
        is type(loaded)


def distilbert_sentence_folder(folder: Path, **config) -> Path:
    """msmarco-distilbert's layout: the encoder, mean pooling, unit vectors."""
    folder = distilbert_folder(folder, "DistilBertModel", **config)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"embedding_dimension": config.get("dim", 64),
                                                                 "pooling_mode": "mean"}))
    (folder / "2_Normalize").mkdir()
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 128, "do_lower_case": False}))
    return folder


def test_a_sentence_transformers_folder_of_distilbert_embeds_as_sentence_transformers(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    folder = distilbert_sentence_folder(tmp_path / "st")
    ours = bertforge.pipeline(model=folder)(TEXTS + SHORT)
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(TEXTS + SHORT)
    assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-4)


def test_distill_embeddings_cuts_a_distilbert_student_that_sentence_transformers_reads(tmp_path):
    """A student cut from a sentence-transformers folder of DistilBERT (its width read from config.json's `dim`)."""
    st = pytest.importorskip("sentence_transformers")
    teacher = distilbert_sentence_folder(tmp_path / "teacher", dim=256, hidden_dim=1024, n_heads=4, n_layers=4)
    (tmp_path / "lines.txt").write_text("".join(f"a gripping film, number {i}, 北京 🙂\n" for i in range(40)))
    result = bertforge_cli("distill", "embeddings", "--teacher", teacher, "--student", "tiny", "--prune", "--input",
                           tmp_path / "lines.txt", "--epochs", 1, "--batch-size", 8, "--held-out", 0.2, "--out",
                           tmp_path / "run", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    best = tmp_path / "run" / "best"
    assert read_config(best / "config.json").model_type == "distilbert"
    ours = bertforge.pipeline(model=best)(TEXTS + SHORT)
    theirs = st.SentenceTransformer(str(best), device="cpu").encode(TEXTS + SHORT)
    assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-4)


def test_serve_answers_tei_openai_and_bertforge_routes_on_distilbert(tmp_path):
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from tests.serving.test_serve import Served

    folder = distilbert_folder(tmp_path / "sst2", "DistilBertForSequenceClassification", **SST2)
    classifier = Served(folder).wait()
    embedder = Served(distilbert_sentence_folder(tmp_path / "st")).wait()
    try:
        assert_same(classifier.post("classify", {"inputs": SHORT}).json(), bertforge.pipeline(model=folder)(SHORT))
        tei = httpx.post(classifier.url + "/predict", json={"inputs": SHORT[2]}, timeout=60).json()
        assert {s["label"] for s in tei} == {"NEGATIVE", "POSITIVE"}
        vectors = httpx.post(embedder.url + "/embed", json={"inputs": SHORT}, timeout=60).json()
        openai = httpx.post(embedder.url + "/v1/embeddings", json={"input": SHORT}, timeout=60).json()
        expected = bertforge.pipeline(model=tmp_path / "st")(SHORT)
        assert torch.allclose(torch.tensor(vectors), torch.tensor(expected), atol=1e-5)
        assert torch.allclose(torch.tensor(vectors), torch.tensor([d["embedding"] for d in openai["data"]]),
                              atol=1e-6)
    finally:
        classifier.stop()
        embedder.stop()


# ---------------------------------------------------------------------------------------------------------
# ELECTRA (conftest.electra_folder: WordPiece with segments, tables 32 wide projected onto an encoder 64 wide,
# random weights): every job on the discriminator's family


@pytest.fixture(scope="module")
def electra_folders(tmp_path_factory):
    made = {}

    def make(head, **config):
        key = (head, repr(sorted(config.items())))
        if key not in made:
            made[key] = electra_folder(tmp_path_factory.mktemp(head), head, **config)
        return made[key]
    return make


def test_every_head_of_the_registry_but_pre_training_has_an_electra_class():
    arch = ARCHITECTURES["electra"]
    assert set(HEADS) - set(arch.heads()) == {"BertForPreTraining"}
    assert arch.classes["BertForMultipleChoice"] == "bertforge.model.architectures.electra:ElectraForMultipleChoice"


def test_pipelines_on_electra_are_the_references(electra_folders):
    """Text classification on texts and pairs (a text over the 128 tokens cut as transformers truncates it), and
    token classification."""
    folder = electra_folders("ElectraForSequenceClassification", num_labels=3)
    assert_same(bertforge.pipeline(model=folder)(TEXTS, top_k=None),
                reference("text-classification", folder)(TEXTS, top_k=None, truncation=True))
    pairs = [{"text": a, "text_pair": b} for a, b in zip(SHORT, reversed(SHORT))]
    assert_same(bertforge.pipeline(model=folder)(pairs, top_k=None),
                reference("text-classification", folder)(pairs, top_k=None))
    folder = electra_folders("ElectraForTokenClassification", num_labels=5,
                             id2label={0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"})
    keys = ("entity", "score", "index", "start", "end")
    ours = bertforge.pipeline(model=folder)(SHORT, aggregation_strategy="none")
    theirs = reference("token-classification", folder)(SHORT, aggregation_strategy="none")
    for a, b in zip(ours, theirs, strict=True):
        assert_same([{k: e[k] for k in keys} for e in a], [{k: e[k] for k in keys} for e in b])


def test_finetune_and_export_run_on_an_electra_discriminator_checkpoint(electra_folders, tmp_path):
    """From google/electra-*-discriminator's layout (ElectraForPreTraining: its replaced-token head unused), a
    classifier transformers loads, and its ONNX export with the same outputs."""
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in ROWS))
    run = tmp_path / "run"
    result = bertforge_cli("finetune", "text-classification", "--model", electra_folders("ElectraForPreTraining"),
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv", "--epochs", 2,
                           "--out", run, "--no-progress", "--seed", 1)
    assert result.returncode == 0, result.stderr
    assert heads_of(read_config(run / "best" / "config.json")) == ["BertForSequenceClassification"]
    saved = transformers.AutoModelForSequenceClassification.from_pretrained(run / "best").eval()
    assert type(saved).__name__ == "ElectraForSequenceClassification"
    ours = bertforge.pipeline(model=run / "best")(TEXTS, top_k=None)
    assert_same(ours, reference("text-classification", run / "best")(TEXTS, top_k=None, truncation=True))
    pytest.importorskip("onnxruntime")
    result = bertforge_cli("export", "onnx", run / "best", tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    assert_same(bertforge.pipeline(model=tmp_path / "onnx", backend="onnx")(TEXTS, top_k=None), ours)


def test_distill_cuts_an_electra_student_that_transformers_loads_with_the_same_outputs(tmp_path):
    """A teacher 256 wide on tables 64 wide cut to tiny (2 layers of 128, heads of the teacher's size; the tables
    whole, their projection cut, the sentence classifier's dense layer cut as a pooler)."""
    teacher = electra_folder(tmp_path / "teacher", "ElectraForSequenceClassification", embedding_size=64,
                             hidden_size=256, intermediate_size=1024, num_attention_heads=4, num_labels=2,
                             id2label={0: "neg", 1: "pos"})
    rows = "".join(f"a gripping film {i},pos\na dull mess {i},neg\n" for i in range(20))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student", "tiny", "--prune",
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "tiny", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "student cut from the teacher's layers 0,3: 128 wide, 2 heads, feed-forward 512" in result.stderr
    best = tmp_path / "tiny" / "best"
    student = read_config(best / "config.json")
    assert (student.model_type, student.embedding_size, student.hidden_size) == ("electra", 64, 128)
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(best)
    assert type(loaded).__name__ == "ElectraForSequenceClassification"
    assert_same(bertforge.pipeline(model=best)(TEXTS, top_k=None),
                reference("text-classification", best)(TEXTS, top_k=None, truncation=True))
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student-layers", "0,3",
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "layers", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    layers = tmp_path / "layers" / "best"
    assert type(transformers.AutoModelForSequenceClassification.from_pretrained(layers)) is type(loaded)
    assert_same(bertforge.pipeline(model=layers)(TEXTS, top_k=None),
                reference("text-classification", layers)(TEXTS, top_k=None, truncation=True))


def test_fill_mask_question_answering_and_features_on_electra_are_the_references(electra_folders):
    """The generator's masked LM fills [MASK] as transformers' pipeline; question answering answers the reference
    model's best span ([CLS] question [SEP] passage [SEP], sentence B's segments); feature extraction gives its
    hidden states."""
    folder = electra_folders("ElectraForMaskedLM")
    texts = ["The capital of France is [MASK].", "George [MASK] was born in Virginia."]
    assert_same(bertforge.pipeline("fill-mask", model=folder)(texts, top_k=3),
                reference("fill-mask", folder)(texts, top_k=3))
    tokens = bertforge.pipeline("feature-extraction", model=folder)(SHORT[2])
    ids = transformers.AutoTokenizer.from_pretrained(folder)(SHORT[2], return_tensors="pt")
    with torch.no_grad():
        expected = transformers.AutoModel.from_pretrained(folder).eval()(**ids).last_hidden_state[0]
    assert torch.allclose(torch.tensor(tokens), expected, atol=1e-4)
    folder = electra_folders("ElectraForQuestionAnswering")
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    question, context = "Who wrote it?", "The novel was written by Jane Austen in 1813, in Hampshire."
    answer = bertforge.pipeline(model=folder)(question=question, context=context)
    enc = transformers.AutoTokenizer.from_pretrained(folder)(question, context, return_offsets_mapping=True,
                                                             return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].tolist()
    in_context = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
    with torch.no_grad():
        out = model(**enc)
    (s, e), _ = best_span(out.start_logits[0].numpy(), out.end_logits[0].numpy(), in_context[0], in_context[-1])
    assert (answer["start"], answer["end"]) == (offsets[s][0], offsets[e][1])


def test_info_and_serve_on_electra(electra_folders):
    result = bertforge_cli("info", electra_folders("ElectraForSequenceClassification", num_labels=3))
    assert result.returncode == 0 and "architecture:  ElectraForSequenceClassification" in result.stdout, \
        result.stderr
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from tests.serving.test_serve import Served

    folder = electra_folders("ElectraForSequenceClassification", num_labels=3)
    classifier = Served(folder).wait()
    try:
        assert_same(classifier.post("classify", {"inputs": SHORT}).json(), bertforge.pipeline(model=folder)(SHORT))
        tei = httpx.post(classifier.url + "/predict", json={"inputs": SHORT[2]}, timeout=60).json()
        assert {s["label"] for s in tei} == {"LABEL_0", "LABEL_1", "LABEL_2"}
    finally:
        classifier.stop()


def test_a_sentence_transformers_folder_of_electra_embeds_as_sentence_transformers(tmp_path):
    st = pytest.importorskip("sentence_transformers")
    folder = roberta_sentence_folder(tmp_path / "st", "ElectraModel", electra_folder)
    ours = bertforge.pipeline(model=folder)(TEXTS + SHORT)
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(TEXTS + SHORT)
    assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-4)


# ---------------------------------------------------------------------------------------------------------
# MPNet (conftest.mpnet_folder: WordPiece laid out as RoBERTa's, <s> A </s></s> B </s>; random weights at a
# scaled-down shape, relative position buckets, positions from the padding id 1 + 1): every job on the family of
# all-mpnet-base-v2


@pytest.fixture(scope="module")
def mpnet_folders(tmp_path_factory):
    made = {}

    def make(head, **config):
        key = (head, repr(sorted(config.items())))
        if key not in made:
            made[key] = mpnet_folder(tmp_path_factory.mktemp(head), head, **config)
        return made[key]
    return make


def test_every_head_of_the_registry_but_pre_training_has_an_mpnet_class():
    arch = ARCHITECTURES["mpnet"]
    assert set(HEADS) - set(arch.heads()) == {"BertForPreTraining"} and not arch.segments
    assert arch.classes["BertForMultipleChoice"] == "bertforge.model.architectures.mpnet:MPNetForMultipleChoice"


def test_pipelines_on_mpnet_are_the_references(mpnet_folders):
    """Text classification on texts (one over the 128 tokens, cut as transformers truncates it) and pairs, fill-mask
    with <mask>, token classification, feature extraction, and question answering (the windows laid out as the
    tokenizer lays out a pair: the reference model's best span on its own encoding)."""
    folder = mpnet_folders("MPNetForSequenceClassification", num_labels=3)
    assert_same(bertforge.pipeline(model=folder)(TEXTS, top_k=None),
                reference("text-classification", folder)(TEXTS, top_k=None, truncation=True))
    pairs = [{"text": a, "text_pair": b} for a, b in zip(SHORT, reversed(SHORT))]
    assert_same(bertforge.pipeline(model=folder)(pairs, top_k=None),
                reference("text-classification", folder)(pairs, top_k=None))
    folder = mpnet_folders("MPNetForMaskedLM")
    texts = ["The capital of France is <mask>.", "George <mask> was born in Virginia."]
    assert_same(bertforge.pipeline("fill-mask", model=folder)(texts, top_k=3),
                reference("fill-mask", folder)(texts, top_k=3))
    tokens = bertforge.pipeline("feature-extraction", model=folder)(SHORT[2])
    ids = transformers.AutoTokenizer.from_pretrained(folder)(SHORT[2], return_tensors="pt")
    with torch.no_grad():
        expected = transformers.AutoModel.from_pretrained(folder).eval()(**ids).last_hidden_state[0]
    assert torch.allclose(torch.tensor(tokens), expected, atol=1e-4)
    folder = mpnet_folders("MPNetForTokenClassification", num_labels=5,
                           id2label={0: "O", 1: "B-PER", 2: "I-PER", 3: "B-LOC", 4: "I-LOC"})
    keys = ("entity", "score", "index", "start", "end")
    ours = bertforge.pipeline(model=folder)(SHORT, aggregation_strategy="none")
    theirs = reference("token-classification", folder)(SHORT, aggregation_strategy="none")
    for a, b in zip(ours, theirs, strict=True):
        assert_same([{k: e[k] for k in keys} for e in a], [{k: e[k] for k in keys} for e in b])
    folder = mpnet_folders("MPNetForQuestionAnswering")
    model = transformers.AutoModelForQuestionAnswering.from_pretrained(folder).eval()
    question, context = "Who wrote it?", "The novel was written by Jane Austen in 1813, in Hampshire."
    answer = bertforge.pipeline(model=folder)(question=question, context=context)
    enc = transformers.AutoTokenizer.from_pretrained(folder)(question, context, return_offsets_mapping=True,
                                                             return_tensors="pt")
    offsets = enc.pop("offset_mapping")[0].tolist()
    in_context = [i for i, s in enumerate(enc.sequence_ids(0)) if s == 1]
    with torch.no_grad():
        out = model(**enc)
    (s, e), _ = best_span(out.start_logits[0].numpy(), out.end_logits[0].numpy(), in_context[0], in_context[-1])
    assert (answer["start"], answer["end"]) == (offsets[s][0], offsets[e][1])
    assert answer["answer"] == context[answer["start"]:answer["end"]]


def mpnet_sentence_folder(folder: Path, **config) -> Path:
    """all-mpnet-base-v2's layout: the encoder (MPNetModel's weights), mean pooling, unit vectors, max_seq_length
    384 of the 512 tokens its positions hold (here 384 of 384)."""
    config = {"max_position_embeddings": 386, **config}
    folder = mpnet_folder(folder, "MPNetModel", **config)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({
        "word_embedding_dimension": config.get("hidden_size", 32), "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": True, "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False}))
    (folder / "2_Normalize").mkdir()
    (folder / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 384, "do_lower_case": False}))
    return folder


def test_an_all_mpnet_base_v2_folder_embeds_as_sentence_transformers_within_1e_5(tmp_path):
    """pipeline("sentence-embedding") and FeatureExtractor's sentence vectors: sentence-transformers' encode (a text
    over the 384 tokens cut by the pipeline as sentence-transformers cuts it)."""
    st = pytest.importorskip("sentence_transformers")
    from bertforge.inference.features import FeatureExtractor

    folder = mpnet_sentence_folder(tmp_path / "st")
    long = "A dull mess that never finds its feet, naïve 北京 🙂 " * 40
    theirs = st.SentenceTransformer(str(folder), device="cpu").encode(TEXTS + SHORT + [long])
    ours = bertforge.pipeline("sentence-embedding", model=folder)(TEXTS + SHORT + [long])
    assert (torch.tensor(ours) - torch.tensor(theirs)).abs().max() < 1e-5
    features = FeatureExtractor(folder).extract(TEXTS + SHORT, level="sentence")
    assert (torch.tensor(features.vectors) - torch.tensor(theirs[:-1])).abs().max() < 1e-5


def test_finetune_evaluate_predict_info_and_export_run_on_mpnet(mpnet_folders, tmp_path):
    """A classifier fine-tuned from a masked LM on own data, read by transformers with the same predictions,
    evaluated, predicted, described by info, exported to ONNX with the same outputs."""
    for split in ("train", "dev"):
        (tmp_path / f"{split}.csv").write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in ROWS))
    run = tmp_path / "run"
    result = bertforge_cli("finetune", "text-classification", "--model", mpnet_folders("MPNetForMaskedLM"),
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "dev.csv", "--epochs", 2,
                           "--out", run, "--no-progress", "--seed", 1)
    assert result.returncode == 0, result.stderr
    config = read_config(run / "best" / "config.json")
    assert config.model_type == "mpnet" and heads_of(config) == ["BertForSequenceClassification"]
    saved = transformers.AutoModelForSequenceClassification.from_pretrained(run / "best").eval()
    assert type(saved).__name__ == "MPNetForSequenceClassification"
    ours = bertforge.pipeline(model=run / "best")(TEXTS, top_k=None)
    assert_same(ours, reference("text-classification", run / "best")(TEXTS, top_k=None, truncation=True))

    result = bertforge_cli("evaluate", "text-classification", "--model", run / "best", "--dev", tmp_path / "dev.csv")
    assert result.returncode == 0 and 0 <= json.loads(result.stdout)["accuracy"] <= 1, result.stderr
    result = bertforge_cli("predict", "text-classification", "--model", run / "best", "--input", tmp_path / "dev.csv")
    assert result.returncode == 0 and json.loads(result.stdout.splitlines()[0])["label"] in ("pos", "neg")
    result = bertforge_cli("info", run / "best")
    assert result.returncode == 0 and "architecture:  MPNetForSequenceClassification" in result.stdout
    assert "128 positions" in result.stdout and "classifier (2 outputs: neg, pos)" in result.stdout

    pytest.importorskip("onnxruntime")
    result = bertforge_cli("export", "onnx", run / "best", tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    assert_same(bertforge.pipeline(model=tmp_path / "onnx", backend="onnx")(TEXTS, top_k=None), ours)


def test_finetune_every_family_of_tasks_on_mpnet(mpnet_folders, tmp_path):
    """Token classification, question answering, multiple choice and sentence-pair regression fine-tuned from a
    masked LM on own data, each read back by transformers as its MPNet class."""
    from tests.conftest import fine_tune, write_jsonl

    mlm = mpnet_folders("MPNetForMaskedLM")
    people, places = ["alice", "bob", "maria", "omar"], ["paris", "lima", "berlin"]
    ner = write_jsonl(tmp_path / "ner.jsonl", [{"tokens": [p, "lives", "in", c, "."],
                                                "tags": ["B-PER", "O", "O", "B-LOC", "O"]}
                                               for p in people for c in places])
    context = "The novel was written by Jane Austen in 1813, in Hampshire."
    squad = write_jsonl(tmp_path / "squad.jsonl", [
        {"question": q, "context": context, "answers": {"text": [a], "answer_start": [context.index(a)]}}
        for q, a in (("Who wrote it?", "Jane Austen"), ("When?", "1813"), ("Where?", "Hampshire"))] * 3)
    quiz = "a gripping film,good,bad,0\na dull mess,good,bad,1\n" * 6
    (tmp_path / "quiz.csv").write_text("question,A,B,answer\n" + quiz)
    runs = {"MPNetForTokenClassification": ("token-classification", "--train", ner, "--dev", ner),
            "MPNetForQuestionAnswering": ("question-answering", "--train", squad, "--dev", squad,
                                          "--max-length", 128),
            "MPNetForMultipleChoice": ("multiple-choice", "--train", tmp_path / "quiz.csv", "--dev",
                                       tmp_path / "quiz.csv", "--choices-columns", "A", "B",
                                       "--label-column", "answer")}
    for name, (task, *flags) in runs.items():
        run = fine_tune(task, mlm, tmp_path / task, *flags, "--epochs", 1, "--batch-size", 4)
        assert type(transformers.AutoConfig.from_pretrained(run / "best")).__name__ == "MPNetConfig"
        assert json.loads((run / "best" / "config.json").read_text())["architectures"] == [name]
        assert type(getattr(transformers, name).from_pretrained(run / "best")).__name__ == name


@pytest.mark.parametrize("head, task", [("MPNetForMaskedLM", "fill-mask"),
                                        ("MPNetForTokenClassification", "token-classification"),
                                        ("MPNetForQuestionAnswering", "question-answering")])
def test_an_exported_mpnet_head_runs_as_pytorch_does(mpnet_folders, tmp_path, head, task):
    """Traced on sample rows holding the tokenizer's own mask token, <mask>; the relative positions computed in the
    graph for rows of any length; no token_type_ids read."""
    pytest.importorskip("onnxruntime")
    folder = mpnet_folders(head)
    result = bertforge_cli("export", "onnx", folder, tmp_path / "onnx")
    assert result.returncode == 0, result.stderr
    exported, ours = (bertforge.pipeline(task, model=tmp_path / "onnx", backend="onnx"),
                      bertforge.pipeline(task, model=folder))
    if task == "question-answering":
        kw = dict(question="Who wrote it?", context="The novel was written by Jane Austen in 1813, in Hampshire.")
        a, b = exported(**kw), ours(**kw)
        assert (a["start"], a["end"]) == (b["start"], b["end"]) and abs(a["score"] - b["score"]) < 1e-5
        return
    texts = ["The capital of France is <mask>.", "George <mask> was born in Virginia, " * 3 + "in 1732."]
    assert_same(exported(texts, top_k=3) if task == "fill-mask" else exported(texts),
                ours(texts, top_k=3) if task == "fill-mask" else ours(texts))


def test_serve_answers_tei_openai_and_bertforge_routes_on_mpnet(mpnet_folders, tmp_path):
    pytest.importorskip("fastapi")
    httpx = pytest.importorskip("httpx")
    from tests.serving.test_serve import Served

    folder = mpnet_folders("MPNetForSequenceClassification", **SST2)
    classifier = Served(folder).wait()
    embedder = Served(mpnet_sentence_folder(tmp_path / "st")).wait()
    try:
        assert_same(classifier.post("classify", {"inputs": SHORT}).json(), bertforge.pipeline(model=folder)(SHORT))
        tei = httpx.post(classifier.url + "/predict", json={"inputs": SHORT[2]}, timeout=60).json()
        assert {s["label"] for s in tei} == {"NEGATIVE", "POSITIVE"}
        vectors = httpx.post(embedder.url + "/embed", json={"inputs": SHORT}, timeout=60).json()
        openai = httpx.post(embedder.url + "/v1/embeddings", json={"input": SHORT}, timeout=60).json()
        expected = bertforge.pipeline(model=tmp_path / "st")(SHORT)
        assert torch.allclose(torch.tensor(vectors), torch.tensor(expected), atol=1e-5)
        assert torch.allclose(torch.tensor(vectors), torch.tensor([d["embedding"] for d in openai["data"]]),
                              atol=1e-6)
    finally:
        classifier.stop()
        embedder.stop()


def test_distill_cuts_an_mpnet_student_that_transformers_loads_with_the_same_outputs(tmp_path):
    """A classifier 256 wide of 4 layers cut to tiny (2 layers of 128, heads of the teacher's size, the same two in
    both layers with their columns of the relative position table; the sentence classifier's dense layer cut as a
    pooler), and a student of two of its layers."""
    teacher = mpnet_folder(tmp_path / "teacher", "MPNetForSequenceClassification", hidden_size=256,
                           intermediate_size=1024, num_attention_heads=4, num_hidden_layers=4, num_labels=2,
                           id2label={0: "neg", 1: "pos"})
    rows = "".join(f"a gripping film {i},pos\na dull mess {i},neg\n" for i in range(20))
    (tmp_path / "train.csv").write_text("text,label\n" + rows)
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student", "tiny", "--prune",
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "tiny", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    assert "student cut from the teacher's layers 0,3: 128 wide, 2 heads, feed-forward 512" in result.stderr
    best = tmp_path / "tiny" / "best"
    student = read_config(best / "config.json")
    assert (student.model_type, student.num_hidden_layers, student.hidden_size, student.max_tokens) == \
        ("mpnet", 2, 128, 128)
    loaded = transformers.AutoModelForSequenceClassification.from_pretrained(best)
    assert type(loaded).__name__ == "MPNetForSequenceClassification"
    assert tuple(loaded.mpnet.encoder.relative_attention_bias.weight.shape) == (32, 2)
    assert_same(bertforge.pipeline(model=best)(TEXTS, top_k=None),
                reference("text-classification", best)(TEXTS, top_k=None, truncation=True))
    result = bertforge_cli("distill", "text-classification", "--teacher", teacher, "--student-layers", "0,3",
                           "--train", tmp_path / "train.csv", "--dev", tmp_path / "train.csv", "--epochs", 1,
                           "--augment", 0, "--out", tmp_path / "layers", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    layers = tmp_path / "layers" / "best"
    assert type(transformers.AutoModelForSequenceClassification.from_pretrained(layers)) is type(loaded)
    assert_same(bertforge.pipeline(model=layers)(TEXTS, top_k=None),
                reference("text-classification", layers)(TEXTS, top_k=None, truncation=True))


def test_distill_embeddings_cuts_an_mpnet_student_that_sentence_transformers_reads(tmp_path):
    """all-mpnet-base-v2's case: a student cut from a sentence-transformers folder of MPNet."""
    st = pytest.importorskip("sentence_transformers")
    teacher = mpnet_sentence_folder(tmp_path / "teacher", hidden_size=256, intermediate_size=1024,
                                    num_attention_heads=4, num_hidden_layers=4)
    (tmp_path / "lines.txt").write_text("".join(f"a gripping film, number {i}, 北京 🙂\n" for i in range(40)))
    result = bertforge_cli("distill", "embeddings", "--teacher", teacher, "--student", "tiny", "--prune", "--input",
                           tmp_path / "lines.txt", "--epochs", 1, "--batch-size", 8, "--held-out", 0.2, "--out",
                           tmp_path / "run", "--no-progress", env_cache=tmp_path / "cache")
    assert result.returncode == 0, result.stderr
    best = tmp_path / "run" / "best"
    assert read_config(best / "config.json").model_type == "mpnet"
    ours = bertforge.pipeline(model=best)(TEXTS + SHORT)
    theirs = st.SentenceTransformer(str(best), device="cpu").encode(TEXTS + SHORT)
    assert torch.allclose(torch.tensor(ours), torch.tensor(theirs), atol=1e-4)
