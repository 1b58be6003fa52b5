import json
import os
import shutil
from pathlib import Path

import pytest

from bertforge.text.tokenizer import BertTokenizer

REPO = Path(__file__).resolve().parent.parent


def shared_path(*parts) -> Path:
    """A path under the shared data folder (BERTFORGE_SHARED, else ../shared beside the repo)."""
    root = Path(os.environ.get("BERTFORGE_SHARED", REPO.parent / "shared"))
    return root.joinpath(*parts)


def require_shared(*parts) -> Path:
    """The shared path, or skip the test saying what is missing."""
    path = shared_path(*parts)
    if not path.exists():
        pytest.skip(f"needs {path} (set BERTFORGE_SHARED to the folder holding data/ and models/)")
    return path


def place_file(source: Path, target: Path) -> Path:
    """`source` as a file of another model folder: a hard link where the file system allows, else a copy (a model
    folder's files are read only from inside it, so a symbolic link out of it would be refused)."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)
    return target


def one_line_error(excinfo, *names) -> str:
    """The message of a BertforgeError: one line that names each of `names` (file names)."""
    message = str(excinfo.value)
    assert "\n" not in message, message
    for name in names:
        assert str(name) in message, message
    return message


def built_devices(monkeypatch) -> list:
    """The default device of every BertModel built from now on (the meta device allocates nothing)."""
    import torch

    from bertforge.model.architectures.bert import BertModel

    devices, build = [], BertModel.__init__

    def recording(self, *args, **kwargs):
        devices.append(torch.get_default_device().type)
        build(self, *args, **kwargs)
    monkeypatch.setattr(BertModel, "__init__", recording)
    return devices


def write_jsonl(path, rows) -> Path:
    """A JSON-lines file of the rows (objects)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def fine_tune(task: str, model, out, *flags) -> Path:
    """`bertforge finetune TASK` of a tiny model on small data: a high learning rate, no progress bars; the run
    folder."""
    from bertforge.cli import main

    assert main(["finetune", task, "--model", str(model), "--out", str(out), "--lr", "1e-3", "--no-progress",
                 *map(str, flags)]) == 0
    return Path(out)


@pytest.fixture
def minilm_dir() -> Path:
    return require_shared("models", "all-MiniLM-L6-v2")


@pytest.fixture
def uncased_vocab() -> Path:
    return require_shared("models", "all-MiniLM-L6-v2", "vocab.txt")


@pytest.fixture(scope="module")
def tokenizer() -> BertTokenizer:
    """The uncased vocabulary of bert-base-uncased (shared by the MiniLM checkpoint)."""
    return BertTokenizer.from_pretrained(require_shared("models", "all-MiniLM-L6-v2"))


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory):
    """A tiny pre-training checkpoint (random weights) with the real uncased vocabulary."""
    import torch

    from bertforge import BertConfig, BertForPreTraining

    vocab = require_shared("models", "all-MiniLM-L6-v2", "vocab.txt")
    folder = tmp_path_factory.mktemp("tiny")
    torch.manual_seed(0)
    tokenizer = BertTokenizer.from_pretrained(vocab)
    BertForPreTraining(BertConfig.from_name("tiny", vocab_size=tokenizer.vocab_size)).save_pretrained(folder, tokenizer)
    return folder


MODERNBERT_TEXTS = ["The quick brown fox jumps over the lazy dog.", "A gripping film, beautifully shot.",
                    "A dull mess that never finds its feet.", "Paris is the capital of France.",
                    "George Washington was born in Virginia in 1732.", "Who wrote the novel? Jane Austen did.",
                    "Ünïcödé text, emojis 🙂 and numbers 12345 are bytes too."] * 20


def modernbert_tokenizer(folder: Path) -> Path:
    """A tokenizer laid out as ModernBERT's and Ettin's: byte-level BPE (trained here on a few sentences), the
    special tokens [UNK] [CLS] [SEP] [PAD] [MASK] (the mask stripping the space before it), [CLS] A [SEP] B [SEP]."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)
    backend.decoder = decoders.ByteLevel()
    specials = ["<|padding|>", "[UNK]", "[CLS]", "[SEP]", "[PAD]"]
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(MODERNBERT_TEXTS, trainer)
    backend.add_special_tokens([AddedToken("[MASK]", lstrip=True, special=True)])
    cls_id, sep_id = backend.token_to_id("[CLS]"), backend.token_to_id("[SEP]")
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS]:0 $A:0 [SEP]:0", pair="[CLS]:0 $A:0 [SEP]:0 $B:0 [SEP]:0",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)])
    folder.mkdir(parents=True, exist_ok=True)
    backend.save(str(folder / "tokenizer.json"))
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": 8192, "cls_token": "[CLS]",
        "sep_token": "[SEP]", "pad_token": "[PAD]", "unk_token": "[UNK]", "mask_token": "[MASK]",
        "model_input_names": ["input_ids", "attention_mask"]}))
    return folder


def modernbert_folder(folder: Path, head: str = "ModernBertForMaskedLM", **config) -> Path:
    """A ModernBERT checkpoint as transformers writes one: its tokenizer (above) and random weights at a
    scaled-down shape (4 layers of 64, global attention every third layer, a window of 16 tokens), drawn wide."""
    import torch
    import transformers
    from tokenizers import Tokenizer

    modernbert_tokenizer(folder)
    backend = Tokenizer.from_file(str(folder / "tokenizer.json"))
    ids = {token: backend.token_to_id(token) for token in ("[CLS]", "[SEP]", "[PAD]")}
    sizes = dict(vocab_size=backend.get_vocab_size(), hidden_size=64, intermediate_size=96, num_hidden_layers=4,
                 num_attention_heads=4, local_attention=16, max_position_embeddings=1024, pad_token_id=ids["[PAD]"],
                 cls_token_id=ids["[CLS]"], sep_token_id=ids["[SEP]"], bos_token_id=ids["[CLS]"],
                 eos_token_id=ids["[SEP]"])
    torch.manual_seed(0)
    model = getattr(transformers, head)(transformers.ModernBertConfig(**{**sizes, **config}))
    with torch.no_grad():  # wide weights, norms and biases off their first values: predictions well apart
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape) * 0.1)
    model.save_pretrained(folder)
    return folder


ROBERTA_TEXTS = ["The quick brown fox jumps over the lazy dog.", "A gripping film, beautifully shot.",
                 "Ünïcödé café, naïve résumé, Zürich and São Paulo.", "北京是中国的首都，上海在东边。",
                 "Emojis 🙂🎉 and numbers 12345 are bytes too.", "antidisestablishmentarianism and "
                 "supercalifragilisticexpialidocious are long words.", "George Washington was born in Virginia."] * 20


def roberta_tokenizer(folder: Path, family: str = "roberta", model_max_length: int = 128) -> Path:
    """A tokenizer laid out as RoBERTa's (byte-level BPE) or XLM-RoBERTa's (a SentencePiece unigram model), trained
    here on mixed text (ROBERTA_TEXTS) and written by transformers' own class: <s> <pad> </s> <unk> as ids 0 to 3,
    <mask> last (stripping the space before it), <s> A </s></s> B </s>, inputs of model_max_length tokens at most
    (roberta-base's: 512, its 514 positions less pad_token_id + 1)."""
    import transformers
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    if family == "roberta":
        backend = Tokenizer(models.BPE())
        backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        backend.decoder = decoders.ByteLevel()
        backend.train_from_iterator(ROBERTA_TEXTS, trainers.BpeTrainer(
            vocab_size=500, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
        backend.add_special_tokens([AddedToken("<mask>", lstrip=True, special=True)])
        tokenizer = transformers.RobertaTokenizerFast(tokenizer_object=backend, model_max_length=model_max_length)
    else:  # the vocabulary with its scores, laid out by XLMRobertaTokenizer itself, as transformers reads it back
        backend = Tokenizer(models.Unigram())
        backend.pre_tokenizer = pre_tokenizers.Metaspace()
        backend.train_from_iterator(ROBERTA_TEXTS, trainers.UnigramTrainer(
            vocab_size=400, special_tokens=specials, unk_token="<unk>"))
        pieces = json.loads(backend.to_str())["model"]["vocab"]
        tokenizer = transformers.XLMRobertaTokenizerFast(vocab=[tuple(piece) for piece in pieces],
                                                         model_max_length=model_max_length)
    tokenizer.save_pretrained(folder)
    return folder


def roberta_folder(folder: Path, head: str = "RobertaForMaskedLM", **config) -> Path:
    """A RoBERTa checkpoint (an XLM-RoBERTa one for a head named XLMRoberta...) as transformers writes one: its
    tokenizer (above) and random weights at a scaled-down shape of the real models' (4 layers of 64, one token type,
    positions from pad_token_id 1 + 1 in a table of 130: 128 tokens), drawn wide."""
    import torch
    import transformers

    family = "xlm-roberta" if head.startswith("XLM") else "roberta"
    roberta_tokenizer(folder, family, config.get("max_position_embeddings", 130) - 2)
    vocab = len(transformers.AutoTokenizer.from_pretrained(folder))
    sizes = dict(vocab_size=vocab, hidden_size=64, intermediate_size=96, num_hidden_layers=4, num_attention_heads=4,
                 max_position_embeddings=130, type_vocab_size=1, layer_norm_eps=1e-5, pad_token_id=1,
                 bos_token_id=0, eos_token_id=2)
    configs = {"roberta": transformers.RobertaConfig, "xlm-roberta": transformers.XLMRobertaConfig}
    torch.manual_seed(0)
    model = getattr(transformers, head)(configs[family](**{**sizes, **config}))
    with torch.no_grad():  # wide weights, norms and biases off their first values: predictions well apart
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape) * 0.1)
    model.save_pretrained(folder)
    return folder


def electra_folder(folder: Path, head: str = "ElectraForMaskedLM", **config) -> Path:
    """An ELECTRA checkpoint as transformers writes one: a WordPiece tokenizer (uncased, trained here on mixed text:
    ROBERTA_TEXTS; [PAD] [UNK] [CLS] [SEP] [MASK] as ids 0 to 4, [CLS] A [SEP] B [SEP] with segments) and random
    weights at a scaled-down shape of electra-small-discriminator's (tables 32 wide projected onto 4 layers of 64,
    128 positions), drawn wide."""
    import torch
    import transformers
    from tokenizers import BertWordPieceTokenizer

    backend = BertWordPieceTokenizer(lowercase=True)
    backend.train_from_iterator(ROBERTA_TEXTS, vocab_size=400,
                                special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    transformers.ElectraTokenizerFast(
        tokenizer_object=backend._tokenizer, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        pad_token="[PAD]", mask_token="[MASK]",
        model_max_length=config.get("max_position_embeddings", 128)).save_pretrained(folder)
    sizes = dict(vocab_size=backend.get_vocab_size(), embedding_size=32, hidden_size=64, intermediate_size=96,
                 num_hidden_layers=4, num_attention_heads=4, max_position_embeddings=128)
    torch.manual_seed(0)
    model = getattr(transformers, head)(transformers.ElectraConfig(**{**sizes, **config}))
    with torch.no_grad():  # wide weights, norms and biases off their first values: predictions well apart
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape) * 0.1)
    model.save_pretrained(folder)
    return folder


def distilbert_tokenizer(folder: Path, model_max_length: int = 128) -> Path:
    """A tokenizer laid out as DistilBERT's: WordPiece (uncased, trained here on mixed text: ROBERTA_TEXTS), [PAD]
    [UNK] [CLS] [SEP] [MASK] as ids 0 to 4, [CLS] A [SEP] B [SEP], no token_type_ids, written by transformers' own
    class."""
    import transformers
    from tokenizers import BertWordPieceTokenizer

    backend = BertWordPieceTokenizer(lowercase=True)
    backend.train_from_iterator(ROBERTA_TEXTS, vocab_size=400,
                                special_tokens=["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    transformers.DistilBertTokenizerFast(
        tokenizer_object=backend._tokenizer, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
        pad_token="[PAD]", mask_token="[MASK]", model_max_length=model_max_length).save_pretrained(folder)
    return folder


def distilbert_folder(folder: Path, head: str = "DistilBertForMaskedLM", **config) -> Path:
    """A DistilBERT checkpoint as transformers writes one: its tokenizer (above) and random weights at a scaled-down
    shape of distilbert-base's (2 layers of 64, 4 heads, feed-forward 96, 128 positions), drawn wide."""
    import torch
    import transformers

    distilbert_tokenizer(folder, config.get("max_position_embeddings", 128))
    vocab = len(transformers.AutoTokenizer.from_pretrained(folder))
    sizes = dict(vocab_size=vocab, dim=64, hidden_dim=96, n_layers=2, n_heads=4, max_position_embeddings=128)
    torch.manual_seed(0)
    model = getattr(transformers, head)(transformers.DistilBertConfig(**{**sizes, **config}))
    with torch.no_grad():  # wide weights, norms and biases off their first values: predictions well apart
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape) * 0.1)
    model.save_pretrained(folder)
    return folder


@pytest.fixture
def hub(tmp_path, monkeypatch):
    """A Hugging Face Hub in this process (tests/hub_server.py) that huggingface_hub talks to, with an empty cache
    and no token; `hub.add(repo_id, folder)` makes a repository of a folder's files."""
    from tests.hub_server import HubServer

    with HubServer() as server:
        server.connect(monkeypatch, tmp_path / "hf-home")
        yield server


@pytest.fixture(scope="session")
def hub_bert(tmp_path_factory) -> Path:
    """A tiny BERT checkpoint as transformers writes one: random weights (2 layers of 32, a masked-LM head), and a
    WordPiece tokenizer of 76 tokens made by `tokenizers` (tokenizer.json, tokenizer_config.json)."""
    import string

    import torch
    import transformers
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors

    tokens = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *"the of and to in is was film good bad it not".split(),
              *string.ascii_lowercase, *(f"##{c}" for c in string.ascii_lowercase), *".,!?'"]
    vocab = {token: i for i, token in enumerate(dict.fromkeys(tokens))}
    backend = Tokenizer(models.WordPiece(vocab, unk_token="[UNK]"))
    backend.normalizer = normalizers.BertNormalizer(lowercase=True)
    backend.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    backend.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", vocab["[CLS]"]), ("[SEP]", vocab["[SEP]"])])
    folder = tmp_path_factory.mktemp("hub-bert")
    transformers.BertTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   pad_token="[PAD]", mask_token="[MASK]").save_pretrained(folder)
    torch.manual_seed(0)
    transformers.BertForMaskedLM(transformers.BertConfig(
        vocab_size=len(vocab), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
        intermediate_size=37)).save_pretrained(folder)
    return folder


def broken(folder, tmp_path, change=None, config=None):
    """A copy of `folder` with its weights edited by `change` and config.json's fields updated by `config`."""
    copy = tmp_path / "broken"
    from safetensors.torch import load_file, save_file

    shutil.copytree(folder, copy)
    if change is not None:
        weights = load_file(copy / "model.safetensors")
        change(weights)
        save_file({k: v.contiguous() for k, v in weights.items()}, copy / "model.safetensors")
    if config is not None:
        fields = json.loads((copy / "config.json").read_text())
        (copy / "config.json").write_text(json.dumps({**fields, **config}))
    return copy


def compare(reference, ours, ids, mask, segments=None, **inputs) -> dict[str, float]:
    """The worst difference of each output of two models (a reference's and bertforge's) at the real tokens, and of
    the hidden states; `segments`: token_type_ids, for the families that read them."""
    import torch

    inputs = {**inputs, **({} if segments is None else {"token_type_ids": segments})}
    with torch.no_grad():
        theirs = reference(input_ids=ids, attention_mask=mask, output_hidden_states=True, **inputs)
        mine = ours(input_ids=ids, attention_mask=mask, output_hidden_states=True, **inputs)
    real = mask.bool().reshape(-1, mask.shape[-1])
    worst = {}
    for key in ("logits", "start_logits", "end_logits", "last_hidden_state"):
        if theirs.get(key) is not None:
            a, b = theirs[key], mine[key]
            if a.shape[:2] == mask.shape:
                a, b = a[mask.bool()], b[mask.bool()]
            worst[key] = (a - b).abs().max().item()
    assert len(theirs.hidden_states) == len(mine.hidden_states)
    worst["hidden_states"] = max((a - b)[real].abs().max().item()
                                 for a, b in zip(theirs.hidden_states, mine.hidden_states))
    return worst


def mpnet_tokenizer(folder: Path, model_max_length: int = 128) -> Path:
    """A tokenizer laid out as MPNet's (microsoft/mpnet-base, all-mpnet-base-v2): WordPiece (uncased, trained here
    on mixed text: ROBERTA_TEXTS) with <s> <pad> </s> <unk> as ids 0 to 3, BERT's [PAD] [UNK] [CLS] [SEP] [MASK]
    after them ([UNK] the unknown token), <mask> last (stripping the space before it), <s> A </s></s> B </s> with no
    token_type_ids, written by transformers' own class."""
    import transformers
    from tokenizers import BertWordPieceTokenizer

    backend = BertWordPieceTokenizer(lowercase=True)
    backend.train_from_iterator(ROBERTA_TEXTS, vocab_size=400, special_tokens=[
        "<s>", "<pad>", "</s>", "<unk>", "[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"])
    vocab = backend.get_vocab()
    vocab["<mask>"] = len(vocab)
    transformers.MPNetTokenizerFast(vocab=vocab, model_max_length=model_max_length).save_pretrained(folder)
    return folder


def mpnet_folder(folder: Path, head: str = "MPNetForMaskedLM", **config) -> Path:
    """An MPNet checkpoint as transformers writes one: its tokenizer (above) and random weights at a scaled-down
    shape of mpnet-base's (2 layers of 32, 4 heads, feed-forward 48, 32 relative position buckets, positions from
    the padding id 1 + 1 in a table of 130: 128 tokens), drawn wide."""
    import torch
    import transformers

    mpnet_tokenizer(folder, config.get("max_position_embeddings", 130) - 2)
    vocab = len(transformers.AutoTokenizer.from_pretrained(folder))
    sizes = dict(vocab_size=vocab, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                 max_position_embeddings=130, layer_norm_eps=1e-5, relative_attention_num_buckets=32, pad_token_id=1,
                 bos_token_id=0, eos_token_id=2)
    torch.manual_seed(0)
    model = getattr(transformers, head)(transformers.MPNetConfig(**{**sizes, **config}))
    with torch.no_grad():  # wide weights, norms and biases off their first values: predictions well apart
        for parameter in model.parameters():
            parameter.add_(torch.randn(parameter.shape) * 0.1)
    model.save_pretrained(folder)
    return folder
