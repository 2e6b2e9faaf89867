"""docs/results/leakage.md: leakage attacks on SmolLM2 — plain ICL, defenses 1–3, private voting, ESA, KSA,
DP synthetic generation.

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 .venv/bin/python docs/results/leakage.py [--small] [names…]
    .venv/bin/python docs/results/leakage.py --report     # the tables of leakage.md, from the runs file
    .venv/bin/python docs/results/leakage.py --plot       # the ROC plots, from the runs file
    … leakage.py --out FILE names…   # parallel processes each append to their own FILE (then cat >> runs)

Runs the request files in one process (one engine, so ε = 8 re-uses ε = 1's model answers from the
result cache): examples/leakage-likelihood-{name}.json for the likelihood runs (NAMES) and
examples/leakage-{name}.json for the generated-text runs (GENERATED: the repeat attack scored by ROUGE-L,
the ContextLeak secret query scored by exact match), appends one JSON line per audit to
docs/results/leakage-runs.jsonl (result + ROC curves), then draws docs/img/leakage-roc.png (likelihood,
white box) and docs/img/leakage-generated-roc.png (generated text, black box; log-log, FPR = 1e-3 and
1e-2 marked) from that file. `--small` runs 2 records × 1 context each (a smoke test; nothing written).
The RAISED rows (`none-fpr1e-3`, `code-none-fpr1e-3` and their `blind-` baselines) run a base row's request file with only
`attack.contexts` raised, to 1,000 trials per side: TPR at FPR 1e-3 on a real-model row.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

import numpy as np

from app.audit.attacks import released_text
from app.audit.attacks.likelihood import collect, run_audit
from app.audit.attacks.registry import attack_module
from app.audit.kinds.mia import Request
from app.audit.mechanisms.registry import build_mechanism
from app.audit.runtime import no_progress
from app.audit.seeds import SeedTree
from app.audit.standalone import local_context

ROOT = Path(__file__).resolve().parents[2]

FAMILY = ("min_k", "min_k_pp", "zlib_ratio", "lira_offline", "recall")
"""The likelihood family (app/audit/attacks/token_likelihood.py): one collection per secret scores them all."""
FAMILY_NAMES = tuple(f"{score}-{secret}none" for secret in ("", "code-") for score in FAMILY)
RAISED = {
    "none-fpr1e-3": ("none", 40),
    "blind-none-fpr1e-3": ("blind-none", 40),
    "code-none-fpr1e-3": ("code-none", 40),
    "blind-code-none-fpr1e-3": ("blind-code-none", 40),
}
"""Rows that re-run a base row's request file with only `attack.contexts` raised (name → (base, contexts)):
25 records × 40 pairs = 1,000 trials per side, the fewest at which TPR at FPR 1e-3 is resolved
(several_canaries.tpr_at needs ≥ 1/FPR C0 trials, all of them: no held-out split). `none` has 1 exemplar,
so its member context is the record alone (40 repeats of one score per record); `code-none` has 2, so
member contexts vary from pair to pair."""
BLIND_NAMES = ("blind-none", "blind-code-none", "blind-none-fpr1e-3", "blind-code-none-fpr1e-3")
"""The blind baseline (the record's text alone) beside the plain-ICL rows of each secret."""
NAMES = (
    "none",
    *FAMILY_NAMES[: len(FAMILY)],
    "blind-none",
    *(n for n in RAISED if "code-" not in n),
    "none-label",
    "voting-eps1",
    "voting-eps8",
    "defense1",
    "defense2",
    "defense3",
    "code-none",
    *FAMILY_NAMES[len(FAMILY) :],
    "blind-code-none",
    *(n for n in RAISED if "code-" in n),
    "code-defense1",
    "code-defense2",
    "code-defense3",
)
GENERATED = tuple(
    f"{attack}-{mech}"
    for attack in ("repeat", "secret")
    for mech in (
        "none",
        "defense1",
        "defense2",
        "defense3",
        "esa-eps1",
        "esa-eps8",
        "ksa-eps1",
        "ksa-eps8",
        "synthgen-eps1",
        "synthgen-eps8",
        "synthgen-svt-eps1",
        "synthgen-svt-eps8",
        "synthgen-s16-eps8",
    )
    if f"{attack}-{mech}" != "repeat-synthgen-s16-eps8"
)
RUNS = ROOT / "docs" / "results" / "leakage-runs.jsonl"
PLOT = ROOT / "docs" / "img" / "leakage-roc.png"
PLOT_GENERATED = ROOT / "docs" / "img" / "leakage-generated-roc.png"


def request_file(name: str) -> Path:
    prefix = "leakage-" if name in GENERATED else "leakage-likelihood-"
    base = RAISED[name][0] if name in RAISED else name
    return ROOT / "examples" / f"{prefix}{base}.json"


def roc(scores_in: np.ndarray, scores_out: np.ndarray) -> tuple[list[float], list[float]]:
    """(FPR, TPR) of the test "score ≥ t" at every distinct score."""
    thresholds = np.unique(np.concatenate([scores_in, scores_out]))[::-1]
    tpr = [float(np.mean(scores_in >= t)) for t in thresholds]
    fpr = [float(np.mean(scores_out >= t)) for t in thresholds]
    return fpr, tpr


def body_of(name: str, small: bool) -> dict:
    body = json.loads(request_file(name).read_text())
    if name in RAISED:
        body["attack"]["contexts"] = RAISED[name][1]
    if small:
        body["attack"].update(canaries=2, contexts=2)
        body["llm_calls"] = 20
    return body


def run_family(names: list[str], ctx, small: bool) -> list[dict]:
    """The family rows of one secret from ONE collection (token statistics, + the ReCaLL prefix when
    `recall` is among them): their requests differ in `attack.name` only (checked)."""
    from app.audit.attacks import token_likelihood

    bodies = {name: body_of(name, small) for name in names}
    first = next(iter(bodies.values()))
    strip = [{**b, "attack": {**b["attack"], "name": "_"}} for b in bodies.values()]
    if any(b != strip[0] for b in strip):
        raise SystemExit(f"family rows {names} differ in more than attack.name")
    request = Request.model_validate(first)
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    start = time.time()
    with_recall = any(b["attack"]["name"] == "recall" for b in bodies.values())
    family = token_likelihood.collect_family(
        request, ctx, mechanism, SeedTree.from_seed(request.seed), with_recall=with_recall
    )
    seconds = round(time.time() - start, 1)
    rows = []
    for name, body in bodies.items():
        request = Request.model_validate(body)
        score = body["attack"]["name"]
        trials = token_likelihood.scored(family, score, request.attack.contexts)
        result = token_likelihood.run_scored(request, ctx, score, trials)
        fpr, tpr = roc(trials.scores_in, trials.scores_out)
        rows.append(
            {
                "name": name,
                "request": body,
                "seconds": seconds,
                "result": result,
                "roc": {"fpr": fpr, "tpr": tpr},
            }
        )
    return rows


def all_rows(names: list[str], ctx, small: bool):
    """Each named run's row: the family rows one collection per secret, the others one by one."""
    family = [n for n in names if n in FAMILY_NAMES]
    for group in ([n for n in family if ("code-" in n) == code] for code in (False, True)):
        if group:
            yield from run_family(group, ctx, small)
    for name in names:
        if name not in FAMILY_NAMES:
            yield run(name, ctx, small)


def run(name: str, ctx, small: bool) -> dict:
    body = body_of(name, small)
    request = Request.model_validate(body)
    mechanism = build_mechanism(request.mechanism, epsilon=request.epsilon, delta=request.delta)
    start = time.time()
    seeds = SeedTree.from_seed(request.seed)
    row: dict = {"name": name, "request": body}
    if name in GENERATED:
        build_query = attack_module(request.attack.name).build_query
        trials = released_text.collect(request, ctx, mechanism, seeds, build_query)
        result = released_text.run_generated(request, ctx, build_query, trials)
        fpr, tpr = roc(trials.decisions_in, trials.decisions_out)
        row["roc_black_box"] = {"fpr": fpr, "tpr": tpr}
    elif name in BLIND_NAMES:
        from app.audit.attacks import token_likelihood

        trials = token_likelihood.blind_trials(request, ctx, mechanism, seeds)
        result = token_likelihood.run_scored(request, ctx, "blind", trials)
    else:
        trials = collect(request, ctx, mechanism, seeds)
        result = run_audit(request, ctx, trials)
    fpr, tpr = roc(trials.scores_in, trials.scores_out)
    row.update(seconds=round(time.time() - start, 1), result=result, roc={"fpr": fpr, "tpr": tpr})
    return row


FAMILY_COLOURS = {  # one colour per mechanism family, so ε = 1 / ε = 8 pairs read as pairs
    "min_k_pp": "tab:cyan",  # the likelihood family and the blind baseline (before "none": prefixes)
    "min_k": "tab:olive",
    "zlib_ratio": "gold",
    "lira_offline": "teal",
    "recall": "navy",
    "blind": "silver",
    "none-label": "tab:grey",
    "none": "black",
    "defense": "tab:orange",
    "voting": "tab:brown",
    "esa": "tab:blue",
    "ksa": "tab:green",
    "synthgen-svt": "tab:red",
    "synthgen-s16": "tab:pink",
    "synthgen": "tab:purple",
}


def _style(name: str) -> dict:
    """Colour by mechanism family, dashes for ε = 8 and the RAISED rows (defense levels 2, 3 dotted /
    dash-dotted)."""
    mech = name.split("-", 1)[1] if name.startswith(("repeat-", "secret-", "code-")) else name
    colour = next((c for family, c in FAMILY_COLOURS.items() if mech.startswith(family)), "tab:olive")
    dashes = {"eps8": "--", "defense2": ":", "defense3": "-.", "fpr1e-3": "--"}
    return {"color": colour, "ls": next((d for k, d in dashes.items() if mech.endswith(k)), "-")}


def plot(panels: list[tuple[str, list[dict]]], path: Path = PLOT, key: str = "roc", title: str = "") -> None:
    """Log-log ROC curves, one panel per (subtitle, runs); FPR = 1e-3 and 1e-2 marked, each curve floored at
    1/(its C0 trials)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(panels), figsize=(6 * len(panels), 5), squeeze=False)
    for ax, (subtitle, rows) in zip(axes[0], panels, strict=True):
        for row in rows:
            fpr, tpr = np.array(row[key]["fpr"]), np.array(row[key]["tpr"])
            n_out = row["result"]["trials"]
            floor = 1 / n_out
            ax.step(
                np.maximum(fpr, floor), np.maximum(tpr, floor), where="post",
                label=f"{row['name']} (n={n_out})", lw=1.3, **_style(row["name"]),
            )  # fmt: skip
        grid = np.logspace(-4, 0, 50)
        ax.plot(grid, grid, color="grey", ls=":", lw=0.8, label="chance")
        for x in (1e-3, 1e-2):
            ax.axvline(x, color="grey", lw=0.6, ls="--")
        ax.set(xscale="log", yscale="log", xlim=(1e-4, 1), ylim=(1e-4, 1.05), xlabel="FPR", ylabel="TPR")
        ax.set_title(subtitle, fontsize=10)
        ax.legend(fontsize=6, loc="lower right", ncol=2)
    fig.suptitle(title or "Likelihood attack, SmolLM2-135M, white box", fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _num(value, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}g}" if isinstance(value, float) else str(value)


def _tpr(value: float | None, c0_trials: int) -> str:
    """TPR at one FPR, or why it is not there: a point below FPR = 1/(C0 trials) is not resolved."""
    return f"unresolved (n C0 = {c0_trials})" if value is None else _num(value)


def _verdict(row: dict) -> str:
    """The run's verdict (app/audit/kinds/mia.py `judged`) with its power, recomputed by today's rule
    from the stored request and measurement (runs recorded before the verdict existed hold neither)."""
    from app.audit.kinds import mia

    r = mia.judged(mia.Request.model_validate(row["request"]), copy.deepcopy(row["result"]))
    detectable = "∞" if r.get("epsilon_detectable_unbounded") else _num(r.get("epsilon_detectable"))
    return r["verdict"] + (f" ({detectable})" if r["verdict"] in ("inconclusive", "consistent") else "")


def report() -> str:
    """The markdown tables of docs/results/leakage.md from docs/results/leakage-runs.jsonl."""
    rows = {r["name"]: r for r in map(json.loads, RUNS.read_text().splitlines())}
    lines = [
        "| run | mechanism | secret | trials/side | threat model | AUC | TPR@1e-3 | TPR@1e-2 | ε lower (assumption) "
        "| ε claimed | verdict (ε detectable) | forward passes (scratch) | tokens fed (scratch) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in [n for n in (*NAMES, *GENERATED) if n in rows]:
        row, r = rows[name], rows[name]["result"]
        verdict = _verdict(row)
        mech = row["request"]["mechanism"]
        label = mech["name"] + (f" L{mech['defense_level']}" if mech["name"] == "prompt_defense" else "")
        if "generated" in r:
            cost = r["generated"]["cost"]
            secret = f"{r['generated']['attack']} ({r['generated']['score']})"
        else:
            cost = r["likelihood"]["cost"]
            secret = f"{r['likelihood']['secret']}{' + ref' if r['likelihood']['reference'] else ''}"
            if r["likelihood"].get("score"):
                secret += f" ({r['likelihood']['score']})"
        for tm in ("white_box", "black_box"):
            if tm not in r:
                continue
            b = r[tm]
            lower = "∞" if b.get("epsilon_lower_unbounded") else _num(b["epsilon_lower"])
            lines.append(
                f"| {name} | {label} | {secret} "
                f"| {r['trials']} | {tm} | {_num(b['auc'])} | {_tpr(b['tpr_at_fpr']['0.001'], r['trials'])} "
                f"| {_tpr(b['tpr_at_fpr']['0.01'], r['trials'])} | {lower} ({b['assumption']}) | {_num(r['epsilon_theory'])} "
                f"| {verdict} | {cost['forward_passes']} ({cost['from_scratch_forward_passes'] or '–'}) "
                f"| {cost['prompt_tokens']} ({cost['from_scratch_tokens'] or '–'}) |"
            )
    for name in ("none", "none-fpr1e-3", "code-none-fpr1e-3", "secret-none", "repeat-none"):
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


def plots() -> None:
    """Both ROC plots from the runs file (the latest line of each run)."""
    rows = list({row["name"]: row for row in map(json.loads, RUNS.read_text().splitlines())}.values())
    likelihood = [r for r in rows if r["name"] in NAMES]
    plot(
        [
            ("record's continuation or label", [r for r in likelihood if "code-" not in r["name"]]),
            ("record's secret number", [r for r in likelihood if "code-" in r["name"]]),
        ],
        PLOT,
    )
    generated = [r for r in rows if r["name"] in GENERATED]
    plot(
        [
            ("repeat attack (ROUGE-L)", [r for r in generated if r["name"].startswith("repeat-")]),
            ("secret query (exact match)", [r for r in generated if r["name"].startswith("secret-")]),
        ],
        PLOT_GENERATED,
        "roc_black_box",
        "Generated text, SmolLM2-135M, black box",
    )


def main(argv: list[str]) -> int:
    if "--report" in argv:
        print(report())
        return 0
    if "--plot" in argv:
        plots()
        return 0
    small = "--small" in argv
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else RUNS  # parallel runs: one file each
    names = [a for a in argv if not a.startswith("--") and a != str(out)] or [*NAMES, *GENERATED]
    ctx = local_context(progress=no_progress)
    for row in all_rows(names, ctx, small):
        name = row["name"]
        r = row["result"]
        summary = {
            tm: {k: r[tm].get(k) for k in ("tpr", "fpr", "auc", "epsilon_lower", "tpr_at_fpr")}
            for tm in ("black_box", "white_box")
            if tm in r
        }
        cost = (r.get("likelihood") or r["generated"])["cost"]
        print(name, row["seconds"], "s", json.dumps(summary), json.dumps(cost), flush=True)
        if "generated" in r:
            print("  examples:", json.dumps(r["generated"]["examples"][:2]), flush=True)
        if not small:
            with out.open("a") as f:
                f.write(json.dumps(row) + "\n")
    if not small and out == RUNS:
        plots()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
