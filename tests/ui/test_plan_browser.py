"""The submit page's plan panel in real headless Chromium against a real server: click Plan beside Submit
and see the calls, tokens, expected time, detectable ε and trials needed of the API's own answer; a
request the API refuses lists its 422 field errors as a submit does."""

from __future__ import annotations

import json
from typing import Any

from app.audit.kinds.registry import kind_module
from testkit.served import Served, log_in


def _mia(trials: int) -> dict[str, Any]:
    """A membership audit of private voting against the exact oracle, on the synthetic records."""
    return {**kind_module("mia").EXAMPLE, "dataset": "synthetic_records", "trials": trials, "seed": 3}


def _value(page, row: str) -> str:
    return page.locator(f"#plan-{row}").get_attribute("data-value") or ""


def test_plan_button_shows_the_apis_plan_and_its_field_errors(page, served: Served) -> None:
    body = _mia(trials=2000)
    with served.client(served.alice) as api:
        answer = api.post("/v1/audits/plan", json=body, timeout=300)
        assert answer.status_code == 200, answer.text
        expected = answer.json()
        listed = len(api.get("/v1/audits").json()["audits"])

    log_in(page, served.alice, "/ui/submit")
    page.locator("#request").fill(json.dumps(body))
    page.locator("#plan").click()
    page.locator("#plan-panel:not([hidden])").wait_for(timeout=300_000)
    panel = page.locator("#plan-panel").inner_text()

    calls = expected["calls"]["model"] + expected["calls"]["endpoint"]
    assert calls > 0 and _value(page, "calls") == str(calls) and f"{calls:,} model calls (exact)" in panel
    # the same request plans the same: counts and power do not depend on the machine's load
    assert _value(page, "needed") == str(expected["power"]["trials_needed"]) != "None"
    detectable = float(_value(page, "detectable"))
    assert abs(detectable - expected["power"]["epsilon_detectable"]) < 1e-9
    assert f"ε ≥ {detectable:.3g}" in panel and "2,000 trials" in panel
    assert float(_value(page, "time")) > 0 and " s" in page.locator("#plan-time").inner_text()
    assert page.locator("#plan-tokens").inner_text().startswith("not counted")  # the oracle has no tokenizer
    assert page.locator("#problems-box").is_hidden()
    with served.client(served.alice) as api:
        assert len(api.get("/v1/audits").json()["audits"]) == listed  # nothing was submitted

    page.locator("#request").fill(json.dumps(body | {"trials": 10**12}))
    page.locator("#plan").click()
    problem = page.locator("#problems li[data-path='$.trials']")
    problem.wait_for()
    assert "trials" in problem.inner_text() and page.locator("#plan-panel").is_hidden()
    assert page.locator("#submit-status").inner_text().startswith("422")
