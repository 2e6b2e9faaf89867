"""Upload validation: good files parse; every bad file is refused with the line and the problem."""

from __future__ import annotations

import json

import pytest

from app.datasets.validate import DatasetValidationError, parse_dataset


def _jsonl(rows: list[dict]) -> bytes:
    return "\n".join(json.dumps(r, ensure_ascii=False) for r in rows).encode()


def _parse(content: bytes, fmt: str = "jsonl", max_rows: int = 1000):
    return parse_dataset(content, fmt=fmt, name="upload", max_rows=max_rows)  # type: ignore[arg-type]


def _error(content: bytes, fmt: str = "jsonl", max_rows: int = 1000) -> DatasetValidationError:
    with pytest.raises(DatasetValidationError) as err:
        _parse(content, fmt, max_rows)
    return err.value


ROWS = [{"text": f"note number {i} – café", "label": "pos" if i % 3 else "neg"} for i in range(10)]


def test_classification_jsonl_with_seeded_80_20_split() -> None:
    ds = _parse(_jsonl(ROWS))
    assert ds.task == "classification" and ds.labels == ("neg", "pos") and ds.name == "upload"
    assert (len(ds.train), len(ds.test)) == (8, 2)
    assert {e.text for e in ds.train + ds.test} == {r["text"] for r in ROWS}
    again = _parse(_jsonl(ROWS))
    assert again.test == ds.test  # the same file always gives the same split
    order = [r["text"] for r in ROWS]
    assert [order.index(e.text) for e in ds.train] == sorted(order.index(e.text) for e in ds.train)


def test_explicit_split_column_and_integer_labels() -> None:
    rows = [{"text": f"t{i}", "label": i % 2, "split": "test" if i < 3 else "train"} for i in range(8)]
    ds = _parse(_jsonl(rows))
    assert [e.text for e in ds.test] == ["t0", "t1", "t2"] and len(ds.train) == 5
    assert ds.labels == ("0", "1")


def test_generation_csv_with_quoted_multiline_text() -> None:
    content = b'text,summary\n"A: hi\nB: hello, you",greeting\nsecond dialogue,short\nthird one,brief\n'
    ds = _parse(content, "csv")
    assert ds.task == "generation" and ds.labels == ()
    texts = {e.text: e.summary for e in ds.train + ds.test}
    assert texts["A: hi\nB: hello, you"] == "greeting"


def test_json_rows_and_bom() -> None:
    ds = _parse(b"\xef\xbb\xbf" + json.dumps({"rows": ROWS}).encode(), "json")
    assert len(ds.train) + len(ds.test) == 10


@pytest.mark.parametrize(
    ("content", "fmt", "line", "field", "message"),
    [
        (_jsonl(ROWS[:2]) + b'\n{"text": "x", "label": }', "jsonl", 3, None, "not valid JSON"),
        (_jsonl(ROWS[:2]) + b"\n[1, 2]", "jsonl", 3, None, "expected a JSON object"),
        (_jsonl([*ROWS[:3], {"text": "", "label": "pos"}]), "jsonl", 4, "text", "must not be empty"),
        (_jsonl([*ROWS[:3], {"text": "x"}]), "jsonl", 4, "label", "missing"),
        (_jsonl([*ROWS[:3], {"text": "x", "label": 1.5}]), "jsonl", 4, "label", "must be a string"),
        (_jsonl([*ROWS[:2], {"text": "x", "lable": "pos"}]), "jsonl", 3, "lable", "unknown field"),
        (
            _jsonl([ROWS[0], {"text": "x", "label": "pos", "split": "dev"}]),
            "jsonl",
            2,
            "split",
            "not on the first",
        ),
        (
            _jsonl([{"text": "a", "summary": "b", "label": "c"}, ROWS[0]]),
            "jsonl",
            1,
            None,
            "both 'label' and 'summary'",
        ),
        (_jsonl([{"body": "a"}, ROWS[0]]), "jsonl", 1, "body", "rows need 'text'"),
        (_jsonl([{"text": "a"}, ROWS[0]]), "jsonl", 2, "label", "not on the first row"),
        (b"text,label\na,pos\nb,neg,extra\n", "csv", 3, None, "3 columns, the header has 2"),
        (b"text,label\na,pos\nb,\n", "csv", 3, "label", "must not be empty"),
    ],
)
def test_errors_name_the_line_and_field(
    content: bytes, fmt: str, line: int, field: str | None, message: str
) -> None:
    err = _error(content, fmt)
    assert err.line == line
    assert err.field == field
    assert message in err.message
    assert f"line {line}" in str(err)


def test_not_utf8_names_the_line() -> None:
    content = _jsonl(ROWS[:2]) + b'\n{"text": "caf\xe9", "label": "pos"}'
    err = _error(content)
    assert err.line == 3 and "not UTF-8" in err.message


def test_row_limit_single_label_and_too_few_rows() -> None:
    assert _error(_jsonl(ROWS), max_rows=5).line == 6
    assert "at least 2" in _error(_jsonl([{"text": "a", "label": "x"}, {"text": "b", "label": "x"}])).message
    assert "at least 2" in _error(_jsonl(ROWS[:1])).message
    assert "at least 2" in _error(b"", "csv").message
    one_split = [{**r, "split": "train"} for r in ROWS]
    assert _error(_jsonl(one_split)).field == "split"
    assert "unknown format" in _error(b"x", "xml").message


def test_rows_of_text_alone_are_an_unlabelled_dataset() -> None:
    rows = [{"text": row["text"]} for row in ROWS]
    dataset = parse_dataset(_jsonl(rows), fmt="jsonl", name="notes", max_rows=100)
    assert dataset.task == "unlabelled" and dataset.labels == ()
    assert len(dataset.train) == 8 and len(dataset.test) == 2
    assert all(e.label is None and e.summary is None for e in dataset.train + dataset.test)
    as_csv = parse_dataset(
        b"text\n" + "\n".join(r["text"] for r in rows).encode(), fmt="csv", name="n", max_rows=100
    )
    assert as_csv.task == "unlabelled" and len(as_csv.train) + len(as_csv.test) == 10
