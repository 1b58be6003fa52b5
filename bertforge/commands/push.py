"""`bertforge push FOLDER org/name`: a model on the Hugging Face Hub, with its model card.

FOLDER is a model folder, or a run folder, whose best model (best/, else final/) is pushed. The card (README.md) is
made from the model and the run it came from: front matter that the Hub reads (the base model, the licence, tags,
the pipeline, the data set, the library), and a body a person reads: the model folder's own README.md where it has
one (fine-tuning writes the task, the data, the command and the metrics there), else the run's command and metrics;
then the base model with the commit the run read, where the body does not say it.
"""

import re
import shlex
from pathlib import Path

from ..core.errors import BertforgeError

RESULTS = "eval_results.json"
# the Hub's pipeline tags among the tasks of bertforge's heads and sentence-transformers folders (the Hub has no
# multiple-choice pipeline)
PIPELINE_TAGS = ("feature-extraction", "fill-mask", "text-classification", "token-classification",
                 "question-answering", "sentence-similarity")


def add_push_arguments(parser):
    parser.add_argument("folder", type=Path, metavar="FOLDER",
                        help="a model folder, or a run folder (its best/ model, else its final/ one)")
    parser.add_argument("repo_id", metavar="org/name", help="the Hub repository, made where missing")
    parser.add_argument("--private", action="store_true", help="make the repository private (where it is made)")
    parser.add_argument("--branch", help="push to this branch, made from main where missing (default: main)")
    parser.add_argument("--license", help="the model's licence, by the Hub's name for it (apache-2.0, mit, ...)")


def pushed_folders(folder: Path) -> tuple[Path, Path | None]:
    """The model folder to push, and the run folder it came from (None where it came from none)."""
    from ..training.resume import ARGS_FILE

    if (folder / "config.json").is_file():
        return folder, folder.parent if (folder.parent / ARGS_FILE).is_file() else None
    if (folder / ARGS_FILE).is_file():
        for model in (folder / "best", folder / "final"):
            if (model / "config.json").is_file():
                return model, folder
        raise BertforgeError(f"{folder}: a run folder without a model (best/ or final/) to push")
    raise BertforgeError(f"{folder}: neither a model folder (config.json) nor a run folder ({ARGS_FILE})")


def model_card(model: Path, run: Path | None, repo_id: str, license: str | None) -> str:
    """README.md for the Hub (see the module's docstring). The base model is what the run records (`base_model`:
    `core.hub.hub_origin` of the folder it started from), or the Hub snapshot its `model` names."""
    from huggingface_hub import ModelCardData

    from ..core.hub import hub_origin
    from ..core.io import read_json, read_model_json, read_model_text
    from ..core.version import __version__
    from ..model.architectures.registry import head_of
    from ..model.architectures.heads import HEADS
    from ..training.resume import ARGS_FILE

    extra = (read_json(run / ARGS_FILE).get("extra") or {}) if run else {}
    results = read_json(run / RESULTS) if run and (run / RESULTS).is_file() else {}
    origin = extra.get("base_model") or hub_origin(extra.get("model"))
    sentences = (model / "modules.json").is_file()
    architectures = read_model_json(model / "config.json", model).get("architectures") or []
    head = next(filter(None, map(head_of, architectures)), None)
    pipeline = "sentence-similarity" if sentences else HEADS[head].task if head else None
    dataset = (extra.get("family_options") or {}).get("dataset")
    data = ModelCardData(
        base_model=origin and origin["repo_id"], license=license, datasets=[dataset.split(":")[0]] if dataset else None,
        library_name="sentence-transformers" if sentences else "transformers",
        pipeline_tag=pipeline if pipeline in PIPELINE_TAGS else None,
        tags=["bertforge", *filter(None, [extra.get("task")])])
    readme = model / "README.md"
    if readme.is_file():
        body = re.sub(r"\A---\n.*?\n---\n+", "", read_model_text(readme, model), flags=re.S)
    else:
        command = extra.get("command")
        scores = "".join(f"| {k} | {v:.4f} |\n" for k, v in results.items()
                         if isinstance(v, float) and k != "wall_time_s")
        body = (f"# {repo_id}\n\nPushed with bertforge {__version__}.\n"
                + (f"\n- command: `{shlex.join(command)}`\n" if command else "")
                + (f"\n| metric | value |\n|---|---|\n{scores}" if scores else ""))
    if origin and origin["commit"] not in body:  # fine-tuning's own card names it already
        body = f"{body.rstrip()}\n\nBase model: `{origin['repo_id']}`, commit `{origin['commit']}`.\n"
    return f"---\n{data.to_yaml()}\n---\n\n{body}"


def run_push(args):
    from ..core.hub import push
    from ..training.run_folder import COMPLETE

    model, run = pushed_folders(args.folder)
    url = push(model, args.repo_id, private=args.private, branch=args.branch,
               card=model_card(model, run, args.repo_id, args.license), leave_out=(COMPLETE,))
    print(f"pushed {model} to {args.repo_id}{f' ({args.branch})' if args.branch else ''}: {url}")
    return 0
