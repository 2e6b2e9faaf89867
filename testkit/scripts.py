"""The repository's scripts (docs/results/*.py, scripts/*.py, bench suites) loaded as modules by their
path, for the tests that check a page is what its script prints."""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_script(relative: str) -> ModuleType:
    """The script at `relative` (to the repository root), executed as a module named after its file."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(f"{path.stem}_script", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def missing_from(page: str, lines: Iterable[str]) -> list[str]:
    """The `lines` (what a script prints) that the page at `page` (relative to the root) does not hold."""
    held = set((ROOT / page).read_text().splitlines())
    return [line for line in lines if line not in held]
