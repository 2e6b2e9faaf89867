"""Reproduce the synthetic-generation section of docs/results/iclinf.md (issue 10 item 4).

    nice -n 10 env OMP_NUM_THREADS=1 .venv/bin/python examples/synthgen-experiments.py run [FILES...]
    .venv/bin/python examples/synthgen-experiments.py report   # markdown tables (stdout) + docs/img/synthgen-*.png

`run` executes each request (default: examples/synthgen-eps{1,5,10}.json, synthgen-svt-eps{5,10}.json) in one
process through `app.audit.standalone.run_request` (the same `run` the service calls) and appends
{file, wall_seconds, result} to docs/results/synthgen-runs.jsonl; files already there are skipped.
`report` prints the summary table, the RDP-curve table (rdp_empirical vs rdp_theory at a few orders) and
plots both curves against α for every run, and the service's result plot (app/reports/plots.py) of
synthgen-svt-eps5.json.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "results" / "synthgen-runs.jsonl"
IMG = ROOT / "docs" / "img"
FILES = [*(f"synthgen-eps{e}.json" for e in (1, 5, 10)), *(f"synthgen-svt-eps{e}.json" for e in (5, 10))]
TABLE_ORDERS = (2.0, 5.0, 18.0, 64.0, 256.0)


def load_runs() -> dict[str, dict]:
    if not RUNS.is_file():
        return {}
    return {row["file"]: row for row in map(json.loads, RUNS.read_text().splitlines())}


def run(files: list[str]) -> None:
    from app.audit.standalone import local_context, run_request

    ctx = local_context()
    done = load_runs()
    for name in files or FILES:
        if name in done:
            continue
        body = json.loads((ROOT / "examples" / name).read_text())
        started = time.perf_counter()
        result = run_request(body, ctx)
        row = {"file": name, "wall_seconds": round(time.perf_counter() - started, 1), "result": result}
        with RUNS.open("a") as f:
            f.write(json.dumps(row) + "\n")
        print(f"{name}: {row['wall_seconds']} s", file=sys.stderr, flush=True)


def report() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = load_runs()
    rows = [(name, runs[name]) for name in FILES if name in runs]
    print(
        "| request | variant | target ε | τ | α* | ε_theory | ε_empirical (α) | RDP at α*: tokens + SVT "
        "| private / generated tokens "
        "| SVT runs (max Δ; theory 1/s) | forward passes | wall s |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for name, row in rows:
        r = row["result"]
        sens = r.get("svt_sensitivities")
        svt = "—" if sens is None else f"{len(sens)} (max Δ {max(sens, default=0):.3f})"
        tokens = sum(sum(seq) for seq in r["step_losses"])
        at_alpha = r["rdp_empirical"][r["orders"].index(r["alpha"])]
        print(
            f"| {name} | {r['variant']} | {r['target_epsilon']:g} | {r['temperature']:.2f} | {r['alpha']:g} "
            f"| {r['epsilon_theory']:.3f} | {r['epsilon_empirical']:.3f} ({r['alpha_empirical']:g}) "
            f"| {tokens:.4f} + {at_alpha - tokens:.4f} "
            f"| {r['private_tokens']} / {r['generated_tokens']} | {svt} "
            f"| {r['llm_forward_passes']} | {row['wall_seconds']} |"
        )
    print("\nRDP curves, data-dependent / theory (ratio), at a few orders α:\n")
    print("| request | " + " | ".join(f"α = {a:g}" for a in TABLE_ORDERS) + " |")
    print("|---|" + "---|" * len(TABLE_ORDERS))
    for name, row in rows:
        r = row["result"]
        cells = []
        for a in TABLE_ORDERS:
            i = r["orders"].index(a)
            emp, th = r["rdp_empirical"][i], r["rdp_theory"][i]
            cells.append(f"{emp:.3g} / {th:.3g} ({emp / th:.1%})")
        print(f"| {name} | " + " | ".join(cells) + " |")
    if not rows:
        return
    IMG.mkdir(parents=True, exist_ok=True)
    fig, ax = plt.subplots(figsize=(7, 4.4))
    for i, (_name, row) in enumerate(rows):
        r = row["result"]
        label = f"{r['variant']}, ε_target = {r['target_epsilon']:g}"
        ax.plot(r["orders"], r["rdp_theory"], "--", color=f"C{i}", linewidth=1)
        ax.plot(r["orders"], r["rdp_empirical"], "-", color=f"C{i}", marker=".", label=label)
    ax.set(xscale="log", yscale="log", xlabel="Rényi order α", ylabel="RDP ε(α) of the whole run")
    ax.set_title("data-dependent RDP (solid) vs theory (dashed)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(IMG / "synthgen-rdp-curves.png", dpi=120)
    from app.reports.plots import (
        render,
    )  # the result plot the service serves (GET /v1/audits/{id}/result.png)

    for name in ("synthgen-svt-eps5.json",):
        if name in runs:
            body = json.loads((ROOT / "examples" / name).read_text())
            png = render("synthetic_generation", body, runs[name]["result"])
            (IMG / name.replace(".json", "-result.png")).write_bytes(png)


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or ["report"]
    {"run": lambda: run(rest), "report": report}[command]()
