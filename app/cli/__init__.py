"""The `iclaudit` command: service commands (app/cli/service.py), client commands (app/cli/audits.py, through
iclaudit.client) and calculators (app/cli/science.py)."""

from __future__ import annotations

import typer

app = typer.Typer(name="iclaudit", help="Audit privacy leakage of in-context learning.", no_args_is_help=True)


def _register() -> None:
    from app.cli import audits, science, service

    service.register(app)
    audits.register(app)
    science.register(app)


def main() -> None:
    _register()
    app()
