"""PNG plots of audit results, one small function per kind, dispatched by `PLOTS`.

`render(kind, request, result) -> bytes` reads the result through its kind's typed model and draws on a fresh `matplotlib.figure.Figure` with the Agg canvas
(no pyplot, no global figure state); a module lock serialises drawing because matplotlib's shared caches
(fonts, text layout) are not guaranteed thread-safe. Curves drawn on the ROC panels are Gaussian-DP
trade-off curves TPR = Φ(Φ⁻¹(FPR) + μ) (003 §2): a μ-GDP mechanism admits no test above its curve.

A result with a verdict (app/audit/stats/verdict.py) is titled by its headline, coloured as the dashboard's badge
(red for violation or leak, amber for inconclusive, green for consistent). A chart never headlines a bound the
verdict did not use: the ε bars are the verdict's `epsilon_lower`; the other figures (the Gaussian-DP reading
under assumption none, the assumption-free bound under gdp, the point estimate) are listed in small grey text.
"""

from __future__ import annotations

import io
import textwrap
import threading
from collections.abc import Callable
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from pydantic import ValidationError
from scipy import special

from app.audit.kinds.registry import validate_result
from app.audit.results.base import ResultBase
from app.audit.results.digest import bound_used
from app.audit.stats.bounds import clopper_pearson_lower, clopper_pearson_upper

DPI = 110
_LOCK = threading.Lock()
_BOX = {"boxstyle": "round", "facecolor": "white", "edgecolor": "0.7", "alpha": 0.9}
_THREAT_LABELS = {"black_box": "black-box", "white_box": "white-box"}
VERDICT_COLORS = {
    "violation": "#a4161a",
    "leak": "#a4161a",
    "inconclusive": "#7a4a00",
    "consistent": "#17663a",
}
_ASSUMPTION = {"gdp": "Gaussian-DP", "none": "assumption-free"}


class PlotError(ValueError):
    """The kind has no plot, or its result lacks a field the plot needs."""


def render(kind: str, request: dict[str, Any], result: dict[str, Any] | ResultBase) -> bytes:
    """The PNG of one audit's result, read through its kind's typed model (app/audit/results); PlotError
    for a kind without a plot or a result that does not fit the model or lacks a field the plot needs."""
    draw = PLOTS.get(kind)
    if draw is None:
        raise PlotError(f"no plot for audit kind {kind!r} (plots exist for: {', '.join(PLOTS)})")
    if not isinstance(result, ResultBase):
        try:
            result = validate_result(kind, result)
        except ValidationError as exc:
            raise PlotError(f"this {kind} result cannot be plotted: {exc.errors()[0]['msg']} at "
                            f"{'.'.join(map(str, exc.errors()[0]['loc']))}") from exc  # fmt: skip
    with _LOCK:
        fig = figure(kind, request, result)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
    return buffer.getvalue()


def figure(kind: str, request: dict[str, Any], result: ResultBase) -> Figure:
    """The drawn figure of a typed result (`render` holds the lock around it and saves it as PNG)."""
    fig = Figure(figsize=(10, 4.4), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    try:
        PLOTS[kind](fig, request or {}, result)
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise PlotError(f"this {kind} result cannot be plotted: missing or malformed field {exc}") from exc
    return fig


def _title(fig: Figure, result: Any, setup: str) -> None:
    """The verdict's headline as the title (coloured by outcome) over a smaller line saying what was audited;
    only the setup line for a result without a verdict."""
    headline = _opt(result, "headline")
    if not headline:
        fig.suptitle(setup)
        return
    color = VERDICT_COLORS.get(_opt(result, "verdict"), "black")
    fig.suptitle(textwrap.fill(headline, 110), color=color, fontweight="bold", fontsize=11)
    fig.supxlabel(setup, fontsize=8, color="0.3")


def _unused_figures(bound: Any) -> list[str]:
    """The ε figures of one test that the verdict did not use, each said for what it is."""
    out = []
    if _opt(bound, "assumption", "gdp") == "none":
        out.append(
            f"Gaussian-DP reading {_fmt(bound.epsilon_empirical, _opt(bound, 'epsilon_empirical_unbounded', False))}"
            " (valid only for Gaussian noise)"
        )
    elif _opt(bound, "epsilon_empirical_assumption_free") is not None:
        out.append(f"assumption-free {_fmt(bound.epsilon_empirical_assumption_free)}")
    if _opt(bound, "epsilon_point") is not None or _opt(bound, "epsilon_point_unbounded"):
        out.append(f"point log(TPR/FPR) {_fmt(_opt(bound, 'epsilon_point'), True)} (not a bound)")
    return out


def _need(model: Any, name: str) -> Any:
    """A field the plot cannot do without (KeyError naming it when absent or null)."""
    value = getattr(model, name, None)
    if value is None:
        raise KeyError(name)
    return value


def _opt(model: Any, name: str, default: Any = None) -> Any:
    value = getattr(model, name, None)
    return default if value is None else value


def gdp_curve(fpr: np.ndarray, mu: float) -> np.ndarray:
    """TPR = Φ(Φ⁻¹(FPR) + μ): the best test against a μ-GDP mechanism (003 §2)."""
    return special.ndtr(special.ndtri(fpr) + mu)


def one_sided_bounds(counts: dict[str, int], confidence: float) -> tuple[float, float]:
    """(TPR lower, FPR upper), each one-sided Clopper-Pearson at α = (1 − γ)/2, as in the GDP bound.

    TPR_lower = 1 − β̄ (β̄ the FNR upper bound of `gdp_mu_lower`), so μ_lower = Φ⁻¹(TPR_lower) − Φ⁻¹(FPR_upper).
    """
    alpha = (1 - confidence) / 2
    n_in, n_out = counts["tp"] + counts["fn"], counts["fp"] + counts["tn"]
    return clopper_pearson_lower(counts["tp"], n_in, alpha), clopper_pearson_upper(counts["fp"], n_out, alpha)


def _roc_axes(ax: Axes) -> np.ndarray:
    """Unit square with the chance diagonal; returns the FPR grid for trade-off curves."""
    grid = np.concatenate([np.geomspace(1e-6, 1e-2, 60), np.linspace(1e-2, 1 - 1e-6, 200)])
    ax.plot([0, 1], [0, 1], color="0.6", linestyle=":", linewidth=1, label="chance (μ = 0)")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_aspect("equal")
    ax.set_xlabel("false-positive rate (C0 trials called 'in')")
    ax.set_ylabel("true-positive rate (C1 trials called 'in')")
    ax.grid(alpha=0.3)
    return grid


def _fmt(value: float | None, unbounded: bool = False) -> str:
    if value is None:
        return "∞" if unbounded else "—"
    return f"{value:.3g}"


def plot_bound(fig: Figure, request: dict[str, Any], result: Any) -> None:
    """TPR and FPR with the one-sided Clopper-Pearson bounds used in μ_lower; the ROC corner they make. The
    text box leads with the bound the verdict used; the other ε figures follow in grey, said for what they are."""
    counts = _need(result, "counts").model_dump()
    confidence = float(_opt(result, "confidence", request.get("confidence", 0.95)))
    delta = float(_opt(result, "delta", request.get("delta", 1e-5)))
    tpr, fpr = float(_need(result, "tpr")), float(_need(result, "fpr"))
    tpr_lo, fpr_hi = one_sided_bounds(counts, confidence)
    level = 1 - (1 - confidence) / 2

    ax, roc = fig.subplots(1, 2, width_ratios=[1.1, 1])
    ax.bar(
        [0, 1], [tpr, fpr], color=["tab:blue", "tab:orange"], alpha=0.55, width=0.55, label="point estimate"
    )
    ax.errorbar([0], [tpr], yerr=[[tpr - tpr_lo], [0]], fmt="none", ecolor="k", capsize=10, linewidth=2)
    ax.errorbar([1], [fpr], yerr=[[0], [fpr_hi - fpr]], fmt="none", ecolor="k", capsize=10, linewidth=2)
    ax.annotate(f"lower {tpr_lo:.4f}", (0, tpr_lo), xytext=(14, -12), textcoords="offset points")
    ax.annotate(f"upper {fpr_hi:.4f}", (1, fpr_hi), xytext=(14, 4), textcoords="offset points")
    ax.set_xticks(
        [0, 1],
        [
            f"TPR = {tpr:.4f}\n(n = {counts['tp'] + counts['fn']} C1)",
            f"FPR = {fpr:.4f}\n(n = {counts['fp'] + counts['tn']} C0)",
        ],
    )
    ax.set_xlim(-0.6, 3.4)  # the right half holds the ε text
    ax.set_ylim(0, min(1.0, max(tpr, fpr_hi) * 1.25 + 0.02))
    ax.set_ylabel("rate")
    ax.set_title(f"one-sided Clopper-Pearson bounds, each at {level:.3g}")
    ax.grid(axis="y", alpha=0.3)
    lower, unbounded = bound_used(result)
    assumption = _opt(result, "assumption", "gdp")
    claimed, allowed = _opt(result, "epsilon_claimed"), _opt(result, "max_epsilon", 0.0)
    against = f"claimed ε = {_fmt(claimed)}" if claimed is not None else f"max_epsilon = {_fmt(allowed)}"
    text = (
        f"the verdict's bound ({_ASSUMPTION.get(assumption, assumption)}):\nε ≥ {_fmt(lower, unbounded)}"
        f" at δ = {delta:g}\nvs {against}"
    )
    if _opt(result, "epsilon_detectable") is not None or _opt(result, "epsilon_detectable_unbounded"):
        text += f"\ndetectable: ε ≥ {_fmt(_opt(result, 'epsilon_detectable'), True)}"
    if _opt(result, "biased"):
        text += "\nthreshold chosen in-sample: optimistic"
    ax.text(0.98, 0.98, text, transform=ax.transAxes, ha="right", va="top", fontsize=9, bbox=_BOX)
    others = [
        f"μ_lower = {_need(result, 'mu_lower'):.4f} (joint confidence {confidence:g})",
        "not used by the verdict:",
    ]
    others += [textwrap.fill(line, 32) for line in _unused_figures(result)]
    ax.text(0.98, 0.03, "\n".join(others), transform=ax.transAxes, ha="right", va="bottom", fontsize=7.5,
            color="0.4")  # fmt: skip

    grid = _roc_axes(roc)
    roc.plot(
        grid,
        gdp_curve(grid, float(_need(result, "mu_lower"))),
        color="tab:red",
        label=f"μ_lower = {_need(result, 'mu_lower'):.3f} GDP curve",
    )
    roc.plot([fpr], [tpr], "o", color="tab:blue", label="(FPR, TPR) observed")
    roc.plot([fpr_hi], [tpr_lo], "s", color="tab:red", label="(FPR upper, TPR lower)")
    roc.plot([fpr, fpr_hi], [tpr, tpr_lo], color="0.4", linewidth=1)
    roc.legend(loc="lower right", fontsize=8)
    roc.set_title("ROC space")
    _title(
        fig,
        result,
        f"bound: privacy lower bound from the test's outcomes ({_opt(result, 'threshold_strategy', '')})",
    )


def plot_mia(fig: Figure, request: dict[str, Any], result: Any) -> None:
    """Per threat model: the lower bound the verdict used (red above the claim or max_epsilon, ✗ on a
    violation) against the claim, the calibrated noise's exact ε and the audit's power; TPR vs FPR points."""
    threat_models = [tm for tm in _THREAT_LABELS if getattr(result, tm, None) is not None]
    if not threat_models:
        raise KeyError("black_box or white_box")
    theory, ceiling = _opt(result, "epsilon_theory"), _opt(result, "epsilon_ceiling")
    allowed = float(_opt(result, "max_epsilon", 0.0))
    threshold = theory if theory is not None else allowed
    detectable = _opt(result, "epsilon_detectable")
    ax, roc = fig.subplots(1, 2, width_ratios=[1.2, 1])
    bounds = [bound_used(getattr(result, tm)) for tm in threat_models]
    references = [v for v in (theory, ceiling, detectable, allowed) if v is not None]
    top = max([b for b, _ in bounds if b is not None] + references + [0.1]) * 1.75  # room for the legend
    exact = _opt(result, "estimator") == "exact"
    assumptions = {
        _ASSUMPTION.get(_opt(getattr(result, tm), "assumption", "gdp"), "?") for tm in threat_models
    }
    label = f"ε lower bound the verdict used ({' / '.join(sorted(assumptions))}{', exact' if exact else ''})"
    for i, (tm, (lower, unbounded)) in enumerate(zip(threat_models, bounds, strict=True)):
        height = top / 1.75 * 1.15 if unbounded else (lower or 0.0)
        above = unbounded or (lower is not None and lower > threshold)
        bar = ax.bar(
            i, height, 0.5, color="tab:red" if above else "tab:blue", label=label if i == 0 else None
        )
        ax.bar_label(bar, labels=[_fmt(lower, unbounded)], fontsize=9, fontweight="bold")
        if _opt(getattr(result, tm), "violation"):
            ax.annotate("✗ violation", (i, height), xytext=(0, 14), textcoords="offset points", ha="center",
                        color="tab:red", fontweight="bold")  # fmt: skip
        others = _unused_figures(getattr(result, tm))
        if others:
            ax.annotate(textwrap.fill("not used: " + "; ".join(others), 34), (i, 0), xytext=(0, -30),
                        textcoords="offset points", ha="center", va="top", fontsize=6.5, color="0.45",
                        annotation_clip=False)  # fmt: skip
    if theory is not None:
        ax.axhline(
            theory, color="tab:green", linestyle="--", linewidth=2, label=f"ε claimed = {_fmt(theory)}"
        )
    elif allowed > 0:
        ax.axhline(
            allowed, color="tab:green", linestyle="--", linewidth=2, label=f"max_epsilon = {_fmt(allowed)}"
        )
    if ceiling is not None:
        ax.axhline(ceiling, color="0.45", linestyle=":", linewidth=1.5,
                   label=f"exact ε of the calibrated noise = {_fmt(ceiling)}")  # fmt: skip
    if ceiling is not None and any(b is not None and b > ceiling + 1e-9 for b, _ in bounds):
        bug = _opt(result.mechanism, "bug")
        cause = f"the planted bug {bug}" if bug else "a bug or another mechanism"
        ax.text(0.98, 0.98, textwrap.fill(f"above the calibrated noise's exact ε: the system does not release the "
                f"calibrated noise ({cause})", 40), transform=ax.transAxes, ha="right", va="top", fontsize=7,
                color="0.3")  # fmt: skip
    if detectable is not None:
        ax.axhline(detectable, color="#c07a00", linestyle="-.", linewidth=1.5,
                   label=f"ε detectable (the audit's power) = {_fmt(detectable)}")  # fmt: skip
    ax.set_xticks(range(len(threat_models)), [_THREAT_LABELS[tm] for tm in threat_models])
    ax.set_xlim(-0.7, len(threat_models) - 0.3)
    ax.set_ylim(0, top)
    ax.set_ylabel("ε (at the audit's δ)")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper left", fontsize=7.5)
    if theory is None:
        ax.text(0.98, 0.98, "nothing is claimed", transform=ax.transAxes, ha="right", va="top", fontsize=8,
                bbox=_BOX)  # fmt: skip
    ax.set_title("the bound the verdict used vs the claim")

    grid = _roc_axes(roc)
    if _opt(result, "mu_theory") is not None:
        roc.plot(
            grid,
            gdp_curve(grid, float(_need(result, "mu_theory"))),
            color="tab:green",
            label=f"μ_theory = {_need(result, 'mu_theory'):.3f}: the claim's limit",
        )
    for tm, marker, (lower, unbounded) in zip(threat_models, ("o", "s"), bounds, strict=False):
        bound = getattr(result, tm)
        if _opt(bound, "tpr") is None or _opt(bound, "fpr") is None:
            continue
        above = unbounded or (lower is not None and lower > threshold)
        roc.plot(
            [_need(bound, "fpr")],
            [_need(bound, "tpr")],
            marker,
            color="tab:red" if above else "tab:blue",
            markersize=8,
            label=f"{_THREAT_LABELS[tm]} test (μ_lower = {_need(bound, 'mu_lower'):.3f})",
        )
    roc.legend(loc="lower right", fontsize=8)
    roc.set_title("membership tests in ROC space")
    mech = result.mechanism
    bug = f", bug: {mech.bug}" if _opt(mech, "bug") else ""
    _title(
        fig,
        result,
        f"mia: {_opt(mech, 'name', '?')} (T = {_opt(mech, 'partitions', '?')}{bug}), "
        + (f"claimed ε = {_fmt(theory)}" if theory is not None else "nothing claimed")
        + f", {_opt(result, 'estimator', '')} estimator"
        + (f", {_need(result, 'trials'):,} trials per context" if _opt(result, "trials") else ""),
    )


def plot_iclinf(fig: Figure, request: dict[str, Any], result: Any) -> None:
    """Mean leave-one-out loss by removed position (001 Fig. 1) with the ICLInf line (001 Eq. 4)."""
    per_position = [float(v) for v in _need(result, "per_position")]
    iclinf, std = float(_need(result, "iclinf")), float(_opt(result, "iclinf_std") or 0.0)
    ax = fig.subplots()
    positions = np.arange(1, len(per_position) + 1)
    bars = ax.bar(positions, per_position, color="tab:blue", alpha=0.8, label="mean L_i over queries")
    ax.bar_label(bars, fmt="%.3g", fontsize=8)
    ax.axhline(iclinf, color="tab:red", linewidth=2, label=f"ICLInf = mean of max_i L_i = {iclinf:.3g}")
    ax.axhspan(
        iclinf - std, iclinf + std, color="tab:red", alpha=0.12, label=f"± std over queries ({std:.3g})"
    )
    ax.set_xticks(positions)
    ax.set_xlabel("position i of the removed exemplar (1 = first in the prompt)")
    ax.set_ylabel("privacy loss  max_y |log A(S) − log A(S∖e_i)|  (nats)")
    ax.set_ylim(0, max([*per_position, iclinf + std]) * 1.25 or 1.0)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right", fontsize=8)
    calibrated = ", calibrated" if _opt(result, "calibration") else ""
    fig.suptitle(
        f"iclinf: {_opt(result, 'model', '?')} on {_opt(result, 'dataset', '?')}, k = {len(per_position)} shots, "
        f"m = {_opt(result, 'queries', '?')} queries, {_opt(result, 'output_space', 'labels')}{calibrated}"
        + (f", accuracy {_need(result, 'accuracy'):.0%}" if _opt(result, "accuracy") is not None else "")
    )


def plot_synthetic_generation(fig: Figure, request: dict[str, Any], result: Any) -> None:
    """The headline RDP curve: measured data-dependent RDP (001 Eq. 7 summed over the private tokens) and the
    theory's bound against the order α; beside it the per-token data-dependent RDP at the theory's α*."""
    orders = np.asarray(_need(result, "orders"), dtype=float)
    emp = np.asarray(_need(result, "rdp_empirical"), dtype=float)
    theory = np.asarray(_need(result, "rdp_theory"), dtype=float)
    series = [np.asarray(s, dtype=float) for s in _need(result, "step_losses")]
    masks = _opt(result, "private_mask") or [[True] * len(s) for s in series]
    alpha, clip = float(_need(result, "alpha")), float(_need(result, "clip"))
    s, tau = int(_need(result, "batch_size")), float(_need(result, "temperature"))
    curve, ax = fig.subplots(1, 2)

    curve.plot(orders, theory, color="tab:red", linestyle="--", label="theory (any examples)")
    curve.plot(
        orders, emp, color="tab:blue", marker=".", linewidth=2, label="data-dependent (these examples)"
    )
    alpha_emp = float(_need(result, "alpha_empirical"))
    curve.axvline(
        alpha_emp, color="tab:blue", alpha=0.4, linewidth=1, label=f"ε_empirical at α = {alpha_emp:g}"
    )
    curve.set_xscale("log")
    if emp.size and emp.min() > 0:
        curve.set_yscale("log")
    curve.set_xlabel("Rényi order α")
    curve.set_ylabel("RDP ε(α) of the whole run")
    curve.set_title("RDP curve")
    private = int(_need(result, "private_tokens"))
    text = (
        f"ε spent (the verdict's figure) = {float(_need(result, 'epsilon_empirical')):.3g}\n"
        f"ε budget = {float(_need(result, 'epsilon_theory')):.3g}  (δ = {float(_need(result, 'delta')):g})\n"
        f"private tokens {private} of {int(_need(result, 'generated_tokens'))}"
    )
    curve.text(0.98, 0.04, text, transform=curve.transAxes, ha="right", va="bottom", fontsize=9, bbox=_BOX)

    start = 1
    for i, (seq, mask) in enumerate(zip(series, masks, strict=False)):
        idx = np.arange(start, start + len(seq))
        ax.plot(idx, seq, "-", linewidth=0.8, color=f"C{i % 10}", alpha=0.6)
        priv = np.asarray(mask, dtype=bool)[: len(seq)]
        ax.plot(idx[priv], seq[priv], "o", markersize=4, color=f"C{i % 10}", label=f"text {i + 1}: private")
        if (~priv).any():
            ax.plot(
                idx[~priv], seq[~priv], "x", markersize=5, color=f"C{i % 10}", label=f"text {i + 1}: public"
            )
        start += len(seq)
    ax.set_xlabel("generated token (texts one after another)")
    ax.set_ylabel(f"data-dependent RDP at α* = {alpha:g}")
    ax.set_title("per-token privacy loss")
    for a in (curve, ax):
        a.grid(alpha=0.3, which="both")
        a.legend(loc="upper left", fontsize=8)
    variant = _opt(result, "variant") or "simplified"
    _title(
        fig,
        result,
        f"synthetic_generation ({variant}): {_opt(result, 'model', '?')}, s = {s}, c = {clip:g}, τ = {tau:.3g}, "
        f"N_gen = {_need(result, 'sequences')}, T_max = {_need(result, 'max_new_tokens')}",
    )


PLOTS: dict[str, Callable[[Figure, dict[str, Any], Any], None]] = {
    "bound": plot_bound,
    "mia": plot_mia,
    "iclinf": plot_iclinf,
    "synthetic_generation": plot_synthetic_generation,
}
