"""Pre-training recipes on the command line: `--recipe` and the pre-training choices that are not training-loop
options, and `resolve`, a recipe's settings (training/recipes.py's PRETRAIN: `paper`, the paper's setup as bertforge
has always run it; `budget`, what the budget literature converges on and what measured best per CPU-minute here)
for a model's width on a device. A recipe fills in the flags the user did not give; an explicit flag always wins.
"""

from .objectives import OBJECTIVES
from ..core.flags import open_fraction, probability
from ..training.recipes import BUDGET_LR, PRETRAIN, Facts, choose


def resolve(recipe: str, explicit: dict, hidden_size: int, device) -> dict:
    """The recipe's settings for a model of this width on this device (a name or a torch.device), with the
    explicitly given ones (not None) on top."""
    from ..inference.runtime import native_bf16  # here: the commands' --help does not load torch

    given = {k: explicit.get(k) for k in PRETRAIN[recipe]}
    return choose("pretrain", recipe, given, Facts(hidden_size=hidden_size, native_bf16=native_bf16(device))).settings


def add_recipe_arguments(p) -> None:
    """The recipe and the pre-training choices that are not training-loop options."""
    p.add_argument("--recipe", choices=tuple(PRETRAIN), default="paper",
                   help="preset for the flags it sets that are not given (default: paper); see README")
    p.add_argument("--objective", choices=tuple(OBJECTIVES),
                   help="; ".join(f"{o.name}: {o.help}" for o in OBJECTIVES.values()) +
                        " (paper: what the data holds, budget: mlm)")
    p.add_argument("--mask-prob", type=open_fraction, metavar="P",
                   help="mask this share of the tokens afresh each time a row is drawn, 80/10/10 (needs data made "
                        "with --no-mask) (paper: the data's rate, 0.15, budget: 0.3)")
    p.add_argument("--dropout", type=probability,
                   help="override the config's dropout (paper: the config's 0.1, budget: 0)")
    p.add_argument("--output-bias", choices=("zero", "unigram"),
                   help="a fresh model's initial masked-LM output bias: zero (the paper's), or the log frequencies "
                        "of the training tokens, so that training starts from predicting token frequencies "
                        "(paper: zero, budget: unigram)")


def recipe_notes() -> dict:
    """For the training flags a recipe sets: what each recipe gives them (their help's ending)."""
    notes = {key: f"(paper: {PRETRAIN['paper'][key]}, budget: {PRETRAIN['budget'][key]})"
             for key in ("schedule", "warmup", "batch_size")}
    notes["bf16"] = "(paper: off, budget: on where the device has bf16 matrix units: CUDA, AMX or AVX512-BF16 CPUs)"
    (narrow, narrow_lr), (_, wide_lr) = BUDGET_LR
    notes["lr"] = (f"(paper: {PRETRAIN['paper']['lr']}, budget: {narrow_lr} up to hidden size {narrow} (tiny), "
                   f"{wide_lr} above)")
    return notes
