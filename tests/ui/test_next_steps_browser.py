"""The headline's second line on the audit page (app/ui/static/js/audit.js), in real headless Chromium against
a real server: an inconclusive audit (25 trials per side claiming ε = 2, on the oracle) shows its computed next
step under the headline, the request field it sets kept on the line; an `until_answer` chain's audits link
to each other."""

from __future__ import annotations

import json
import time

from testkit.client import underpowered_mia_request, wait_for
from testkit.served import VERDICT_REQUESTS, Served, log_in, offline_context


def test_an_inconclusive_audits_next_step_is_the_headlines_second_line(browser, served: Served) -> None:
    with served.client(served.alice) as api:
        response = api.post("/v1/audits", json=VERDICT_REQUESTS["inconclusive"])
        assert response.status_code == 202, response.text
        audit_id, deadline = response.json()["id"], time.monotonic() + 300
        while (audit := api.get(f"/v1/audits/{audit_id}").json())["state"] != "SUCCEEDED":
            assert audit["state"] in ("PENDING", "RUNNING") and time.monotonic() < deadline, audit
            time.sleep(0.2)
    step = audit["result"]["next_steps"][0]
    context = offline_context(browser, served.url, width=390)
    try:
        page = context.new_page()
        log_in(page, served.alice)
        page.goto(f"/ui/audits/{audit_id}")
        page.locator("#verdict:not([hidden]) #next-steps li").first.wait_for()
        first = page.locator("#next-steps li").first
        assert " ".join(first.inner_text().split()) == f"Next: {step['text']}"
        assert json.loads(first.get_attribute("data-set") or "null") == step["set"]
        # the second line: right under the headline, above the reason
        tops = page.evaluate(
            "() => ['#headline', '#next-steps'].map((s) => document.querySelector(s).getBoundingClientRect().top)"
        )
        assert tops[0] < tops[1]
        width = page.evaluate("() => document.querySelector('#next-steps').scrollWidth")
        assert width <= 390  # it wraps on a phone
    finally:
        context.close()


def test_a_chains_audits_link_to_each_other(browser, served: Served) -> None:
    """`until_answer`: the inconclusive audit's page links to the audit that took its next step, and
    that audit's page links back."""
    with served.client(served.alice) as api:
        first = api.post("/v1/audits", json=underpowered_mia_request(max_seconds=300)).json()["id"]
        second = wait_for(api.get, first, timeout=300)["followed_by"]
        wait_for(api.get, second, timeout=300)
    context = offline_context(browser, served.url)
    try:
        page = context.new_page()
        log_in(page, served.alice)
        page.goto(f"/ui/audits/{first}")
        forward = page.locator("#verdict:not([hidden]) #followed-by")
        forward.wait_for()
        assert forward.inner_text() == second[:8] and forward.get_attribute("title") == second
        forward.click()
        back = page.locator("#verdict:not([hidden]) #follows")
        back.wait_for()
        assert page.url.endswith(f"/ui/audits/{second}") and back.get_attribute("title") == first
        assert page.locator("#followed-by").count() == 0
    finally:
        context.close()
