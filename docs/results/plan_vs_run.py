"""Plan against run (issue 22 §1) → docs/results/plan.md (between its begin/end markers).

    HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets .venv/bin/python docs/results/plan_vs_run.py

Six requests — two oracle, two SmolLM2-135M (transformers on the CPU), one endpoint (the randomized
response target of testkit/target_server.py, served by uvicorn on 127.0.0.1), one SmolLM2 `iclinf` —
each planned with `app.audit.plan.plan_request`, then run in this process with `app.audit.standalone` (the
library road: no queue), measuring the run's wall time, its `distinct_prompts` or `endpoint_calls` (iclinf:
the prompts the engine was sent, counted at the engine), the calls the target counted and the engine's
prompt-token counter. Seconds per call come, as in the service (app/jobs/plans.py `measured_rates`), from
three earlier calibration runs of the same kind and model or endpoint (other seeds, fewer trials or
queries; the first SmolLM2 run includes loading the model): the median of (wall time / calls) where the
runs are of one size, and for iclinf, whose runs are of 16, 4 and 8 queries (its prompts share their
contexts' cached prefixes, so a run's time is not proportional to its calls), the service's fit of a
fixed part and seconds per call (app.audit.plan.Rates.fitted).
`--quick` prints without writing; `--only KIND` (oracle, smollm2-135m-instruct, endpoint, iclinf) calibrates
and runs only those requests and replaces their rows in the table, keeping the others' from their run.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import statistics
import time
from pathlib import Path

from app.audit.kinds.registry import kind_module
from app.audit.plan import Rates, model_tokens, plan_request
from app.audit.runtime import no_progress
from app.audit.standalone import local_context
from app.engines.registry import load_llm

ROOT = Path(__file__).resolve().parents[2]

EXAMPLES = ROOT / "examples"
DOC = ROOT / "docs" / "results" / "plan.md"
SMOLLM2 = "smollm2-135m-instruct"


def example(name: str, **changes: object) -> dict:
    return json.loads((EXAMPLES / name).read_text()) | changes


def endpoint_request(url: str, trials: int, seed: int) -> dict:
    body = example("mia-http-endpoint.json", trials=trials, seed=seed)
    body["mechanism"]["endpoint"].update(url=url, retries=0, timeout_s=10)
    return body


class Counting:
    """An engine provider whose engines count the prompts each call sends (whatever the batching)."""

    def __init__(self, engines) -> None:
        self.engines, self.prompts = engines, 0

    def llm(self, name: str):
        provider, engine = self, self.engines.llm(name)

        class Counted:
            def __getattr__(self, attr: str):
                return getattr(engine, attr)

            def label_logprobs(self, prompts, labels):
                provider.prompts += len(prompts)
                return engine.label_logprobs(prompts, labels)

            def next_token_logprobs(self, prompts, top_k="all"):
                provider.prompts += len(prompts)
                return engine.next_token_logprobs(prompts, top_k)

        return Counted()


def timed(ctx, body: dict) -> tuple[dict, float]:
    module = kind_module(body["kind"])
    start = time.perf_counter()
    result = module.run(module.Request.model_validate(body), ctx).stored()
    return result, time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true", help="print only, do not write the doc")
    parser.add_argument("--only", choices=["oracle", SMOLLM2, "endpoint", "iclinf"], help="these rows only")
    args = parser.parse_args()
    from testkit.target_server import Target, serve

    ctx = local_context(progress=no_progress)
    target = Target(epsilon=1.0, seed=3)
    rows = []
    with serve(target.app()) as base:
        url = base + "/"
        calibration: dict[str, list[float]] = {SMOLLM2: [], "endpoint": []}
        counting = Counting(ctx.engines)
        counted = dataclasses.replace(ctx, engines=counting)
        wanted = lambda which: args.only in (None, which)  # noqa: E731
        iclinf_points: list[tuple[int, float]] = []
        for seed, queries in ((100, 16), (101, 4), (102, 8)):
            if wanted("iclinf"):  # of three sizes: its prompts share their contexts' cached prefixes
                before = counting.prompts
                result, seconds = timed(
                    counted, example("iclinf-dbpedia-k4.json", seed=seed, queries=queries)
                )
                iclinf_points.append((counting.prompts - before, seconds))
            if wanted(SMOLLM2):
                result, seconds = timed(ctx, example("mia-smollm2-eps8.json", seed=seed, trials=2000))
                calibration[SMOLLM2].append(seconds / result["distinct_prompts"])
            if wanted("endpoint"):
                result, seconds = timed(ctx, endpoint_request(url, 100, seed))
                calibration["endpoint"].append(seconds / result["endpoint_calls"])
        median = {k: statistics.median(v) if v else None for k, v in calibration.items()}
        rates = {
            SMOLLM2: Rates(model_seconds_per_call=median[SMOLLM2], basis="3 runs"),
            "endpoint": Rates(endpoint_seconds_per_call=median["endpoint"], basis="3 runs"),
            "oracle": Rates(),
            "iclinf": Rates.fitted(iclinf_points, [], basis=f"{len(iclinf_points)} runs"),
        }
        requests = [
            ("oracle, private voting ε = 1, 400,000 trials", "oracle", example("mia-oracle-eps1.json")),
            (
                "oracle, planted bug σ/T, dbpedia14",
                "oracle",
                example("mia-oracle-bug-noise-divided-by-t.json", trials=200_000),
            ),
            ("SmolLM2, private voting ε = 8, T = 4", SMOLLM2, example("mia-smollm2-eps8.json")),
            (
                "SmolLM2, private voting ε = 8, T = 8, 2 shots",
                SMOLLM2,
                example(
                    "mia-smollm2-eps8.json",
                    seed=7,
                    mechanism={"name": "private_voting", "partitions": 8, "shots_per_partition": 2},
                ),
            ),
            (
                "endpoint (randomized response ε = 1), 1,500 calls per side",
                "endpoint",
                endpoint_request(url, 1500, 9),
            ),
            (
                "SmolLM2, iclinf dbpedia14, k = 4, 40 queries",
                "iclinf",
                example("iclinf-dbpedia-k4.json", queries=40),
            ),
        ]
        engine = load_llm(SMOLLM2)
        for label, which, body in [r for r in requests if wanted(r[1])]:
            request = kind_module(body["kind"]).Request.model_validate(body)
            model = which in (SMOLLM2, "iclinf")
            tokens = model_tokens(request.model) if model else None
            start = time.perf_counter()
            plan = plan_request(request, datasets=ctx.datasets, rates=rates[which], tokens=tokens)
            plan_seconds = time.perf_counter() - start
            tokens_before, answered_before = engine.counters.prompt_tokens, target.answered
            prompts_before = counting.prompts
            result, seconds = timed(counted, body)
            if which == "endpoint":
                measured_calls = result["endpoint_calls"]
            elif which == "iclinf":
                measured_calls = counting.prompts - prompts_before
            else:
                measured_calls = result["distinct_prompts"]
            rows.append(
                {
                    "request": label,
                    "predicted_calls": plan["calls"]["endpoint"] or plan["calls"]["model"],
                    "measured_calls": measured_calls,
                    "target_counted": target.answered - answered_before if which == "endpoint" else None,
                    "predicted_tokens": plan["tokens"]["prompt"],
                    "measured_tokens": engine.counters.prompt_tokens - tokens_before if model else None,
                    "predicted_seconds": plan["time"]["expected_seconds"],
                    "measured_seconds": seconds,
                    "plan_seconds": plan_seconds,
                    "epsilon_detectable": plan["power"]["epsilon_detectable"],
                    "trials_needed": plan["power"]["trials_needed"],
                    "verdict": result.get("verdict"),
                    "run_epsilon_detectable": result.get("epsilon_detectable"),
                }
            )
            print(json.dumps(rows[-1]), flush=True)
    table = render(rows)
    print(table)
    if args.only:  # the other rows as the doc has them, these replaced (or added at the end)
        kept = re.search(r"<!-- begin plan_vs_run -->\n(.*?)<!-- end plan_vs_run -->", DOC.read_text(), re.S)
        old = kept.group(1).splitlines()[2:] if kept else []
        new = table.splitlines()[2:]
        labels = {line.split(" | ")[0] for line in new}
        table = (
            "\n".join(table.splitlines()[:2] + [r for r in old if r.split(" | ")[0] not in labels] + new)
            + "\n"
        )
    if not args.quick:
        text = DOC.read_text()
        text = re.sub(
            r"(<!-- begin plan_vs_run -->\n).*?(<!-- end plan_vs_run -->)",
            lambda m: m.group(1) + table + m.group(2),
            text,
            flags=re.S,
        )
        DOC.write_text(text)
    return 0


def fmt(x: object, digits: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}g}"
    return f"{x:,}" if isinstance(x, int) else str(x)


def render(rows: list[dict]) -> str:
    head = (
        "| request | calls: planned / run (at the target) | prompt tokens: planned / engine counted | "
        "seconds: planned / run (ratio) | planning took | ε detectable planned (η = 1) / run | trials needed | verdict |\n"
        "|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        at = f" ({fmt(r['target_counted'])})" if r["target_counted"] is not None else ""
        ratio = (
            f" ({r['predicted_seconds'] / r['measured_seconds']:.2f}×)"
            if r["predicted_seconds"] is not None
            else ""
        )
        lines.append(
            f"| {r['request']} | {fmt(r['predicted_calls'])} / {fmt(r['measured_calls'])}{at} | "
            f"{fmt(r['predicted_tokens'])} / {fmt(r['measured_tokens'])} | "
            f"{fmt(r['predicted_seconds'])} / {fmt(r['measured_seconds'])}{ratio} | {fmt(r['plan_seconds'], 2)} s | "
            f"{fmt(r['epsilon_detectable'])} / {fmt(r['run_epsilon_detectable'])} | {fmt(r['trials_needed'])} | "
            f"{fmt(r['verdict'])} |"
        )
    return head + "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
