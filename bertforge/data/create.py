"""``bertforge data create``: a text corpus to pre-training shards, Google's ``create_pretraining_data.py``.

Pipeline: read and tokenize every sentence once (``tokenizers``' multi-threaded ``encode_batch``, both
cores) into a flat token file; choose held-out documents; then for each of ``dupe_factor`` passes, visit
the documents in a fresh random order, make Google's instances (:mod:`bertforge.data.instances`), and
stream them, truncated, assembled, masked (:mod:`bertforge.data.masking`) and shuffled within the shard,
to shards of up to ``SHARD_INSTANCES`` instances (:mod:`bertforge.data.shards`).

Memory: the corpus tokens live in a memory-mapped file in ``DIR`` (2 bytes per token for vocabularies up
to 65,536; deleted at the end), paged in and out by the OS. Resident are 24 bytes per sentence while
reading and 8 after (sentence offsets: about 1 and 0.3 bytes per corpus token for 25-token sentences),
plus a constant of a few hundred MB at most: two encode batches of ``ENCODE_BATCH_CHARS`` characters in
flight, and one shard of ``SHARD_INSTANCES`` instances in the making, masked ``MASK_ROWS`` rows at a time.

The output is a deterministic function of the inputs (file contents and order), the arguments and the
seed: each pass draws from its own ``np.random.default_rng([seed, split, pass])``.
"""

import logging
import shutil
from collections import Counter
from pathlib import Path

import numpy as np
from tqdm import tqdm

from bertforge.data.corpus import read_corpus, token_dtype
from bertforge.data.instances import (
    Draws, assemble, iter_full_rows, iter_spans, ragged_arange, special_positions, to_padded, truncate_pairs
)
from bertforge.data.masking import continuation_table, mask_batch, word_starts
from bertforge.data.shards import ShardWriter, vocab_sha256
from bertforge.core.errors import BertforgeError
from bertforge.core.io import exclusive, replace_folder, write_json
from bertforge.text.tokenizer import BertTokenizer

MAX_SEQ_LENGTH = 1 << 16  # masked positions are stored as uint16 (see shards.py)

SHARD_INSTANCES = 1 << 15
MASK_ROWS = 4096  # rows masked at once: bounds the temporary [rows, max_seq_length] arrays
ONE_SENTENCE_SHARE = 0.1  # documents of one sentence: a warning from this share of them on (with pairs)
KEPT_SHARE = 0.5  # a sentence longer than a row keeps at most this share of its tokens: a warning

log = logging.getLogger("bertforge")


def held_out_split(n_docs: int, eval_docs: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """The held-out documents (`--eval-docs` of `n_docs`, drawn from the seed) and a mask of them over all."""
    n_eval = held_out_documents(eval_docs, n_docs)
    if n_eval >= n_docs:
        raise BertforgeError(f"--eval-docs {eval_docs}: the corpus has only {n_docs} documents")
    held_out = np.random.default_rng([seed, 0]).choice(n_docs, n_eval, replace=False)
    is_eval = np.zeros(n_docs, bool)
    is_eval[held_out] = True
    return held_out, is_eval


def create_pretraining_data(inputs, tokenizer, out, *, max_seq_length: int = 128, max_predictions: int = 20,
                            masked_lm_prob: float = 0.15, short_seq_prob: float = 0.1, dupe_factor: int = 10,
                            seed: int = 12345, whole_word_mask: bool = False, mask: bool = True,
                            eval_docs: float = 0, encoding: str = "utf-8", fmt: str = "auto", nsp: bool = True,
                            progress: bool = False) -> dict:
    """Write pre-training data for ``inputs`` (files or folders) to ``out``; return the statistics.

    ``tokenizer`` is a :class:`~bertforge.text.tokenizer.BertTokenizer`, or a vocab.txt or tokenizer folder; it is
    saved in ``out`` (vocab.txt and the Hugging Face tokenizer files). ``eval_docs``: that many documents (or
    that fraction of them, when below 1; "auto": 1%, at least one, of 10 or more) are held out and made into
    ``out/eval`` (one pass, never used for training pairs). ``mask=False`` writes unmasked instances for dynamic
    masking. ``nsp=False`` writes single-segment rows filled with consecutive sentences instead of Google's pairs
    (:func:`~bertforge.data.instances.iter_full_rows`).
    """
    source = "the tokenizer" if isinstance(tokenizer, BertTokenizer) else tokenizer
    if not isinstance(tokenizer, BertTokenizer):
        tokenizer = BertTokenizer.from_pretrained(tokenizer)
    if tokenizer.mask_token_id is None:
        raise BertforgeError(f"{source}: no mask token, which masked-LM pre-training data needs (mask_token in "
                             "tokenizer_config.json)")
    check_settings(max_seq_length, short_seq_prob, masked_lm_prob, dupe_factor, max_predictions, eval_docs)
    final = Path(out)
    with exclusive(final, "--out"):
        # Everything is written into a partial folder that replaces `final` only when complete: a failed or
        # interrupted run leaves the previous data as it was.
        out = final.with_name(f".{final.name}.partial")
        shutil.rmtree(out, ignore_errors=True)  # what a killed run left
        out.mkdir(parents=True)
        token_file = out / "corpus-tokens.tmp"
        try:
            corpus, read_stats = read_corpus(inputs, tokenizer, token_file, fmt, encoding, progress)
            held_out, is_eval = held_out_split(corpus.num_documents, eval_docs, seed)
            n_eval = len(held_out)
            header = {**vocabulary_header(tokenizer), "max_seq_length": max_seq_length,
                      "short_seq_prob": short_seq_prob, "seed": seed, "masked": mask, "nsp": nsp,
                      "masked_lm_prob": masked_lm_prob, "max_predictions": max_predictions,
                      "whole_word_mask": whole_word_mask}
            continuation = continuation_table(tokenizer.vocab)
            stats = {"corpus": {**read_stats, "eval_documents": n_eval, "eval_docs": eval_docs}}
            if nsp:
                stats["corpus"].update(corpus_warnings(corpus, tokenizer, max_seq_length))
            train = {**header, "split": "train", "dupe_factor": dupe_factor}
            stats["train"] = _write_split(corpus, np.flatnonzero(~is_eval), out, train, continuation, [seed, 1],
                                          progress)
            if n_eval:
                held = {**header, "split": "eval", "dupe_factor": 1}
                stats["eval"] = _write_split(corpus, held_out, out / "eval", held, continuation, [seed, 2], progress)
            write_json(out / "stats.json", stats)
            tokenizer.save_pretrained(out)
            corpus = None  # drop the memory map before deleting its file
            token_file.unlink()
            replace_folder(out, final)
        except BaseException:
            corpus = None
            shutil.rmtree(out, ignore_errors=True)
            raise
        return stats


def check_settings(max_seq_length, short_seq_prob, masked_lm_prob, dupe_factor, max_predictions, eval_docs) -> None:
    for flag, value, ok, rule in (
            ("--max-length", max_seq_length, 5 <= max_seq_length <= MAX_SEQ_LENGTH,
             f"from 5 ([CLS] A [SEP] B [SEP]) to {MAX_SEQ_LENGTH} (positions are stored as uint16)"),
            ("--short-seq-prob", short_seq_prob, 0 <= short_seq_prob <= 1, "between 0 and 1"),
            ("--masked-lm-prob", masked_lm_prob, 0 < masked_lm_prob < 1, "above 0 and below 1"),
            ("--dupe-factor", dupe_factor, dupe_factor >= 1, "at least 1"),
            ("--max-predictions", max_predictions, max_predictions >= 1, "at least 1"),
            ("--eval-docs", eval_docs, eval_docs == AUTO or eval_docs >= 0, "0 or more, or auto")):
        if not ok:
            raise BertforgeError(f"{flag} {value}: must be {rule}")


def corpus_warnings(corpus, tokenizer, max_seq_length: int) -> dict:
    """Warnings about a corpus made into sentence pairs, logged, and their counts: documents of one sentence (a
    one-line document: each of its instances is a forced random next, since no sentence follows its first) and
    sentences so long that every instance keeps less than KEPT_SHARE of their tokens (a document on one line
    where one sentence a line was meant)."""
    one = int((np.diff(corpus.document_offsets) == 1).sum())
    if one and one >= ONE_SENTENCE_SHARE * corpus.num_documents:
        log.warning(f"{one:,} of {corpus.num_documents:,} documents are one sentence (one line): each of their "
                    "instances pairs that sentence with a random one from another document; --format lines reads "
                    "one sentence a line with a blank line between documents, --format raw splits running text "
                    "into sentences")
    room = max_seq_length - 3  # [CLS] A [SEP] B [SEP]
    lengths = np.diff(corpus.sentence_offsets)
    long = np.flatnonzero(lengths * KEPT_SHARE > room)
    if len(long):
        worst = long[np.argmax(lengths[long])]
        start = corpus.sentence_offsets[worst]
        begins = tokenizer.decode(np.asarray(corpus.tokens[start:start + 8]).tolist())
        log.warning(f"{len(long):,} of {corpus.num_sentences:,} sentences are over twice a row's {room} tokens "
                    f"(--max-length {max_seq_length}) and cut in every instance: the longest, {lengths[worst]:,} "
                    f"tokens, keeps {room / lengths[worst]:.0%} of them; it begins {begins!r} (one sentence a line, "
                    "or --format raw, which splits running text into sentences)")
    return {"one_sentence_documents": one, "long_sentences": int(len(long))}


def vocabulary_header(tokenizer) -> dict:
    """What the data's index records of its vocabulary: its hash, size, casing, token dtype, special ids."""
    return {"vocab_sha256": vocab_sha256(tokenizer.vocab), "vocab_size": tokenizer.vocab_size,
            "do_lower_case": tokenizer.do_lower_case, "token_dtype": np.dtype(token_dtype(tokenizer.vocab_size)).name,
            "special_token_ids": {"cls": tokenizer.cls_token_id, "sep": tokenizer.sep_token_id,
                                  "mask": tokenizer.mask_token_id, "pad": tokenizer.pad_token_id}}


def _write_split(corpus, documents, directory: Path, header: dict, continuation: np.ndarray, seed: list,
                 progress: bool) -> dict:
    """``header["dupe_factor"]`` passes of instances over ``documents``, as shards in ``directory``; statistics."""
    passes = header["dupe_factor"]
    writer = ShardWriter(directory)
    if header["whole_word_mask"]:
        np.save(directory / "continuation.npy", continuation, allow_pickle=False)
    counts = Counter()
    doc_tokens = corpus.sentence_offsets[corpus.document_offsets[documents + 1]] - \
        corpus.sentence_offsets[corpus.document_offsets[documents]]
    bar = tqdm(total=int(doc_tokens.sum()) * passes, unit="tok", unit_scale=True, desc=f"{header['split']} instances",
               disable=not progress)
    special_ids = header["special_token_ids"]
    with bar:
        for p in range(passes):
            rng = np.random.default_rng(seed + [p])
            if header["nsp"]:
                for spans in iter_spans(corpus, rng.permutation(documents), header["max_seq_length"],
                                        header["short_seq_prob"], Draws(rng), SHARD_INSTANCES, counts, bar):
                    writer.write(_make_shard(corpus, spans[rng.permutation(len(spans))], header, continuation, rng,
                                             counts))
            else:
                for ids, offsets in iter_full_rows(corpus, rng.permutation(documents), header["max_seq_length"],
                                                   special_ids["cls"], special_ids["sep"], SHARD_INSTANCES, counts,
                                                   bar):
                    writer.write(_make_row_shard(ids, offsets, header, continuation, rng, counts))
    writer.finish(header)
    return _split_stats(counts, len(documents), passes, len(writer.shards), header)


def _make_shard(corpus, spans, header: dict, continuation: np.ndarray, rng, counts: Counter) -> dict:
    """Truncate, assemble and (statically) mask a block of instances: the arrays of one shard."""
    L = header["max_seq_length"]
    special_ids = header["special_token_ids"]
    spans = truncate_pairs(spans, L - 3, rng)
    ids, offsets = assemble(corpus.tokens, spans, special_ids["cls"], special_ids["sep"])
    a_lengths = (spans.a_end - spans.a_start).astype(np.int32)
    counts.update(random_next=int(spans.is_random_next.sum()))
    return _masked_shard(ids, offsets, a_lengths, spans.is_random_next, header, continuation, rng, counts)


def _make_row_shard(ids, offsets, header: dict, continuation: np.ndarray, rng, counts: Counter) -> dict:
    """Shuffle and (statically) mask a block of single-segment rows (``--no-nsp``): the arrays of one shard."""
    perm = rng.permutation(len(offsets) - 1)
    lengths = np.diff(offsets)[perm]
    ids = ids[ragged_arange(offsets[:-1][perm], lengths)]
    return _masked_shard(ids, np.concatenate([[0], np.cumsum(lengths)]), (lengths - 2).astype(np.int32),
                         np.zeros(len(lengths), bool), header, continuation, rng, counts)


def _masked_shard(ids, offsets, a_lengths, nsp_labels, header: dict, continuation: np.ndarray, rng,
                  counts: Counter) -> dict:
    """The arrays of one shard from assembled rows, (statically) masked when the header says so."""
    L = header["max_seq_length"]
    special_ids = header["special_token_ids"]
    lengths = np.diff(offsets)
    specials = 3 * len(lengths) if header["nsp"] else len(lengths) + int((ids == special_ids["sep"]).sum())
    counts.update(instances=len(lengths), tokens=len(ids), non_special_tokens=len(ids) - specials)
    arrays = {"tokens": ids, "offsets": offsets, "a_lengths": a_lengths, "nsp_labels": nsp_labels.astype(np.int8)}
    if not header["masked"]:
        return arrays
    positions, labels, mlm_counts = [], [], []
    for lo in range(0, len(lengths), MASK_ROWS):
        hi = min(lo + MASK_ROWS, len(lengths))
        n, rows = lengths[lo:hi], slice(offsets[lo], offsets[hi])
        padded = to_padded(ids[rows], n, L, special_ids["pad"])
        whole_words = word_starts(padded, continuation) if header["whole_word_mask"] else None
        special = special_positions(n, a_lengths[lo:hi], L)
        if not header["nsp"]:  # the [SEP] between two documents in a row
            special |= padded == special_ids["sep"]
        masked, pos, lab = mask_batch(padded, special, rng, header["vocab_size"],
                                      special_ids["mask"], masked_lm_prob=header["masked_lm_prob"],
                                      max_predictions=header["max_predictions"], whole_word_starts=whole_words,
                                      lengths=n)
        valid = lab != -100
        new = masked[np.arange(hi - lo)[:, None], pos][valid]
        counts.update(masked=int(valid.sum()), mask_token=int((new == special_ids["mask"]).sum()),
                      kept=int((new == lab[valid]).sum()))
        ids[rows] = masked[np.arange(L) < n[:, None]]
        positions.append(pos[valid])
        labels.append(lab[valid])
        mlm_counts.append(valid.sum(1))
    arrays.update(mlm_positions=np.concatenate(positions).astype(np.uint16),
                  mlm_labels=np.concatenate(labels).astype(ids.dtype),
                  mlm_offsets=np.concatenate([[0], np.cumsum(np.concatenate(mlm_counts))]))
    return arrays


def _split_stats(c: Counter, documents: int, passes: int, shards: int, header: dict) -> dict:
    stats = {"documents": documents, "passes": passes, "shards": shards, "instances": c["instances"],
             "tokens": c["tokens"]}
    if not header["nsp"]:
        stats.update(fill_share=c["tokens"] / max(c["instances"] * header["max_seq_length"], 1),
                     document_joins=c["document_joins"], split_sentences=c["split_sentences"])
    else:
        stats.update(
            random_next_share=c["random_next"] / max(c["instances"], 1),
            # Google forces random next for one-sentence chunks and flips a coin for the others.
            forced_random_next_share=c["forced_random_next"] / max(c["instances"], 1),
            random_next_share_of_coin_flips=(c["random_next"] - c["forced_random_next"]) /
            max(c["instances"] - c["forced_random_next"], 1),
            short_target_share_of_documents=c["short_target_documents"] / max(c["documents"], 1))
    if c["masked"]:
        stats.update(masked_share_of_non_special=c["masked"] / c["non_special_tokens"],
                     mask_token_share=c["mask_token"] / c["masked"], kept_share=c["kept"] / c["masked"],
                     random_token_share=(c["masked"] - c["mask_token"] - c["kept"]) / c["masked"])
    return stats


def format_report(stats: dict) -> str:
    """The statistics as a few human-readable lines."""
    c = stats["corpus"]
    lines = [f"corpus: {c['files']:,} files ({c['formats']['lines']} lines format, {c['formats']['raw']} raw text, "
             f"{c['empty_files']} empty, {c['skipped_files']} skipped: not .txt/.raw/.text), "
             f"{c['documents']:,} documents, {c['sentences']:,} sentences, {c['tokens']:,} tokens; "
             f"{c['eval_documents']} documents held out" + (
                 f" (--eval-docs auto holds out none of fewer than {AUTO_MIN_DOCS} documents: pre-training on this "
                 "data reports no held-out figures; give --eval-docs N to have them)"
                 if c.get("eval_docs") == AUTO and not c["eval_documents"] else "")]
    for split in ("train", "eval"):
        if split in stats:
            s = stats[split]
            made = (f"{split}: {s['documents']:,} documents x {s['passes']} passes -> {s['instances']:,} instances, "
                    f"{s['tokens']:,} tokens in {s['shards']} shards; ")
            if "fill_share" in s:
                lines.append(made + f"single segments, rows {s['fill_share']:.1%} full, {s['document_joins']:,} "
                             f"document joins, {s['split_sentences']:,} sentences longer than a row split")
            else:
                lines.append(made + f"random next {s['random_next_share']:.1%} "
                             f"({s['forced_random_next_share']:.1%} forced by one-sentence chunks, "
                             f"{s['random_next_share_of_coin_flips']:.1%} of the others), "
                             f"short target {s['short_target_share_of_documents']:.1%} of documents")
            if "masked_share_of_non_special" in s:
                lines.append(
                    f"{split} masking: {s['masked_share_of_non_special']:.2%} of non-special tokens; "
                    f"[MASK] {s['mask_token_share']:.1%} / random {s['random_token_share']:.1%} / "
                    f"kept {s['kept_share']:.1%}")
    return "\n".join(lines)


AUTO = "auto"  # --eval-docs default: AUTO_SHARE of the documents, at least 1, from AUTO_MIN_DOCS documents on
AUTO_SHARE, AUTO_MIN_DOCS = 0.01, 10


def held_out_documents(eval_docs: float | str, n_docs: int) -> int:
    """How many documents --eval-docs holds out of `n_docs`."""
    if eval_docs == AUTO:
        return max(1, int(np.ceil(AUTO_SHARE * n_docs))) if n_docs >= AUTO_MIN_DOCS else 0
    return int(eval_docs) if eval_docs >= 1 else int(np.ceil(eval_docs * n_docs))


