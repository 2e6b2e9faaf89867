"""The `iclaudit` command of the light client (clients/python): the client commands of
iclaudit/cli/commands.py — submit (with --wait/--watch, the CI gate), watch, status, result, list, cancel,
plan, resume, datasets, models — with no server code installed. The server's distribution runs the same
commands from app/cli, which adds the server commands (serve, worker, migrate, keys) and the calculators.

Startup is kept short (`--help` and `status` in well under half a second): typer and rich's console only
at import; the HTTP client when a command runs; pydantic (the client's models, typer's converters) and
rich's tables only when a command needs them, so not for `--help` or `status`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

import typer
import typer.core

_display_type_rich = typer.core.TyperOption.display_type_rich


def _flag_shows_no_type(self: typer.core.TyperOption, ctx: Any) -> str | None:
    """An on/off flag takes no value, so its help row shows no `<bool>` (typer's default shows one)."""
    if self.is_flag and not self.count:
        return None
    return _display_type_rich(self, ctx)


typer.core.TyperOption.display_type_rich = _flag_shows_no_type  # type: ignore[method-assign]


def _plain_values_first() -> None:
    """Typer (from 0.2x) converts each parameter's value with a pydantic TypeAdapter built when the command
    runs, even for a value left unset: importing pydantic and building the adapters is most of a short
    command's start (`status`). An unset value, a text or a choice given as text needs no adapter: such
    values are converted here as typer's adapters convert them (unset stays unset, text as it is, a choice
    by typer's own matching); anything else by typer's adapters. A typer without these internals (older,
    click-based) converts without pydantic and is left as it is."""
    try:
        from typer._coercion import RuntimeParam, TypeDescriptor
        from typer._param_types import coerce_cli_choice, lenient_issubclass
    except ImportError:
        return
    found = getattr(typer.core, "build_runtime_param", None)
    if found is None:
        return
    build: Callable[[TypeDescriptor], RuntimeParam] = found

    @dataclass(frozen=True)
    class PlainFirst(RuntimeParam):
        """Typer's conversion, its adapter built only for a value that needs one (RuntimeParam.coerce
        answers an unset value before asking for a conversion)."""

        descriptor: TypeDescriptor

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            plain = self.parameter_info.parser is None and self.descriptor.file_annotation is None
            if plain and self.annotation is str and isinstance(value, str):
                return value
            if plain and lenient_issubclass(self.annotation, Enum):
                if isinstance(value, self.annotation):
                    return value
                if isinstance(value, str):
                    choices = list(self.annotation)
                    try:
                        return coerce_cli_choice(
                            value, choices=choices, case_sensitive=self.descriptor.case_sensitive, ctx=ctx
                        )
                    except ValueError:
                        pass  # typer's adapter says why, in its words
            return build(self.descriptor)._coerce_value(value, param=param, ctx=ctx)

    def plain_first(descriptor: TypeDescriptor) -> RuntimeParam:
        return PlainFirst(descriptor.parameter_info, descriptor.annotation, descriptor)

    typer.core.build_runtime_param = plain_first


_plain_values_first()

app = typer.Typer(
    name="iclaudit",
    help="Audit privacy leakage of in-context learning: the client commands of a running iclaudit service.",
    no_args_is_help=True,
)


@app.callback()
def _follow_the_terminal() -> None:
    from iclaudit.cli.output import follow_the_terminal

    follow_the_terminal()


def without_httpx_command_line() -> None:
    """httpx imports its own command line (`httpx URL`: click, pygments, rich's tables and progress bars)
    when those are installed, as they are beside the server; a process running `iclaudit` never runs it."""
    import sys

    # httpx falls back to a stub `main` (its ImportError path); typeshed types sys.modules' values as modules
    sys.modules.setdefault("httpx._main", None)  # type: ignore[arg-type]


def main() -> None:
    import sys

    from iclaudit.cli.commands import register
    from iclaudit.cli.reach import preflight

    without_httpx_command_line()
    preflight(sys.argv[1:])  # a server that is down is said so at once, before the client's imports
    register(app)
    app()
