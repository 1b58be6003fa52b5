"""Entities from per-token tag scores: the token-classification pipeline's grouping, as transformers does it.

Strategies: `none` (one entry per token that is not O), `simple` (adjacent tokens of one type merged, a B-
tag starting a new entity), and word-level ones that first give every word one tag, then merge as simple:
`first` (the word's first piece decides), `max` (its most confident piece), `average` (the mean of its pieces'
scores). A piece is a sub-word when its text in the sentence is shorter than the token (the `##` prefix).
"""

import numpy as np

STRATEGIES = ("none", "simple", "first", "max", "average")


class Entities(list):
    """One text's entities: a list, as transformers' pipeline returns them, that also tells whether the text was
    cut (`truncated`: truncation was asked for and the text was longer than a window; its tokens past the first
    window were not tagged)."""

    def __init__(self, found=(), truncated: bool = False):
        super().__init__(found)
        self.truncated = truncated


def softmax(logits: np.ndarray) -> np.ndarray:
    exp = np.exp(logits - logits.max(-1, keepdims=True))
    return exp / exp.sum(-1, keepdims=True)


def tag_parts(label: str) -> tuple[str, str]:
    """("B" or "I", entity type); a label without a B-/I- prefix continues (I) its own type."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def token_entries(text: str, tokens: list[str], offsets, special, scores: np.ndarray, unk_token: str) -> list[dict]:
    """One entry per ordinary token: its text, scores, character span and whether it continues a word."""
    entries = []
    for index, (token, (start, end), is_special) in enumerate(zip(tokens, offsets, special)):
        if is_special:
            continue
        piece = text[start:end]
        unknown = token == unk_token
        entries.append({"word": piece if unknown else token, "scores": scores[index], "start": int(start),
                        "end": int(end), "index": index, "is_subword": not unknown and len(token) != len(piece)})
    return entries


def word_entries(entries: list[dict], strategy: str, labels: dict[int, str], join) -> list[dict]:
    """The pieces of each word merged into one entry, tagged by the strategy."""
    words, group = [], []
    for entry in entries + [None]:
        if group and (entry is None or not entry["is_subword"]):
            if strategy == "first":
                scores = group[0]["scores"]
            elif strategy == "max":
                scores = max(group, key=lambda e: e["scores"].max())["scores"]
            else:
                scores = np.nanmean(np.stack([e["scores"] for e in group]), axis=0)
            best = int(scores.argmax())
            words.append({"entity": labels[best], "score": float(scores[best]),
                          "word": join([e["word"] for e in group]),
                          "start": group[0]["start"], "end": group[-1]["end"]})
            group = []
        if entry is not None:
            group.append(entry)
    return words


def merge(entries: list[dict], join) -> list[dict]:
    """Adjacent entries of one type as one entity (a B- tag starts a new one); its score the mean."""
    groups = []
    for entry in entries:
        bi, kind = tag_parts(entry["entity"])
        if groups and bi != "B" and tag_parts(groups[-1][-1]["entity"])[1] == kind:
            groups[-1].append(entry)
        else:
            groups.append([entry])
    return [{"entity_group": g[0]["entity"].split("-", 1)[-1],
             "score": float(np.mean([e["score"] for e in g])), "word": join([e["word"] for e in g]),
             "start": g[0]["start"], "end": g[-1]["end"]} for g in groups]


def entities(entries: list[dict], strategy: str, labels: dict[int, str], join, ignore=("O",)) -> list[dict]:
    """The entities of one text's token entries (see token_entries), without those tagged `ignore`.
    join(tokens) -> text glues word pieces (the tokenizer's decoder)."""
    if strategy in ("none", "simple"):
        tagged = []
        for e in entries:
            best = int(e["scores"].argmax())
            tagged.append({"entity": labels[best], "score": float(e["scores"][best]), "index": e["index"],
                           "word": e["word"], "start": e["start"], "end": e["end"]})
    else:
        tagged = word_entries(entries, strategy, labels, join)
    found = tagged if strategy == "none" else merge(tagged, join)
    key = "entity" if strategy == "none" else "entity_group"
    return [e for e in found if e[key] not in ignore]
