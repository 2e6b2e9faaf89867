"""Where the client commands write: results on stdout, progress, warnings and errors on stderr, each as
wide as the terminal the command runs in."""

import typer
from rich.console import Console

from iclaudit.cli.exits import Exit

console = Console()
err_console = Console(stderr=True)


def fail(message: str, code: Exit = Exit.USAGE) -> typer.Exit:
    """Print one line to stderr; the caller raises the returned Exit."""
    err_console.print(f"[red]error:[/] {message}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def follow_the_terminal(*consoles: Console) -> None:
    """Rich reads COLUMNS when a console is made (at import); a command run in the same process as an
    earlier one (tests' CliRunner, an embedding program) sees the terminal width it is called with."""
    import os

    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        for each in (console, err_console, *consoles):
            each.width = int(columns)
