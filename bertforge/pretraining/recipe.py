"""Pre-training recipes: the paper's, and a budget one for small compute, as presets of `bertforge pretrain` flags.

A recipe fills in the flags the user did not give; an explicit flag always wins. `paper` is the paper's setup
(spec section 6) as bertforge has always run it. `budget` is what the budget literature (Cramming, MosaicBERT,
Izsak et al., Wettig et al.) converges on and what measured best per CPU-minute here (BENCHMARKS.md, "A budget
recipe"): no NSP, 30% dynamic masking, no dropout, a higher peak rate on a one-cycle schedule, the rate chosen by
the model's width (BUDGET_LR), the output bias started at the tokens' log frequencies, bf16 autocast where the
device computes it in hardware.
"""

from .objectives import OBJECTIVES
from ..core.flags import open_fraction, probability

# The budget recipe's peak rate by hidden size, (largest width, rate), measured at batch 16: BERT-Tiny (128) is
# best at 2e-3; BERT-Mini (256) learns nothing but token frequencies at 2e-3 and 1e-3 and learns at 5e-4
# (BENCHMARKS.md, issue 11). Wider models get Mini's rate, the highest measured to work for them.
BUDGET_LR = ((128, 2e-3), (None, 5e-4))
NATIVE = "where native"  # bf16 autocast on a device with bf16 matrix units (runtime.native_bf16), else fp32

RECIPES = {
    "paper": {"objective": None, "mask_prob": None, "dropout": None, "lr": 1e-4, "schedule": "linear",
              "warmup": 0.05, "batch_size": 64, "output_bias": "zero", "bf16": False},
    "budget": {"objective": "mlm", "mask_prob": 0.3, "dropout": 0.0, "lr": BUDGET_LR, "schedule": "one-cycle",
               "warmup": 0.1, "batch_size": 16, "output_bias": "unigram", "bf16": NATIVE},
}  # None: what the data and the model config hold (objective, masking rate, dropout)



def resolve(recipe: str, explicit: dict, hidden_size: int, device) -> dict:
    """The recipe's settings for a model of this width on this device (a name or a torch.device), with the
    explicitly given ones (not None) on top."""
    settings = {**RECIPES[recipe], **{k: v for k, v in explicit.items() if v is not None and k in RECIPES[recipe]}}
    if settings["lr"] is BUDGET_LR:
        settings["lr"] = next(lr for width, lr in BUDGET_LR if width is None or hidden_size <= width)
    if settings["bf16"] == NATIVE:
        from ..inference.runtime import native_bf16  # here: the commands' --help does not load torch

        settings["bf16"] = native_bf16(device)
    return settings


def add_recipe_arguments(p) -> None:
    """The recipe and the pre-training choices that are not training-loop options."""
    p.add_argument("--recipe", choices=tuple(RECIPES), default="paper",
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
    notes = {key: f"(paper: {RECIPES['paper'][key]}, budget: {RECIPES['budget'][key]})"
             for key in ("schedule", "warmup", "batch_size")}
    notes["bf16"] = "(paper: off, budget: on where the device has bf16 matrix units: CUDA, AMX or AVX512-BF16 CPUs)"
    (narrow, narrow_lr), (_, wide_lr) = BUDGET_LR
    notes["lr"] = (f"(paper: {RECIPES['paper']['lr']}, budget: {narrow_lr} up to hidden size {narrow} (tiny), "
                   f"{wide_lr} above)")
    return notes
