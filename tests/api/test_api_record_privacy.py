"""Private records stay out of what is shared: the report, the per-record table (JSON and CSV) mask personal
data by default and name each record by a stable hash; `records=full` asks for the text. A tenant deletes a
dataset with `purge` and the audits that read it keep no record text nor stored target responses; another
tenant's delete is a 404. Stored target responses older than the retention setting are deleted by the
integrations tick."""

from __future__ import annotations

import json
import time
from datetime import timedelta

from app.db.engine import make_engine, make_session_factory
from app.db.models import TargetResponse, utcnow
from app.db.responses import DbResponses
from app.privacy.redact import mask, record_hash
from testkit.client import white_box_request

EMAILS = [f"customer{i}@example.com" for i in range(12)]
PHONES = [f"+1 415 555 01{i:02d}" for i in range(12)]


def _tickets() -> bytes:
    return "\n".join(
        json.dumps({"text": f"Ticket {i}: please write to {EMAILS[i]} or call {PHONES[i]} about the refund"})
        for i in range(12)
    ).encode()


def _finished(client, audit_id: str) -> dict:
    deadline = time.monotonic() + 180
    while (audit := client.get(f"/v1/audits/{audit_id}").json())["state"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, audit
        time.sleep(0.2)
    assert audit["state"] == "SUCCEEDED", audit["error"]
    return audit


def _pii(text: str) -> list[str]:
    return [s for s in (*EMAILS, *PHONES) if s in text]


def test_mask_finds_what_presidio_patterns_find_and_leaves_figures() -> None:
    text = (
        "Mail jane.doe@example.co.uk, call +44 20 7946 0958 or (415) 555-0132; card 4111 1111 1111 1111; "
        "IBAN DE89 3704 0044 0532 0130 00; order 7731942; on 2026-11-27 at 10:30 paid 1,250.50 for 3 items"
    )
    assert mask(text) == (
        "Mail [email], call [phone] or [phone]; card [card]; IBAN [iban]; order [number]; on 2026-11-27 at "
        "10:30 paid 1,250.50 for 3 items"
    )
    assert mask("card 4111 1111 1111 1112 fails Luhn") == "card [number] fails Luhn"  # still masked
    wrong_check = mask("GB82 WEST 1234 5698 7654 33 has bad check digits")
    assert "[iban]" not in wrong_check and "1234" not in wrong_check  # not an IBAN; its digits still masked
    assert record_hash("a ticket") == record_hash("a ticket") != record_hash("another ticket")


def test_records_are_redacted_by_default_and_purged_with_their_dataset(client, make_key, settings) -> None:
    upload = client.post(
        "/v1/datasets", files={"file": ("tickets.jsonl", _tickets())}, data={"name": "tickets"}
    )
    assert upload.status_code == 201, upload.text
    dataset_id = upload.json()["id"]
    accepted = client.post("/v1/audits", json=white_box_request("tickets", 3, 2, secret="continuation"))
    assert accepted.status_code == 202, accepted.text
    audit = _finished(client, accepted.json()["id"])
    audit_id = audit["id"]
    assert _pii(json.dumps(audit["result"]))  # the API's own JSON keeps the text for the tenant's programs

    shown = client.get(
        f"/v1/audits/{audit_id}/result", params={"records": "redacted"}
    )  # the dashboard's view
    full_result = client.get(f"/v1/audits/{audit_id}/result")
    assert not _pii(shown.text) and "[email]" in shown.text and _pii(full_result.text)
    assert shown.headers["ETag"] != full_result.headers["ETag"]  # a cached view never answers for the other
    again = client.get(
        f"/v1/audits/{audit_id}/result",
        params={"records": "redacted"},
        headers={"If-None-Match": full_result.headers["ETag"]},
    )
    assert again.status_code == 200 and not _pii(again.text)

    page = client.get(f"/v1/audits/{audit_id}/records").json()
    assert page["total"] == 3 and not _pii(json.dumps(page))
    assert all("[email]" in r["text"] and "[phone]" in r["text"] for r in page["items"])
    full = client.get(f"/v1/audits/{audit_id}/records", params={"records": "full"}).json()
    assert len(_pii(json.dumps(full))) == 6
    hashes = [r["record_hash"] for r in page["items"]]
    assert (
        hashes == [r["record_hash"] for r in full["items"]] == [record_hash(r["text"]) for r in full["items"]]
    )
    assert len(set(hashes)) == 3
    csv = client.get(f"/v1/audits/{audit_id}/records", params={"format": "csv"}).text
    assert not _pii(csv) and all(h in csv for h in hashes)
    assert _pii(
        client.get(f"/v1/audits/{audit_id}/records", params={"format": "csv", "records": "full"}).text
    )

    report = client.get(f"/v1/audits/{audit_id}/report.html").text
    assert not _pii(report) and 'data-records="redacted"' in report and "--show-records" in report
    assert all(h in report for h in hashes)
    assert "Dataset: <strong>tickets v1</strong>" in report
    full_report = client.get(f"/v1/audits/{audit_id}/report.html", params={"records": "full"}).text
    assert _pii(full_report) and 'data-records="full"' in full_report
    bad = client.get(f"/v1/audits/{audit_id}/records", params={"records": "all"})
    assert bad.status_code == 422 and "records" in bad.json()["error"]["details"][0]["path"]

    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_session_factory(engine)
    try:
        DbResponses(sessions, audit_id).put({"k1": f"reply to {EMAILS[0]}", "k2": "another"})
        with sessions() as session:
            assert session.query(TargetResponse).filter_by(lineage_id=audit_id).count() == 2

        bob = {"Authorization": f"Bearer {make_key('bob')}"}
        other = client.delete(f"/v1/datasets/{dataset_id}", params={"purge": "true"}, headers=bob)
        unknown = client.delete("/v1/datasets/" + "0" * 32, params={"purge": "true"}, headers=bob)
        assert other.status_code == unknown.status_code == 404
        assert (
            other.json()["error"]["message"].replace(dataset_id, "0" * 32)
            == unknown.json()["error"]["message"]
        )
        assert client.get(f"/v1/datasets/{dataset_id}").status_code == 200  # untouched

        assert client.delete(f"/v1/datasets/{dataset_id}", params={"purge": "true"}).status_code == 204
        with sessions() as session:
            assert session.query(TargetResponse).filter_by(lineage_id=audit_id).count() == 0
    finally:
        engine.dispose()
    after = client.get(f"/v1/audits/{audit_id}").json()
    assert after["state"] == "SUCCEEDED" and not _pii(json.dumps(after))
    assert after["result"]["verdict"] == audit["result"]["verdict"]  # the figures stay
    assert [r["record_hash"] for r in after["result"]["records"]] == hashes
    assert all(r["text"] is None for r in after["result"]["records"])
    assert not _pii(client.get(f"/v1/audits/{audit_id}/report.html", params={"records": "full"}).text)


def test_stored_responses_past_the_retention_are_deleted_by_the_tick(app_client, make_key, settings) -> None:
    engine = make_engine(settings.sqlalchemy_url)
    sessions = make_session_factory(engine)
    key = make_key("carol")
    try:
        with app_client(response_retention_seconds=3600, webhook_tick_seconds=0.2) as client:
            client.headers["Authorization"] = f"Bearer {key}"
            body = {"kind": "bound", "counts": {"tp": 90, "fn": 10, "fp": 10, "tn": 90}, "epsilon": 1.0}
            audit_id = client.post("/v1/audits", json=body).json()["id"]
            store = DbResponses(sessions, audit_id)
            store.put({"old": "an answer from yesterday"})
            with sessions.begin() as session:
                session.query(TargetResponse).filter_by(key="old").update(
                    {"created_at": utcnow() - timedelta(hours=2)}
                )
            store.put({"new": "an answer from now"})
        # a fresh app: its tick purges at once (and then every 10 min)
        with app_client(response_retention_seconds=3600, webhook_tick_seconds=0.2):
            deadline = time.monotonic() + 20
            while True:
                with sessions() as session:
                    keys = {r.key for r in session.query(TargetResponse).filter_by(lineage_id=audit_id)}
                if keys == {"new"}:
                    break
                assert time.monotonic() < deadline, keys
                time.sleep(0.2)
    finally:
        engine.dispose()
