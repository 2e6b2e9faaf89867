"""A report to share: one self-contained HTML file of a finished audit (`render`). Everything is inline — the CSS,
the charts as PNG data URIs, no script and no link that loads anything — so it opens offline, from a file, and
prints to PDF (print CSS: A4, no split figures or rows, colours kept).

It holds the headline with its next steps, the results and charts, the per-record table and the evidence
sample, the method in plain words with references, the request (folded, its null fields left out) with the
reproduction lines, and the software version and commit."""

from __future__ import annotations

import base64
import html
import io
import json
import math
import os
import subprocess
import threading
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from app.reports import plots

ROOT = Path(__file__).resolve().parents[2]
_LOCK = threading.Lock()
THREATS = {"black_box": "black-box", "white_box": "white-box"}
OUTCOME_COLORS = {**plots.VERDICT_COLORS}
REFERENCES = {
    "001": "Hongyi Li, James Flemings, Youngjun Choi, Murali Annavaram. Evaluating Privacy Leakage From "
    "In-Context Learning (ICLInf). Preprint.",
    "002": "Jacob Choi, Shuying Cao, Xingjian Dong, Sai Praneeth Karimireddy. ContextLeak: Auditing Leakage in "
    "Private In-Context Learning Methods. ICML 2025 Workshop on the Impact of Memorization on Trustworthy "
    "Foundation Models.",
    "003": "Yuyang Xia, Ruixuan Liu, Li Xiong. Tight and Practical Privacy Auditing for Differentially Private "
    "In-Context Learning. Preprint.",
    "GDP": "Jinshuo Dong, Aaron Roth, Weijie J. Su. Gaussian Differential Privacy. Journal of the Royal "
    "Statistical Society Series B 84(1), 2022.",
    "CP": "Matthew Jagielski, Jonathan Ullman, Alina Oprea. Auditing Differentially Private Machine Learning: "
    "How Private is Private SGD? NeurIPS 2020 (Clopper-Pearson lower bounds on ε).",
    "VOTE": "Tong Wu, Ashwinee Panda, Jiachen T. Wang, Prateek Mittal. Privacy-Preserving In-Context Learning "
    "for Large Language Models. ICLR 2024.",
    "SYN": "Kareem Amin, Alex Bie, Weiwei Kong, Alexey Kurakin, Natalia Ponomareva, Umar Syed, Andreas Terzis, "
    "Sergei Vassilvitskii. Private Prediction for Large-Scale Synthetic Text Generation. Findings of EMNLP 2024.",
}
METHOD = {
    "mia": (
        ["002", "003", "VOTE", "GDP", "CP"],
        "A membership-inference audit. One record, the canary, is put into the in-context exemplars (C1) or "
        "left out (C0); everything else is the same. The audited system answers the attack's query many times "
        "for each context (the trials). An attacker who sees only the released answer (black-box) or the "
        "model's scores (white-box) guesses whether the canary was in. If the system kept its ε promise, no "
        "guess could tell C1 from C0 better than ε allows: a test whose true- and false-positive rates, with "
        "confidence intervals, lie beyond that limit proves a lower bound on the ε the system really has "
        "(003 Alg. 1; 002 §3). The verdict compares that lower bound with the claimed ε: above it is a "
        "violation; with nothing claimed, above max_epsilon it is a leak; an audit too weak to see either is "
        "inconclusive, else consistent.",
    ),
    "bound": (
        ["CP", "GDP", "003"],
        "A bound from counts a membership test already produced: its true and false positives with the record "
        "in (tp, fn) and out (fp, tn). Clopper-Pearson intervals on both rates give the smallest ε (and the "
        "Gaussian-DP μ) consistent with them at the stated confidence, compared with the claimed ε.",
    ),
    "iclinf": (
        ["001"],
        "ICLInf measures how much each in-context exemplar moves the model's answer: for each query, the "
        "largest change in log-probability when one exemplar is removed (leave-one-out), averaged over the "
        "queries (001 Eq. 4). It is an influence figure, not a DP guarantee; there is no verdict.",
    ),
    "synthetic_generation": (
        ["SYN", "GDP"],
        "DP synthetic generation releases text token by token from the private exemplars' predictions with "
        "noise; its privacy loss is accounted in Rényi DP at each order and converted to (ε, δ). The verdict "
        "compares the ε spent on these examples with the budget the parameters guarantee.",
    ),
}
CSS = """
:root { --fg:#1a1d21; --muted:#4f5660; --line:#d0d5db; --panel:#f4f6f8; --accent:#0b5cad;
  --bad:#a4161a; --bad-bg:#fbe5e6; --warn:#7a4a00; --warn-bg:#fff1d6; --ok:#17663a; --ok-bg:#e3f4ea; }
* { box-sizing: border-box; }
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, Arial, sans-serif; color: var(--fg);
  margin: 0 auto; max-width: 60rem; padding: 1.5rem; line-height: 1.45; font-size: 15px; overflow-wrap: break-word; }
h1 { font-size: 1.5rem; margin: 0 0 0.3rem; overflow-wrap: anywhere; }
h2 { font-size: 1.2rem; margin: 1.6rem 0 0.5rem; border-bottom: 1px solid var(--line); padding-bottom: 0.2rem; }
h3 { font-size: 1.05rem; margin: 1rem 0 0.4rem; }
.muted { color: var(--muted); }
code, pre, .mono { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 0.88em; }
pre { background: var(--panel); border: 1px solid var(--line); border-radius: 4px; padding: 0.6rem;
  white-space: pre-wrap; overflow-wrap: anywhere; }
table { border-collapse: collapse; width: 100%; margin: 0.4rem 0 0.8rem; }
th, td { text-align: left; padding: 0.3rem 0.5rem; border-bottom: 1px solid var(--line); vertical-align: top;
  overflow-wrap: break-word; }
th { background: var(--panel); }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.headline { border: 1px solid var(--line); border-left: 6px solid var(--muted); border-radius: 6px;
  padding: 0.7rem 1rem; background: var(--panel); }
.headline[data-verdict=violation], .headline[data-verdict=leak] { border-left-color: var(--bad); background: var(--bad-bg); }
.headline[data-verdict=inconclusive] { border-left-color: var(--warn); background: var(--warn-bg); }
.headline[data-verdict=consistent] { border-left-color: var(--ok); background: var(--ok-bg); }
.badge { display: inline-block; border: 1px solid currentColor; border-radius: 999px; padding: 0 0.5rem;
  font-weight: 700; text-transform: uppercase; font-size: 0.85rem; background: #fff; }
.headline .text { font-weight: 600; font-size: 1.1rem; }
.headline .next-steps { list-style: none; margin: 0.3rem 0 0; padding: 0; }
figure { margin: 0.8rem 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
figcaption { font-size: 0.85rem; color: var(--muted); }
.c1c0 { display: grid; grid-template-columns: repeat(auto-fit, minmax(min(100%, 18rem), 1fr)); gap: 1rem; }
blockquote { margin: 0.3rem 0; padding: 0.4rem 0.8rem; border-left: 4px solid var(--accent); background: var(--panel); }
ol.refs li { margin-bottom: 0.3rem; }
footer { margin-top: 2rem; font-size: 0.85rem; color: var(--muted); border-top: 1px solid var(--line); padding-top: 0.5rem; }
@page { size: A4; margin: 14mm 12mm; }
/* A narrow screen: a table of many columns becomes one block per row, each value named by its column, so no
   column is squeezed until its words break (nor does the page scroll sideways). */
@media screen and (max-width: 40rem) {
  table.wide, table.wide tbody, table.wide tr, table.wide td { display: block; }
  table.wide thead { position: absolute; left: -9999px; }
  table.wide tr { border-bottom: 1px solid var(--line); padding: 0.3rem 0; }
  table.wide td { border: 0; padding: 0.05rem 0.5rem; text-align: left; }
  table.wide td::before { content: attr(data-label) ": "; font-weight: 600; }
}
@media print {
  body { max-width: none; padding: 0; font-size: 10.5pt; }
  * { -webkit-print-color-adjust: exact; print-color-adjust: exact; }
  h2, h3 { break-after: avoid; }
  figure, tr, .headline, blockquote, pre.short { break-inside: avoid; }
  .c1c0 { grid-template-columns: 1fr 1fr; }
}
"""


def _e(value: Any) -> str:
    return html.escape(str(value), quote=True)


def fmt(value: Any, unbounded: bool = False) -> str:
    """A number for people, as the dashboard writes it: 4 significant digits, ∞, — for none."""
    if value is None:
        return "∞" if unbounded else "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        if not math.isfinite(value):
            return "∞" if value > 0 else "−∞"
        if value != 0 and (abs(value) < 1e-3 or abs(value) >= 1e6):
            return f"{value:.2e}"
        return f"{float(f'{value:.4g}'):g}"
    return str(value)


@cache
def software() -> dict[str, str]:
    """The installed iclaudit version and the source commit (ICLAUDIT_GIT_COMMIT, else the checkout's HEAD)."""
    try:
        version = metadata.version("iclaudit")
    except metadata.PackageNotFoundError:
        version = "unknown"
    commit = os.environ.get("ICLAUDIT_GIT_COMMIT", "")
    if not commit and (ROOT / ".git").exists():
        try:
            out = subprocess.run(
                ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5
            )
            commit = out.stdout.strip() if out.returncode == 0 else ""
        except (OSError, subprocess.SubprocessError):
            commit = ""
    return {"version": version, "commit": commit or "unknown"}


def _png(fig: Figure) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return base64.b64encode(buffer.getvalue()).decode()


def _figure(data: str, alt: str, caption: str, chart: str) -> str:
    return (
        f'<figure data-chart="{_e(chart)}"><img class="chart" alt="{_e(alt)}" '
        f'src="data:image/png;base64,{data}"><figcaption>{_e(caption)}</figcaption></figure>'
    )


def _records_chart(records: list[dict], confidence: float) -> str:
    """−log₁₀ p per record, riskiest first, against the flag line (as the dashboard draws it)."""
    top = records[:50]
    cut = (1 - confidence) / max(1, len(records))
    values = [-math.log10(max(r.get("p_value", 1.0), 1e-300)) for r in top]
    with _LOCK:
        fig = Figure(figsize=(9, 3.2), dpi=plots.DPI, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        colors = ["#a4161a" if r.get("flagged") else "#0b5cad" for r in top]
        ax.bar(range(1, len(top) + 1), values, color=colors)
        ax.axhline(-math.log10(cut), color="#17663a", linestyle="--", label=f"flag line: p = {cut:.2g}")
        ax.set_ylim(0, max([*values, -math.log10(cut)]) * 1.15)
        ax.set_xlabel("record, riskiest first")
        ax.set_ylabel("−log₁₀ p (sign test)")
        ax.legend(loc="upper right", fontsize=8)
        return _png(fig)


def _evidence_chart(evidence: dict) -> str | None:
    """The sampled trials' white-box scores, C1 beside C0, one row per record."""
    records = [r for r in evidence.get("records") or [] if any(t.get("score") is not None for t in r["c1"])]
    if not records:
        return None
    with _LOCK:
        fig = Figure(figsize=(9, 0.9 + 0.7 * len(records)), dpi=plots.DPI, layout="constrained")
        FigureCanvasAgg(fig)
        ax = fig.subplots()
        for i, r in enumerate(records):
            for side, color, dy in (("c1", "#a4161a", 0.12), ("c0", "#0b5cad", -0.12)):
                xs = [t["score"] for t in r[side] if t.get("score") is not None]
                label = ("C1: record in" if side == "c1" else "C0: record out") if i == 0 else None
                ax.scatter(xs, [i + dy] * len(xs), color=color, s=36, label=label)
        ax.set_yticks(range(len(records)), [r["record_id"] for r in records])
        ax.set_ylim(-0.6, len(records) - 0.4)
        ax.set_xlabel("white-box score of a sampled trial (higher = the attack says 'in')")
        ax.legend(loc="upper right", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        return _png(fig)


def _table(head: list[str], rows: list[list[Any]], table_id: str, numeric_from: int = 1) -> str:
    """A table; one of more than three columns is `wide`: on a narrow screen each row becomes a block of values,
    each named by its column (`data-label`)."""
    ths = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td data-label="{_e(head[i] if i < len(head) else "")}"'
            + (' class="num"' if i >= numeric_from else "")
            + f">{_e(c)}</td>"
            for i, c in enumerate(row)
        )
        + "</tr>"
        for row in rows
    )
    wide = ' class="wide"' if len(head) > 3 else ""
    return f'<table id="{table_id}"{wide}><thead><tr>{ths}</tr></thead><tbody>{body}</tbody></table>'


def _results(kind: str, result: dict) -> str:
    """The key figures of the result, as tables."""
    if kind in ("mia",) or any(isinstance(result.get(t), dict) for t in THREATS):
        sides = [t for t in THREATS if isinstance(result.get(t), dict)]
        names = [
            ("ε lower bound the verdict used", "epsilon_lower"),
            ("ε empirical (Gaussian-DP)", "epsilon_empirical"),
            ("ε empirical (assumption-free)", "epsilon_empirical_assumption_free"),
            ("μ lower bound", "mu_lower"),
            ("TPR", "tpr"),
            ("FPR", "fpr"),
            ("AUC", "auc"),
            ("threshold", "threshold"),
            ("assumption", "assumption"),
        ]
        rows = [
            [label, *(fmt(result[t].get(key), bool(result[t].get(f"{key}_unbounded"))) for t in sides)]
            for label, key in names
        ]
        out = _table(["", *(THREATS[t] for t in sides)], rows, "report-tests")
        out += _table(
            ["", "value"],
            [
                ["ε claimed (theory)", fmt(result.get("epsilon_theory"))],
                ["max_epsilon (nothing claimed)", fmt(result.get("max_epsilon"))],
                ["ε detectable (the audit's power, P ≥ 0.8)", fmt(result.get("epsilon_detectable"))],
                [
                    "attack efficiency (its source)",
                    _power_efficiency(result.get("power")),
                ],
                [
                    "one-sided leak rate detectable",
                    fmt((result.get("power") or {}).get("leak_rate_detectable")),
                ],
                ["ε ceiling (exact ε of the calibrated noise)", fmt(result.get("epsilon_ceiling"))],
                ["trials per context", fmt(result.get("trials"))],
                ["estimator", fmt(result.get("estimator"))],
                ["LLM forward passes", fmt(result.get("llm_forward_passes"))],
            ],
            "report-figures",
        )
        return out
    scalars = [[k, fmt(v)] for k, v in result.items() if isinstance(v, int | float | str | bool) or v is None]
    return _table(["field", "value"], scalars, "report-figures")


def _records(result: dict) -> str:
    records = result.get("records")
    if not isinstance(records, list) or not records:
        return '<p class="muted" id="report-no-records">This audit has no per-record table (one canary).</p>'
    rows = [
        [
            r.get("rank"),
            r.get("record_id"),
            r.get("record_hash") or "—",
            "yes" if r.get("flagged") else "no",
            fmt(r.get("p_value")),
            fmt(r.get("trials")),
            fmt(r.get("auc")),
            fmt(r.get("gap_mean")),
            fmt(r.get("epsilon_lower")),
            (r.get("text") or "")[:160],
        ]
        for r in records[:100]
    ]
    head = [
        "rank",
        "record",
        "hash",
        "flagged",
        "p-value",
        "trials",
        "AUC",
        "gap in − out",
        "own ε lower",
        "text",
    ]
    flagged = sum(1 for r in records if r.get("flagged"))
    note = f"<p>{flagged} of {len(records)} records flagged as leaking (exact sign test, Bonferroni).</p>"
    shown = "" if len(records) <= 100 else f"<p class='muted'>The riskiest 100 of {len(records)} shown.</p>"
    return note + _table(head, rows, "report-records", numeric_from=4) + shown


def _trials(trials: list[dict]) -> str:
    rows = [
        [
            t.get("trial"),
            t.get("released") or t.get("decision") or fmt(t.get("output")),
            fmt(t.get("score")),
        ]
        for t in trials
    ]
    return _table(["trial", "released / output", "white-box score"], rows, "", numeric_from=2)


def _evidence(evidence: dict | None) -> str:
    if not isinstance(evidence, dict) or not evidence.get("records"):
        return ""
    parts = ["<h3>Evidence: the record, the query, sampled trials (C1 beside C0)</h3>"]
    for r in evidence["records"]:
        parts.append(f'<section class="evidence" data-record="{_e(r["record_id"])}">')
        tag = f' <span class="muted mono">#{_e(r["record_hash"])}</span>' if r.get("record_hash") else ""
        parts.append(f"<h4>{_e(r['record_id'])}{tag}</h4><blockquote>{_e(r.get('text') or '—')}</blockquote>")
        if r.get("secret"):
            parts.append(f"<p>The secret the attack guesses: <code>{_e(r['secret'])}</code></p>")
        if r.get("query"):
            parts.append(f"<p>The attack's query:</p><pre class='short'>{_e(r['query'])}</pre>")
        parts.append(
            f'<div class="c1c0"><div><strong>C1: record in</strong>{_trials(r["c1"])}</div>'
            f"<div><strong>C0: record out</strong>{_trials(r['c0'])}</div></div></section>"
        )
    return "".join(parts)


def compact(value: Any) -> Any:
    """A JSON value without its null members (recursively): a request as a person reads it. The stored request
    holds every field; a null one is at its default, so the compact request is the same request."""
    if isinstance(value, dict):
        return {k: compact(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [compact(v) for v in value]
    return value


def _reproduce(audit: dict, base_url: str) -> str:
    curl = (
        f'curl -s -X POST {base_url}/v1/audits -H "Authorization: Bearer $ICLAUDIT_API_KEY" '
        "-H 'Content-Type: application/json' -d @request.json"
    )
    return (
        "<p>The request is seeded: submitting it again gives the same result. Save the request above as "
        "<code>request.json</code>, then:</p>"
        f'<pre id="report-reproduce-cli">ICLAUDIT_URL={_e(base_url)} iclaudit submit request.json --watch</pre>'
        f'<pre id="report-reproduce-curl">{_e(curl)}</pre>'
        f'<pre id="report-reproduce-result">iclaudit result {_e(audit["id"])} --format html -o report.html</pre>'
    )


def _privacy(audit: dict, redacted: bool, base_url: str) -> str:
    """Whether the records' text is redacted, and how to get the other view."""
    full_url = f"{base_url}/v1/audits/{audit['id']}/report.html?records=full"
    if redacted:
        return (
            '<p class="muted" id="report-redacted" data-records="redacted">Record text is redacted: e-mail '
            "addresses, phone, card and IBAN numbers and long digit runs are masked (names are not), and each "
            "record is named by a stable short hash. The full text, for people allowed to read the records: "
            f"<code>iclaudit result {_e(audit['id'])} --format html --show-records</code> or "
            f"<code>{_e(full_url)}</code>.</p>"
        )
    return (
        '<p id="report-redacted" data-records="full"><strong>This report holds the records’ text as stored '
        "(asked for with records=full): share it only with people allowed to read the records.</strong></p>"
    )


def _next_steps(result: dict[str, Any]) -> str:
    """The headline's second line: the result's next steps (what would make the audit answer), if any."""
    steps = [s["text"] for s in result.get("next_steps") or [] if isinstance(s, dict) and s.get("text")]
    items = "".join(f"<li>{'Next' if i == 0 else 'Or'}: {_e(t)}</li>" for i, t in enumerate(steps))
    return f'<ul id="report-next-steps" class="next-steps">{items}</ul>' if items else ""


def render(
    audit: dict[str, Any],
    *,
    base_url: str = "http://127.0.0.1:8000",
    redacted: bool = True,
    dataset: str | None = None,
) -> str:
    """The report of one SUCCEEDED audit (`audit`: id, kind, request, result, created_at, finished_at), its
    records already redacted or not (`redacted` says which; app/privacy/redact.py); `dataset`: how to name
    the request's dataset (an upload's name and version)."""
    kind, request, result = audit["kind"], audit["request"] or {}, audit["result"] or {}
    outcome = result.get("verdict") if isinstance(result.get("verdict"), str) else None
    headline = result.get("headline") or f"A {kind} audit (no verdict: it measures no ε lower bound)."
    reason = result.get("verdict_reason")
    name = (request.get("labels") or {}).get("name")
    refs, method = METHOD.get(kind, ([], f"A {kind} audit."))
    charts = []
    try:
        png = base64.b64encode(plots.render(kind, request, result)).decode()
        charts.append(
            _figure(
                png, f"Plot of the {kind} result", "The result: the verdict's bound and the test.", "result"
            )
        )
    except plots.PlotError as exc:
        charts.append(f'<p class="muted">No plot: {_e(exc)}</p>')
    if isinstance(result.get("records"), list) and result["records"]:
        confidence = (result.get("confidence") or {}).get("stated") or request.get("confidence") or 0.95
        charts.append(
            _figure(
                _records_chart(result["records"], float(confidence)),
                "Evidence per record",
                "Each bar is one record, riskiest first; above the dashed line it is flagged.",
                "records",
            )
        )
    evidence_png = _evidence_chart(result.get("evidence") or {})
    if evidence_png:
        charts.append(
            _figure(
                evidence_png,
                "Sampled trials, C1 and C0",
                "The sampled trials' scores, C1 beside C0.",
                "evidence",
            )
        )
    sw = software()
    title = f"iclaudit report · {kind} audit {name or audit['id']}"
    body = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(title)}</title>
<style>{CSS}</style></head>
<body>
<header><p class="muted">iclaudit audit report</p>
<h1>{_e(kind)} audit {f"“{_e(name)}” " if name else ""}<span class="mono">{_e(audit["id"])}</span></h1>
<p class="muted">Created {_e(audit.get("created_at") or "—")} · finished {_e(audit.get("finished_at") or "—")}</p></header>
<section class="headline" id="report-headline" data-verdict="{_e(outcome or "none")}">
<p><span class="badge" id="report-verdict">{_e(outcome or "no verdict")}</span>
<span class="text">{_e(headline)}</span></p>
{_next_steps(result)}
{f'<p id="report-reason">Why: {_e(reason)}</p>' if reason and reason not in headline else ""}
</section>
{_privacy(audit, redacted, base_url)}
<h2>Results</h2>
{_results(kind, result)}
<h3>Charts</h3>
{"".join(charts)}
<h2>Per record</h2>
{_records(result)}
{_evidence(result.get("evidence"))}
<h2>The method</h2>
<p id="report-method">{_e(method)}</p>
<h3>References</h3>
<ol class="refs" id="report-references">{"".join(f"<li>[{_e(k)}] {_e(REFERENCES[k])}</li>" for k in refs)}</ol>
<h2>The request and how to reproduce it</h2>
{f'<p id="report-dataset">Dataset: <strong>{_e(dataset)}</strong> (id <span class="mono">{_e(request.get("dataset"))}</span>)</p>' if dataset else ""}
<details id="report-request-fold"><summary>The request (JSON; the fields left at their default are not shown)</summary>
<pre id="report-request">{_e(json.dumps(compact(request), indent=2))}</pre></details>
{_reproduce(audit, base_url)}
<footer id="report-software">iclaudit {_e(sw["version"])} · commit <span class="mono">{_e(sw["commit"])}</span> ·
a self-contained file: nothing in it loads from the network.</footer>
</body></html>
"""
    return body


def _power_efficiency(power: dict | None) -> str:
    """The power model's attack efficiency η and where it came from (design or measured), for the report."""
    if not power or power.get("efficiency") is None:
        return "—"
    return f"{power['efficiency']:.3g} ({power.get('efficiency_source') or '?'})"
