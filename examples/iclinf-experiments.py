"""Reproduce docs/results/iclinf.md's ICLInf sections: run the iclinf request files, then tabulate and plot.
(The synthetic-generation section has its own script: examples/synthgen-experiments.py.)

    .venv/bin/python examples/iclinf-experiments.py run [FILES...]   # default: every iclinf request in ORDER
    .venv/bin/python examples/iclinf-experiments.py report           # tables (markdown, stdout) + docs/img/iclinf-*.png

`run` executes each request in one process through `app.audit.standalone.run_request` (the same `run`
the service calls), appending {file, wall_seconds, result} to docs/results/iclinf-runs.jsonl; files
already there are skipped, so an interrupted run resumes.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RUNS = ROOT / "docs" / "results" / "iclinf-runs.jsonl"
IMG = ROOT / "docs" / "img"
ORDER = [  # most informative first: k = 4 labels, calibration, vocabulary, shots
    *(f"iclinf-{d}-k4.json" for d in ("agnews", "trec", "dbpedia")),
    *(f"iclinf-{d}-k4-calibrated.json" for d in ("agnews", "trec", "dbpedia")),
    *(f"iclinf-{d}-k4-calibrated-zhao2021.json" for d in ("agnews", "trec", "dbpedia")),
    *(f"iclinf-{d}-k4-vocabulary.json" for d in ("agnews", "trec", "dbpedia")),
    *(f"iclinf-{d}-k{k}.json" for k in (1, 2, 8) for d in ("agnews", "trec", "dbpedia")),
]
DATASETS = {"agnews": "ag_news", "trec": "trec", "dbpedia": "dbpedia14"}


def request_file(name: str) -> Path:
    """examples/<name> (dbpedia14: runs on a fresh `make serve`), else docs/results/requests/<name> (AG News
    and TREC, which need their offline copies in ICLAUDIT_DATA_DIR: their terms keep them out of the package)."""
    for folder in (ROOT / "examples", ROOT / "docs" / "results" / "requests"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(name)


def load_runs() -> dict[str, dict]:
    if not RUNS.is_file():
        return {}
    return {row["file"]: row for row in map(json.loads, RUNS.read_text().splitlines())}


def run(files: list[str]) -> None:
    from app.audit.standalone import local_context, run_request

    ctx = local_context()
    done = load_runs()
    RUNS.parent.mkdir(parents=True, exist_ok=True)
    for name in files or ORDER:
        if name in done:
            continue
        body = json.loads(request_file(name).read_text())
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
    IMG.mkdir(parents=True, exist_ok=True)

    def get(d: str, suffix: str) -> dict | None:
        row = runs.get(f"iclinf-{d}-{suffix}.json")
        return None if row is None else {**row["result"], "wall_seconds": row["wall_seconds"]}

    def cell(r: dict | None) -> str:
        return "—" if r is None else f"{r['iclinf']:.2f} ± {r['iclinf_std']:.2f}"

    print(
        "| dataset | m | acc. (k=4) | acc. (k=4 cal.) | ICLInf k=1 | k=2 | k=4 | k=8 | k=4 calibrated "
        "| k=4 vocabulary | s/query (k=4) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for d, name in DATASETS.items():
        base = get(d, "k4")
        if base is None:
            continue
        row = [cell(get(d, s)) for s in ("k1", "k2", "k4", "k8", "k4-calibrated", "k4-vocabulary")]
        cal = get(d, "k4-calibrated")
        print(
            f"| {name} | {base['queries']} | {base['accuracy']:.2f} | "
            + ("—" if cal is None else f"{cal['accuracy']:.2f}")
            + " | "
            + " | ".join(row)
            + f" | {base['wall_seconds'] / base['queries']:.1f} |"
        )

    calibration_table(get)

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    for k, ax in zip((4, 8), axes, strict=True):
        print(f"\nPer-position loss (mean over queries, before the max; k = {k}):\n")
        print("| dataset | " + " | ".join(f"pos {i}" for i in range(1, k + 1)) + " |")
        print("|---" * (k + 1) + "|")
        for d, name in DATASETS.items():
            r = get(d, f"k{k}")
            if r is None:
                continue
            ax.plot(range(1, r["shots"] + 1), r["per_position"], marker="o", label=name)
            print(f"| {name} | " + " | ".join(f"{v:.2f}" for v in r["per_position"]) + " |")
    for ax, k in zip(axes, (4, 8), strict=True):
        ax.set(xlabel="removed exemplar position", ylabel="mean loss", title=f"per-position loss, k = {k}")
        ax.legend()
    fig.tight_layout()
    fig.savefig(IMG / "iclinf-per-position.png", dpi=120)

    fig, ax = plt.subplots(figsize=(5, 3.6))
    for d, name in DATASETS.items():
        pts = [(k, get(d, f"k{k}")) for k in (1, 2, 4, 8)]
        pts = [(k, r) for k, r in pts if r is not None]
        if pts:
            ax.errorbar(
                [k for k, _ in pts],
                [r["iclinf"] for _, r in pts],
                yerr=[r["iclinf_std"] for _, r in pts],
                marker="o",
                capsize=3,
                label=name,
            )
    ax.set(
        xscale="log", xticks=[1, 2, 4, 8], xticklabels=["1", "2", "4", "8"], xlabel="shots k", ylabel="ICLInf"
    )
    ax.set_title("ICLInf vs number of exemplars (RQ4)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(IMG / "iclinf-shots.png", dpi=120)

    fig, ax = plt.subplots(figsize=(6, 3.6))
    names = list(DATASETS.values())
    for offset, (suffix, label) in enumerate(
        (
            ("k4", "labels"),
            ("k4-calibrated", "calibrated, blank"),
            ("k4-calibrated-zhao2021", "calibrated, N/A + blank + [MASK]"),
            ("k4-vocabulary", "vocabulary"),
        )
    ):
        vals = [get(d, suffix) for d in DATASETS]
        xs = [i + (offset - 1.5) * 0.2 for i, v in enumerate(vals) if v is not None]
        ax.bar(
            xs,
            [v["iclinf"] for v in vals if v is not None],
            width=0.2,
            yerr=[v["iclinf_std"] for v in vals if v is not None],
            capsize=3,
            label=label,
        )
    ax.set(xticks=range(len(names)), xticklabels=names, ylabel="ICLInf (k = 4)")
    ax.set_title("calibration (RQ5) and output space (App. E.1)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(IMG / "iclinf-calibration-vocabulary.png", dpi=120)


def calibration_table(get: Callable[[str, str], dict | None]) -> None:
    """k = 4 uncalibrated vs calibrated by the blank content-free input (001 App. B) vs by the mean
    over 'N/A', '', '[MASK]' (Zhao et al. 2021), on the same queries and exemplars: ICLInf, accuracy,
    and the paired per-query difference zhao2021 − blank (mean ± standard error, ddof = 1)."""
    import numpy as np

    print(
        "\n| dataset | m | ICLInf uncal. | cal. blank | cal. N/A+blank+[MASK] | paired Δ (zhao2021 − blank) "
        "| acc. uncal. | acc. blank | acc. zhao2021 |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for d, name in DATASETS.items():
        base, blank, zhao = get(d, "k4"), get(d, "k4-calibrated"), get(d, "k4-calibrated-zhao2021")
        if base is None or blank is None or zhao is None:
            continue
        diff = np.array(zhao["per_query"]) - np.array(blank["per_query"])
        se = diff.std(ddof=1) / np.sqrt(len(diff))
        cells = " | ".join(f"{r['iclinf']:.2f} ± {r['iclinf_std']:.2f}" for r in (base, blank, zhao))
        print(
            f"| {name} | {base['queries']} | {cells} | {diff.mean():+.2f} ± {se:.2f} | {base['accuracy']:.2f} "
            f"| {blank['accuracy']:.2f} | {zhao['accuracy']:.2f} |"
        )


if __name__ == "__main__":
    command, *rest = sys.argv[1:] or ["report"]
    {"run": lambda: run(rest), "report": report}[command]()
