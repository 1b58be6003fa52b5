"""The representation losses of distillation: the relation loss against a hand computation on a 2-head toy, its
fp32 under bf16 autocast, and the relation heads that pair any two widths."""

import math

import pytest
import torch

from bertforge.training.representation_loss import relation_heads, relation_kl, relation_log_probs


def test_relation_loss_matches_a_hand_computation_on_two_heads():
    teacher = torch.tensor([[[1.0, 0.0, 0.5, -1.0], [0.0, 2.0, 1.0, 0.0], [3.0, 3.0, 3.0, 3.0]]])
    student = torch.tensor([[[0.5, 0.5, 0.0, 1.0], [1.0, -1.0, 0.5, 0.5], [9.0, 9.0, 9.0, 9.0]]])
    mask = torch.tensor([[True, True, False]])  # the third token is padding: no key, no query

    def relations(x, head):  # [2][2]: softmax over the two real keys of the scaled dot products
        v = [row[2 * head:2 * head + 2] for row in x[0].tolist()[:2]]
        scores = [[sum(a * b for a, b in zip(q, k)) / math.sqrt(2) for k in v] for q in v]
        return [[math.exp(s) / sum(math.exp(t) for t in row) for s in row] for row in scores]

    expected = []
    for query in range(2):
        kls = []
        for head in range(2):
            p, q = relations(teacher, head)[query], relations(student, head)[query]
            kls.append(sum(a * math.log(a / b) for a, b in zip(p, q)))
        expected.append(sum(kls) / 2)
    kl = relation_kl(relation_log_probs(teacher, mask, 2), relation_log_probs(student, mask, 2), mask)
    assert kl[0, :2].tolist() == pytest.approx(expected, rel=1e-5)
    assert kl[0, 2].item() == 0
    assert relation_kl(relation_log_probs(teacher, mask, 2), relation_log_probs(teacher, mask, 2), mask).abs().max() \
        < 1e-6


def test_relations_are_fp32_under_bf16_autocast():
    torch.manual_seed(0)
    vectors, mask = torch.randn(2, 5, 8), torch.ones(2, 5, dtype=torch.bool)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        relations = relation_log_probs(vectors, mask, 2)
    assert relations.dtype == torch.float32
    assert torch.allclose(relations, relation_log_probs(vectors, mask, 2))


def test_relation_heads_divide_both_widths():
    assert relation_heads(384, 256, 12) == 8
    assert relation_heads(384, 384, 12) == 12
    assert relation_heads(96, 128, 6) == 4
    assert relation_heads(768, 128, 12) == 8
