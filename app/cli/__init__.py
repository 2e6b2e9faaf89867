"""The `iclaudit` command: service commands (app/cli/service.py) and calculators (app/cli/science.py)."""

from __future__ import annotations

import typer

app = typer.Typer(name="iclaudit", help="Audit privacy leakage of in-context learning.", no_args_is_help=True)


def _register() -> None:
    from app.cli import science, service

    service.register(app)
    science.register(app)


def main() -> None:
    _register()
    app()
