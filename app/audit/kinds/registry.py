"""The registry of audit kinds: name → module with `Request` and `run`, and its typed `Result`
(app/audit/results/<kind>.py).

One line per kind; the API's discriminated union and the runner are built from this dict.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from app.audit.results.base import ResultBase

KINDS: dict[str, str] = {
    "bound": "app.audit.kinds.bound",
    "mia": "app.audit.kinds.mia",
    "iclinf": "app.audit.kinds.iclinf",
    "synthetic_generation": "app.audit.kinds.synthetic_generation",
}


def kind_module(kind: str) -> ModuleType:
    """The module implementing `kind` (KeyError for an unknown kind)."""
    return importlib.import_module(KINDS[kind])


def result_model(kind: str) -> type[ResultBase]:
    """The pydantic model of `kind`'s result (app/audit/results/<kind>.py: `Result`)."""
    return importlib.import_module(f"app.audit.results.{kind}").Result  # type: ignore[no-any-return]


def validate_result(kind: str, result: dict[str, Any]) -> ResultBase:
    """`result` as its kind's typed model; `kind` is filled in when the kind's dict lacks it."""
    if kind not in KINDS:
        raise KeyError(kind)
    return result_model(kind).model_validate({"kind": kind, **result})
