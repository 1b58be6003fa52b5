"""How `--prune` ranks and cuts each family (the registry's `Architecture.cut` names one of these): where a
model's parts are ranked (`watch`: module, rank, per head, on the module's input) and which rows and columns of
each tensor a cut keeps (`keep`); student.py's `activation_ranks` and `cut_weights` apply them."""

import torch


class BertCut:
    """Where BERT's parts are ranked (`watch`: module, rank, per head, on the module's input) and which rows and
    columns of each tensor a cut keeps (`keep`)."""

    @staticmethod
    def watch(model):
        encoder = model.base_model
        yield encoder.embeddings.LayerNorm, "hidden.embeddings", False, False
        if getattr(encoder, "pooler", None) is not None:
            yield encoder.pooler, "pooled", False, False
        for i, layer in enumerate(encoder.encoder.layer):
            yield layer.attention.output.LayerNorm, f"hidden.{i}.attention", False, False
            yield layer.output.LayerNorm, f"hidden.{i}.output", False, False
            yield layer.attention.output.dense, f"heads.{i}", True, True
            yield layer.output.dense, f"neurons.{i}", False, True

    layer_list = "layer"  # a layer's tensors: ...layer.I.<module>.<parameter>

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        """(rows, columns) of the tensor named `parts` (a layer's index at parts[at + 1], its renumbered kept sets in
        keep["channels"], keep["neurons"]; keep["hidden"], keep["pooled"] for all); None keeps them all."""
        hidden, pooled = keep["hidden"], keep["pooled"]
        if at is not None:
            channels, neurons = keep["channels"], keep["neurons"]
            return {"attention.self.query": (channels, hidden), "attention.self.key": (channels, hidden),
                    "attention.self.value": (channels, hidden), "attention.output.dense": (hidden, channels),
                    "intermediate.dense": (neurons, hidden), "output.dense": (hidden, neurons),
                    }.get(".".join(parts[at + 2:-1]), (hidden, None))  # the LayerNorms
        if "pooler" in parts:
            return pooled, hidden
        if head in parts:
            return None, hidden if pooled is None else pooled
        if "embeddings" in parts:  # the tables [rows, H], their LayerNorm [H]
            return (None, hidden) if value.dim() == 2 else (hidden, None)
        return None, None


class RobertaCut(BertCut):
    """BERT's ranks and cuts, and RoBERTa's sentence classifier in place of the pooler: its dense layer's output
    after tanh (out_proj's input) ranked as the pooled vector, and cut as the pooler is."""

    @staticmethod
    def watch(model):
        yield from BertCut.watch(model)
        if hasattr(getattr(model, "classifier", None), "out_proj"):
            yield model.classifier.out_proj, "pooled", False, True

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        if parts[:2] == ["classifier", "dense"]:
            return keep["pooled"], keep["hidden"]
        if parts[:2] == ["classifier", "out_proj"]:
            return None, keep["pooled"]
        return BertCut.keep(parts, value, at, keep, head)


class DistilBertCut(BertCut):
    """BERT's ranks and cuts under DistilBERT's names (the embeddings' norm, each layer's sa_layer_norm and
    output_layer_norm, out_lin's input per head, lin2's per neuron), and the sentence heads' pre_classifier cut as a
    pooler, ranked at the classifier's input; the masked-LM head's transform keeps the hidden channels."""

    @staticmethod
    def watch(model):
        encoder = model.base_model
        yield encoder.embeddings.LayerNorm, "hidden.embeddings", False, False
        if hasattr(model, "pre_classifier"):
            yield model.classifier, "pooled", False, True
        for i, layer in enumerate(encoder.transformer.layer):
            yield layer.sa_layer_norm, f"hidden.{i}.attention", False, False
            yield layer.output_layer_norm, f"hidden.{i}.output", False, False
            yield layer.attention.out_lin, f"heads.{i}", True, True
            yield layer.ffn.lin2, f"neurons.{i}", False, True

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        hidden, pooled = keep["hidden"], keep["pooled"]
        if at is not None:
            channels, neurons = keep["channels"], keep["neurons"]
            return {"attention.q_lin": (channels, hidden), "attention.k_lin": (channels, hidden),
                    "attention.v_lin": (channels, hidden), "attention.out_lin": (hidden, channels),
                    "ffn.lin1": (neurons, hidden), "ffn.lin2": (hidden, neurons),
                    }.get(".".join(parts[at + 2:-1]), (hidden, None))  # the LayerNorms
        if parts[0] == "pre_classifier":
            return pooled, hidden
        if parts[0] == "vocab_transform":
            return hidden, hidden
        if parts[0] == "vocab_layer_norm":
            return hidden, None
        return BertCut.keep(parts, value, at, keep, head)


class MPNetCut(RobertaCut):
    """RoBERTa's ranks and cuts under MPNet's names (each layer's attention.LayerNorm, o's input per head, q, k, v and
    o in attention.attn), with one set of heads kept in every layer: the relative position bias is one table shared
    by the layers, a column per head (`shared_heads`: the heads ranked by their sum over the kept layers), its
    columns cut with them; the masked-LM head's dense layer and norm keep the hidden channels."""

    shared_heads = True

    @staticmethod
    def watch(model):
        encoder = model.base_model
        yield encoder.embeddings.LayerNorm, "hidden.embeddings", False, False
        if getattr(encoder, "pooler", None) is not None:
            yield encoder.pooler, "pooled", False, False
        if hasattr(getattr(model, "classifier", None), "out_proj"):
            yield model.classifier.out_proj, "pooled", False, True
        for i, layer in enumerate(encoder.encoder.layer):
            yield layer.attention.LayerNorm, f"hidden.{i}.attention", False, False
            yield layer.output.LayerNorm, f"hidden.{i}.output", False, False
            yield layer.attention.attn.o, f"heads.{i}", True, True
            yield layer.output.dense, f"neurons.{i}", False, True

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        hidden = keep["hidden"]
        if at is not None:
            channels, neurons = keep["channels"], keep["neurons"]
            return {"attention.attn.q": (channels, hidden), "attention.attn.k": (channels, hidden),
                    "attention.attn.v": (channels, hidden), "attention.attn.o": (hidden, channels),
                    "intermediate.dense": (neurons, hidden), "output.dense": (hidden, neurons),
                    }.get(".".join(parts[at + 2:-1]), (hidden, None))  # the LayerNorms
        if "relative_attention_bias" in parts:  # [buckets, heads]
            return None, keep["heads"]
        if parts[:2] == ["lm_head", "dense"]:
            return hidden, hidden
        if parts[:2] == ["lm_head", "layer_norm"]:
            return hidden, None
        return RobertaCut.keep(parts, value, at, keep, head)


class ElectraCut(RobertaCut):
    """RoBERTa's ranks and cuts, with ELECTRA's tables (embedding_size wide) kept whole: embeddings_project's output
    ranked as the hidden channels and its rows cut with them; the masked-LM head's dense layer reads the hidden
    channels and writes the tables'; multiple choice's sequence summary ranked and cut as a pooler. A teacher
    without the projection (embedding_size = hidden_size, electra-base's) is cut as BERT is, its tables with the
    width."""

    @staticmethod
    def watch(model):
        encoder = model.base_model
        for point in RobertaCut.watch(model):
            if point[1] != "hidden.embeddings" or encoder.embeddings_project is None:
                yield point
        if encoder.embeddings_project is not None:
            yield encoder.embeddings_project, "hidden.embeddings", False, False
        if isinstance(getattr(model, "sequence_summary", None), torch.nn.Module):
            yield model.sequence_summary, "pooled", False, False

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        projected = any("embeddings_project" in key for key in keep["weights"])
        tables = None if projected else keep["hidden"]  # the table channels kept
        if "embeddings_project" in parts:
            return keep["hidden"], None
        if "embeddings" in parts:  # the tables [rows, E], their LayerNorm [E]
            return (None, tables) if value.dim() == 2 else (tables, None)
        if parts[:2] == ["generator_predictions", "dense"]:
            return tables, keep["hidden"]
        if parts[:2] == ["generator_predictions", "LayerNorm"]:
            return tables, None
        if parts[:2] == ["sequence_summary", "summary"]:
            return keep["pooled"], keep["hidden"]
        return RobertaCut.keep(parts, value, at, keep, head)


class ModernBertCut:
    """ModernBERT's ranks: the hidden channels at every norm's output (the embeddings', each layer's two, the final
    one), each head's context vector, each GeGLU neuron (act(value) x gate, Wo's input), and a task model's
    prediction head (dense, norm: the classifier's input, per example or per token). Wqkv keeps its heads' rows in
    each of Q, K and V; Wi keeps its neurons' rows in both halves, value and gate."""

    @staticmethod
    def watch(model):
        encoder = model.base_model
        yield encoder.embeddings.norm, "hidden.embeddings", False, False
        yield encoder.final_norm, "hidden.final", False, False
        if hasattr(model, "classifier") and hasattr(model, "head"):
            yield model.head, "pooled", False, False
        for i, layer in enumerate(encoder.layers):
            if i:
                yield layer.attn_norm, f"hidden.{i}.attention", False, False
            yield layer.mlp_norm, f"hidden.{i}.mlp", False, False
            yield layer.attn.Wo, f"heads.{i}", True, True
            yield layer.mlp.Wo, f"neurons.{i}", False, True

    layer_list = "layers"

    @staticmethod
    def keep(parts: list[str], value, at: int | None, keep: dict, head: str | None):
        hidden, pooled = keep["hidden"], keep["pooled"]
        if at is not None:
            channels, neurons = keep["channels"], keep["neurons"]
            module = ".".join(parts[at + 2:-1])
            if module == "attn.Wqkv":
                third = len(value) // 3
                return torch.cat([channels, channels + third, channels + 2 * third]), hidden
            if module == "mlp.Wi":
                return torch.cat([neurons, neurons + len(value) // 2]), hidden
            return {"attn.Wo": (hidden, channels), "mlp.Wo": (hidden, neurons)}.get(module, (hidden, None))
        if parts[0] == "head":  # the prediction head: dense [H, H] and its norm
            return (pooled, hidden) if parts[1] == "dense" and parts[-1] == "weight" else (pooled, None)
        if parts[0] == "classifier":
            return None, pooled
        if "embeddings" in parts or "final_norm" in parts:
            return (None, hidden) if value.dim() == 2 else (hidden, None)
        return None, None
