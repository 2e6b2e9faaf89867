"""/v1/datasets: uploads in each format, a bad line is a 422 naming it with nothing stored, list/get/delete."""

from __future__ import annotations

import json

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
