"""RoBERTa and XLM-RoBERTa against transformers' own implementation (the reference), on checkpoints transformers
writes (conftest.roberta_folder: random weights at a scaled-down shape of the real models, tokenizers of their own
kind trained here): every head, batches with padding on either side and a row at the position limit, the real
models' config.json files, tokenizers on mixed text, and broken folders refused in one line."""

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertforge.core.errors import BertforgeError
from bertforge.model.architectures import roberta
from bertforge.model.architectures.registry import ARCHITECTURES, heads_of, model_class, read_config
from bertforge.model.architectures.bert import BertModel
from bertforge.model.architectures.family_configs import RobertaConfig, XLMRobertaConfig
from bertforge.model.formats.sizes import model_shapes
from bertforge.model.student import activation_ranks, pruned_student, student_config, task_head
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from bertforge.text.tokenizer import BertTokenizer, PipelineTokenizer
from tests.conftest import ROBERTA_TEXTS, broken, compare, roberta_folder, roberta_tokenizer

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

HEADS = ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
         "ForMultipleChoice"]
FAMILIES = ["Roberta", "XLMRoberta"]
PAD, LIMIT = 1, 128  # pad_token_id; the tokens a row of 130 positions holds, counted from PAD + 1
# rows' real lengths: one row; padded; a row at the position limit
LENGTHS = [[10], [50, 23, 7], [LIMIT, 60]]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {}

    def make(name, **config):
        key = (name, repr(sorted(config.items())))
        if key not in made:
            labels = {"num_labels": 2 if "Question" in name else 3}
            made[key] = roberta_folder(tmp_path_factory.mktemp(name), name, **{**labels, **config})
        return made[key]
    return make


def loaded(folders, name, **config):
    """The reference model and ours, from one folder transformers wrote."""
    folder = folders(name, **config)
    return getattr(transformers, name).from_pretrained(folder).eval(), getattr(roberta, name).from_pretrained(folder)


def batch(lengths: list[int], vocab: int, multiple_choice: bool = False, left: bool = False):
    """Random ids of the ordinary tokens, padded with PAD (on the left where asked); ids and the attention mask."""
    ids = torch.randint(PAD + 3, vocab, (len(lengths), max(lengths)))
    mask = (torch.arange(max(lengths))[None, :] < torch.tensor(lengths)[:, None]).long()
    if left:
        mask = mask.flip(1)
    ids = ids.masked_fill(mask == 0, PAD)
    if multiple_choice:  # two choices per example
        return ids[None].repeat(2, 1, 1), mask[None].repeat(2, 1, 1)
    return ids, mask


@pytest.mark.parametrize("head", HEADS)
@pytest.mark.parametrize("family", FAMILIES)
def test_every_head_agrees_with_the_reference_within_1e_4(folders, family, head):
    reference, ours = loaded(folders, family + head)
    assert ours.fresh_parts == []
    for lengths in LENGTHS:
        ids, mask = batch(lengths, ours.config.vocab_size, head == "ForMultipleChoice")
        worst = compare(reference, ours, ids, mask)
        assert max(worst.values()) < 1e-4, (lengths, worst)


def test_positions_count_the_real_tokens_whichever_side_the_padding_is(folders):
    """transformers counts positions over the ids that are not padding: a left-padded row's first real token is
    at pad_token_id + 1, as a right-padded one's (the packed fast path reads the positions of the padded batch)."""
    reference, ours = loaded(folders, "RobertaForTokenClassification")
    ids, mask = batch([LIMIT, 60, 9], ours.config.vocab_size, left=True)
    assert max(compare(reference, ours, ids, mask).values()) < 1e-4
    assert roberta.positions(ids, None, PAD)[2, -9:].tolist() == list(range(2, 11))


def test_inputs_embeds_and_token_type_ids_are_read_as_the_reference_reads_them(folders):
    """inputs_embeds count every position; token_type_ids, which RoBERTa's tokenizers never give, are ignored:
    the one row of the token-type table is added to every token."""
    reference, ours = loaded(folders, "RobertaModel")
    ids, _ = batch([20, 20], ours.config.vocab_size)
    embeds = ours.word_embeddings(ids).detach()
    with torch.no_grad():
        theirs = reference(inputs_embeds=embeds).last_hidden_state
        assert torch.allclose(ours(inputs_embeds=embeds).last_hidden_state, theirs, atol=1e-5)
        ones = ours(input_ids=ids, token_type_ids=torch.ones_like(ids)).last_hidden_state
        assert torch.equal(ones, ours(input_ids=ids).last_hidden_state)


def test_the_masked_lm_scores_only_the_labelled_positions_with_the_reference_loss(folders):
    reference, ours = loaded(folders, "RobertaForMaskedLM")
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
    """Every parameter's gradient of the classification loss (the key biases' is zero but rounding: a bias added to
    every key moves no softmax)."""
    reference, ours = loaded(folders, "XLMRobertaForSequenceClassification", hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    ids, mask = batch([50, 23, 7], ours.config.vocab_size)
    labels = torch.tensor([1, 2, 0])
    reference.train(), ours.train()  # the dropout rates are 0: train mode changes nothing else
    reference(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    ours(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    theirs = dict(reference.named_parameters())
    differ = [name for name, p in ours.named_parameters()
              if not torch.allclose(p.grad, theirs[name].grad, rtol=1e-4, atol=1e-6)]
    assert differ == []


@pytest.mark.parametrize("family", FAMILIES)
def test_a_bert_head_class_loads_each_family_as_its_own_class(folders, family):
    folder = folders(family + "ForSequenceClassification")
    model = BertForSequenceClassification.from_pretrained(folder)
    assert type(model) is getattr(roberta, family + "ForSequenceClassification")
    assert type(BertModel.from_pretrained(folder)) is getattr(roberta, family + "Model")
    assert heads_of(read_config(folder / "config.json")) == ["BertForSequenceClassification"]
    other = "RobertaModel" if family == "XLMRoberta" else "XLMRobertaModel"
    assert type(getattr(roberta, other).from_pretrained(folder)) is getattr(roberta, family + "Model")


@pytest.mark.parametrize("family", FAMILIES)
def test_saved_models_load_in_transformers_with_the_same_outputs(folders, tmp_path, family):
    name = family + "ForSequenceClassification"
    _, ours = loaded(folders, name)
    ours.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["architectures"] == [name]
    again = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "again").eval()
    assert type(again).__name__ == name
    ids, mask = batch([50, 23], ours.config.vocab_size)
    assert max(compare(again, ours, ids, mask).values()) < 1e-5


def test_a_checkpoint_that_stores_the_tied_decoder_again_loads_with_nothing_unused(folders, tmp_path, caplog):
    """Checkpoints written before transformers dropped tied copies (roberta-base's) hold lm_head.decoder.weight
    and .bias beside the token table and lm_head.bias."""
    reference, _ = loaded(folders, "RobertaForMaskedLM")
    folder = tmp_path / "old"
    shutil.copytree(folders("RobertaForMaskedLM"), folder)
    weights = load_file(folder / "model.safetensors")
    weights["lm_head.decoder.weight"] = weights["roberta.embeddings.word_embeddings.weight"].clone()
    weights["lm_head.decoder.bias"] = weights["lm_head.bias"].clone()
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with caplog.at_level("INFO", logger="bertforge"):
        ours = roberta.RobertaForMaskedLM.from_pretrained(folder)
    assert "not used" not in caplog.text and ours.fresh_parts == []
    assert compare(reference, ours, *batch([12], ours.config.vocab_size))["logits"] < 1e-5


def test_a_head_reads_the_encoder_of_a_bare_encoder_checkpoint(folders, caplog):
    """transformers saves RobertaModel's parts without the `roberta.` prefix; the sentence classifier is fresh."""
    encoder = roberta.RobertaModel.from_pretrained(folders("RobertaModel"))
    head = roberta.RobertaForSequenceClassification.from_pretrained(folders("RobertaModel"), new_head=True)
    assert head.fresh_parts == ["classifier"]
    own = head.roberta.state_dict()
    assert all(torch.equal(own[key], value) for key, value in encoder.state_dict().items() if key in own)


def test_resize_token_embeddings_grows_the_table_and_the_output_bias_as_the_reference(folders):
    reference, ours = loaded(folders, "RobertaForMaskedLM")
    old = ours.config.vocab_size
    torch.manual_seed(1)
    ours.resize_token_embeddings(old + 7)
    torch.manual_seed(1)
    reference.resize_token_embeddings(old + 7)
    assert ours.lm_head.bias.shape == (old + 7,) and not ours.lm_head.bias[old:].any()
    ids = torch.tensor([[0, old - 1, 10, 2]])
    with torch.no_grad():
        mine, theirs = ours(input_ids=ids).logits, reference(input_ids=ids).logits
    assert (mine[..., :old] - theirs[..., :old]).abs().max() < 1e-4


# ---------------------------------------------------------------------------------------------- config.json

# The real models' config.json files (their fields as published), and what their encoders hold.
REAL_CONFIGS = {
    "roberta-base": ({"architectures": ["RobertaForMaskedLM"], "attention_probs_dropout_prob": 0.1,
                      "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                      "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
                      "layer_norm_eps": 1e-05, "max_position_embeddings": 514, "model_type": "roberta",
                      "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1, "type_vocab_size": 1,
                      "vocab_size": 50265}, 512),
    "xlm-roberta-base": ({"architectures": ["XLMRobertaForMaskedLM"], "attention_probs_dropout_prob": 0.1,
                          "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "gelu", "hidden_dropout_prob": 0.1,
                          "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
                          "layer_norm_eps": 1e-05, "max_position_embeddings": 514, "model_type": "xlm-roberta",
                          "num_attention_heads": 12, "num_hidden_layers": 12, "output_past": True,
                          "pad_token_id": 1, "type_vocab_size": 1, "vocab_size": 250002}, 512),
    "BAAI/bge-m3": ({"architectures": ["XLMRobertaModel"], "attention_probs_dropout_prob": 0.1,
                     "bos_token_id": 0, "classifier_dropout": None, "eos_token_id": 2, "hidden_act": "gelu",
                     "hidden_dropout_prob": 0.1, "hidden_size": 1024, "initializer_range": 0.02,
                     "intermediate_size": 4096, "layer_norm_eps": 1e-05, "max_position_embeddings": 8194,
                     "model_type": "xlm-roberta", "num_attention_heads": 16, "num_hidden_layers": 24,
                     "output_past": True, "pad_token_id": 1, "position_embedding_type": "absolute",
                     "torch_dtype": "float32", "transformers_version": "4.33.0", "type_vocab_size": 1,
                     "use_cache": True, "vocab_size": 250002}, 8192),
    "deepset/roberta-base-squad2": ({"architectures": ["RobertaForQuestionAnswering"],
                                     "attention_probs_dropout_prob": 0.1, "bos_token_id": 0, "eos_token_id": 2,
                                     "gradient_checkpointing": False, "hidden_act": "gelu",
                                     "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02,
                                     "intermediate_size": 3072, "language": "english", "layer_norm_eps": 1e-05,
                                     "max_position_embeddings": 514, "model_type": "roberta", "name": "Roberta",
                                     "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1,
                                     "position_embedding_type": "absolute", "transformers_version": "4.7.0.dev0",
                                     "type_vocab_size": 1, "use_cache": True, "vocab_size": 50265}, 512),
}


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_the_real_models_config_files_describe_their_models(tmp_path, name):
    """Each is read as its architecture's config, with the length an input may have and the head config.json names;
    the model it describes (built on the meta device) has the reference model's tensors, but the tied decoder's
    second names; saved, the file keeps its fields."""
    fields, max_tokens = REAL_CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(fields))
    config = read_config(tmp_path / "config.json")
    arch = ARCHITECTURES[fields["model_type"]]
    assert type(config) is arch.config and config.max_tokens == max_tokens
    shapes = model_shapes(model_class(heads_of(config)[0], config), config)
    with torch.device("meta"):
        theirs = getattr(transformers, fields["architectures"][0])(transformers.AutoConfig.for_model(**fields))
    assert {k: s for k, (s, _) in shapes.items()} == {k: tuple(v.shape) for k, v in theirs.state_dict().items()
                                                        if k not in arch.aliases}
    assert config.to_dict().items() >= {k: v for k, v in fields.items() if k != "architectures"}.items()


@pytest.mark.parametrize("fields, says", [
    ({"pad_token_id": None}, "pad_token_id must be a whole number of at least 0, not None"),
    ({"max_position_embeddings": 2}, "max_position_embeddings 2 leaves no position after pad_token_id 1"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings false is not supported"),
    ({"bos_token_id": "<s>"}, "bos_token_id must be a whole number"),
    ({"hidden_act": "swish"}, "hidden_act 'swish' is not one of"),
])
@pytest.mark.parametrize("config_class", [RobertaConfig, XLMRobertaConfig])
def test_a_config_bertforge_cannot_run_is_one_line(config_class, fields, says):
    with pytest.raises(BertforgeError, match=says) as excinfo:
        config_class.from_dict({"num_hidden_layers": 2, **fields})
    assert "\n" not in str(excinfo.value)


def drop_layer(weights):
    for key in [k for k in weights if k.startswith("roberta.encoder.layer.3.")]:
        del weights[key]


@pytest.mark.parametrize("change, config, says", [
    (drop_layer, None, "layer 3 not in the weights; num_hidden_layers 4, the weights have 3 layers"),
    (lambda w: w.pop("roberta.embeddings.position_embeddings.weight"), None,
     "embeddings.position_embeddings not in the weights"),
    (None, {"num_hidden_layers": 5}, "layer 4 not in the weights; num_hidden_layers 5, the weights have 4 layers"),
    (None, {"max_position_embeddings": 514}, "has shape (130, 64) but the config gives (514, 64) "
                                             "(max_position_embeddings 514)"),
    (None, {"type_vocab_size": 2}, "(type_vocab_size 2)"),
    (None, {"layer_norm_eps": -1}, "config.json: layer_norm_eps must be a number above 0"),
    (None, {"pad_token_id": 200}, "config.json: max_position_embeddings 130 leaves no position after pad_token_id"),
])
@pytest.mark.parametrize("family", FAMILIES)
def test_a_broken_folder_is_refused_in_one_line(folders, tmp_path, family, change, config, says):
    folder = broken(folders(family + "ForSequenceClassification"), tmp_path, change, config)
    for model_class_ in (BertForSequenceClassification, BertModel, getattr(roberta, family + "Model")):
        with pytest.raises(BertforgeError) as excinfo:
            model_class_.from_pretrained(folder)
        message = str(excinfo.value)
        assert says in message and "\n" not in message and str(folder) in message, message


# ---------------------------------------------------------------------------------------------- tokenizers

TEXTS = ["Hello world!", "  leading spaces and   runs of them", "Ünïcödé café, naïve résumé à Zürich",
         "北京是中国的首都。上海在东边", "Emojis 🙂🎉👍🏽 and numbers 12345", "antidisestablishmentarianism "
         "pneumonoultramicroscopicsilicovolcanoconiosis", "Mixed: São Paulo 東京 😀 naïveté", "The capital of "
         "France is <mask>.", ""]


@pytest.fixture(scope="module", params=["roberta", "xlm-roberta"])
def tokenizers(request, tmp_path_factory):
    """Ours and transformers' fast tokenizer, read from one folder."""
    folder = roberta_tokenizer(tmp_path_factory.mktemp(request.param), request.param)
    return BertTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)


def offsets(rows):
    return [[tuple(o) for o in row] for row in rows] if rows and isinstance(rows[0], list) else \
        [tuple(o) for o in rows]


def test_a_tokenizer_folder_of_either_kind_is_read_with_its_special_tokens(tokenizers):
    ours, theirs = tokenizers
    assert isinstance(ours, PipelineTokenizer)
    for name in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token"):
        assert getattr(ours, name) == getattr(theirs, name)
        assert getattr(ours, name + "_id") == getattr(theirs, name + "_id"), name
    assert (ours.cls_token, ours.sep_token, ours.pad_token_id, ours.mask_token_id) == \
        ("<s>", "</s>", PAD, len(theirs) - 1)


def test_ids_and_offsets_are_the_references_on_mixed_text(tokenizers):
    ours, theirs = tokenizers
    for text in TEXTS + ROBERTA_TEXTS[:7]:
        a = ours(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        b = theirs(text, return_offsets_mapping=True, return_special_tokens_mask=True)
        assert a["input_ids"] == b["input_ids"], text
        assert offsets(a["offset_mapping"]) == offsets(b["offset_mapping"]), text
        assert a["special_tokens_mask"] == b["special_tokens_mask"] and not any(a["token_type_ids"])
        assert ours.decode(a["input_ids"], skip_special_tokens=True) == \
            theirs.decode(b["input_ids"], skip_special_tokens=True)


def test_pairs_are_laid_out_as_the_references(tokenizers):
    """<s> A </s></s> B </s>, every token of segment 0, truncated and padded as transformers does."""
    ours, theirs = tokenizers
    a = ours(TEXTS[:4], TEXTS[3:7], return_offsets_mapping=True)
    b = theirs(TEXTS[:4], TEXTS[3:7], return_offsets_mapping=True)
    assert a["input_ids"] == b["input_ids"] and offsets(a["offset_mapping"]) == offsets(b["offset_mapping"])
    first = a["input_ids"][0]
    assert first[0] == ours.cls_token_id and first.count(ours.sep_token_id) == 3 and first[-1] == ours.sep_token_id
    assert a.sequence_ids(0) == b.sequence_ids(0) and not any(map(any, a["token_type_ids"]))
    short, long = ["Hello world!", "São Paulo", "🙂 ok"], TEXTS[2:5]
    for truncation, firsts, seconds in ((True, long, TEXTS[5:8]), ("only_first", long, short),
                                        ("only_second", short, long)):
        kw = dict(padding=True, truncation=truncation, max_length=16)
        a, b = ours(firsts, seconds, **kw), theirs(firsts, seconds, **kw)
        assert a["input_ids"] == b["input_ids"] and a["attention_mask"] == b["attention_mask"], truncation


def test_overflowing_windows_of_a_pair_are_the_references(tokenizers):
    ours, theirs = tokenizers
    question, context = "Who was born in Virginia?", " ".join(ROBERTA_TEXTS[:7])
    kw = dict(truncation="only_second", max_length=40, stride=8, return_overflowing_tokens=True,
              return_offsets_mapping=True)
    a, b = ours(question, context, **kw), theirs(question, context, **kw)
    assert a["input_ids"] == b["input_ids"] and len(a["input_ids"]) > 2
    assert offsets(a["offset_mapping"]) == offsets(b["offset_mapping"])


# ---------------------------------------------------------------------------------------------- cut rules


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForMultipleChoice", "ForTokenClassification"])
def test_a_student_cut_at_the_teachers_size_is_the_teacher(folders, head):
    """RoBERTa's cut rules (cut_rules.RobertaCut: BERT's, and the sentence classifier's dense layer cut as a pooler)
    keep every part when the student is the teacher's size: the student's outputs are the teacher's."""
    _, teacher = loaded(folders, "Roberta" + head)
    ids, mask = batch([20, 9], teacher.config.vocab_size, head == "ForMultipleChoice")
    ranks = activation_ranks(teacher, lambda: teacher(input_ids=ids, attention_mask=mask), task_head(teacher))
    assert ("pooled" in ranks) == (head != "ForTokenClassification")
    layers = list(range(teacher.config.num_hidden_layers))
    student = pruned_student(teacher, teacher.config, layers, ranks).eval()
    with torch.no_grad():
        assert torch.allclose(student(input_ids=ids, attention_mask=mask).logits,
                              teacher(input_ids=ids, attention_mask=mask).logits, atol=1e-5)
    half = type(teacher.config).from_dict({**teacher.config.to_dict(), "hidden_size": 32, "intermediate_size": 48,
                                           "num_attention_heads": 2, "num_hidden_layers": 2})
    assert pruned_student(teacher, half, [0, 3], ranks)(input_ids=ids, attention_mask=mask).logits.isfinite().all()


@pytest.mark.parametrize("config_class", [RobertaConfig, XLMRobertaConfig])
def test_a_student_of_a_size_is_of_its_teachers_family_with_its_tables(config_class):
    teacher = config_class.from_dict({"vocab_size": 1000, "max_position_embeddings": 130, "type_vocab_size": 1,
                                      "layer_norm_eps": 1e-5, "hidden_size": 256, "num_attention_heads": 4,
                                      "intermediate_size": 1024})
    student = student_config(teacher, "tiny", pad_token_id=1)
    assert type(student) is config_class and (student.num_hidden_layers, student.hidden_size) == (2, 128)
    assert (student.vocab_size, student.max_tokens, student.type_vocab_size, student.layer_norm_eps) == \
        (1000, 128, 1, 1e-5)
