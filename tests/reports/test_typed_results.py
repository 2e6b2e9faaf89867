"""Every kind's real result validates against its typed model (app/audit/results), keeps the fields the
model does not declare, and gives the CI gate's verdict rows."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.audit.kinds.registry import KINDS, result_model, validate_result
from app.audit.results.mia import MiaAuditResult

CASES = ["bound", "mia", "mia_bug", "mia_exact"] + [
    pytest.param(name, marks=pytest.mark.slow)  # these kinds run the real SmolLM2
    for name in ("iclinf", "synthetic_generation", "synthetic_generation_svt")
]


@pytest.mark.parametrize("name", CASES)
def test_real_results_validate_and_round_trip(real_result, name: str) -> None:
    request, result = real_result(name)
    typed = validate_result(request["kind"], result)
    assert typed.kind == request["kind"]
    dumped = typed.model_dump(mode="json", exclude_unset=True)
    dumped.pop("kind")
    assert dumped == {k: v for k, v in result.items() if k != "kind"}  # nothing lost, nothing invented
    rows = typed.verdicts()
    assert rows and all(r.name for r in rows)


def test_mia_verdict_rows_follow_the_threat_models(real_result) -> None:
    _, clean = real_result("mia")
    _, bug = real_result("mia_bug")
    clean_rows = validate_result("mia", clean).verdicts()
    names = [r.name for r in clean_rows]
    assert names[:2] == ["black_box", "white_box"]
    assert names[2:] == (["calibration"] if clean.get("calibration_valid") is not None else [])
    assert not any(r.violation for r in clean_rows)
    assert all(r.epsilon_theory == clean["epsilon_theory"] for r in clean_rows)
    for row in clean_rows[:2]:
        assert row.epsilon_empirical == clean[row.name]["epsilon_lower"]  # the bound the verdict used
    typed_bug = validate_result("mia", bug)
    assert typed_bug.violated and typed_bug.violated == bug["violation"]


def test_every_field_is_described_and_extras_pass_through() -> None:
    for kind in KINDS:
        schema = result_model(kind).model_json_schema()
        props = dict(schema["properties"])
        for name, defs in schema.get("$defs", {}).items():
            props.update({f"{name}.{k}": v for k, v in defs.get("properties", {}).items()})
        undescribed = [name for name, prop in props.items() if name != "kind" and not prop.get("description")]
        assert not undescribed, (kind, undescribed)
    later = validate_result("iclinf", {"iclinf": 0.1, "per_position": [0.1], "added_by_science": 3})
    assert later.model_extra == {"added_by_science": 3}


def test_a_declared_field_of_the_wrong_type_is_refused() -> None:
    with pytest.raises(ValidationError):
        MiaAuditResult.model_validate({"estimator": "exact", "violation": "maybe"})


def test_each_example_result_is_valid_for_its_kind() -> None:
    import importlib

    for kind in KINDS:
        example = importlib.import_module(f"app.audit.results.{kind}").EXAMPLE
        assert validate_result(kind, example).kind == kind
