"""The options and arguments several client commands share (typer's `Annotated` parameters), so each
reads and says the same in every command's --help."""

from enum import StrEnum
from typing import Annotated

import typer

DEFAULT_URL = None  # resolved when a command runs: ICLAUDIT_URL, else default_url()


UrlOpt = Annotated[
    str | None,
    typer.Option(
        "--url",
        envvar="ICLAUDIT_URL",
        help="Address of the running iclaudit service; default http://${HOST:-127.0.0.1}:${PORT:-8000}, "
        "where `make serve` listens.",
    ),
]
KeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", envvar="ICLAUDIT_API_KEY", help="API key (not needed when auth is off)."),
]


class OutputFormat(StrEnum):
    table = "table"
    json = "json"


class ResultFormat(StrEnum):
    table = "table"
    json = "json"
    csv = "csv"
    png = "png"
    html = "html"


AllowInconclusiveOpt = Annotated[
    bool,
    typer.Option(
        "--allow-inconclusive",
        help="Exit 0 instead of 4 when the verdict is inconclusive (the audit could not have seen a "
        "violation), with a warning on stderr.",
    ),
]
IdArg = Annotated[
    str,
    typer.Argument(help="The audit's id, or enough of its start to name one audit (see `iclaudit list`)."),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", help="table for people, json for programs.")]


SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="PATH=VALUE: change the request file's field (dotted: mechanism.epsilon=1; repeatable). The value "
        'is read as JSON (2000, true, null, [1, 2], "1"), else taken as text (dataset=support).',
    ),
]


BaselineOpt = Annotated[
    str | None,
    typer.Option(
        "--baseline",
        help="ID or KEY=VALUE: also fail (exit 1) when the measured lower bound on ε rose above the baseline "
        "audit's upper confidence bound (an audit id, or the newest other SUCCEEDED audit of the same kind "
        "with that label, e.g. branch=main). Implies --wait.",
    ),
]
