"""The science layer (app/audit, app/engines, app/datasets) imports no web, database or queue code."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCIENCE = ("app/audit", "app/engines", "app/datasets")
FORBIDDEN = (
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "celery",
    "kombu",
    "redis",
    "app.api",
    "app.db",
    "app.jobs",
    "workers",
)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
    return found


def _forbidden(module: str) -> bool:
    return any(module == f or module.startswith(f + ".") for f in FORBIDDEN)


@pytest.mark.parametrize("package", SCIENCE)
def test_science_imports_nothing_forbidden(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no modules under {package}"
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if _forbidden(module)
    ]
    assert bad == []


def test_the_scan_sees_a_forbidden_import(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("import os\nfrom sqlalchemy.orm import Session\nimport app.jobs.runner as r\n")
    assert [m for _, m in imported_modules(sample) if _forbidden(m)] == ["sqlalchemy.orm", "app.jobs.runner"]
