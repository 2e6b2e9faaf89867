"""/v1/models: the configured models (app.engines.registry) with engine, chat/base, context length, loaded.

A doorway: the registry holds the logic. Sources (paths, URLs) and engine options are not shown, since
they may name internal hosts. Authentication, if any, is added where the router is mounted.
"""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, Field

from app.engines import registry

router = APIRouter(prefix="/v1/models", tags=["models"])


class ModelResource(BaseModel):
    name: str
    engine: Literal["transformers", "vllm", "openai", "oracle", "simulated"]
    type: Literal["chat", "base"] = Field(description="chat: prompts go through the chat template")
    context_length: int | None
    loaded: bool = Field(description="an engine for it is loaded in this API process")
    available: bool = Field(description="false when a required package or file is missing")


class ModelList(BaseModel):
    models: list[ModelResource]
    default_model: str


@router.get("", response_model=ModelList)
def list_models() -> ModelList:
    from app.config import get_settings

    return ModelList(
        models=[
            ModelResource(
                name=m.name,
                engine=m.engine,  # type: ignore[arg-type]
                type="chat" if m.chat else "base",
                context_length=m.context_length,
                loaded=registry.is_loaded(m.name),
                available="missing" not in m.options,
            )
            for m in registry.list_models()
        ],
        default_model=get_settings().default_model,
    )
