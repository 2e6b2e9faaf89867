"""The registry of audit kinds: name → module with `Request` and `run`, and its typed `Result`
(app/audit/results/<kind>.py).

One line per kind; the API's discriminated union and the runner are built from this dict.
"""

from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any

from pydantic import ValidationError

from app.audit.results.base import ResultBase
from app.audit.results.digest import Verdict, digest

log = logging.getLogger(__name__)

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
    return importlib.import_module(f"app.audit.results.{kind}").Result


def validate_result(kind: str, result: dict[str, Any]) -> ResultBase:
    """`result` as its kind's typed model; `kind` is filled in when the kind's dict lacks it."""
    if kind not in KINDS:
        raise KeyError(kind)
    return result_model(kind).model_validate({"kind": kind, **result})


def typed_result(kind: str, result: dict[str, Any] | None) -> ResultBase | None:
    """A stored result as its kind's model; a row that no longer validates (stored before a field changed)
    is returned unvalidated with a warning rather than failing the read."""
    if result is None:
        return None
    try:
        return validate_result(kind, result)
    except ValidationError as exc:
        log.warning("stored %s result does not match its model (%s); returned as stored", kind, exc)
        return result_model(kind).model_construct(**{"kind": kind, **result})


def verdict_of(kind: str, result: dict[str, Any] | None) -> Verdict | None:
    """The verdict digest of a stored result (app/audit/results/digest.py); None without a result or for
    an unknown kind."""
    if not result or kind not in KINDS:
        return None
    typed = typed_result(kind, result)
    return digest(typed) if typed is not None else None
