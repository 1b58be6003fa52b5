"""Pre-training recipes: the paper's, and a budget one for small compute, as presets of `bertforge pretrain` flags.

A recipe fills in the flags the user did not give; an explicit flag always wins. `paper` is the paper's setup
(spec section 6) as bertforge has always run it. `budget` is what the budget literature (Cramming, MosaicBERT,
Izsak et al., Wettig et al.) converges on and what measured best per CPU-minute here (BENCHMARKS.md, "A budget
recipe"): no NSP, 30% dynamic masking, no dropout, a higher peak rate on a one-cycle schedule.
"""

import argparse
import re

RECIPES = {
    "paper": {"objective": None, "mask_prob": None, "dropout": None, "lr": 1e-4, "schedule": "linear",
              "warmup": 0.05, "batch_size": 64},
    "budget": {"objective": "mlm", "mask_prob": 0.3, "dropout": 0.0, "lr": 2e-3, "schedule": "one-cycle",
               "warmup": 0.1, "batch_size": 16},
}  # None: what the data and the model config hold (objective, masking rate, dropout)

OBJECTIVES = ("mlm+nsp", "mlm", "ltr")
UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}
DURATION = re.compile(r"(\d+(?:\.\d*)?)([smhd])")


def parse_duration(text: str) -> float:
    """Seconds in '90s', '45m', '4h', '1h30m' or a plain number of seconds; argparse type of --time-budget."""
    t = text.strip().lower()
    try:
        seconds = float(t)
    except ValueError:
        parts = DURATION.findall(t)
        seconds = sum(float(n) * UNITS[u] for n, u in parts) if "".join(n + u for n, u in parts) == t else -1
    if not seconds > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a positive duration such as 90s, 45m, 4h or 1h30m")
    return seconds


def probability(text: str) -> float:
    """A number strictly between 0 and 1; argparse type of --mask-prob."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected a number strictly between 0 and 1")
    return value


def resolve(recipe: str, explicit: dict) -> dict:
    """The recipe's settings with the explicitly given ones (not None) on top."""
    return {**RECIPES[recipe], **{k: v for k, v in explicit.items() if v is not None and k in RECIPES[recipe]}}


def add_recipe_arguments(p) -> None:
    """The flags a recipe sets (default None: the recipe decides) and the time budget."""
    paper, budget = RECIPES["paper"], RECIPES["budget"]

    def both(key):
        return f"(paper: {paper[key]}, budget: {budget[key]})"

    p.add_argument("--recipe", choices=tuple(RECIPES), default="paper",
                   help="preset for the flags below that are not given (default: paper); see README")
    p.add_argument("--objective", choices=OBJECTIVES,
                   help="mlm+nsp: masked LM + next sentence (needs sentence pairs); mlm: masked LM only; ltr: "
                        "left-to-right LM, causal attention, saved as is_decoder (needs unmasked data) "
                        "(paper: what the data holds, budget: mlm)")
    p.add_argument("--mask-prob", type=probability, metavar="P",
                   help="mask this share of the tokens afresh each time a row is drawn, 80/10/10 (needs data made "
                        "with --no-mask) (paper: the data's rate, 0.15, budget: 0.3)")
    p.add_argument("--dropout", type=float, help="override the config's dropout (paper: the config's 0.1, budget: 0)")
    p.add_argument("--lr", type=float, help=f"peak learning rate {both('lr')}")
    p.add_argument("--schedule", choices=("linear", "one-cycle"),
                   help="linear: warm-up from 0 then linear decay to 0; one-cycle: cosine warm-up from lr/25 then "
                        f"cosine decay to 0 {both('schedule')}")
    p.add_argument("--warmup", type=float,
                   help=f"fraction of the steps or time budget (<1), or a step count {both('warmup')}")
    p.add_argument("--batch-size", type=int, help=f"global batch, all processes together {both('batch_size')}")
    p.add_argument("--time-budget", type=parse_duration, metavar="DURATION",
                   help="train for this much time (90s, 45m, 4h): the schedule follows training time and reaches 0 "
                        "when it is spent; --resume counts the time already spent; evaluation and checkpoint "
                        "time are not counted; --steps, if given, still caps the run (default: none, --steps)")
