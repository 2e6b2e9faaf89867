"""The dashboard in real headless Chromium against a real server (auth on, SQLite): log in once with a key,
submit from the page, watch the progress bar move and the state become SUCCEEDED without a reload, see
the charts drawn, filter the list, cancel a running audit, be refused another tenant's audit; /docs and
/redoc render offline."""

from __future__ import annotations

import json
import time
from typing import Any

from app.audit.kinds.registry import kind_module
from testkit.held_endpoint import HeldEndpoint
from testkit.served import Served, log_in


def _mia(trials: int, seed: int = 0) -> dict[str, Any]:
    """A real membership audit of private voting against the exact oracle, on the synthetic records."""
    return {**kind_module("mia").EXAMPLE, "dataset": "synthetic_records", "trials": trials, "seed": seed}


def _drawn_pixels(page, selector: str) -> int:
    """Non-blank pixels of the chart's canvas (uPlot draws there): proof the chart was drawn, not just named."""
    return page.eval_on_selector(
        f"{selector} canvas",
        """c => { const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                  let n = 0; for (let i = 3; i < d.length; i += 4) if (d[i] > 0) n++; return n; }""",
    )


def _fraction(page) -> float | None:
    bar = page.locator("#progress .progress")
    return float(bar.get_attribute("data-fraction") or 0) if bar.count() else None


def _watch(page, fractions: list[float], until, what: str, timeout: float = 120) -> None:
    """Record the bar's fraction every 0.1 s until `until()` holds (else fail, naming `what`)."""
    deadline = time.monotonic() + timeout
    while True:
        if (fraction := _fraction(page)) is not None:
            fractions.append(fraction)
        if until():
            return
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s; the bar showed {fractions}"
        time.sleep(0.1)


# The live audit: 300 calls per context to the gated endpoint, in 3 chunks of 100 calls per context (200 calls),
# each followed by a progress report of its fraction (http_endpoint.call_batch, stats.trials.run_trials).
LIVE_CHUNKS, CHUNK_CALLS = 3, 200


def test_submit_from_the_page_watch_it_live_and_see_the_charts(
    page, served: Served, gate: HeldEndpoint
) -> None:
    """The bar moves because the test moves the audit, one chunk of calls at a time through the gate (issue 23):
    after each chunk the page must show the audit's new fraction before the next chunk is let through, so it
    sees every step on any machine; then the audit runs out and the page shows SUCCEEDED without a reload."""
    log_in(page, served.alice)
    page.get_by_role("link", name="Submit an audit").click()
    page.locator("#request").fill(json.dumps(gate.request(trials=LIVE_CHUNKS * CHUNK_CALLS // 2)))
    page.locator("#submit").click()
    page.wait_for_url("**/ui/audits/*")
    page.evaluate("window.__sameDocument = true")  # survives only if the page is never reloaded

    fractions: list[float] = []
    for chunk in range(LIVE_CHUNKS):
        gate.wait_held(chunk * CHUNK_CALLS + 1)  # the audit is RUNNING, held before this chunk's first call
        if chunk:  # the last chunk's fraction was written before this call: the page shows it
            shown = max(fractions, default=0.0)
            _watch(
                page,
                fractions,
                lambda s=shown: (_fraction(page) or 0) > s,
                f"the fraction after chunk {chunk}",
            )
        # progress is written at most every 0.25 s within a stage (jobs/progress.py): let the next chunk's
        # report come later than that after this one, so none is skipped
        time.sleep(0.5)
        gate.allow(CHUNK_CALLS)
    _watch(page, fractions, lambda: page.locator("#summary [data-state=SUCCEEDED]").count() > 0, "SUCCEEDED")
    assert page.evaluate("window.__sameDocument") is True
    fractions.append(_fraction(page) or 0)
    # Each stage runs its own 0 → 1, so the bar moves (values strictly between 0 and 1) and ends full.
    assert any(0 < f < 1 for f in fractions) and len(set(fractions)) >= 3, (
        f"the bar did not move: {fractions}"
    )
    assert fractions[-1] == 1.0

    page.locator("#chart-roc[data-drawn=true]").wait_for()
    page.locator("#chart-epsilon[data-drawn=true]").wait_for()
    assert _drawn_pixels(page, "#chart-roc") > 2000
    assert _drawn_pixels(page, "#chart-epsilon") > 2000
    rows = page.locator("#threat-models tbody tr")
    assert (
        rows.count() >= 8 and "ε lower bound the verdict used" in page.locator("#threat-models").inner_text()
    )
    assert page.locator("#verdict-badge").inner_text().lower() in (
        "violation",
        "leak",
        "inconclusive",
        "consistent",
    )
    assert "ε empirical" in page.locator("#figures").inner_text()  # the other ε figures: under Details
    assert "iclaudit submit" in page.locator("#reproduce-cli").inner_text()
    assert "/v1/audits" in page.locator("#reproduce-curl").inner_text()
    with page.expect_download() as download:
        page.locator("#download-png").click()
    assert download.value.suggested_filename.endswith(".png")


def test_a_422_is_shown_beside_the_field_it_names(page, served: Served, gate: HeldEndpoint) -> None:
    """The audit submitted with the keyboard at the end stays PENDING, by construction: every worker is held
    at the gate (issue 23), so it is cancelled before it runs (an iclinf audit, minutes of CPU)."""
    log_in(page, served.alice, "/ui/submit")
    body = {**_mia(trials=1000), "epsilon": -1}
    page.locator("#request").fill(json.dumps(body, indent=2))
    page.locator("#submit").click()
    problem = page.locator("#problems li[data-path='$.epsilon']")
    problem.wait_for()
    assert "line" in problem.inner_text()
    selected = page.evaluate(
        "() => { const t = document.getElementById('request'); return t.value.slice(t.selectionStart, t.selectionEnd); }"
    )
    assert '"epsilon": -1' in selected  # the named field's line is selected in the editor

    unlabelled = page.evaluate(
        "() => [...document.querySelectorAll('input, select, textarea')]"
        ".filter((e) => !e.labels.length && !e.getAttribute('aria-label')).map((e) => e.id || e.name)"
    )
    assert unlabelled == []  # every control has a label
    page.locator("#example").focus()  # the keyboard alone: pick an example, tab to Submit, press Enter
    page.keyboard.press("ArrowDown")
    page.keyboard.press("Tab")
    page.keyboard.press("Tab")
    with served.client(served.alice) as api:
        held = [api.post("/v1/audits", json=gate.request(seed=i)).json()["id"] for i in range(served.workers)]
        gate.wait_held(served.workers)  # one call of each: every worker waits at the gate
        page.keyboard.press("Enter")
        page.wait_for_url("**/ui/audits/*")
        # That was the iclinf example (SmolLM2 on the CPU, minutes): no worker was free to run it, so it is
        # cancelled PENDING and never runs.
        submitted = page.url.rsplit("/", 1)[1]
        assert api.get(f"/v1/audits/{submitted}").json()["state"] == "PENDING"
        cancelled = api.post(f"/v1/audits/{submitted}/cancel")
        assert cancelled.status_code == 200 and cancelled.json()["state"] == "CANCELLED", cancelled.text
        for audit_id in held:  # free the workers: each held audit stops at its next progress check
            assert api.post(f"/v1/audits/{audit_id}/cancel").status_code == 200
        gate.release()
        deadline = time.monotonic() + 120
        while any(api.get(f"/v1/audits/{a}").json()["state"] == "RUNNING" for a in held):
            assert time.monotonic() < deadline, "the held audits did not end"
            time.sleep(0.2)
        assert {api.get(f"/v1/audits/{a}").json()["state"] for a in held} == {"CANCELLED"}


def test_the_sweeps_page_charts_a_finished_sweep(page, served: Served) -> None:
    sweep_body = {"base": _mia(trials=20_000), "grid": {"epsilon": [1, 4]}, "seeds": 1}
    with served.client(served.bob) as api:
        response = api.post("/v1/sweeps", json=sweep_body)
        assert response.status_code == 202, response.text
        sweep = response.json()["id"]
        deadline = time.monotonic() + 300
        while api.get(f"/v1/sweeps/{sweep}").json()["state"] not in ("SUCCEEDED", "FAILED", "CANCELLED"):
            assert time.monotonic() < deadline
            time.sleep(0.3)
        outcomes = sorted(r["outcome"] for r in api.get(f"/v1/sweeps/{sweep}/result").json()["rows"])
    log_in(page, served.bob)
    page.locator('nav a[data-nav="sweeps"]').click()  # shown once the tenant has a sweep
    page.get_by_role("link", name=sweep[:12]).click()
    page.locator("#chart-sweep[data-drawn=true]").wait_for()
    assert _drawn_pixels(page, "#chart-sweep") > 2000
    links = page.locator("#sweep-grid a[href^='/ui/audits/']")
    assert links.count() == 2
    # each point's verdict (one seed per point: its child's), as a badge with the outcome word
    assert sorted(page.locator("#sweep-grid tbody [data-verdict]").all_inner_texts()) == outcomes
    links.first.click()
    page.locator("#summary [data-state]").wait_for()


def test_filter_the_list_and_cancel_a_running_audit(page, served: Served, gate: HeldEndpoint) -> None:
    """The audit cancelled is RUNNING by construction: its first call waits at the gate (issue 23) until the
    cancel was accepted, and it stops at its next progress check once the gate opens."""
    with served.client(served.alice) as api:
        bound = api.post("/v1/audits", json=kind_module("bound").EXAMPLE).json()["id"]
        running = api.post("/v1/audits", json=gate.request(seed=3)).json()["id"]
        gate.wait_held()
        assert api.get(f"/v1/audits/{running}").json()["state"] == "RUNNING"
    log_in(page, served.alice)
    page.locator(f"tr[data-id='{bound}']").wait_for()

    page.locator("#f-kind").select_option("bound")
    page.locator(f"tr[data-id='{running}']").wait_for(state="detached")
    page.locator(f"tr[data-id='{bound}']").wait_for()
    kinds = page.locator("#audits tbody tr td:nth-child(3)").all_inner_texts()
    assert kinds and set(kinds) == {"bound"}
    assert "kind=bound" in page.url
    page.locator("#f-kind").select_option("")

    row = page.locator(f"tr[data-id='{running}']")
    row.locator("[data-state=RUNNING]").wait_for()
    with page.expect_response(lambda r: r.url.endswith(f"/v1/audits/{running}/cancel")) as cancel:
        row.get_by_role("button", name=f"Cancel audit {running}").click()
    assert cancel.value.status == 200 and cancel.value.json()["cancel_requested"] is True
    gate.release()  # the held call returns; the audit stops at its next progress check
    row.locator("[data-state=CANCELLED]").wait_for(timeout=60_000)  # live, without a reload

    page.locator("#f-state").select_option("CANCELLED")
    page.locator(f"tr[data-id='{running}'] [data-state=CANCELLED]").wait_for()
    assert page.locator(f"tr[data-id='{bound}']").count() == 0
    assert set(page.locator("#audits tbody [data-state]").all_inner_texts()) == {"CANCELLED"}


def test_another_tenants_audit_is_refused(page, served: Served) -> None:
    with served.client(served.alice) as api:
        alices = api.post("/v1/audits", json=kind_module("bound").EXAMPLE).json()["id"]
    log_in(page, served.bob)
    page.locator("#audits tbody tr").first.wait_for()
    assert page.locator(f"tr[data-id='{alices}']").count() == 0
    page.goto(f"/ui/audits/{alices}")  # the key is kept for the tab: no second login
    page.locator("#not-found").wait_for()
    assert "No audit" in page.locator("#not-found").inner_text()
    assert page.locator("#login").is_hidden()
    assert page.evaluate("sessionStorage.getItem('iclaudit.apiKey')") == served.bob
    assert served.bob not in page.url


def test_docs_and_redoc_render_offline(page, served: Served) -> None:
    page.goto("/docs")
    page.locator(".swagger-ui .info .title").wait_for(timeout=60_000)
    assert "iclaudit" in page.locator(".swagger-ui .info .title").inner_text()
    page.goto("/redoc")
    page.locator("h1").filter(has_text="iclaudit").wait_for(timeout=60_000)
    page.goto("/")
    assert page.url.endswith("/ui")


def test_a_401_sent_before_the_login_does_not_reopen_the_dialog(page, served: Served) -> None:
    """Every page asks for the Sweeps link (`/v1/sweeps?page_size=1`) beside its own first call. Its 401
    answers after the key was entered when the machine is busy: it retries with the key instead of asking
    again (the dialog reopened and the test waited 30 s for it, once in clean-clone CI)."""
    held: list = []

    def hold_the_sweeps_probe(route) -> None:
        if "page_size=1" in route.request.url and "authorization" not in route.request.headers and not held:
            held.append(route)
        else:
            route.continue_()

    page.route("**/v1/sweeps?*", hold_the_sweeps_probe)
    log_in(page, served.alice)
    assert len(held) == 1
    with page.expect_response(lambda r: "/v1/sweeps?page_size=1" in r.url and r.status == 200):
        held[0].continue_()  # reaches the server with no key: 401, then one retry with alice's key
    page.wait_for_timeout(300)
    assert page.locator("#login").is_hidden()
