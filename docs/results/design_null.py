"""The design-selection null of docs/results/soundness.md ("Design selection"): `attack: auto` audits private
voting exactly at its claim (analytic σ), 200 seeded audits per ε (seeds 5000 … 5199), and counts `violation`.

    ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/design_null.py [--audits N]

The engine is `simulated:shift=1,alpha=0.1` (app/engines/simulated.py), standing in for the model: per
audit random label distributions near 0 or 1, and the canary moves its partition's vote to "present"
(nearly 003 Lemma 3.1's worst case, so ε_emp comes close to the claim). It answers the inquiry and
signal-text queries and refuses the copy and rare-token ones, which `auto` then skips; the pilot chooses
among inquiry and signal_text at T ∈ {2, 4, 8}. 10,000 bootstrap trials per context, llm_calls 20.
Prints the table soundness.md shows.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from scipy import stats  # noqa: E402

EPSILONS = (1.0, 2.0, 4.0, 8.0)
FIRST_SEED = 5000
ENGINE = "simulated:shift=1,alpha=0.1"


def body(seed: int, epsilon: float, trials: int = 10_000) -> dict:
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "model": ENGINE,
        "seed": seed,
        "epsilon": epsilon,
        "mechanism": {
            "name": "private_voting",
            "partitions": 8,
            "shots_per_partition": 1,
            "calibration": "analytic",
        },
        "attack": {"name": "auto", "threat_model": "both"},
        "llm_calls": 20,
        "trials": trials,
    }


def upper(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a rate."""
    return 1.0 if k == n else float(stats.beta.ppf(confidence, k + 1, n - k))


HEADER = (
    "| ε claimed | audits | violations | rate | 95 % upper | ε_lower mean / max | designs chosen (attack, T: audits) |\n"
    "|---|---|---|---|---|---|---|"
)


def table(audits: int, trials: int = 10_000, epsilons: tuple[float, ...] = EPSILONS) -> str:
    from app.audit.kinds import mia
    from app.audit.local import local_context
    from app.audit.runtime import no_progress

    ctx = local_context(progress=no_progress)
    lines = []
    for eps in epsilons:
        flagged, lowers, chosen = 0, [], collections.Counter()
        for seed in range(FIRST_SEED, FIRST_SEED + audits):
            r = mia.run(mia.Request.model_validate(body(seed, eps, trials)), ctx)
            flagged += r["violation"]
            lowers.append(max((r[tm]["epsilon_lower"] or 0.0) for tm in ("black_box", "white_box")))
            chosen[(r["design"]["attack"], r["design"]["partitions"])] += 1
        designs = ", ".join(f"{a} T={t}: {n}" for (a, t), n in sorted(chosen.items()))
        lines.append(
            f"| {eps:g} | {audits} | {flagged} | {flagged / audits:.1%} | {upper(flagged, audits):.1%} "
            f"| {sum(lowers) / audits:.3f} / {max(lowers):.3f} | {designs} |"
        )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=200)
    parser.add_argument("--epsilon", type=float, action="append", help="only these ε (rows only, no header)")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.epsilon:
        print(table(args.audits, epsilons=tuple(args.epsilon)))
    else:
        print(HEADER + "\n" + table(args.audits))
    print(f"\n({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
