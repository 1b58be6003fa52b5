"""Predictions of a fine-tuned model: a task's split in its submission format, or your own text as JSON lines.

Your own examples are --text values and the lines of an --input file. A --text value or a line of a .txt
file holds the task family's `text_fields` separated by tabs (a field of several texts, such as multiple
choice's choices, takes the rest of the line); a line of a .jsonl file is an object holding them by name. Each
prediction is one JSON object: the example as "input", then the family's description of the model's output
(see each family's `describe`).
"""

import json
import sys
from pathlib import Path

from ..core.errors import BertforgeError, where
from .evaluate import add_model_run_arguments, load_finetuned, predict_split
from ..core.io import check_output, parse_json, read_text, write_text_atomic
from ..tasks import make_family


def parse_line(line: str, fields: dict[str, type], location: str) -> dict:
    """Tab-separated fields; a last field that holds several texts takes the rest of the line."""
    values = [value.strip() for value in line.split("\t")]
    names = list(fields)
    if fields[names[-1]] is list:
        values = [*values[:len(names) - 1], values[len(names) - 1:]]
    if len(values) != len(names):
        raise BertforgeError(f"{location}: expected {len(names)} tab-separated field(s) ({', '.join(names)}), "
                             f"found {len(values)}")
    return dict(zip(names, values))


def check_fields(record: dict, fields: dict[str, type], location: str) -> dict:
    for name, kind in fields.items():
        if name not in record:
            raise BertforgeError(f"{location}: missing field {name!r}")
        value = record[name]
        if kind is list:
            if not (isinstance(value, list) and len(value) >= 2 and all(map(is_text, value))):
                raise BertforgeError(f"{location}: {name!r} must be a list of at least 2 non-empty texts")
        elif not is_text(value):
            raise BertforgeError(f"{location}: {name!r} must be a non-empty text")
    return record


def is_text(value) -> bool:
    return isinstance(value, str) and bool(value.strip())


def read_examples(fields: dict[str, type], texts: list[str], path=None) -> list[dict]:
    """The examples of the --text values, then of the file's lines, as records holding `fields`."""
    lines = [("--text", n, text, False) for n, text in enumerate(texts, 1)]
    if path is not None:
        file_lines = read_text(path, "utf-8-sig").split("\n")
        if file_lines[-1] == "":
            file_lines.pop()
        is_json = Path(path).suffix in (".jsonl", ".json")
        lines += [(path, n, line.rstrip("\r"), is_json) for n, line in enumerate(file_lines, 1)]
    if not lines:
        raise BertforgeError(f"{path}: no examples (empty file)")
    records = []
    for source, n, line, is_json in lines:
        location = where(source, n)
        if not line.strip():
            raise BertforgeError(f"{location}: empty line")
        record = parse_json(line, source, n) if is_json else parse_line(line, fields, location)
        if not isinstance(record, dict):
            raise BertforgeError(f"{location}: expected a JSON object")
        records.append(check_fields(record, fields, location))
    return records


def predict_examples(family, tokenizer, model, records: list[dict], batch_size: int = 64, bf16=False,
                     progress: bool = True) -> list[dict]:
    """The model's prediction for each record (holding the family's text fields), with the record as "input"."""
    split = family.encode("text", [family.example(r, str(i)) for i, r in enumerate(records)], tokenizer)
    outputs = predict_split(family, model, split, batch_size, tokenizer.pad_token_id, bf16,
                            "predict" if progress else None)
    return [{"input": r, **described} for r, described in zip(records, family.describe(split, outputs))]


def add_predict_arguments(p):
    add_model_run_arguments(p, "the task's data: predict its test split (or --split) in the submission format",
                            "with --data: predict only the first N examples")
    p.add_argument("--text", action="append", default=[],
                   help="an example of your own, its fields separated by tabs (repeat for more)")
    p.add_argument("--input", help="examples of your own: a .txt file (one a line, fields tab-separated) or .jsonl")
    p.add_argument("--out", help="folder for the submission file, or for predictions.jsonl (default: stdout)")
    p.add_argument("--split", help="with --data: the split to predict (default test)")


def run_predict(args) -> int:
    if args.out is not None:
        check_output(args.out, "--out", inputs=[p for p in (args.model, args.data, args.input) if p])
    own = bool(args.text or args.input)
    if own == any(source is not None for source in (args.data, args.test, args.dataset)):
        raise BertforgeError("give either --data (a task's split; --test FILE or --dataset for your own data's) or "
                             "--text/--input (your own examples)")
    if own:
        return predict_own(args)
    if args.out is None:
        raise BertforgeError("--data, --test and --dataset need --out, the folder for the submission file")
    family, tokenizer, model, _ = load_finetuned(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in [args.split] if args.split else ["test"]:
        split = family.read(name, tokenizer, args.max_eval_examples)
        outputs = predict_split(family, model, split, args.batch_size, tokenizer.pad_token_id, args.bf16,
                                f"predict {name}" if args.progress else None)
        print(family.write(split, outputs, out))
    return 0


def predict_own(args) -> int:
    records = read_examples(make_family(args.task, options=vars(args)).text_fields, args.text, args.input)
    family, tokenizer, model, _ = load_finetuned(args, reading=False)
    predictions = predict_examples(family, tokenizer, model, records, args.batch_size, args.bf16, args.progress)
    lines = json_lines(predictions)
    if args.out is None:
        sys.stdout.write(lines)
    else:
        path = Path(args.out) / "predictions.jsonl"
        write_text_atomic(path, lines)
        print(path)
    return 0


def json_lines(predictions: list[dict]) -> str:
    """One JSON object a line. A prediction holding NaN or infinity (a broken model's) is an error naming its
    example, never a line that is not JSON."""
    lines = []
    for n, prediction in enumerate(predictions, 1):
        try:
            lines.append(json.dumps(prediction, ensure_ascii=False, allow_nan=False) + "\n")
        except ValueError:
            raise BertforgeError(f"example {n}: the model's output is not a finite number (NaN or infinity), which "
                                 "JSON cannot carry; are its weights broken?") from None
    return "".join(lines)
