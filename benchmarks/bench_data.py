"""Speed and memory of `bertforge data create` on the shared corpus, against a straightforward reference.

    python benchmarks/bench_data.py            # the whole corpus (../shared/data/corpus), dupe factor 1
    python benchmarks/bench_data.py --quick    # inaugural + state_union only, under 2 minutes

Prints corpus tokens per second, instances, wall and CPU time and peak RSS of `create_pretraining_data`, then
times the reference and ours on a subset (inaugural + state_union), interleaved, best of two. The reference is Google's
create_pretraining_data.py restated in plain Python: the same sentences (our reader), each tokenized on its own
(`Tokenizer.encode`, one call per sentence, as Google calls `tokenizer.tokenize` per line), documents as lists of
token lists, Python's `random`, per-instance truncation and masking, instances kept in a list (no output
written). The last line is `ratio=<reference seconds / ours seconds on the subset>`.
"""

import argparse
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bertforge.data.corpus import file_sentences  # noqa: E402
from bertforge.core.io import text_files  # noqa: E402
from bertforge.data.create import create_pretraining_data, format_report  # noqa: E402
from bertforge.text.tokenizer import BertTokenizer  # noqa: E402

SHARED = Path(os.environ.get("BERTFORGE_SHARED", REPO.parent / "shared"))
SUBSET = ["inaugural", "state_union"]
ENCODING = "utf-8,latin-1"  # a few state_union files are ISO-8859-1


def reference(inputs, tokenizer, max_seq_length=128, dupe_factor=1, short_seq_prob=0.1, masked_lm_prob=0.15,
              max_predictions=20, seed=12345) -> int:
    """Google's algorithm, sentence by sentence in Python; returns the number of instances."""
    encoder = tokenizer.backend_tokenizer
    documents = []
    for path in text_files(inputs)[0]:
        documents.append([])
        for sentence in file_sentences(path, "auto", ENCODING)[1]:
            if sentence is None:
                documents.append([])
            elif tokens := encoder.encode(sentence, add_special_tokens=False).tokens:
                documents[-1].append(tokens)
    documents = [d for d in documents if d]
    rng = random.Random(seed)
    rng.shuffle(documents)
    vocab_words = list(tokenizer.vocab)
    instances = []
    for _ in range(dupe_factor):
        for index in range(len(documents)):
            instances += reference_document(documents, index, max_seq_length, short_seq_prob, masked_lm_prob,
                                            max_predictions, vocab_words, rng)
    rng.shuffle(instances)
    return len(instances)


def reference_document(documents, index, max_seq_length, short_seq_prob, masked_lm_prob, max_predictions,
                       vocab_words, rng):
    document, max_num_tokens = documents[index], max_seq_length - 3
    target = rng.randint(2, max_num_tokens) if rng.random() < short_seq_prob else max_num_tokens
    instances, chunk, length, i = [], [], 0, 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for s in chunk[:a_end] for t in s]
            tokens_b = []
            is_random_next = len(chunk) == 1 or rng.random() < 0.5
            if is_random_next:
                for _ in range(10):
                    other = rng.randint(0, len(documents) - 1)
                    if other != index:
                        break
                for sentence in documents[other][rng.randint(0, len(documents[other]) - 1):]:
                    tokens_b += sentence
                    if len(tokens_b) >= target - len(tokens_a):
                        break
                i -= len(chunk) - a_end
            else:
                tokens_b = [t for s in chunk[a_end:] for t in s]
            while len(tokens_a) + len(tokens_b) > max_num_tokens:
                longer = tokens_a if len(tokens_a) > len(tokens_b) else tokens_b
                del longer[0 if rng.random() < 0.5 else -1]
            tokens = ["[CLS]", *tokens_a, "[SEP]", *tokens_b, "[SEP]"]
            candidates = [j for j, t in enumerate(tokens) if t not in ("[CLS]", "[SEP]")]
            rng.shuffle(candidates)
            chosen = sorted(candidates[:min(max_predictions, max(1, round(len(tokens) * masked_lm_prob)))])
            labels = [tokens[j] for j in chosen]
            for j in chosen:
                if rng.random() < 0.8:
                    tokens[j] = "[MASK]"
                elif rng.random() >= 0.5:
                    tokens[j] = vocab_words[rng.randint(0, len(vocab_words) - 1)]
            instances.append((tokens, len(tokens_a), is_random_next, chosen, labels))
            chunk, length = [], 0
        i += 1
    return instances


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def ours(inputs, tokenizer, dupe_factor, progress=False):
    """(wall seconds, CPU seconds of all threads, statistics)"""
    with tempfile.TemporaryDirectory() as out:
        start, cpu = time.perf_counter(), cpu_seconds()
        stats = create_pretraining_data(inputs, tokenizer, out, dupe_factor=dupe_factor, encoding=ENCODING,
                                        progress=progress)
        return time.perf_counter() - start, cpu_seconds() - cpu, stats


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the subset only (under 2 minutes)")
    parser.add_argument("--corpus", default=str(SHARED / "data" / "corpus"))
    parser.add_argument("--vocab", default=str(SHARED / "models" / "all-MiniLM-L6-v2" / "vocab.txt"))
    parser.add_argument("--dupe-factor", type=int, default=1)
    args = parser.parse_args()
    corpus = Path(args.corpus)
    if not corpus.is_dir():
        sys.exit(f"needs the corpus at {corpus} (set BERTFORGE_SHARED or pass --corpus)")
    tokenizer = BertTokenizer.from_pretrained(args.vocab)
    subset = [corpus / name for name in SUBSET]
    baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    seconds, cpu, stats = ours(subset if args.quick else [corpus], tokenizer, args.dupe_factor, progress=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tokens = stats["corpus"]["tokens"]
    print(format_report(stats))
    print(f"ours ({'subset' if args.quick else 'whole corpus'}, dupe factor {args.dupe_factor}): {seconds:.1f} s, "
          f"{tokens / seconds / 1e3:.0f}k corpus tokens/s, {stats['train']['instances']:,} instances, "
          f"peak RSS {peak:.0f} MB ({baseline:.0f} MB after imports); CPU {cpu:.1f} s over all threads "
          f"(the host's load average was {os.getloadavg()[0]:.1f})")

    ours_times, reference_times = [], []
    for _ in range(2):  # interleaved, best of two: the host's speed drifts
        ours_times.append(ours(subset, tokenizer, 1)[0])
        start = time.perf_counter()
        n = reference(subset, tokenizer)
        reference_times.append(time.perf_counter() - start)
    ref_seconds, ours_subset = min(reference_times), min(ours_times)
    print(f"subset ({' + '.join(SUBSET)}, dupe factor 1, best of 2): reference {ref_seconds:.1f} s ({n:,} instances), "
          f"ours {ours_subset:.1f} s")
    print(f"ratio={ref_seconds / ours_subset:.2f}")


if __name__ == "__main__":
    main()
