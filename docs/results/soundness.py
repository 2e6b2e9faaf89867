"""Soundness of the mia verdict by seeded simulation (issue 9) → docs/results/soundness.md.

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/soundness.py

Every audit is `app.audit.kinds.mia.run` on a request built here (seeds 0 … n − 1); the randomized-
response endpoints are real HTTP servers (testkit/dp_icl_server.py) on 127.0.0.1. `--quick`
runs 20 audits per cell (a smoke run; it does not write the doc).
"""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

import numpy as np
from scipy import stats

from app.audit.kinds import mia
from app.audit.mechanisms.bugs import BUGS
from app.audit.runtime import no_progress
from app.audit.standalone import local_context
from testkit.dp_icl_server import randomized_response, serve

ROOT = Path(__file__).resolve().parents[2]

DOC = ROOT / "docs" / "results" / "soundness.md"
PARTITIONS = (4, 16, 64)
LLM_CALLS = (5, 20, 50, 200)
TRIALS = 10_000
RR_CALLS = 100
SHIFTED = (
    ("simulated:shift=0.5", 4, 20),
    ("simulated:shift=1", 4, 20),
    ("simulated:shift=1,alpha=0.1", 4, 5),
    ("simulated:shift=1,alpha=0.1", 4, 200),
    ("simulated:shift=1,alpha=0.1", 16, 5),
    ("simulated:shift=1,alpha=0.1", 64, 20),
)
BUG_SEEDS = 20
BUG_TRIALS = 10_000


def run(ctx, **body) -> dict:
    mechanism = {"name": "private_voting", **body.pop("mechanism", {})}  # a request names its mechanism
    request = {"kind": "mia", "dataset": "ag_news", "model": "simulated", "epsilon": 1.0, **body}
    return mia.run(mia.Request.model_validate({**request, "mechanism": mechanism}), ctx).stored()


def upper(k: int, n: int) -> float:
    """One-sided 95 % Clopper-Pearson upper bound on a rate from k of n."""
    return 1.0 if k >= n else float(stats.beta.ppf(0.95, k + 1, n - k))


def cell(ctx, n: int, **body) -> dict:
    flags = {"any": 0, "black_box": 0, "white_box": 0}
    eps = []
    for seed in range(n):
        r = run(ctx, seed=seed, **body)
        flags["any"] += r["violation"]
        for tm in ("black_box", "white_box"):
            flags[tm] += bool(r.get(tm, {}).get("violation"))
        eps.append(max(r[tm]["epsilon_empirical"] for tm in ("black_box", "white_box") if tm in r))
    return {"n": n, **flags, "eps_mean": float(np.mean(eps)), "eps_max": float(np.max(eps))}


def row(label: str, c: dict) -> str:
    rate = c["any"] / c["n"]
    return (
        f"| {label} | {c['n']} | {c['any']} ({c['black_box']} / {c['white_box']}) | {rate:.1%} | "
        f"{upper(c['any'], c['n']):.1%} | {c['eps_mean']:.3f} / {c['eps_max']:.3f} |"
    )


HEADER = (
    "| cell | audits | flagged (black / white) | rate | 95 % upper | ε_emp mean / max |\n"
    "|---|---|---|---|---|---|"
)


def independent_pools_cell(ctx, n: int, partitions: int, llm_calls: int) -> dict:
    """The old behaviour, for contrast: C1 and C0 pools drawn from independent streams."""
    from app.audit.stats.auditor import Auditor
    from app.audit.stats.trials import bootstrap_trials

    flags = {"any": 0, "black_box": 0, "white_box": 0}
    eps = []
    for seed in range(n):
        body = {
            "kind": "mia",
            "dataset": "ag_news",
            "model": "simulated",
            "seed": seed,
            "epsilon": 1.0,
            "llm_calls": llm_calls,
            "trials": TRIALS,
            "mechanism": {"name": "private_voting", "partitions": partitions, "calibration": "analytic"},
        }
        request = mia.Request.model_validate(body)
        setup = mia._setup(request, ctx)
        mech, answers = setup.mechanism, setup.query.answers
        pool_in, pool_out = (np.random.default_rng(s) for s in setup.seeds.children["pool"].spawn(2))
        clean_in = mech.collect(setup.prompts_in, answers, setup.source, llm_calls, pool_in)
        clean_out = mech.collect(setup.prompts_out, answers, setup.source, llm_calls, pool_out)
        trials = bootstrap_trials(
            clean_in,
            clean_out,
            setup.release,
            n_trials=TRIALS,
            rngs=(setup.seeds.rng("noise_in"), setup.seeds.rng("noise_out")),
        )
        auditor = Auditor.for_request(
            request, gaussian=True, claimed=1.0, seeds=setup.seeds
        )  # gdp, 0.975 each
        bounds = mia._trial_bounds(setup, trials, ctx, auditor)
        hit = {tm: b["epsilon_empirical"] > 1.0 for tm, b in bounds.items()}
        flags["any"] += any(hit.values())
        for tm, h in hit.items():
            flags[tm] += h
        eps.append(max(b["epsilon_empirical"] for b in bounds.values()))
    return {"n": n, **flags, "eps_mean": float(np.mean(eps)), "eps_max": float(np.max(eps))}


def endpoint_cell(ctx, n: int, epsilon_true: float) -> dict:
    flags = 0
    free, gdp = [], []
    with serve(randomized_response(epsilon=epsilon_true, seed=round(epsilon_true * 1000))) as url:
        for seed in range(n):
            r = run(
                ctx,
                seed=seed,
                estimator="direct",
                trials=RR_CALLS,
                mechanism={
                    "name": "http_endpoint",
                    "endpoint": {"url": url + "/", "answer_path": "$.choices[0].text"},
                },
                attack={"name": "canary_prompt", "threat_model": "black_box"},
            )
            flags += r["violation"]
            free.append(r["black_box"]["epsilon_empirical_assumption_free"])
            gdp.append(r["black_box"]["epsilon_empirical"])
    return {"n": n, "flagged": flags, "free": float(np.mean(free)), "gdp": float(np.mean(gdp))}


def bug_cell(ctx, name: str) -> dict:
    bug = BUGS[name]
    flags = {"any": 0, "black_box": 0, "white_box": 0}
    for seed in range(BUG_SEEDS):
        r = run(
            ctx,
            model="oracle",
            seed=seed,
            trials=BUG_TRIALS,
            epsilon=bug.setting["epsilon"],
            mechanism={**bug.setting["mechanism"], "bug": name},
        )
        flags["any"] += r["violation"]
        for tm in ("black_box", "white_box"):
            flags[tm] += r[tm]["violation"]
    return flags


def _with_kept_sections(text: str) -> str:
    """`text` followed by the sections other scripts write between their markers in the current doc
    (verdict_power.py, design_null.py: `<!-- name: begin -->` … `<!-- name: end -->`), kept as they are."""
    old = DOC.read_text(encoding="utf-8") if DOC.exists() else ""
    kept = [m.group(0) for m in re.finditer(r"<!-- (\S+): begin -->.*?<!-- \1: end -->", old, flags=re.S)]
    return text.rstrip("\n") + "".join(f"\n\n{section}" for section in kept) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="20 audits per cell; print, do not write")
    args = parser.parse_args()
    n = 20 if args.quick else 200
    n_rr = 20 if args.quick else 100
    ctx = local_context(progress=no_progress)
    started = time.time()

    boot = [HEADER]
    for t in PARTITIONS:
        for calls in LLM_CALLS:
            c = cell(
                ctx,
                n,
                llm_calls=calls,
                trials=TRIALS,
                mechanism={"partitions": t, "calibration": "analytic"},
            )
            boot.append(row(f"T = {t}, llm_calls = {calls}", c))
            print(boot[-1], flush=True)
    direct = [HEADER]
    for t in PARTITIONS:
        c = cell(
            ctx, n, estimator="direct", trials=TRIALS, mechanism={"partitions": t, "calibration": "analytic"}
        )
        direct.append(row(f"T = {t}", c))
        print(direct[-1], flush=True)
    shifted = [HEADER]
    for model, t, calls in SHIFTED:
        c = cell(
            ctx,
            n,
            model=model,
            llm_calls=calls,
            trials=TRIALS,
            mechanism={"partitions": t, "calibration": "analytic"},
        )
        shifted.append(row(f"`{model}`, T = {t}, llm_calls = {calls}", c))
        print(shifted[-1], flush=True)
    before = [HEADER]
    for calls in LLM_CALLS:
        c = independent_pools_cell(ctx, n, 64, calls)
        before.append(row(f"T = 64, llm_calls = {calls}, independent pools", c))
        print(before[-1], flush=True)
    rr = [
        "| endpoint | audits | flagged | mean ε_af (verdict) | mean ε_emp (GDP route, not used) |",
        "|---|---|---|---|---|",
    ]
    for eps_true in (1.0, 3.0):
        c = endpoint_cell(ctx, n_rr, eps_true)
        rr.append(
            f"| randomized response, exactly ({eps_true:g}, 0)-DP, claimed ε = 1 | {c['n']} | "
            f"{c['flagged']} ({c['flagged'] / c['n']:.0%}) | {c['free']:.3f} | {c['gdp']:.3f} |"
        )
        print(rr[-1], flush=True)
    zoo = [
        "| bug | where it breaks DP | audit setting | flagged (black / white) of 20 |",
        "|---|---|---|---|",
    ]
    for name, bug in BUGS.items():
        f = bug_cell(ctx, name)
        mech = bug.setting["mechanism"]
        setting = f"ε = {bug.setting['epsilon']:g}, T = {mech['partitions']}, {mech['calibration']} σ"
        zoo.append(
            f"| `{name}` | {bug.breaks} | {setting} | {f['any']} ({f['black_box']} / {f['white_box']}) |"
        )
        print(zoo[-1], flush=True)
    minutes = (time.time() - started) / 60
    if args.quick:
        return 0
    DOC.write_text(
        _with_kept_sections(
            TEMPLATE.format(
                bootstrap="\n".join(boot),
                direct="\n".join(direct),
                shifted="\n".join(shifted),
                before="\n".join(before),
                rr="\n".join(rr),
                zoo="\n".join(zoo),
                n=n,
                n_last=n - 1,
                n_rr=n_rr,
                trials=TRIALS,
                rr_calls=RR_CALLS,
                bug_trials=BUG_TRIALS,
                minutes=minutes,
            )
        ),
        encoding="utf-8",
    )
    print(f"wrote {DOC} ({minutes:.1f} min)")
    return 0


TEMPLATE = """# Soundness of the `violation` verdict (issue 9)

Every number here comes from `docs/results/soundness.py` (this file is its output):

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/soundness.py

Audit seeds 0 … {n_last} per cell (`seed` of the request; the whole audit derives from it through the
seed tree, `app/audit/seeds.py`), `ag_news`, Inquiry attack, δ = 1e-5, stated confidence 0.95, claimed
ε = 1 with analytic σ (the calibration whose exact ε equals the claim, so nothing is lost to slack).
Run time {minutes:.0f} min on the 2-core CPU machine.

## The verdict

`violation` = black-box test OR white-box test, each at the Bonferroni share of the stated confidence
(0.975 each for both; `bounds.per_test_confidence`), so the verdict errs with probability ≤ 0.05 in all.
Each test reports `epsilon_empirical` (GDP route: μ_lower → ε at δ) and
`epsilon_empirical_assumption_free` (largest ε with TPR_lower > e^ε·FPR_upper + δ or its mirror; same
Clopper-Pearson pair); the verdict uses the GDP route only for a known Gaussian mechanism
(`Mechanism.gaussian`: private_voting, esa, ksa and their planted bugs), the assumption-free bound
otherwise (http_endpoint, none, prompt_defense) or when the request says `"assumption": "none"`.
The result states which (`assumption`) and the confidence of each test (`confidence.per_test`).

## Why the clean pool's sampling error is covered

The bootstrap collects n = `llm_calls` clean statistics per context and resamples them. C1 and C0 take
their pools from two generators in the same state (the `pool` stream): a partition whose prompt is the
same in both contexts casts the same vote in call i of C1 and of C0, so row i of the two pools differ in
the canary's partition only. Then, given the pools:

1. A C1 trial is a draw from P = (1/n) Σᵢ M(Vᵢ¹), a C0 trial from Q = (1/n) Σᵢ M(Vᵢ⁰), where M is the
   mechanism's own release and (Vᵢ¹, Vᵢ⁰) differ by one partition's output — neighbouring inputs, for
   which M (correct noise) is (ε, δ)-DP and μ-GDP (private voting: one vote moves, ‖ΔV‖₂ ≤ √2; ESA: one
   embedding of T, ≤ 2/T; KSA: ≤ √(2·max_words)).
2. The hockey-stick divergence H_{{e^ε}}(P‖Q) is jointly convex, so H(P‖Q) ≤ (1/n) Σᵢ H(M(Vᵢ¹)‖M(Vᵢ⁰)) ≤ δ(ε)
   for every ε, in both directions. Holding the whole (ε, δ(ε)) profile of G_μ, the pair (P, Q) is μ-GDP
   (Dong, Roth & Su 2022, Prop. 2.12). So the bootstrap audits a mechanism — M run on an "LLM" whose
   answers are the empirical pool — that satisfies the claim whenever M does.
3. Given the pools, the trials are i.i.d. from P and Q, so the Clopper-Pearson pair holds with
   probability ≥ 1 − α given the pool, hence unconditionally: the stated confidence covers the noise,
   the pool and the threshold split (held-out half) together. The pool size changes the power, not the
   soundness; no minimum `llm_calls` is needed (1 is valid).

With independent pools (before this change) the two contexts differ in every partition, the pair (P, Q)
is no longer neighbouring, and a correct mechanism is flagged (the contrast table below). `direct` draws a fresh clean
statistic per trial from the engine's exact answer distributions: its trials are i.i.d. from the real
mechanism and there is no pool (llm_calls does not apply).

The null engine is `simulated` (app/engines/simulated.py): per audit, a random Dirichlet(1, 1) Yes/No
distribution shared by the partitions, and the canary changes nothing. Under common random numbers the
two pools of a null are then identical row by row (ε_emp = 0 up to the noise): the pool error that made
the old bootstrap flag correct mechanisms is gone, not merely covered. The shifted cells below keep a
real difference in the canary's partition, where the mixture argument above does the work.

The tests run reduced versions (tests/audit/mia/test_mia_soundness.py: 60 audits of 4,000 trials for
three of these cells, 8 + 8 endpoint audits of 60 calls, each bug on 20 seeds at 10,000 trials).

## Null, bootstrap (T × llm_calls, {trials:,} trials per context)

{bootstrap}

## Null, direct ({trials:,} calls per context)

{direct}

## A correct mechanism with a real effect (the canary shifts its partition's Yes probability)

The canary's partition answers "Yes" with probability p + s·(1 − p) instead of p. With s = 1 and a
Dirichlet concentration α = 0.1 (p near 0 or 1) the votes are nearly the oracle's worst case (003 Lemma
3.1) yet still random, so the two pools really differ (in the canary's partition) and ε_emp comes close
to the claim: the verdict must still err at most at the stated rate.

{shifted}

## For contrast: independent pools (the pre-fix bootstrap), GDP route, same Bonferroni split

{before}

## Randomized-response endpoint over HTTP (`http_endpoint`, direct, {rr_calls} calls per context)

An endpoint that answers "1"/"0" by randomized response on "the canary is in the context" is exactly
(ε, 0)-DP and not Gaussian (testkit/dp_icl_server.py). The verdict uses the assumption-free
bound; the GDP route, shown for comparison only, reads ε = 5.58 into the (1, 0)-DP endpoint's exact
rates (TPR 0.731 / FPR 0.269) — a false violation as soon as the calls pin the rates down. {n_rr} seeded
audits each; the server's own coin flips are seeded too (seed 1000 × true ε).

{rr}

## The bug zoo: each planted bug where it breaks DP (oracle engine, {bug_trials:,} trials, seeds 0 … 19)

The mechanism still claims its (ε, δ); `app/audit/mechanisms/bugs.py` declares where each bug breaks it.

{zoo}

`sensitivity_one` at classic ε = 1 (the old documented setting) is ε = 1.10 against a claim of 1: the
finite-trial bounds (and now the Bonferroni split) do not resolve a 10 % excess in either threat model,
so the bug is audited where it is a real breach (analytic σ, ε = 2: exact ε 2.95). `fixed_noise_seed`
is flagged by the white-box test only: its single fixed draw decides the black-box label identically
for C1 and C0 unless it sits at the argmax boundary.

## Defects found by an outside review (issue 18 §4)

Each has a seeded test (seeds ≥ 5000) that fails on the code before the fix. The numbers here come from
those tests and from one-off measurements described with them; this script does not rerun them.

**`estimator: exact` at large ε.** FNR was computed as 1 − TPR. At large ε the TPR is within 10⁻¹⁰ of 1,
so the subtraction kept no correct digits (or gave 0). The assumption-free ε of a correct mechanism then
came out above its claim, and Φ⁻¹(TPR) or ε_af became infinite. Oracle engine, T = 4, seed 5003,
`assumption: none`, ε ∈ {{10, 12, …, 100}}: with analytic σ, 39 of 46 audits were flagged and 38 of 46
failed with INTERNAL ("Out of range float values are not JSON compliant"). exact.py now takes FNR and TNR
from their own tails (the other labels' argmax probabilities; the Gaussian mixture's lower tail) and
computes both ε in log space. A value that is still not finite is stored as null with its `*_unbounded`
flag. After the fix no analytic audit is flagged and none fails. The white-box ε_lower is within 0.1 % of
the claim (19.9999 at 20, 99.995 at 100). Classic σ is not (ε, δ)-DP at its claim above ε ≈ 8.4
(`calibration_valid` false; its exact ε is 10.39 at a claim of 10), so all 46 classic audits are rightly
flagged. Before the fix, 41 of them reported a bound above that exact ε or crashed; now none does.
Test: tests/audit/mia/test_exact_large_epsilon.py.

**Synthetic generation's neighbour.** The accounting takes one record's effect on z̄ = (1/s) Σ clip_c(z_p)
as c/s (ρ = ½(c/(sτ))², ε_EM = 2c/(sτ)) and on the SVT query as 1/s. That holds when a removed record's
sum is still divided by the batch size s, i.e. the record's clipped logits are zeroed out (Amin et al.
normalise by the expected batch size). The audit divided the record-removed sum by s − 1 instead: in the
kind's per-step neighbours (app/audit/icl/synthetic.py) and in the generated-text attack's C0 run
(app/audit/attacks/released_text.py). That moves z̄ up to twice as far. Measured worst-case per-step RDP
over seeded random and extreme (±c) logits:

- s = 2, c = 10, τ = 1, α = 4: 19.25 against a theory of 10.0; now 9.25.
- s = 10, c = 10, τ = 2, α = 64: 1.84 against 0.995; now 0.93.

Both places now divide by s (`batch_size` through `generate_private_sequence`). The test checks that the
measured per-step RDP never exceeds the theory at any order of the audit's grid, in 6 (s, c, τ) settings.
It also checks that the kind, run end to end on a stub model, stays below the theory per step (12.79
against 10.0 before) and that C0 runs on s − 1 prompts over s. In the same area, `clip: 1e200` with
temperature 1 and batch size 2 overflowed (c/(sτ))² at submit (a 500). clip and temperature now have the
accounting calculator's bounds (1e-6 … 1e6), so such a request is a 422 naming the field.
Tests: tests/audit/iclinf/test_synthetic_neighbour.py, tests/api/test_api_synthetic_generation_bounds.py.

**Disjoint-Poisson partitioning and the canary.** 002 Alg. 3 gives the last partition p_M < 1 while more
than |D|/M exemplars remain, so an exemplar can be left out of every partition. The docstring said
otherwise. Share of partitionings that leave out some exemplar, and a given one:

| exemplars, partitions | some exemplar left out | a given exemplar left out |
|---|---|---|
| 8, 4 | 34 % | 9.3 % |
| 16, 4 | 37 % | 7.0 % |
| 40, 4 | 41 % | 4.4 % |
| 64, 16 | 44 % | 4.4 % |

The partitioning is drawn once per audit: 8 of seeds 5000 … 5059 (8 exemplars in 4 partitions) audited a
C1 without the canary, i.e. C1 = C0. No claim here credits amplification by subsampling: private voting,
ESA and KSA calibrate their noise for a record inside a partition. So the audit draws Alg. 3 conditioned
on the canary being used (drawn again until a partition holds it). Each draw misses with probability
≤ (1 − 1/M)^M < e⁻¹. A claim without amplification holds for every fixed partitioning, so one that holds
the record is enough to test it. Every mia result now reports `mechanism.canary_included`; the
multi-record attacks report whether every record's pairs held it. If it were false, the verdict would be
inconclusive. Test: tests/audit/mia/test_partition_canary.py.
"""

if __name__ == "__main__":
    raise SystemExit(main())
