"""The real-model rows of docs/results/mia.md (MiniLM embeddings, SmolLM2), printed as JSON lines.

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/mia_runs.py

The oracle rows and plots come from docs/plots/mia.py. Each row is an example request (examples/), run
as is or with the fields shown changed.
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from app.audit.local import local_context, run_request  # noqa: E402
from app.audit.runtime import no_progress  # noqa: E402


def example(name: str, **changes) -> dict:
    body = json.loads((ROOT / "examples" / name).read_text())
    for key, value in changes.items():
        if isinstance(value, dict):
            body[key] = {**body.get(key, {}), **value}
        else:
            body[key] = value
    return body


ROWS = {
    "esa_minilm_eps8": example("mia-esa-minilm-eps8.json"),
    "esa_minilm_eps1": example("mia-esa-minilm-eps8.json", epsilon=1.0),
    **{
        f"esa_attack_{attack}": example(
            "mia-esa-reference-vector-minilm-eps8.json", trials=50_000, attack={"name": attack}
        )
        for attack in ("signal_text", "repeat", "reference_vector", "output_only")
    },
    "smollm2_eps8": example("mia-smollm2-eps8.json"),
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


def main() -> None:
    ctx = local_context(progress=no_progress)
    for name, body in ROWS.items():
        started = time.time()
        r = run_request(copy.deepcopy(body), ctx)
        row = {"row": name, "seconds": round(time.time() - started, 1), "violation": r["violation"]}
        for tm in ("black_box", "white_box"):
            if tm in r:
                b = r[tm]
                row[tm] = {k: b.get(k) for k in ("tpr", "fpr", "epsilon_empirical", "epsilon_lower")}
        row["epsilon_ceiling"] = r.get("epsilon_ceiling")
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
