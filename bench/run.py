"""Benchmarks: `python bench/run.py SUITE [SUITE ...]` prints one JSON object per line.

Each line has `name`, `value`, `unit`, and for comparisons measured side by side in the same run
`baseline` and `ratio`. Suites live in bench/suites/<name>.py and expose `run() -> Iterator[dict]`.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from pathlib import Path

SUITES = ("stats", "engines", "iclinf", "api", "integrations")


def main(argv: list[str] | None = None) -> int:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("suites", nargs="*", choices=SUITES, default=None)
    args = parser.parse_args(argv)
    for suite in args.suites or SUITES:
        module = importlib.import_module(f"bench.suites.{suite}")
        for row in module.run():
            print(json.dumps({"suite": suite, **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
