"""The JUnit report and the gate's exit code for each of the four verdicts, from real results (the oracle
engine, no server), parsed back with junitparser as a CI system would: violation and leak are failures,
inconclusive is its own `<skipped type="inconclusive">` (its message ending with the first next step),
consistent passes; the headline is in the message and `verdict = <outcome>` in each case's system-out."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from junitparser import Failure, JUnitXml, Skipped

from app.audit.results.iclinf import EXAMPLE as ICLINF_EXAMPLE
from app.audit.standalone import run_request
from app.reports.junit import junit_xml
from iclaudit.cli.exits import Exit, exit_code
from iclaudit.client import Audit

ROOT = Path(__file__).resolve().parents[2]

REQUESTS = {
    "violation": ("mia-oracle-bug-noise-divided-by-t.json", {}),
    "leak": ("likelihood-oracle-records.json", {}),
    "inconclusive": ("mia-oracle-eps1.json", {"trials": 25, "epsilon": 2}),
    "consistent": ("mia-oracle-eps1.json", {}),
}


def _audit(kind: str, result: dict[str, Any] | None, state: str = "SUCCEEDED", **extra: Any) -> Audit:
    now = datetime.now(UTC)
    return Audit.model_validate(
        {
            "id": "0123456789abcdef0123456789abcdef",
            "kind": kind,
            "state": state,
            "progress": {"stage": "done", "fraction": 1.0},
            "result": None if result is None else {"kind": kind, **result},
            "started_at": now,
            "finished_at": now,
            **extra,
        }
    )


@pytest.fixture(scope="module")
def audits() -> dict[str, Audit]:
    """One real finished audit per verdict."""
    out = {}
    for outcome, (name, changes) in REQUESTS.items():
        request = {**json.loads((ROOT / "examples" / name).read_text()), **changes}
        result = run_request(request)
        assert result["verdict"] == outcome, (name, result["verdict_reason"])
        out[outcome] = _audit(request["kind"], result)
    return out


def _parse(audit: Audit, tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    path = tmp_path / "report.xml"
    path.write_bytes(junit_xml([audit]))
    (suite,) = list(JUnitXml.fromfile(str(path)))
    return suite, {case.name: case for case in suite}


def test_violation_is_a_failure_with_the_headline(audits: dict[str, Audit], tmp_path: Path) -> None:
    audit = audits["violation"]
    suite, cases = _parse(audit, tmp_path)
    assert exit_code(audit) == Exit.VIOLATION == 1
    headline = audit.result.headline
    props = {p.name: p.value for p in suite.properties()}
    assert props["verdict"] == "violation" and props["headline"] == headline
    failed = {name for name, case in cases.items() if not case.is_passed}
    assert failed == {"black_box", "white_box"} and suite.failures == 2 and suite.skipped == 0
    for name in failed:
        (failure,) = cases[name].result
        assert isinstance(failure, Failure) and failure.type == "PrivacyViolation"
        assert failure.message.startswith(headline) and name in failure.message
    for case in cases.values():
        assert "verdict = violation" in case.system_out and f"headline = {headline}" in case.system_out


def test_leak_is_a_failure_like_a_violation(audits: dict[str, Audit], tmp_path: Path) -> None:
    audit = audits["leak"]
    suite, cases = _parse(audit, tmp_path)
    assert exit_code(audit) == Exit.VIOLATION == 1
    assert audit.result.headline.startswith("Plain ICL leaks: ε ≥ ")
    (case,) = cases.values()
    (failure,) = case.result
    assert isinstance(failure, Failure) and failure.type == "PrivacyLeak"
    assert failure.message.startswith(audit.result.headline)
    assert "verdict = leak" in case.system_out and suite.failures == 1


def test_inconclusive_is_skipped_not_failed_nor_an_error(audits: dict[str, Audit], tmp_path: Path) -> None:
    audit = audits["inconclusive"]
    suite, cases = _parse(audit, tmp_path)
    assert exit_code(audit) == Exit.INCONCLUSIVE == 4
    assert exit_code(audit, allow_inconclusive=True) == Exit.OK
    headline = audit.result.headline
    assert headline.startswith("Inconclusive: with 25 trials per side")
    assert suite.failures == 0 and suite.errors == 0 and suite.skipped == 2
    for name in ("black_box", "white_box"):
        (skipped,) = cases[name].result
        assert isinstance(skipped, Skipped) and skipped.type == "inconclusive"
        # the headline, then what would make the audit answer (its first computed next step)
        assert skipped.message == f"{headline} — next: {audit.result.next_steps[0].text}"
        assert skipped.text.endswith(f"next: {audit.result.next_steps[0].text}")
        assert "verdict = inconclusive" in cases[name].system_out
        assert f"epsilon_detectable = {audit.result.epsilon_detectable:.6g}" in cases[name].system_out
    assert cases["calibration"].is_passed  # the theory check needs no trials: not skipped


def test_consistent_passes(audits: dict[str, Audit], tmp_path: Path) -> None:
    audit = audits["consistent"]
    suite, cases = _parse(audit, tmp_path)
    assert exit_code(audit) == Exit.OK == 0
    assert {p.name: p.value for p in suite.properties()}["verdict"] == "consistent"
    assert suite.failures == suite.errors == suite.skipped == 0 and len(cases) == 3
    for case in cases.values():
        assert case.is_passed and "verdict = consistent" in case.system_out


def test_the_four_audits_in_one_report_add_up(audits: dict[str, Audit], tmp_path: Path) -> None:
    path = tmp_path / "all.xml"
    path.write_bytes(junit_xml(list(audits.values())))
    xml = JUnitXml.fromfile(str(path))
    assert (xml.tests, xml.failures, xml.errors, xml.skipped) == (10, 3, 0, 2)


def test_a_theory_violation_fails_the_gate_whatever_the_measurement(
    audits: dict[str, Audit], tmp_path: Path
) -> None:
    """The noise cannot give the claim even in theory (classic calibration past its range): exit 1 and a
    failed `calibration` case, even when the measured verdict is consistent."""
    result = audits["consistent"].result.model_dump()
    result.update(calibration_valid=False, theory_violation=True, epsilon_exact_at_delta=1.2)
    audit = _audit("mia", result)
    assert exit_code(audit) == Exit.VIOLATION
    _, cases = _parse(audit, tmp_path)
    (failure,) = cases["calibration"].result
    assert failure.type == "PrivacyViolation" and "even in theory" in failure.message
    assert cases["black_box"].is_passed and cases["white_box"].is_passed
    # the calibration case's ε is the noise's exact ε at δ, labelled as such (not a measurement)
    assert "epsilon_exact_at_delta = 1.2" in cases["calibration"].system_out
    assert "epsilon_empirical" not in cases["calibration"].system_out


def test_a_kind_without_a_verdict_passes_and_says_so(tmp_path: Path) -> None:
    audit = _audit("iclinf", dict(ICLINF_EXAMPLE))
    assert audit.result.verdict is None and exit_code(audit) == Exit.OK
    _, cases = _parse(audit, tmp_path)
    (case,) = cases.values()
    assert case.is_passed and "verdict = none" in case.system_out


def test_a_result_stored_before_verdicts_still_gates_on_its_rows(
    audits: dict[str, Audit], tmp_path: Path
) -> None:
    old = audits["violation"].result.model_dump()
    for key in (
        "verdict",
        "headline",
        "verdict_reason",
        "epsilon_detectable",
        "epsilon_detectable_unbounded",
    ):
        old.pop(key, None)
    audit = _audit("mia", old)
    assert exit_code(audit) == Exit.VIOLATION
    suite, cases = _parse(audit, tmp_path)
    assert suite.failures == 2 and "verdict = violation" in cases["black_box"].system_out
    assert "exceeds the claimed ε = 1" in cases["black_box"].result[0].message


def test_a_failed_audit_is_an_error(tmp_path: Path) -> None:
    audit = _audit("mia", None, state="FAILED", error={"code": "DATASET", "message": "no such label"})
    assert exit_code(audit) == Exit.AUDIT_FAILED
    suite, cases = _parse(audit, tmp_path)
    assert suite.errors == 1 and cases["audit"].result[0].type == "FAILED"


def test_the_headline_is_coloured_by_outcome(audits: dict[str, Audit]) -> None:
    """The CLI's last line: red for a violation or a leak, yellow when inconclusive, green when consistent."""
    from iclaudit.cli.rendering import headline_text

    colours = {"violation": "red", "leak": "red", "inconclusive": "yellow", "consistent": "green"}
    for outcome, audit in audits.items():
        text = headline_text(audit.result, audit.kind)
        assert text.plain == audit.result.headline and colours[outcome] in str(text.style)
    iclinf = _audit("iclinf", dict(ICLINF_EXAMPLE))
    assert "No verdict" in headline_text(iclinf.result, "iclinf").plain
