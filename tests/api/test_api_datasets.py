"""/v1/datasets: uploads in each format, a bad line is a 422 naming it with nothing stored, list/get/delete."""

from __future__ import annotations

import json
import time

import pytest


def _rows(n: int = 10) -> list[dict[str, str]]:
    return [{"text": f"review number {i}", "label": "pos" if i % 2 else "neg"} for i in range(n)]


def _jsonl(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(r) for r in rows).encode()


def _csv(rows: list[dict]) -> bytes:
    return ("text,label\n" + "".join(f"{r['text']},{r['label']}\n" for r in rows)).encode()


@pytest.mark.parametrize(
    ("filename", "content"),
    [
        ("reviews.jsonl", _jsonl(_rows())),
        ("reviews.csv", _csv(_rows())),
        ("reviews.json", json.dumps(_rows()).encode()),
    ],
)
def test_upload_file_then_get_list_delete(client, filename: str, content: bytes) -> None:
    response = client.post("/v1/datasets", files={"file": (filename, content)})
    assert response.status_code == 201, response.text
    dataset = response.json()
    assert response.headers["Location"] == f"/v1/datasets/{dataset['id']}"
    assert dataset["name"] == "reviews" and dataset["format"] == filename.rsplit(".", 1)[1]
    assert dataset["task"] == "classification" and sorted(dataset["labels"]) == ["neg", "pos"]
    assert dataset["n_train"] + dataset["n_test"] == 10 and dataset["size_bytes"] == len(content)

    assert client.get(f"/v1/datasets/{dataset['id']}").json() == dataset
    assert [d["id"] for d in client.get("/v1/datasets").json()["datasets"]] == [dataset["id"]]
    assert client.delete(f"/v1/datasets/{dataset['id']}").status_code == 204
    assert client.get(f"/v1/datasets/{dataset['id']}").status_code == 404
    assert client.delete(f"/v1/datasets/{dataset['id']}").status_code == 404


def test_upload_json_rows_and_name_it_in_an_audit_request(client) -> None:
    response = client.post("/v1/datasets", json={"name": "tiny", "rows": _rows()})
    assert response.status_code == 201, response.text
    assert response.json()["format"] == "jsonl"
    listed = client.get("/v1/datasets", params={"page_size": 1}).json()
    assert listed["datasets"][0]["name"] == "tiny" and listed["next_page_token"] is None


def test_bad_line_in_a_file_is_422_naming_it_and_nothing_is_stored(client) -> None:
    rows = _rows()
    content = _jsonl(rows[:3]) + b'\n{"text": "no label here"}\n' + _jsonl(rows[3:])
    response = client.post("/v1/datasets", files={"file": ("bad.jsonl", content)})
    assert response.status_code == 422
    error = response.json()["error"]
    assert "line 4" in error["message"] and error["details"][0]["path"] == "file:4"
    assert client.get("/v1/datasets").json()["datasets"] == []


def test_bad_json_row_is_422_with_its_json_path(client) -> None:
    rows = _rows()
    rows[2] = {"text": "x", "label": "pos", "lable": "typo"}
    response = client.post("/v1/datasets", json={"name": "typo", "rows": rows})
    assert response.status_code == 422
    assert response.json()["error"]["details"][0]["path"].startswith("$.rows[2]")
    assert client.get("/v1/datasets").json()["datasets"] == []


def test_unsupported_upload_shapes(client) -> None:
    assert (
        client.post("/v1/datasets", content=b"text", headers={"Content-Type": "text/plain"}).status_code
        == 415
    )
    unknown = client.post("/v1/datasets", files={"file": ("data.txt", b"a")})
    assert unknown.status_code == 422 and unknown.json()["error"]["details"][0]["path"] == "format"
    missing = client.post("/v1/datasets", json={"rows": _rows()})
    assert missing.status_code == 422 and missing.json()["error"]["details"][0]["path"] == "$.name"


def test_upload_larger_than_the_limit_is_413(app_client, make_key) -> None:
    with app_client(upload_max_bytes=100) as client:
        client.headers["Authorization"] = f"Bearer {make_key('dora')}"
        response = client.post("/v1/datasets", files={"file": ("big.jsonl", _jsonl(_rows(50)))})
        assert (
            response.status_code == 413 and "ICLAUDIT_UPLOAD_MAX_BYTES" in response.json()["error"]["message"]
        )
        assert client.get("/v1/datasets").json()["datasets"] == []


def _notes(n: int = 12) -> list[dict[str, str]]:
    """Records of text alone (no label): made-up notes with a record number each."""
    towns = ("Lindenholm", "Varrow", "Esk", "Marlow")
    return [
        {
            "text": f"Patient {i} from {towns[i % 4]}, record {4400 + i}, reports cough and fever since week {i}"
        }
        for i in range(n)
    ]


def _text_audit(dataset: str, **changes) -> dict:
    return {
        "kind": "mia",
        "dataset": dataset,
        "model": "oracle",
        "seed": 0,
        "mechanism": {"name": "none", "shots_per_partition": 1},
        "attack": {
            "name": "likelihood",
            "threat_model": "white_box",
            "secret": "continuation",
            "canaries": 2,
            "contexts": 2,
        },
        **changes,
    }


def test_unlabelled_records_serve_a_text_audit_and_a_label_audit_is_422_naming_the_field(client) -> None:
    """Rows of text alone upload as an unlabelled dataset; a likelihood audit of the records' own text runs
    on it; audits that read labels are refused at the field that reads them, nothing stored."""
    response = client.post("/v1/datasets", files={"file": ("notes.jsonl", _jsonl(_notes()))})
    assert response.status_code == 201, response.text
    dataset = response.json()
    assert dataset["task"] == "unlabelled" and dataset["labels"] == []
    assert dataset["n_train"] + dataset["n_test"] == 12
    as_csv = client.post(
        "/v1/datasets",
        files={
            "file": ("notes.csv", b"text\n" + b"\n".join(f'"{row["text"]}"'.encode() for row in _notes()))
        },
    )
    assert as_csv.status_code == 201 and as_csv.json()["task"] == "unlabelled", as_csv.text

    label_readers = {
        "$.attack.secret": _text_audit(
            dataset["id"], attack={"name": "likelihood", "secret": "label", "threat_model": "white_box"}
        ),
        "$.mechanism.name": _text_audit(
            dataset["id"],
            estimator="direct",
            llm_calls=2,
            mechanism={"name": "synthetic_generation", "shots_per_partition": 1},
            attack={
                "name": "canary_prompt",
                "variant": "secret",
                "score": "exact",
                "threat_model": "black_box",
            },
        ),
        "$.attack.name": _text_audit(dataset["id"], attack={"name": "gap"}),
        "$.kind": {"kind": "iclinf", "dataset": dataset["id"], "model": "oracle"},
    }
    for path, body in label_readers.items():
        refused = client.post("/v1/audits", json=body)
        assert refused.status_code == 422, (path, refused.text)
        detail = refused.json()["error"]["details"][0]
        assert detail["path"] == path and "labels" in detail["message"] and dataset["id"] in detail["message"]
    assert client.get("/v1/audits").json()["audits"] == []

    membership = _text_audit(dataset["id"], mechanism={"name": "private_voting"}, attack={"name": "inquiry"})
    membership["trials"] = 200
    for body in (membership, _text_audit(dataset["id"])):  # a membership audit, then the one to run
        accepted = client.post("/v1/audits", json=body)
        assert accepted.status_code == 202, accepted.text
    client.post(f"/v1/audits/{client.get('/v1/audits').json()['audits'][1]['id']}/cancel")
    audit_id = accepted.json()["id"]
    deadline = time.monotonic() + 120
    while (audit := client.get(f"/v1/audits/{audit_id}").json())["state"] in ("PENDING", "RUNNING"):
        assert time.monotonic() < deadline, audit
        time.sleep(0.2)
    assert audit["state"] == "SUCCEEDED", audit["error"]


def test_a_bad_row_names_its_line_and_the_row_format(client) -> None:
    rows = _notes(5)
    content = _jsonl(rows[:2]) + b'\n{"text": "x", "label": "late"}\n' + _jsonl(rows[2:])
    response = client.post("/v1/datasets", files={"file": ("notes.jsonl", content)})
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["details"][0]["path"] == "file:3" and "line 3" in error["message"]
    assert '{"text"} alone (unlabelled)' in error["message"] and '{"text", "label"}' in error["message"]
    assert client.get("/v1/datasets").json()["datasets"] == []
