"""The `iclaudit` command: server commands (app/cli/server.py), the client commands (iclaudit/cli: the
same code the light client's `iclaudit` runs) and calculators (app/cli/science.py). Heavy imports (the
server, numpy, scipy, the HTTP client) wait until a command runs, so `--help` and `status` start fast."""

from __future__ import annotations

import typer

from iclaudit.cli import _flag_shows_no_type as _flag_shows_no_type  # on/off flags show no <bool>
from iclaudit.cli import without_httpx_command_line

app = typer.Typer(name="iclaudit", help="Audit privacy leakage of in-context learning.", no_args_is_help=True)


@app.callback()
def _follow_the_terminal() -> None:
    from app.cli import science, server
    from iclaudit.cli.output import follow_the_terminal

    follow_the_terminal(science.console, server.console, server.err_console)


def _register() -> None:
    from app.cli import science, server
    from iclaudit.cli import commands

    server.register(app)
    commands.register(app)
    science.register(app)


def main() -> None:
    import sys

    from iclaudit.cli.reach import preflight

    without_httpx_command_line()
    preflight(sys.argv[1:])  # before the client's imports: a server that is down is said so at once
    _register()
    app()
