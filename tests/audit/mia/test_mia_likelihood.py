"""The likelihood attack (app/audit/attacks/likelihood.py) and the per-record table (app/audit/stats/records.py)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from app.audit.kinds.mia import Request, run
from app.audit.runtime import RunContext
from app.audit.standalone import LocalDatasets, LocalEngines, default_data_dir
from app.audit.stats.records import paired_p_value, record_table, records_csv


def _ctx() -> RunContext:
    return RunContext(engines=LocalEngines(), datasets=LocalDatasets(default_data_dir()))


def _body(**attack) -> dict:
    return {
        "kind": "mia",
        "dataset": "synthetic_records",
        "model": "oracle",
        "mechanism": {"name": "none", "shots_per_partition": 2},
        "attack": {"name": "likelihood", "threat_model": "white_box", **attack},
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"attack": {"name": "likelihood"}}, "attack.threat_model"),  # plain ICL: white box only
        (
            {
                "mechanism": {"name": "private_voting"},
                "attack": {"name": "likelihood", "secret": "continuation"},
            },
            "attack.secret",
        ),
        ({"mechanism": {"name": "esa"}, "attack": {"name": "likelihood"}}, "attack.name"),
        ({"attack": {"name": "likelihood", "threat_model": "white_box", "canaries": 0}}, "canaries"),
    ],
)
def test_bad_likelihood_requests_name_the_field(change, field) -> None:
    with pytest.raises(ValidationError, match=field.replace(".", r"\.")):
        Request.model_validate(_body() | change)


def test_twenty_canaries_give_a_per_record_table_on_the_oracle() -> None:
    result = run(Request.model_validate(_body(canaries=20, contexts=10, reference=True)), _ctx()).stored()
    white = result["white_box"]
    assert white["tpr"] == 1.0 and white["fpr"] == 0.0 and white["epsilon_lower"] > 2
    assert white["tpr_at_fpr"]["0.01"] == 1.0  # 200 C0 trials resolve FPR = 1e-2
    rows = result["records"]
    assert [r["rank"] for r in rows] == list(range(1, 21))
    assert len({r["record_id"] for r in rows}) == 20
    # the oracle copies every canary: 10 of 10 positive gaps, p = 2^-10 ≤ 0.05/20, so every record is flagged
    assert all(r["flagged"] and r["p_value"] == pytest.approx(2.0**-10) and r["trials"] == 10 for r in rows)
    lines = records_csv(rows).splitlines()
    assert lines[0].startswith("rank,record_id,") and len(lines) == 21
    assert result["likelihood"]["canaries"] == 20 and result["trials"] == 200


def test_null_records_are_not_flagged_and_leaking_ones_are() -> None:
    """Seeded: 50 records × 30 paired trials with no effect, 5 with a clear one."""
    rng = np.random.default_rng(3)
    n, k = 55, 30
    record = np.repeat(np.arange(n), k)
    s_out = rng.normal(size=n * k)
    s_in = rng.normal(size=n * k) + np.where(record >= 50, 2.0, 0.0)
    records = [{"record_id": f"r{i}"} for i in range(n)]
    rows = record_table(records, s_in, s_out, record, confidence=0.95, delta=1e-5, assumption="none")
    flagged = {r["record_id"] for r in rows if r["flagged"]}
    assert flagged == {f"r{i}" for i in range(50, 55)}
    assert {r["record_id"] for r in rows[:5]} == flagged
    assert paired_p_value(np.ones(4), np.ones(4)) == 1.0


def test_smollm2_context_raises_the_canary_likelihood_within_prefix_reuse(smollm2) -> None:
    body = _body(canaries=2, contexts=1, reference=True) | {"model": "smollm2-135m-instruct", "seed": 7}
    body["mechanism"] = {"name": "none", "shots_per_partition": 1}
    result = run(Request.model_validate(body), _ctx()).stored()
    cost = result["likelihood"]["cost"]
    assert cost["prompt_tokens"] < cost["from_scratch_tokens"]
    assert cost["forward_passes"] <= cost["from_scratch_forward_passes"]
    # copying from the context: the secret half of the record gains many nats when the record is in it
    assert all(r["gap_mean"] > 5 for r in result["records"])
