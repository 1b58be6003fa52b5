"""DistilBERT against transformers' own implementation (the reference), on checkpoints transformers writes
(conftest.distilbert_folder: random weights at a scaled-down shape of distilbert-base, a WordPiece tokenizer trained
here): every head, batches with padding and a row at the position limit, sinusoidal positions, the real models'
config.json files, the tokenizer on mixed text, the cut rules, and broken folders refused in one line."""

import json

import pytest
import torch

from bertforge.core.errors import BertforgeError
from bertforge.model.architectures import distilbert
from bertforge.model.architectures.registry import ARCHITECTURES, heads_of, model_class, read_config
from bertforge.model.architectures.bert import BertModel
from bertforge.model.architectures.family_configs import DistilBertConfig
from bertforge.model.formats.sizes import model_shapes
from bertforge.model.student import activation_ranks, pruned_student, student_config, task_head
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from bertforge.text.tokenizer import BertTokenizer
from tests.conftest import ROBERTA_TEXTS, broken, compare, distilbert_folder, distilbert_tokenizer

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

HEADS = ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
         "ForMultipleChoice"]
PAD, LIMIT = 0, 128  # pad_token_id; the rows of the position table
LENGTHS = [[10], [50, 23, 7], [LIMIT, 60]]  # rows' real lengths: one row; padded; a row at the position limit


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {}

    def make(name, **config):
        key = (name, repr(sorted(config.items())))
        if key not in made:
            labels = {"num_labels": 2 if "Question" in name else 3}
            made[key] = distilbert_folder(tmp_path_factory.mktemp(name), name, **{**labels, **config})
        return made[key]
    return make


def loaded(folders, name, **config):
    """The reference model and ours, from one folder transformers wrote."""
    folder = folders(name, **config)
    return getattr(transformers, name).from_pretrained(folder).eval(), getattr(distilbert, name).from_pretrained(folder)


def batch(lengths: list[int], vocab: int, multiple_choice: bool = False):
    """Random ids of the ordinary tokens, padded with PAD; ids and the attention mask."""
    ids = torch.randint(5, vocab, (len(lengths), max(lengths)))
    mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
    ids = ids.masked_fill(mask == 0, PAD)
    if multiple_choice:  # two choices per example
        return ids[None].repeat(2, 1, 1), mask[None].repeat(2, 1, 1)
    return ids, mask


@pytest.mark.parametrize("head", HEADS)
def test_every_head_agrees_with_the_reference_within_1e_4(folders, head):
    reference, ours = loaded(folders, "DistilBert" + head)
    assert ours.fresh_parts == []
    for lengths in LENGTHS:
        ids, mask = batch(lengths, ours.config.vocab_size, head == "ForMultipleChoice")
        worst = compare(reference, ours, ids, mask)
        assert max(worst.values()) < 1e-4, (lengths, worst)


def test_sinusoidal_positions_are_the_references(folders):
    """A fresh model's table holds transformers' sinusoids; a checkpoint of them runs as the reference."""
    reference, ours = loaded(folders, "DistilBertForTokenClassification", sinusoidal_pos_embds=True)
    ids, mask = batch([LIMIT, 30], ours.config.vocab_size)
    assert max(compare(reference, ours, ids, mask).values()) < 1e-4
    config = DistilBertConfig(dim=64, n_heads=4, n_layers=1, hidden_dim=96, sinusoidal_pos_embds=True)
    theirs = transformers.DistilBertModel(transformers.DistilBertConfig(**config.to_dict()))
    assert torch.allclose(distilbert.DistilBertModel(config).embeddings.position_embeddings.weight,
                          theirs.embeddings.position_embeddings.weight, atol=1e-6)


def test_inputs_embeds_and_token_type_ids_are_read_as_the_reference_reads_them(folders):
    reference, ours = loaded(folders, "DistilBertModel")
    ids, _ = batch([20, 20], ours.config.vocab_size)
    embeds = ours.word_embeddings(ids).detach()
    with torch.no_grad():
        theirs = reference(inputs_embeds=embeds).last_hidden_state
        assert torch.allclose(ours(inputs_embeds=embeds).last_hidden_state, theirs, atol=1e-5)
        ones = ours(input_ids=ids, token_type_ids=torch.ones_like(ids)).last_hidden_state
        assert torch.equal(ones, ours(input_ids=ids).last_hidden_state)


def test_the_masked_lm_scores_only_the_labelled_positions_with_the_reference_loss(folders):
    reference, ours = loaded(folders, "DistilBertForMaskedLM")
    ids, mask = batch([50, 23], ours.config.vocab_size)
    labels = torch.full_like(ids, -100)
    labels[0, 3], labels[1, 20] = 7, 9
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, labels=labels)
        mine = ours(input_ids=ids, attention_mask=mask, labels=labels)
    assert mine.logits.shape == (2, ours.config.vocab_size)
    assert torch.allclose(mine.logits, theirs.logits[labels != -100], atol=1e-5)
    assert abs(mine.loss.item() - theirs.loss.item()) < 1e-5 and mine.mlm_loss is mine.loss


def test_the_gradients_of_a_training_step_agree_with_the_reference(folders):
    reference, ours = loaded(folders, "DistilBertForSequenceClassification", dropout=0.0, attention_dropout=0.0,
                             seq_classif_dropout=0.0)
    ids, mask = batch([50, 23, 7], ours.config.vocab_size)
    labels = torch.tensor([1, 2, 0])
    reference.train(), ours.train()  # the dropout rates are 0: train mode changes nothing else
    reference(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    ours(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    theirs = dict(reference.named_parameters())
    differ = [name for name, p in ours.named_parameters()
              if not torch.allclose(p.grad, theirs[name].grad, rtol=1e-4, atol=1e-6)]
    assert differ == []


def test_gradient_checkpointing_and_the_fused_projections_change_nothing(folders):
    """Recomputed layers give the same gradients; inference's one Q, K, V projection (what int8 quantisation
    fuses: bert.BertSelfAttention.fuse) the same logits."""
    _, ours = loaded(folders, "DistilBertForSequenceClassification", dropout=0.0, attention_dropout=0.0,
                     seq_classif_dropout=0.0)
    ids, mask = batch([50, 23, 7], ours.config.vocab_size)
    labels = torch.tensor([1, 2, 0])
    grads = []
    for checkpointing in (False, True):
        ours.zero_grad()
        if checkpointing:
            ours.gradient_checkpointing_enable()
        ours.train()
        ours(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        grads.append([p.grad.clone() for p in ours.parameters()])
    assert ours.is_gradient_checkpointing and all(torch.allclose(a, b, atol=1e-6) for a, b in zip(*grads))
    ours.eval()
    with torch.no_grad():
        before = ours(input_ids=ids, attention_mask=mask).logits
        for module in ours.modules():
            if isinstance(module, distilbert.DistilBertSelfAttention):
                module.fuse()
        assert torch.allclose(ours(input_ids=ids, attention_mask=mask).logits, before, atol=1e-6)


def test_each_head_takes_its_own_dropout_rate(folders):
    config = DistilBertConfig(dim=64, n_heads=4, n_layers=1, hidden_dim=96, dropout=0.05, qa_dropout=0.3,
                              seq_classif_dropout=0.4)
    assert distilbert.DistilBertForSequenceClassification(config).dropout.p == 0.4
    assert distilbert.DistilBertForMultipleChoice(config).dropout.p == 0.4
    assert distilbert.DistilBertForQuestionAnswering(config).dropout.p == 0.3
    assert distilbert.DistilBertForTokenClassification(config).dropout.p == 0.05
    assert config.with_dropout(0.0).seq_classif_dropout == 0.0


def test_a_bert_head_class_loads_a_distilbert_folder_as_its_own_class(folders):
    folder = folders("DistilBertForSequenceClassification")
    assert type(BertForSequenceClassification.from_pretrained(folder)) is distilbert.DistilBertForSequenceClassification
    assert type(BertModel.from_pretrained(folder)) is distilbert.DistilBertModel
    assert heads_of(read_config(folder / "config.json")) == ["BertForSequenceClassification"]


def test_saved_models_load_in_transformers_with_the_same_outputs(folders, tmp_path):
    name = "DistilBertForSequenceClassification"
    _, ours = loaded(folders, name)
    ours.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["architectures"] == [name]
    again = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "again").eval()
    assert type(again).__name__ == name
    ids, mask = batch([50, 23], ours.config.vocab_size)
    assert max(compare(again, ours, ids, mask).values()) < 1e-5


def test_a_head_reads_the_encoder_of_a_bare_encoder_checkpoint(folders):
    """transformers saves DistilBertModel's parts without the `distilbert.` prefix; the head's layers are fresh."""
    encoder = distilbert.DistilBertModel.from_pretrained(folders("DistilBertModel"))
    head = distilbert.DistilBertForSequenceClassification.from_pretrained(folders("DistilBertModel"), new_head=True)
    assert set(head.fresh_parts) == {"classifier"}
    own = head.distilbert.state_dict()
    assert all(torch.equal(own[key], value) for key, value in encoder.state_dict().items())


def test_resize_token_embeddings_grows_the_table_and_the_output_bias_as_the_reference(folders):
    reference, ours = loaded(folders, "DistilBertForMaskedLM")
    old = ours.config.vocab_size
    ours.resize_token_embeddings(old + 7)
    reference.resize_token_embeddings(old + 7)
    assert ours.vocab_projector.bias.shape == (old + 7,) and not ours.vocab_projector.bias[old:].any()
    ids = torch.tensor([[2, old - 1, 10, 3]])
    with torch.no_grad():
        mine, theirs = ours(input_ids=ids).logits, reference(input_ids=ids).logits
    assert (mine[..., :old] - theirs[..., :old]).abs().max() < 1e-4


# ---------------------------------------------------------------------------------------------- config.json

BASE = {"activation": "gelu", "attention_dropout": 0.1, "dim": 768, "dropout": 0.1, "hidden_dim": 3072,
        "initializer_range": 0.02, "max_position_embeddings": 512, "model_type": "distilbert", "n_heads": 12,
        "n_layers": 6, "pad_token_id": 0, "qa_dropout": 0.1, "seq_classif_dropout": 0.2,
        "sinusoidal_pos_embds": False, "tie_weights_": True, "vocab_size": 30522}
# The real models' config.json files (their fields as published).
REAL_CONFIGS = {
    "distilbert-base-uncased": {**BASE, "architectures": ["DistilBertForMaskedLM"],
                                "transformers_version": "4.10.0.dev0"},
    "distilbert-base-uncased-finetuned-sst-2-english": {
        **BASE, "architectures": ["DistilBertForSequenceClassification"], "finetuning_task": "sst-2",
        "id2label": {"0": "NEGATIVE", "1": "POSITIVE"}, "label2id": {"NEGATIVE": 0, "POSITIVE": 1},
        "output_past": True},
    "distilbert-base-cased-distilled-squad": {**BASE, "architectures": ["DistilBertForQuestionAnswering"],
                                              "output_hidden_states": False, "vocab_size": 28996},
}


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_the_real_models_config_files_describe_their_models(tmp_path, name):
    """Each is read as DistilBERT's config with the head config.json names; the model it describes (built on the
    meta device) has the reference model's tensors but the tied decoder's second name; saved, it keeps its fields."""
    fields = REAL_CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(fields))
    config = read_config(tmp_path / "config.json")
    assert type(config) is DistilBertConfig and config.max_tokens == 512
    shapes = model_shapes(model_class(heads_of(config)[0], config), config)
    with torch.device("meta"):
        theirs = getattr(transformers, fields["architectures"][0])(transformers.AutoConfig.for_model(**fields))
    assert {k: s for k, (s, _) in shapes.items()} == {k: tuple(v.shape) for k, v in theirs.state_dict().items()
                                                        if k not in ARCHITECTURES["distilbert"].aliases}
    assert config.to_dict().items() >= {k: v for k, v in fields.items() if k != "architectures"}.items()


@pytest.mark.parametrize("fields, says", [
    ({"dim": 100}, "hidden_size 100 is not a multiple of num_attention_heads 12"),
    ({"tie_weights_": False}, "tie_word_embeddings false is not supported"),
    ({"activation": "swish"}, "activation 'swish' is not one of"),
    ({"seq_classif_dropout": 2}, "seq_classif_dropout must be a number from 0 to 1"),
    ({"n_layers": 0}, "n_layers must be a whole number of at least 1"),
    ({"vocab_size": 100, "pad_token_id": 100}, "pad_token_id 100 is not a token of the vocabulary"),
])
def test_a_config_bertforge_cannot_run_is_one_line(fields, says):
    with pytest.raises(BertforgeError, match=says) as excinfo:
        DistilBertConfig.from_dict({"n_layers": 2, **fields})
    assert "\n" not in str(excinfo.value)


def drop_layer(weights):
    for key in [k for k in weights if k.startswith("distilbert.transformer.layer.1.")]:
        del weights[key]


@pytest.mark.parametrize("change, config, says", [
    (drop_layer, None, "layer 1 not in the weights"),
    (lambda w: w.pop("distilbert.embeddings.position_embeddings.weight"), None,
     "embeddings.position_embeddings not in the weights"),
    (None, {"n_layers": 3}, "layer 2 not in the weights"),
    (None, {"max_position_embeddings": 512}, "has shape (128, 64) but the config gives (512, 64) "
                                             "(max_position_embeddings 512)"),
    (None, {"dropout": -1}, "config.json: dropout must be a number from 0 to 1"),
    (None, {"hidden_dim": 128}, "(hidden_dim 128)"),  # the field by its DistilBERT name
    (None, {"dim": 128, "n_heads": 4}, "(dim 128)"),
])
def test_a_broken_folder_is_refused_in_one_line(folders, tmp_path, change, config, says):
    folder = broken(folders("DistilBertForSequenceClassification"), tmp_path, change, config)
    for model_class_ in (BertForSequenceClassification, BertModel, distilbert.DistilBertModel):
        with pytest.raises(BertforgeError) as excinfo:
            model_class_.from_pretrained(folder)
        message = str(excinfo.value)
        assert says in message and "\n" not in message and str(folder) in message, message


# ---------------------------------------------------------------------------------------------- tokenizer

TEXTS = ["Hello world!", "Ünïcödé café, naïve résumé à Zürich", "北京是中国的首都。上海在东边",
         "Emojis 🙂🎉👍🏽 and numbers 12345", "antidisestablishmentarianism", "The capital of France is [MASK].", ""]


def test_ids_offsets_and_pairs_are_the_references_with_no_segments(tmp_path):
    folder = distilbert_tokenizer(tmp_path)
    ours, theirs = BertTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)
    for text in TEXTS + ROBERTA_TEXTS[:7]:
        a = ours(text, return_offsets_mapping=True)
        b = theirs(text, return_offsets_mapping=True)
        assert a["input_ids"] == b["input_ids"], text
        assert [tuple(o) for o in a["offset_mapping"]] == [tuple(o) for o in b["offset_mapping"]], text
    a, b = ours(TEXTS[:4], TEXTS[2:6], padding=True), theirs(TEXTS[:4], TEXTS[2:6], padding=True)
    assert a["input_ids"] == b["input_ids"] and a["attention_mask"] == b["attention_mask"]
    assert "token_type_ids" not in b and not ARCHITECTURES["distilbert"].segments


# ---------------------------------------------------------------------------------------------- cut rules


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForMultipleChoice", "ForTokenClassification",
                                  "ForMaskedLM"])
def test_a_student_cut_at_the_teachers_size_is_the_teacher(folders, head):
    """DistilBERT's cut rules (cut_rules.DistilBertCut) keep every part when the student is the teacher's size."""
    _, teacher = loaded(folders, "DistilBert" + head)
    ids, mask = batch([20, 9], teacher.config.vocab_size, head == "ForMultipleChoice")
    ranks = activation_ranks(teacher, lambda: teacher(input_ids=ids, attention_mask=mask),
                             task_head(teacher) if head != "ForMaskedLM" else None)
    assert ("pooled" in ranks) == (head in ("ForSequenceClassification", "ForMultipleChoice"))
    layers = list(range(teacher.config.num_hidden_layers))
    student = pruned_student(teacher, teacher.config, layers, ranks).eval()
    with torch.no_grad():
        assert torch.allclose(student(input_ids=ids, attention_mask=mask).logits,
                              teacher(input_ids=ids, attention_mask=mask).logits, atol=1e-5)
    half = DistilBertConfig.from_dict({**teacher.config.to_dict(), "dim": 32, "hidden_dim": 48, "n_heads": 2,
                                       "n_layers": 1})
    assert pruned_student(teacher, half, [1], ranks)(input_ids=ids, attention_mask=mask).logits.isfinite().all()


def test_a_student_of_a_size_is_a_distilbert_with_its_teachers_tables():
    teacher = DistilBertConfig(vocab_size=1000, max_position_embeddings=128, dim=256, n_heads=4, hidden_dim=1024)
    student = student_config(teacher, "tiny")
    assert type(student) is DistilBertConfig and (student.n_layers, student.dim, student.hidden_dim) == (2, 128, 512)
    assert (student.vocab_size, student.max_tokens) == (1000, 128) and "hidden_size" not in student.extra
