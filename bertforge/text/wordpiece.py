"""Learning a WordPiece vocabulary from word counts, the same vocabulary on every run over the same text.

The algorithm is the one of the `tokenizers` library's WordPieceTrainer (a byte-pair-encoding merge learner with
BERT's ``##`` prefix for pieces that continue a word), whose choices between equals follow a per-process random
hash order, so that two runs over one corpus gave two vocabularies. Here every choice follows a fixed rule:

1. the special tokens, in the order given;
2. the alphabet: the words' characters, at most ``limit_alphabet`` of them (the most frequent; between equally
   frequent ones, the lower code point first), in code-point order; the words lose the other characters (as in
   the reference);
3. every character that occurs inside a word (not first) as a ``##`` piece, in code-point order;
4. merges until ``vocab_size`` entries: the most frequent pair of adjacent pieces, counted over the words with
   their frequencies and needing at least ``min_frequency``; between equally frequent pairs, the one whose left
   piece, then right piece, entered the vocabulary first (the reference's rule, on ids that are now fixed: the
   order above, then merges in the order made). The pair becomes one piece (``un`` + ``##able`` ->
   ``unable``, ``##ab`` + ``##le`` -> ``##able``) wherever it occurs, left to right: merging ``##a ##a`` in
   ``a ##a ##a ##a`` gives ``a ##aa ##a``.

Pair counts are updated where a merge changes a word (an index from each pair to the words holding it, and a heap
of pairs by count whose stale entries are skipped when they come up), so a merge costs the words it touches.
"""

import collections
import contextlib
import gc
import heapq

from tqdm import tqdm

from ..core.errors import BertforgeError
from ..core.decoding import decoded_blocks
from ..core.io import text_files
from .tokenizer import BertTokenizer, build_backend
from .vocab import SPECIAL_TOKENS

PREFIX = "##"  # marks a piece that continues a word


def count_words(texts, normalizer, pre_tokenizer, progress: bool = False) -> collections.Counter:
    """How often each word occurs in `texts`, normalized and split as the tokenizer's pipeline does.

    The pipeline runs once per distinct space-separated chunk of the text rather than over the whole text, which
    is many times faster (chunks repeat) and gives the same words: BERT's normalizer maps character by character
    (its NFD reorders marks only up to a space or a line end) and its pre-tokenizer splits at every space.
    """
    chunks = collections.Counter()
    for text in texts:
        chunks.update(text.replace("\n", " ").split(" "))
    words = collections.Counter()
    for chunk, n in tqdm(chunks.items(), total=len(chunks), unit="chunk", unit_scale=True, desc="words",
                         disable=not progress):
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(chunk)):
            words[word] += n
    return words


@contextlib.contextmanager
def _without_cycle_collection():
    """Python's cycle collector paused: the merge structures hold millions of small containers, which its passes
    would walk again and again (a third of the time), and they make no reference cycles."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


@_without_cycle_collection()
def learn_vocab(word_counts: dict[str, int], vocab_size: int, special_tokens, min_frequency: int = 2,
                limit_alphabet: int = 1000, progress: bool = False) -> list[str]:
    """The vocabulary learnt from `word_counts` (word -> occurrences), tokens in id order (see the module's text).

    Never fewer entries than the special tokens, the alphabet and its ``##`` pieces, even above `vocab_size`."""
    chars = collections.Counter()
    for word, n in word_counts.items():
        for c in word:
            chars[c] += n
    alphabet = set(sorted(chars, key=lambda c: (-chars[c], c))[:limit_alphabet])
    inside = {c for word in word_counts for c in word[1:] if c in alphabet}
    tokens = list(dict.fromkeys([*special_tokens, *sorted(alphabet), *(PREFIX + c for c in sorted(inside))]))
    ids = {t: i for i, t in enumerate(tokens)}

    words, counts = [], []  # the words of two or more pieces (others hold no pair), as piece ids
    for word, n in word_counts.items():
        pieces = [ids[c if i == 0 else PREFIX + c] for i, c in enumerate(word) if c in alphabet]
        if len(pieces) > 1:
            words.append(pieces)
            counts.append(n)
    pair_counts = collections.defaultdict(int)
    holders = collections.defaultdict(set)  # pair -> the words that hold it (or held it: checked when merging)
    for w, (pieces, n) in enumerate(zip(words, counts)):
        for pair in zip(pieces, pieces[1:]):
            pair_counts[pair] += n
            holders[pair].add(w)
    # Entries (-count, left id, right id): the heap's first is the most frequent pair, of equally frequent ones
    # the one of the earliest entries. An entry whose count is no longer its pair's is stale.
    heap = [(-n, a, b) for (a, b), n in pair_counts.items()]
    heapq.heapify(heap)

    bar = tqdm(total=vocab_size, initial=min(len(tokens), vocab_size), unit="piece", unit_scale=True,
               desc="merges", disable=not progress)
    with bar:
        while len(tokens) < vocab_size and heap:
            negative, a, b = heapq.heappop(heap)
            n = pair_counts.get((a, b), 0)
            if n != -negative:
                if 0 < n < -negative:  # the count fell since this entry was made: queue the pair at its count
                    heapq.heappush(heap, (-n, a, b))
                continue  # (a count that rose was queued when it rose)
            if n < min_frequency:
                break
            # Always a new string: pieces that spell it otherwise were made from the same text, which then held
            # this pair, and every occurrence of a pair is merged.
            new = len(tokens)
            tokens.append(tokens[a] + tokens[b].removeprefix(PREFIX))
            bar.update()
            for pair in _merge(words, counts, holders.pop((a, b)), a, b, new, pair_counts, holders):
                n = pair_counts[pair]
                if n > 0:
                    heapq.heappush(heap, (-n, *pair))
            del pair_counts[a, b]  # every occurrence is merged
    return tokens


def _merge(words, counts, where, a: int, b: int, new: int, pair_counts, holders) -> set:
    """Replace the pair (a, b) by `new` in the words numbered `where`, left to right; update the counts of the
    pairs around each replacement and return the pairs whose count rose."""
    rose = set()
    for w in where:
        pieces, n = words[w], counts[w]
        merged, i, last = [], 0, len(pieces) - 1
        while i <= last:
            if pieces[i] == a and i < last and pieces[i + 1] == b:
                if merged:
                    before = merged[-1]
                    pair_counts[before, a] -= n
                    pair = before, new
                    pair_counts[pair] += n
                    holders[pair].add(w)
                    rose.add(pair)
                if i + 1 < last:
                    after = pieces[i + 2]
                    pair_counts[b, after] -= n
                    pair = new, after
                    pair_counts[pair] += n
                    holders[pair].add(w)
                    rose.add(pair)
                merged.append(new)
                i += 2
            else:
                merged.append(pieces[i])
                i += 1
        words[w] = merged
    return rose


def train_vocab(files, vocab_size=30522, out_dir=None, lowercase=True, min_frequency=2, limit_alphabet=1000,
                encoding="utf-8", progress: bool = False) -> BertTokenizer:
    """Train a WordPiece vocabulary (`learn_vocab`: the same one on every run; special tokens: ids 0-4), saved in
    out_dir if given. `encoding` may list fallbacks (`utf-8,cp1252`); `progress`: bars with rates and ETAs."""
    paths, _ = text_files(files)
    if not paths:
        raise BertforgeError(f"no text files (*.txt, *.raw, *.text) in {' '.join(map(str, files))}")

    def texts():
        with tqdm(total=sum(p.stat().st_size for p in paths), unit="B", unit_scale=True, desc="read",
                  disable=not progress) as bar:
            for path in paths:
                yield from decoded_blocks(path, encoding, bar)

    backend = build_backend({}, lowercase)
    word_counts = count_words(texts(), backend.normalizer, backend.pre_tokenizer, progress)
    if not word_counts:
        raise BertforgeError(f"{' '.join(map(str, files))}: no text to learn a vocabulary from (only whitespace)")
    tokens = learn_vocab(word_counts, vocab_size, SPECIAL_TOKENS, min_frequency, limit_alphabet, progress)
    if len(tokens) > vocab_size:
        raise BertforgeError(f"--vocab-size {vocab_size} is below what the corpus needs: its alphabet and the "
                             f"{len(SPECIAL_TOKENS)} special tokens take {len(tokens)} entries")
    tokenizer = BertTokenizer({t: i for i, t in enumerate(tokens)}, do_lower_case=lowercase)
    if out_dir is not None:
        tokenizer.save_pretrained(out_dir)
    return tokenizer
