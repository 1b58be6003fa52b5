import pytest

from bertforge.core.errors import BertforgeError
from bertforge.tasks.metrics import ner_metrics
from bertforge.tasks.ner import (
    NerSentence, encode_ner, iob1_to_iob2, label_list, predictions_to_words, read_conll, write_conll
)
from tests.conftest import require_shared

LABELS = ["O", "B-LOC", "I-LOC", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER"]
LABEL_TO_ID = {label: i for i, label in enumerate(LABELS)}


@pytest.fixture(scope="module")
def conll_dir():
    return require_shared("data", "conll2003")


def _gold_as_predictions(features):
    """Per-token predictions that repeat the gold label on first pieces (0 elsewhere)."""
    return [[max(y, 0) for y in labels] for labels in features["labels"]]


@pytest.mark.parametrize("split,count", [("train", 14_041), ("valid", 3_250), ("test", 3_453)])
def test_real_counts(conll_dir, split, count):
    sentences = read_conll(conll_dir / f"{split}.txt")
    assert len(sentences) == count
    assert all(len(s.words) == len(s.tags) > 0 for s in sentences)
    assert label_list(sentences) == LABELS


def test_real_first_sentence(conll_dir):
    first = read_conll(conll_dir / "train.txt")[0]  # after the -DOCSTART- line
    assert first.words == ["EU", "rejects", "German", "call", "to", "boycott", "British", "lamb", "."]
    assert first.tags == ["B-ORG", "O", "B-MISC", "O", "O", "O", "B-MISC", "O", "O"]


def test_real_round_trip(conll_dir, tokenizer, caplog):
    """Encoding dev and decoding the gold labels as predictions gives back every tag (F1 1.0)."""
    sentences = read_conll(conll_dir / "valid.txt")
    features = encode_ner(sentences, tokenizer, LABEL_TO_ID, max_length=128)
    assert "3 of 3250 sentences are longer than 128 tokens" in caplog.text
    assert len(features["input_ids"]) == 3_253 and max(map(len, features["input_ids"])) <= 128
    predicted = predictions_to_words(sentences, features, _gold_as_predictions(features), LABELS)
    assert predicted == [s.tags for s in sentences]
    assert ner_metrics([s.tags for s in sentences], predicted)["f1"] == 1.0


def test_reader_layouts(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text("-DOCSTART- O\n\nPeter\tI-PER\nBlackburn I-PER\n\n\n-DOCSTART- O\nin O\nBonn I-LOC")
    sentences = read_conll(path)
    assert [s.words for s in sentences] == [["Peter", "Blackburn"], ["in", "Bonn"]]
    assert read_conll(path, to_iob2=True)[0].tags == ["B-PER", "I-PER"]
    assert label_list(sentences) == ["O", "B-LOC", "I-LOC", "B-PER", "I-PER"]  # B- as well, though unseen


def test_encoding(tmp_path):
    path = tmp_path / "deu.txt"
    path.write_bytes("Müller B-PER\n".encode("latin-1"))
    with pytest.raises(BertforgeError, match="deu.txt: not valid utf-8 at byte 1"):
        read_conll(path)
    assert read_conll(path, encoding="latin-1")[0].words == ["Müller"]


def test_iob1_to_iob2():
    assert iob1_to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC", "I-ORG"]) == [
        "B-PER", "I-PER", "B-PER", "O", "B-LOC", "B-ORG"]


@pytest.mark.parametrize("text,error", [
    ("EU NNP B-NP B-ORG\nrejects VBZ O\n", "2: expected 4 columns (word first, tag last), found 3"),
    ("EU\n", "1: expected 2 columns (word first, tag last), found 1"),
    ("EU B-ORG\nrejects X-ORG\n", "2: tag 'X-ORG' is not O, B-TYPE or I-TYPE"),
    ("-DOCSTART- -X- O\n\n", ": no sentences"),
])
def test_reader_errors(tmp_path, text, error):
    path = tmp_path / "bad.txt"
    path.write_text(text)
    with pytest.raises(BertforgeError) as e:
        read_conll(path)
    assert str(e.value) == f"{path}{':' if error[0].isdigit() else ''}{error}"


def test_first_piece_labels(tokenizer):
    sentence = NerSentence(["Blackburn", "visited", "Ouagadougou", "."], ["B-PER", "O", "B-LOC", "O"])
    features = encode_ner([sentence], tokenizer, LABEL_TO_ID, max_length=32)
    tokens = tokenizer.convert_ids_to_tokens(features["input_ids"][0])
    labelled = [(tok, LABELS[y]) for tok, y in zip(tokens, features["labels"][0]) if y != -100]
    assert labelled == [("blackburn", "B-PER"), ("visited", "O"), (tokens[3], "B-LOC"), (".", "O")]
    assert tokens[4].startswith("##")  # Ouagadougou has several pieces; only the first is labelled
    assert features["word_ids"][0][0] == -1 and features["labels"][0][0] == -100
    with pytest.raises(BertforgeError, match="tag 'B-LOC' is not in the label list"):
        encode_ner([sentence], tokenizer, {"O": 0, "B-PER": 1}, max_length=32)


def test_long_sentences_split_or_truncate(tokenizer, caplog):
    words = [f"word{k}" for k in range(40)]  # several pieces each
    sentences = [NerSentence(words, ["B-PER"] + ["O"] * 39), NerSentence(["short"], ["O"])]
    split = encode_ner(sentences, tokenizer, LABEL_TO_ID, max_length=24)
    assert "1 of 2 sentences are longer than 24 tokens: split" in caplog.text
    assert split["sentence_index"][-1] == 1 and len(set(split["sentence_index"][:-1])) == 1
    assert max(map(len, split["input_ids"])) <= 24
    assert predictions_to_words(sentences, split, _gold_as_predictions(split), LABELS) == [s.tags for s in sentences]

    cut = encode_ner(sentences, tokenizer, LABEL_TO_ID, max_length=24, split_long=False)
    assert "1 of 2 sentences are longer than 24 tokens: truncated" in caplog.text
    assert cut["sentence_index"] == [0, 1]
    wrong = [[LABEL_TO_ID["B-MISC"]] * len(ids) for ids in cut["input_ids"]]
    predicted = predictions_to_words(sentences, cut, wrong, LABELS)[0]
    covered = len({w for w in cut["word_ids"][0] if w >= 0})
    assert 0 < covered < 40 and predicted == ["B-MISC"] * covered + ["O"] * (40 - covered)


def test_write_conll(tmp_path):
    sentences = [NerSentence(["Peter", "Blackburn"], ["B-PER", "I-PER"]), NerSentence(["Bonn"], ["B-LOC"])]
    write_conll(tmp_path / "out.txt", sentences, [["B-PER", "O"], ["B-ORG"]])
    assert (tmp_path / "out.txt").read_text() == "Peter B-PER B-PER\nBlackburn I-PER O\n\nBonn B-LOC B-ORG\n\n"
