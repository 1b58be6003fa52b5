"""MPNet against transformers' own implementation (the reference), on checkpoints transformers writes
(conftest.mpnet_folder: random weights at a scaled-down shape of mpnet-base, a WordPiece tokenizer laid out as MPNet's
trained here): every head, batches with padding on either side and a row at the position limit, the relative position
buckets, the real models' config.json files, the tokenizer on mixed text, the cut rules, and broken folders refused in
one line."""

import json
import re
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from bertforge.core.errors import BertforgeError
from bertforge.model.architectures import mpnet
from bertforge.model.architectures.registry import ARCHITECTURES, heads_of, model_class, read_config
from bertforge.model.architectures.bert import BertModel
from bertforge.model.architectures.family_configs import MPNetConfig
from bertforge.model.formats.sizes import model_shapes
from bertforge.model.student import activation_ranks, cut_weights, pruned_student, student_config, task_head
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from bertforge.text.tokenizer import BertTokenizer, PipelineTokenizer
from tests.conftest import ROBERTA_TEXTS, broken, compare, mpnet_folder, mpnet_tokenizer

transformers = pytest.importorskip("transformers")
transformers.logging.set_verbosity_error()

HEADS = ["Model", "ForMaskedLM", "ForSequenceClassification", "ForTokenClassification", "ForQuestionAnswering",
         "ForMultipleChoice"]
PAD, LIMIT = 1, 128  # the padding id; the tokens a row of 130 positions holds, counted from PAD + 1
LENGTHS = [[10], [50, 23, 7], [LIMIT, 60]]  # rows' real lengths: one row; padded; a row at the position limit


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    made = {}

    def make(name, **config):
        key = (name, repr(sorted(config.items())))
        if key not in made:
            labels = {"num_labels": 2 if "Question" in name else 3}
            made[key] = mpnet_folder(tmp_path_factory.mktemp(name), name, **{**labels, **config})
        return made[key]
    return make


def loaded(folders, name, **config):
    """The reference model and ours, from one folder transformers wrote."""
    folder = folders(name, **config)
    return getattr(transformers, name).from_pretrained(folder).eval(), getattr(mpnet, name).from_pretrained(folder)


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
def test_every_head_agrees_with_the_reference_within_1e_4(folders, head):
    reference, ours = loaded(folders, "MPNet" + head)
    assert ours.fresh_parts == [] and ours.config.max_tokens == LIMIT
    for lengths in LENGTHS:
        ids, mask = batch(lengths, ours.config.vocab_size, head == "ForMultipleChoice")
        worst = compare(reference, ours, ids, mask)
        assert max(worst.values()) < 1e-4, (lengths, worst)
    if head == "Model":  # the pooler too
        with torch.no_grad():
            assert torch.allclose(ours(input_ids=ids, attention_mask=mask).pooler_output,
                                  reference(input_ids=ids, attention_mask=mask).pooler_output, atol=1e-5)


def test_positions_and_relative_positions_whichever_side_the_padding_is(folders):
    """transformers counts positions over the ids that are not padding, and the relative positions by column: a
    left-padded row's tokens see each other as a right-padded row's do."""
    reference, ours = loaded(folders, "MPNetForTokenClassification")
    ids, mask = batch([LIMIT, 60, 9], ours.config.vocab_size, left=True)
    assert max(compare(reference, ours, ids, mask).values()) < 1e-4


def test_the_buckets_are_the_references():
    """Every relative position a row of 512 tokens holds, to the reference's bucket (exact up to 8 apart, then
    logarithmic to 128, each direction its own half of the 32)."""
    grid = torch.arange(512)
    relative = grid[None, :] - grid[:, None]
    ours = mpnet.relative_position_bucket(relative)
    assert torch.equal(ours, transformers.models.mpnet.modeling_mpnet.MPNetEncoder.relative_position_bucket(relative))
    assert set(ours.unique().tolist()) == set(range(32)) - {16}  # 16: 0 apart to the right, which is the left's 0


def test_inputs_embeds_and_token_type_ids_are_read_as_the_reference_reads_them(folders):
    """inputs_embeds count every position from 2; token_type_ids (MPNet has no token-type table) are ignored."""
    reference, ours = loaded(folders, "MPNetModel")
    ids, _ = batch([20, 20], ours.config.vocab_size)
    embeds = ours.word_embeddings(ids).detach()
    with torch.no_grad():
        theirs = reference(inputs_embeds=embeds).last_hidden_state
        assert torch.allclose(ours(inputs_embeds=embeds).last_hidden_state, theirs, atol=1e-5)
        ones = ours(input_ids=ids, token_type_ids=torch.ones_like(ids)).last_hidden_state
        assert torch.equal(ones, ours(input_ids=ids).last_hidden_state)


def test_the_masked_lm_scores_only_the_labelled_positions_with_the_reference_loss(folders):
    reference, ours = loaded(folders, "MPNetForMaskedLM")
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
    """Every parameter's gradient of the classification loss, the shared relative position table's included."""
    reference, ours = loaded(folders, "MPNetForSequenceClassification", hidden_dropout_prob=0.0,
                             attention_probs_dropout_prob=0.0)
    ids, mask = batch([50, 23, 7], ours.config.vocab_size)
    labels = torch.tensor([1, 2, 0])
    reference.train(), ours.train()  # the dropout rates are 0: train mode changes nothing else
    reference(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    ours(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
    theirs = dict(reference.named_parameters())
    assert ours.mpnet.encoder.relative_attention_bias.weight.grad.abs().sum() > 0
    differ = [name for name, p in ours.named_parameters()
              if not torch.allclose(p.grad, theirs[name].grad, rtol=1e-4, atol=1e-6)]
    assert differ == []


def test_gradient_checkpointing_dropout_and_the_fused_projections(folders):
    """Recomputed layers give the same gradients; a pass with dropout takes one mask per site; inference's one Q, K,
    V projection (what int8 quantisation fuses) gives the same logits."""
    _, ours = loaded(folders, "MPNetForSequenceClassification", hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
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
    ours.gradient_checkpointing_disable()
    ours.config.hidden_dropout_prob = ours.config.attention_probs_dropout_prob = 0.1
    assert ours(input_ids=ids, attention_mask=mask, labels=labels, output_attentions=True).loss.isfinite()
    ours.eval()
    with torch.no_grad():
        before = ours(input_ids=ids, attention_mask=mask).logits
        for module in ours.modules():
            if isinstance(module, mpnet.MPNetSelfAttention):
                module.fuse()
        assert torch.allclose(ours(input_ids=ids, attention_mask=mask).logits, before, atol=1e-6)


def test_attentions_are_the_references(folders):
    reference, ours = loaded(folders, "MPNetModel")
    ids, mask = batch([30, 12], ours.config.vocab_size)
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
        mine = ours(input_ids=ids, attention_mask=mask, output_attentions=True).attentions
    real = mask.bool()[:, None, :, None]  # query rows of real tokens (ours: zeros in the padding's)
    assert all(torch.allclose(a * real, b * real, atol=1e-5) for a, b in zip(theirs, mine, strict=True))


def test_a_bert_head_class_loads_an_mpnet_folder_as_its_own_class(folders):
    folder = folders("MPNetForSequenceClassification")
    assert type(BertForSequenceClassification.from_pretrained(folder)) is mpnet.MPNetForSequenceClassification
    assert type(BertModel.from_pretrained(folder)) is mpnet.MPNetModel
    assert heads_of(read_config(folder / "config.json")) == ["BertForSequenceClassification"]


def test_saved_models_load_in_transformers_with_the_same_outputs(folders, tmp_path):
    name = "MPNetForSequenceClassification"
    _, ours = loaded(folders, name)
    ours.save_pretrained(tmp_path / "again")
    assert json.loads((tmp_path / "again" / "config.json").read_text())["architectures"] == [name]
    again = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "again").eval()
    assert type(again).__name__ == name
    ids, mask = batch([50, 23], ours.config.vocab_size)
    assert max(compare(again, ours, ids, mask).values()) < 1e-5


def test_a_checkpoint_that_stores_the_tied_decoder_again_loads_with_nothing_unused(folders, tmp_path, caplog):
    """Checkpoints written before transformers dropped tied copies (mpnet-base's) hold lm_head.decoder.weight and
    .bias beside the token table and lm_head.bias."""
    reference, _ = loaded(folders, "MPNetForMaskedLM")
    folder = tmp_path / "old"
    shutil.copytree(folders("MPNetForMaskedLM"), folder)
    weights = load_file(folder / "model.safetensors")
    weights["lm_head.decoder.weight"] = weights["mpnet.embeddings.word_embeddings.weight"].clone()
    weights["lm_head.decoder.bias"] = weights["lm_head.bias"].clone()
    save_file(weights, folder / "model.safetensors", metadata={"format": "pt"})
    with caplog.at_level("INFO", logger="bertforge"):
        ours = mpnet.MPNetForMaskedLM.from_pretrained(folder)
    assert "not used" not in caplog.text and ours.fresh_parts == []
    assert compare(reference, ours, *batch([12], ours.config.vocab_size))["logits"] < 1e-5


def test_a_head_reads_the_encoder_of_a_bare_encoder_checkpoint(folders):
    """transformers saves MPNetModel's parts without the `mpnet.` prefix; the sentence classifier is fresh."""
    encoder = mpnet.MPNetModel.from_pretrained(folders("MPNetModel"))
    head = mpnet.MPNetForSequenceClassification.from_pretrained(folders("MPNetModel"), new_head=True)
    assert head.fresh_parts == ["classifier"]
    own = head.mpnet.state_dict()
    assert all(torch.equal(own[key], value) for key, value in encoder.state_dict().items() if key in own)


def test_resize_token_embeddings_grows_the_table_and_the_output_bias_as_the_reference(folders):
    reference, ours = loaded(folders, "MPNetForMaskedLM")
    old = ours.config.vocab_size
    ours.resize_token_embeddings(old + 7)
    reference.resize_token_embeddings(old + 7)
    assert ours.lm_head.bias.shape == (old + 7,) and not ours.lm_head.bias[old:].any()
    ids = torch.tensor([[0, old - 1, 10, 2]])
    with torch.no_grad():
        mine, theirs = ours(input_ids=ids).logits, reference(input_ids=ids).logits
    assert (mine[..., :old] - theirs[..., :old]).abs().max() < 1e-4


# ---------------------------------------------------------------------------------------------- config.json

BASE = {"attention_probs_dropout_prob": 0.1, "bos_token_id": 0, "eos_token_id": 2, "hidden_act": "gelu",
        "hidden_dropout_prob": 0.1, "hidden_size": 768, "initializer_range": 0.02, "intermediate_size": 3072,
        "layer_norm_eps": 1e-05, "max_position_embeddings": 514, "model_type": "mpnet", "num_attention_heads": 12,
        "num_hidden_layers": 12, "pad_token_id": 1, "relative_attention_num_buckets": 32, "vocab_size": 30527}
# The real models' config.json files (the fields microsoft/mpnet-base and all-mpnet-base-v2 publish).
REAL_CONFIGS = {
    "microsoft/mpnet-base": {**BASE, "architectures": ["MPNetForMaskedLM"]},
    "sentence-transformers/all-mpnet-base-v2": {**BASE, "architectures": ["MPNetForMaskedLM"],
                                                "_name_or_path": "microsoft/mpnet-base", "torch_dtype": "float32",
                                                "transformers_version": "4.8.2"},
    "a fine-tuned classifier": {**BASE, "architectures": ["MPNetForSequenceClassification"],
                                "id2label": {"0": "NEGATIVE", "1": "POSITIVE"},
                                "label2id": {"NEGATIVE": 0, "POSITIVE": 1}},
}


@pytest.mark.parametrize("name", REAL_CONFIGS)
def test_the_real_models_config_files_describe_their_models(tmp_path, name):
    """Each is read as MPNet's config (512 tokens of its 514 positions) with the head config.json names; the model it
    describes (built on the meta device) has the reference model's tensors but the tied decoder's second names; saved,
    the file keeps its fields."""
    fields = REAL_CONFIGS[name]
    (tmp_path / "config.json").write_text(json.dumps(fields))
    config = read_config(tmp_path / "config.json")
    assert type(config) is MPNetConfig and config.max_tokens == 512 and config.relative_attention_num_buckets == 32
    shapes = model_shapes(model_class(heads_of(config)[0], config), config)
    with torch.device("meta"):
        theirs = getattr(transformers, fields["architectures"][0])(transformers.AutoConfig.for_model(**fields))
    assert {k: s for k, (s, _) in shapes.items()} == {k: tuple(v.shape) for k, v in theirs.state_dict().items()
                                                        if k not in ARCHITECTURES["mpnet"].aliases}
    assert config.to_dict().items() >= {k: v for k, v in fields.items() if k != "architectures"}.items()


@pytest.mark.parametrize("fields, says", [
    ({"pad_token_id": 0}, "pad_token_id 0 is not supported: MPNet counts positions from the padding id 1 + 1"),
    ({"max_position_embeddings": 2}, "max_position_embeddings 2 leaves no position after the padding id 1"),
    ({"relative_attention_num_buckets": 16}, "relative_attention_num_buckets 16 is under 32"),
    ({"tie_word_embeddings": False}, "tie_word_embeddings false is not supported"),
    ({"hidden_size": 100}, "hidden_size 100 is not a multiple of num_attention_heads 12"),
    ({"hidden_act": "swish"}, "hidden_act 'swish' is not one of"),
    ({"relative_attention_num_buckets": "32"}, "relative_attention_num_buckets must be a whole number"),
])
def test_a_config_bertforge_cannot_run_is_one_line(fields, says):
    with pytest.raises(BertforgeError, match=re.escape(says)) as excinfo:
        MPNetConfig.from_dict({"num_hidden_layers": 2, **fields})
    assert "\n" not in str(excinfo.value)


def drop_layer(weights):
    for key in [k for k in weights if k.startswith("mpnet.encoder.layer.1.")]:
        del weights[key]


@pytest.mark.parametrize("change, config, says", [
    (drop_layer, None, "layer 1 not in the weights; num_hidden_layers 2, the weights have 1 layers"),
    (lambda w: w.pop("mpnet.encoder.relative_attention_bias.weight"), None,
     "encoder.relative_attention_bias not in the weights"),
    (lambda w: w.pop("mpnet.embeddings.position_embeddings.weight"), None,
     "embeddings.position_embeddings not in the weights"),
    (None, {"num_hidden_layers": 3}, "layer 2 not in the weights; num_hidden_layers 3, the weights have 2 layers"),
    (None, {"max_position_embeddings": 514}, "has shape (130, 32) but the config gives (514, 32) "
                                             "(max_position_embeddings 514)"),
    (None, {"relative_attention_num_buckets": 64}, "(relative_attention_num_buckets 64)"),
    (None, {"layer_norm_eps": -1}, "config.json: layer_norm_eps must be a number above 0"),
    (None, {"pad_token_id": 0}, "config.json: pad_token_id 0 is not supported"),
])
def test_a_broken_folder_is_refused_in_one_line(folders, tmp_path, change, config, says):
    folder = broken(folders("MPNetForSequenceClassification"), tmp_path, change, config)
    for model_class_ in (BertForSequenceClassification, BertModel, mpnet.MPNetModel):
        with pytest.raises(BertforgeError) as excinfo:
            model_class_.from_pretrained(folder)
        message = str(excinfo.value)
        assert says in message and "\n" not in message and str(folder) in message, message


# ---------------------------------------------------------------------------------------------- tokenizer

TEXTS = ["Hello world!", "  leading spaces and   runs of them", "Ünïcödé café, naïve résumé à Zürich",
         "北京是中国的首都。上海在东边", "Emojis 🙂🎉👍🏽 and numbers 12345", "antidisestablishmentarianism "
         "pneumonoultramicroscopicsilicovolcanoconiosis", "Mixed: São Paulo 東京 😀 naïveté", "The capital of "
         "France is <mask>.", "[CLS] and [MASK] are words here", ""]


@pytest.fixture(scope="module")
def tokenizers(tmp_path_factory):
    """Ours and transformers' MPNetTokenizerFast, read from one folder transformers wrote (tokenizer.json with the
    WordPiece vocabulary, which holds BERT's [CLS] [SEP] too)."""
    folder = mpnet_tokenizer(tmp_path_factory.mktemp("mpnet-tokenizer"))
    return BertTokenizer.from_pretrained(folder), transformers.AutoTokenizer.from_pretrained(folder)


def offsets(rows):
    return [[tuple(o) for o in row] for row in rows] if rows and isinstance(rows[0], list) else \
        [tuple(o) for o in rows]


def test_the_tokenizer_is_read_with_its_own_special_tokens(tokenizers):
    """Not as BERT's WordPiece tokenizer (its vocabulary holds [CLS] and [SEP]): as its tokenizer.json lays inputs
    out, with the special tokens its folder names."""
    ours, theirs = tokenizers
    assert type(theirs).__name__.startswith("MPNetTokenizer") and isinstance(ours, PipelineTokenizer)
    for name in ("cls_token", "sep_token", "pad_token", "unk_token", "mask_token"):
        assert getattr(ours, name) == getattr(theirs, name)
        assert getattr(ours, name + "_id") == getattr(theirs, name + "_id"), name
    assert (ours.cls_token, ours.sep_token, ours.pad_token_id, ours.unk_token, ours.mask_token_id) == \
        ("<s>", "</s>", PAD, "[UNK]", len(theirs) - 1)


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
        assert ours.tokenize(text) == theirs.tokenize(text)


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


def test_a_tokenizer_naming_its_own_special_tokens_without_its_tokenizer_json_is_refused(tmp_path):
    """A vocab.txt alone cannot say how <s> and </s> lay inputs out: refused in one line, never read as BERT's."""
    folder = mpnet_tokenizer(tmp_path / "tok")
    vocab = json.loads((folder / "tokenizer.json").read_text())["model"]["vocab"]
    (folder / "vocab.txt").write_text("".join(t + "\n" for t in sorted(vocab, key=vocab.get)))
    (folder / "tokenizer.json").unlink()
    with pytest.raises(BertforgeError) as excinfo:
        BertTokenizer.from_pretrained(folder)
    message = str(excinfo.value)
    assert "cls_token '<s>'" in message and "tokenizer.json" in message and "\n" not in message


# ---------------------------------------------------------------------------------------------- cut rules


@pytest.mark.parametrize("head", ["ForSequenceClassification", "ForMultipleChoice", "ForTokenClassification",
                                  "ForMaskedLM"])
def test_a_student_cut_at_the_teachers_size_is_the_teacher(folders, head):
    """MPNet's cut rules (cut_rules.MPNetCut: RoBERTa's under MPNet's names, one set of heads for every layer, the
    relative position table's columns cut with it) keep every part when the student is the teacher's size."""
    _, teacher = loaded(folders, "MPNet" + head)
    ids, mask = batch([20, 9], teacher.config.vocab_size, head == "ForMultipleChoice")
    ranks = activation_ranks(teacher, lambda: teacher(input_ids=ids, attention_mask=mask),
                             task_head(teacher) if head != "ForMaskedLM" else None)
    assert ("pooled" in ranks) == (head in ("ForSequenceClassification", "ForMultipleChoice"))
    layers = list(range(teacher.config.num_hidden_layers))
    student = pruned_student(teacher, teacher.config, layers, ranks).eval()
    with torch.no_grad():
        assert torch.allclose(student(input_ids=ids, attention_mask=mask).logits,
                              teacher(input_ids=ids, attention_mask=mask).logits, atol=1e-5)
    half = MPNetConfig.from_dict({**teacher.config.to_dict(), "hidden_size": 16, "intermediate_size": 24,
                                  "num_attention_heads": 2, "num_hidden_layers": 1})
    assert pruned_student(teacher, half, [1], ranks)(input_ids=ids, attention_mask=mask).logits.isfinite().all()


def test_a_cut_keeps_one_set_of_heads_in_every_layer_with_their_relative_position_columns(folders):
    _, teacher = loaded(folders, "MPNetForTokenClassification")
    ranks = {"hidden": torch.arange(32.0), "heads": torch.tensor([[4.0, 3, 2, 1], [1, 1, 1, 9]]),
             "neurons": torch.ones(2, 48)}
    half = MPNetConfig.from_dict({**teacher.config.to_dict(), "hidden_size": 16, "intermediate_size": 24,
                                  "num_attention_heads": 2})
    cut = cut_weights(teacher.state_dict(), half, 8, [0, 1], ranks, "classifier", ARCHITECTURES["mpnet"].cut_rules())
    table = teacher.state_dict()["mpnet.encoder.relative_attention_bias.weight"]
    assert torch.equal(cut["mpnet.encoder.relative_attention_bias.weight"], table[:, [0, 3]])  # sums 5, 4, 3, 10
    query = teacher.state_dict()["mpnet.encoder.layer.1.attention.attn.q.weight"]
    assert torch.equal(cut["mpnet.encoder.layer.1.attention.attn.q.weight"],
                       query[torch.cat([torch.arange(8), torch.arange(24, 32)])][:, 16:])


def test_a_student_of_a_size_is_an_mpnet_with_its_teachers_tables():
    teacher = MPNetConfig(vocab_size=1000, max_position_embeddings=130, hidden_size=256, num_attention_heads=4,
                          intermediate_size=1024, layer_norm_eps=1e-5)
    student = student_config(teacher, "tiny")
    assert type(student) is MPNetConfig and (student.num_hidden_layers, student.hidden_size) == (2, 128)
    assert (student.vocab_size, student.max_tokens, student.layer_norm_eps, student.relative_attention_num_buckets) \
        == (1000, 128, 1e-5, 32)
