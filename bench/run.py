"""Benchmarks: `python bench/run.py SUITE [SUITE ...]` prints one JSON object per line.

Each line has `name`, `value`, `unit`, and for comparisons measured side by side in the same run
`baseline` and `ratio`. Suites live in bench/suites/<name>.py and expose `run() -> Iterator[dict]`.

`--quick`: the same measures, shorter (the `api` suite's load phases last 5 s instead of 20:
ICLAUDIT_BENCH_LOAD_SECONDS, which also sets it directly), for a check before the full run.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os

SUITES = ("stats", "engines", "iclinf", "api", "integrations", "abuse", "endpoint", "memory")
# run only when named: `api_load` is the load part of `api` alone (bench/suites/api_load.py; e.g.
# ICLAUDIT_BENCH_STACKS=postgres_celery python bench/run.py api_load)
ONLY_NAMED = ("api_load",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("suites", nargs="*", choices=SUITES + ONLY_NAMED, default=None)
    parser.add_argument("--quick", action="store_true", help="shorter load phases (5 s) for a check")
    args = parser.parse_args(argv)
    if args.quick:
        os.environ.setdefault("ICLAUDIT_BENCH_LOAD_SECONDS", "5")
    for suite in args.suites or SUITES:
        module = importlib.import_module(f"bench.suites.{suite}")
        for row in module.run():
            print(json.dumps({"suite": suite, **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
