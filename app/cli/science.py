"""Calculators that need no service: `iclaudit bound` and `iclaudit accounting synthetic-generation|gaussian`.

A rich table by default, one JSON object with `--json`. Invalid values exit with code 2 and a message naming
the option.
"""

# No `from __future__ import annotations`: typer reads every command's signature a few times at each start,
# and string annotations would be compiled and evaluated each time (tens of ms of `--help` and `status`).
import json
import math
from collections.abc import Callable
from typing import Annotated, cast

import typer
from rich.console import Console

from app.audit.accounting import MAX_EPSILON, MAX_SCALE, MIN_DELTA, MIN_EPSILON, MIN_SCALE

console = Console()
accounting = typer.Typer(name="accounting", help="Privacy accounting calculators.", no_args_is_help=True)


def _open_unit(name: str) -> Callable[[float | None], float | None]:
    def check(value: float | None) -> float | None:
        if value is not None and not 0 < value < 1:
            raise typer.BadParameter(f"{name} must be strictly between 0 and 1, got {value}")
        return value

    return check


def _within(name: str, low: float, high: float) -> Callable[[float | None], float | None]:
    def check(value: float | None) -> float | None:
        if value is not None and not low <= value <= high:
            raise typer.BadParameter(f"{name} must be in [{low:g}, {high:g}], got {value}")
        return value

    return check


def _epsilon(name: str) -> Callable[[float | None], float | None]:
    return _within(name, MIN_EPSILON, MAX_EPSILON)


def _scale(name: str) -> Callable[[float | None], float | None]:
    return _within(name, MIN_SCALE, MAX_SCALE)


JsonOpt = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of a table.")]
ConfidenceOpt = Annotated[
    float, typer.Option(callback=_open_unit("--confidence"), help="Joint confidence γ of the bound.")
]
DeltaOpt = Annotated[float, typer.Option(callback=_open_unit("--delta"), help="δ of the (ε, δ) conversion.")]
Count = Annotated[int, typer.Option(min=0)]


def _accounting_delta(value: float) -> float:
    if not MIN_DELTA <= value < 1:
        raise typer.BadParameter(f"--delta must be in [{MIN_DELTA:g}, 1), got {value}")
    return value


AccountingDeltaOpt = Annotated[
    float, typer.Option(callback=_accounting_delta, help="δ of the (ε, δ) guarantee.")
]


def _emit(result: dict, as_json: bool, title: str) -> None:
    if as_json:
        typer.echo(json.dumps(result))
        return
    from rich.table import Table  # here: the other commands start without it

    table = Table(title=title)
    table.add_column("quantity")
    table.add_column("value", justify="right")
    for key, value in _rows(result):
        table.add_row(key, _shown(value))
    console.print(table)


def _rows(value: dict, prefix: str = "") -> list[tuple[str, object]]:
    """Nested results as dotted rows (`counts.tp`), never a Python dict in a cell."""
    rows: list[tuple[str, object]] = []
    for key, item in value.items():
        if isinstance(item, dict):
            rows.extend(_rows(item, f"{prefix}{key}."))
        else:
            rows.append((f"{prefix}{key}", item))
    return rows


def _shown(value: object) -> str:
    """A cell for people: 6 significant digits, — for none, yes/no, lists comma-separated."""
    if value is None:
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        return f"{value:.6g}" if math.isfinite(value) else str(value)
    if isinstance(value, list | tuple):
        return ", ".join(_shown(v) for v in value)
    return str(value)


def bound(
    tp: Annotated[int, typer.Option("--tp", min=0, help="C1 trials called 'in' (true positives).")],
    fn: Annotated[int, typer.Option("--fn", min=0, help="C1 trials called 'out' (false negatives).")],
    fp: Annotated[int, typer.Option("--fp", min=0, help="C0 trials called 'in' (false positives).")],
    tn: Annotated[int, typer.Option("--tn", min=0, help="C0 trials called 'out' (true negatives).")],
    confidence: ConfidenceOpt = 0.95,
    delta: DeltaOpt = 1e-5,
    assumption: Annotated[
        str,
        typer.Option(
            help="The bound epsilon_lower reports: none (assumption-free, any mechanism) or gdp (only for a "
            "known Gaussian mechanism)."
        ),
    ] = "none",
    as_json: JsonOpt = False,
) -> None:
    """How much a system leaks at least, from a membership test's outcome counts: two lower bounds on ε at
    the same joint confidence — one assuming Gaussian noise, one valid for any mechanism."""
    from app.audit.stats.bounds import (  # numpy, scipy: at use
        ASSUMPTIONS,
        Assumption,
        Counts,
        gdp_bound_from_counts,
    )

    if assumption not in ASSUMPTIONS:
        raise typer.BadParameter(
            f"choose {' or '.join(ASSUMPTIONS)}, got {assumption!r}", param_hint="--assumption"
        )
    if tp + fn == 0:
        raise typer.BadParameter("--tp + --fn must be > 0 (at least one C1 trial)", param_hint="--tp/--fn")
    if fp + tn == 0:
        raise typer.BadParameter("--fp + --tn must be > 0 (at least one C0 trial)", param_hint="--fp/--tn")
    result = gdp_bound_from_counts(
        Counts(tp=tp, fn=fn, fp=fp, tn=tn),
        confidence=confidence,
        delta=delta,
        assumption=cast(Assumption, assumption),  # one of ASSUMPTIONS (checked above)
    )
    _emit(result.as_dict(), as_json, "privacy lower bound")


@accounting.command("synthetic-generation")
def synthetic_generation(
    delta: AccountingDeltaOpt = 1e-5,
    sequences: Annotated[int, typer.Option(min=1, max=1_000_000, help="N_gen: synthetic texts.")] = 50,
    max_new_tokens: Annotated[int, typer.Option(min=1, max=100_000, help="T_max: tokens per text.")] = 40,
    target_epsilon: Annotated[
        float | None,
        typer.Option(callback=_epsilon("--target-epsilon"), help="ε to reach (with --solve-for)."),
    ] = None,
    clip: Annotated[float | None, typer.Option(callback=_scale("--clip"), help="c: logit clip.")] = None,
    batch_size: Annotated[
        int | None, typer.Option(min=1, max=1_000_000_000, help="s: one-shot prompts per batch.")
    ] = None,
    temperature: Annotated[
        float | None, typer.Option(callback=_scale("--temperature"), help="τ: sampling temperature.")
    ] = None,
    solve_for: Annotated[
        str | None,
        typer.Option(help="temperature | clip | batch-size: the parameter to solve (omit its flag)."),
    ] = None,
    svt_noise: Annotated[
        float | None,
        typer.Option(
            callback=_scale("--svt-noise"), help="σ of the sparse vector test (Amin et al. variant svt)."
        ),
    ] = None,
    private_tokens: Annotated[
        int | None, typer.Option(min=1, max=100_000_000, help="r: private-token budget (with --svt-noise).")
    ] = None,
    as_json: JsonOpt = False,
) -> None:
    """The ε that DP synthetic text generation spends, or the temperature, clip or batch size that reaches a
    target ε. With --svt-noise, Amin et al.'s sparse-vector variant: only r private tokens pay (their Thm 1)."""
    if private_tokens is not None and svt_noise is None:
        raise typer.BadParameter("needs --svt-noise", param_hint="--private-tokens")
    target = solve_for.replace("-", "_") if solve_for else None
    if target is not None and target not in ("temperature", "clip", "batch_size"):
        raise typer.BadParameter("choose temperature, clip or batch-size", param_hint="--solve-for")
    flags = {"temperature": temperature, "clip": clip, "batch_size": batch_size}
    if target is not None and flags[target] is not None:
        raise typer.BadParameter(
            f"omit --{target.replace('_', '-')}: it is the parameter being solved", param_hint="--solve-for"
        )
    for name, value in flags.items():
        if value is None and name != target:
            raise typer.BadParameter(
                f"--{name.replace('_', '-')} is required", param_hint=f"--{name.replace('_', '-')}"
            )
    if target is not None and target_epsilon is None:
        raise typer.BadParameter("required with --solve-for", param_hint="--target-epsilon")
    from app.audit.accounting.rdp import synthetic_generation_parameters

    try:
        result = synthetic_generation_parameters(
            delta=delta, sequences=sequences, max_new_tokens=max_new_tokens, clip=clip, batch_size=batch_size,
            temperature=temperature, target_epsilon=target_epsilon, solve_for=target, svt_noise=svt_noise,
            private_tokens=private_tokens,
        )  # fmt: skip
    except (ValueError, OverflowError) as error:
        raise typer.BadParameter(str(error), param_hint="--target-epsilon") from error
    _emit(result, as_json, "DP synthetic generation")


@accounting.command("gaussian")
def gaussian(
    epsilon: Annotated[float, typer.Option(callback=_epsilon("--epsilon"), help="ε of the mechanism.")],
    delta: AccountingDeltaOpt = 1e-5,
    sensitivity: Annotated[
        float, typer.Option(callback=_scale("--sensitivity"), help="L2 sensitivity Δ₂ (√2 for votes).")
    ] = 1.0,
    analytic: Annotated[
        bool, typer.Option("--analytic", help="Analytic Gaussian (Balle & Wang 2018).")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Noise σ for (ε, δ)-DP (classic, or analytic with --analytic), the mechanism's μ = Δ₂/σ, the exact ε at δ
    of that σ, and a warning where the classic σ does not keep the claim (ε ≳ 8.4 at δ = 1e-5)."""
    from app.audit.accounting.gaussian import gaussian_calibration

    _emit(
        gaussian_calibration(epsilon, delta, sensitivity=sensitivity, analytic=analytic), as_json, "Gaussian"
    )


def register(app: typer.Typer) -> None:
    """Add `bound` and the `accounting` group to the iclaudit command."""
    app.command("bound")(bound)
    app.add_typer(accounting)
