"""Parse and validate an uploaded dataset (JSONL, CSV or a JSON list of rows) into a `Dataset`.

Rules (each violation raises `DatasetValidationError` naming the line and field):
- UTF-8 only (a leading BOM is ignored); at least 2 rows, at most `max_rows`.
- Every row is `{text, label}` (classification), `{text, summary}` (generation) or `{text}` alone
  (unlabelled: for audits that read no label, e.g. a likelihood attack on the records' own text), decided
  by the first row and the same for all rows; `text`, `summary` non-empty strings; `label` a non-empty
  string (an integer label is kept as its decimal string). Classification needs at least 2 distinct labels.
- An optional `split` field, `train` or `test`: when one row has it, every row must, and both splits
  must be non-empty. Without it the rows are split 80/20 by a seeded permutation
  (`numpy.random.default_rng(0)`, test = ⌈0.2·n⌉ rows), each split kept in file order — so the same
  file always gives the same split.
- Other fields are rejected (a misspelt `lable` is an error, not silently dropped).

Line numbers: JSONL = the physical line; CSV = the physical line where the record ends (header = 1);
JSON = the row's 1-based position in the list.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from app.datasets.types import Dataset, Example

SPLIT_SEED = 0
TEST_FRACTION = 0.2
_TOO_DEEP = "JSON nested too deeply (a row is one flat object)"
_ALLOWED = {
    "classification": {"text", "label", "split"},
    "generation": {"text", "summary", "split"},
    "unlabelled": {"text", "split"},
}
ROW_FORMAT = (
    'rows are {"text", "label"} (classification), {"text", "summary"} (generation) or {"text"} alone '
    '(unlabelled), with an optional "split" of "train" or "test": one JSON object per line (.jsonl), a CSV '
    "with those columns in its header, or a JSON list of objects"
)


class DatasetValidationError(ValueError):
    """A dataset that cannot be accepted; `line` and `field` say where, `message` what."""

    def __init__(self, message: str, *, line: int | None = None, field: str | None = None) -> None:
        self.message = message
        self.line = line
        self.field = field
        where = ", ".join(
            p for p in (f"line {line}" if line else "", f"field {field!r}" if field else "") if p
        )
        super().__init__(f"{where}: {message}" if where else message)


@dataclass(frozen=True)
class _Row:
    line: int
    data: dict[str, Any]


def _decode(content: bytes) -> str:
    try:
        text = content.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = content[: exc.start].count(b"\n") + 1
        raise DatasetValidationError(
            f"not UTF-8 (byte 0x{content[exc.start]:02x} at offset {exc.start}); re-save the file as UTF-8",
            line=line,
        ) from None
    return text.removeprefix("\ufeff")


def _rows_jsonl(text: str) -> list[_Row]:
    rows = []
    for n, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            obj = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise DatasetValidationError(f"not valid JSON: {exc.msg} (column {exc.colno})", line=n) from None
        except RecursionError:
            raise DatasetValidationError(_TOO_DEEP, line=n) from None
        if not isinstance(obj, dict):
            raise DatasetValidationError(f"expected a JSON object, got {type(obj).__name__}", line=n)
        rows.append(_Row(n, obj))
    return rows


def _rows_csv(text: str) -> list[_Row]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader)
    except StopIteration:
        return []
    except csv.Error as exc:
        raise DatasetValidationError(f"not valid CSV: {exc}", line=1) from None
    header = [h.strip() for h in header]
    if len(set(header)) != len(header):
        raise DatasetValidationError("duplicate column names in the header", line=1)
    rows = []
    while True:
        try:
            record = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise DatasetValidationError(f"not valid CSV: {exc}", line=reader.line_num) from None
        if not record or all(not c.strip() for c in record):
            continue
        if len(record) != len(header):
            raise DatasetValidationError(
                f"{len(record)} columns, the header has {len(header)}", line=reader.line_num
            )
        rows.append(_Row(reader.line_num, dict(zip(header, record, strict=True))))
    return rows


def _rows_json(text: str) -> list[_Row]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise DatasetValidationError(f"not valid JSON: {exc.msg}", line=exc.lineno) from None
    except RecursionError:
        raise DatasetValidationError(_TOO_DEEP) from None
    if isinstance(data, dict) and isinstance(data.get("rows"), list):
        data = data["rows"]
    if not isinstance(data, list):
        raise DatasetValidationError('expected a JSON list of rows (or {"rows": [...]})')
    rows = []
    for n, obj in enumerate(data, start=1):
        if not isinstance(obj, dict):
            raise DatasetValidationError(f"expected an object, got {type(obj).__name__}", line=n)
        rows.append(_Row(n, obj))
    return rows


def _string(row: _Row, field: str) -> str:
    value = row.data.get(field)
    if isinstance(value, bool) or value is None:
        raise DatasetValidationError(
            "missing" if value is None else "must be a string", line=row.line, field=field
        )
    if isinstance(value, int) and field == "label":
        value = str(value)
    if not isinstance(value, str):
        raise DatasetValidationError(
            f"must be a string, got {type(value).__name__}", line=row.line, field=field
        )
    if not value.strip():
        raise DatasetValidationError("must not be empty", line=row.line, field=field)
    return value


def parse_dataset(
    content: bytes, *, fmt: Literal["jsonl", "csv", "json"], name: str, max_rows: int
) -> Dataset:
    """Validate `content` and return the Dataset (see the module docstring for the rules)."""
    text = _decode(content)
    parsers = {"jsonl": _rows_jsonl, "csv": _rows_csv, "json": _rows_json}
    if fmt not in parsers:
        raise DatasetValidationError(f"unknown format {fmt!r}; use jsonl, csv or json")
    rows = parsers[fmt](text)
    if len(rows) > max_rows:
        raise DatasetValidationError(f"more than the {max_rows} rows allowed", line=rows[max_rows].line)
    if len(rows) < 2:
        raise DatasetValidationError(f"{len(rows)} rows; a dataset needs at least 2")

    first = rows[0].data
    if "label" in first and "summary" in first:
        raise DatasetValidationError(
            "a row has both 'label' and 'summary'; choose one task", line=rows[0].line
        )
    task: Literal["classification", "generation", "unlabelled"]
    if "label" in first:
        task = "classification"
    elif "summary" in first:
        task = "generation"
    elif "text" in first:
        task = "unlabelled"
    else:
        raise DatasetValidationError(
            "rows need 'text' (and 'label' for classification or 'summary' for generation)",
            line=rows[0].line,
            field=next(iter(sorted(set(first) - _ALLOWED["classification"])), None),
        )
    has_split = "split" in first
    examples: list[tuple[Example, str | None]] = []
    for row in rows:
        unknown = sorted(set(row.data) - _ALLOWED[task])
        if unknown:
            why = (
                "not on the first row, which has only text (an unlabelled dataset)"
                if task == "unlabelled" and unknown[0] in ("label", "summary")
                else f"unknown field for a {task} dataset; allowed: {', '.join(sorted(_ALLOWED[task]))}"
            )
            raise DatasetValidationError(why, line=row.line, field=unknown[0])
        body = _string(row, "text")
        if task == "classification":
            example = Example(text=body, label=_string(row, "label"))
        elif task == "generation":
            example = Example(text=body, summary=_string(row, "summary"))
        else:
            example = Example(text=body)
        split = None
        if has_split or "split" in row.data:
            if not has_split:
                raise DatasetValidationError(
                    "'split' is set here but not on the first row", line=row.line, field="split"
                )
            split = row.data.get("split")
            if split not in ("train", "test"):
                raise DatasetValidationError(
                    f"must be 'train' or 'test', got {split!r}", line=row.line, field="split"
                )
        examples.append((example, split))

    if has_split:
        train = tuple(e for e, s in examples if s == "train")
        test = tuple(e for e, s in examples if s == "test")
        if not train or not test:
            raise DatasetValidationError(
                "the 'split' column must give both train and test rows", field="split"
            )
    else:
        n = len(examples)
        n_test = math.ceil(TEST_FRACTION * n)
        test_idx = set(np.random.default_rng(SPLIT_SEED).permutation(n)[:n_test].tolist())
        train = tuple(e for i, (e, _) in enumerate(examples) if i not in test_idx)
        test = tuple(e for i, (e, _) in enumerate(examples) if i in test_idx)

    labels: tuple[str, ...] = ()
    if task == "classification":
        labels = tuple(sorted({e.label for e, _ in examples if e.label is not None}))
        if len(labels) < 2:
            raise DatasetValidationError(
                f"only one label ({labels[0]!r}); classification needs at least 2", field="label"
            )
    return Dataset(name=name, task=task, train=train, test=test, labels=labels)
