"""Markdown tables for docs/results/api.md from the JSON lines of `python bench/run.py api`
(docs/results/api-bench.jsonl): `python docs/results/api_table.py docs/results/api-bench.jsonl`."""

from __future__ import annotations

import json
import sys
from pathlib import Path

LOAD_COLUMNS = (
    ("phase", lambda r: r["name"].split("/", 1)[1].replace("_", " ")),
    ("req/s", lambda r: f"{r['achieved_rps']:.0f}"),
    ("p50 ms", lambda r: f"{r['p50_ms']:.0f}"),
    ("p99 ms", lambda r: f"{r['p99_ms']:.0f}"),
    ("errors", lambda r: str(r["errors"])),
    ("429", lambda r: str(r.get("throttled", 0))),
    ("304", lambda r: str(r["statuses"].get("304", 0))),
    ("requests", lambda r: str(r["requests"])),
    ("/healthz max ms", lambda r: f"{r['healthz_max_ms']:.0f}"),
    ("server CPU ms/req", lambda r: str(r.get("server_cpu_ms_per_request", "–"))),
    ("load avg", lambda r: str(r.get("machine_load_1m", "–"))),
)


def tables(rows: list[dict]) -> str:
    out = []
    for stack in dict.fromkeys(r["name"].split("/", 1)[0] for r in rows if "/" in r["name"]):
        mine = [r for r in rows if r["name"].startswith(f"{stack}/")]
        out.append(f"### {stack}\n")
        out.append("| " + " | ".join(name for name, _ in LOAD_COLUMNS) + " |")
        out.append("|" + "---|" * len(LOAD_COLUMNS))
        for r in mine:
            if "p99_ms" in r:
                out.append("| " + " | ".join(cell(r) for _, cell in LOAD_COLUMNS) + " |")
        for r in mine:
            if "succeeded" in r:
                out.append(
                    f"\n{r['name']}: {r['succeeded']} of the accepted audits SUCCEEDED, drained in {r['drained_s']} s."
                )
            if r["name"].endswith("audits_during_load_succeeded"):
                out.append(f"\nAudits running during the load: {r['value']} of {r['of']} SUCCEEDED.")
        out.append("")
    spine = [r for r in rows if "/" not in r["name"]]
    if spine:
        out.append("### in process (ASGI, no network)\n")
        out.append("| measure | value | unit |\n|---|---|---|")
        out += [f"| {r['name']} | {r['value']:.2f} | {r['unit']} |" for r in spine]
    return "\n".join(out)


if __name__ == "__main__":
    lines = Path(sys.argv[1]).read_text().splitlines()
    print(tables([json.loads(line) for line in lines if line.startswith("{")]))
