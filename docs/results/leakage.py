"""docs/results/leakage.md: the likelihood attack on SmolLM2 — plain ICL, defenses 1–3, private voting.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python docs/results/leakage.py [--small] [names…]
    .venv/bin/python docs/results/leakage.py --report     # the tables of leakage.md, from the runs file

Runs the request files examples/leakage-likelihood-*.json in one process (one engine, so ε = 8 re-uses
ε = 1's model answers from the result cache), appends one JSON line per audit to
docs/results/leakage-runs.jsonl (result + the white-box ROC curve), then draws docs/img/leakage-roc.png
(log-log ROC, TPR at FPR = 1e-3 and 1e-2 marked) from that file. `--small` runs 2 records × 1 context
each (a smoke test; nothing written).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.audit.attacks.likelihood import collect, run_audit  # noqa: E402
from app.audit.kinds.mia import Request  # noqa: E402
from app.audit.local import local_context  # noqa: E402
from app.audit.mechanisms.registry import build_mechanism  # noqa: E402
from app.audit.runtime import no_progress  # noqa: E402
from app.audit.seeds import SeedTree  # noqa: E402

NAMES = ("none", "none-label", "voting-eps1", "voting-eps8", "defense1", "defense2", "defense3")
RUNS = ROOT / "docs" / "results" / "leakage-runs.jsonl"
PLOT = ROOT / "docs" / "img" / "leakage-roc.png"


def roc(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[list[float], list[float]]:
    """(FPR, TPR) of the test "score ≥ t" at every distinct score."""
    thresholds = np.unique(np.concatenate([scores_in, scores_out]))[::-1]
    tpr = [float(np.mean(scores_in >= t)) for t in thresholds]
    fpr = [float(np.mean(scores_out >= t)) for t in thresholds]
    return fpr, tpr


def run(name: str, ctx, small: bool) -> dict:
    body = json.loads((ROOT / "examples" / f"leakage-likelihood-{name}.json").read_text())
    if small:
        body["attack"].update(canaries=2, contexts=1)
        body["llm_calls"] = 20
    request = Request.model_validate(body)
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    start = time.time()
    trials = collect(request, ctx, mechanism, SeedTree.from_seed(request.seed))
    result = run_audit(request, ctx, trials)
    fpr, tpr = roc(trials.scores_in, trials.scores_out)
    return {
        "name": name,
        "request": body,
        "seconds": round(time.time() - start, 1),
        "result": result,
        "roc": {"fpr": fpr, "tpr": tpr},
    }


def plot(rows: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 5))
    for row in rows:
        fpr, tpr = np.array(row["roc"]["fpr"]), np.array(row["roc"]["tpr"])
        n_out = row["result"]["trials"]
        floor = 1 / n_out
        ax.step(
            np.maximum(fpr, floor), np.maximum(tpr, floor), where="post", label=f"{row['name']} (n={n_out})"
        )
    grid = np.logspace(-4, 0, 50)
    ax.plot(grid, grid, "k:", lw=1, label="chance")
    for x in (1e-3, 1e-2):
        ax.axvline(x, color="grey", lw=0.6, ls="--")
    ax.set(xscale="log", yscale="log", xlim=(1e-4, 1), ylim=(1e-4, 1.05), xlabel="FPR", ylabel="TPR")
    ax.set_title("Likelihood attack, SmolLM2-135M, white box", fontsize=10)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(PLOT, dpi=120)


def _num(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def report() -> str:
    """The markdown tables of docs/results/leakage.md from docs/results/leakage-runs.jsonl."""
    rows = {r["name"]: r for r in map(json.loads, RUNS.read_text().splitlines())}
    lines = [
        "| run | mechanism | secret | trials/side | threat model | AUC | TPR@1e-3 | TPR@1e-2 | ε lower (assumption) "
        "| ε claimed | violation | forward passes (scratch) | tokens fed (scratch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in [n for n in NAMES if n in rows]:
        row, r = rows[name], rows[name]["result"]
        mech = row["request"]["mechanism"]
        label = mech["name"] + (f" L{mech['defense_level']}" if mech["name"] == "prompt_defense" else "")
        cost = r["likelihood"]["cost"]
        for tm in ("white_box", "black_box"):
            if tm not in r:
                continue
            b = r[tm]
            lower = "∞" if b.get("epsilon_lower_unbounded") else _num(b["epsilon_lower"])
            lines.append(
                f"| {name} | {label} | {r['likelihood']['secret']}{' + ref' if r['likelihood']['reference'] else ''} "
                f"| {r['trials']} | {tm} | {_num(b['auc'])} | {_num(b['tpr_at_fpr']['0.001'])} "
                f"| {_num(b['tpr_at_fpr']['0.01'])} | {lower} ({b['assumption']}) | {_num(r['epsilon_theory'])} "
                f"| {b['violation']} | {cost['forward_passes']} ({cost['from_scratch_forward_passes']}) "
                f"| {cost['prompt_tokens']} ({cost['from_scratch_tokens']}) |"
            )
    for name in ("none",):
        if name not in rows:
            continue
        recs = rows[name]["result"]["records"]
        lines += [
            "",
            f"Per-record risk, run `{name}` ({len(recs)} records, "
            f"{sum(r['flagged'] for r in recs)} flagged), five riskiest and the safest:",
            "",
            "| rank | record | trials | mean score in | mean score out | mean gap | AUC | own ε lower | p-value | flagged |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for rec in recs[:5] + recs[-1:]:
            lines.append(
                f"| {rec['rank']} | {rec['record_id']} | {rec['trials']} | {_num(rec['score_in_mean'])} "
                f"| {_num(rec['score_out_mean'])} | {_num(rec['gap_mean'])} | {_num(rec['auc'])} "
                f"| {_num(rec['epsilon_lower'])} | {_num(rec['p_value'])} | {rec['flagged']} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if "--report" in argv:
        print(report())
        return 0
    small = "--small" in argv
    names = [a for a in argv if not a.startswith("--")] or list(NAMES)
    ctx = local_context(progress=no_progress)
    for name in names:
        row = run(name, ctx, small)
        r = row["result"]
        summary = {
            tm: {k: r[tm].get(k) for k in ("tpr", "fpr", "auc", "epsilon_lower", "tpr_at_fpr")}
            for tm in ("black_box", "white_box")
            if tm in r
        }
        print(name, row["seconds"], "s", json.dumps(summary), json.dumps(r["likelihood"]["cost"]), flush=True)
        if not small:
            with RUNS.open("a") as f:
                f.write(json.dumps(row) + "\n")
    if not small:
        rows = [json.loads(line) for line in RUNS.read_text().splitlines()]
        plot(list({row["name"]: row for row in rows}.values()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
