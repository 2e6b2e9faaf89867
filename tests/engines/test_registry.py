"""The model registry: defaults, the models file, errors that name the model, one engine per process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.config import get_settings
from app.engines import registry
from app.engines.registry import (
    ModelLoadError,
    ModelsFileError,
    UnknownModel,
    get_model_info,
    is_loaded,
    list_models,
    load_llm,
)


@pytest.fixture
def models_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Write a models file and point the settings at it (restored after the test)."""

    def write(entries: object, name: str = "models.yaml") -> Path:
        path = tmp_path / name
        path.write_text(entries if isinstance(entries, str) else json.dumps(entries), encoding="utf-8")
        monkeypatch.setenv("ICLAUDIT_MODELS_FILE", str(path))
        get_settings.cache_clear()
        return path

    yield write
    monkeypatch.delenv("ICLAUDIT_MODELS_FILE", raising=False)
    get_settings.cache_clear()


def test_defaults_work_offline() -> None:
    models = {m.name: m for m in list_models()}
    smol = models["smollm2-135m-instruct"]
    assert smol.engine == "transformers" and smol.chat and smol.context_length == 8192
    assert smol.source is not None and Path(smol.source).is_file() and smol.source.endswith(".gguf")
    assert models["oracle"].engine == "oracle"
    assert registry.packaged_minilm_dir() is not None


def test_unknown_model_names_it_and_the_registered_ones() -> None:
    with pytest.raises(UnknownModel) as err:
        get_model_info("gpt-9")
    assert isinstance(err.value, KeyError)
    assert "gpt-9" in str(err.value) and "smollm2-135m-instruct" in str(err.value)
    with pytest.raises(UnknownModel):
        load_llm("gpt-9")


def test_models_file_entries_yaml(models_file) -> None:
    models_file(
        """
- {name: local-llama, engine: transformers, chat: true, source: /models/llama, context_length: 4096, dtype: bfloat16}
- {name: hosted, engine: openai, chat: false, base_url: "http://127.0.0.1:9/v1", model: served, api_key_env: K}
- {name: e5, kind: embedder, engine: sentence-transformers, source: /models/e5}
"""
    )
    models = {m.name: m for m in list_models()}
    assert {"smollm2-135m-instruct", "oracle", "local-llama", "hosted"} <= set(models)
    assert "e5" not in models and "e5" in {e.name for e in registry.list_embedders()}
    llama = models["local-llama"]
    assert (llama.engine, llama.chat, llama.context_length, llama.source) == (
        "transformers",
        True,
        4096,
        "/models/llama",
    )
    assert llama.options == {"dtype": "bfloat16"}
    hosted = models["hosted"]
    assert hosted.source == "http://127.0.0.1:9/v1" and hosted.options["model"] == "served"


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        ({"name": "x"}, "expected a list"),
        ([{"engine": "transformers", "source": "a"}], "'name' is required"),
        ([{"name": "x", "engine": "tgi", "source": "a"}], "engine must be one of"),
        ([{"name": "x", "engine": "transformers"}], "'source'"),
        ([{"name": "x", "engine": "openai", "base_url": "http://h/v1"}], "needs 'base_url' and 'model'"),
        ([{"name": "x", "engine": "vllm", "source": "a", "context_length": 0}], "context_length"),
    ],
)
def test_malformed_models_file_entries(models_file, entries: object, message: str) -> None:
    models_file(entries, name="models.json")
    with pytest.raises(ModelsFileError, match=message):
        list_models()


def test_unparseable_models_file(models_file) -> None:
    models_file("[{not json", name="models.json")
    with pytest.raises(ModelsFileError, match="not valid json"):
        list_models()


def test_load_failure_names_model_and_reason(models_file, tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    models_file([{"name": "broken", "engine": "transformers", "chat": True, "source": str(missing)}])
    with pytest.raises(ModelLoadError) as err:
        load_llm("broken")
    assert err.value.name == "broken"
    assert "'broken' could not be loaded" in str(err.value) and str(missing) in str(err.value)
    assert not is_loaded("broken")


def test_openai_entry_loads_without_contacting_the_server(models_file) -> None:
    models_file(
        [
            {
                "name": "remote",
                "engine": "openai",
                "chat": True,
                "base_url": "http://127.0.0.1:9/v1",
                "model": "m",
            }
        ]
    )
    engine = load_llm("remote")
    assert is_loaded("remote") and load_llm("remote") is engine
    with pytest.raises(ValueError, match="only top-k"):
        engine.next_token_logprobs(["hi"], top_k="all")


@pytest.mark.slow
def test_one_engine_per_model_per_process(smollm2) -> None:
    assert is_loaded("smollm2-135m-instruct")
    assert load_llm("smollm2-135m-instruct") is smollm2


def test_oracle_is_registered_and_refuses_other_prompts() -> None:
    oracle = load_llm("oracle")
    assert is_loaded("oracle") and oracle.name == "oracle"
    with pytest.raises(Exception, match="not a language model"):
        oracle.label_logprobs(["What is 2 + 2?"], ["4"])
