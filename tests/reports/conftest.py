"""Real results for the plot tests: each kind run once per session with cheap settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.audit.runtime import no_progress
from app.audit.standalone import local_context, run_request

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _example(name: str, **changes: Any) -> dict[str, Any]:
    return {**json.loads((EXAMPLES / name).read_text()), **changes}


# kind → a cheap request body of that kind (the examples, scaled down)
REQUESTS: dict[str, dict[str, Any]] = {
    "bound": _example("bound-counts.json"),
    "mia": _example("mia-oracle-eps1.json", trials=20_000),
    "mia_bug": _example("mia-oracle-bug-noise-divided-by-t.json", trials=20_000, llm_calls=100),
    "mia_exact": _example("mia-oracle-eps1.json", estimator="exact", trials=2),
    "mia_leak": _example("likelihood-oracle-records.json"),  # mechanism none: verdict leak
    "iclinf": _example("../docs/results/requests/iclinf-trec-k1.json", shots=2, queries=3),
    "synthetic_generation": _example("synthgen-eps1.json", sequences=2, max_new_tokens=3, batch_size=4),
    "synthetic_generation_svt": _example(
        "synthgen-svt-eps10.json", sequences=2, max_new_tokens=3, batch_size=4
    ),
}


@pytest.fixture(scope="session")
def real_result(data_dir: Path):
    """`real_result(name) -> (request, result)`: the request in REQUESTS run by its kind, once per session."""
    cache: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    def get(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
        if name not in cache:
            body = REQUESTS[name]
            cache[name] = body, run_request(body, local_context(no_progress, data_dir))
        return cache[name]

    return get
