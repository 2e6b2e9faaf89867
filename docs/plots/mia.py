"""Regenerate the membership-audit plots in docs/img/ from the example requests (oracle engine, CPU).

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/plots/mia.py

- mia-tightness.png: white-box ε_emp vs ε_theory, analytic and classic σ, with classic's exact ε
  (`epsilon_ceiling`) — examples/mia-oracle-eps{1,2,4,8}.json (003 Fig. 5).
- mia-partitions.png: black-box ε_emp vs the number of partitions T (ε = 4, analytic; 003 Fig. 6).
- mia-bugs.png: ε_emp per planted bug — examples/mia-oracle-bug-noise-divided-by-t.json with `bug`
  replaced (ε_theory = 1, classic σ).
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.audit.local import local_context, run_request  # noqa: E402
from app.audit.mechanisms.bugs import BUGS  # noqa: E402
from app.audit.runtime import no_progress  # noqa: E402

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
    names = ["none", *BUGS]
    black, white = [], []
    for bug in names:
        body = example("mia-oracle-bug-noise-divided-by-t.json")
        body.update(trials=100_000)
        body["mechanism"]["bug"] = None if bug == "none" else bug
        r = run_request(body, ctx)
        black.append(r["black_box"]["epsilon_empirical"])
        white.append(min(r["white_box"]["epsilon_empirical"], 10.0))
    print(json.dumps({"bugs": dict(zip(names, zip(black, white, strict=True), strict=True))}))
    fig, ax = plt.subplots(figsize=(7, 4))
    x = range(len(names))
    ax.bar([i - 0.2 for i in x], black, 0.4, label="black box")
    ax.bar([i + 0.2 for i in x], white, 0.4, label="white box (cut at 10)")
    ax.axhline(1.0, color="k", ls="--", label="ε_theory = 1")
    ax.set_xticks(list(x), names, rotation=30, ha="right")
    ax.set(ylabel="ε_emp", title="Planted bugs (oracle, classic σ, 100K trials)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(IMG / "mia-bugs.png", dpi=120)


def main() -> None:
    IMG.mkdir(parents=True, exist_ok=True)
    ctx = local_context(progress=no_progress)
    tightness(ctx)
    partitions(ctx)
    bugs(ctx)


if __name__ == "__main__":
    main()
