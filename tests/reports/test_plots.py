"""Plots of real results: each kind renders a readable PNG (signature, size, not blank); the bound's
drawn Clopper-Pearson bounds are the ones μ_lower is made of; the title is the verdict's headline in its
colour and the ε bars are the bound the verdict used (issue 18); rendering is thread-safe and deterministic."""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
from matplotlib import image
from scipy import special

from app.audit.kinds.registry import validate_result
from app.reports.plots import (
    DPI,
    PLOTS,
    VERDICT_COLORS,
    PlotError,
    figure,
    gdp_curve,
    one_sided_bounds,
    render,
)

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
CASES = [
    pytest.param("bound", "bound", id="bound"),
    pytest.param("mia", "mia", id="mia-bootstrap"),
    pytest.param("mia", "mia_bug", id="mia-violation"),
    pytest.param("mia", "mia_exact", id="mia-exact"),
    pytest.param("mia", "mia_leak", id="mia-leak"),
    pytest.param("iclinf", "iclinf", id="iclinf", marks=pytest.mark.slow),
    pytest.param("synthetic_generation", "synthetic_generation", id="synthgen", marks=pytest.mark.slow),
    pytest.param(
        "synthetic_generation", "synthetic_generation_svt", id="synthgen-svt", marks=pytest.mark.slow
    ),
]


def decode(png: bytes) -> np.ndarray:
    return image.imread(io.BytesIO(png), format="png")


@pytest.mark.parametrize(("kind", "name"), CASES)
def test_each_kind_renders_a_png_of_its_real_result(real_result, kind: str, name: str) -> None:
    request, result = real_result(name)
    png = render(kind, request, result)
    assert png.startswith(PNG_SIGNATURE) and len(png) > 20_000
    pixels = decode(png)
    assert pixels.shape[:2] == (round(4.4 * DPI), 10 * DPI)
    rgb = pixels[..., :3].reshape(-1, 3)
    assert rgb.var(axis=0).min() > 1e-3  # every channel varies: not a blank canvas
    assert len(np.unique(rgb, axis=0)) > 50  # text, bars and lines, not a flat fill


def test_the_violation_audit_is_a_violation(real_result) -> None:
    """The plot marks what the result says: the planted bug's audit reports a violation, the clean one not."""
    assert real_result("mia_bug")[1]["violation"] is True
    assert real_result("mia")[1]["violation"] is False


def _bars(fig) -> list[float]:
    """Heights of the bars on the ε panel (the first axes)."""
    from matplotlib.patches import Rectangle

    return [p.get_height() for p in fig.axes[0].patches if isinstance(p, Rectangle)]


def _title_of(fig) -> tuple[str, object]:
    title = fig._suptitle  # the Figure's suptitle Text
    return " ".join(title.get_text().split()), title.get_color()


@pytest.mark.parametrize("name", ["mia_leak", "mia_bug", "mia"])
def test_the_mia_plot_headlines_the_bound_the_verdict_used(real_result, name: str) -> None:
    """Issue 18: on the leak the Gaussian-DP reading (21.1) is the largest ε figure, but the verdict used
    the assumption-free 3.28; the ε panel's bars are the verdict's bounds, and the title is the headline."""
    request, result = real_result(name)
    typed = validate_result("mia", result)
    fig = figure("mia", request, typed)
    used = [result[tm]["epsilon_lower"] for tm in ("black_box", "white_box") if result.get(tm)]
    assert sorted(_bars(fig)) == pytest.approx(sorted(used))
    unused = [
        result[tm][k]
        for tm in ("black_box", "white_box")
        if result.get(tm)
        for k in ("epsilon_empirical", "epsilon_empirical_assumption_free")
        if result[tm][k] is not None and abs(result[tm][k] - result[tm]["epsilon_lower"]) > 1e-6
    ]
    assert not any(h == pytest.approx(u) for h in _bars(fig) for u in unused)
    text, color = _title_of(fig)
    assert text == result["headline"]
    assert color == VERDICT_COLORS[result["verdict"]]
    if name == "mia_leak":
        assert result["verdict"] == "leak" and result["white_box"]["epsilon_empirical"] > 3 * max(_bars(fig))


def test_the_bound_plot_leads_with_the_verdicts_bound(real_result) -> None:
    request, result = real_result("bound")
    fig = figure("bound", request, validate_result("bound", result))
    texts = [t.get_text() for t in fig.axes[0].texts]
    lead = next(t for t in texts if t.startswith("the verdict's bound"))
    assert f"ε ≥ {result['epsilon_lower']:.3g}" in lead
    assert any("not used by the verdict" in t for t in texts)
    assert _title_of(fig)[0] == result["headline"]


def test_bound_plot_bounds_are_the_ones_mu_lower_is_made_of(real_result) -> None:
    _, result = real_result("bound")
    tpr_lower, fpr_upper = one_sided_bounds(result["counts"], result["confidence"])
    assert tpr_lower < result["tpr"] and fpr_upper > result["fpr"]
    assert special.ndtri(tpr_lower) - special.ndtri(fpr_upper) == pytest.approx(result["mu_lower"], rel=1e-9)
    # so the μ_lower trade-off curve passes through the corner (FPR upper, TPR lower)
    assert gdp_curve(np.array([fpr_upper]), result["mu_lower"])[0] == pytest.approx(tpr_lower, rel=1e-9)


def test_rendering_is_deterministic_and_thread_safe(real_result) -> None:
    jobs = [("bound", *real_result("bound")), ("mia", *real_result("mia"))] * 2
    sequential = [render(*job) for job in jobs]
    with ThreadPoolExecutor(max_workers=4) as pool:
        threaded = list(pool.map(lambda job: render(*job), jobs))
    assert threaded == sequential
    assert sequential[0] != sequential[1]


def test_unknown_kind_and_malformed_result_raise_plot_error(real_result) -> None:
    with pytest.raises(PlotError, match="no plot for audit kind 'nope'"):
        render("nope", {}, {})
    _, result = real_result("bound")
    with pytest.raises(PlotError, match="counts"):
        render("bound", {}, {k: v for k, v in result.items() if k != "counts"})


def test_every_registered_kind_has_a_plot() -> None:
    from app.audit.kinds.registry import KINDS

    assert set(KINDS) <= set(PLOTS)


def test_reports_import_no_web_database_or_queue_code() -> None:
    from project.test_layering import FORBIDDEN, imported_modules

    package = Path(__file__).resolve().parents[2] / "app" / "reports"
    found = [
        (path.name, line, module)
        for path in sorted(package.rglob("*.py"))
        for line, module in imported_modules(path)
        if any(module == f or module.startswith(f + ".") for f in FORBIDDEN)
    ]
    assert found == []
