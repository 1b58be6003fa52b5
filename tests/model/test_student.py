"""A student's start from its teacher (model/student.py): the teacher's embeddings projected onto its width."""

import pytest
import torch

from bertforge.core.errors import BertforgeError
from bertforge.model.bert import BertModel
from bertforge.model.config import BertConfig
from bertforge.model.student import project_embeddings, start_embeddings


def test_teacher_embeddings_keep_the_teachers_geometry_at_any_width():
    torch.manual_seed(0)
    config = BertConfig.from_name("mini", vocab_size=500).to_dict()
    model = BertModel(BertConfig.from_dict(config))
    words = model.embeddings.word_embeddings.weight.detach()
    centred = words - words.mean(0)
    same = BertModel(BertConfig.from_dict(config))
    narrow = BertModel(BertConfig.from_dict({**config, "hidden_size": 32, "num_attention_heads": 2,
                                             "intermediate_size": 64}))
    for student in (same, narrow):
        project_embeddings(model, student)
    ours = same.embeddings.word_embeddings.weight
    torch.testing.assert_close(ours @ ours.T, centred @ centred.T, atol=1e-4, rtol=1e-4)  # a rotation
    positions = [m.embeddings.position_embeddings.weight for m in (same, model)]
    torch.testing.assert_close(positions[0] @ positions[0].T, positions[1] @ positions[1].T, atol=1e-4, rtol=1e-4)
    narrow_words = narrow.embeddings.word_embeddings.weight.detach()
    singular = torch.linalg.svdvals(centred)
    assert narrow_words.shape == (words.shape[0], 32)
    torch.testing.assert_close(narrow_words.T @ narrow_words, torch.diag(singular[:32] ** 2), atol=1e-3, rtol=1e-4)
    assert narrow.embeddings.LayerNorm.weight.eq(1).all()  # above the embeddings: the student's own
    with pytest.raises(BertforgeError, match="wider"):
        project_embeddings(narrow, same)


def test_a_fresh_student_starts_with_the_teachers_embeddings_unless_wider_or_asked():
    teacher = BertModel(BertConfig(vocab_size=300, hidden_size=96, num_hidden_layers=1, num_attention_heads=6,
                                   intermediate_size=192))

    def student(width):
        return BertModel(BertConfig(vocab_size=300, hidden_size=width, num_hidden_layers=1, num_attention_heads=2,
                                    intermediate_size=2 * width))

    for width, asked, expected in [(64, None, "teacher"), (64, "random", "random"), (128, None, "random")]:
        model = student(width)
        before = model.embeddings.word_embeddings.weight.detach().clone()
        assert start_embeddings(model, teacher, asked) == expected
        assert torch.equal(before, model.embeddings.word_embeddings.weight) == (expected == "random")
    with pytest.raises(BertforgeError, match="wider"):
        start_embeddings(student(128), teacher, "teacher")
