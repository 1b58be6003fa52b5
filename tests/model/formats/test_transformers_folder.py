"""A folder saved by transformers 5 (tokenizer.json and no vocab.txt) used by the commands as it is:
`finetune` starts from it, and `features` reads the same hidden states transformers computes."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
import transformers

from bertforge.cli import main
from bertforge.model.architectures.task_heads import BertForSequenceClassification
from bertforge.text.tokenizer import BertTokenizer
from tests.conftest import REPO, require_shared

transformers.logging.set_verbosity_error()
TEXTS = ["The quick brown fox jumps over the lazy dog.", "A second, rather longer line of text for the model.", "Hi"]


@pytest.fixture(scope="module")
def transformers_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hf")
    tokenizer = transformers.AutoTokenizer.from_pretrained(require_shared("models", "all-MiniLM-L6-v2"))
    config = transformers.BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2,
                                     num_attention_heads=2, intermediate_size=128)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "vocab.txt").unlink(missing_ok=True)
    assert (folder / "tokenizer.json").is_file()
    return folder, model, tokenizer


def test_tokenizer_and_model_load_and_agree(transformers_folder):
    folder, ref, ref_tokenizer = transformers_folder
    tokenizer = BertTokenizer.from_pretrained(folder)
    model = BertForSequenceClassification.from_pretrained(folder)
    ours, theirs = tokenizer(TEXTS, padding=True, return_tensors="pt"), ref_tokenizer(TEXTS, padding=True,
                                                                                       return_tensors="pt")
    assert all(torch.equal(ours[k], theirs[k]) for k in theirs.keys())
    with torch.no_grad():
        assert torch.allclose(model(**ours).logits, ref(**theirs).logits, atol=1e-5)


def test_features_command_reads_the_reference_hidden_states(transformers_folder, tmp_path):
    folder, ref, ref_tokenizer = transformers_folder
    (tmp_path / "in.txt").write_text("\n".join(TEXTS) + "\n", encoding="utf-8")
    out = tmp_path / "cls.npy"
    done = subprocess.run([sys.executable, "-m", "bertforge", "features", "--model", str(folder), "--input",
                           str(tmp_path / "in.txt"), "--out", str(out), "--level", "sentence", "--pooling", "cls",
                           "--layers", "-1"], cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    with torch.no_grad():
        expected = ref.bert(**ref_tokenizer(TEXTS, padding=True, return_tensors="pt")).last_hidden_state[:, 0]
    np.testing.assert_allclose(np.load(out), expected.numpy(), atol=1e-4)


def test_finetune_starts_from_it(transformers_folder, tmp_path):
    folder, _, _ = transformers_folder
    data = require_shared("data", "glue", "SST-2")
    assert main(["finetune", "sst2", "--model", str(folder), "--data", str(data), "--out", str(tmp_path / "run"),
                 "--epochs", "1", "--batch-size", "8", "--max-train-examples", "16", "--max-eval-examples", "8",
                 "--no-progress"]) == 0
    best = tmp_path / "run" / "best"
    assert json.loads((tmp_path / "run" / "eval_results.json").read_text())["train_examples"] == 16
    model = transformers.BertForSequenceClassification.from_pretrained(best)  # and back into transformers
    assert model.config.id2label == {0: "negative", 1: "positive"}  # GLUE's names, which transformers shows
    assert transformers.AutoTokenizer.from_pretrained(best)("hi")["input_ids"] == [101, 7632, 102]
