"""`bertforge.pipeline` against transformers' `pipeline()` on the same checkpoint folder and inputs.

The folders are tiny random-weight models written by transformers' save_pretrained, with the uncased vocabulary
of the shared MiniLM checkpoint; their weights (biases and LayerNorm too) are drawn wide (std 0.1) so that
predictions are well apart.
bertforge runs its inputs batched and length-sorted; transformers one at a time.
"""

import json
import logging
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

import bertforge
from bertforge.core.errors import BertforgeError
from bertforge.inference import answer_spans
from bertforge.inference.pipeline_base import TooLong
from tests.conftest import REPO, modernbert_folder

transformers.logging.set_verbosity_error()

TOL = 1e-4
TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC", "B-ORG", "I-ORG"]
TEXTS = ["Angela Merkel visited Washington and the Rockefeller Foundation.", "hello",
         "Schwarzenegger met Zuckerberg in Reykjavík ☃ yesterday, didn't he?",
         "The quick brown fox jumps over the lazy dog near the riverbank in Ouagadougou."]


@pytest.fixture(scope="module")
def make_model(tmp_path_factory, tokenizer):
    """make(class name, **config) -> a folder with a random-weight transformers model and the vocabulary."""
    made = {}

    def make(name, **config):
        key = (name, repr(sorted(config.items(), key=str)))
        if key not in made:
            made[key] = random_model(tmp_path_factory.mktemp(name), name, tokenizer, **config)
        return made[key]
    return make


def random_model(folder, name, tokenizer, **config):
    """A tiny transformers `name` model of wide random weights, saved to `folder` with the vocabulary."""
    torch.manual_seed(0)
    cfg = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, intermediate_size=64, initializer_range=0.1, **config)
    model = getattr(transformers, name)(cfg).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape) * 0.1)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def reference(task, folder, **kw):
    return transformers.pipeline(task, model=str(folder), device="cpu", **kw)


def assert_same(ours, theirs, path="result"):
    """Equal structures; floats within TOL."""
    if isinstance(theirs, dict):
        assert set(ours) == set(theirs), path
        for k in theirs:
            assert_same(ours[k], theirs[k], f"{path}.{k}")
    elif isinstance(theirs, (list, tuple)):
        assert len(ours) == len(theirs), path
        for i, (a, b) in enumerate(zip(ours, theirs)):
            assert_same(a, b, f"{path}[{i}]")
    elif isinstance(theirs, (float, np.floating)):
        assert abs(float(ours) - float(theirs)) <= TOL, f"{path}: {ours} != {theirs}"
    else:
        assert ours == theirs, f"{path}: {ours!r} != {theirs!r}"


def test_fill_mask(make_model):
    folder = make_model("BertForMaskedLM")
    ours, theirs = bertforge.pipeline("fill-mask", model=folder), reference("fill-mask", folder)
    texts = ["[MASK] is the capital of France.", "Paris is the [MASK] of France.", "The end [MASK]",
             "two [MASK] in one [MASK] sentence."]
    batched = ours(texts, top_k=3)
    for text, got in zip(texts, batched):
        assert_same(got, theirs(text, top_k=3))
    assert_same(ours(texts[1]), theirs(texts[1]))  # top_k 5 by default; one text gives its list alone
    assert isinstance(bertforge.pipeline(model=folder), type(ours))  # the task from the head


def test_fill_mask_needs_a_mask(make_model):
    with pytest.raises(BertforgeError, match=r"inputs\[1\] has no \[MASK\]"):
        bertforge.pipeline("fill-mask", model=make_model("BertForMaskedLM"))(["a [MASK] b", "no mask"])


def test_fill_mask_refuses_a_mask_past_its_length_by_name(make_model):
    """fill-mask reads a text's first max_length tokens: a [MASK] past them is refused naming the input and how
    many were cut, truncated or not (it was left out of the answer without a word); a 1 MB text costs its
    beginning's tokenizing only. Masks within the length are filled as before."""
    pipe = bertforge.pipeline("fill-mask", model=make_model("BertForMaskedLM"), max_length=64)
    words = "the cat sat on the mat " * 20
    with pytest.raises(TooLong, match=r"^inputs\[1\]: 1 of its 2 \[MASK\] tokens lie past its first 64 tokens"):
        pipe(["a [MASK] b", f"[MASK] {words} [MASK]"])
    with pytest.raises(TooLong, match=r"^inputs is \d+ tokens, over the limit of 64"):
        pipe(f"[MASK] {words} [MASK]", truncate=False)
    with pytest.raises(TooLong, match=r"^inputs: 1 of its 1 \[MASK\] tokens lie past"):
        pipe(words * 1500 + " [MASK]")
    assert len(pipe(f"[MASK] {words}", top_k=2)) == 2


def edit_json(path, change):
    content = json.loads(path.read_text())
    change(content)
    path.write_text(json.dumps(content))


def test_a_modernbert_folder_whose_tokenizer_lacks_a_pad_or_a_mask_token(tmp_path):
    """Its tokenizer.json's own truncation (two tokens) is never applied; without a pad token in the tokenizer
    files, config.json's pad_token_id pads: texts of different lengths batched answer as transformers does one at
    a time. Without a mask token, fill-mask is refused at load by name (it was a TypeError at the first text);
    without a pad token anywhere, any pipeline is (two texts of different lengths failed)."""
    folder = modernbert_folder(tmp_path / "modernbert")
    edit_json(folder / "tokenizer.json", lambda p: p.update(truncation={"direction": "Right", "max_length": 2,
                                                                        "strategy": "LongestFirst", "stride": 0}))
    edit_json(folder / "tokenizer_config.json", lambda config: config.pop("pad_token"))
    texts = ["Paris is the capital of [MASK].", "A gripping [MASK], beautifully shot, and far too long for me."]
    theirs = reference("fill-mask", folder)
    for text, got in zip(texts, bertforge.pipeline("fill-mask", model=folder)(texts, top_k=3)):
        assert_same(got, theirs(text, top_k=3))
    edit_json(folder / "tokenizer_config.json", lambda config: config.pop("mask_token"))
    with pytest.raises(BertforgeError) as e:
        bertforge.pipeline("fill-mask", model=folder)
    assert str(e.value) == (f"{folder}: fill-mask needs a mask token, and the tokenizer files name none (mask_token "
                            "in tokenizer_config.json)")
    assert len(bertforge.pipeline("feature-extraction", model=folder)(texts[1])[0]) > 2
    edit_json(folder / "config.json", lambda config: config.pop("pad_token_id"))
    with pytest.raises(BertforgeError) as e:
        bertforge.pipeline("feature-extraction", model=folder)
    assert str(e.value) == (f"{folder} has no pad token: tokenizer files name none and config.json has no "
                            "pad_token_id (name one as pad_token in tokenizer_config.json)")


def test_an_input_over_the_models_length_is_cut_with_a_warning_naming_the_limit(make_model, caplog):
    """`max_position_embeddings: 4` in config.json cut every input to 4 tokens without a word. An input over the
    length is cut by default, and the call logs which, the limit and what sets it; truncate=False refuses it by
    name (the server's 413)."""
    pipe = bertforge.pipeline("feature-extraction", model=make_model("BertModel", max_position_embeddings=8))
    long = "the quick brown fox jumps over the lazy dog"  # 11 tokens with [CLS] and [SEP]
    with caplog.at_level(logging.WARNING, logger="bertforge"):
        states = pipe([long, "hello", long, long, long, [5] * 9])
    assert [len(s[0]) for s in states] == [8, 3, 8, 8, 8, 8]
    assert caplog.messages == ["inputs[5], inputs[0], inputs[2] and 2 more cut to 8 tokens: the model's positions "
                               "(config.json) is 8 (truncate=False refuses an input over it instead)"]
    with pytest.raises(TooLong, match=r"^inputs\[1\] is 11 tokens, over the limit of 8$"):
        pipe(["hello", long], truncate=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="bertforge"):
        pipe("hello there")
        bertforge.pipeline("feature-extraction", model=make_model("BertModel"), max_length=6)(long)
    assert caplog.messages == ["inputs cut to 6 tokens: max_length is 6 (truncate=False refuses an input over it "
                               "instead)"]


PAIRS = [{"text": "The cat sat on the mat.", "text_pair": "A cat was sitting on a mat."},
         {"text": "He left early.", "text_pair": "Stocks fell 3% on Monday, far more than expected by anyone."}]


@pytest.mark.parametrize("top_k", ["default", None, 1, 2])
def test_text_classification(make_model, top_k):
    folder = make_model("BertForSequenceClassification", id2label={0: "neg", 1: "neutral", 2: "pos"})
    ours, theirs = bertforge.pipeline(model=folder), reference("text-classification", folder)
    kw = {} if top_k == "default" else {"top_k": top_k}
    inputs = TEXTS + PAIRS  # singles and pairs in one call
    for item, got in zip(inputs, ours(inputs, **kw)):
        assert_same(got, theirs([item], **kw)[0])
    for one in (TEXTS[0], PAIRS[0]):  # transformers' shapes for one input
        assert_same(ours(one, **kw), theirs(one, **kw))


def test_text_classification_regression(make_model):
    """A one-output model's score is its raw output (regression); transformers applies a sigmoid unless the
    config says regression, which function_to_apply="sigmoid" reproduces."""
    plain = make_model("BertForSequenceClassification", num_labels=1)
    regression = make_model("BertForSequenceClassification", num_labels=1, problem_type="regression")
    assert_same(bertforge.pipeline(model=regression)(TEXTS), reference("text-classification", regression)(TEXTS))
    assert_same(bertforge.pipeline(model=plain)(TEXTS, function_to_apply="sigmoid"),
                reference("text-classification", plain)(TEXTS))
    raw = bertforge.pipeline(model=plain)(TEXTS)
    assert_same(raw, reference("text-classification", plain)(TEXTS, function_to_apply="none"))


@pytest.mark.parametrize("strategy", ["none", "simple", "first", "max", "average"])
def test_token_classification(make_model, strategy):
    folder = make_model("BertForTokenClassification", id2label=dict(enumerate(TAGS)))
    ours, theirs = bertforge.pipeline("ner", model=folder), reference("ner", folder)
    found = ours(TEXTS, aggregation_strategy=strategy)
    assert any(found), "the random model tags some entity"
    for text, got in zip(TEXTS, found):
        expected = theirs(text, aggregation_strategy=strategy)
        assert_same(got, expected)
        for entity in got:  # character offsets into the text
            assert entity["end"] > entity["start"] and text[entity["start"]:entity["end"]].strip()


LONG_TEXT = " ".join(f"On day {i} Angela Merkel flew from Reykjavík to Washington with Zuckerberg." for i in range(36))


def test_token_classification_tags_a_long_text_to_its_end(make_model, tokenizer):
    """A 400-word text (about 600 tokens) in windows of 128 tokens: every token tagged as transformers' model tags
    it in the window where it has the most context (the one of the best min(left, right) context), entities
    found to the text's end; with truncate=True, the first window only, and the result says the text was cut.
    A text that fits in one window is tagged as transformers' pipeline tags it."""
    folder = make_model("BertForTokenClassification", id2label=dict(enumerate(TAGS)))
    ner = bertforge.pipeline("ner", model=folder, max_length=128)
    assert len(LONG_TEXT.split()) >= 400
    found = ner(LONG_TEXT)
    enc = tokenizer(LONG_TEXT, add_special_tokens=False, return_offsets_mapping=True)
    ids, n, room = enc["input_ids"], len(enc["input_ids"]), 126
    assert n > 4 * room
    model = transformers.BertForTokenClassification.from_pretrained(folder).eval()
    expected, first = {}, {}
    for start in range(0, n - room // 2, room // 2):  # the default stride: half a window
        window = ids[start:start + room]
        with torch.no_grad():
            logits = model(torch.tensor([[tokenizer.cls_token_id, *window, tokenizer.sep_token_id]])).logits[0, 1:-1]
        for j, p in enumerate(logits.softmax(-1).numpy()):
            first.update({} if start else {j + 1: (TAGS[int(p.argmax())], float(p.max()))})
            context = min(j, len(window) - 1 - j) + 0.01 * len(window)
            if start + j not in expected or context > expected[start + j][0]:
                expected[start + j] = (context, p)
    tagged = {t + 1: (TAGS[int(p.argmax())], float(p.max())) for t, (_, p) in expected.items()
              if TAGS[int(p.argmax())] != "O"}
    assert {e["index"]: (e["entity"], e["score"]) for e in found}.keys() == tagged.keys()
    for e in found:
        assert e["entity"] == tagged[e["index"]][0] and abs(e["score"] - tagged[e["index"]][1]) <= TOL
        assert (e["start"], e["end"]) == tuple(enc["offset_mapping"][e["index"] - 1])
    assert max(e["end"] for e in found) > len(LONG_TEXT) - 60 and not found.truncated
    grouped = ner(LONG_TEXT, aggregation_strategy="simple")
    assert max(e["end"] for e in grouped) > len(LONG_TEXT) - 60

    cut = ner([LONG_TEXT, TEXTS[0]], truncate=True)
    assert cut[0].truncated and not cut[1].truncated
    assert {e["index"]: (e["entity"], pytest.approx(e["score"], abs=TOL)) for e in cut[0]} == {
        i: tag for i, tag in first.items() if tag[0] != "O"}  # the first window's tags, to its end
    assert_same(ner(TEXTS), [reference("ner", folder)(text) for text in TEXTS])  # one window each


def test_feature_extraction_and_sentence_embedding(make_model):
    folder = make_model("BertModel")
    theirs = reference("feature-extraction", folder)
    assert_same(bertforge.pipeline(model=folder)(TEXTS), [theirs(t) for t in TEXTS])
    embed = bertforge.pipeline("sentence-embedding", model=folder)
    for text, vector in zip(TEXTS, embed(TEXTS)):
        states = np.array(theirs(text))[0]
        mean = states.mean(0)
        np.testing.assert_allclose(vector, mean / np.linalg.norm(mean), atol=TOL)
    cls = embed(TEXTS[:2], pooling="cls", normalize=False)
    np.testing.assert_allclose(cls[1], np.array(theirs(TEXTS[1]))[0, 0], atol=TOL)


def test_embedding_dimensions_and_token_ids(make_model, tokenizer):
    """Matryoshka `dimensions`: transformers' mean of the states, its first N values, then unit length; token ids
    given (a list of whole numbers) are the model's input as they are, checked against the vocabulary."""
    folder = make_model("BertModel")
    theirs, embed = reference("feature-extraction", folder), bertforge.pipeline("sentence-embedding", model=folder)
    for text, vector in zip(TEXTS, embed(TEXTS, dimensions=8)):
        first = np.array(theirs(text))[0].mean(0)[:8]
        np.testing.assert_allclose(vector, first / np.linalg.norm(first), atol=TOL)
    ids = tokenizer(TEXTS)["input_ids"]
    np.testing.assert_allclose(embed(ids), embed(TEXTS), atol=TOL)
    np.testing.assert_allclose(embed([ids[0], TEXTS[1]]), embed(TEXTS[:2]), atol=TOL)  # texts and ids mixed
    np.testing.assert_allclose(embed(ids[1]), embed(TEXTS[1]), atol=TOL)  # one input's ids
    bare = tokenizer(TEXTS[0], add_special_tokens=False)["input_ids"]  # no [CLS]/[SEP] added to ids
    with torch.no_grad():
        states = transformers.BertModel.from_pretrained(folder).eval()(torch.tensor([bare])).last_hidden_state[0]
    np.testing.assert_allclose(embed(bare, normalize=False), states.mean(0).numpy(), atol=TOL)
    for inputs, options, message in [([[1, 2], [5, 10 ** 6]], {}, r"inputs\[1\]: token id 1000000 is outside"),
                                     ("a", {"dimensions": 33}, "dimensions 33 is over the model's 32"),
                                     ("a", {"dimensions": 0}, "dimensions must be a whole number")]:
        with pytest.raises(bertforge.BertforgeError, match=message):
            embed(inputs, **options)
    with pytest.raises(bertforge.BertforgeError, match="inputs is 600 tokens, over the limit of 512"):
        embed([5] * 600, truncate=False)
    assert len(embed([5] * 600, normalize=False)) == 32  # cut to the model's positions by default


def test_embedding_precision_and_named_prompts(make_model, tmp_path):
    """`precision`: sentence-transformers' quantize_embeddings of the float vectors; `prompt_name`: one of the
    folder's prompts put before each text, as a prompt written into the text."""
    quantization = pytest.importorskip("sentence_transformers.util.quantization")
    folder = tmp_path / "model"
    shutil.copytree(make_model("BertModel"), folder)
    (folder / "config_sentence_transformers.json").write_text(json.dumps({"prompts": {"query": "query: "}}))
    embed = bertforge.pipeline("sentence-embedding", model=folder)
    floats = np.array(embed(TEXTS), dtype=np.float32)
    for precision in ("int8", "uint8", "binary", "ubinary"):
        assert np.array_equal(embed(TEXTS, precision=precision),
                              quantization.quantize_embeddings(floats, precision))
    np.testing.assert_allclose(embed(TEXTS, prompt_name="query"), embed(["query: " + t for t in TEXTS]), atol=TOL)
    for options, message in [({"precision": "int4"}, "precision 'int4': choose one of"),
                             ({"prompt_name": "passage"}, "prompt_name 'passage'.*its prompts: query")]:
        with pytest.raises(bertforge.BertforgeError, match=message):
            embed(TEXTS, **options)


def test_multiple_choice(make_model, tokenizer):
    folder = make_model("BertForMultipleChoice")
    model = transformers.BertForMultipleChoice.from_pretrained(folder).eval()
    items = [{"question": "Where do fish live?", "choices": ["in water", "in trees", "on the moon, far away"]},
             {"question": "What is two plus two?", "choices": ["four", "five"]}]
    got = bertforge.pipeline(model=folder)(items)  # two and three choices in one batch
    for item, result in zip(items, got):
        enc = tokenizer([item["question"]] * len(item["choices"]), item["choices"], padding=True,
                        return_tensors="pt")
        with torch.no_grad():
            p = model(**{k: v[None] for k, v in enc.items()}).logits[0].softmax(-1).numpy()
        np.testing.assert_allclose(result["scores"], p, atol=TOL)
        assert result["choice"] == int(p.argmax())


def best_span(start, end, first, last, max_len=30):
    """Brute force: the (s, e) with first <= s <= e <= last, e - s < max_len, of the highest start + end logit."""
    scores = {(s, e): start[s] + end[e]
              for s in range(first, last + 1) for e in range(s, min(last, s + max_len - 1) + 1)}
    return max(scores, key=scores.get), max(scores.values())


QA = [{"question": "Who wrote it?", "context": "The novel was written by Jane Austen in 1813, in Hampshire."},
      {"question": "Where?", "context": "It happened in Reykjavík ☃, the capital, on a cold and windy day."}]


def test_question_answering_short_contexts(make_model, tokenizer):
    """One window each: the answer is the brute-force best span of transformers' logits, sliced by the
    reference tokenizer's character offsets; v2 answers "" where [CLS] scores higher."""
    folder = make_model("BertForQuestionAnswering")
    model = transformers.BertForQuestionAnswering.from_pretrained(folder).eval()
    ref_tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    qa = bertforge.pipeline(model=folder)
    got, got_v2 = qa(QA), qa(QA, handle_impossible_answer=True)
    for item, answer, answer_v2 in zip(QA, got, got_v2):
        enc = ref_tokenizer(item["question"], item["context"], return_offsets_mapping=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping")[0].tolist()
        with torch.no_grad():
            out = model(**enc)
        start, end = out.start_logits[0].numpy(), out.end_logits[0].numpy()
        context = [i for i, t in enumerate(enc["token_type_ids"][0].tolist()) if t == 1][:-1]  # last is [SEP]
        (s, e), score = best_span(start, end, context[0], context[-1])
        assert (answer["start"], answer["end"]) == (offsets[s][0], offsets[e][1])
        assert answer["answer"] == item["context"][answer["start"]:answer["end"]]
        assert 0 < answer["score"] <= 1
        if start[0] + end[0] > score:
            assert answer_v2 == {"score": answer_v2["score"], "start": 0, "end": 0, "answer": ""}
        else:  # the same span; its probability shared with the null answer's
            assert {**answer_v2, "score": None} == {**answer, "score": None}
    assert qa(question=QA[0]["question"], context=QA[0]["context"]) == got[0]
    for unanswered in qa(QA, handle_impossible_answer=True, null_threshold=-1e9):  # the null score always wins
        assert {**unanswered, "score": None} == {"score": None, "start": 0, "end": 0, "answer": ""}


def test_question_answering_long_context_as_evaluate(make_model, tokenizer):
    """A context over several windows: the answers of fine-tuning's windowing and post-processing
    (answer_spans.py) on the model's logits, each window run alone."""
    folder = make_model("BertForQuestionAnswering")
    context = " ".join(f"Sentence {i} tells of the town of Ghent and its {i * 7} bridges over the Lys."
                       for i in range(40))
    items = [{"question": "How many bridges?", "context": context}, QA[0]]
    got = bertforge.pipeline(model=folder, max_length=128)(items, top_k=2, doc_stride=64)
    examples = [answer_spans.SquadExample(str(i), r["question"], r["context"], [], []) for i, r in enumerate(items)]
    windows = answer_spans.featurize(examples, tokenizer, 128, 64, 64)
    assert len(windows) > 3
    model = bertforge.BertForQuestionAnswering.from_pretrained(folder)
    starts, ends = [], []
    with torch.no_grad():
        for w in windows:
            out = model(input_ids=torch.tensor(w.input_ids[None], dtype=torch.long),
                        token_type_ids=torch.tensor(w.token_type_ids[None], dtype=torch.long))
            starts.append(out.start_logits[0].numpy())
            ends.append(out.end_logits[0].numpy())
    result = answer_spans.postprocess(examples, windows, starts, ends)
    for ex, answers in zip(examples, got):
        assert answers[0]["answer"] == result.predictions[ex.id]
        assert [a["answer"] for a in answers] == [b["text"] for b in result.nbest[ex.id][:2]]
        assert answers[0]["score"] >= answers[1]["score"]


LONG_QA = """
import resource, sys
import bertforge

qa = bertforge.pipeline("question-answering", model=sys.argv[1])
real, zebra = qa.runtime, qa.tokenizer.convert_tokens_to_ids("zebra")


class Boosted:  # the model's logits, with a start and an end at "zebra": the answer wherever the windows find it
    call_tokens = None

    def __call__(self, batch):
        out, hit = real(batch), (batch["input_ids"] == zebra).float() * 100
        return {"start_logits": out["start_logits"] + hit, "end_logits": out["end_logits"] + hit}


qa.runtime = Boosted()
qa(question="Which animal?", context="A zebra is here.")  # torch's first call allocates for good
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
sentences = [f"Sentence {i} tells of the town of Ghent and its {i * 7} bridges over the Lys." for i in range(2700)]
sentences.insert(2600, "A zebra crossed one.")
context = " ".join(sentences)
answer = qa(question="Which animal?", context=context)
grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(len(context), context.index("zebra"), answer["start"], answer["answer"], grown >> 10)
"""


def test_question_answering_long_context_in_linear_memory(make_model):
    """A 200 KB context (51,000 tokens, 397 windows) in a fresh process: its peak resident size grows by less
    than 150 MiB (about 55 MiB, mostly a batch's attention; 490 MiB, and 1.5 GB in issue 33, when every window's
    best-context scores were one [windows, tokens] array), and the answer near its end is found (the logits
    boosted at one word)."""
    folder = make_model("BertForQuestionAnswering")
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", LONG_QA, str(folder)], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    length, where, start, answer, grown_mib = done.stdout.split()
    assert int(length) > 200_000 and int(where) > 190_000
    assert (start, answer) == (where, "zebra")
    assert int(grown_mib) < 150, f"peak resident size grew by {grown_mib} MiB"


def test_batching_keeps_input_order(make_model):
    """A token budget of a few rows, a batch size of 1 and the default give the same results, in input order."""
    folder = make_model("BertForSequenceClassification", id2label={0: "neg", 1: "neutral", 2: "pos"})
    inputs = [TEXTS[i % len(TEXTS)] + " x" * (i % 5) for i in range(23)]
    expected = bertforge.pipeline(model=folder, batch_size=1)(inputs, top_k=None)
    assert_same(bertforge.pipeline(model=folder, max_batch_tokens=64)(inputs, top_k=None), expected)
    assert_same(bertforge.pipeline(model=folder)(inputs, top_k=None), expected)
    assert_same(bertforge.pipeline(model=folder)(inputs, top_k=None, batch_size=4), expected)  # as transformers'
    with pytest.raises(BertforgeError, match="batch_size must be a whole number of at least 1, not 0"):
        bertforge.pipeline(model=folder)(inputs, batch_size=0)


@pytest.mark.parametrize("task, inputs, message", [
    ("text-classification", 3, "inputs is int"),
    ("text-classification", [], "inputs is empty"),
    ("text-classification", ["ok", ""], r"inputs\[1\] is empty"),
    ("text-classification", [{"text": "a", "pair": "b"}], "text pair"),
    ("question-answering", {"question": "q"}, "question.*context"),
    ("token-classification", ["ok", 5], r"inputs\[1\] is int"),
])
def test_bad_inputs_name_the_field(make_model, task, inputs, message):
    heads = {"text-classification": "BertForSequenceClassification", "question-answering": "BertForQuestionAnswering",
             "token-classification": "BertForTokenClassification"}
    with pytest.raises(BertforgeError, match=message):
        bertforge.pipeline(task, model=make_model(heads[task]))(inputs)


def test_bad_options(make_model):
    folder = make_model("BertForTokenClassification", id2label=dict(enumerate(TAGS)))
    with pytest.raises(BertforgeError, match="aggregation_strategy must be one of"):
        bertforge.pipeline(model=folder)("a", aggregation_strategy="longest")
    with pytest.raises(BertforgeError, match="takes no option top_k"):
        bertforge.pipeline(model=folder)("a", top_k=2)
    with pytest.raises(BertforgeError, match="unknown task"):
        bertforge.pipeline("translation", model=folder)


@pytest.mark.parametrize("device, message", [
    ("gpu", r"--device 'gpu' is not a device \(expected cpu, cuda, mps or cuda:N\)"),
    ("meta", "--device meta: only cpu, cuda and mps devices are supported"),
    ("cuda:999", "--device cuda:999: (CUDA is not available on this machine|this machine has)"),
])
def test_a_device_this_machine_lacks_is_one_error(make_model, device, message):
    """The same check as the command line's --device (options.device_problem), with mps allowed."""
    with pytest.raises(BertforgeError, match=message):
        bertforge.pipeline(model=make_model("BertForSequenceClassification"), device=device)


@pytest.mark.parametrize("task, head, inputs", [
    ("sentence-embedding", "BertModel", TEXTS),
    ("text-classification", "BertForSequenceClassification", TEXTS),
    ("fill-mask", "BertForMaskedLM", ["the [MASK] sat on the mat.", "hello [MASK]"]),
    ("question-answering", "BertForQuestionAnswering", [{"question": "who?", "context": TEXTS[0]}]),
    ("token-classification", "BertForTokenClassification", TEXTS),
])
def test_bf16_answers_as_fp32_within_its_precision(make_model, task, head, inputs):
    """bf16 autocast: the same answers' shapes and float32 scores, within bf16's 8 bits of mantissa of fp32's."""
    folder = make_model(head)
    fp32 = bertforge.pipeline(task, model=folder)(inputs)
    bf16 = bertforge.pipeline(task, model=folder, bf16=True)(inputs)
    if task == "sentence-embedding":
        ours, theirs = np.array(bf16), np.array(fp32)
        assert ((ours * theirs).sum(1) > 0.999).all()
        return
    flat = lambda r: [r] if isinstance(r, dict) else [x for item in r for x in flat(item)]  # noqa: E731
    scores = [(a["score"], b["score"]) for a, b in zip(flat(bf16), flat(fp32))]
    assert len(scores) == len(flat(fp32)) and all(isinstance(a, float) for a, _ in scores)
    assert max(abs(a - b) for a, b in scores) < 0.05


def test_bf16_is_for_the_torch_backend_in_floating_point(make_model):
    folder = make_model("BertForSequenceClassification")
    for options in ({"backend": "onnx"}, {"int8": True}):
        with pytest.raises(BertforgeError, match="--bf16 is for the torch backend"):
            bertforge.pipeline(model=folder, bf16=True, **options)
