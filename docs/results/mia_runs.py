"""docs/results/mia.md's measured tables: the oracle tightness, classic and KSA rows and the real-model rows
(MiniLM embeddings, SmolLM2), run from the example requests and kept as raw JSON lines.

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/mia_runs.py [rows…]
    .venv/bin/python docs/results/mia_runs.py --report      # the tables of mia.md, from the runs file

Each run appends {row, request, seconds, result summary} to docs/results/mia-runs.jsonl (the latest line
of a row wins); `--report` prints mia.md's tables from that file, and tests/docs/test_mia_doc.py keeps the
document equal to it. Each row is an example request (examples/), run as is or with the fields shown
changed — the tightness rows audit the white box alone (`threat_model: white_box`, confidence 0.95). The
rows read the benchmark copies they were measured on (AG News, SAMSum: ICLAUDIT_DATA_DIR), while the
examples themselves use the DBpedia-14 copy that ships in the package.
The planted-bug and T-sweep numbers and the plots come from docs/plots/mia.py.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUNS = ROOT / "docs" / "results" / "mia-runs.jsonl"
EPSILONS = (1, 2, 4, 8)
SEEDS = (0, 1, 2)
ESA_ATTACKS = ("signal_text", "repeat", "reference_vector", "output_only")
REPEAT_NOTE = " (−‖ẽ − emb(continuation)‖)"
ESA_LABELS = {
    "signal_text": "signal_text (003 §3.4)",
    "repeat": "repeat (003 Prompt 5)",
    "reference_vector": "reference_vector (002 App. D, `examples/mia-esa-reference-vector-minilm-eps8.json`)",
    "output_only": "output_only (002 App. E.1; distance ẽ → released candidate)",
}


def example(name: str, **changes) -> dict:
    body = json.loads((ROOT / "examples" / name).read_text())
    for key, value in changes.items():
        if isinstance(value, dict):
            body[key] = {**body.get(key, {}), **value}
        else:
            body[key] = value
    return body


ROWS = {
    **{
        f"oracle_eps{eps}_seed{seed}": example(
            f"mia-oracle-eps{eps}.json",
            dataset="ag_news",
            seed=seed,
            attack={"name": "inquiry", "threat_model": "white_box"},
        )
        for eps in EPSILONS
        for seed in SEEDS
    },
    "oracle_classic_eps4": example(
        "mia-oracle-eps4.json",
        dataset="ag_news",
        seed=1,
        mechanism={"calibration": "classic"},
        trials=400_000,
    ),
    **{
        f"ksa_words{w}": example("mia-ksa-oracle-eps2.json", dataset="ag_news", mechanism={"max_words": w})
        for w in (1, 4)
    },
    "esa_minilm_eps1": example("mia-esa-minilm-eps8.json", dataset="samsum", epsilon=1.0),
    "esa_minilm_eps8": example("mia-esa-minilm-eps8.json", dataset="samsum"),
    **{
        f"esa_attack_{attack}": example(
            "mia-esa-reference-vector-minilm-eps8.json",
            dataset="samsum",
            trials=50_000,
            attack={"name": attack},
        )
        for attack in ESA_ATTACKS
    },
    "smollm2_eps8": example("mia-smollm2-eps8.json", dataset="ag_news"),
    **{
        f"smollm2_{attack}": example(
            "mia-smollm2-eps8.json",
            dataset="trec",
            trials=10_000,
            mechanism={"partitions": 2, "shots_per_partition": 1},
            attack={"name": attack},
        )
        for attack in ("gap", "brainwash")
    },
}


def summary(result: dict) -> dict:
    """What the tables print, per threat model and overall."""
    out = {k: result.get(k) for k in ("violation", "epsilon_ceiling", "mu_theory", "epsilon_theory")}
    for tm in ("black_box", "white_box"):
        if tm in result:
            b = result[tm]
            out[tm] = {k: b.get(k) for k in ("tpr", "fpr", "epsilon_empirical", "epsilon_lower")}
    return out


def load() -> dict[str, dict]:
    return {r["row"]: r for r in map(json.loads, RUNS.read_text().splitlines())} if RUNS.is_file() else {}


def _f(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _emp(run: dict, tm: str, digits: int = 3) -> str:
    return _f(run["result"][tm]["epsilon_empirical"], digits) if tm in run["result"] else "—"


def report() -> str:
    """mia.md's tables from the runs file."""
    runs = load()
    lines = [
        "| ε_theory | request (`threat_model: white_box`) | ε_emp white-box (seed 1) "
        "| ε_emp/ε_theory, seeds 0 / 1 / 2 | μ_theory |",
        "|---|---|---|---|---|",
    ]
    for eps in EPSILONS:
        seeds = [runs.get(f"oracle_eps{eps}_seed{s}") for s in SEEDS]
        if None in seeds:
            continue
        ratios = " / ".join(f"{r['result']['white_box']['epsilon_empirical'] / eps:.3f}" for r in seeds)
        lines.append(
            f"| {eps} | `examples/mia-oracle-eps{eps}.json` | {_emp(seeds[1], 'white_box')} | {ratios} "
            f"| {seeds[1]['result']['mu_theory']:.3f} |"
        )
    if (c := runs.get("oracle_classic_eps4")) is not None:
        a = runs.get("oracle_eps4_seed1")
        lines += [
            "",
            "| calibration | epsilon_ceiling | black-box ε_emp | white-box ε_emp |",
            "|---|---|---|---|",
            f"| classic | {_f(c['result']['epsilon_ceiling'])} | {_emp(c, 'black_box')} | {_emp(c, 'white_box')} |",
        ]
        if a is not None:
            lines.append(
                f"| analytic | {_f(a['result']['epsilon_ceiling'])} | — | {_emp(a, 'white_box')} (seed 1) |"
            )
    rows = [
        (label, runs[name])
        for label, name in (
            ("1", "esa_minilm_eps1"),
            ("8 (`examples/mia-esa-minilm-eps8.json`)", "esa_minilm_eps8"),
        )
        if name in runs
    ]
    if rows:
        lines += ["", "| ε_theory | black-box ε_emp | white-box ε_emp |", "|---|---|---|"]
        lines += [f"| {label} | {_emp(r, 'black_box')} | {_emp(r, 'white_box')} |" for label, r in rows]
    rows = [(w, runs[f"ksa_words{w}"]) for w in (1, 4) if f"ksa_words{w}" in runs]
    if rows:
        lines += [
            "",
            "| max_words (Δ₂ = √(2·max_words)) | black-box ε_emp | white-box ε_emp |",
            "|---|---|---|",
        ]
        lines += [f"| {w} | {_emp(r, 'black_box')} | {_emp(r, 'white_box')} |" for w, r in rows]
    rows = [(a, runs[f"esa_attack_{a}"]) for a in ESA_ATTACKS if f"esa_attack_{a}" in runs]
    if rows:
        lines += ["", "| attack | black-box ε_emp | white-box ε_emp |", "|---|---|---|"]
        lines += [
            f"| {ESA_LABELS[a]} | {_emp(r, 'black_box')} | {_emp(r, 'white_box')}{REPEAT_NOTE if a == 'repeat' else ''} |"
            for a, r in rows
        ]
    rows = [(n, runs[n]) for n in ("smollm2_eps8", "smollm2_gap", "smollm2_brainwash") if n in runs]
    if rows:
        lines += [
            "",
            "| row | request | black-box TPR / FPR | black-box ε_emp | white-box ε_emp | epsilon_ceiling |",
            "|---|---|---|---|---|---|",
        ]
        for name, r in rows:
            b = r["result"]["black_box"]
            req = r["request"]
            what = f"{req['dataset']}, {req['mechanism']['partitions']} × {req['mechanism']['shots_per_partition']} shot, {req['trials']} trials"
            lines.append(
                f"| {name} | {req['attack']['name']}, {what} | {b['tpr']:.3f} / {b['fpr']:.3f} "
                f"| {_emp(r, 'black_box', 2)} | {_emp(r, 'white_box', 2)} | {_f(r['result']['epsilon_ceiling'])} |"
            )
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    if "--report" in argv:
        print(report())
        return 0
    from app.audit.runtime import no_progress
    from app.audit.standalone import local_context, run_request

    ctx = local_context(progress=no_progress)
    for name in [a for a in argv if not a.startswith("--")] or list(ROWS):
        body = ROWS[name]
        started = time.time()
        result = run_request(copy.deepcopy(body), ctx)
        row = {
            "row": name,
            "request": body,
            "seconds": round(time.time() - started, 1),
            "result": summary(result),
        }
        print(json.dumps(row), flush=True)
        with RUNS.open("a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
