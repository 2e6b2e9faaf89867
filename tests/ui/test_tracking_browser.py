"""Run tracking and a report to share (issue 21) in real headless Chromium against a real server (auth on,
SQLite): names, labels, the measured ε and the verdict in the list, filters by name and label, a sweep's children
folded under their sweep; /ui/compare; the evidence view; the HTML report opened from file:// offline."""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from app.audit.kinds.registry import kind_module
from app.privacy.redact import mask
from app.reports.html import compact
from testkit.served import ICLAUDIT, Served, log_in

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
ROOT = Path(__file__).resolve().parents[2]


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


def test_names_labels_measured_epsilon_and_verdict_in_the_list(page, served: Served, tracked) -> None:
    log_in(page, served.alice)
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
    log_in(page, served.alice)
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
    log_in(page, served.alice)
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
    # A sweep submitted while the list is open is grouped too, without a reload.
    with served.client(served.alice) as api:
        body = {"base": kind_module("bound").EXAMPLE, "grid": {"delta": [1e-5, 1e-6]}, "seeds": 1}
        late = api.post("/v1/sweeps", json=body).json()["id"]
    late_row = page.locator(f"#audits tr.sweep-row[data-sweep-id='{late}']")
    late_row.wait_for(timeout=30_000)
    assert page.locator("#audits tr.sweep-row").count() == 2
    assert page.locator(f"#audits tr[data-sweep='{late}']").count() == 2


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
    log_in(page, served.alice)
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


def test_the_report_is_its_tenants_alone(served: Served, tracked) -> None:
    audit = tracked["audits"]["baseline-eps1"]["id"]
    with served.client(served.bob) as bob, served.client(served.alice) as alice:
        assert bob.get(f"/v1/audits/{audit}/report.html").status_code == 404
        mine = alice.get(f"/v1/audits/{audit}/report.html")
    assert mine.status_code == 200 and mine.headers["content-type"].startswith("text/html")


def test_compare_refuses_one_audit(page, served: Served, tracked) -> None:
    log_in(page, served.alice, f"/ui/compare?ids={tracked['children'][0]}")
    assert "Pick 2 to 4 audits" in page.locator("#compare-error").inner_text()


def test_the_evidence_view_shows_the_record_the_query_and_c1_beside_c0(page, served: Served, tracked) -> None:
    audit = tracked["audits"]["baseline-eps1"]
    sample = audit["result"]["evidence"]["records"][0]
    log_in(page, served.alice, f"/ui/audits/{audit['id']}")
    section = page.locator("#evidence")
    section.wait_for()
    page.locator("#toggle-records").click()  # record text is redacted until the full view is asked for
    page.locator('#records-view[data-records="full"]').wait_for()
    section = page.locator("#evidence")
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


def _pixels(page, selector: str) -> dict[str, int]:
    """Of an <img>'s drawn pixels (onto a canvas): those not white, and those in colour (not grey)."""
    return page.eval_on_selector(
        selector,
        """img => { const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
             const g = c.getContext('2d'); g.drawImage(img, 0, 0); const d = g.getImageData(0, 0, c.width, c.height).data;
             let ink = 0, colour = 0;
             for (let i = 0; i < d.length; i += 4) {
               const [r, gr, b] = [d[i], d[i + 1], d[i + 2]];
               if (r < 235 || gr < 235 || b < 235) ink++;
               if (Math.max(r, gr, b) - Math.min(r, gr, b) > 60) colour++;
             }
             return { ink, colour, width: c.width }; }""",
    )


def test_the_html_report_opens_offline_from_a_file_and_prints(
    page, browser, served: Served, tracked, tmp_path
) -> None:
    audit = tracked["audits"]["baseline-eps1"]
    # The button on the audit page and `iclaudit result ID --format html` give the same file.
    log_in(page, served.alice, f"/ui/audits/{audit['id']}")
    with page.expect_download() as download:
        page.locator("#download-report").click()
    report = tmp_path / download.value.suggested_filename
    download.value.save_as(report)
    assert report.name == f"iclaudit-report-{audit['id']}.html"
    cli = tmp_path / "cli.html"
    env = {**os.environ, "ICLAUDIT_API_KEY": served.alice, "ICLAUDIT_URL": served.url}
    done = subprocess.run(
        [str(ICLAUDIT), "result", audit["id"], "--format", "html", "-o", str(cli), "--url", served.url],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert cli.read_text(encoding="utf-8") == report.read_text(encoding="utf-8")

    # Opened from file:// with the network off: nothing but the file itself is asked for.
    context = browser.new_context(viewport={"width": 1000, "height": 900}, offline=True)
    asked: list[str] = []
    context.on("request", lambda r: asked.append(r.url))
    context.route(
        "**/*", lambda route: route.continue_() if route.request.url.startswith("file:") else route.abort()
    )
    offline = context.new_page()
    try:
        offline.goto(report.as_uri())
        offline.wait_for_load_state("load")
        assert [u for u in asked if not u.startswith("data:")] == [report.as_uri()], asked
        result = audit["result"]
        assert offline.locator("#report-verdict").inner_text().lower() == result["verdict"]
        assert result["headline"] in offline.locator("#report-headline").inner_text()
        # the request, folded under the results, its null (default) fields left out
        assert json.loads(offline.locator("#report-request").text_content() or "") == compact(
            audit["request"]
        )
        assert "membership-inference" in offline.locator("#report-method").inner_text()
        refs = offline.locator("#report-references").inner_text()
        assert "ContextLeak" in refs and "Tight and Practical Privacy Auditing" in refs
        cells = offline.locator("#report-tests tbody tr").first.locator("td").all_inner_texts()
        assert cells[0] == "ε lower bound the verdict used"
        assert abs(float(cells[1]) - result["black_box"]["epsilon_lower"]) <= 5e-4 * max(1, float(cells[1]))
        assert "iclaudit submit request.json" in offline.locator("#report-reproduce-cli").inner_text()
        assert "/v1/audits" in offline.locator("#report-reproduce-curl").inner_text()
        footer = offline.locator("#report-software").inner_text()
        commit = offline.locator("#report-software .mono").inner_text()
        assert "iclaudit " in footer and len(commit) == 40
        assert subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", commit]).returncode == 0
        sample = result["evidence"]["records"][0]
        # a report is shared: its record text is redacted (app/privacy/redact.py) unless asked for
        assert offline.locator(".evidence blockquote").first.inner_text() == mask(sample["text"])
        # The charts, by their drawn pixels: ink and colour in each (result plot, the sampled trials).
        charts = offline.locator("img.chart")
        assert charts.count() == 2
        for i in range(charts.count()):
            drawn = _pixels(offline, f"figure:nth-of-type({i + 1}) img.chart")
            assert drawn["ink"] > 5_000 and drawn["colour"] > 500, drawn
        # Printed: nothing runs off the A4 page, and it makes a PDF of a few pages.
        offline.emulate_media(media="print")
        offline.set_viewport_size({"width": 794, "height": 1123})  # A4 at 96 dpi
        overflow = offline.evaluate(
            "document.documentElement.scrollWidth - document.documentElement.clientWidth"
        )
        assert overflow <= 0, overflow
        pdf = offline.pdf(format="A4")
        pages = len(re.findall(rb"/Type\s*/Page[^s]", pdf))
        assert pdf.startswith(b"%PDF") and 2 <= pages <= 12, pages
    finally:
        context.close()


def _rows(n: int) -> str:
    """`n` JSONL rows of a two-label classification dataset (about 120 bytes each)."""
    return "".join(
        json.dumps(
            {"text": f"record {i}: " + "lorem ipsum dolor sit amet " * 3, "label": "yes" if i % 2 else "no"}
        )
        + "\n"
        for i in range(n)
    )


def test_upload_a_big_file_with_a_progress_bar(page, served: Served, tmp_path) -> None:
    big = tmp_path / "big.jsonl"
    big.write_text(_rows(90_000))
    size = big.stat().st_size
    assert size > 8 * 2**20
    log_in(page, served.alice, "/ui/datasets")
    page.locator("#datasets-h").wait_for()
    # The bar is drawn from the upload's own progress events: throttle the upload to ~4 MiB/s so there are some.
    cdp = page.context.new_cdp_session(page)
    cdp.send("Network.enable")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": 4 * 2**20},
    )
    page.evaluate(
        """() => { window.__sent = [];
             new MutationObserver(() => window.__sent.push(Number(document.querySelector('#upload-progress').dataset.loaded)))
               .observe(document.querySelector('#upload-progress'), { attributes: true, attributeFilter: ['data-loaded'] }); }"""
    )
    page.locator("#upload-file").set_input_files(str(big))
    page.locator("#upload-name").fill("big rows")
    page.locator("#upload-submit").click()
    page.locator("#upload-done").wait_for(timeout=120_000)
    sent = page.evaluate("window.__sent")
    total = sent[-1]  # the multipart body: the file and its part headers
    assert size < total < size + 2048, (size, total)
    between = [s for s in sent if 0 < s < total]
    assert len(between) >= 3 and between == sorted(between), sent  # the bar moved, forwards, before the end
    dataset = page.locator("#upload-id").inner_text()
    with served.client(served.alice) as api:
        stored = api.get(f"/v1/datasets/{dataset}").json()
    assert stored["name"] == "big rows" and stored["n_train"] + stored["n_test"] == 90_000
    page.locator(f"#datasets tr[data-id='{dataset}']").wait_for()
    # A bad file: refused, with the line and field named, nothing stored.
    bad = tmp_path / "bad.jsonl"
    bad.write_text(_rows(3) + json.dumps({"txt": "misspelt", "label": "no"}) + "\n")
    cdp.send(
        "Network.emulateNetworkConditions",
        {"offline": False, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
    )
    page.locator("#upload-file").set_input_files(str(bad))
    page.locator("#upload-name").fill("")
    page.locator("#upload-submit").click()
    error = page.locator("#upload-error")
    error.wait_for()
    assert "422" in error.inner_text() and "4" in error.inner_text()
    assert page.locator("#datasets tbody tr").count() == 1


def test_legends_say_no_value_dash_and_iclinf_bars_start_at_zero(page, served: Served, tracked) -> None:
    audit = tracked["audits"]["baseline-eps1"]
    log_in(page, served.alice, f"/ui/audits/{audit['id']}")
    page.locator("#chart-roc[data-drawn=true]").wait_for()
    page.locator("#chart-epsilon[data-drawn=true]").wait_for()
    for chart in ("#chart-roc", "#chart-epsilon"):
        legend = page.locator(f"{chart} .u-legend").inner_text()
        assert "—" not in legend and "value" not in legend.lower(), legend
    assert "FPR " in page.locator("#chart-roc .u-legend").inner_text()  # a test's point says where it is
    # Tick labels are drawn on the canvas; uPlot keeps the ones it drew (axis._values).
    ticks = page.evaluate(
        "document.querySelector('#chart-roc').uplot.axes.map(a => (a._values || []).filter(Boolean))"
    )
    for axis in ticks:
        assert axis[0] == "1e-4" and "0" not in axis and "—" not in axis, ticks  # the floor is not labelled 0
    # The iclinf charts (the page's own charts.js and uPlot) with close, small losses: the bars start at 0.
    scale = page.evaluate(
        """async () => {
             const { seriesBars } = await import('/ui/static/js/charts.js?v=probe');
             const fig = seriesBars('probe', 'Leave-one-out loss by removed position', 'position',
               [0.0123, 0.0151, 0.0114, 0.0132], [{ label: 'ICLInf = 0.0141', value: 0.0141 }], null, { yLabel: 'loss' });
             document.querySelector('main').append(fig);
             await new Promise((r) => requestAnimationFrame(() => requestAnimationFrame(r)));
             return { min: fig.uplot.scales.y.min, max: fig.uplot.scales.y.max, legend: fig.querySelector('.u-legend').innerText };
           }"""
    )
    assert scale["min"] == 0 and scale["max"] > 0.0151, scale
    assert "—" not in scale["legend"] and "value" not in scale["legend"].lower(), scale
