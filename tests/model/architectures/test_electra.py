"""ELECTRA (the discriminator) against transformers' own implementation (the reference), on checkpoints transformers
writes (conftest.electra_folder: random weights at a scaled-down shape of electra-small-discriminator's, tables
narrower than the encoder, a WordPiece tokenizer trained here): every head, batches with padding, segments and a
row at the position limit, the layout without a projection (electra-base's), the real models' config.json files,
the tokenizer, the cut rules, and broken folders refused in one line."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertforge.core.errors import BertforgeError
from bertforge.model.architectures import electra
from bertforge.model.architectures.registry import ARCHITECTURES, heads_of, read_config
from bertforge.model.architectures.bert import BertModel
from bertforge.model.architectures.family_configs import ElectraConfig
from bertforge.model.formats.sizes import model_shapes
from bertforge.model.student import activation_ranks, cut_config, pruned_student, task_head
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from bertforge.text.tokenizer import BertTokenizer
from tests.conftest import ROBERTA_TEXTS, broken, compare, electra_folder

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

HEADS = ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
         "ForMultipleChoice"]
PAD, LIMIT = 0, 128  # pad_token_id; the position table's rows
# rows' real lengths: one row; padded; a row at the position limit
LENGTHS = [[10], [50, 23, 7], [LIMIT, 60]]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {}

    def make(name, **config):
        key = (name, repr(sorted(config.items())))
        if key not in made:
            labels = {"num_labels": 2 if "Question" in name else 3}
            made[key] = electra_folder(tmp_path_factory.mktemp(name), "Electra" + name, **{**labels, **config})
        return made[key]
    return make


def loaded(folders, name, **config):
    """The reference model and ours, from one folder transformers wrote."""
    folder = folders(name, **config)
    return (getattr(transformers, "Electra" + name).from_pretrained(folder).eval(),
            getattr(electra, "Electra" + name).from_pretrained(folder))


def batch(lengths: list[int], vocab: int, multiple_choice: bool = False):
    """Random ids of the ordinary tokens padded with PAD, the attention mask, and segments (the second half of each
    row sentence B)."""
    ids = torch.randint(5, vocab, (len(lengths), max(lengths)))
    mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = ids.masked_fill(mask == 0, PAD)
    segments = ((torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None] // 2) & mask.bool()).long()
    if multiple_choice:  # two choices per example
        return ids[None].repeat(2, 1, 1), mask[None].repeat(2, 1, 1), segments[None].repeat(2, 1, 1)
    return ids, mask, segments


@pytest.mark.parametrize("head", HEADS)
def test_every_head_agrees_with_the_reference_within_1e_4(folders, head):
    reference, ours = loaded(folders, head)
    assert ours.fresh_parts == [] and ours.base_model.embeddings_project is not None
    for lengths in LENGTHS:
        worst = compare(reference, ours, *batch(lengths, ours.config.vocab_size, head == "ForMultipleChoice"))
        assert max(worst.values()) < 1e-4, (lengths, worst)


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForMultipleChoice"])
def test_without_a_projection_the_tables_are_the_encoders_width_as_electra_bases(folders, head):
    """embedding_size = hidden_size: no embeddings_project, in the checkpoint or the model."""
    reference, ours = loaded(folders, head, embedding_size=64)
    assert ours.base_model.embeddings_project is None and ours.fresh_parts == []
    worst = compare(reference, ours, *batch([LIMIT, 33], ours.config.vocab_size, head == "ForMultipleChoice"))
    assert max(worst.values()) < 1e-4, worst


def test_inputs_embeds_are_the_narrow_tables_rows_as_the_references(folders):
    reference, ours = loaded(folders, "Model")
    ids, _, segments = batch([20, 20], ours.config.vocab_size)
    embeds = ours.word_embeddings(ids).detach()
    assert embeds.shape[-1] == 32
    with torch.no_grad():
        theirs = reference(inputs_embeds=embeds, token_type_ids=segments).last_hidden_state
        assert torch.allclose(ours(inputs_embeds=embeds, token_type_ids=segments).last_hidden_state, theirs,
                              atol=1e-5)


def test_the_masked_lm_scores_only_the_labelled_positions_with_the_reference_loss(folders):
    reference, ours = loaded(folders, "ForMaskedLM")
    ids, mask, _ = batch([50, 23], ours.config.vocab_size)
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 20] = 7, 9
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, labels=labels)
        mine = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert mine.logits.shape == (2, ours.config.vocab_size)
    assert torch.allclose(mine.logits, theirs.logits[labels != -100], atol=1e-5)
    assert abs(mine.loss.item() - theirs.loss.item()) < 1e-5 and mine.mlm_loss is mine.loss


def test_the_gradients_of_a_training_step_agree_with_the_reference(folders):
    """Every parameter's gradient of the classification loss, the projection's included."""
    reference, ours = loaded(folders, "ForSequenceClassification", hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    ids, mask, segments = batch([50, 23, 7], ours.config.vocab_size)
    labels = torch.tensor([1, 2, 0])
    reference.train(), ours.train()  # the dropout rates are 0: train mode changes nothing else
    reference(input_ids=ids, attention_mask=mask, token_type_ids=segments, labels=labels).loss.backward()
    ours(input_ids=ids, attention_mask=mask, token_type_ids=segments, labels=labels).loss.backward()
    theirs = dict(reference.named_parameters())
    differ = [name for name, p in ours.named_parameters()
              if not torch.allclose(p.grad, theirs[name].grad, rtol=1e-4, atol=1e-6)]
    assert differ == []


def test_training_with_dropout_drops_the_narrow_tables_with_their_own_dropout(folders):
    """The layout's masks are hidden_size wide; the tables' dropout (embedding_size wide) is a plain one."""
    _, ours = loaded(folders, "ForTokenClassification")
    ids, mask, _ = batch([50, 23], ours.config.vocab_size)
    ours.train()
    loss = ours(input_ids=ids, attention_mask=mask, labels=ids.remainder(3)).loss
    loss.backward()
    assert loss.isfinite() and ours.base_model.embeddings_project.weight.grad.abs().sum() > 0


def test_a_bert_head_class_loads_electra_as_its_own_class(folders):
    folder = folders("ForSequenceClassification")
    assert type(BertForSequenceClassification.from_pretrained(folder)) is electra.ElectraForSequenceClassification
    assert type(BertModel.from_pretrained(folder)) is electra.ElectraModel
    assert heads_of(read_config(folder / "config.json")) == ["BertForSequenceClassification"]


def test_saved_models_load_in_transformers_with_the_same_outputs(folders, tmp_path):
    _, ours = loaded(folders, "ForSequenceClassification")
    ours.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["architectures"] == \
        ["ElectraForSequenceClassification"]
    again = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "again").eval()
    assert type(again).__name__ == "ElectraForSequenceClassification"
    assert max(compare(again, ours, *batch([50, 23], ours.config.vocab_size)).values()) < 1e-5


def test_a_checkpoint_that_stores_the_tied_generator_head_again_loads_with_nothing_unused(folders, tmp_path, caplog):
    reference, _ = loaded(folders, "ForMaskedLM")
    folder = tmp_path / "old"
    shutil.copytree(folders("ForMaskedLM"), folder)
    weights = load_file(folder / "model.safetensors")
    weights["generator_lm_head.weight"] = weights["electra.embeddings.word_embeddings.weight"].clone()
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with caplog.at_level("INFO", logger="bertforge"):
        ours = electra.ElectraForMaskedLM.from_pretrained(folder)
    assert "not used" not in caplog.text and ours.fresh_parts == []
    assert compare(reference, ours, *batch([12], ours.config.vocab_size))["logits"] < 1e-5


def test_a_discriminator_checkpoint_gives_its_encoder_to_a_task_head(folders, caplog):
    """google/electra-*-discriminator ship ElectraForPreTraining: its replaced-token head has no head of the
    registry, so its weights go unused; the encoder is read, the classifier fresh."""
    discriminator = transformers.ElectraForPreTraining.from_pretrained(folders("ForPreTraining")).eval()
    with caplog.at_level("INFO", logger="bertforge"):
        head = electra.ElectraForSequenceClassification.from_pretrained(folders("ForPreTraining"), new_head=True)
    assert head.fresh_parts == ["classifier"] and "discriminator head" in caplog.text
    ids, mask, segments = batch([30, 12], head.config.vocab_size)
    with torch.no_grad():
        theirs = discriminator.electra(input_ids=ids, attention_mask=mask, token_type_ids=segments)
        mine = head.electra(input_ids=ids, attention_mask=mask, token_type_ids=segments)
    real = mask.bool()
    assert (theirs.last_hidden_state[real] - mine.last_hidden_state[real]).abs().max() < 1e-5


def test_a_head_reads_the_encoder_of_a_bare_encoder_checkpoint(folders):
    """transformers saves ElectraModel's parts without the `electra.` prefix, the projection among them."""
    encoder = electra.ElectraModel.from_pretrained(folders("Model"))
    head = electra.ElectraForMultipleChoice.from_pretrained(folders("Model"), new_head=True)
    assert head.fresh_parts == ["classifier", "sequence summary"]
    own = head.electra.state_dict()
    assert "embeddings_project.weight" in own
    assert all(torch.equal(own[key], value) for key, value in encoder.state_dict().items())


def test_resize_token_embeddings_grows_the_table_and_the_output_bias_as_the_reference(folders):
    reference, ours = loaded(folders, "ForMaskedLM")
    old = ours.config.vocab_size
    torch.manual_seed(1)
    ours.resize_token_embeddings(old + 7)
    torch.manual_seed(1)
    reference.resize_token_embeddings(old + 7)
    assert ours.generator_lm_head.bias.shape == (old + 7,) and not ours.generator_lm_head.bias[old:].any()
    ids = torch.tensor([[2, old - 1, 10, 3]])
    with torch.no_grad():
        mine, theirs = ours(input_ids=ids).logits, reference(input_ids=ids).logits
    assert (mine[..., :old] - theirs[..., :old]).abs().max() < 1e-4


# ---------------------------------------------------------------------------------------------- config.json

SMALL = {"architectures": ["ElectraForPreTraining"], "attention_probs_dropout_prob": 0.1, "embedding_size": 128,
         "hidden_act": "gelu", "hidden_dropout_prob": 0.1, "hidden_size": 256, "initializer_range": 0.02,
         "intermediate_size": 1024, "layer_norm_eps": 1e-12, "max_position_embeddings": 512, "model_type": "electra",
         "num_attention_heads": 4, "num_hidden_layers": 12, "pad_token_id": 0, "type_vocab_size": 2,
         "vocab_size": 30522}
# The real models' config.json files (their fields as published).
REAL_CONFIGS = {
    "google/electra-small-discriminator": SMALL,
    "google/electra-base-discriminator": {**SMALL, "embedding_size": 768, "hidden_size": 768,
                                          "intermediate_size": 3072, "num_attention_heads": 12},
    "google/electra-large-discriminator": {**SMALL, "embedding_size": 1024, "hidden_size": 1024,
                                           "intermediate_size": 4096, "num_attention_heads": 16,
                                           "num_hidden_layers": 24},
}


@pytest.mark.parametrize("name", REAL_CONFIGS)
@pytest.mark.parametrize("head", ["Model", "ForSequenceClassification", "ForMultipleChoice"])
def test_the_real_models_config_files_describe_their_models(tmp_path, name, head):
    """Each is read as ELECTRA's config; the model it describes (built on the meta device) has the reference
    model's tensors; saved, the file keeps its fields."""
    fields = REAL_CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(fields))
    config = read_config(tmp_path / "config.json")
    assert type(config) is ElectraConfig and config.max_tokens == 512
    shapes = model_shapes(getattr(electra, "Electra" + head), config)
    with torch.device("meta"):
        theirs = getattr(transformers, "Electra" + head)(transformers.AutoConfig.for_model(**fields))
    assert {k: s for k, (s, _) in shapes.items()} == {k: tuple(v.shape) for k, v in theirs.state_dict().items()}
    assert config.to_dict().items() >= {k: v for k, v in fields.items() if k != "architectures"}.items()


@pytest.mark.parametrize("fields, says", [
    ({"embedding_size": 0}, "embedding_size must be a whole number of at least 1, not 0"),
    ({"summary_type": "last"}, "summary_type 'last' is not one of first"),
    ({"summary_activation": "swish"}, "summary_activation 'swish' is not one of"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings false is not supported"),
    ({"hidden_act": "swish"}, "hidden_act 'swish' is not one of"),
])
def test_a_config_bertforge_cannot_run_is_one_line(fields, says):
    with pytest.raises(BertforgeError, match=says) as excinfo:
        ElectraConfig.from_dict({"num_hidden_layers": 2, **fields})
    assert "\n" not in str(excinfo.value)


def drop_layer(weights):
    for key in [k for k in weights if k.startswith("electra.encoder.layer.3.")]:
        del weights[key]


@pytest.mark.parametrize("change, config, says", [
    (drop_layer, None, "layer 3 not in the weights; num_hidden_layers 4, the weights have 3 layers"),
    (lambda w: w.pop("electra.embeddings_project.weight"), None, "embeddings_project not in the weights"),
    (None, {"embedding_size": 64}, "has shape (32,) but the config gives (64,) (embedding_size 64)"),
    (None, {"max_position_embeddings": 512}, "(max_position_embeddings 512)"),
    (None, {"layer_norm_eps": -1}, "config.json: layer_norm_eps must be a number above 0"),
    (None, {"summary_type": "mean"}, "config.json: summary_type 'mean' is not one of first"),
])
def test_a_broken_folder_is_refused_in_one_line(folders, tmp_path, change, config, says):
    folder = broken(folders("ForSequenceClassification"), tmp_path, change, config)
    for model_class in (BertForSequenceClassification, BertModel, electra.ElectraModel):
        with pytest.raises(BertforgeError) as excinfo:
            model_class.from_pretrained(folder)
        message = str(excinfo.value)
        assert says in message and "\n" not in message and str(folder) in message, message


# ---------------------------------------------------------------------------------------------- tokenizer


def test_the_wordpiece_tokenizer_is_the_references_with_segments(folders):
    """ids, offsets, and pairs laid out [CLS] A [SEP] B [SEP] with sentence B's segment ids."""
    folder = folders("Model")
    ours, theirs = BertTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    texts = ROBERTA_TEXTS[:7] + ["Mixed: São Paulo 東京 😀 naïveté", ""]
    for text in texts:
        a = ours(text, return_offsets_mapping=True)
        b = theirs(text, return_offsets_mapping=True)
        assert a["input_ids"] == b["input_ids"], text
        assert [tuple(o) for o in a["offset_mapping"]] == [tuple(o) for o in b["offset_mapping"]], text
    a, b = ours(texts[:4], texts[3:7], padding=True), theirs(texts[:4], texts[3:7], padding=True)
    assert a["input_ids"] == b["input_ids"] and a["token_type_ids"] == b["token_type_ids"]
    assert any(map(any, a["token_type_ids"]))


# ---------------------------------------------------------------------------------------------- cut rules


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForMultipleChoice", "ForTokenClassification",
                                  "ForMaskedLM"])
def test_a_student_cut_at_the_teachers_size_is_the_teacher(folders, head):
    """ELECTRA's cut rules (cut_rules.ElectraCut: RoBERTa's, the tables kept whole and the projection's rows cut with
    the hidden channels, the sequence summary cut as a pooler) keep every part at the teacher's size."""
    _, teacher = loaded(folders, head)
    ids, mask, segments = batch([20, 9], teacher.config.vocab_size, head == "ForMultipleChoice")
    ranks = activation_ranks(teacher, lambda: teacher(input_ids=ids, attention_mask=mask, token_type_ids=segments),
                             task_head(teacher) if head != "ForMaskedLM" else None)
    assert ("pooled" in ranks) == (head in ("ForSequenceClassification", "ForMultipleChoice"))
    layers = list(range(teacher.config.num_hidden_layers))
    student = pruned_student(teacher, teacher.config, layers, ranks).eval()
    with torch.no_grad():
        assert torch.allclose(student(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits,
                              teacher(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits, atol=1e-5)
    narrower = cut_config(teacher.config, ElectraConfig.from_dict({"hidden_size": 48, "num_attention_heads": 3,
                                                                   "num_hidden_layers": 2}), "48 wide", [0, 3])
    cut = pruned_student(teacher, narrower, [0, 3], ranks)
    assert cut.electra.embeddings_project.weight.shape == (48, 32)  # the tables whole, their projection cut
    assert cut(input_ids=ids, attention_mask=mask).logits.isfinite().all()


def test_the_registry_names_electras_parts():
    arch = ARCHITECTURES["electra"]
    assert arch.classes["BertForMaskedLM"] == "bertforge.model.architectures.electra:ElectraForMaskedLM"
    assert arch.encoder_parts(["electra.embeddings_project.weight", "electra.encoder.layer.0.output.dense.weight"]) \
        == ["embeddings_project", "layer 0"]


def test_a_student_as_wide_as_the_teachers_projected_tables_is_refused_in_one_line():
    """The projected tables are kept whole: a student as wide as they are would lose the projection."""
    teacher = ElectraConfig.from_dict({"embedding_size": 32, "hidden_size": 64, "num_attention_heads": 4,
                                       "num_hidden_layers": 2, "intermediate_size": 96})
    size = ElectraConfig.from_dict({"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 2})
    with pytest.raises(BertforgeError, match="the student tiny is 32 wide; the teacher's tables") as excinfo:
        cut_config(teacher, size, "tiny")
    assert "\n" not in str(excinfo.value)


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForMaskedLM"])
def test_a_teacher_without_a_projection_is_cut_as_bert_its_tables_with_the_width(folders, head):
    """electra-base's layout (embedding_size = hidden_size): the student's tables are cut to its width, no
    projection; at the teacher's size it is the teacher."""
    _, teacher = loaded(folders, head, embedding_size=64)
    ids, mask, segments = batch([20, 9], teacher.config.vocab_size)
    ranks = activation_ranks(teacher, lambda: teacher(input_ids=ids, attention_mask=mask, token_type_ids=segments),
                             task_head(teacher) if head != "ForMaskedLM" else None)
    same = pruned_student(teacher, teacher.config, [0, 1, 2, 3], ranks).eval()
    with torch.no_grad():
        assert torch.allclose(same(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits,
                              teacher(input_ids=ids, attention_mask=mask, token_type_ids=segments).logits, atol=1e-5)
    config = cut_config(teacher.config, ElectraConfig.from_dict({"hidden_size": 32, "num_attention_heads": 2,
                                                                 "num_hidden_layers": 2}), "tiny", [0, 3])
    assert (config.embedding_size, config.hidden_size) == (32, 32)
    cut = pruned_student(teacher, config, [0, 3], ranks)
    assert cut.electra.embeddings_project is None and cut.word_embeddings.weight.shape[1] == 32
    assert cut(input_ids=ids, attention_mask=mask).logits.isfinite().all()
