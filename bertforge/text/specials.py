"""The special tokens a tokenizer folder names in tokenizer_config.json and special_tokens_map.json: those other
than BERT's (`own_specials`: a WordPiece vocabulary laid out otherwise, as MPNet's), those a tokenizer.json of
another kind runs with (`named_specials`, for text.tokenizer.PipelineTokenizer), and the pad token a folder that
names none takes from its model (`model_pad_token`)."""

from pathlib import Path

from ..core.errors import BertforgeError
from ..core.io import has_model_file, read_model_json
from .vocab import SPECIAL_NAMES


def own_specials(folder: Path) -> list[str]:
    """The special tokens a tokenizer folder (tokenizer_config.json, special_tokens_map.json) names other than
    BERT's, as "cls_token '<s>'": a WordPiece vocabulary laid out otherwise than [CLS] A [SEP] B [SEP] (MPNet's),
    which its tokenizer.json's post-processor lays out."""
    named = {}
    for name in ("special_tokens_map.json", "tokenizer_config.json"):
        if has_model_file(folder / name):
            given = read_model_json(folder / name)
            named.update(given if isinstance(given, dict) else {})
    own = []
    for name, bert in SPECIAL_NAMES.items():
        token = named.get(name)
        token = token.get("content") if isinstance(token, dict) else token
        if token is not None and token != bert:
            own.append(f"{name} {token!r:.40}")
    return own


def model_pad_token(folder: Path, vocab: dict[str, int]) -> str:
    """The pad token of a tokenizer whose files name none: the one of the model's config.json pad_token_id."""
    config_file = folder / "config.json"
    pad_id = read_model_json(config_file).get("pad_token_id") if has_model_file(config_file) else None
    if pad_id is None:
        raise BertforgeError(f"{folder} has no pad token: tokenizer files name none and config.json has no "
                             "pad_token_id (name one as pad_token in tokenizer_config.json)")
    token = next((t for t, i in vocab.items() if i == pad_id), None) if type(pad_id) is int else None
    if token is None:
        raise BertforgeError(f"{config_file}: pad_token_id {pad_id!r} is not an id of tokenizer.json's vocabulary")
    return token


def named_specials(json_file: Path, config: dict, vocab: dict[str, int]) -> dict[str, str | None]:
    """The special tokens by attribute name that the folder of `json_file` names, tokenizer_config.json's (`config`)
    over special_tokens_map.json's, each in `vocab`; those inputs are laid out with ([CLS]'s and [SEP]'s roles)
    required, and the pad token, where none is named, the model's (model_pad_token)."""
    folder = json_file.parent
    config_file = folder / "tokenizer_config.json"
    map_file = folder / "special_tokens_map.json"
    given = {**(read_model_json(map_file) if has_model_file(map_file) else {}), **config}
    specials = {}
    for name in SPECIAL_NAMES:
        token = given.get(name)
        token = token.get("content") if isinstance(token, dict) else token
        if token is not None and token not in vocab:
            raise BertforgeError(f"{config_file}: {name} {token!r} is not in {json_file.name}'s vocabulary")
        specials[name] = token
    for name in ("cls_token", "sep_token"):
        if specials[name] is None:
            raise BertforgeError(f"{config_file}: no {name} given, which inputs are laid out with")
    if specials["pad_token"] is None:
        specials["pad_token"] = model_pad_token(folder, vocab)
    return specials
