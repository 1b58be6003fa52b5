"""`bertforge info DIR`: a checkpoint folder described from its config and the weights' header."""

import argparse

import pytest
import torch

import bertforge.model.architectures.bert as bf
from bertforge.model.formats.checkpoint import PICKLE, SAFETENSORS
from bertforge.model.architectures.config import BertConfig
from bertforge.core.errors import BertforgeError
from bertforge.commands.info import add_info_arguments, run_info
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from tests.conftest import place_file


def info(folder, capsys) -> dict[str, str]:
    """Run the command as the CLI would; its output as {field: value}."""
    parser = argparse.ArgumentParser()
    add_info_arguments(parser)
    assert run_info(parser.parse_args([str(folder)])) == 0
    fields = (line.split(":", 1) for line in capsys.readouterr().out.splitlines())
    return {name: value.strip() for name, value in fields}

def test_minilm(minilm_dir, capsys):
    out = info(minilm_dir, capsys)
    assert out["architecture"] == "BertModel"
    assert out["sizes"] == "6 layers, hidden 384, 12 heads, feed-forward 1536, 512 positions, vocabulary 30522"
    # The published count (22.7M): the position-ids buffer stored in the file is not a parameter.
    assert out["parameters"] == "22,713,216 total: embeddings 11,918,592, encoder 10,646,784, heads 147,840"
    assert out["heads"] == "pooler"
    assert out["weights"] == "model.safetensors, float32, 86.7 MiB"
    assert out["vocabulary"] == "30522 tokens (as vocab.txt), uncased (tokenizer_config.json)"
    assert "embedding" not in out


def test_sentence_transformers_folder(minilm_dir, tmp_path, capsys):
    from bertforge.model.formats.sentence_folder import write_sentence_folder

    for file in minilm_dir.iterdir():
        place_file(file, tmp_path / file.name)
    write_sentence_folder(tmp_path, "cls", normalize=False, max_seq_length=128)
    assert info(tmp_path, capsys)["embedding"] == \
        "sentence-transformers folder: cls pooling, not normalized, max_seq_length 128"


def test_pretraining_folder(tmp_path, capsys):
    config = BertConfig(vocab_size=500, hidden_size=64, num_hidden_layers=3, num_attention_heads=4,
                        intermediate_size=256, max_position_embeddings=128)
    model = bf.BertForPreTraining(config).to(torch.float16)
    model.save_pretrained(tmp_path)
    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "The", "the"] + [f"w{i}" for i in range(496)]))
    out = info(tmp_path, capsys)
    assert out["architecture"] == "BertForPreTraining"
    assert out["sizes"] == "3 layers, hidden 64, 4 heads, feed-forward 256, 128 positions, vocabulary 500"
    total = sum(p.numel() for p in model.parameters())
    embeddings = sum(p.numel() for p in model.bert.embeddings.parameters())
    encoder = sum(p.numel() for p in model.bert.encoder.parameters())
    assert out["parameters"] == (f"{total:,} total: embeddings {embeddings:,}, encoder {encoder:,}, "
                                 f"heads {total - embeddings - encoder:,}")
    assert out["heads"] == "pooler, masked-LM head, next-sentence head"
    assert out["weights"].startswith("model.safetensors, float16, ")
    assert out["vocabulary"] == "500 tokens (as vocab.txt), cased (guessed: vocab.txt has capitals)"


def test_classifier_with_labels(tmp_path, capsys):
    config = BertConfig.from_name("tiny", vocab_size=100, id2label={0: "neg", 1: "neutral", 2: "pos"})
    BertForSequenceClassification(config).save_pretrained(tmp_path)
    out = info(tmp_path, capsys)
    assert out["heads"] == "pooler, classifier (3 outputs: neg, neutral, pos)"
    assert out["vocabulary"] == "100 tokens, unknown (no tokenizer files in the folder)"


def test_pickle_folder_is_not_opened(tmp_path):
    model = bf.BertModel(BertConfig.from_name("tiny", vocab_size=100))
    model.save_pretrained(tmp_path)
    torch.save(model.state_dict(), tmp_path / PICKLE)
    (tmp_path / SAFETENSORS).unlink()
    with pytest.raises(BertforgeError, match="info reads safetensors headers only"):
        run_info(argparse.Namespace(dir=tmp_path, revision=None))
