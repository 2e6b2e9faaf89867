"""The registry of audit kinds: name → module with `Request` and `run`.

One line per kind; the API's discriminated union and the runner are built from this dict.
"""

from __future__ import annotations

import importlib
from types import ModuleType

KINDS: dict[str, str] = {
    "bound": "app.audit.kinds.bound",
    "mia": "app.audit.kinds.mia",
    "iclinf": "app.audit.kinds.iclinf",
    "synthetic_generation": "app.audit.kinds.synthetic_generation",
}


def kind_module(kind: str) -> ModuleType:
    """The module implementing `kind` (KeyError for an unknown kind)."""
    return importlib.import_module(KINDS[kind])
