from collections import Counter

import numpy as np
import pytest

from bertforge.data.corpus import Corpus
from bertforge.data.instances import Draws, assemble, iter_full_rows, iter_spans, truncate_pairs

CLS, SEP = 101, 102


def spans_of(corpus, max_seq_length, seed, short_seq_prob=0.0, documents=None, counts=None):
    documents = np.arange(corpus.num_documents) if documents is None else documents
    blocks = list(iter_spans(corpus, documents, max_seq_length, short_seq_prob,
                             Draws(np.random.default_rng(seed)), counts=counts))
    return [s for block in blocks for s in zip(block.a_start.tolist(), block.a_end.tolist(), block.b_start.tolist(),
                                               block.b_end.tolist(), block.is_random_next.tolist(),
                                               block.document.tolist())], blocks


def test_two_documents_seed_0_by_hand():
    # doc 0: sentences [1 2 3] [4 5 6] [7 8] (tokens 0-8), doc 1: [11 12 13 14 15 16] (tokens 8-14).
    corpus = Corpus.from_documents([[[1, 2, 3], [4, 5, 6], [7, 8]], [[11, 12, 13, 14, 15, 16]]])
    # max_seq_length 10: target 7 tokens. default_rng(0).random() gives, in order:
    # 0.637 0.270 0.041 0.017 0.813 0.913 0.607 0.730 0.544 0.935 0.816 0.003 0.857
    # doc 0: 0.637 >= 0.1 -> full target 7. Chunk [1 2 3][4 5 6][7 8] (3, 6, then 8 >= 7 tokens);
    #   a_end = randint(1, 2) = 1 + int(0.270 * 2) = 1 -> A = [1 2 3]; 0.041 < 0.5 -> random next, B needs
    #   7 - 3 = 4 tokens: document randint(0, 1) = int(0.017 * 2) = 0 is this one, retry int(0.813 * 2) = 1;
    #   start sentence randint(0, 0) (uses 0.913) -> B = [11 .. 16]; [4 5 6][7 8] are put back.
    #   Chunk [4 5 6][7 8] (document end): a_end = randint(1, 1) (uses 0.607) -> A = [4 5 6];
    #   0.730 >= 0.5 -> B = [7 8], the real next sentence.
    # doc 1: 0.544 -> full target. One-sentence chunk: A = [11 .. 16], random next is forced, B needs
    #   7 - 6 = 1 token: document int(0.935 * 2) = 1, int(0.816 * 2) = 1 (this one), int(0.003 * 2) = 0;
    #   sentence randint(0, 2) = int(0.857 * 3) = 2 -> B = [7 8].
    rows, blocks = spans_of(corpus, 10, seed=0, short_seq_prob=0.1)
    tok = corpus.tokens.tolist()
    got = [(tok[a0:a1], tok[b0:b1], bool(r)) for a0, a1, b0, b1, r, _ in rows]
    assert got == [([1, 2, 3], [11, 12, 13, 14, 15, 16], True),
                   ([4, 5, 6], [7, 8], False),
                   ([11, 12, 13, 14, 15, 16], [7, 8], True)]
    # Truncation to 7 tokens, one at a time from the longer side: instance 1 loses 2 tokens of B,
    # instance 3 one token of A; which end each comes from is random.
    cut = truncate_pairs(blocks[0], 7, np.random.default_rng(0))
    assert (cut.a_end - cut.a_start).tolist() == [3, 3, 5]
    assert (cut.b_end - cut.b_start).tolist() == [4, 2, 2]
    ids, offsets = assemble(corpus.tokens, cut, CLS, SEP)
    second = ids[offsets[1]:offsets[2]].tolist()
    assert second == [CLS, 4, 5, 6, SEP, 7, 8, SEP]
    first = ids[offsets[0]:offsets[1]].tolist()
    assert first[:5] == [CLS, 1, 2, 3, SEP] and first[-1] == SEP and len(first) == 10
    assert first[5:9] in ([11, 12, 13, 14], [12, 13, 14, 15], [13, 14, 15, 16])


def random_corpus(seed, documents=25, long_sentence=False):
    rng = np.random.default_rng(seed)
    docs, token = [], 1000
    for d in range(documents):
        doc = []
        for _ in range(int(rng.integers(1, 15))):  # includes one-sentence documents
            n = int(rng.integers(1, 40))
            doc.append(list(range(token, token + n)))
            token += n
        docs.append(doc)
    if long_sentence:
        docs[3].insert(1, list(range(token, token + 300)))
    return Corpus.from_documents(docs)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_invariants_per_instance(seed):
    max_seq_length, target = 32, 29
    corpus = random_corpus(seed, long_sentence=True)
    so, do = corpus.sentence_offsets, corpus.document_offsets
    boundaries = set(so.tolist())
    doc_of_token = lambda t: int(np.searchsorted(so, t, side="right") - 1)  # noqa: E731 (sentence index)
    doc_of_sentence = lambda s: int(np.searchsorted(do, s, side="right") - 1)  # noqa: E731
    counts = Counter()
    rows, blocks = spans_of(corpus, max_seq_length, seed, counts=counts)
    by_doc = {}
    for a0, a1, b0, b1, random_next, d in rows:
        assert {a0, a1, b0} <= boundaries  # A and B start (and A ends) at sentence boundaries
        assert doc_of_sentence(doc_of_token(a0)) == doc_of_sentence(doc_of_token(a1 - 1)) == d
        b_doc = doc_of_sentence(doc_of_token(b0))
        assert doc_of_sentence(doc_of_token(b1 - 1)) == b_doc
        assert (b_doc != d) == random_next  # random next iff B comes from another document
        if random_next:
            assert b1 in boundaries
        else:
            assert b0 == a1 and b1 in boundaries
            # Whole sentences up to the target: without its last sentence the chunk is short of it.
            last_start = max(x for x in boundaries if x < b1)
            assert last_start - a0 < target and (b1 - a0 >= target or b1 == so[do[d + 1]])
        by_doc.setdefault(d, []).append((a0, a1, b1, random_next))
    for d, chunks in by_doc.items():  # the document is walked in order, unused sentences put back
        assert chunks[0][0] == so[do[d]]
        for (a0, a1, b1, r), nxt in zip(chunks, chunks[1:]):
            assert nxt[0] == (a1 if r else b1)
        a0, a1, b1, r = chunks[-1]
        assert (a1 if r else b1) == so[do[d + 1]]
    assert counts["documents"] == corpus.num_documents
    assert counts["forced_random_next"] >= 1  # one-sentence documents and the 300-token sentence

    block = blocks[0]
    cut = truncate_pairs(block, max_seq_length - 3, np.random.default_rng(seed))
    la, lb = block.a_end - block.a_start, block.b_end - block.b_start
    la2, lb2 = cut.a_end - cut.a_start, cut.b_end - cut.b_start
    assert (la2 >= 1).all() and (lb2 >= 1).all() and (la2 + lb2 <= max_seq_length - 3).all()
    assert (la2 + lb2 == np.minimum(la + lb, max_seq_length - 3)).all()
    assert (cut.a_start >= block.a_start).all() and (cut.a_end <= block.a_end).all()
    assert (cut.b_start >= block.b_start).all() and (cut.b_end <= block.b_end).all()
    only_a, only_b = (la2 < la) & (lb2 == lb), (lb2 < lb) & (la2 == la)
    assert (la2[only_a] >= lb2[only_a]).all() and (lb2[only_b] >= la2[only_b] - 1).all()
    both = (la2 < la) & (lb2 < lb)
    assert (np.abs(la2 - lb2)[both] <= 1).all()
    assert (np.maximum(la, lb) > 250).any()  # the long sentence was used and cut down

    ids, offsets = assemble(corpus.tokens, cut, CLS, SEP)
    for i in range(len(cut)):
        row = ids[offsets[i]:offsets[i + 1]].tolist()
        n_a = la2[i]
        assert row[0] == CLS and row[n_a + 1] == SEP and row[-1] == SEP and len(row) <= max_seq_length
        assert row[1:n_a + 1] == corpus.tokens[cut.a_start[i]:cut.a_end[i]].tolist()
        assert row[n_a + 2:-1] == corpus.tokens[cut.b_start[i]:cut.b_end[i]].tolist()


def test_random_next_share_of_coin_flips_and_short_targets():
    corpus = random_corpus(7, documents=300)
    counts = Counter()
    rows, _ = spans_of(corpus, 64, seed=7, short_seq_prob=0.1, counts=counts)
    random_next = sum(r[4] for r in rows)
    flips = len(rows) - counts["forced_random_next"]
    assert abs((random_next - counts["forced_random_next"]) / flips - 0.5) < 0.03
    assert abs(counts["short_target_documents"] / counts["documents"] - 0.1) < 0.04


def test_held_out_pool_is_respected():
    corpus = random_corpus(3)
    pool = np.array([2, 5, 9, 14])
    rows, _ = spans_of(corpus, 32, seed=3, documents=pool)
    do, so = corpus.document_offsets, corpus.sentence_offsets
    allowed = set()
    for d in pool:
        allowed.update(range(int(so[do[d]]), int(so[do[d + 1]])))
    assert all(a0 in allowed and b0 in allowed for a0, _, b0, *_ in rows)


def test_single_document_falls_back_to_itself():
    # Google tries 10 times for another document, then keeps what it drew.
    corpus = Corpus.from_documents([[[1, 2, 3]]])
    rows, _ = spans_of(corpus, 10, seed=0)
    assert len(rows) == 1 and rows[0][4] and rows[0][:4] == (0, 3, 0, 3)


def full_rows(corpus, max_seq_length, documents=None, counts=None):
    documents = np.arange(corpus.num_documents) if documents is None else documents
    rows = []
    for ids, offsets in iter_full_rows(corpus, documents, max_seq_length, CLS, SEP, counts=counts):
        rows += [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]
    return rows


def test_full_rows_by_hand():
    # doc 0: [1 2 3] [4 5 6] [7 8]; doc 1: [11 12] [13 14 15 16 17 18 19 20 21 22] (longer than a row) [23].
    corpus = Corpus.from_documents([[[1, 2, 3], [4, 5, 6], [7, 8]], [[11, 12], list(range(13, 23)), [23]]])
    counts = Counter()
    # max_seq_length 9: 7 tokens between [CLS] and [SEP].
    rows = full_rows(corpus, 9, counts=counts)
    assert rows == [
        [CLS, 1, 2, 3, 4, 5, 6, SEP],  # [7 8] does not fit whole: never split, starts the next row
        [CLS, 7, 8, SEP, 11, 12, SEP],  # the row crosses into doc 1: [SEP] between the documents
        [CLS, 13, 14, 15, 16, 17, 18, 19, SEP],  # a sentence longer than a row is cut, row-sized
        [CLS, 20, 21, 22, 23, SEP],  # its rest starts the next row; the last row is the only one cut short
    ]
    assert full_rows(corpus, 10)[0] == [CLS, 1, 2, 3, 4, 5, 6, 7, 8, SEP]  # exactly full
    assert (counts["documents"], counts["document_joins"], counts["split_sentences"]) == (2, 1, 1)


def test_full_rows_keep_sentences_in_order_and_fill_rows():
    rng = np.random.default_rng(0)
    docs = [[list(rng.integers(1000, 2000, rng.integers(1, 12))) for _ in range(rng.integers(1, 30))]
            for _ in range(40)]
    corpus = Corpus.from_documents(docs)
    order = rng.permutation(corpus.num_documents)
    rows = full_rows(corpus, 32, documents=order)
    assert all(r[0] == CLS and r[-1] == SEP and len(r) <= 32 for r in rows)
    # Reading the rows back in order gives the documents' sentences in order, with one [SEP] per join.
    inner = [t for r in rows for t in r[1:-1]]
    assert [t for t in inner if t != SEP] == [x for d in order for s in docs[d] for x in s]
    assert sum(t == SEP for t in inner) <= len(order) - 1
    # No sentence is cut (none is longer than a row): each row starts where a sentence starts.
    starts = set()
    pos = 0
    for d in order:
        for s in docs[d]:
            starts.add(pos)
            pos += len(s)
    flat_pos = 0
    for r in rows:
        assert flat_pos in starts
        flat_pos += sum(1 for t in r[1:-1] if t != SEP)
    # Every row but the last is full up to less than one sentence (11 tokens) plus its join.
    assert all(len(r) > 32 - 12 for r in rows[:-1])
