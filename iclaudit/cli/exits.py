"""The exit codes of the client commands, and the outcome of a result they go by.

Exit codes of `submit --wait` / `--watch` and `watch` (the CI gate), from the result's `verdict`:
  0  the audit SUCCEEDED and its verdict is `consistent`: it could have seen a violation and saw none;
     also a kind that measures no leakage and so has no verdict (iclinf: influence, not ε)
  1  the audit SUCCEEDED and its verdict is `violation` (a measured lower bound exceeds the claimed ε) or
     `leak` (nothing is claimed and the bound exceeds `max_epsilon`); also a mia claim whose noise cannot
     give the claimed ε even in theory (`theory_violation`); also, with `--baseline`, a measured lower
     bound above the baseline audit's upper bound (a regression)
  2  the audit FAILED or was CANCELLED
  3  a usage error (bad option or file, a request the service refused) or the service could not be reached
  4  the audit SUCCEEDED and its verdict is `inconclusive`: it could not have seen a violation (too few
     trials, no signal, an in-sample threshold, …); `--allow-inconclusive` makes it 0, with a warning
  130  interrupted (Ctrl-C): the audit runs on; re-attach with `iclaudit watch ID`
The last line of the report is the verdict's headline (red: violation or leak; yellow: inconclusive;
green: consistent), followed by the result's next steps when it has any (`next: …`, what would make an
inconclusive audit answer). Other client commands exit 0 on success and 3 on a usage or connection error.
"""

from enum import IntEnum
from typing import TYPE_CHECKING, Any

import typer
import typer.core

if TYPE_CHECKING:
    from iclaudit.client import Audit


class Exit(IntEnum):
    """The gate's exit codes (see the module docstring)."""

    OK = 0
    VIOLATION = 1  # a violation or a leak
    AUDIT_FAILED = 2
    USAGE = 3
    INCONCLUSIVE = 4
    INTERRUPTED = 130


# Typer carries its own copy of click: its UsageError is the base of typer.BadParameter.
UsageError: type[Exception] = typer.BadParameter.__mro__[1]
assert UsageError.__name__ == "UsageError"


class ClientCommand(typer.core.TyperCommand):
    """Bad options and arguments exit 3 (the gate's usage code), not click's 2."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except UsageError as exc:
            exc.exit_code = Exit.USAGE  # type: ignore[attr-defined]
            raise

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:  # values converted at call time (choices, ranges)
            exc.exit_code = Exit.USAGE  # type: ignore[attr-defined]
            raise


class ClientGroup(typer.core.TyperGroup):
    """A group of client commands whose bad options exit 3 too."""

    def make_context(self, info_name: str | None, args: list[str], parent: Any = None, **extra: Any) -> Any:
        try:
            return super().make_context(info_name, args, parent, **extra)
        except UsageError as exc:
            exc.exit_code = Exit.USAGE  # type: ignore[attr-defined]
            raise


FAILING = frozenset({"violation", "leak"})


def field_of(result: Any, name: str) -> Any:
    """A field of a result: a typed or loose model, or the JSON object as the server sent it (`status`)."""
    return result.get(name) if isinstance(result, dict) else getattr(result, name, None)


def outcome_of(result: Any) -> str | None:
    """The outcome the gate acts on, as the server wrote it: the result's `verdict`; for a result stored
    before verdicts existed, `violation` when the result says it is one; None for a kind that measures no
    leakage (iclinf) or no result."""
    if result is None:
        return None
    verdict = field_of(result, "verdict")
    if isinstance(verdict, str):
        return verdict
    return "violation" if field_of(result, "violation") is True else None


def is_failure(result: Any) -> bool:
    """What fails the gate (exit 1): a violation, a leak, or (mia) a claim its noise cannot give even in
    theory (the result's `theory_violation`)."""
    return outcome_of(result) in FAILING or field_of(result, "theory_violation") is True


def exit_code(audit: "Audit", *, allow_inconclusive: bool = False) -> Exit:
    """The gate's exit code (the module docstring's table)."""
    if audit.state != "SUCCEEDED":
        return Exit.AUDIT_FAILED
    if is_failure(audit.result):
        return Exit.VIOLATION
    if outcome_of(audit.result) == "inconclusive" and not allow_inconclusive:
        return Exit.INCONCLUSIVE
    return Exit.OK
