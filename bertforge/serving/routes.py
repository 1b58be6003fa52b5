"""What `bertforge serve` answers on, by the pipeline task it runs: POST /v1/NAME (`Route`), its request's options
with their types, and its text-embeddings-inference model type. app.py makes each route and its request body
from this; tei.py reads the TEI types. A head is served on the route of its pipeline task (model/architectures/
heads.py `Head.task`), an encoder's feature extraction as sentence embeddings (`SERVED_AS`)."""

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Route:
    name: str  # the route: /v1/NAME
    task: str  # the pipeline the server runs
    inputs: str  # what a request's "inputs" holds (its description in /docs)
    options: dict[str, tuple[type, str]] = field(default_factory=dict)  # the request's pipeline options beyond
    # inputs and truncate: name -> (type, description)
    tei: str | None = None  # text-embeddings-inference's model type of a model served so, where TEI has one


SERVED = {route.task: route for route in (
    Route("embed", "sentence-embedding", "a text or a list of texts", {
        "pooling": (str, "mean, cls, max, lasttoken, mean_sqrt_len_tokens or weightedmean (default: the model "
                         "folder's, else mean)"),
        "normalize": (bool, "unit-length vectors (default: the model folder's, else true)"),
        "dimensions": (int, "Matryoshka: the first N values of each vector (then normalised)"),
        "precision": (str, "float32, int8, uint8, binary or ubinary: the vectors quantized as sentence-transformers' "
                           "quantize_embeddings (int8 ranges from the request's own vectors)"),
        "prompt_name": (str | None, "one of the model folder's prompts (config_sentence_transformers.json), put "
                                    "before each text (default: the folder's default one)")}, tei="embedding"),
    Route("embed-sparse", "sparse-embedding", "a text or a list of texts", {
        "top_k": (int | None, "the k largest weights of each text (default: all its non-zero ones)"),
        "prompt_name": (str | None, "one of the model folder's prompts (config_sentence_transformers.json: a "
                                    "SparseEncoder's query or document), put before each text")}, tei="splade"),
    Route("fill-mask", "fill-mask", "a text with [MASK] or a list of them",
          {"top_k": (int, "tokens per [MASK] (default 5)")}),
    Route("classify", "text-classification", 'a text, a list of texts, or of [text, text_pair] / {"text", "text_pair"}',
          {"top_k": (int | None, "labels to return, best first (null: all); absent: the best label"),
           "function_to_apply": (str, "softmax, sigmoid or none")}, tei="classifier"),
    Route("ner", "token-classification", "a text or a list of texts",
          {"aggregation_strategy": (str, "none, simple, first, max or average")}),
    Route("qa", "question-answering", '{"question", "context"} or a list of them', {
        "top_k": (int, "answers per question"), "handle_impossible_answer": (bool, "allow no answer (v2)"),
        "null_threshold": (float, "v2: answer nothing where the null score wins by more than this"),
        "max_answer_len": (int, "tokens")}),
    Route("multiple-choice", "multiple-choice", '{"question", "choices": [...]} or a list of them'),
)}
# tasks a folder's declaration serves, whatever its head: a SparseEncoder folder (modules.json) is sparse-embedding
DECLARED = ("sparse-embedding",)
# a head's pipeline task -> the task it is served as, where not its own
SERVED_AS = {"feature-extraction": "sentence-embedding"}


def served_task(task: str) -> str:
    return SERVED_AS.get(task, task)
