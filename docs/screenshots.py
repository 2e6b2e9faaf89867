"""Screenshots of the dashboard and /docs at 1400 and 390 px, into docs/img/ (referenced from the README).

    .venv/bin/python docs/screenshots.py

Starts `iclaudit serve` (auth off, SQLite in a temporary directory, the offline datasets of
ICLAUDIT_DATA_DIR if set), runs a few real audits (a bound, a membership audit of private voting on the
synthetic records, a sweep over ε, and one left running), and photographs each page with
Debian's headless Chromium. The browser reaches nothing but the server (every other request is aborted).
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

import httpx
from playwright.sync_api import sync_playwright

from testkit.served import CHROMIUM, CHROMIUM_ARGS, serve, stop

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "docs" / "img"
WIDTHS = (1400, 390)


def _wait(api: httpx.Client, audit_id: str, timeout: float = 900) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        audit = api.get(f"/v1/audits/{audit_id}").json()
        if audit["state"] in ("SUCCEEDED", "FAILED", "CANCELLED"):
            return audit
        time.sleep(0.3)
    raise TimeoutError(audit_id)


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    state = Path(tempfile.mkdtemp(prefix="iclaudit-shots-"))
    cache = os.environ.get("ICLAUDIT_CACHE_DIR", str(ROOT / "var" / "cache"))
    server, url, _ = serve(state, auth=False, extra_env={"ICLAUDIT_CACHE_DIR": cache}, ready_within=120)
    try:
        with httpx.Client(base_url=url, timeout=60) as api:
            examples = ROOT / "examples"
            bound = api.post(
                "/v1/audits", json=json.loads((examples / "bound-counts.json").read_text())
            ).json()
            mia_body = {**json.loads((examples / "mia-oracle-eps1.json").read_text())}
            mia_body.update(dataset="synthetic_records", trials=200_000)
            mia = api.post("/v1/audits", json=mia_body).json()
            for audit in (bound, mia):
                _wait(api, audit["id"])
            sweep = api.post(
                "/v1/sweeps",
                json={"base": {**mia_body, "trials": 50_000}, "grid": {"epsilon": [0.5, 1, 2, 4, 8]}},
            ).json()
            deadline = time.monotonic() + 900
            while api.get(f"/v1/sweeps/{sweep['id']}").json()["state"] in ("PENDING", "RUNNING"):
                assert time.monotonic() < deadline, "the sweep did not finish"
                time.sleep(0.5)
            running = api.post("/v1/audits", json={**mia_body, "trials": 2_000_000, "seed": 9}).json()
            time.sleep(2)
            pages = {
                "audits": "/ui",
                "audit-mia": f"/ui/audits/{mia['id']}",
                "audit-bound": f"/ui/audits/{bound['id']}",
                "submit": "/ui/submit",
                "sweep": f"/ui/sweeps?id={sweep['id']}",
                "docs": "/docs",
            }
            with sync_playwright() as pw:
                browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
                for width in WIDTHS:
                    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=url)
                    context.route(
                        "**/*", lambda r: r.continue_() if r.request.url.startswith(url) else r.abort()
                    )
                    page = context.new_page()
                    for name, path in pages.items():
                        page.goto(path)
                        if name == "docs":
                            page.locator(".swagger-ui .info .title").wait_for(timeout=120_000)
                        elif name.startswith("audit-") or name == "sweep":
                            page.locator("[data-drawn=true]").first.wait_for(timeout=60_000)
                        else:
                            page.locator("#loading").wait_for(state="detached")
                        page.wait_for_timeout(800)
                        page.screenshot(path=str(OUT / f"ui-{name}-{width}.png"), full_page=name != "docs")
                        print(f"docs/img/ui-{name}-{width}.png")
                    context.close()
                browser.close()
            api.post(f"/v1/audits/{running['id']}/cancel")
    finally:
        stop(server)


if __name__ == "__main__":
    main()
