"""GET /v1/models on a bare FastAPI app (the spine mounts the same router in app.main)."""

from __future__ import annotations

from fastapi import FastAPI
from fastapi.testclient import TestClient

from app.api.routes.models import router
from app.engines.registry import load_llm


def test_lists_configured_models_with_engine_type_context_and_loaded() -> None:
    app = FastAPI()
    app.include_router(router)
    client = TestClient(app)
    body = client.get("/v1/models").json()
    models = {m["name"]: m for m in body["models"]}
    smol = models["smollm2-135m-instruct"]
    assert smol == {
        "name": "smollm2-135m-instruct",
        "engine": "transformers",
        "type": "chat",
        "context_length": 8192,
        "loaded": smol["loaded"],
        "available": True,
    }
    assert models["oracle"]["engine"] == "oracle" and models["oracle"]["type"] == "base"
    assert body["default_model"] == "smollm2-135m-instruct"
    load_llm("oracle")
    assert {m["name"]: m for m in client.get("/v1/models").json()["models"]}["oracle"]["loaded"] is True
