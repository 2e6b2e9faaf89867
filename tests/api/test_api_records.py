"""GET /v1/audits/{id}/records: the per-record table of a 20-canary likelihood audit, paged, CSV, per tenant."""

from __future__ import annotations

import csv
import io

from testkit.client import bound_request, wait_for, white_box_request


def test_records_are_paged_exported_and_private(app_client, make_key) -> None:
    alice, bob = ({"Authorization": f"Bearer {make_key(t)}"} for t in ("alice", "bob"))
    with app_client() as client:
        audit = client.post(
            "/v1/audits", json=white_box_request("synthetic_records", 20, 10, seed=1, shots=2), headers=alice
        ).json()
        done = wait_for(lambda p: client.get(p, headers=alice), audit["id"])
        assert done["state"] == "SUCCEEDED", done["error"]
        path = f"/v1/audits/{audit['id']}/records"

        first = client.get(path, params={"limit": 8}, headers=alice)
        assert first.status_code == 200, first.text
        page = first.json()
        assert page["total"] == 20 and page["flagged"] == 20 and len(page["items"]) == 8
        rest = client.get(path, params={"offset": 8, "limit": 50}, headers=alice).json()["items"]
        ranks = [r["rank"] for r in page["items"] + rest]
        assert ranks == list(range(1, 21))
        assert all(r["p_value"] <= 0.05 / 20 and r["trials"] == 10 for r in page["items"] + rest)

        exported = client.get(path, params={"format": "csv"}, headers=alice)
        assert exported.status_code == 200 and exported.headers["content-type"].startswith("text/csv")
        table = list(csv.DictReader(io.StringIO(exported.text)))
        assert [row["record_id"] for row in table] == [r["record_id"] for r in page["items"] + rest]

        assert client.get(path, headers=bob).status_code == 404  # another tenant's audit
        assert client.get(path, params={"limit": 0}, headers=alice).status_code == 422
        other = client.post("/v1/audits", json=bound_request(), headers=alice).json()
        wait_for(lambda p: client.get(p, headers=alice), other["id"])
        no_table = client.get(f"/v1/audits/{other['id']}/records", headers=alice)
        assert no_table.status_code == 404 and "per-record" in no_table.json()["error"]["message"]
