"""The two test tiers: `make test` runs everything (CI); `make test-fast` (`pytest --fast`) leaves out every
test that needs PostgreSQL, Redis, Chromium, a real model or a venv that a setup script builds, and every
test that took `FAST_SECONDS` or more when last measured: a maintainer's loop between edits.

What a test needs is read from its fixtures, not from lists kept by hand: `NEEDS` maps each fixture that
starts one of those things to the marker that names it, and `mark_needs` gives every test that uses such a
fixture, directly or through its other fixtures, that marker. `--fast` deselects the tests carrying one
of `FAST_LEAVES_OUT`. Under it those fixtures, and the functions that start the servers, refuse (`refuse`),
and a test that loads a real model in this process without them fails (`FastTier`): a test that needs one
and escapes the markers fails loudly instead of slowing the loop down.

What a test costs is read from `DURATIONS` (tests/durations.json: node id → seconds of setup, call and
teardown), which `pytest --store-durations` writes from the run it ends (`make test-durations` measures the
fast tier afresh, twice, so that a module fixture's set-up is charged to the test that now pays it). A test
not in the file stays in the fast tier until it is measured. Like pytest-split's `.test_durations`, the file
is measured, never edited by hand.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path

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
DURATIONS = Path(__file__).resolve().parents[1] / "tests" / "durations.json"
FAST_SECONDS = 1.0  # a test measured at this or longer (setup + call + teardown) is left to `make test`


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


def read_durations(path: Path = DURATIONS) -> dict[str, float]:
    return json.loads(path.read_text()) if path.exists() else {}


def select_fast(config: pytest.Config, items: list[pytest.Item], durations: dict[str, float]) -> None:
    """Deselect, in place, the tests carrying a marker the fast tier leaves out and those `durations`
    measured at `FAST_SECONDS` or more."""
    kept, left = [], []
    for item in items:
        slow = durations.get(item.nodeid, 0.0) >= FAST_SECONDS
        (left if slow or any(item.get_closest_marker(m) for m in FAST_LEAVES_OUT) else kept).append(item)
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


class DurationRecorder:
    """Plugin registered under `--store-durations`: at the end of the session, each test that ran gets its
    setup + call + teardown seconds in `path` (under xdist the controller sees every worker's reports);
    the other tests keep their entries."""

    def __init__(self, path: Path = DURATIONS) -> None:
        self.path = path
        self.seconds: defaultdict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):  # an xdist worker: the controller writes the file
            return
        merged = read_durations(self.path) | {k: round(v, 3) for k, v in self.seconds.items()}
        self.path.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")
