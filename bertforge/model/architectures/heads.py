"""The model's heads, each declared once (`HEADS`, by model class): the module that holds its class, the
pipeline task that answers with it, what a runtime returns from it by name (each with its ONNX axes), the
checkpoint parts it owns (state-dict prefix -> plain name, for load reports and `info`), the class its ONNX
export runs, and the route `bertforge serve` answers it on (`Route`: /v1/NAME, the pipeline it runs, its request's
options). The runtime, export, the pipelines, checkpoint loading, the task families, the server, `info` and the
package's exports read it; a new head is its class (in task_heads.py for a fine-tuning head) and an entry here.
torch-free, and plain data that the layers above interpret: `head_class` imports a class only when asked."""

import importlib
from dataclasses import dataclass, field

BATCH, SEQUENCE = {0: "batch"}, {0: "batch", 1: "sequence"}


@dataclass(frozen=True)
class Route:
    """How `bertforge serve` answers with a head: POST /v1/NAME runs the pipeline `task`; serving/serve.py makes
    the route and its request body from this."""

    name: str  # the route: /v1/NAME
    task: str  # the pipeline the server runs (the head's own task, or the one it is served as)
    inputs: str  # what a request's "inputs" holds (its description in /docs)
    options: dict[str, tuple[type, str]] = field(default_factory=dict)  # the request's pipeline options beyond
    # inputs and truncate: name -> (type, description)
    tei: str | None = None  # text-embeddings-inference's model type of a model served so, where TEI has one


@dataclass(frozen=True)
class Head:
    name: str  # the class (and in transformers)
    task: str  # the pipeline task of a checkpoint with this head (config.json `architectures`)
    outputs: dict[str, dict] = field(default_factory=dict)  # runtime output -> its ONNX dynamic axes
    parts: dict[str, str] = field(default_factory=dict)  # state-dict prefix -> plain name
    exported_as: str | None = None  # the class its ONNX export runs, where not its own
    module: str = "bertforge.model.architectures.task_heads"  # the module that defines the class (any importable one)
    route: Route | None = None  # where the server answers with it

    @property
    def runs_as(self) -> str:
        return self.exported_as or self.name


ENCODER = "bertforge.model.architectures.bert"
MASKED_LM = {"cls.predictions": "masked-LM head"}
FILL_MASK = Route("fill-mask", "fill-mask", "a text with [MASK] or a list of them",
                  {"top_k": (int, "tokens per [MASK] (default 5)")})
HEADS = {head.name: head for head in (
    # the encoder and the paper's pre-training heads, in bert.py
    Head("BertModel", "feature-extraction", {"last_hidden_state": SEQUENCE}, module=ENCODER,
         route=Route("embed", "sentence-embedding", "a text or a list of texts", {
             "pooling": (str, "mean, cls, max, lasttoken, mean_sqrt_len_tokens or weightedmean (default: the model "
                              "folder's, else mean)"),
             "normalize": (bool, "unit-length vectors (default: the model folder's, else true)"),
             "dimensions": (int, "Matryoshka: the first N values of each vector (then normalised)")}, tei="embedding")),
    Head("BertForMaskedLM", "fill-mask", {"mask_logits": {0: "masked"}}, MASKED_LM, module=ENCODER, route=FILL_MASK),
    # pre-training's next-sentence head has no runtime output: its checkpoints run as masked LMs
    Head("BertForPreTraining", "fill-mask", parts={**MASKED_LM, "cls.seq_relationship": "next-sentence head"},
         exported_as="BertForMaskedLM", module=ENCODER, route=FILL_MASK),
    # the task heads fine-tuning adds, in task_heads.py
    Head("BertForSequenceClassification", "text-classification", {"logits": BATCH}, {"classifier": "classifier"},
         route=Route("classify", "text-classification",
                     'a text, a list of texts, or of [text, text_pair] / {"text", "text_pair"}', {
                         "top_k": (int | None, "labels to return, best first (null: all); absent: the best label"),
                         "function_to_apply": (str, "softmax, sigmoid or none")}, tei="classifier")),
    Head("BertForTokenClassification", "token-classification", {"logits": SEQUENCE}, {"classifier": "classifier"},
         route=Route("ner", "token-classification", "a text or a list of texts",
                     {"aggregation_strategy": (str, "none, simple, first, max or average")})),
    Head("BertForQuestionAnswering", "question-answering", {"start_logits": SEQUENCE, "end_logits": SEQUENCE},
         {"qa_outputs": "question-answering head"},
         route=Route("qa", "question-answering", '{"question", "context"} or a list of them', {
             "top_k": (int, "answers per question"), "handle_impossible_answer": (bool, "allow no answer (v2)"),
             "null_threshold": (float, "v2: answer nothing where the null score wins by more than this"),
             "max_answer_len": (int, "tokens")})),
    Head("BertForMultipleChoice", "multiple-choice", {"logits": {0: "batch", 1: "choices"}},
         {"classifier": "classifier"},
         route=Route("multiple-choice", "multiple-choice", '{"question", "choices": [...]} or a list of them')),
)}
# The encoder's pooler, then every head's parts, in the order reports list them.
PART_NAMES = {"bert.pooler": "pooler",
              **{prefix: name for head in HEADS.values() for prefix, name in head.parts.items()}}


def head_class(name: str) -> type:
    """The model class of a declared head, imported from its module."""
    return getattr(importlib.import_module(HEADS[name].module), name)


# The routes the server answers, by the pipeline task each runs, and what a head's own task is served as.
SERVED = {head.route.task: head.route for head in HEADS.values() if head.route}
SERVED_AS = {head.task: head.route.task for head in HEADS.values() if head.route}
