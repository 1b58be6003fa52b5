"""transformers' Auto classes: the config, the tokenizer and the model with a given head of a folder or a Hub name,
whatever its architecture. Each model class names a head (`heads.HEADS`); the architecture registry
(`architectures.model_class`) gives the class of the folder's architecture with that head, as the head classes'
own `from_pretrained` does for another architecture's folder (`checkpoint.own_class`)."""

from .architectures.registry import model_class, read_config
from .formats.checkpoint import configured
from .architectures.heads import head_class
from ..core.hub import model_folder
from ..text.tokenizer import BertTokenizer


class AutoConfig:
    @classmethod
    def from_pretrained(cls, name_or_path, *, revision: str | None = None, token: str | None = None, **overrides):
        """The config dataclass of a folder's (or a Hub name's) config.json, of its architecture; keywords as the
        model classes' from_pretrained takes them (num_labels, id2label, label2id, config fields) change it."""
        folder = model_folder(name_or_path, revision, token, weights=False)
        return configured(read_config(folder / "config.json"), f"{cls.__name__}.from_pretrained", **overrides)


class AutoTokenizer:
    @classmethod
    def from_pretrained(cls, name_or_path, **kwargs) -> BertTokenizer:
        """The folder's tokenizer: BERT's WordPiece, or a PipelineTokenizer for a tokenizer.json of another kind."""
        return BertTokenizer.from_pretrained(name_or_path, **kwargs)


class AutoModelClass:
    """A model of the head `head`, of the architecture the folder's or the config's config.json names."""

    head: str  # a HEADS name

    @classmethod
    def from_pretrained(cls, name_or_path, *args, **kwargs):
        """As the head's class from_pretrained (num_labels, id2label, label2id, revision, token, dtype, ...)."""
        return head_class(cls.head).from_pretrained(name_or_path, *args, **kwargs)

    @classmethod
    def from_config(cls, config):
        """A model with random weights, of `config`'s architecture with this head."""
        return model_class(cls.head, config)(config)


class AutoModel(AutoModelClass):
    head = "BertModel"


class AutoModelForPreTraining(AutoModelClass):
    head = "BertForPreTraining"


class AutoModelForMaskedLM(AutoModelClass):
    head = "BertForMaskedLM"


class AutoModelForSequenceClassification(AutoModelClass):
    head = "BertForSequenceClassification"


class AutoModelForTokenClassification(AutoModelClass):
    head = "BertForTokenClassification"


class AutoModelForQuestionAnswering(AutoModelClass):
    head = "BertForQuestionAnswering"


class AutoModelForMultipleChoice(AutoModelClass):
    head = "BertForMultipleChoice"
