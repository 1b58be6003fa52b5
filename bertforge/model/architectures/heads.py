"""The model's heads, each declared once (`HEADS`, by model class): the module that holds its class, the
pipeline task that answers with it, what a runtime returns from it by name (each with its ONNX axes), the
checkpoint parts it owns (state-dict prefix -> plain name, for load reports and `info`) and the class its ONNX
export runs. The runtime, export, the pipelines, checkpoint loading, the task families, `info` and the package's
exports read it (the server answers a head on its pipeline task's route: serving/routes.py); a new head is its
class (in task_heads.py for a fine-tuning head) and an entry here. torch-free, and plain data that the layers
above interpret: `head_class` imports a class only when asked."""

import importlib
from dataclasses import dataclass, field

BATCH, SEQUENCE = {0: "batch"}, {0: "batch", 1: "sequence"}


@dataclass(frozen=True)
class Head:
    name: str  # the class (and in transformers)
    task: str  # the pipeline task of a checkpoint with this head (config.json `architectures`)
    outputs: dict[str, dict] = field(default_factory=dict)  # runtime output -> its ONNX dynamic axes
    parts: dict[str, str] = field(default_factory=dict)  # state-dict prefix -> plain name
    exported_as: str | None = None  # the class its ONNX export runs, where not its own
    module: str = "bertforge.model.architectures.task_heads"  # the module that defines the class (any importable one)

    @property
    def runs_as(self) -> str:
        return self.exported_as or self.name


ENCODER = "bertforge.model.architectures.bert"
MASKED_LM = {"cls.predictions": "masked-LM head"}
HEADS = {head.name: head for head in (
    # the encoder and the paper's pre-training heads, in bert.py
    Head("BertModel", "feature-extraction", {"last_hidden_state": SEQUENCE}, module=ENCODER),
    Head("BertForMaskedLM", "fill-mask", {"mask_logits": {0: "masked"}}, MASKED_LM, module=ENCODER),
    # pre-training's next-sentence head has no runtime output: its checkpoints run as masked LMs
    Head("BertForPreTraining", "fill-mask", parts={**MASKED_LM, "cls.seq_relationship": "next-sentence head"},
         exported_as="BertForMaskedLM", module=ENCODER),
    # the task heads fine-tuning adds, in task_heads.py
    Head("BertForSequenceClassification", "text-classification", {"logits": BATCH}, {"classifier": "classifier"}),
    Head("BertForTokenClassification", "token-classification", {"logits": SEQUENCE}, {"classifier": "classifier"}),
    Head("BertForQuestionAnswering", "question-answering", {"start_logits": SEQUENCE, "end_logits": SEQUENCE},
         {"qa_outputs": "question-answering head"}),
    Head("BertForMultipleChoice", "multiple-choice", {"logits": {0: "batch", 1: "choices"}},
         {"classifier": "classifier"}),
)}
# The encoder's pooler, then every head's parts, in the order reports list them.
PART_NAMES = {"bert.pooler": "pooler",
              **{prefix: name for head in HEADS.values() for prefix, name in head.parts.items()}}


def head_class(name: str) -> type:
    """The model class of a declared head, imported from its module."""
    return getattr(importlib.import_module(HEADS[name].module), name)

