"""What a pass is worth: the four-outcome verdict and its power by seeded simulation → the section
"What a pass is worth" of docs/results/soundness.md (between its begin/end markers).

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/verdict_power.py

Three checks, seeds 5000 and up, every audit `app.audit.local.run_request` on a request built here:
1. null: oracle private voting exactly at its claim (analytic σ, T = 4, the examples' settings), 200 audits
   per ε ∈ {1, 4, 8}: `violation` and `inconclusive` each ≤ 5 %;
2. power: every planted bug (app/audit/mechanisms/bugs.py) in its setting, 100 audits each: `violation`
   in ≥ 95 %;
3. calibration of `epsilon_detectable`: in three settings, audits of a correct mechanism at the claim
   predict (app.audit.stats.verdict.detection_rate, from each audit's own η and trials) how often a mechanism
   whose true ε is k × the claim is flagged; audits of such mechanisms (honest at k × claim, judged
   against the claim) measure it. Predicted and measured agree within 10 points.
`--quick` runs a tenth of the audits and prints, without writing the doc.
"""

from __future__ import annotations

import argparse
import copy
import re
import sys
import time
from pathlib import Path

import numpy as np
from scipy import stats

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT)]

from app.audit.kinds import bound as bound_kind  # noqa: E402
from app.audit.kinds import mia  # noqa: E402
from app.audit.local import local_context  # noqa: E402
from app.audit.mechanisms.bugs import BUGS  # noqa: E402
from app.audit.runtime import RunContext, no_progress  # noqa: E402
from app.audit.seeds import SeedTree  # noqa: E402
from app.audit.stats.verdict import detection_rate, membership_test, power_uniforms  # noqa: E402

DOC = ROOT / "docs" / "results" / "soundness.md"
BEGIN, END = "<!-- verdict_power.py: begin -->", "<!-- verdict_power.py: end -->"
SEED0 = 5000
ORACLE = {
    "kind": "mia",
    "dataset": "ag_news",
    "model": "oracle",
    "mechanism": {
        "name": "private_voting",
        "partitions": 4,
        "shots_per_partition": 2,
        "calibration": "analytic",
    },
    "delta": 1e-5,
    "attack": {"name": "inquiry", "threat_model": "both"},
}
NULL_TRIALS = 400_000
BUG_TRIALS = 100_000
KS = (1.0, 1.5, 2.0, 3.0)


def upper(k: int, n: int) -> float:
    """One-sided 95 % Clopper-Pearson upper bound on a rate from k of n."""
    return 1.0 if k >= n else float(stats.beta.ppf(0.95, k + 1, n - k))


def lower(k: int, n: int) -> float:
    """One-sided 95 % Clopper-Pearson lower bound on a rate from k of n."""
    return 0.0 if k <= 0 else float(stats.beta.ppf(0.05, k, n - k + 1))


def oracle(ctx, seed: int, **fields) -> dict:
    body = copy.deepcopy(ORACLE) | {"seed": seed}
    for key, value in fields.items():
        body[key] = body[key] | value if isinstance(value, dict) and key in body else value
    return mia.run(mia.Request.model_validate(body), ctx)


def null_cell(ctx, n: int, epsilon: float) -> dict:
    counts = {o: 0 for o in ("violation", "leak", "inconclusive", "consistent")}
    detectable = []
    for seed in range(SEED0, SEED0 + n):
        r = oracle(ctx, seed, epsilon=epsilon, trials=NULL_TRIALS)
        counts[r["verdict"]] += 1
        if r.get("epsilon_detectable") is not None:
            detectable.append(r["epsilon_detectable"] / epsilon)
    return {"n": n, **counts, "ratio": float(np.median(detectable)) if detectable else float("nan")}


def bug_cell(ctx, n: int, name: str) -> dict:
    bug = BUGS[name]
    flagged = sum(
        oracle(
            ctx,
            seed,
            trials=BUG_TRIALS,
            epsilon=bug.setting["epsilon"],
            mechanism={**bug.setting["mechanism"], "bug": name},
        )["verdict"]
        == "violation"
        for seed in range(SEED0, SEED0 + n)
    )
    return {"n": n, "flagged": flagged}


# Setting → (runner(seed, epsilon_true) → result, threat model, claim, label)
def _oracle_setting(ctx, threat_model: str, trials: int, claim: float):
    def runner(seed: int, epsilon_true: float) -> dict:
        return oracle(ctx, seed, epsilon=epsilon_true, trials=trials, attack={"threat_model": threat_model})

    return (
        runner,
        threat_model,
        claim,
        f"oracle private voting, {threat_model}, {trials:,} trials, claim ε = {claim:g}",
    )


def _gaussian_setting(n_scores: int, claim: float):
    """A Gaussian mechanism audited through the `bound` kind: scores N(μ(ε'), 1) in, N(0, 1) out."""
    from app.audit.accounting.gdp import mu_for_epsilon

    def runner(seed: int, epsilon_true: float) -> dict:
        rng = np.random.default_rng([seed, 77])
        mu = mu_for_epsilon(epsilon_true, 1e-5)
        body = {
            "kind": "bound",
            "seed": seed,
            "scores_in": (rng.normal(size=n_scores) + mu).tolist(),
            "scores_out": rng.normal(size=n_scores).tolist(),
            "assumption": "gdp",
            "epsilon": claim,
        }
        r = bound_kind.run(bound_kind.Request.model_validate(body), RunContext())
        return {"bound": r, "mu_theory": mu_for_epsilon(claim, 1e-5)}

    return (
        runner,
        "bound",
        claim,
        f"Gaussian scores through `bound` (gdp, split), {n_scores:,} per side, claim ε = {claim:g}",
    )


def predicted_and_measured(runner, name: str, claim: float, n: int) -> list[tuple[float, float, float]]:
    """Per k: (mean predicted detection rate from the audits at the claim, measured flag rate at k·claim,
    measured standard error)."""
    at_claim = [runner(seed, claim) for seed in range(SEED0, SEED0 + n)]
    rows = []
    for k in KS:
        predicted = []
        for seed, r in zip(range(SEED0, SEED0 + n), at_claim, strict=True):
            test = membership_test(
                name,
                r[name],
                delta=1e-5,
                confidence=0.95,
                claimed=claim,
                mu_true=r.get("mu_theory"),
            )
            uniforms = power_uniforms(SeedTree.from_seed(seed).rng("power"))
            predicted.append(detection_rate(test, k * claim, claim, uniforms))
        if k == 1.0:
            flags = [bool(r[name]["epsilon_lower"] > claim) for r in at_claim]
        else:
            flags = [
                (runner(seed, k * claim)[name].get("epsilon_lower") or 0.0) > claim
                for seed in range(SEED0 + 10_000, SEED0 + 10_000 + n)
            ]
        rate = float(np.mean(flags))
        rows.append((float(np.mean(predicted)), rate, float(np.sqrt(rate * (1 - rate) / n))))
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a tenth of the audits; print, do not write")
    parser.add_argument("--only", choices=("null", "bugs", "power"), help="one check (with --quick)")
    args = parser.parse_args()
    if args.only and not args.quick:
        parser.error("--only runs part of the doc: use it with --quick")
    scale = 10 if args.quick else 1
    ctx = local_context(progress=no_progress)
    started = time.time()

    null_rows = [
        "| claimed ε | audits | violation | inconclusive | consistent | 95 % upper (violation / inconclusive) | median ε_detectable / claim |",
        "|---|---|---|---|---|---|---|",
    ]
    for eps in (1.0, 4.0, 8.0) if args.only in (None, "null") else ():
        c = null_cell(ctx, 200 // scale, eps)
        null_rows.append(
            f"| {eps:g} | {c['n']} | {c['violation']} | {c['inconclusive']} | {c['consistent']} | "
            f"{upper(c['violation'], c['n']):.1%} / {upper(c['inconclusive'], c['n']):.1%} | {c['ratio']:.3f} |"
        )
        print(null_rows[-1], flush=True)

    bug_rows = ["| bug | setting | audits | violation | 95 % lower |", "|---|---|---|---|---|"]
    for name, bug in BUGS.items() if args.only in (None, "bugs") else ():
        c = bug_cell(ctx, 100 // scale, name)
        setting = f"ε = {bug.setting['epsilon']:g}, {bug.setting['mechanism']}"
        bug_rows.append(
            f"| `{name}` | {setting} | {c['n']} | {c['flagged']} | {lower(c['flagged'], c['n']):.1%} |"
        )
        print(bug_rows[-1], flush=True)

    settings = [
        _oracle_setting(ctx, "white_box", 2_000, 1.0),
        _oracle_setting(ctx, "black_box", 3_000, 1.0),
        _gaussian_setting(1_000, 1.0),
    ]
    if args.only not in (None, "power"):
        settings = []
    power_rows = [
        "| setting | k (true ε = k × claim) | predicted | measured (± s.e.) | gap |",
        "|---|---|---|---|---|",
    ]
    worst = 0.0
    for runner, name, claim, label in settings:
        for k, (pred, meas, se) in zip(
            KS, predicted_and_measured(runner, name, claim, 200 // scale), strict=True
        ):
            worst = max(worst, abs(pred - meas))
            power_rows.append(
                f"| {label} | {k:g} | {pred:.1%} | {meas:.1%} (± {se:.1%}) | {abs(pred - meas):.1%} |"
            )
            print(power_rows[-1], flush=True)
    minutes = (time.time() - started) / 60
    section = render(null_rows, bug_rows, power_rows, worst, minutes)
    if args.quick:
        print(section)
        return 0
    text = DOC.read_text()
    if BEGIN in text:
        text = re.sub(re.escape(BEGIN) + ".*" + re.escape(END), lambda _m: section, text, flags=re.S)
    else:
        text = text.rstrip("\n") + "\n\n" + section + "\n"
    DOC.write_text(text)
    print(f"wrote {DOC} ({minutes:.1f} min)")
    return 0


def render(null_rows, bug_rows, power_rows, worst: float, minutes: float) -> str:
    nl = "\n"
    return f"""{BEGIN}
## What a pass is worth: the four-outcome verdict and its power

Made by `docs/results/verdict_power.py` ({minutes:.0f} min on 2 cores; seeds {SEED0} and up). The rule
(app/audit/stats/verdict.py): `violation` when a bound exceeds the claimed ε, `leak` when nothing is claimed
and a bound exceeds `max_epsilon`; otherwise `consistent` only when the audit's power,
`epsilon_detectable` — the smallest true ε it flags with probability ≥ ½ — is at most 2 × the claim
(or `max_epsilon`), and `inconclusive` when it is not, when the threshold was chosen in-sample, or when no
partition held the canary.

**The argument.** `violation`/`leak` keep the bound's confidence: a mechanism within its claim is flagged
with probability ≤ 1 − γ whatever the power model says (the bound holds at γ; the tests of one verdict
share γ by Bonferroni). The power model only moves audits between `inconclusive` and `consistent`: it
replaces the audited system by a Gaussian mechanism of true ε' (GDP μ(ε') at δ), seen by the attack with
its measured efficiency η = μ̂/μ_true ∈ [0, 2] (μ̂ = √2·Φ⁻¹(AUC) for a score, Φ⁻¹(TPR) − Φ⁻¹(FPR) for a decision, μ_true the
mechanism's own GDP μ), at the operating point with the largest expected bound, and draws the counts
TP ~ Bin(n_in, TPR), FP ~ Bin(n_out, FPR) ({2000} draws on the audit's own `power` seed stream), judging
each exactly as the verdict does. A signal-free attack (η = 0) or trials whose perfect outcome cannot
exceed the threshold give ε_detectable = ∞. Assumptions named: the attack's ROC is Gaussian-shaped and
its efficiency does not change with ε'; the threshold is the best one (a split search loses a little),
so ε_detectable is, if anything, optimistic — the check below measures by how much.

### A correct mechanism exactly at its claim (oracle private voting, analytic σ, T = 4, {NULL_TRIALS:,} trials per context)

The oracle's signal is perfect, so a sound and powerful audit is neither a violation nor inconclusive.

{nl.join(null_rows)}

### Every planted bug ({BUG_TRIALS:,} trials per context, each bug in the setting where it breaks DP)

{nl.join(bug_rows)}

### Is `epsilon_detectable` right? Predicted against measured detection rates

For each setting, audits of the correct mechanism at the claim predict, from their own η and trials, the
rate at which a mechanism of true ε = k × claim is flagged (mean over the audits); audits of mechanisms
honestly calibrated at k × claim, judged against the claim, measure it (other seeds). Worst gap:
**{worst:.1%}** (goal ≤ 10 points).

{nl.join(power_rows)}
{END}"""


if __name__ == "__main__":
    raise SystemExit(main())
