"""The model against the reference implementation (transformers): same weights in, same numbers out, for the
encoder and every head (bert.py and task_heads.py).

bertforge zeroes the padding positions of its hidden states (they are never computed), so outputs are
compared over the real tokens, and the zeros are checked separately.
"""

import csv

import pytest
import torch
import torch.nn.functional as F
import transformers

import bertforge.model.architectures.bert as bf
from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.heads import head_class
from tests.conftest import require_shared

transformers.logging.set_verbosity_error()
transformers.utils.logging.disable_progress_bar()

VOCAB = 2000
CLS, SEP, MASK = 2, 3, 4  # special ids of the small random vocabulary; 0 is [PAD]
MINI = dict(vocab_size=VOCAB, hidden_size=256, num_hidden_layers=4, num_attention_heads=4, intermediate_size=1024,
            hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

# Class name, number of labels; every class is checked with and without labels, in both directions.
CASES = [
    ("BertModel", 2),
    ("BertForPreTraining", 2),
    ("BertForMaskedLM", 2),
    ("BertForSequenceClassification", 3),
    ("BertForSequenceClassification", 1),  # regression
    ("BertForTokenClassification", 5),
    ("BertForQuestionAnswering", 2),
    ("BertForMultipleChoice", 2),
]
CASE_IDS = [f"{name}-{labels}" if name == "BertForSequenceClassification" else name for name, labels in CASES]


def max_diff(a, b) -> float:
    return (a.float() - b.float()).abs().max().item()


def perturb(model, seed=0):
    """Add noise to every parameter, so that biases and LayerNorm weights are not their 0/1 initial values."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.02)
    return model


def pair_batch(lengths, seed=0):
    """[CLS] A [SEP] B [SEP] rows (B empty: a single text), right-padded; ids, token types, mask."""
    g = torch.Generator().manual_seed(seed)
    width = max(a + b + (3 if b else 2) for a, b in lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    types = torch.zeros_like(ids)
    for row, (a, b) in enumerate(lengths):
        tokens = [CLS, *torch.randint(5, VOCAB, (a,), generator=g).tolist(), SEP]
        if b:
            types[row, len(tokens):len(tokens) + b + 1] = 1
            tokens += [*torch.randint(5, VOCAB, (b,), generator=g).tolist(), SEP]
        ids[row, :len(tokens)] = torch.tensor(tokens)
    return dict(input_ids=ids, token_type_ids=types, attention_mask=(ids != 0).long())


def mlm_labels(batch, g):
    """About 15% of the ordinary real tokens replaced by [MASK] (at least one a row); labels -100 elsewhere."""
    ids = batch["input_ids"]
    ordinary = ids > MASK
    chosen = ordinary & (torch.rand(ids.shape, generator=g) < 0.15)
    chosen[torch.arange(len(ids)), ordinary.long().argmax(1)] = True
    batch["input_ids"] = ids.masked_fill(chosen, MASK)
    return dict(labels=ids.masked_fill(~chosen, -100))


def inputs_and_labels(name, num_labels):
    """A padded batch for the class (pairs, realistic lengths), and labels for its loss."""
    g = torch.Generator().manual_seed(1)
    if name == "BertForMultipleChoice":
        batch = pair_batch([(9, 14), (9, 6), (9, 21), (12, 3), (12, 10), (12, 17)])
        batch = {k: v.view(2, 3, -1) for k, v in batch.items()}
        return batch, dict(labels=torch.tensor([2, 0]))
    batch = pair_batch([(14, 13), (5, 14), (20, 0), (8, 3)])
    real = batch["attention_mask"].bool()
    if name == "BertModel":
        labels = {}
    elif name == "BertForPreTraining":
        labels = mlm_labels(batch, g) | dict(next_sentence_label=torch.tensor([0, 1, 1, 0]))
    elif name == "BertForMaskedLM":
        labels = mlm_labels(batch, g)
    elif name == "BertForSequenceClassification" and num_labels == 1:
        labels = dict(labels=torch.randn(4, generator=g))
    elif name == "BertForSequenceClassification":
        labels = dict(labels=torch.tensor([0, 2, 1, 2]))
    elif name == "BertForTokenClassification":
        labels = dict(labels=torch.randint(0, num_labels, real.shape, generator=g).masked_fill(~real, -100))
    elif name == "BertForQuestionAnswering":
        labels = dict(start_positions=torch.tensor([3, 10, 0, 5]), end_positions=torch.tensor([6, 10, 2, 12]))
    return batch, labels


def reference_loss(name, out, batch, labels):
    """The reference's loss; for question answering, with the padding positions taken out of the softmax
    (the reference counts them as answer candidates; bertforge does not, so its loss does not depend on padding).
    """
    if name != "BertForQuestionAnswering":
        return out.loss
    padding = ~batch["attention_mask"].bool()
    return sum(F.cross_entropy(out[key].masked_fill(padding, -torch.inf), labels[f"{side}_positions"])
               for side, key in (("start", "start_logits"), ("end", "end_logits"))) / 2


def paired_outputs(name, ours, ref, batch, labels):
    """(what, ours, reference) for every output the two models must agree on, over real tokens only."""
    real = batch["attention_mask"].bool().flatten(0, -2)  # [rows, L] (choices flattened)
    pairs = [(f"hidden_states[{i}]", a[real], b[real]) for i, (a, b) in enumerate(zip(ours.hidden_states,
                                                                                      ref.hidden_states))]
    assert len(ours.hidden_states) == len(ref.hidden_states) == MINI["num_hidden_layers"] + 1
    if name == "BertModel":
        pairs.append(("pooler_output", ours.pooler_output, ref.pooler_output))
    elif name in ("BertForPreTraining", "BertForMaskedLM"):
        key = "prediction_logits" if name == "BertForPreTraining" else "logits"
        if "labels" in labels:  # bertforge scores only the masked positions
            masked = labels["labels"] != -100
            assert ours[key].shape == (masked.sum(), VOCAB)
            pairs.append((key, ours[key], ref[key][masked]))
        else:
            pairs.append((key, ours[key][real], ref[key][real]))
        if name == "BertForPreTraining":
            pairs.append(("seq_relationship_logits", ours.seq_relationship_logits, ref.seq_relationship_logits))
    elif name == "BertForTokenClassification":
        pairs.append(("logits", ours.logits[real], ref.logits[real]))
    elif name == "BertForQuestionAnswering":
        pairs += [(k, ours[k][real], ref[k][real]) for k in ("start_logits", "end_logits")]
    else:
        pairs.append(("logits", ours.logits, ref.logits))
    if labels:
        pairs.append(("loss", ours.loss, reference_loss(name, ref, batch, labels)))
    return pairs


def assert_agree(name, ours, ref, num_labels):
    """Both models in eval mode give the same outputs on the padded batch, without and with labels."""
    ours.eval(), ref.eval()
    batch, labels = inputs_and_labels(name, num_labels)
    with torch.no_grad():
        for given in ([{}, labels] if labels else [{}]):
            a = ours(**batch, **given, output_hidden_states=True)
            b = ref(**batch, **given, output_hidden_states=True)
            for what, x, y in paired_outputs(name, a, b, batch, given):
                assert x.shape == y.shape, what
                assert max_diff(x, y) <= 1e-4, f"{what} (labels: {bool(given)}) differs by {max_diff(x, y)}"


def assert_same_gradients(name, ours, ref, num_labels):
    """In train mode (dropout 0), one backward pass gives the same gradient for every parameter (1e-4 relative)."""
    ours.train(), ref.train()
    batch, labels = inputs_and_labels(name, num_labels)
    for model in (ours, ref):
        out = model(**batch, **labels)
        if name == "BertModel":  # no loss of its own: any function of the real tokens' states
            real = batch["attention_mask"].bool()
            loss = out.last_hidden_state[real].square().mean() + out.pooler_output.sum()
        else:
            loss = out.loss if model is ours else reference_loss(name, out, batch, labels)
        loss.backward()
    ref_params = dict(ref.named_parameters())
    for key, p in ours.named_parameters():
        ref_grad = ref_params[key].grad
        if ref_grad.norm() < 1e-6:  # zero in exact arithmetic: a bias added to every entry a softmax compares
            assert p.grad.norm() < 1e-6, key  # (attention keys, answer positions, choices): rounding noise
            continue
        relative = ((p.grad - ref_grad).norm() / ref_grad.norm()).item()
        assert relative <= 1e-4, f"gradient of {key} differs by {relative:.2e} (relative)"


@pytest.mark.parametrize("name,num_labels", CASES, ids=CASE_IDS)
def test_reference_checkpoint_loads_and_agrees(name, num_labels, tmp_path):
    """A checkpoint written by the reference: same outputs and losses, then the same gradients."""
    torch.manual_seed(0)
    ref = perturb(getattr(transformers, name)(transformers.BertConfig(**MINI, num_labels=num_labels)))
    ref.save_pretrained(tmp_path)
    ours = head_class(name).from_pretrained(tmp_path)
    assert ours.config.num_labels == num_labels
    assert_agree(name, ours, ref, num_labels)
    assert_same_gradients(name, ours, ref, num_labels)


@pytest.mark.parametrize("name,num_labels", CASES, ids=CASE_IDS)
def test_reference_loads_our_checkpoint_and_agrees(name, num_labels, tmp_path):
    """A checkpoint written by bertforge: the reference finds every tensor it expects, and nothing else."""
    torch.manual_seed(0)
    config = BertConfig(**MINI, id2label={i: f"L{i}" for i in range(num_labels)})
    ours = perturb(head_class(name)(config))
    ours.save_pretrained(tmp_path)
    ref, info = getattr(transformers, name).from_pretrained(tmp_path, output_loading_info=True)
    assert not (info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]), info
    assert ref.config.id2label == config.id2label
    assert_agree(name, ours, ref, num_labels)


@pytest.mark.slow
def test_minilm_matches_reference_on_sst2_dev():
    """The real all-MiniLM-L6-v2 checkpoint on all 872 SST-2 dev sentences: every layer, and the pooler."""
    model_dir = require_shared("models", "all-MiniLM-L6-v2")
    with open(require_shared("data", "glue", "SST-2", "dev.tsv"), encoding="utf-8", newline="") as f:
        sentences = [row["sentence"] for row in csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE)]
    assert len(sentences) == 872
    tokenizer = transformers.BertTokenizerFast.from_pretrained(model_dir)
    # Batches of similar lengths keep the reference's work on padding small; most still hold some padding.
    sentences.sort(key=lambda s: len(tokenizer.tokenize(s)))
    ours = bf.BertModel.from_pretrained(model_dir).eval()
    ref = transformers.BertModel.from_pretrained(model_dir).eval()
    worst = {}
    with torch.inference_mode():
        for start in range(0, len(sentences), 32):
            batch = dict(tokenizer(sentences[start:start + 32], padding=True, return_tensors="pt"))
            a = ours(**batch, output_hidden_states=True)
            b = ref(**batch, output_hidden_states=True)
            real = batch["attention_mask"].bool()
            pairs = [(f"hidden_states[{i}]", x, y) for i, (x, y) in enumerate(zip(a.hidden_states, b.hidden_states))]
            pairs.append(("last_hidden_state", a.last_hidden_state, b.last_hidden_state))
            for what, x, y in pairs:
                worst[what] = max(worst.get(what, 0.0), max_diff(x[real], y[real]))
                assert not x[~real].any(), f"{what}: padding positions are not zero"
            worst["pooler_output"] = max(worst.get("pooler_output", 0.0), max_diff(a.pooler_output, b.pooler_output))
    assert len(worst) == 6 + 1 + 2
    assert max(worst.values()) <= 1e-4, worst


# ---------------------------------------------------------------------------------------------------------
# Packing: padding removed inside the encoder must not change the real tokens' outputs


def test_padded_rows_equal_each_row_alone():
    """Right padding, left padding and holes in the mask: each row's real tokens match the row run alone."""
    torch.manual_seed(0)
    model = perturb(bf.BertModel(BertConfig(**MINI))).eval()
    g = torch.Generator().manual_seed(3)
    ids = torch.randint(5, VOCAB, (4, 24), generator=g)
    types = torch.randint(0, 2, (4, 24), generator=g)
    mask = torch.ones(4, 24, dtype=torch.long)
    mask[0, 15:] = 0  # right padding
    mask[1, :7] = 0  # left padding
    mask[2, [3, 4, 11, 20, 21, 22, 23]] = 0  # holes, and padding at the end
    # row 3 has no padding
    positions = (mask.cumsum(1) - 1).clamp(min=0)  # the real tokens numbered 0.. as when run alone
    with torch.no_grad():
        batched = model(ids, mask, types, positions, output_hidden_states=True)
        for row in range(4):
            real = mask[row].bool()
            alone = model(ids[row, real][None], token_type_ids=types[row, real][None], output_hidden_states=True)
            for i, (x, y) in enumerate(zip(batched.hidden_states, alone.hidden_states)):
                assert max_diff(x[row, real], y[0]) <= 1e-5, f"row {row}, hidden_states[{i}]"
                assert not x[row, ~real].any(), f"row {row}, hidden_states[{i}]: padding is not zero"
            assert max_diff(batched.last_hidden_state[row, real], alone.last_hidden_state[0]) <= 1e-5


def test_fused_attention_projections_compute_the_same():
    """fuse(): one [H -> 3 H] layer in place of Q, K and V gives the same outputs; the three are gone."""
    torch.manual_seed(0)
    model = perturb(bf.BertModel(BertConfig(**MINI))).eval()
    batch = pair_batch([(10, 5), (4, 0), (7, 7)])
    with torch.no_grad():
        before = model(**batch).last_hidden_state
        for layer in model.encoder.layer:
            layer.attention.self.fuse()
        after = model(**batch).last_hidden_state
    assert max_diff(before, after) <= 1e-5
    names = [name for name, _ in model.named_parameters()]
    assert "encoder.layer.0.attention.self.fused.weight" in names and not any(".query." in n for n in names)


def test_masked_lm_scores_only_masked_positions():
    torch.manual_seed(0)
    model = bf.BertForMaskedLM(BertConfig(**MINI)).eval()
    batch = pair_batch([(10, 5), (4, 0)])
    labels = mlm_labels(batch, torch.Generator().manual_seed(0))["labels"]
    with torch.no_grad():
        full = model(**batch).logits
        masked = model(**batch, labels=labels).logits
    chosen = labels != -100
    assert full.shape == (*batch["input_ids"].shape, VOCAB)
    assert max_diff(masked, full[chosen]) <= 1e-5


def test_initialisation_follows_the_paper():
    """Weights from a normal of std 0.02 cut at 2 std (Google's truncation), biases 0, LayerNorm 1 and 0."""
    torch.manual_seed(0)
    model = bf.BertForPreTraining(BertConfig(**MINI))
    weights = []
    for key, p in model.named_parameters():
        if key.endswith("LayerNorm.weight"):
            assert torch.all(p == 1), key
        elif key.endswith("bias"):
            assert not p.any(), key
        else:
            weights.append(p.detach().flatten())
    weights = torch.cat(weights)
    assert weights.abs().max() <= 0.04
    # The standard deviation of a unit normal cut at +-2 is 0.8796; about 3M draws pin it to 1e-4.
    assert abs(weights.mean().item()) < 1e-4 and abs(weights.std().item() - 0.02 * 0.8796) < 1e-4
