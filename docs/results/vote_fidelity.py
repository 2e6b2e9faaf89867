"""Vote fidelity on SmolLM2: the voting mechanisms' simulated votes vs real sampling (issue 10, item 3).

    nice -n 10 env OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \\
        .venv/bin/python docs/results/vote_fidelity.py      # → docs/results/vote-fidelity.json + table on stdout

For each prompt and τ ∈ {0, 0.5, 1}: `app.audit.icl.vote_fidelity.compare` — DRAWS simulated votes from
the mechanism (`PlainICL(temperature=τ).collect`, the code every voting mechanism draws from) and DRAWS
real generations of the packaged SmolLM2-135M-Instruct at τ, parsed into votes; the predicted
probabilities now (mechanisms/decoding.py) and before (τ = 1 label mass as the valid share); exact
binomial p-values (two-sample: real vs simulated; and real vs each prediction).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import asdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = ROOT / "docs" / "results" / "vote-fidelity.json"
DRAWS = 300
SEED = 11
TEMPERATURES = (0.0, 0.5, 1.0)
CASES = {
    "sky (one-token labels)": ("Is the sky blue? Answer yes or no.", ["yes", "no", "Yes", "No"]),
    "trec (Abbreviation = 3 tokens)": (
        "Classify the question into Abbreviation, Description, Entity, Person, Location or Number.\n"
        "Question: Who wrote Hamlet?\nAnswer:",
        ["Abbreviation", "Description", "Entity", "Person", "Location", "Number"],
    ),
}


def main() -> None:
    from app.audit.icl.vote_fidelity import compare
    from app.engines.protocol import Prompt
    from app.engines.registry import load_llm

    engine = load_llm("smollm2-135m-instruct")
    rows = []
    for case, (text, labels) in CASES.items():
        for tau in TEMPERATURES:
            started = time.perf_counter()
            fid = compare(engine, Prompt(text), labels, tau, DRAWS, seed=SEED)
            rows.append(
                {"case": case, "prompt": text, **asdict(fid), "seconds": time.perf_counter() - started}
            )
            print(f"{case} τ={tau}: {rows[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
    OUT.write_text(json.dumps(rows, indent=1) + "\n")
    report(rows)


def report(rows: list[dict]) -> None:
    """Markdown: one row per (prompt, τ, outcome) with mass predicted now or before, or observed."""
    print(
        "| prompt | τ | outcome | predicted | before | simulated | real | p (real vs sim.) | p (real vs pred.) |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        for i, outcome in enumerate(r["outcomes"]):
            if max(r["predicted"][i], r["predicted_before"][i], r["real"][i], r["simulated"][i]) < 0.005:
                continue  # labels no one votes for
            print(
                f"| {r['case']} | {r['temperature']:g} | {outcome} | {r['predicted'][i]:.3f} | "
                f"{r['predicted_before'][i]:.3f} | {r['simulated'][i]:.3f} | {r['real'][i]:.3f} | "
                f"{r['p_two_sample'][i]:.2g} | {r['p_predicted'][i]:.2g} |"
            )


if __name__ == "__main__":
    if sys.argv[1:] == ["report"]:
        report(json.loads(OUT.read_text()))
    else:
        main()
