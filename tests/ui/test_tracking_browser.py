"""Run tracking in real headless Chromium against a real server (auth on, SQLite): names, labels, the measured ε
and the verdict in the list, filters by name and label, a sweep's children folded under their sweep."""

from __future__ import annotations

import time
from typing import Any

import pytest
from ui.served import Served

from app.audit.kinds.registry import kind_module

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")


def _mia(name: str, epsilon: float, **labels: str) -> dict[str, Any]:
    """A real membership audit of private voting on the exact oracle (about a second)."""
    body = {
        **kind_module("mia").EXAMPLE,
        "dataset": "synthetic_records",
        "trials": 20_000,
        "epsilon": epsilon,
    }
    return {**body, "labels": {"name": name, **labels}}


def _wait(client, path: str, deadline_s: float = 180) -> dict[str, Any]:
    deadline = time.monotonic() + deadline_s
    while True:
        body = client.get(path).json()
        if body["state"] in TERMINAL or time.monotonic() > deadline:
            assert body["state"] == "SUCCEEDED", body
            return body
        time.sleep(0.3)


@pytest.fixture(scope="module")
def tracked(served: Served) -> dict[str, Any]:
    """Two named audits (labels team=ml and team=infra) and a sweep of two bound audits, all finished."""
    with served.client(served.alice) as api:
        ids = {}
        for name, eps, team in (("baseline-eps1", 1.0, "ml"), ("wider-eps4", 4.0, "infra")):
            response = api.post("/v1/audits", json=_mia(name, eps, team=team))
            assert response.status_code == 202, response.text
            ids[name] = response.json()["id"]
        bound = kind_module("bound").EXAMPLE
        sweep = api.post("/v1/sweeps", json={"base": bound, "grid": {"confidence": [0.9, 0.95]}, "seeds": 1})
        assert sweep.status_code == 202, sweep.text
        audits = {name: _wait(api, f"/v1/audits/{i}") for name, i in ids.items()}
        sweep_id = sweep.json()["id"]
        children = [c["audit_id"] for c in api.get(f"/v1/sweeps/{sweep_id}").json()["children"]]
        for child in children:
            _wait(api, f"/v1/audits/{child}")
    return {"audits": audits, "sweep": sweep_id, "children": children}


def _login(page, served: Served, path: str = "/ui") -> None:
    page.goto(path)
    page.locator("#login-key").fill(served.alice)
    page.locator("#login-form button[type=submit]").click()
    page.locator("#login").wait_for(state="hidden")


def test_names_labels_measured_epsilon_and_verdict_in_the_list(page, served: Served, tracked) -> None:
    _login(page, served)
    for name, audit in tracked["audits"].items():
        row = page.locator(f"#audits tr[data-id='{audit['id']}']")
        row.wait_for()
        assert row.locator(".run-name").inner_text() == name
        team = audit["request"]["labels"]["team"]
        assert row.locator(".chip").all_inner_texts() == [f"team={team}"]
        shown = row.locator(".cell-measured").inner_text()
        lower = audit["verdict"]["epsilon_lower"]
        assert shown != "—" and abs(float(shown) - lower) <= 5e-4 * max(1.0, abs(lower)), (shown, lower)
        assert row.locator("[data-verdict]").inner_text() == audit["verdict"]["outcome"]


def test_filter_by_name_and_by_label(page, served: Served, tracked) -> None:
    _login(page, served)
    ml, infra = tracked["audits"]["baseline-eps1"]["id"], tracked["audits"]["wider-eps4"]["id"]
    page.locator(f"#audits tr[data-id='{ml}']").wait_for()
    page.locator("#f-name").fill("wider-eps4")
    page.locator("#f-name").press("Enter")
    page.locator(f"#audits tr[data-id='{ml}']").wait_for(state="detached")
    page.locator(f"#audits tr[data-id='{infra}']").wait_for()
    assert page.locator("#audits tbody tr[data-id]").count() == 1
    assert "name=wider-eps4" in page.url
    page.locator("#f-name").fill("")
    page.locator("#f-labels").fill("team=ml")
    page.locator("#f-labels").press("Enter")
    page.locator(f"#audits tr[data-id='{ml}']").wait_for()
    page.locator(f"#audits tr[data-id='{infra}']").wait_for(state="detached")
    assert page.locator("#audits tbody tr[data-id]").count() == 1


def test_a_sweeps_children_are_folded_under_their_sweep(page, served: Served, tracked) -> None:
    _login(page, served)
    sweep_row = page.locator(f"#audits tr.sweep-row[data-sweep-id='{tracked['sweep']}']")
    sweep_row.wait_for()
    assert page.locator("#audits tr.sweep-row").count() == 1  # one row for the sweep, not one per child
    assert "2 audits here, 2 finished" in sweep_row.inner_text()
    children = [page.locator(f"#audits tr[data-id='{c}']") for c in tracked["children"]]
    # The children follow their sweep's row, folded.
    for child in children:
        assert child.count() == 1 and child.is_hidden()
    order = page.eval_on_selector_all(
        "#audits tbody tr", "rows => rows.map(r => r.dataset.id || r.dataset.sweepId)"
    )
    at = order.index(tracked["sweep"])
    assert set(order[at + 1 : at + 3]) == set(tracked["children"])
    sweep_row.get_by_role("button").click()
    for child in children:
        child.wait_for()
        assert "confidence=" in child.locator(".point").inner_text()
    sweep_row.get_by_role("button").click()
    for child in children:
        child.wait_for(state="hidden")


def _pixels_of(page, selector: str, rgb: str) -> int:
    """Pixels of the chart's canvas drawn in colour `rgb` (#rrggbb, within 40 per channel)."""
    return page.eval_on_selector(
        f"{selector} canvas",
        """(c, hex) => { const want = [1, 3, 5].map(i => parseInt(hex.slice(i, i + 2), 16));
             const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data; let n = 0;
             for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 200 && want.every((w, k) => Math.abs(d[i + k] - w) < 40)) n++;
             return n; }""",
        rgb,
    )


def test_compare_two_audits_side_by_side(page, served: Served, tracked) -> None:
    _login(page, served)
    one, two = tracked["audits"]["baseline-eps1"], tracked["audits"]["wider-eps4"]
    for audit in (one, two):
        page.locator(f"#audits tr[data-id='{audit['id']}'] input.pick").check()
    page.locator("#compare").click()
    page.wait_for_url("**/ui/compare?ids=*")
    page.locator("#compare-summary").wait_for()
    heads = page.locator("#compare-summary thead th a").all_inner_texts()
    assert sorted(heads) == sorted([one["id"][:8], two["id"][:8]])
    # Requests diffed: what differs is marked and listed first, what is the same is not marked.
    differs = page.locator("#compare-request tr[data-differs=true]").evaluate_all(
        "rs => rs.map(r => r.dataset.field)"
    )
    assert set(differs) == {"epsilon", "labels.name", "labels.team"}, differs
    assert page.locator("#compare-request tr[data-field=dataset][data-differs=false]").count() == 1
    # Results in columns: each audit's measured bound, as the API gives it.
    cells = page.locator("#compare-result tr[data-field='black_box.epsilon_lower'] td").all_inner_texts()
    order = [one, two] if heads[0] == one["id"][:8] else [two, one]
    for shown, audit in zip(cells, order, strict=True):
        assert abs(float(shown) - audit["result"]["black_box"]["epsilon_lower"]) <= 5e-4 * max(
            1, float(shown)
        )
    # ROC overlaid: each audit's colour is drawn on the one canvas.
    page.locator("#chart-compare-roc[data-drawn=true]").wait_for()
    for colour in ("#0b5cad", "#c05600"):  # COLORS[0], COLORS[1] in charts.js: the first and second audit
        assert _pixels_of(page, "#chart-compare-roc", colour) > 200, colour


def test_compare_refuses_one_audit(page, served: Served, tracked) -> None:
    _login(page, served, f"/ui/compare?ids={tracked['children'][0]}")
    assert "Pick 2 to 4 audits" in page.locator("#compare-error").inner_text()


def test_the_evidence_view_shows_the_record_the_query_and_c1_beside_c0(page, served: Served, tracked) -> None:
    audit = tracked["audits"]["baseline-eps1"]
    sample = audit["result"]["evidence"]["records"][0]
    _login(page, served, f"/ui/audits/{audit['id']}")
    section = page.locator("#evidence")
    section.wait_for()
    assert section.locator(".record-text").inner_text() == sample["text"]
    assert section.locator(".evidence-query").inner_text().strip() == sample["query"].strip()
    c1, c0 = section.locator("#evidence-0-c1"), section.locator("#evidence-0-c0")
    # C1 and C0 side by side: same top, C0 to the right.
    box1, box0 = c1.bounding_box(), c0.bounding_box()
    assert box1 and box0 and abs(box1["y"] - box0["y"]) < 2 and box0["x"] > box1["x"] + box1["width"] - 1
    for table, trials in ((c1, sample["c1"]), (c0, sample["c0"])):
        rows = table.locator("tbody tr")
        assert rows.count() == len(trials) == 8
        for i, trial in enumerate(trials):
            row = rows.nth(i)
            assert row.locator("[data-call]").inner_text() == trial["decision"]
            assert row.locator("td").first.inner_text() == trial["released"]
            shown = float(row.locator("[data-score]").get_attribute("data-score"))
            assert shown == trial["score"]
    section.locator("details summary").click()
    assert section.locator(".prompt-in").inner_text().strip() == sample["prompt_in"].strip()
