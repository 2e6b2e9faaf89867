"""A finished audit as a JUnit XML report, so CI systems (GitHub Actions, GitLab, Jenkins) show the verdict
natively: one test suite per audit, one test case per verdict row of its typed result (per threat model for
`mia`), each with ε_emp and ε_theory in its system-out. The audit's verdict decides each case's form:

- `violation` and `leak` (the gate's exit 1): a `<failure>` (type `PrivacyViolation` or `PrivacyLeak`)
  on the cases whose bound exceeds the claim (or `max_epsilon`), with the headline as its message; the
  other cases pass. A `calibration` row whose noise cannot give the claim (`theory_violation`) is a
  `PrivacyViolation` failure whatever the measured verdict, as the gate exits 1 for it too;
- `inconclusive` (exit 4): every measured case is `<skipped type="inconclusive" message="Inconclusive: …">`
  — the audit could not have seen a violation, so it neither passes nor fails the claim (docs/ci.md says
  why it is not an `<error>`); the message ends with the result's first next step (`— next: …`, what
  would make it answer) and the body lists them all; the `calibration` case, a check in theory that needs
  no trials, passes;
- `consistent`, or a kind without a verdict (iclinf): the cases pass;
- a FAILED or CANCELLED audit: one `<error>` case (exit 2).

Each case's system-out ends with `verdict = <the outcome word>` (`none` for a kind without a verdict) and
`headline = …`; the suite's properties carry `verdict` and `headline` too.

The layout is the common JUnit schema (testsuites > testsuite > properties, testcase > failure | error |
skipped, system-out) that junitparser and the CI systems read.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.audit.results.base import ResultBase, VerdictRow
from app.audit.stats.outcomes import FAILING

THEORY_ROWS = frozenset({"calibration"})
"""Rows that check the claim in theory (no attack, no trials): an inconclusive measurement does not skip them."""


def gate_outcome(result: ResultBase | None) -> str | None:
    """The outcome the CI gate acts on: the result's `verdict`; for a result stored before verdicts existed,
    `violation` when a row is one; None for a kind that measures no leakage (iclinf) or no result."""
    if result is None:
        return None
    if result.verdict is not None:
        return result.verdict
    return "violation" if result.violated else None


def theory_violation(result: ResultBase | None) -> bool:
    """True when (mia) the noise cannot give the claimed ε even in theory: the claim fails before any attack."""
    return bool(getattr(result, "theory_violation", False))


def gate_fails(result: ResultBase | None) -> bool:
    """What fails the gate (exit 1): a violation, a leak, or a claim its noise cannot give in theory."""
    return gate_outcome(result) in FAILING or theory_violation(result)


def _eps(value: float | None) -> str:
    return "unbounded or none" if value is None else f"{value:.6g}"


def _seconds(audit: Any) -> float:
    started, finished = getattr(audit, "started_at", None), getattr(audit, "finished_at", None)
    if isinstance(started, datetime) and isinstance(finished, datetime):
        return max(0.0, (finished - started).total_seconds())
    return 0.0


def _failed_rows(result: ResultBase, rows: list[VerdictRow], outcome: str | None) -> dict[str, str]:
    """Which rows fail, and as what: {row name: failure type}."""
    failed = {row.name: "PrivacyViolation" for row in rows if row.violation}
    if outcome == "leak":
        allowed = getattr(result, "max_epsilon", None) or 0.0
        for row in rows:
            if row.name not in failed and row.epsilon_theory is None:
                measured = row.epsilon_empirical
                if measured is None or measured > allowed:  # None: an unbounded bound
                    failed[row.name] = "PrivacyLeak"
    if outcome in FAILING and not failed and rows:  # the verdict fails: some case must show it
        failed[rows[0].name] = "PrivacyLeak" if outcome == "leak" else "PrivacyViolation"
    return failed


def _label(result: ResultBase, row: VerdictRow) -> str:
    """What a case's ε is: the calibrated noise's exact ε at δ (the calibration row), the exact accounting of
    what synthetic generation spent, or a measured lower bound (epsilon_empirical, the verdict's bound)."""
    if row.name == "calibration":
        return "epsilon_exact_at_delta"
    if result.kind == "synthetic_generation":
        return "epsilon_spent_exact"
    return "epsilon_empirical"


def _step_text(step: Any) -> str | None:
    """A next step's line, typed or (a stored result that no longer validates) as stored."""
    return step.get("text") if isinstance(step, dict) else getattr(step, "text", None)


def _case(
    suite: ET.Element,
    classname: str,
    row: VerdictRow,
    seconds: float,
    result: ResultBase,
    outcome: str | None,
    failure: str | None,
) -> ET.Element:
    case = ET.SubElement(suite, "testcase", classname=classname, name=row.name, time=f"{seconds:.3f}")
    text = (
        f"{_label(result, row)} = {_eps(row.epsilon_empirical)}\nepsilon_theory = {_eps(row.epsilon_theory)}"
    )
    if outcome is not None and (result.epsilon_detectable is not None or result.epsilon_detectable_unbounded):
        detectable = "unbounded" if result.epsilon_detectable_unbounded else _eps(result.epsilon_detectable)
        text += f"\nepsilon_detectable = {detectable}"
    if row.detail:
        text += f"\n{row.detail}"
    headline = result.headline or ""
    if failure is not None:
        if row.name == "calibration" and row.violation:
            message = (
                f"calibration: the noise cannot give the claimed ε = {_eps(row.epsilon_theory)} even in "
                f"theory (exact ε at δ = {_eps(row.epsilon_empirical)})"
            )
            if outcome in FAILING and headline:
                message = f"{headline} ({message})"
        elif headline:
            message = f"{headline} ({row.name}: ε ≥ {_eps(row.epsilon_empirical)})"
        else:  # a result stored before headlines existed
            message = (
                f"{row.name}: measured ε ≥ {_eps(row.epsilon_empirical)} exceeds the claimed "
                f"ε = {_eps(row.epsilon_theory)}"
            )
        ET.SubElement(case, "failure", type=failure, message=message).text = text
    elif outcome == "inconclusive" and row.name not in THEORY_ROWS:
        message = headline or f"inconclusive: {result.verdict_reason}"
        if not message.lower().startswith("inconclusive"):
            message = f"inconclusive: {message}"
        steps = [t for t in map(_step_text, result.next_steps or []) if isinstance(t, str) and t]
        if steps:
            message += f" — next: {steps[0]}"
        skipped = ET.SubElement(case, "skipped", type="inconclusive", message=message)
        skipped.text = "\n".join([result.verdict_reason or "", *(f"next: {s}" for s in steps)]).strip()
    text += f"\nverdict = {outcome or 'none'}"
    if headline:
        text += f"\nheadline = {headline}"
    ET.SubElement(case, "system-out").text = text
    return case


def junit_xml(audits: Sequence[Any]) -> bytes:
    """The report of finished audits (objects with id, kind, state, result: ResultBase | None, error)."""
    root = ET.Element("testsuites", name="iclaudit")
    keys = ("tests", "failures", "errors", "skipped")
    totals = dict.fromkeys(keys, 0)
    for audit in audits:
        seconds = _seconds(audit)
        suite = ET.SubElement(root, "testsuite", name=f"iclaudit {audit.kind} audit {audit.id}")
        props = ET.SubElement(suite, "properties")
        result: ResultBase | None = audit.result
        succeeded = audit.state == "SUCCEEDED" and result is not None
        outcome = gate_outcome(result) if succeeded else None
        properties = [("audit_id", audit.id), ("kind", audit.kind), ("state", audit.state)]
        if succeeded:
            properties.append(("verdict", outcome or "none"))
            if result is not None and result.headline:
                properties.append(("headline", result.headline))
        for name, value in properties:
            ET.SubElement(props, "property", name=name, value=str(value))
        counts = dict.fromkeys(keys, 0)
        if succeeded and result is not None:
            rows = result.verdicts()
            failed = _failed_rows(result, rows, outcome)
            for row in rows:
                case = _case(
                    suite, f"iclaudit.{audit.kind}", row, seconds, result, outcome, failed.get(row.name)
                )
                counts["tests"] += 1
                counts["failures"] += int(case.find("failure") is not None)
                counts["skipped"] += int(case.find("skipped") is not None)
        else:
            case = ET.SubElement(
                suite, "testcase", classname=f"iclaudit.{audit.kind}", name="audit", time=f"{seconds:.3f}"
            )
            error = getattr(audit, "error", None)
            message = f"audit {audit.id} ended {audit.state}"
            if error is not None:
                message += f": {error.code}: {error.message}"
            ET.SubElement(case, "error", type=str(audit.state), message=message).text = message
            counts["tests"] += 1
            counts["errors"] += 1
        for key, value in counts.items():
            suite.set(key, str(value))
            totals[key] += value
        suite.set("time", f"{seconds:.3f}")
    for key, value in totals.items():
        root.set(key, str(value))
    ET.indent(root)
    return ET.tostring(root, encoding="utf-8", xml_declaration=True)
