"""The README stays true: its first commands are the Makefile's, every setting is listed, .ci/run calls
exactly the README's test command."""

from __future__ import annotations

import re
from pathlib import Path

from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_opens_with_the_two_commands_and_make_has_them() -> None:
    first_block = README.split("```")[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["make serve", "make test"]
    targets = re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    assert {"venv", "serve", "test"} <= set(targets)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert lines[1:] and "set -euo pipefail" in lines and lines[-1] == "make test"


def test_every_setting_is_in_the_readme() -> None:
    missing = [name for name in Settings.model_fields if f"`ICLAUDIT_{name.upper()}`" not in README]
    assert missing == []


def test_the_quickstart_example_exists_and_is_a_valid_request() -> None:
    from app.schemas.audits import request_adapter

    assert "iclaudit submit examples/bound-counts.json --watch" in README
    request_adapter().validate_json((ROOT / "examples/bound-counts.json").read_text())
