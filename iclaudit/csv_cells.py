"""CSV cells a spreadsheet will not run (OWASP "CSV injection"): a text cell that starts with `=`, `+`, `-`,
`@`, a tab or a carriage return is written with a leading single quote, so Excel, LibreOffice and Google
Sheets show it as text instead of evaluating `=HYPERLINK(…)`, `+cmd|…` or `@SUM(…)`.

What is left alone: numbers (int, float, bool: a negative score stays the number -0.5, not the text
"'-0.5"), None, and a text cell that is wholly a plain decimal number ("-0.5", "+3", "-1e-05"), which a
spreadsheet reads as that number and nothing else. Every CSV this project writes goes through it: the
API's (records, sweeps), the CLI's (`iclaudit result --format csv`), and, in JavaScript, the dashboard's
"Download CSV" (app/ui/static/js/api.js, `toCsv`). It lives in the client package so that the light
client's CLI shares it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")


def safe_cell(value: Any) -> Any:
    """`value` as a CSV cell a spreadsheet shows as written (see the module docstring)."""
    if isinstance(value, str) and value.startswith(_TRIGGERS) and not _PLAIN_NUMBER.fullmatch(value):
        return "'" + value
    return value


def safe_row(row: Mapping[str, Any]) -> dict[str, Any]:
    """Every value of a dict row through `safe_cell`."""
    return {key: safe_cell(value) for key, value in row.items()}
