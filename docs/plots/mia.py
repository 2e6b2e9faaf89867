"""Regenerate the membership-audit plots in docs/img/ from the example requests (oracle engine, CPU).

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/plots/mia.py

Also prints the oracle numbers of docs/results/mia.md's tables (tightness per seed 0/1/2, classic at
ε = 4, KSA by max_words).

- mia-tightness.png: white-box ε_emp vs ε_theory, analytic and classic σ, with classic's exact ε
  (`epsilon_ceiling`) — examples/mia-oracle-eps{1,2,4,8}.json (003 Fig. 5).
- mia-partitions.png: black-box ε_emp vs the number of partitions T (ε = 4, analytic; 003 Fig. 6).
- mia-bugs.png: ε_emp / ε_theory per planted bug, each in the setting where it breaks DP
  (`app/audit/mechanisms/bugs.py`) — examples/mia-oracle-bug-noise-divided-by-t.json with `bug`,
  `epsilon` and the mechanism's fields replaced; "none" is the correct mechanism (ε = 1, classic σ).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[2]

from app.audit.mechanisms.bugs import BUGS  # noqa: E402
from app.audit.runtime import no_progress  # noqa: E402
from app.audit.standalone import local_context, run_request  # noqa: E402

IMG = ROOT / "docs" / "img"
EPSILONS = (1, 2, 4, 8)
PARTITIONS = (1, 2, 4, 8, 16, 32)


def example(name: str) -> dict:
    return json.loads((ROOT / "examples" / name).read_text())


def tightness(ctx) -> None:
    analytic, classic, ceiling = [], [], []
    for eps in EPSILONS:
        body = example(f"mia-oracle-eps{eps}.json")
        analytic.append(run_request(body, ctx)["white_box"]["epsilon_empirical"])
        body = copy.deepcopy(body)
        body["mechanism"]["calibration"] = "classic"
        r = run_request(body, ctx)
        classic.append(r["white_box"]["epsilon_empirical"])
        ceiling.append(r["epsilon_ceiling"])
    print(json.dumps({"tightness": {"analytic": analytic, "classic": classic, "ceiling": ceiling}}))
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.plot(EPSILONS, EPSILONS, "k--", label="ε_theory (y = x)")
    ax.plot(EPSILONS, analytic, "o-", label="ε_emp, analytic σ")
    ax.plot(EPSILONS, classic, "s-", label="ε_emp, classic σ")
    ax.plot(EPSILONS, ceiling, "^:", label="classic σ: exact ε (epsilon_ceiling)")
    ax.set(xlabel="ε_theory", ylabel="ε (δ = 1e-5)", title="Oracle, white box, T = 4, 400K trials")
    ax.legend()
    fig.tight_layout()
    fig.savefig(IMG / "mia-tightness.png", dpi=120)


def partitions(ctx) -> None:
    eps = []
    for t in PARTITIONS:
        body = example("mia-oracle-eps4.json")
        body.update(trials=100_000, seed=0)
        body["mechanism"].update(partitions=t)
        body["attack"]["threat_model"] = "black_box"
        eps.append(run_request(body, ctx)["black_box"]["epsilon_empirical"])
    print(json.dumps({"black_box_vs_T": dict(zip(PARTITIONS, eps, strict=True))}))
    fig, ax = plt.subplots(figsize=(5, 4))
    ax.axhline(4, color="k", ls="--", label="ε_theory")
    ax.plot(PARTITIONS, eps, "o-", label="black-box ε_emp")
    ax.set(
        xscale="log", xlabel="partitions T", ylabel="ε", title="Oracle, ε_theory = 4 (analytic), 100K trials"
    )
    ax.set_xticks(PARTITIONS, [str(t) for t in PARTITIONS])
    ax.legend()
    fig.tight_layout()
    fig.savefig(IMG / "mia-partitions.png", dpi=120)


def bugs(ctx) -> None:
    """Each planted bug in the setting where it breaks DP (`BUGS[name].setting`), ε_emp / ε_theory."""
    names = ["none", *BUGS]
    black, white = [], []
    for bug in names:
        body = example("mia-oracle-bug-noise-divided-by-t.json")
        body.update(trials=100_000)
        if bug == "none":
            body["mechanism"]["bug"] = None
        else:
            setting = BUGS[bug].setting
            body["epsilon"] = setting["epsilon"]
            body["mechanism"].update(setting["mechanism"], bug=bug)
        r = run_request(body, ctx)
        black.append(r["black_box"]["epsilon_empirical"] / body["epsilon"])
        white.append(min(r["white_box"]["epsilon_empirical"] / body["epsilon"], 10.0))
    print(json.dumps({"bugs_ratio": dict(zip(names, zip(black, white, strict=True), strict=True))}))
    fig, ax = plt.subplots(figsize=(7, 4))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], black, 0.4, label="black box")
    ax.bar([i + 0.2 for i in x], white, 0.4, label="white box (cut at 10)")
    ax.axhline(1.0, color="k", ls="--", label="the claim")
    ax.set_xticks(list(x), names, rotation=30, ha="right")
    ax.set(ylabel="ε_emp / ε_theory", title="Planted bugs where they break DP (oracle, 100K trials)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(IMG / "mia-bugs.png", dpi=120)


def tables(ctx) -> None:
    """The oracle numbers of docs/results/mia.md's tables: tightness per seed, KSA by max_words."""
    ratios = {}
    for eps in EPSILONS:
        for seed in (0, 1, 2):
            body = example(f"mia-oracle-eps{eps}.json")
            body.update(seed=seed)
            body["attack"]["threat_model"] = "white_box"
            r = run_request(body, ctx)
            ratios[f"eps{eps}_seed{seed}"] = round(r["white_box"]["epsilon_empirical"] / eps, 3)
        ratios[f"eps{eps}_mu_theory"] = round(r["mu_theory"], 3)
    print(json.dumps({"tightness_ratios": ratios}))
    body = example("mia-oracle-eps4.json")
    body.update(trials=400_000, seed=1)
    body["mechanism"]["calibration"] = "classic"
    r = run_request(body, ctx)
    print(
        json.dumps(
            {
                "classic_eps4": [
                    r["epsilon_ceiling"],
                    r["black_box"]["epsilon_empirical"],
                    r["white_box"]["epsilon_empirical"],
                ]
            }
        )
    )
    ksa = {}
    for words in (1, 4):
        body = example("mia-ksa-oracle-eps2.json")
        body["mechanism"]["max_words"] = words
        r = run_request(body, ctx)
        ksa[words] = (r["black_box"]["epsilon_empirical"], r["white_box"]["epsilon_empirical"])
    print(json.dumps({"ksa_by_max_words": ksa}))


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    ctx = local_context(progress=no_progress)
    tables(ctx)
    tightness(ctx)
    partitions(ctx)
    bugs(ctx)


if __name__ == "__main__":
    main()
