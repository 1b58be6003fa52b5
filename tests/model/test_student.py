"""A student's start from its teacher (model/student.py): the teacher's embeddings projected onto its width, or the
teacher cut to the student's size by the activations of its parts."""

import pytest
import torch

from bertforge.core.errors import BertforgeError
from bertforge.model.architectures.bert import BertModel
from bertforge.model.architectures.config import BertConfig
from bertforge.model.student import (
    activation_ranks, cut_config, project_embeddings, pruned_student, start_embeddings, student_config, task_head, top
)
from bertforge.model.architectures.task_heads import (
    BertForMultipleChoice, BertForQuestionAnswering, BertForSequenceClassification, BertForTokenClassification
)


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


@pytest.mark.parametrize("positions, types, vocab", [(128, 2, 300), (1024, 1, 301)])
def test_a_student_of_a_size_has_its_teachers_tables_every_row_projected(positions, types, vocab):
    """Against the size's 512 positions and 2 token types: the student's tables are the teacher's (student_config),
    each row the teacher's on the directions its words are projected on."""
    torch.manual_seed(0)
    teacher = BertModel(BertConfig.from_name("mini", num_hidden_layers=1, vocab_size=vocab,
                                             max_position_embeddings=positions, type_vocab_size=types))
    config = student_config(teacher.config, "tiny", pad_token_id=3)
    assert (config.vocab_size, config.max_position_embeddings, config.type_vocab_size) == (vocab, positions, types)
    assert (config.num_hidden_layers, config.hidden_size, config.pad_token_id) == (2, 128, 3)
    student = BertModel(config)
    project_embeddings(teacher, student)
    ours, theirs = student.embeddings, teacher.embeddings
    words = theirs.word_embeddings.weight.detach()
    directions = torch.linalg.lstsq(words - words.mean(0), ours.word_embeddings.weight.detach()).solution
    for name in ("position_embeddings", "token_type_embeddings"):
        torch.testing.assert_close(getattr(ours, name).weight, getattr(theirs, name).weight @ directions,
                                   atol=1e-4, rtol=1e-4)
    # a student of its own size (pretrain --config): the rows both have projected, the others its own
    own = BertModel(BertConfig.from_name("tiny", vocab_size=vocab))
    before = own.embeddings.position_embeddings.weight.detach().clone()
    project_embeddings(teacher, own)
    table, shared = own.embeddings.position_embeddings.weight, min(positions, 512)
    torch.testing.assert_close(table[:shared], theirs.position_embeddings.weight[:shared] @ directions,
                               atol=1e-4, rtol=1e-4)
    assert torch.equal(table[shared:], before[shared:])
    with pytest.raises(BertforgeError) as e:
        project_embeddings(teacher, BertModel(BertConfig.from_name("tiny", vocab_size=vocab + 1)))
    assert "\n" not in str(e.value) and "vocabulary" in str(e.value)


def toy_teacher():
    """3 layers of 64 (4 heads of 16, feed-forward 128), a 2-label classifier; random, in eval mode."""
    torch.manual_seed(0)
    config = BertConfig(vocab_size=40, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=128, id2label={0: "a", 1: "b"})
    return BertForSequenceClassification(config).eval()


def feed(model):
    ids = torch.randint(4, 40, (6, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[3:, 6:] = 0  # padded rows too
    return lambda: model(input_ids=ids, attention_mask=mask)["logits"]


def ranks_of(teacher):
    return activation_ranks(teacher.bert, feed(teacher), teacher.classifier)


def test_cutting_the_teacher_to_its_own_size_keeps_every_weight():
    teacher = toy_teacher()
    student = pruned_student(teacher, teacher.config, [0, 1, 2], ranks_of(teacher))
    assert student.state_dict().keys() == teacher.state_dict().keys()
    for key, value in teacher.state_dict().items():
        assert torch.equal(student.state_dict()[key], value), key
    assert torch.equal(feed(student.eval())(), feed(teacher)())


def test_the_parts_the_teacher_does_not_use_are_the_ones_cut():
    teacher = toy_teacher()
    dead_channels, dead_head, dead_neurons = torch.arange(8, 24), 2, torch.arange(100, 128)
    with torch.no_grad():  # channels 8-23 zero after every LayerNorm, head 2 and neurons 100-127 silent
        for module in teacher.modules():
            if isinstance(module, torch.nn.LayerNorm):
                module.weight[dead_channels] = 0
                module.bias[dead_channels] = 0
        for layer in teacher.bert.encoder.layer:
            value = layer.attention.self.value
            value.weight[16 * dead_head:16 * (dead_head + 1)] = 0
            value.bias[16 * dead_head:16 * (dead_head + 1)] = 0
            layer.intermediate.dense.weight[dead_neurons] = 0
            layer.intermediate.dense.bias[dead_neurons] = -10.0  # GELU(-10) is ~0
    ranks = ranks_of(teacher)
    config = BertConfig.from_dict({**teacher.config.to_dict(), "hidden_size": 48, "num_attention_heads": 3,
                                   "intermediate_size": 100, "num_hidden_layers": 2})
    student = pruned_student(teacher, config, [0, 2], ranks)
    kept = torch.tensor([i for i in range(64) if i not in dead_channels])
    live_heads = torch.tensor([*range(0, 32), *range(48, 64)])  # heads 0, 1, 3
    for k, i in enumerate([0, 2]):
        ours, theirs = student.bert.encoder.layer[k], teacher.bert.encoder.layer[i]
        assert torch.equal(ours.attention.self.query.weight, theirs.attention.self.query.weight[live_heads][:, kept])
        assert torch.equal(ours.attention.output.dense.weight,
                           theirs.attention.output.dense.weight[kept][:, live_heads])
        assert torch.equal(ours.output.dense.weight, theirs.output.dense.weight[kept][:, :100])
        assert torch.equal(ours.output.LayerNorm.bias, theirs.output.LayerNorm.bias[kept])
    assert torch.equal(student.bert.embeddings.word_embeddings.weight,
                       teacher.bert.embeddings.word_embeddings.weight[:, kept])
    assert student.classifier.weight.shape == (2, 48)


@pytest.mark.parametrize("pooler", [True, False])
def test_a_bare_encoder_is_cut_with_or_without_its_pooler(pooler):
    """A sentence encoder's teacher has no head: its parts are ranked on the encoder alone, and the cut is a
    BertModel with a pooler where the teacher has one."""
    task_model = toy_teacher()
    teacher = BertModel(task_model.config, add_pooling_layer=pooler).eval()
    teacher.load_state_dict(task_model.bert.state_dict(), strict=False)
    ids = torch.randint(4, 40, (6, 9), generator=torch.Generator().manual_seed(1))
    ranks = activation_ranks(teacher, lambda: teacher(input_ids=ids))
    assert ("pooled" in ranks) == pooler
    same = pruned_student(teacher, teacher.config, [0, 1, 2], ranks).eval()
    assert type(same) is BertModel and (same.pooler is not None) == pooler
    assert torch.equal(same(input_ids=ids).last_hidden_state, teacher(input_ids=ids).last_hidden_state)
    config = BertConfig.from_dict({**teacher.config.to_dict(), "hidden_size": 32, "num_attention_heads": 2,
                                   "intermediate_size": 64, "num_hidden_layers": 2})
    cut = pruned_student(teacher, config, [0, 2], ranks)
    assert cut.encoder.layer[1].output.dense.weight.shape == (32, 64)


@pytest.mark.parametrize("head_class", [BertForSequenceClassification, BertForMultipleChoice,
                                        BertForTokenClassification, BertForQuestionAnswering])
def test_every_head_keeps_the_input_channels_it_reads(head_class):
    """The head on the pooler (classification, multiple choice) keeps the pooler's outputs ranked highest; a head on
    the tokens (token classification, question answering: no pooler) keeps the hidden channels the encoder keeps.
    Cut to its own size, each model is itself."""
    torch.manual_seed(0)
    teacher = head_class(BertConfig(vocab_size=40, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                                    intermediate_size=128, id2label={0: "a", 1: "b", 2: "c"})).eval()
    ids = torch.randint(4, 40, (6, 9), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(ids)
    mask[3:, 6:] = 0
    if head_class is BertForMultipleChoice:
        ids, mask = ids.view(3, 2, 9), mask.view(3, 2, 9)

    def outputs(model):
        out = model(input_ids=ids, attention_mask=mask)
        return out["start_logits"] if "start_logits" in out else out["logits"]

    ranks = activation_ranks(teacher.bert, lambda: outputs(teacher), task_head(teacher))
    assert ("pooled" in ranks) == head_class.uses_pooler
    same = pruned_student(teacher, teacher.config, [0, 1, 2], ranks).eval()
    assert torch.equal(outputs(same), outputs(teacher))
    config = BertConfig.from_dict({**teacher.config.to_dict(), "hidden_size": 48, "num_attention_heads": 3,
                                   "intermediate_size": 100, "num_hidden_layers": 2})
    student = pruned_student(teacher, config, [0, 2], ranks).eval()
    read = top(ranks["pooled" if head_class.uses_pooler else "hidden"], 48)
    ours, theirs = task_head(student), task_head(teacher)
    assert torch.equal(ours.weight, theirs.weight[:, read]) and torch.equal(ours.bias, theirs.bias)
    assert torch.isfinite(outputs(student)).all()


def test_a_modernbert_teacher_cut_to_its_own_size_keeps_every_weight_and_output(tmp_path):
    transformers = pytest.importorskip("transformers")
    from bertforge.model.architectures.modernbert import ModernBertForSequenceClassification

    torch.manual_seed(0)
    config = transformers.ModernBertConfig(vocab_size=60, hidden_size=64, intermediate_size=96, num_hidden_layers=3,
                                           num_attention_heads=4, local_attention=8, pad_token_id=0, num_labels=2)
    transformers.ModernBertForSequenceClassification(config).save_pretrained(tmp_path)
    teacher = ModernBertForSequenceClassification.from_pretrained(tmp_path)
    ranks = activation_ranks(teacher, feed(teacher), task_head(teacher))
    assert ranks["neurons"].shape == (3, 96) and ranks["heads"].shape == (3, 4) and ranks["pooled"].shape == (64,)
    same = pruned_student(teacher, teacher.config, [0, 1, 2], ranks).eval()
    for key, value in teacher.state_dict().items():
        assert torch.equal(same.state_dict()[key], value), key
    assert torch.equal(feed(same)(), feed(teacher)())
    size = BertConfig.from_dict({**BertConfig().to_dict(), "hidden_size": 32, "num_attention_heads": 2,
                                 "num_hidden_layers": 2})
    cut = pruned_student(teacher, cut_config(teacher.config, size, "small", [0, 2]), [0, 2], ranks)
    assert cut.model.layers[1].attn.Wqkv.weight.shape == (96, 32)  # Q, K and V of 2 heads of 16
    assert cut.model.layers[1].mlp.Wi.weight.shape == (96, 32)  # value and gate of 48 neurons
    assert cut.config.layer_types == ["full_attention", "sliding_attention"]
    assert feed(cut.eval())().shape == (6, 2)
