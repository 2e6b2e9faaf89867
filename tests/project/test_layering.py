"""The science layer (app/audit, app/engines, app/datasets) imports no web, database or queue code; the
Python client (iclaudit/) loads none either, with every model it returns."""

from __future__ import annotations

import ast
import subprocess
import sys
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


# The client may load the API's models (app.schemas) and the database-free constants, nothing server-side.
CLIENT_ALLOWED = ("app.db", "app.db.constants")
CLIENT_FORBIDDEN_TOO = ("uvicorn", "app.main", "app.integrations", "app.cli.server")


def _forbidden_to_client(module: str) -> bool:
    if module in CLIENT_ALLOWED:
        return False
    return _forbidden(module) or any(module == f or module.startswith(f + ".") for f in CLIENT_FORBIDDEN_TOO)


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


def test_the_client_imports_nothing_forbidden() -> None:
    files = sorted((ROOT / "iclaudit").rglob("*.py"))
    assert files, "no modules under iclaudit"
    bad = [
        f"{path.relative_to(ROOT)}:{line} imports {module}"
        for path in files
        for line, module in imported_modules(path)
        if _forbidden_to_client(module)
    ]
    assert bad == []


def test_the_client_and_its_models_load_no_server_code() -> None:
    """In a fresh interpreter: the client, then the sweep and schedule models it imports on first use."""
    code = (
        "import sys\n"
        "import iclaudit.client\n"
        "import app.schemas.schedules, app.schemas.sweeps, app.schemas.webhooks\n"
        "print('\\n'.join(sorted(sys.modules)))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.split()
    assert "iclaudit.client" in loaded and "app.schemas.sweeps" in loaded
    assert [m for m in loaded if _forbidden_to_client(m)] == []


def test_the_client_scan_allows_only_the_constants() -> None:
    assert not _forbidden_to_client("app.db.constants") and not _forbidden_to_client("app.schemas.sweeps")
    assert _forbidden_to_client("app.db.models") and _forbidden_to_client("sqlalchemy.orm")
    assert _forbidden_to_client("uvicorn") and _forbidden_to_client("fastapi")
