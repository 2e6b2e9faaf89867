"""The request as the audit page and the report show it (folded, its null fields left out: `compact`) is the same
request: validated again, it stores exactly what the full one stores. Checked on every kind's example and every
example file; and a request that claims nothing (mechanism none or prompt_defense) stores no claimed ε."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from app.audit.kinds.registry import kind_module
from app.reports.html import compact
from app.schemas.audits import claimed_epsilon, request_adapter, request_examples

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
BODIES = {f"{kind} example": ex["value"] for kind, ex in request_examples().items()} | {
    path.name: json.loads(path.read_text()) for path in sorted(EXAMPLES.glob("*.json"))
}


def _stored(body: dict[str, Any]) -> dict[str, Any]:
    """What the service stores for a request body (app/api/routes/audits.py: the validated model, as JSON)."""
    return request_adapter().validate_python(body).model_dump(mode="json")


@pytest.mark.parametrize("name", sorted(BODIES))
def test_the_compact_request_is_the_same_request(name: str) -> None:
    stored = _stored(BODIES[name])
    shown = compact(stored)
    assert None not in _leaves(shown)
    assert _stored(shown) == stored


def _leaves(value: Any) -> list[Any]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [value]


def test_a_request_that_claims_nothing_stores_no_claim() -> None:
    base = {**kind_module("mia").EXAMPLE, "dataset": "synthetic_records", "attack": {"name": "inquiry"}}
    for mechanism in ({"name": "none"}, {"name": "prompt_defense", "defense_level": 1}):
        stored = _stored({**base, "mechanism": mechanism, "epsilon": 3})
        assert stored["epsilon"] is None and claimed_epsilon(stored) is None, mechanism
        assert _stored(compact(stored)) == stored
    claimed = _stored(base)
    assert (
        claimed["epsilon"] == 1.0 and claimed_epsilon(claimed) == 1.0
    )  # the default claim of private voting
    # null on a claiming mechanism is the default claim, as if left out (the schema allows null)
    assert _stored({**base, "epsilon": None})["epsilon"] == 1.0
