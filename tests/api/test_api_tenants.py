"""Tenants: every endpoint answers 404 for another tenant's resources; keys are required and revocable."""

from __future__ import annotations

from app.db import keys
from app.db.engine import make_engine, make_session_factory
from testkit.client import bound_request, wait_for


def test_other_tenant_sees_nothing(app_client, make_key) -> None:
    alice, bob = make_key("alice"), make_key("bob")
    with app_client() as client:
        as_alice = {"Authorization": f"Bearer {alice}"}
        as_bob = {"Authorization": f"Bearer {bob}"}
        audit = client.post("/v1/audits", json=bound_request(), headers=as_alice).json()
        wait_for(lambda p: client.get(p, headers=as_alice), audit["id"])
        dataset = client.post("/v1/datasets", json={"name": "tiny", "rows": _rows()}, headers=as_alice)
        assert dataset.status_code == 201, dataset.text
        ds_id = dataset.json()["id"]

        for method, path in [
            ("GET", f"/v1/audits/{audit['id']}"),
            ("GET", f"/v1/audits/{audit['id']}/result"),
            ("POST", f"/v1/audits/{audit['id']}/cancel"),
            ("GET", f"/v1/datasets/{ds_id}"),
            ("DELETE", f"/v1/datasets/{ds_id}"),
        ]:
            response = client.request(method, path, headers=as_bob)
            assert response.status_code == 404, (method, path, response.text)
        assert client.get("/v1/audits", headers=as_bob).json()["audits"] == []
        assert client.get("/v1/datasets", headers=as_bob).json()["datasets"] == []
        # bob cannot name alice's dataset in a request either
        rejected = client.post("/v1/audits", json=bound_request(dataset=ds_id), headers=as_bob)
        assert rejected.status_code == 422 and rejected.json()["error"]["details"][0]["path"] == "$.dataset"
        # alice still sees all of hers
        assert client.get(f"/v1/audits/{audit['id']}", headers=as_alice).status_code == 200
        assert client.get(f"/v1/datasets/{ds_id}", headers=as_alice).status_code == 200


def test_missing_wrong_and_revoked_keys_are_401(app_client, make_key, settings) -> None:
    key = make_key("carol")
    with app_client() as client:
        assert client.get("/v1/audits").status_code == 401
        assert client.get("/v1/audits", headers={"Authorization": "Bearer ica_nope_nope"}).status_code == 401
        forged = key[:-4] + "AAAA"
        assert client.get("/v1/audits", headers={"Authorization": f"Bearer {forged}"}).status_code == 401
        assert client.get("/v1/audits", headers={"Authorization": f"Bearer {key}"}).status_code == 200

        engine = make_engine(settings.sqlalchemy_url)
        with make_session_factory(engine).begin() as session:
            assert keys.revoke_api_key(session, keys.parse_api_key(key)[0])
        engine.dispose()
        response = client.get("/v1/audits", headers={"Authorization": f"Bearer {key}"})
        assert response.status_code == 401 and response.headers["WWW-Authenticate"] == "Bearer"
        assert "revoked" in response.json()["error"]["message"]


def test_auth_off_serves_the_default_tenant(app_client) -> None:
    with app_client(auth_enabled=False) as client:
        audit = client.post("/v1/audits", json=bound_request()).json()
        assert wait_for(client.get, audit["id"])["state"] == "SUCCEEDED"


def _rows() -> list[dict[str, str]]:
    return [{"text": f"example {i}", "label": "a" if i % 2 else "b"} for i in range(20)]
