"""A finished audit as a JUnit XML report, so CI systems (GitHub Actions, GitLab, Jenkins) show the verdict
natively: one test suite per audit, one test case per verdict row of its typed result (per threat model for
`mia`), each with ε_emp and ε_theory; a violation is a `<failure>`, a FAILED or CANCELLED audit an `<error>`.

The layout is the common JUnit schema (testsuites > testsuite > properties, testcase > failure | error,
system-out) that junitparser and the CI systems read.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from app.audit.results.base import ResultBase, Verdict


def _eps(value: float | None) -> str:
    return "unbounded or none" if value is None else f"{value:.6g}"


def _seconds(audit: Any) -> float:
    started, finished = getattr(audit, "started_at", None), getattr(audit, "finished_at", None)
    if isinstance(started, datetime) and isinstance(finished, datetime):
        return max(0.0, (finished - started).total_seconds())
    return 0.0


def _case(suite: ET.Element, classname: str, row: Verdict, seconds: float) -> ET.Element:
    case = ET.SubElement(suite, "testcase", classname=classname, name=row.name, time=f"{seconds:.3f}")
    text = f"epsilon_empirical = {_eps(row.epsilon_empirical)}\nepsilon_theory = {_eps(row.epsilon_theory)}"
    if row.detail:
        text += f"\n{row.detail}"
    if row.violation:
        failure = ET.SubElement(
            case,
            "failure",
            type="PrivacyViolation",
            message=f"{row.name}: measured ε ≥ {_eps(row.epsilon_empirical)} exceeds the claimed "
            f"ε = {_eps(row.epsilon_theory)}",
        )
        failure.text = text
    ET.SubElement(case, "system-out").text = text + f"\nverdict = {'VIOLATION' if row.violation else 'ok'}"
    return case


def junit_xml(audits: Sequence[Any]) -> bytes:
    """The report of finished audits (objects with id, kind, state, result: ResultBase | None, error)."""
    root = ET.Element("testsuites", name="iclaudit")
    totals = {"tests": 0, "failures": 0, "errors": 0}
    for audit in audits:
        seconds = _seconds(audit)
        suite = ET.SubElement(root, "testsuite", name=f"iclaudit {audit.kind} audit {audit.id}")
        props = ET.SubElement(suite, "properties")
        for name, value in (("audit_id", audit.id), ("kind", audit.kind), ("state", audit.state)):
            ET.SubElement(props, "property", name=name, value=str(value))
        counts = {"tests": 0, "failures": 0, "errors": 0}
        result: ResultBase | None = audit.result
        if audit.state == "SUCCEEDED" and result is not None:
            for row in result.verdicts():
                _case(suite, f"iclaudit.{audit.kind}", row, seconds)
                counts["tests"] += 1
                counts["failures"] += int(row.violation)
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
