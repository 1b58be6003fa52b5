"""The import paths from before the modules moved into their layers' folders, kept for the 0.x releases.

`bertforge.tokenizer`, `from bertforge.options import count`, `bertforge.model.BertForMaskedLM`: an old path
still works, looked up where its names are now (those modules imported on first use, so that `import bertforge`
stays free of torch), and warns once per old module with a FutureWarning naming the new path."""

import functools
import importlib
import importlib.abc
import importlib.util
import sys
import warnings

# old module bertforge.OLD -> the modules its names are in now, searched in order
MOVED = {
    "answer_spans": "inference.answer_spans", "batcher": "serving.batcher", "bi_encoder": "model.bi_encoder",
    "checkpoint": "model.formats.checkpoint", "compat": "model.compat", "config": "model.architectures.config",
    "convert": "commands.convert", "crc32c": "model.formats.crc32c", "decoding": "core.decoding",
    "demo": "pretraining.demo", "distill": "finetuning.distill finetuning.distill_student",
    "distill_data": "finetuning.distill_data",
    "encoding": "text.encoding", "entities": "inference.entities", "errors": "core.errors",
    "evaluate": "finetuning.evaluate", "export": "inference.export", "features": "inference.features",
    "finetune": "finetuning.finetune training.recipes training.settings",
    "general_distill": "pretraining.general_distill training.representation_loss",
    "google_checkpoint": "model.formats.google_checkpoint", "heads": "model.architectures.heads serving.routes",
    "heap": "core.heap",
    "inference": "inference.batches", "info": "commands.info", "inputs": "inference.inputs", "io": "core.io",
    "metrics_text": "serving.prometheus", "model": "model.architectures.bert model.architectures.task_heads",
    "objectives": "pretraining.objectives", "optim": "training.optim", "options": "training.options core.flags",
    "packing": "model.architectures.packing", "pipeline_base": "inference.pipeline_base",
    "pipelines": "inference.pipelines", "plot": "pretraining.plot", "predict": "finetuning.predict",
    "pretrain": "pretraining.pretrain", "recipe": "pretraining.recipe training.recipes", "resume": "training.resume",
    "run_folder": "training.run_folder", "runtime": "inference.runtime",
    "sentence_folder": "model.formats.sentence_folder", "serve": "serving.serve",
    "serve_connections": "serving.connections", "serve_guard": "serving.guard", "serve_openai": "serving.openai_api",
    "serve_start": "serving.start", "serve_tei": "serving.tei", "sizes": "model.formats.sizes",
    "suite": "finetuning.suite", "tf_checkpoint": "model.formats.tf_checkpoint", "tokenizer": "text.tokenizer",
    "train": "training.train", "vocab": "text.vocab", "windows": "inference.windows", "wordpiece": "text.wordpiece",
    # the model layer's rooms: its modules moved into architectures/ and formats/
    "model.architectures": "model.architectures.registry", "model.bert": "model.architectures.bert",
    "model.checkpoint": "model.formats.checkpoint",
    "model.config": ("model.architectures.config model.architectures.family_configs "
                     "model.architectures.modernbert_config"),
    "model.crc32c": "model.formats.crc32c", "model.distilbert": "model.architectures.distilbert",
    "model.electra": "model.architectures.electra", "model.google_checkpoint": "model.formats.google_checkpoint",
    "model.heads": "model.architectures.heads serving.routes", "model.modernbert": "model.architectures.modernbert",
    "model.packing": "model.architectures.packing", "model.ranking_loss": "model.architectures.task_heads",
    "model.representation_loss": "training.representation_loss", "model.roberta": "model.architectures.roberta",
    "model.sentence_folder": "model.formats.sentence_folder", "model.sizes": "model.formats.sizes",
    "model.task_heads": "model.architectures.task_heads", "model.tf_checkpoint": "model.formats.tf_checkpoint",
    # the recipes went into one table and one function (training/recipes.py), a student's start to distill_student
    "finetuning.distill_recipe": "finetuning.distill_student training.recipes",
}
# Three old modules are packages now. Only their old names are forwarded, so that a submodule not imported yet
# (`from bertforge.model import sizes`) is imported, not looked up in bert.py, and a misspelt name loads no torch.
PACKAGES = {
    "model": """ACT BertEmbeddings BertSelfAttention BertOutput BertAttention BertIntermediate BertLayer BertEncoder
        BertPooler truncated_normal_ BertPreTrainedModel BertModel BertPredictionHeadTransform BertLMPredictionHead
        BertOnlyMLMHead BertPreTrainingHeads masked_lm BertForPreTraining BertForMaskedLM DropoutSite TaskHead
        BertForSequenceClassification BertForTokenClassification BertForQuestionAnswering BertForMultipleChoice""",
    "model.architectures": """Architecture classes ELECTRA DISTILBERT ROBERTA_ARCHITECTURE ARCHITECTURES HEAD_OF
        ENCODER_PARTS PARTS architecture read_config load_config model_class pretraining_class head_of heads_of""",
    "inference": """pad_nested pad_batch row_lengths doc_spans max_context_window run_model Row is_nested row_length
        row_width LazyRows row_sizes rows_tokens plan_batches cut_padding pad run_batch run per_row""",
}
# old module -> {name it had that no module has now: what took its place}
RECIPES, SETTINGS = "bertforge.training.recipes", "bertforge.training.settings"
GONE = {
    "serve": dict.fromkeys(("ENDPOINTS", "INPUTS", "OPTIONS"), "each route, its inputs and request options are its "
                           "pipeline task's Route in bertforge.serving.routes.SERVED"),
    "inference": {"row_choices": "bertforge.inference.batches.pad_choices pads a row's choices"},
    "evaluate": {"inference_rate": "bertforge.finetuning.evaluate.Speed times a model's forward passes"},
    "checkpoint": {"TIED_ALIASES": "bertforge.model.architectures.registry.Architecture.aliases_of names the tied "
                                   "tensors' second names, per architecture",
                   "encoder_parts": "bertforge.model.architectures.registry.Architecture.encoder_parts, by each "
                                    "architecture's own names"},
    "info": {"check_sizes": "bertforge.model.formats.checkpoint.check_header checks info's folder as every "
                              "command's"},
    "sizes": {"FIRST_DIMENSION": "bertforge.model.formats.sizes.field_of finds any architecture's field on the meta "
                                  "device",
              "layer_count": "bertforge.model.architectures.registry.Architecture.layer_count, by each "
                             "architecture's names"},
    "general_distill": {"last_layer_qkv": "each encoder's own method now (BertModel.last_layer_qkv, "
                                          "ModernBertModel.last_layer_qkv)"},
    "model.heads": {"FILL_MASK": "bertforge.serving.routes.SERVED['fill-mask'], the route of the fill-mask task"},
    "sentence_folder": {"MODULE_TYPES": "bertforge.model.formats.sentence_folder.MODULE_ORDER names the modules "
                                        "that may follow each"},
    # the recipes, one table and one function now (bertforge.training.recipes)
    "finetune": {"RECIPES": f"{RECIPES}.RECIPES['finetune'] names fine-tuning's recipes",
                 **{name: f"{RECIPES}.FINETUNE[{name.lower()!r}]"
                    for name in ("MIN_STEPS", "SMALL_BATCH", "SMALL_LR", "MAX_EPOCHS")},
                 "recipe_settings": f"{RECIPES}.finetune_settings, and {RECIPES}.choose for any job",
                 "choose_settings": f"{SETTINGS}.FinetuneSettings.complete",
                 "family_record": f"{SETTINGS}.FinetuneSettings.make keeps the family's options",
                 "task_training_options": f"{SETTINGS}.JobSettings.make puts a job's defaults under what is given",
                 "task_run_options": "bertforge.finetuning.finetune.task_settings builds a job's settings"},
    "recipe": {"RECIPES": f"{RECIPES}.PRETRAIN holds the pre-training recipes"},
    "pretrain": {"PRETRAIN_DEFAULTS": f"{RECIPES}.DEFAULTS['pretrain']"},
    "distill": {"DISTILL_DEFAULTS": f"{RECIPES}.DEFAULTS['distill']"},
    "finetuning.distill_recipe": {
        "DISTILL_RECIPES": f"{RECIPES}.RECIPES['distill']", "DISTILL_DEFAULTS": f"{RECIPES}.DEFAULTS['distill']",
        **{name: f"{RECIPES}.DISTILL[{name.lower()!r}]" for name in (
            "TRAINED_LR", "RANDOM_LR", "AUGMENT_ROWS", "MAX_AUTO_AUGMENT", "SMALL_STUDENT", "SMALL_AUGMENT",
            "MIN_STEPS", "MAX_EPOCHS")},
        "distill_settings": f"{RECIPES}.choose('distill', ...)",
        "distill_epochs": f"{RECIPES}.distill_epochs, the adaptive recipe's (no recipe argument)",
        "matched_epochs": f"{RECIPES}.matched_epochs, the adaptive recipe's (no recipe argument)"},
}
LATER = "the old path goes in a later release"

_warned: set[str] = set()
_MISSING = object()


def new_modules(old: str) -> list[str]:
    return [f"{__package__}.{new}" for new in MOVED[old].split()]


def no_attribute(old: str, name: str) -> AttributeError:
    return AttributeError(f"module '{__package__}.{old}' has no attribute {name!r}")


def look_up(old: str, name: str) -> tuple[object, str]:
    """bertforge.OLD.NAME where it is now, and the module it came from."""
    if name in GONE.get(old, {}):
        raise AttributeError(f"{__package__}.{old}.{name} is gone: {GONE[old][name]}")
    for new in new_modules(old):
        value = getattr(importlib.import_module(new), name, _MISSING)
        if value is not _MISSING:
            return value, new
    raise no_attribute(old, name)


def now(old: str) -> str:
    return f"{__package__}.{old} is now {' and '.join(new_modules(old))}"


def warn_once(old: str, message: str):
    if old in _warned:
        return
    _warned.add(old)
    # The line named is the caller's caller: the user's import or use (warnings skips the import machinery's frames).
    warnings.warn(f"{message}; {LATER}", FutureWarning, stacklevel=3)


def module_attribute(old: str, name: str):
    """An old module's attribute: `from bertforge.OLD import *` takes its new modules' public names."""
    if name == "__all__":
        modules = [importlib.import_module(new) for new in new_modules(old)]
        return [key for m in modules for key in getattr(m, "__all__", [k for k in vars(m) if not k.startswith("_")])]
    if name.startswith("__") and name.endswith("__"):  # not __path__ or __file__: the import system asks those
        raise no_attribute(old, name)
    return look_up(old, name)[0]


def package_attribute(old: str, before, name: str):
    """A name of the old module that is a package now; `before`: the package's own __getattr__, if any."""
    if name in PACKAGES[old].split() or name in GONE.get(old, {}):
        value, new = look_up(old, name)
        warn_once(old, f"{__package__}.{old}.{name} is now {new}.{name} (the old module {now(old)})")
        return value
    if before:
        return before(name)
    raise no_attribute(old, name)


class OldModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Makes `bertforge.OLD`, for an old module that no longer exists, a module whose names are looked up where
    they are now. Last on sys.meta_path: it is asked only for what no file provides."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, old = fullname.partition(".")
        if package == __package__ and old in MOVED and old not in PACKAGES:
            return importlib.util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        old = module.__name__.partition(".")[2]
        module.__getattr__ = functools.partial(module_attribute, old)
        warn_once(old, now(old))


def forward_old_paths():
    """Called by bertforge/__init__.py."""
    if not any(isinstance(finder, OldModules) for finder in sys.meta_path):
        sys.meta_path.append(OldModules())
    for old in PACKAGES:
        package = importlib.import_module(f"{__package__}.{old}")
        before = vars(package).get("__getattr__")
        if getattr(before, "func", None) is not package_attribute:
            package.__getattr__ = functools.partial(package_attribute, old, before)
