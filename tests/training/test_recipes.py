"""The recipes (bertforge/training/recipes.py): each job's defaults in one table, and `choose`, the one function that
completes a run's settings from what is known of it, with the reason for each choice; a setting given always wins."""

import math

import pytest

from bertforge.core.errors import BertforgeError
from bertforge.training.recipes import (
    DEFAULTS, DISTILL, FIXED, RECIPES, Facts, choose, distill_epochs, finetune_settings, matched_epochs
)

AUGMENT_ROWS, MAX_AUTO_AUGMENT = DISTILL["augment_rows"], DISTILL["max_auto_augment"]
SMALL_AUGMENT, SMALL_STUDENT = DISTILL["small_augment"], DISTILL["small_student"]
MIN_STEPS, MAX_EPOCHS = DISTILL["min_steps"], DISTILL["max_epochs"]
TRAINED_LR, RANDOM_LR = DISTILL["trained_lr"], DISTILL["random_lr"]


# ---------------------------------------------------------------------------------------------------------
# Fine-tuning: by the number of training examples


@pytest.mark.parametrize("recipe, examples, expected", [
    ("adaptive", 500, {"lr": 1e-4, "batch_size": 16, "epochs": 10.0}),  # 32 steps an epoch: 300 take 10
    ("adaptive", 100, {"lr": 1e-4, "batch_size": 16, "epochs": 20.0}),  # at most 20 epochs
    ("adaptive", 3168, {"lr": 1e-4, "batch_size": 16, "epochs": 2.0}),  # the paper's: 297 steps
    ("adaptive", 3200, {"lr": 5e-5, "batch_size": 8, "epochs": 3.0, "warmup": 0.0, "weight_decay": 0.0}),  # Trainer's
    ("adaptive", 4000, {"lr": 5e-5, "batch_size": 8, "epochs": 3.0, "warmup": 0.0, "weight_decay": 0.0}),
    ("adaptive", 15968, {"lr": 5e-5, "batch_size": 8, "epochs": 3.0, "warmup": 0.0, "weight_decay": 0.0}),
    ("adaptive", 16000, {"lr": 5e-5, "batch_size": 32, "epochs": 3.0}),  # the paper's at 5e-5: 1,500 steps
    ("adaptive", 67349, {"lr": 5e-5, "batch_size": 32, "epochs": 3.0}),
    ("paper", 500, {"lr": 2e-5, "batch_size": 32, "epochs": 3.0}),
])
def test_the_recipe_s_settings_by_the_number_of_training_examples(recipe, examples, expected):
    settings, why = finetune_settings(recipe, examples)
    patience = 3 if settings["epochs"] > 5 else 0  # early stopping where the recipe runs more than a few epochs
    assert settings == {"warmup": 0.1, "weight_decay": 0.01, "patience": patience, **expected} and why
    assert ("stopping after 3 without a better dev score" in why) == bool(patience)


def test_a_setting_given_wins_and_only_what_is_unsaid_has_a_reason():
    unsaid = dict.fromkeys(("lr", "batch_size", "warmup", "weight_decay", "patience", "epochs"))
    choice = choose("finetune", "adaptive", {**unsaid, "lr": 3e-4}, Facts(examples=40))
    assert choice.settings["lr"] == 3e-4 and choice.settings["batch_size"] == 16
    assert list(choice.why) == ["batch_size", "warmup", "weight_decay", "patience", "epochs"]
    assert choose("finetune", "adaptive", unsaid, Facts(examples=40)) == \
        choose("finetune", "adaptive", unsaid, Facts(examples=40))  # a pure function of its arguments
    with pytest.raises(BertforgeError, match="--recipe must be one of adaptive, paper, not 'fixed'"):
        choose("finetune", "fixed", unsaid, Facts(examples=40))


def test_one_table_holds_every_jobs_defaults_and_recipes():
    assert set(DEFAULTS) == set(RECIPES) == {"pretrain", "finetune", "distill", "embeddings"}
    assert DEFAULTS["distill"]["lr"] is None and DEFAULTS["distill"]["patience"] is None  # the recipe's
    assert DEFAULTS["embeddings"]["patience"] == 0  # every text teaches: no stopping


# ---------------------------------------------------------------------------------------------------------
# Distillation: what --lr, --augment and --epochs not given are, at the boundaries of its rules


def adaptive(examples, start="cut", augmentable=True, share=1.0, recipe="adaptive", **given):
    """A distillation's lr and variants (before its rows are made), and why."""
    choice = choose("distill", recipe, {"lr": None, "augment": None, "batch_size": 32, **given},
                    Facts(examples=examples, start=start, augmentable=augmentable, share=share))
    return {k: choice.settings[k] for k in ("lr", "augment")}, choice.reasons()


@pytest.mark.parametrize("examples, variants", [
    (AUGMENT_ROWS, 0), (67_349, 0), (AUGMENT_ROWS - 1, 1), (AUGMENT_ROWS // 2, 1), (AUGMENT_ROWS // 2 - 1, 2),
    (AUGMENT_ROWS // (MAX_AUTO_AUGMENT + 1) + 1, MAX_AUTO_AUGMENT),
    (AUGMENT_ROWS // (MAX_AUTO_AUGMENT + 1), MAX_AUTO_AUGMENT), (1, MAX_AUTO_AUGMENT)])
def test_text_tasks_under_the_row_count_get_variants_enough_to_reach_it(examples, variants):
    chosen, why = adaptive(examples)
    assert chosen["augment"] == variants
    assert examples * (variants + 1) >= AUGMENT_ROWS or variants == MAX_AUTO_AUGMENT  # enough rows, or the cap
    assert variants == 0 or examples * variants < AUGMENT_ROWS  # and no more than it takes
    assert (f"--augment {variants}" in why) == bool(variants)


@pytest.mark.parametrize("examples", [67_349, AUGMENT_ROWS, AUGMENT_ROWS - 1, AUGMENT_ROWS // (SMALL_AUGMENT + 1),
                                      AUGMENT_ROWS // SMALL_AUGMENT, 1_000])
def test_a_student_far_smaller_than_its_teacher_gets_variants_at_any_size(examples):
    to_rows = adaptive(examples)[0]["augment"]
    for share in (SMALL_STUDENT, SMALL_STUDENT / 10):
        chosen, why = adaptive(examples, share=share)
        assert chosen["augment"] == max(to_rows, SMALL_AUGMENT)
        small = f"--augment {SMALL_AUGMENT}: a student of {share:.0%} of the teacher's encoder"
        assert (small in why) == (to_rows < SMALL_AUGMENT)
        assert (f"training examples, under {AUGMENT_ROWS:,}" in why) == (to_rows >= SMALL_AUGMENT)
    assert adaptive(examples, share=SMALL_STUDENT * 1.01)[0]["augment"] == to_rows  # just above: the row rule alone
    assert adaptive(examples, share=0.01, augmentable=False)[0]["augment"] == 0  # tokens, spans, choices, --alpha 1
    assert adaptive(examples, share=0.01, augment=0)[0]["augment"] == 0  # what is given wins


def test_the_rate_is_the_starts_and_what_is_given_wins():
    for start, lr in (("cut", TRAINED_LR), ("layers", TRAINED_LR), ("checkpoint", TRAINED_LR), ("random", RANDOM_LR)):
        assert adaptive(3_000, start)[0]["lr"] == lr
    assert adaptive(3_000, augmentable=False)[0]["augment"] == 0  # token, span and choice tasks, or --alpha 1
    assert adaptive(3_000, lr=5e-5, augment=3) == ({"lr": 5e-5, "augment": 3}, "")
    assert adaptive(3_000, share=0.01, recipe="fixed")[0] == \
        {"lr": FIXED["lr"], "augment": FIXED["augment"]}


@pytest.mark.parametrize("rows, epochs", [
    (32 * MIN_STEPS, 1), (32 * MIN_STEPS - 1, 1), (32 * MIN_STEPS + 1, 1), (32 * (MIN_STEPS // 2), 2),
    (32 * (MIN_STEPS // 2) - 31, 2), (32 * (MIN_STEPS // 2 - 1), 3), (32 * 1_000_000, 1), (50, MAX_EPOCHS)])
def test_epochs_make_the_step_floor_over_all_rows(rows, epochs):
    chosen, patience, why = distill_epochs(rows, 32)
    assert chosen == epochs and f"{epochs} epochs" in why
    assert patience == (3 if epochs > 5 else 0)  # early stopping where the recipe runs more than a few epochs
    steps = epochs * math.ceil(rows / 32)
    assert steps >= MIN_STEPS or epochs == MAX_EPOCHS
    assert epochs == 1 or (epochs - 1) * math.ceil(rows / 32) < MIN_STEPS  # not an epoch more than it takes
    fixed = choose("distill", "fixed", {"epochs": None, "batch_size": 32}, Facts(rows=rows))
    assert fixed.settings["epochs"] == FIXED["epochs"] and fixed.reasons() == "--recipe fixed"


def test_the_step_floor_counts_multiple_choice_sequences():
    """ARC-Easy's 2,251 questions of 4 choices at batch 32: 71 steps an epoch, each over 128 sequences, so the
    floor takes 15 epochs (14 make 3,976 sequence-steps), not the 30 (the cap) that counting questions takes."""
    epochs, patience, why = distill_epochs(2251, 32, sequences=4 * 2251)
    assert (epochs, patience) == (15, 3) and "2,251 rows of 4 choices each" in why
    assert distill_epochs(2251, 32)[0] == MAX_EPOCHS


def test_the_labels_alone_make_the_distillations_steps_without_its_variants(monkeypatch):
    """--alpha 1 (48 examples, batch 8, one variant each for the distillation): 4 epochs of 6 steps, the 24 steps of
    the distillation's 2 epochs of 12; no variants of its own, and why in words."""
    given = {"lr": None, "augment": None, "epochs": None, "patience": None, "batch_size": 8}
    monkeypatch.setitem(DISTILL, "augment_rows", 96)
    monkeypatch.setitem(DISTILL, "min_steps", 20)
    labels = choose("distill", "adaptive", given, Facts(examples=48, rows=48, augmentable=True, labels_only=True))
    distilled = choose("distill", "adaptive", given, Facts(examples=48, rows=96, augmentable=True))
    assert (labels.settings["augment"], labels.settings["epochs"]) == (0, 4)
    assert (distilled.settings["augment"], distilled.settings["epochs"]) == (1, 2)
    assert labels.reasons() == "lr 0.0001: a student that starts trained; 4 epochs: the 24 steps a distillation " \
                               "with --augment 1 makes over 96 rows"
    assert matched_epochs(48, 8, 1)[:2] == (4, 0)


def test_pre_training_recipes_by_width_and_hardware():
    unsaid = {"lr": None, "bf16": None, "batch_size": None}
    assert choose("pretrain", "budget", unsaid, Facts(hidden_size=128)).settings["lr"] == 2e-3
    assert choose("pretrain", "budget", unsaid, Facts(hidden_size=256)).settings["lr"] == 5e-4
    assert choose("pretrain", "budget", unsaid, Facts(native_bf16=True)).settings["bf16"] is True
    assert choose("pretrain", "budget", {**unsaid, "bf16": False}, Facts(native_bf16=True)).settings["bf16"] is False
    assert choose("pretrain", "paper", unsaid, Facts(native_bf16=True)).settings == \
        {"lr": 1e-4, "bf16": False, "batch_size": 64}


def test_a_patience_given_is_the_one_the_reasons_speak_of():
    unsaid = dict.fromkeys(("lr", "batch_size", "warmup", "weight_decay", "patience", "epochs"))
    stopping = choose("finetune", "adaptive", unsaid, Facts(examples=40))
    assert stopping.settings["patience"] == 3 and "stopping after 3" in stopping.reasons()
    every_epoch = choose("finetune", "adaptive", {**unsaid, "patience": 0}, Facts(examples=40))
    assert every_epoch.settings["patience"] == 0 and "stopping" not in every_epoch.reasons()
    given = {"lr": None, "augment": None, "epochs": None, "patience": 0, "batch_size": 32}
    distilled = choose("distill", "adaptive", given, Facts(examples=1_000, rows=20_000, augmentable=True))
    assert distilled.settings["epochs"] == 7 and "stopping" not in distilled.reasons()
