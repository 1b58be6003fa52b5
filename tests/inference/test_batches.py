"""The shared inference layer: batches by count and token budget, padding, results back in input order."""

import itertools
import tracemalloc

import numpy as np
import pytest
import torch

from bertforge.core.errors import BertforgeError
from bertforge.inference.batches import (
    LazyRows, PerToken, cut_padding, doc_spans, max_context_window, pad, per_row, plan_batches, run
)


def rows_of(lengths):
    return [{"input_ids": [100 + i] + [7] * (n - 1), "token_type_ids": [0] * n} for i, n in enumerate(lengths)]


@pytest.mark.parametrize("batch_size, max_tokens", [(4, None), (None, 40), (3, 40), (1, 1)])
def test_plan_batches_covers_every_row_within_the_limits(batch_size, max_tokens):
    lengths = np.random.default_rng(0).integers(1, 30, 57).tolist()
    batches = plan_batches(lengths, batch_size, max_tokens)
    assert sorted(i for b in batches for i in b) == list(range(57))
    flat = [lengths[i] for b in batches for i in b]
    assert flat == sorted(flat)  # shortest first
    for b in batches:
        assert batch_size is None or len(b) <= batch_size
        assert max_tokens is None or len(b) == 1 or len(b) * max(lengths[i] for i in b) <= max_tokens


def test_plan_batches_counts_choices_in_the_budget():
    """Padded tokens are rows x longest x most choices: two 4-choice rows of 10 fill a budget of 80."""
    assert plan_batches([10, 10, 10, 10], None, 80, widths=[4, 4, 1, 1]) == [[0, 1], [2, 3]]
    assert plan_batches([10, 10, 10, 10], None, 80, widths=[1, 1, 4, 4]) == [[0, 1], [2, 3]]


def padded_cost(parts, lengths, widths, call_tokens):
    return sum(len(p) * max(lengths[i] for i in p) * max(widths[i] for i in p) + call_tokens for p in parts)


def test_cut_padding_finds_the_cheapest_cut():
    """Against every cut of the sorted rows into consecutive parts (2^(n-1) of them), on random small batches;
    with choices (widths), never dearer than one call (rows of one length stay together there)."""
    rng = np.random.default_rng(0)
    for trial in range(300):
        n = int(rng.integers(1, 9))
        lengths = rng.integers(1, 40, n).tolist()
        widths = [1] * n if trial % 3 else rng.integers(1, 4, n).tolist()
        call_tokens = int(rng.choice([0, 4, 16, 64]))
        batch = sorted(range(n), key=lambda i: lengths[i])
        parts = cut_padding(batch, lengths, widths, call_tokens)
        assert [i for p in parts for i in p] == batch  # consecutive, every row once, order kept
        cost = padded_cost(parts, lengths, widths, call_tokens)
        if trial % 3:
            assert cost == min(padded_cost([batch[a:b] for a, b in zip((0, *cuts), (*cuts, n))], lengths, widths,
                                           call_tokens)
                               for k in range(n) for cuts in itertools.combinations(range(1, n), k))
        else:
            assert cost <= padded_cost([batch], lengths, widths, call_tokens)


def test_plan_batches_cuts_padding_only_when_asked():
    """Three short rows and a long one: one padded call costs 4 x 60 + 16 tokens, two calls 3 x 5 + 60 + 32."""
    lengths = [60, 5, 5, 5]
    assert plan_batches(lengths, None) == [[1, 2, 3, 0]]
    assert plan_batches(lengths, None, call_tokens=16) == [[1, 2, 3], [0]]
    assert plan_batches([10, 11, 12], None, call_tokens=16) == [[0, 1, 2]]  # cutting costs more than it saves
    assert plan_batches(lengths, 2, call_tokens=16) == [[1, 2], [3], [0]]  # the row limit first, then the cut


def test_plan_batches_checks_its_limits():
    with pytest.raises(BertforgeError, match="batch_size"):
        plan_batches([1], 0)
    with pytest.raises(BertforgeError, match="max_tokens"):
        plan_batches([1], None, 0)


def test_pad_sequences_and_choices():
    batch = pad(rows_of([3, 1]), pad_id=0)
    assert batch["input_ids"].tolist() == [[100, 7, 7], [101, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]
    choices = [{"input_ids": [[1, 2], [1, 2, 3]], "token_type_ids": [[0, 0], [0, 0, 1]]},
               {"input_ids": [[5]] * 3, "token_type_ids": [[0]] * 3}]
    batch = pad(choices)
    assert batch["input_ids"].shape == (2, 3, 3)
    assert batch["choice_mask"].tolist() == [[1, 1, 0], [1, 1, 1]]
    assert batch["token_type_ids"][0, 1].tolist() == [0, 0, 1]



def test_pad_per_token_values_after_each_rows_tokens():
    """A PerToken key (a teacher's logits per token, [tokens, outputs] a row) is padded on its token axis to the
    batch's longest row, as float32, whatever the rows' float type."""
    rows = rows_of([3, 1])
    rows[0]["soft"] = np.arange(6, dtype=np.float16).reshape(3, 2)
    rows[1]["soft"] = np.array([[7.0, 8.0]], dtype=np.float32)
    batch = pad(rows, keys={"input_ids": 0, "soft": PerToken()})
    assert batch["soft"].dtype == torch.float32 and batch["soft"].shape == (2, 3, 2)
    assert batch["soft"].tolist() == [[[0, 1], [2, 3], [4, 5]], [[7, 8], [0, 0], [0, 0]]]
    assert pad(rows, keys={"input_ids": 0, "soft": PerToken(-1.0)})["soft"][1, 2].tolist() == [-1, -1]


@pytest.mark.parametrize("max_tokens", [None, 12])
def test_run_returns_results_in_input_order(max_tokens):
    lengths = [5, 1, 9, 3, 3, 7, 2]
    rows = rows_of(lengths)
    seen = []

    def forward(batch):
        seen.append(tuple(batch["input_ids"].shape))
        assert not torch.is_grad_enabled()
        return [int(x) for x in batch["input_ids"][:, 0]]

    assert run(forward, rows, batch_size=2, max_tokens=max_tokens) == [100 + i for i in range(len(rows))]
    assert all(b <= 2 for b, _ in seen)


def test_per_row_cuts_to_lengths():
    values = torch.arange(12.0).view(2, 3, 2)
    cut = per_row(values, torch.tensor([1, 3]))
    assert [c.shape for c in cut] == [(1, 2), (3, 2)] and cut[1].dtype == np.float32


def brute_max_context(n, spans):
    """Google's _check_is_max_context, token by token."""
    best = []
    for pos in range(n):
        scores = [min(pos - s, s + length - 1 - pos) + 0.01 * length if s <= pos < s + length else -np.inf
                  for s, length in spans]
        best.append(int(np.argmax(scores)))
    return best


def test_max_context_window_is_googles_in_memory_linear_in_the_tokens():
    """Each token's best window as Google's check picks it (the first of equal scores); a long passage's
    thousands of windows cost memory of its tokens, not windows x tokens (issue 33: 9.7 GiB for 1 MB of text)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        n, room, stride = (int(x) for x in rng.integers(1, [120, 40, 50]))
        spans = doc_spans(n, room, stride)
        assert max_context_window(n, spans).tolist() == brute_max_context(n, spans)
    n = 50_000
    spans = doc_spans(n, 317, 128)  # 390 windows: [windows, tokens] float64 would be 156 MB
    tracemalloc.start()
    best = max_context_window(n, spans)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 5 << 20, f"{peak >> 20} MiB"
    assert best[0] == 0 and best[-1] == len(spans) - 1


def test_lazy_rows_are_made_only_for_their_batch():
    made = []

    def make(i):
        made.append(i)
        return {"input_ids": [100 + i] * (i + 1), "token_type_ids": [0] * (i + 1)}

    rows = LazyRows([i + 1 for i in range(6)], make)
    assert len(rows) == 6 and rows[-1]["input_ids"] == [105] * 6 and rows[1:3][0]["input_ids"] == [101, 101]
    with pytest.raises(IndexError):
        rows[6]
    made.clear()
    batches = []

    def forward(batch):
        batches.append(list(made))
        made.clear()
        return [int(x) for x in batch["input_ids"][:, 0]]

    assert run(forward, rows, batch_size=2) == [100 + i for i in range(6)]
    assert batches == [[0, 1], [2, 3], [4, 5]]  # each row made once, for its own batch


TEXTS = ["a", "the quick brown fox jumps over the lazy dog near the river", "hello there", "ok",
         "one two three four five six seven", "to be or not to be, that is the question", "x y", "yes indeed"]


def test_evaluation_and_the_pipeline_run_rows_through_one_path(tmp_path, tokenizer, monkeypatch):
    """Evaluation's call (`run_model`, as finetuning.evaluate.predict_split makes it for text classification) and
    `bertforge.pipeline` plan the same length-sorted batches under a token budget and give the same logits, each
    row's own (as the model gives it alone) and in input order."""
    import bertforge
    from bertforge import BertConfig, BertForSequenceClassification
    from bertforge.inference import batches
    from bertforge.inference.batches import SEQUENCE_INPUTS, padding, run_model

    torch.manual_seed(0)
    model = BertForSequenceClassification(BertConfig.from_name("tiny", vocab_size=tokenizer.vocab_size,
                                                              id2label={i: f"LABEL_{i}" for i in range(3)}))
    model.save_pretrained(tmp_path, tokenizer)
    plans = []
    plan_batches = batches.plan_batches
    monkeypatch.setattr(batches, "plan_batches", lambda *a, **k: plans.append(plan_batches(*a, **k)) or plans[-1])
    ran, run_batch = [], batches.run_batch  # every batch of both, padded and run by the one function
    monkeypatch.setattr(batches, "run_batch", lambda f, rows, *a: ran.append(len(rows)) or run_batch(f, rows, *a))
    budget = 24
    encoded = {k: list(v) for k, v in tokenizer(TEXTS, truncation=True, max_length=128).items()
               if k in SEQUENCE_INPUTS}
    evaluated = np.stack(run_model(model, encoded, padding(SEQUENCE_INPUTS, tokenizer.pad_token_id), ("logits",),
                                   batch_size=32, max_tokens=budget)["logits"])
    pipe = bertforge.pipeline("text-classification", model=tmp_path, max_batch_tokens=budget)
    answers = pipe(TEXTS, top_k=None, function_to_apply="none")
    piped = np.array([[next(a["score"] for a in answer if a["label"] == f"LABEL_{i}") for i in range(3)]
                      for answer in answers])
    assert len(plans) == 2 and plans[0] == plans[1] and ran == [len(b) for b in plans[0]] * 2
    lengths = [len(ids) for ids in encoded["input_ids"]]
    assert [i for b in plans[0] for i in b] != list(range(len(TEXTS)))  # sorted by length, not in input order
    assert all(len(b) * max(lengths[i] for i in b) <= budget for b in plans[0] if len(b) > 1)
    np.testing.assert_allclose(piped, evaluated, rtol=0, atol=1e-6)
    with torch.no_grad():
        alone = np.concatenate([model(input_ids=torch.tensor([ids])).logits.numpy() for ids in encoded["input_ids"]])
    np.testing.assert_allclose(evaluated, alone, rtol=0, atol=1e-5)
