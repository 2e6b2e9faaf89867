"""The audit page in real headless Chromium against a real server: an audit of an upload named by its name
shows the name (and version) with the id in its title; its evidence shows the records' text redacted (no
e-mail address on screen, each record's hash) until "Show the records' text" is pressed."""

from __future__ import annotations

import json
import time

from testkit.client import white_box_request
from testkit.served import Served, log_in

EMAILS = [f"buyer{i}@example.net" for i in range(12)]


def test_the_audit_page_names_the_dataset_and_redacts_the_evidence(page, served: Served) -> None:
    rows = "\n".join(
        json.dumps({"text": f"Order {i}: write to {EMAILS[i]} about the parcel"}) for i in range(12)
    )
    with served.client(served.alice) as api:
        upload = api.post(
            "/v1/datasets", files={"file": ("orders.jsonl", rows.encode())}, data={"name": "orders"}
        )
        assert upload.status_code == 201, upload.text
        audit_id = api.post("/v1/audits", json=white_box_request("orders", 2, 2)).json()["id"]
        deadline = time.monotonic() + 300
        while (audit := api.get(f"/v1/audits/{audit_id}").json())["state"] in ("PENDING", "RUNNING"):
            assert time.monotonic() < deadline, audit
            time.sleep(0.2)
        assert audit["state"] == "SUCCEEDED", audit["error"]

    log_in(page, served.alice)
    page.goto(f"/ui/audits/{audit_id}")
    name = page.locator(".dataset-name")
    name.filter(has_text="orders v1").wait_for()
    assert name.first.get_attribute("title") == upload.json()["id"]

    evidence = page.locator("#evidence")
    evidence.wait_for()
    assert "[email]" in evidence.inner_text()
    assert not [e for e in EMAILS if e in page.locator("body").inner_text()]
    assert page.locator("#records-view").get_attribute("data-records") == "redacted"
    assert evidence.locator(".evidence-record h3 .muted").first.inner_text().startswith(" #")

    page.locator("#toggle-records").click()
    page.locator('#records-view[data-records="full"]').wait_for()
    assert [e for e in EMAILS if e in page.locator("#evidence").inner_text()]
