"""The `iclaudit` command: service commands (app/cli/service.py), client commands (app/cli/audits.py, through
iclaudit.client) and calculators (app/cli/science.py)."""

from __future__ import annotations

import typer
import typer.core

_display_type_rich = typer.core.TyperOption.display_type_rich


def _flag_shows_no_type(self: typer.core.TyperOption, ctx: typer.Context) -> str | None:
    """An on/off flag takes no value, so its help row shows no `<bool>` (typer's default shows one)."""
    if self.is_flag and not self.count:
        return None
    return _display_type_rich(self, ctx)


typer.core.TyperOption.display_type_rich = _flag_shows_no_type  # type: ignore[method-assign]

app = typer.Typer(name="iclaudit", help="Audit privacy leakage of in-context learning.", no_args_is_help=True)


@app.callback()
def _follow_the_terminal() -> None:
    # Rich reads COLUMNS when a console is made (at import); a command run in the same process as an
    # earlier one (tests' CliRunner, an embedding program) sees the terminal width it is called with.
    import os

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        from app.cli import audits, science, service

        for console in (
            audits.console,
            audits.err_console,
            science.console,
            service.console,
            service.err_console,
        ):
            console.width = int(columns)


def _register() -> None:
    from app.cli import audits, science, service

    service.register(app)
    audits.register(app)
    science.register(app)


def main() -> None:
    import sys

    from app.cli.reach import preflight

    preflight(sys.argv[1:])  # before the client's imports: a server that is down is said so at once
    _register()
    app()
