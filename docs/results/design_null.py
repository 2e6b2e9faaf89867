"""The design-selection null of docs/results/soundness.md ("Design selection"): `attack: auto` audits private
voting exactly at its claim (analytic σ), 200 seeded audits per ε (seeds 5000 … 5199), and counts `violation`.

    ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/design_null.py > docs/results/design-null.md
    .venv/bin/python docs/results/design_null.py --doc   # the section of soundness.md from design-null.md

The engine is `simulated:shift=1,alpha=0.1` (app/engines/simulated.py), standing in for the model: per
audit random label distributions near 0 or 1, and the canary moves its partition's vote to "present"
(nearly 003 Lemma 3.1's worst case, so ε_emp comes close to the claim). It answers the inquiry and
signal-text queries and refuses the copy and rare-token ones, which `auto` then skips; the pilot scores
inquiry, inquiry_count, signal_text and signal_text_count at T ∈ {2, 4, 8} (12 candidates; fewer when
one flips every pilot context and ends the pilot). 10,000 bootstrap
trials per context, llm_calls 20. Prints the table soundness.md shows. `--log FILE` appends each audit to
FILE (JSON lines) and skips those already in it, running seed by seed; `--from-log FILE` prints the table
of a log's complete seeds. design-null.md and design-null-abstain.md are the runs at 314c4a4 (how many
audits: soundness.md, "Design selection").

    ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/design_null.py --count \
        > docs/results/design-null-count.md

`--count`: the null of the Ṽ_y+ white-box score (attack `inquiry_count`, app/audit/attacks/count_score.py)
exactly at its claim. That score sees the canary's shift e_y+ only: μ = 1/σ when the canary's partition
votes y+ with the canary and another label without it, so a mechanism calibrated for Δ₂ = 1
(`sensitivity: 1`, σ = σ(ε, δ, Δ₂ = 1)) is exactly at its claim for it, the same engine standing in for the
model (the canary moves its partition's vote to "present", 003 Lemma 3.1's flip). The null is white box
only: the move is two counts (from "absent" to "present"), so the Ṽ_y+ − Ṽ_other score and the black box's
released argmax see up to √2/σ and rightly flag that mechanism, whose true Δ₂ is √2 (a first run with
both threat models did: 16/50 and 9/50 at ε = 1 and 2, all from the black box). Same trials, seeds and T;
the attack is fixed, so this is the score's own null, apart from `auto`'s.

`--engine simulated:shift=1,alpha=0.1,valid=0.1` → docs/results/design-null-abstain.md: auto's null where
partitions without the canary mostly cast no valid vote, so that its pilot prefers the Ṽ_y+ score.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from pathlib import Path

from scipy import stats

ROOT = Path(__file__).resolve().parents[2]

EPSILONS = (1.0, 2.0, 4.0, 8.0)
FIRST_SEED = 5000
ENGINE = "simulated:shift=1,alpha=0.1"


def body(seed: int, epsilon: float, trials: int = 10_000, engine: str = ENGINE) -> dict:
    return {
        "kind": "mia",
        "dataset": "ag_news",
        "model": engine,
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


def count_body(seed: int, epsilon: float, trials: int = 10_000, engine: str = ENGINE) -> dict:
    """`--count`: the Ṽ_y+ score's null (module docstring): attack inquiry_count, σ calibrated for Δ₂ = 1."""
    request = body(seed, epsilon, trials, engine)
    request["mechanism"] = {**request["mechanism"], "sensitivity": 1.0}
    request["attack"] = {"name": "inquiry_count", "threat_model": "white_box"}
    return request


def upper(k: int, n: int, confidence: float = 0.95) -> float:
    """One-sided Clopper-Pearson upper bound on a rate."""
    return 1.0 if k == n else float(stats.beta.ppf(confidence, k + 1, n - k))


HEADER = (
    "| ε claimed | audits | violations | rate | 95 % upper | ε_lower mean / max | designs chosen (attack, T: audits) |\n"
    "|---|---|---|---|---|---|---|"
)


def audit(seed: int, eps: float, trials: int, count: bool, engine: str, ctx: object) -> dict:
    """One audit of the null: its verdict, largest ε_lower over the threat models and the design measured."""
    from app.audit.standalone import run_request

    make = count_body if count else body
    r = run_request(make(seed, eps, trials, engine), ctx)  # type: ignore[arg-type]
    design = r.get("design") or {
        "attack": r_attack(make(seed, eps)),
        "partitions": r["mechanism"]["partitions"],
    }
    lower = max((r[tm]["epsilon_lower"] or 0.0) for tm in ("black_box", "white_box") if r.get(tm))
    return {
        "epsilon": eps,
        "seed": seed,
        "violation": bool(r["violation"]),
        "epsilon_lower": lower,
        "attack": design["attack"],
        "partitions": design["partitions"],
    }


def rows(lines: list[dict], epsilons: tuple[float, ...] = EPSILONS) -> str:
    """The table's rows from the audits' lines (`audit`), one per ε that has any."""
    out = []
    for eps in epsilons:
        mine = [line for line in lines if line["epsilon"] == eps]
        if not mine:
            continue
        n, flagged = len(mine), sum(line["violation"] for line in mine)
        lowers = [line["epsilon_lower"] for line in mine]
        chosen = collections.Counter((line["attack"], line["partitions"]) for line in mine)
        designs = ", ".join(f"{a} T={t}: {k}" for (a, t), k in sorted(chosen.items()))
        out.append(
            f"| {eps:g} | {n} | {flagged} | {flagged / n:.1%} | {upper(flagged, n):.1%} "
            f"| {sum(lowers) / n:.3f} / {max(lowers):.3f} | {designs} |"
        )
    return "\n".join(out)


def table(
    audits: int,
    trials: int = 10_000,
    epsilons: tuple[float, ...] = EPSILONS,
    count: bool = False,
    engine: str = ENGINE,
    log: Path | None = None,
) -> str:
    """Run the null seed by seed (every ε of a seed before the next seed, so a run cut short has about as
    many audits per ε) and return its rows. With `log`, each audit is appended to it as a JSON line and
    the audits already there are not run again (a stopped run resumes)."""
    from app.audit.runtime import no_progress
    from app.audit.standalone import local_context

    ctx = local_context(progress=no_progress)
    lines = read_log(log, epsilons) if log is not None and log.exists() else []
    done = {(line["epsilon"], line["seed"]) for line in lines}
    for seed in range(FIRST_SEED, FIRST_SEED + audits):
        for eps in epsilons:
            if (eps, seed) in done:
                continue
            line = audit(seed, eps, trials, count, engine, ctx)
            lines.append(line)
            if log is not None:
                with log.open("a") as fh:
                    fh.write(json.dumps(line) + "\n")
    return rows(lines, epsilons)


def read_log(path: Path, epsilons: tuple[float, ...] = EPSILONS) -> list[dict]:
    """The audits of a --log file whose seed has a line for every ε (a run stopped mid-seed leaves its last
    seed out, so every row counts the same seeds)."""
    read = (json.loads(text) for text in path.read_text().splitlines() if text.strip())
    lines = list({(line["epsilon"], line["seed"]): line for line in read}.values())  # once each
    have = collections.defaultdict(set)
    for line in lines:
        have[line["seed"]].add(line["epsilon"])
    return [line for line in lines if have[line["seed"]] >= set(epsilons)]


def r_attack(request: dict) -> str:
    return request["attack"]["name"]


RAW = ROOT / "docs/results/design-null.md"
DOC = ROOT / "docs/results/soundness.md"
BEGIN, END = "<!-- design_null.py: begin -->", "<!-- design_null.py: end -->"
SECTION = """## Design selection (`attack: auto`, issue 19)

`attack: {"name": "auto"}` picks the canary design and T before it measures (app/audit/design.py):

1. **Pilot records.** The dataset's training rows are split by index parity: the pilot draws its canaries
   and contexts from the odd rows, the measurement from the even rows only, so no record is in both.
2. **Pilot randomness.** The pilot's contexts and partitions come from the seed stream `pilot`, appended
   to app/audit/seeds.py (no existing stream moves); the measurement reads `contexts`, `partitions`,
   `attack`, `pool`, `noise_in`, `noise_out` and `threshold` as every audit does, never `pilot`.
3. **Rule.** Each candidate (design ∈ copy, rare_token, inquiry, signal_text; T ∈ {2, 4, 8} up to the
   request's T; white-box score Ṽ_y+ − Ṽ_other or Ṽ_y+, the latter the `*_count` attacks) is scored on
   2 pilot context pairs by private voting's exact population μ
   (app/audit/stats/exact.py, the request's σ), summed over the requested threat models; the largest
   mean wins. A design the engine refuses is skipped (recorded in `design.candidates`). Candidates are
   scored in that order, T ascending, and the first (design, T) whose canary flips its partition's vote
   on every pilot context (effect 1, a valid vote without the canary) ends the pilot: the best so far
   wins. The copy canary's pair (record, label y*, position) is chosen by the canary search, in the
   pilot and again in the measurement, from the model's exact clean label distributions only (never a
   noise draw, a vote draw or a trial), so given its pair the trials are those of a fixed pair.
4. **Measurement.** The chosen design's ordinary audit on the even rows, its threshold chosen on the
   held-out split (thresholds.Split), both tests at the Bonferroni share of the stated confidence.

Why the verdict keeps its confidence: the choice D is a function of the pilot (odd rows, stream `pilot`)
alone, so it is independent of the measurement's randomness (its contexts, partitions, pool, noise and
split). For each fixed design d the measurement is an ordinary audit, P(violation | D = d) ≤ 1 − γ
(sections above), hence P(violation) = Σ_d P(D = d) · P(violation | D = d) ≤ 1 − γ. The pilot adds no
test, so the Bonferroni split is unchanged. Test: tests/audit/mia/test_mia_design.py checks that auto's
measurement equals the chosen design's own audit on the even rows (the pilot reaches it only through
the choice) and runs a 20-audit version of the null below.

The null, `docs/results/design_null.py` (its output, committed as docs/results/design-null.md): private
voting exactly at its claim (analytic σ), `simulated:shift=1,alpha=0.1` standing in for the model (the
canary moves its partition's vote to "present"; it answers inquiry and signal_text and refuses the copy
and rare-token queries, which auto skips), request T = 8 with one exemplar per partition, llm_calls 20,
10,000 trials per context, both threat models. The candidates are the current ones, the Ṽ_y+ score's
included (below): up to 12 scored per audit (inquiry, inquiry_count, signal_text, signal_text_count at
T = 2, 4, 8; fewer when a candidate flips every pilot context and ends the pilot), copy and rare_token
skipped. Run at 314c4a4 (the pilot's early stop and the larger canary search in place) as one process,
`--audits 200 --log FILE` (seed by seed, every ε of a seed before the next seed): 200 audits per ε,
seeds 5000 … 5199. Its rows are those of the run before the early stop (at d357771), number for
number: the early stop ends the pilot only at a candidate whose canary flips every pilot context, which
no later candidate outscores, so it changed no row here, only the pilot's cost.

{table}

With the pilot's choice spread over all six (design, T) pairs, no audit out of 800 flags
the mechanism at its claim, while the mean ε_lower reaches 0.38–0.46 × the claim and the largest
0.90–0.98 ×: the selection, early stop included, costs the verdict no confidence. No audit chose a
`*_count` attack: this engine's partitions always cast a vote, so the canary moves a vote from "absent"
to "present" (Ṽ_y+ − Ṽ_other sees √2/σ per moved vote, Ṽ_y+ 1/σ) and the best pilot candidate used
Ṽ_y+ − Ṽ_other in every audit.

**The Ṽ_y+ white-box score** (attacks `*_count`, app/audit/attacks/count_score.py) is among auto's
candidates: step 3 scores each (design, T) under both white-box scores, by each one's exact population μ
on the pilot votes, so the choice of score is part of D and the argument above covers it. Its own null,
`design_null.py --count` (committed as docs/results/design-null-count.md: `inquiry_count` fixed, σ for
Δ₂ = 1 so that the canary's one-count move is exactly the claim, white box only):

{count}

Auto's null above, with the default engine, never chose a `_count` score. With `valid = 0.1` (a
partition without the canary casts a valid vote one time in ten, as SmolLM2 mostly answers outside the
labels; `--engine simulated:shift=1,alpha=0.1,valid=0.1`, otherwise the same null, run beside it at
314c4a4 the same way: 200 audits per ε, seeds 5000 … 5199;
docs/results/design-null-abstain.md) it does: at ε = 1 and 2 in every audit, at ε = 4 and 8 in
61 and 17 of the 200:

{abstain}

No violation in these 800 audits, 478 of which measured with a `*_count` attack: the
selection of the score costs the verdict no confidence either. design-null-count.md fixes its attack
(no pilot runs), so the pilot's early stop cannot change it: it stands as run at d357771."""


def section() -> str:
    """The "Design selection" section of soundness.md, its table the committed raw output (design-null.md)."""

    def table_of(path: Path) -> str:  # the committed raw output's table (its lines starting with "|")
        return "\n".join(line for line in path.read_text().splitlines() if line.startswith("|"))

    text = SECTION.replace("{table}", RAW.read_text().strip())
    text = text.replace("{count}", table_of(RAW.with_name("design-null-count.md")))
    text = text.replace("{abstain}", table_of(RAW.with_name("design-null-abstain.md")))
    return f"{BEGIN}\n{text}\n{END}"


def write_doc() -> None:
    """Replace the section between the markers of soundness.md (append it when they are missing)."""
    text = DOC.read_text()
    if BEGIN in text:
        head, rest = text.split(BEGIN, 1)
        text = head + section() + rest.split(END, 1)[1]
    else:
        text = text.rstrip("\n") + "\n\n" + section() + "\n"
    DOC.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--audits", type=int, default=200)
    parser.add_argument(
        "--doc", action="store_true", help="write the section of soundness.md from design-null.md"
    )
    parser.add_argument("--epsilon", type=float, action="append", help="only these ε (rows only, no header)")
    parser.add_argument("--count", action="store_true", help="the Ṽ_y+ score's null (inquiry_count, Δ₂ = 1)")
    parser.add_argument("--engine", default=ENGINE, help=f"the model standing in (default {ENGINE})")
    parser.add_argument("--log", type=Path, help="append each audit to this JSONL file; skip those in it")
    parser.add_argument("--from-log", type=Path, help="print the table from a --log file (runs nothing)")
    args = parser.parse_args()
    started = time.perf_counter()
    if args.doc:
        write_doc()
        return 0
    epsilons = tuple(args.epsilon) if args.epsilon else EPSILONS
    if args.from_log:
        text = rows(read_log(args.from_log, epsilons), epsilons)
    else:
        text = table(args.audits, epsilons=epsilons, count=args.count, engine=args.engine, log=args.log)
    print(text if args.epsilon else HEADER + "\n" + text)
    print(f"\n({time.perf_counter() - started:.0f} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
