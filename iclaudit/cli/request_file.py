"""An audit request read from a file or stdin, changed by `--set PATH=VALUE`, and `--label KEY=VALUE`
pairs: each mistake is one line naming the option and exit 3."""

import json
import sys
from pathlib import Path
from typing import Any

from iclaudit.cli.output import fail


def read_request(file: str) -> dict[str, Any]:
    if file == "-":
        text, where = sys.stdin.read(), "standard input"
    else:
        path = Path(file)
        if not path.is_file():
            raise fail(f"{file}: no such file")
        text, where = path.read_text(), file
    try:
        body = json.loads(text)
    except json.JSONDecodeError as exc:
        raise fail(f"{where} is not valid JSON: line {exc.lineno}, column {exc.colno}: {exc.msg}") from exc
    if not isinstance(body, dict):
        raise fail(f"{where} must hold one JSON object (an audit request)")
    return body


def _parsed(raw: str) -> Any:
    """A `--set` value: JSON where it parses (2000, 0.5, true, null, "1", [1, 2], {"name": "none"}), else
    the text itself (`dataset=support`)."""
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return raw


def apply_sets(body: dict[str, Any], pairs: list[str] | None) -> dict[str, Any]:
    """The request with each `--set PATH=VALUE` applied in order: PATH is dotted (`mechanism.epsilon`;
    a number indexes a list), objects on the way are created, the value is typed by `_parsed`."""
    for pair in pairs or []:
        path, sep, raw = pair.partition("=")
        keys = path.split(".")
        if not sep or not all(keys):
            raise fail(f"--set {pair!r}: write PATH=VALUE, e.g. trials=2000 or mechanism.epsilon=1")
        node: Any = body
        for depth, key in enumerate(keys):
            last = depth == len(keys) - 1
            where = ".".join(keys[: depth + 1])
            if isinstance(node, list):
                if not key.isdigit() or int(key) >= len(node):
                    raise fail(f"--set {pair!r}: {where} is not an index of the list (0 to {len(node) - 1})")
                index: Any = int(key)
            elif isinstance(node, dict):
                index = key
                if not last and node.get(key) is None:
                    node[key] = {}
            else:
                raise fail(f"--set {pair!r}: {'.'.join(keys[:depth])} is not an object")
            if last:
                node[index] = _parsed(raw)
            else:
                node = node[index]
    return body


def parse_labels(pairs: list[str] | None) -> dict[str, str]:
    labels = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail(f"--label {pair!r}: write KEY=VALUE")
        labels[key] = value
    return labels
