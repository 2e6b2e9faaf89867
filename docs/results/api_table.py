"""Markdown tables for docs/results/api.md from the JSON lines of `python bench/run.py api` and
`python bench/run.py abuse`: `python docs/results/api_table.py docs/results/api-bench.jsonl
docs/results/api-abuse.jsonl` (any number of files; each kind of row gets its table)."""

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


def _met(ok: bool) -> str:
    return "**met**" if ok else "**not met**"


def vs_bare(rows: list[dict]) -> str:
    """The service against bare FastAPI, phase by phase (bench/suites/api_load.py `_side_by_side`)."""
    out = [
        "| load | audits polled | service req/s | bare req/s | ratio | service p99 ms | bare p99 ms | errors "
        "(service / bare) | CPU ms/req service | CPU ms/req bare | CPU ratio | /healthz max ms (service) "
        "| audits computing | load avg | target |",
        "|" + "---|" * 15,
    ]
    for r in rows:
        load, target = r["name"].split("/")[2:4]
        s, b = r["service"], r["baseline"]
        rate = int(load.split("_")[1])
        if load.startswith("open") and rate == 300:
            goal = _met(r["ratio"] >= 0.9 and s["p99_ms"] <= 100) + " (≥ 0.9×, p99 ≤ 100 ms)"
        elif load.startswith("open") and rate == 1000:
            goal = _met(r["ratio"] >= 0.8 and s["errors"] == 0) + " (≥ 0.8×, 0 errors)"
        else:
            goal = "–"
        kind = "open loop" if load.startswith("open") else "closed loop"
        unit = "req/s" if load.startswith("open") else "pollers"
        out.append(
            f"| {kind} {rate:,} {unit} | {target} | {s['served_rps']:.0f} | {b['served_rps']:.0f} | {r['ratio']:.2f} "
            f"| {s['p99_ms']:.0f} | {b['p99_ms']:.0f} | {s['errors']} / {b['errors']} | {s['cpu_ms_per_request']:.3f} "
            f"| {b['cpu_ms_per_request']:.3f} | {r['cpu_ratio']:.2f} | {s['healthz_max_ms']:.0f} "
            f"| {r['audits_running']} | {r['machine_load_1m']} | {goal} |"
        )
    return "\n".join(out)


def abuse(rows: list[dict]) -> str:
    """One row per attack of bench/suites/abuse.py, against the issue's limits: the reply and template floods
    (R1, R2) are held to +100 MB in the API process and in each audit process, the plan flood (R3) to +100 MB
    in the API process with at most ICLAUDIT_PLAN_WORKERS (2) plan processes started, and database growth
    ≤ 32 MiB (ICLAUDIT_TARGET_MAX_STORED_BYTES); the others to +200 MB of the whole tree. A row of a run before
    the per-process figures shows the whole tree's growth only."""
    out = [
        "| attack | well-behaved p99 ms | its errors | /healthz p99 / max ms | RSS growth MB: API / largest child "
        "/ new processes | DB growth MB | its audit: waited / one audit's length s | load avg | met (p99 ≤ 250, "
        "0 errors, /healthz ≤ 250, RSS (see above), DB ≤ 32 MiB, wait ≤ one audit) |",
        "|" + "---|" * 9,
    ]
    for r in rows:
        name = r["name"].split("/", 1)[1].replace("_", " ")
        if "audit_delivery_s" in r:
            audit = f"webhook delivered {r['audit_delivery_s']:.1f} s after the audit ended"
            waited_ok = True
        elif "audit_plan_s" in r:
            audit = f"its plan answered in {r['audit_plan_s']:.1f} s (alone: {r['audit_plan_alone_s']:.1f} s)"
            waited_ok = r["audit_plan_s"] <= 2 * r["audit_plan_alone_s"] + 5
        else:
            audit = f"{r['audit_wait_s']:.2f} / {r['audit_run_s']:.2f}"
            waited_ok = r["audit_wait_s"] <= r["audit_run_s"]
        db = r.get("db_growth_mb")
        if "rss_growth_api_mb" in r:
            memory = (
                f"{r['rss_growth_api_mb']:.0f} / {r['rss_growth_child_mb']:.0f} / "
                f"{r['rss_new_processes']} ({r['rss_new_processes_mb']:.0f} MB)"
            )
            if name == "R3":
                memory_ok = r["rss_growth_api_mb"] <= 100 and r["rss_new_processes"] <= 2
            elif name.startswith("R"):
                memory_ok = max(r["rss_growth_api_mb"], r["rss_growth_child_mb"]) <= 100
            else:
                memory_ok = r["rss_growth_mb"] <= 200
        else:
            memory = f"{r['rss_growth_mb']:.0f} (the whole tree)"
            memory_ok = r["rss_growth_mb"] <= (100 if name.startswith("R") else 200)
        ok = (
            r["good_p99_ms"] <= 250
            and r["good_errors"] == 0
            and r["healthz_max_ms"] <= 250
            and memory_ok
            and (db is None or db <= 32)
            and waited_ok
        )
        out.append(
            f"| {name} | {r['good_p99_ms']:.0f} | {r['good_errors']} | {r['healthz_p99_ms']:.0f} / "
            f"{r['healthz_max_ms']:.0f} | {memory} | {'–' if db is None else f'{db:.1f}'} | {audit} "
            f"| {r['machine_load_1m']} | {_met(ok)} |"
        )
    return "\n".join(out)


def tables(rows: list[dict]) -> str:
    out = []
    side = [r for r in rows if "/vs_bare/" in r["name"] and "service" in r]
    if side:
        for stack in dict.fromkeys(r["name"].split("/", 1)[0] for r in side):
            out += [
                f"### {stack}: the service against bare FastAPI\n",
                vs_bare([r for r in side if r["name"].startswith(f"{stack}/")]),
                "",
            ]
        for r in rows:
            if r["name"].endswith("vs_bare/audits_computing_succeeded"):
                out.append(
                    f"{r['name'].split('/')[0]}: the audits computing during the phases: {r['value']} of {r['of']} "
                    f"SUCCEEDED; running at the once-a-second checks: {r['running_at_checks']}.\n"
                )
    attacks = [r for r in rows if r["name"].startswith("abuse/")]
    if attacks:
        out += ["### abuse: each attack beside a well-behaved tenant\n", abuse(attacks), ""]
    rows = [r for r in rows if "/vs_bare/" not in r["name"] and not r["name"].startswith("abuse/")]
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
    lines = [line for name in sys.argv[1:] for line in Path(name).read_text().splitlines()]
    print(tables([json.loads(line) for line in lines if line.startswith("{")]))
