"""The MTEB adapter (inference/mteb_model.py): mteb runs a bertforge model offline, on its own mock tasks and on an
STS task made here from rows of the shared STS-B dev set, with the scores sentence-transformers' model gets through
mteb's own wrapper; the folder's query/document prompts are the ones mteb asks for."""

import csv
import shutil

import numpy as np
import pytest

from tests.conftest import require_shared

mteb = pytest.importorskip("mteb", reason="the MTEB adapter needs mteb: pip install 'bertforge[mteb]'")


def stsb_task(rows: int):
    """An MTEB STS task of the first `rows` pairs of GLUE's STS-B dev (scores 0 to 5)."""
    from datasets import Dataset, DatasetDict
    from mteb.abstasks.sts import AbsTaskSTS
    from mteb.abstasks.task_metadata import TaskMetadata

    path = require_shared("data", "glue", "STS-B", "dev.tsv")

    class STSBDevSample(AbsTaskSTS):
        metadata = TaskMetadata(
            name="STSBDevSample", description="GLUE STS-B dev pairs, read from ../shared", reference=None,
            dataset={"path": "NA", "revision": "NA"}, type="STS", category="t2t", modalities=["text"],
            eval_splits=["test"], eval_langs=["eng-Latn"], main_score="cosine_spearman", date=None, domains=None,
            task_subtypes=None, license=None, annotations_creators=None, dialect=None, sample_creation=None,
            bibtex_citation="")
        min_score, max_score = 0, 5

        def load_data(self, num_proc=None, **kwargs):
            with open(path, encoding="utf-8") as f:
                pairs = [r for r, _ in zip(csv.DictReader(f, delimiter="\t", quoting=csv.QUOTE_NONE), range(rows))]
            self.dataset = DatasetDict({"test": Dataset.from_dict({
                "sentence1": [r["sentence1"] for r in pairs], "sentence2": [r["sentence2"] for r in pairs],
                "score": [float(r["score"]) for r in pairs]})})
            self.data_loaded = True

    return STSBDevSample()


def scores(model, tasks) -> dict[str, float]:
    result = mteb.evaluate(model, tasks, cache=None, show_progress_bar=False)
    return {r.task_name: r.get_score() for r in result.task_results}


def test_mteb_scores_a_bertforge_model_as_sentence_transformers(minilm_dir):
    from mteb.mocks.mock_tasks.retrieval import MockRetrievalTask
    from mteb.mocks.mock_tasks.sts import MockSTSTask
    from sentence_transformers import SentenceTransformer

    from bertforge.inference.mteb_model import MTEBModel

    tasks = [MockSTSTask(), MockRetrievalTask(), stsb_task(40)]
    ours = scores(MTEBModel(str(minilm_dir)), tasks)
    reference = scores(SentenceTransformer(str(minilm_dir), device="cpu"), tasks)
    assert set(ours) == {"MockSTSTask", "MockRetrievalTask", "STSBDevSample"}
    for name, score in reference.items():
        assert ours[name] == pytest.approx(score, abs=1e-4), name
    assert ours["STSBDevSample"] > 0.7  # a trained sentence encoder on real pairs


def test_the_folder_s_query_and_passage_prompts_are_the_ones_mteb_asks_for(minilm_dir, tmp_path):
    import json

    from mteb.mocks.mock_tasks.retrieval import MockRetrievalTask
    from mteb.types import PromptType

    import bertforge
    from bertforge.inference.mteb_model import MTEBModel

    folder = shutil.copytree(minilm_dir, tmp_path / "prompted")
    (folder / "config_sentence_transformers.json").write_text(json.dumps(
        {"prompts": {"query": "query: ", "passage": "passage: "}, "default_prompt_name": None}))
    model, embed = MTEBModel(str(folder)), bertforge.pipeline("sentence-embedding", model=folder)
    task = MockRetrievalTask().metadata
    texts = ["Who wrote Emma?", "Emma is a novel by Jane Austen."]
    for prompt_type, name in [(PromptType.query, "query"), (PromptType.document, "passage"), (None, None)]:
        got = model.encode(texts, task_metadata=task, hf_split="test", hf_subset="default", prompt_type=prompt_type)
        assert np.abs(got - np.array(embed(texts, prompt_name=name))).max() < 1e-6, prompt_type
    assert model.mteb_model_meta.embed_dim == 384
