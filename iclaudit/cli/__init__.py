"""The `iclaudit` command of the light client (clients/python): the client commands of
iclaudit/cli/commands.py — submit (with --wait/--watch, the CI gate), watch, status, result, list, cancel,
plan, resume, datasets, models — with no server code installed. The server's distribution runs the same
commands from app/cli, which adds the service commands (serve, worker, migrate, keys) and the calculators.

Startup is kept short (`--help` and `status` in well under half a second): typer and rich's console only
at import; the HTTP client, pydantic and rich's tables when a command runs.
"""

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

app = typer.Typer(
    name="iclaudit",
    help="Audit privacy leakage of in-context learning: the client commands of a running iclaudit service.",
    no_args_is_help=True,
)


@app.callback()
def _follow_the_terminal() -> None:
    from iclaudit.cli.commands import follow_the_terminal

    follow_the_terminal()


def main() -> None:
    import sys

    from iclaudit.cli.commands import register
    from iclaudit.cli.reach import preflight

    preflight(sys.argv[1:])  # a server that is down is said so at once, before the client's imports
    register(app)
    app()
