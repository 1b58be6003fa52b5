"""The head registry: every head of bert.py and task_heads.py declared once, and what it declares is what the code
does."""

import inspect

import torch
import transformers

import bertforge
import bertforge.model.architectures.bert as encoder
import bertforge.model.architectures.task_heads as task_heads
from bertforge.model.formats.checkpoint import part_name
from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.heads import HEADS, PART_NAMES, head_class
from bertforge.inference.pipelines import TASKS
from bertforge.inference.runtime import TorchRuntime


def test_every_model_class_is_declared_and_exported():
    """Each model class of the two modules is a head declared with its module, exported by the package and found in
    bertforge.model.architectures.bert as before the task heads moved out of it."""
    classes = {(module.__name__, name) for module in (encoder, task_heads)
               for name, c in inspect.getmembers(module, inspect.isclass)
               if issubclass(c, encoder.BertPreTrainedModel) and c.__module__ == module.__name__
               and name.startswith("Bert") and name not in ("BertPreTrainedModel",)}
    assert classes == {(head.module, name) for name, head in HEADS.items()}
    assert set(HEADS) <= set(bertforge.__all__)
    for name in HEADS:
        assert getattr(bertforge, name) is head_class(name) is getattr(encoder, name)


def test_each_head_s_task_parts_and_outputs_are_the_code_s():
    config = BertConfig.from_name("tiny", vocab_size=100, id2label={0: "a", 1: "b", 2: "c"})
    for name, head in HEADS.items():
        assert head.task in TASKS and hasattr(transformers, name)
        model = head_class(name)(config).eval()
        keys = model.state_dict()
        owned = {part_name(k) for k in keys} & set(PART_NAMES.values())
        assert set(head.parts.values()) <= owned, name  # the parts it declares are its modules
        if not head.outputs:
            continue
        ids = torch.tensor([[2, 40, 4, 41, 3]])  # a [MASK] (id 4) for the masked-LM head
        batch = {"input_ids": ids, "token_type_ids": torch.zeros_like(ids), "attention_mask": torch.ones_like(ids)}
        if name == "BertForMultipleChoice":
            batch = {k: v[:, None].expand(1, 2, -1) for k, v in batch.items()} | {"choice_mask": torch.ones(1, 2)}
        with torch.no_grad():
            out = TorchRuntime(model, torch.device("cpu"), 4)(batch)
        assert set(out) == set(head.outputs), name
        for key, axes in head.outputs.items():
            assert max(axes) < out[key].dim(), (name, key)
