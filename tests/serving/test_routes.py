"""The server's routes (serving/routes.py): every head is served on its pipeline task's route, whose request body
is inputs, truncate and the route's options, each an option of the pipeline the route runs; and every bertforge
/v1/ route is one of them."""

import pytest

import bertforge
from bertforge.model.architectures.config import BertConfig
from bertforge.model.architectures.heads import HEADS, head_class
from bertforge.serving.routes import DECLARED, SERVED, served_task


def test_every_head_is_served_on_its_tasks_route(tmp_path):
    pytest.importorskip("fastapi")
    from bertforge.serving import openai_api, tei
    from bertforge.serving.serve import Server, create_app

    (tmp_path / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "b"]) + "\n")
    config = BertConfig.from_name("tiny", vocab_size=7, id2label={0: "a", 1: "b"})
    api = create_app(Server(tmp_path)).openapi()
    for name, head in HEADS.items():
        route = SERVED[served_task(head.task)]  # a checkpoint of the head is served on its task's route
        body = api["paths"][f"/v1/{route.name}"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        fields = api["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]["properties"]
        assert set(fields) == {"inputs", "truncate", *route.options}, name
        head_class(name)(config).save_pretrained(tmp_path)
        assert set(route.options) <= set(bertforge.pipeline(route.task, model=tmp_path).defaults), name
    own = {path for path in api["paths"] if path.startswith("/v1/")} - set(tei.ROUTES) - set(openai_api.ROUTES)
    assert own == {f"/v1/{route.name}" for route in SERVED.values()}
    # no route without a head, or a folder's declaration (a SparseEncoder's)
    assert {served_task(head.task) for head in HEADS.values()} | set(DECLARED) == set(SERVED)
