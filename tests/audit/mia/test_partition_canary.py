"""Disjoint-Poisson partitioning keeps the canary in (issue 18 §4, fourth defect).

002 Alg. 3 can leave an exemplar out of every partition (about a third of the partitionings leave some
exemplar out; a given one is left out in 4–12 % of them), and the audit's partitioning is drawn once: a
partitioning without the canary made C1 and C0 the same prompts, and the audit measured nothing while claiming
to test the mechanism. No claim here credits amplification by subsampling (private voting, ESA and KSA
calibrate their noise for a record in a partition), so the audit draws Alg. 3 conditioned on the canary being
used, and every mia result says whether it was (`mechanism.canary_included`).
"""

from __future__ import annotations

import numpy as np
import pytest

from app.audit.icl.contexts import holds, partition_disjoint, partition_disjoint_poisson
from app.audit.kinds import mia
from app.audit.results.mia import AuditedMechanism


def test_alg3_alone_leaves_positions_out_and_keep_never_does() -> None:
    rng = np.random.default_rng(5090)
    draws = [partition_disjoint_poisson(8, 4, rng) for _ in range(4000)]
    left_out = np.mean([sum(map(len, b)) < 8 for b in draws])
    assert 0.25 < left_out < 0.45  # the docstring used to say every exemplar is used
    assert 0.05 < np.mean([not holds(b, 3) for b in draws]) < 0.15
    for n, parts in [(1, 4), (2, 2), (8, 4), (40, 4), (64, 16), (5, 12)]:
        for _ in range(500):
            keep = int(rng.integers(n))
            blocks = partition_disjoint_poisson(n, parts, rng, keep=keep)
            joined = np.concatenate(blocks)
            assert holds(blocks, keep) and len(blocks) == parts
            assert len(joined) == len(set(joined.tolist())) and set(joined.tolist()) <= set(range(n))
    assert all(holds(partition_disjoint(10, 4, rng, keep=k), k) for k in range(10))


def test_keep_is_alg3_conditioned_on_the_record_being_used() -> None:
    """Rejection sampling: the partition sizes given the record is in match Alg. 3's draws that hold it."""
    n, parts, keep = 8, 4, 5
    rng = np.random.default_rng(5091)
    kept = [partition_disjoint_poisson(n, parts, rng, keep=keep) for _ in range(6000)]
    free = [b for b in (partition_disjoint_poisson(n, parts, rng) for _ in range(7000)) if holds(b, keep)]
    for k in range(parts):
        a = np.mean([len(b[k]) for b in kept])
        c = np.mean([len(b[k]) for b in free])
        assert a == pytest.approx(c, abs=0.08)
    where_a = np.bincount([next(i for i, b in enumerate(bs) if keep in b) for bs in kept], minlength=parts)
    where_c = np.bincount([next(i for i, b in enumerate(bs) if keep in b) for bs in free], minlength=parts)
    assert where_a / where_a.sum() == pytest.approx(where_c / where_c.sum(), abs=0.03)


def _body(seed: int, **mechanism) -> dict:
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "oracle",
        "seed": seed,
        "epsilon": 4.0,
        "llm_calls": 20,
        "trials": 2000,
        "mechanism": {
            "name": "private_voting",
            "partitions": 4,
            "calibration": "analytic",
            "partitioning": "disjoint_poisson",
            **mechanism,
        },
    }


def test_every_disjoint_poisson_audit_holds_the_canary_and_says_so(oracle_ctx) -> None:
    """Seeds 5000–5059: before, the seeds whose partitioning left the canary out (about 1 in 11 at 8
    exemplars in 4 partitions) audited C1 = C0; now every audit's C1 partitions hold the canary, its C0
    partitions differ from them in exactly that one, and the result says canary_included."""
    for seed in range(5000, 5060):
        request = mia.Request.model_validate(_body(seed))
        setup = mia._setup(request, oracle_ctx)
        canary = setup.contexts.canary
        assert any(e is canary for part in setup.parts_in for e in part), seed
        assert setup.mechanism.canary_included is True
        differ = [i for i, (a, b) in enumerate(zip(setup.parts_in, setup.parts_out, strict=True)) if a != b]
        assert len(differ) == 1 and canary in setup.parts_in[differ[0]]


@pytest.mark.parametrize(
    "body",
    [
        _body(5100),
        _body(5101, partitioning="disjoint"),
        _body(5102) | {"estimator": "exact"},
        _body(5103, name="none", shots_per_partition=4) | {"epsilon": 1.0},
    ],
    ids=["disjoint_poisson", "disjoint", "exact", "plain_icl"],
)
def test_every_mia_result_reports_canary_included(oracle_ctx, body: dict) -> None:
    result = mia.run(mia.Request.model_validate(body), oracle_ctx).stored()
    assert result["mechanism"]["canary_included"] is True
    assert AuditedMechanism.model_validate(result["mechanism"]).canary_included is True


def test_a_partitioning_without_the_canary_is_reported(oracle_ctx, monkeypatch) -> None:
    """Were a partitioner to leave the canary out (Alg. 3 without `keep`), the result says so."""
    from app.audit.icl.contexts import PARTITIONERS

    def alg3_unconditioned(n, parts, rng, keep=None):
        blocks = partition_disjoint_poisson(n, parts, rng)
        return [b[b != keep] for b in blocks]  # and never the canary's position

    monkeypatch.setitem(PARTITIONERS, "disjoint_poisson", alg3_unconditioned)
    result = mia.run(mia.Request.model_validate(_body(5110)), oracle_ctx).stored()
    assert result["mechanism"]["canary_included"] is False
    assert not result["violation"] and result.get("verdict", "inconclusive") == "inconclusive"
