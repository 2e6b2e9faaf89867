"""What a pass is worth: how often systems whose true ε is k × their claim get each verdict → the section
"What a pass is worth" of docs/results/soundness.md (between its begin/end markers).

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/verdict_power.py

Every audit is the service's own kind run on a request built here (seeds 5000 and up, 40 per cell unless
--audits says otherwise), on systems whose true ε is known:
- Gaussian scores through `bound`: N(μ(k·claim), 1) against N(0, 1), a perfect score attack, at 1,000,
  5,000 and 10,000 per side, assumption gdp and none, threshold strategy split and bonferroni;
- oracle private voting with `bug: noise_scale` at the factor that makes its release exactly k × its claim
  (bugs.factor_for_multiple), white box at 2,000, black box at 3,000 and both at 6,000 trials;
- randomized response, exactly (k·claim, 0)-DP, its counts through `bound` (assumption none);
- a rare one-sided leak: the canary's answer in a fraction p of answers when present, never otherwise (no
  (ε, δ) holds at any ε), its counts through `bound`.
Targets (app/audit/stats/verdict.py's rule): at k ≥ 1.5 `consistent` in ≤ 20 % of every cell, at k ≥ 2 in
≤ 5 %; at k ≤ 1 violations within the stated 5 %; the oracle at its claim with enough trials `consistent`
in ≥ 90 %. `--quick` runs 8 audits a cell and prints, without writing the doc; `--jobs` sets processes.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
from scipy import stats

from app.audit.accounting.gdp import mu_for_epsilon
from app.audit.kinds import bound as bound_kind
from app.audit.kinds import mia
from app.audit.mechanisms.base import calibrate
from app.audit.mechanisms.bugs import factor_for_multiple
from app.audit.runtime import RunContext
from app.audit.stats.verdict import DETECT_PROBABILITY, POWER_FACTOR

ROOT = Path(__file__).resolve().parents[2]

DOC = ROOT / "docs" / "results" / "soundness.md"
BEGIN, END = "<!-- verdict_power.py: begin -->", "<!-- verdict_power.py: end -->"
SEED0 = 5000
CLAIM, DELTA = 1.0, 1e-5
KS = (0.5, 1.0, 1.5, 2.0, 3.0)
LEAK_RATES = (0.005, 0.02, 0.1)
ORACLE_TRIALS = {"white_box": 2_000, "black_box": 3_000, "both": 6_000}


def gaussian(seed: int, k: float, n: int, assumption: str, strategy: str) -> dict:
    rng = np.random.default_rng([seed, 29])
    body = {
        "kind": "bound",
        "seed": seed,
        "scores_in": (rng.normal(size=n) + mu_for_epsilon(k * CLAIM, DELTA)).tolist(),
        "scores_out": rng.normal(size=n).tolist(),
        "assumption": assumption,
        "threshold_strategy": strategy,
        "epsilon": CLAIM,
    }
    return bound_kind.run(bound_kind.Request.model_validate(body), RunContext()).stored()


def counts(seed: int, tpr: float, fpr: float, n: int) -> dict:
    rng = np.random.default_rng([seed, 30])
    tp, fp = int(rng.binomial(n, tpr)), int(rng.binomial(n, fpr))
    body = {
        "kind": "bound",
        "seed": seed,
        "counts": {"tp": tp, "fn": n - tp, "fp": fp, "tn": n - fp},
        "assumption": "none",
        "epsilon": CLAIM,
    }
    return bound_kind.run(bound_kind.Request.model_validate(body), RunContext()).stored()


def oracle(seed: int, k: float, threat_model: str) -> dict:
    mechanism = {
        "name": "private_voting",
        "partitions": 4,
        "shots_per_partition": 2,
        "calibration": "analytic",
    }
    if k != 1.0:
        theory = calibrate(CLAIM, DELTA, math.sqrt(2), "analytic")
        mechanism |= {"bug": "noise_scale", "bug_factor": factor_for_multiple(theory, k)}
    body = {
        "kind": "mia",
        "dataset": "ag_news",
        "model": "oracle",
        "seed": seed,
        "mechanism": mechanism,
        "epsilon": CLAIM,
        "delta": DELTA,
        "attack": {"name": "inquiry", "threat_model": threat_model},
        "trials": ORACLE_TRIALS[threat_model],
    }
    from app.audit.runtime import no_progress
    from app.audit.standalone import local_context

    return mia.run(mia.Request.model_validate(body), local_context(progress=no_progress)).stored()


def run_one(job: tuple) -> tuple[tuple, str]:
    cell, seed = job
    family, k, *rest = cell
    if family == "gaussian":
        r = gaussian(seed, k, *rest)
    elif family == "rr":
        e = math.exp(k * CLAIM)
        r = counts(seed, e / (1 + e), 1 / (1 + e), rest[0])
    elif family == "rare":
        r = counts(seed, k, 0.0, rest[0])
    else:
        r = oracle(seed, k, rest[0])
    return cell, r["verdict"]


def cells() -> list[tuple]:
    out: list[tuple] = []
    for n in (1_000, 5_000, 10_000):
        for assumption in ("gdp", "none"):
            for strategy in ("split", "bonferroni"):
                out += [("gaussian", k, n, assumption, strategy) for k in KS]
    for tm in ORACLE_TRIALS:
        out += [("oracle", k, tm) for k in KS]
    for n in (1_000, 10_000):
        out += [("rr", k, n) for k in KS]
        out += [("rare", p, n) for p in LEAK_RATES]
    return out


def label(cell: tuple) -> tuple[str, str]:
    family, k, *rest = cell
    if family == "gaussian":
        n, assumption, strategy = rest
        return f"Gaussian scores, `bound` {assumption}, {strategy}, {n:,} per side", f"{k:g}"
    if family == "oracle":
        return f"oracle private voting, {rest[0]}, {ORACLE_TRIALS[rest[0]]:,} trials", f"{k:g}"
    if family == "rr":
        return f"randomized response (counts, `bound` none), {rest[0]:,} per side", f"{k:g}"
    return f"rare one-sided leak (counts, `bound` none), {rest[0]:,} per side", f"p = {k:g}"


def upper(x: int, n: int) -> float:
    """One-sided 95 % Clopper-Pearson upper bound on a rate from x of n."""
    return 1.0 if x >= n else float(stats.beta.ppf(0.95, x + 1, n - x))


def meets(cell: tuple, c: Counter, n: int) -> str:
    family, k = cell[0], cell[1]
    consistent, violation = c["consistent"] / n, c["violation"] / n
    if family == "rare":
        return "✓" if consistent <= 0.05 else "✗"
    if k >= 2 and consistent > 0.05:
        return "✗"
    if k >= 1.5 and consistent > 0.20:
        return "✗"
    if k <= 1 and violation > 0.05 and upper(c["violation"], n) > 0.05 and c["violation"] > 0.1 * n:
        return "✗"
    return "✓"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="at most 8 audits a cell; print, do not write")
    parser.add_argument("--audits", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    n = min(args.audits, 8) if args.quick else args.audits
    started = time.time()
    jobs = [(cell, seed) for cell in cells() for seed in range(SEED0, SEED0 + n)]
    tallies: dict[tuple, Counter] = {cell: Counter() for cell in cells()}
    with ProcessPoolExecutor(args.jobs) as pool:
        for i, (cell, verdict) in enumerate(pool.map(run_one, jobs, chunksize=4), 1):
            tallies[cell][verdict] += 1
            if i % 200 == 0:
                print(f"{i}/{len(jobs)} audits, {(time.time() - started) / 60:.1f} min", flush=True)
    rows = [
        "| system | k (true ε / claim) | audits | consistent | inconclusive | violation | target |",
        "|---|---|---|---|---|---|---|",
    ]
    for cell in cells():
        c = tallies[cell]
        what, k = label(cell)
        rows.append(
            f"| {what} | {k} | {n} | {c['consistent']} | {c['inconclusive']} | {c['violation']} | "
            f"{meets(cell, c, n)} |"
        )
        print(rows[-1], flush=True)
    minutes = (time.time() - started) / 60
    section = render(rows, n, minutes)
    if args.quick:
        print(section)
        return 0
    text = DOC.read_text()
    text = re.sub(re.escape(BEGIN) + ".*" + re.escape(END), lambda _m: section, text, flags=re.S)
    DOC.write_text(text)
    print(f"wrote {DOC} ({minutes:.1f} min)")
    return 0


def render(rows: list[str], n: int, minutes: float) -> str:
    nl = "\n"
    return f"""{BEGIN}
## What a pass is worth: the four-outcome verdict and its power

Made by `docs/results/verdict_power.py` ({minutes:.0f} min on 2 cores; {n} audits a cell, seeds {SEED0} and
up; claim ε = {CLAIM:g}, δ = {DELTA:g}). The rule (app/audit/stats/verdict.py): `violation` when a bound
exceeds the claimed ε; otherwise `consistent` only when the audit's power, `epsilon_detectable` — the
smallest true ε it flags with probability ≥ {DETECT_PROBABILITY:g} — is at most {POWER_FACTOR:g} × the
claim, and `inconclusive` when it is not.

**The argument.** `violation` keeps the bound's confidence whatever the power model says. The power model
only moves audits between `inconclusive` and `consistent`, and it must not be something the system under
test can buy: the attack's efficiency η is either the mechanism's design (the exact population μ of the
attack against the mechanism *as calibrated*, for private voting: `power.efficiency_source: design`) or a
one-sided lower confidence bound on the attack's measured μ̂ (`measured`), and never above 1. A system
leaking k × its claim then lends the attack at most a perfect attack's power, so a `consistent` means: a
Gaussian-shaped system at {POWER_FACTOR:g} × the claim would have been flagged with probability
≥ {DETECT_PROBABILITY:g}. One-sided leaks (mass at FPR 0) are named apart (`leak_rate_detectable`).

Targets: at k ≥ 1.5 `consistent` in ≤ 20 % of every cell, at k ≥ 2 in ≤ 5 %; at k ≤ 1 violations within
the stated 5 %; the oracle at its claim with enough trials `consistent` in ≥ 90 %. ✓ marks a cell within
its target (a cell at k = 1 is also ✓ when its violations are within sampling error of 5 %).

{nl.join(rows)}

Reading it: `consistent` now costs trials. The perfect score attack at claim 1 needs about 10,000 per side
(split, gdp) to be `consistent` at its claim; oracle private voting, whose efficiency is known from its
design, about 6,000 trials with both threat models. Counts alone (randomized response, the rare leak) are
judged by their measured efficiency, a lower confidence bound from one operating point.
{END}"""


if __name__ == "__main__":
    raise SystemExit(main())
