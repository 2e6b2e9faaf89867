"""The two test tiers: `make test` runs everything (CI); `make test-fast` (`pytest --fast`) leaves out every
test that needs PostgreSQL, Redis, Chromium, a real model or a venv that a setup script builds: a
maintainer's loop between edits.

What a test needs is read from its fixtures, not from lists kept by hand: `NEEDS` maps each fixture that
starts one of those things to the marker that names it, and `mark_needs` gives every test that uses such a
fixture, directly or through its other fixtures, that marker. `--fast` deselects the tests carrying one
of `FAST_LEAVES_OUT`. Under it those fixtures, and the functions that start the servers, refuse (`refuse`),
and a test that loads a real model in this process without them fails (`FastTier`): a test that needs one
and escapes the markers fails loudly instead of slowing the loop down.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

# fixture → the marker of what it starts or loads ([tool.pytest.ini_options] markers in pyproject.toml)
NEEDS = {
    "postgres_server": "postgres",
    "redis_server": "redis",
    "browser": "chromium",
    "smollm2": "slow",
    "minilm": "slow",
    "extras_python": "extras",
    "mlflow_python": "mlflow",
}
FAST_LEAVES_OUT = ("slow", "postgres", "redis", "chromium", "extras", "mlflow")
TIER_ENV = "ICLAUDIT_TEST_TIER"  # "fast" under `--fast`; inherited by the processes the tests start
REAL_ENGINES = ("transformers", "vllm")  # registry engines that load a model's weights


def fast() -> bool:
    return os.environ.get(TIER_ENV) == "fast"


def refuse(what: str) -> None:
    """Fail the calling test under the fast tier: it would start `what`, which the tier leaves out."""
    if fast():
        pytest.fail(
            f"the fast tier (make test-fast) starts no {what}; this test reaches it without a fixture of "
            f"testkit.tiers.NEEDS (or their marker): use that fixture or mark the test",
            pytrace=False,
        )


def mark_needs(items: list[pytest.Item]) -> None:
    """Give each test the markers of the fixtures in its closure (`NEEDS`)."""
    for item in items:
        for marker in sorted({NEEDS[name] for name in getattr(item, "fixturenames", ()) if name in NEEDS}):
            item.add_marker(marker)


def select_fast(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect, in place, the tests carrying a marker the fast tier leaves out."""
    kept, left = [], []
    for item in items:
        (left if any(item.get_closest_marker(m) for m in FAST_LEAVES_OUT) else kept).append(item)
    if left:
        config.hook.pytest_deselected(items=left)
        items[:] = kept


def loaded_real_models() -> set[str]:
    """The real models (language models with weights, sentence-transformers embedders) that this process's
    registry holds."""
    from app.engines import registry
    from app.engines.embedders import SentenceTransformerEmbedder

    llms = {
        name
        for name, e in registry._LLMS.items()
        if getattr(getattr(e, "info", None), "engine", None) in REAL_ENGINES
    }
    embedders = {
        name for name, e in registry._EMBEDDERS.items() if isinstance(e, SentenceTransformerEmbedder)
    }
    return llms | embedders


class FastTier:
    """Plugin registered under `--fast`: a test after which the registry holds a real model it did not hold
    before fails at teardown, naming the model."""

    @pytest.fixture(autouse=True)
    def _no_real_model(self) -> Iterator[None]:
        before = loaded_real_models()
        yield
        new = loaded_real_models() - before
        if new:
            pytest.fail(
                f"the fast tier (make test-fast) loads no real model; this test loaded {sorted(new)}: "
                f"use the smollm2/minilm fixtures (marked slow) or mark the test slow",
                pytrace=False,
            )
