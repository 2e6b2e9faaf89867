"""The PNG of a sweep: ε_lower of each child against the first swept parameter, one colour per
combination of the other grid keys (their mean over seeds joined by a line), and the claimed ε_theory of
the same points dashed; a child whose verdict is a violation is ringed red. Figure + Agg, as plots.py."""

from __future__ import annotations

import io
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from app.reports.plots import _LOCK, DPI, PlotError


def _numeric(values: list[Any]) -> bool:
    return all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)


def render_sweep(grid: dict[str, list[Any]], rows: list[dict[str, Any]]) -> bytes:
    """`rows`: {point, seed, epsilon_lower, epsilon_theory, violation} per child (SweepResult.rows)."""
    if not grid:
        raise PlotError("the sweep has no grid")
    x_key, *others = list(grid)
    drawn = [r for r in rows if r.get("epsilon_lower") is not None]
    if not drawn:
        raise PlotError("no child of this sweep has an ε_lower to plot")
    numeric = _numeric(grid[x_key])
    position = {v: i for i, v in enumerate(grid[x_key])}

    def x_of(value: Any) -> float:
        return float(value) if numeric else float(position[value])

    with _LOCK:
        fig = Figure(figsize=(8, 4.8), dpi=DPI, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        series: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
        for r in drawn:
            series.setdefault(tuple(r["point"].get(k) for k in others), []).append(r)
        for i, (combo, members) in enumerate(sorted(series.items(), key=lambda kv: repr(kv[0]))):
            color = f"C{i % 10}"
            name = ", ".join(f"{k}={v}" for k, v in zip(others, combo, strict=True)) or "ε_lower"
            xs = [x_of(r["point"][x_key]) for r in members]
            ax.scatter(xs, [r["epsilon_lower"] for r in members], color=color, s=22, alpha=0.7)
            by_x: dict[float, list[float]] = {}
            theory: dict[float, float] = {}
            for x, r in zip(xs, members, strict=True):
                by_x.setdefault(x, []).append(r["epsilon_lower"])
                if r.get("epsilon_theory") is not None:
                    theory[x] = r["epsilon_theory"]
            line_x = sorted(by_x)
            ax.plot(
                line_x, [sum(by_x[x]) / len(by_x[x]) for x in line_x], color=color, label=f"{name} (mean)"
            )
            if theory:
                tx = sorted(theory)
                ax.plot(
                    tx,
                    [theory[x] for x in tx],
                    color=color,
                    linestyle="--",
                    alpha=0.8,
                    label=f"{name}: ε_theory" if others else "ε_theory (claimed)",
                )
            bad = [(x, r["epsilon_lower"]) for x, r in zip(xs, members, strict=True) if r.get("violation")]
            if bad:
                bad_x, bad_y = zip(*bad, strict=True)
                ax.scatter(bad_x, bad_y, s=90, facecolors="none", edgecolors="tab:red", linewidths=1.5)
        if any(r.get("violation") for r in drawn):
            ax.scatter([], [], s=90, facecolors="none", edgecolors="tab:red", label="violation")
        if not numeric:
            ax.set_xticks(range(len(grid[x_key])), [str(v) for v in grid[x_key]])
        ax.set_xlabel(x_key)
        ax.set_ylabel("ε (lower bound: solid; claimed: dashed)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
        fig.suptitle(f"sweep: ε_lower against {x_key} ({len(drawn)} audits)")
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    return buffer.getvalue()
