"""The bi-encoder's embeddings and its in-batch negatives loss against sentence-transformers'."""

import pytest

from bertforge.model.bi_encoder import BertBiEncoder
from bertforge.text.tokenizer import BertTokenizer

QUERIES = ["who wrote the book?", "when did the war end?", "where is the tower?"]
PASSAGES = ["The book was written by a woman in 1901.", "The war ended in 1945 after six years.",
            "The tower stands in Paris, near the river."]


def sentence_transformer(folder):
    """all-MiniLM-L6-v2's modules (mean pooling, normalised) over a model folder."""
    st = pytest.importorskip("sentence_transformers")
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    word = Transformer(str(folder), max_seq_length=64)
    return st.SentenceTransformer(modules=[word, Pooling(word.get_embedding_dimension(), "mean"), Normalize()],
                                  device="cpu")


def test_embeddings_and_loss_are_sentence_transformers(minilm_dir):
    torch = pytest.importorskip("torch")
    reference = sentence_transformer(minilm_dir).eval()
    ours = BertBiEncoder.from_pretrained(minilm_dir)
    tokenizer = BertTokenizer.from_pretrained(minilm_dir)
    q = tokenizer(QUERIES, padding=True, truncation=True, max_length=64, return_tensors="pt")
    p = tokenizer(PASSAGES, padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        out = ours(**q, **{f"passage_{k}": v for k, v in p.items()})
        embedded = ours(**q)["embedding"]
        theirs = reference.encode(QUERIES, convert_to_tensor=True)
        losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
        loss = losses.MultipleNegativesRankingLoss(reference)
        expected = loss([reference.tokenize(QUERIES), reference.tokenize(PASSAGES)], None)
    assert torch.nn.functional.cosine_similarity(embedded, theirs).min() > 1 - 1e-5
    assert out["loss"].item() == pytest.approx(expected.item(), rel=1e-4)
    assert out["scores"].argmax(1).tolist() == [0, 1, 2]  # each query nearest its own passage
