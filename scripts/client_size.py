"""What `pip install` of the client costs: the light distribution (clients/python) installed into an empty
venv, against the full install (the server's distribution, `iclaudit` with its dependencies) — issue 21.

    .venv/bin/python scripts/client_size.py            # print the table
    .venv/bin/python scripts/client_size.py --write    # and write docs/results/client.md

Light: a fresh `python -m venv`, then `pip install ./clients/python` from the package index; measured are
the files on disk of every distribution pip installed (each one's RECORD), pip itself (the empty venv's
own) left out, and the wall time of that `pip install`. Full: the dependency closure of the `iclaudit`
distribution without extras, walked through the installed metadata of the project's venv (`make venv`:
the CPU build of torch) and measured the same way; nothing is installed for it. Also the time to import
`iclaudit.client` in each (the median of 5 fresh interpreters).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "results" / "client.md"
VENV_TOOLS = {"pip", "setuptools", "wheel"}  # what `python -m venv` puts in an empty venv

# Run by the venv's own interpreter: sizes of the distributions in the closure of `roots` (every
# installed distribution when roots is empty: the light venv has no `packaging` to read requirements).
_SIZES = r"""
import importlib.metadata as md, json, os, re, sys

def canon(name):
    return re.sub(r"[-_.]+", "-", name).lower()

roots = json.loads(sys.argv[1])
dists = {canon(d.metadata["Name"]): d for d in md.distributions()}
if roots:
    from packaging.requirements import Requirement

    todo, seen = [canon(r) for r in roots], set()
    while todo:
        name = todo.pop()
        if name in seen or name not in dists:
            continue
        seen.add(name)
        for spec in dists[name].requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(canon(req.name))
else:
    seen = set(dists)
out = {}
for name in sorted(seen):
    d = dists[name]
    size = 0
    for f in d.files or []:
        try:
            size += os.path.getsize(d.locate_file(f))
        except OSError:
            pass
    out[name] = [d.version, size]
print(json.dumps(out))
"""


def sizes(python: Path, roots: list[str]) -> dict[str, tuple[str, int]]:
    """{distribution: (version, bytes on disk)} in `python`'s environment."""
    out = subprocess.run(  # -I and away from the checkout: its iclaudit.egg-info is no installed distribution
        [str(python), "-I", "-c", _SIZES, json.dumps(roots)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return {name: (version, size) for name, (version, size) in json.loads(out.stdout).items()}


def import_seconds(python: Path, runs: int = 5) -> float:
    """Median wall time of `import iclaudit.client` in a fresh interpreter."""
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        subprocess.run([str(python), "-c", "import iclaudit.client"], check=True, cwd=tempfile.gettempdir())
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def install_light(venv: Path) -> dict[str, object]:
    """An empty venv at `venv`, then `pip install ./clients/python`; what it holds afterwards."""
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    start = time.perf_counter()
    subprocess.run(
        [
            str(python),
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            str(ROOT / "clients" / "python"),
        ],
        check=True,
        cwd=tempfile.gettempdir(),
    )
    seconds = time.perf_counter() - start
    dists = {n: v for n, v in sizes(python, []).items() if n not in VENV_TOOLS}
    return {"python": python, "dists": dists, "install_seconds": seconds}


def full_install(python: Path = ROOT / ".venv" / "bin" / "python") -> dict[str, tuple[str, int]]:
    """The server's distribution and its dependency closure (no extras) as installed in the project venv."""
    return sizes(python, ["iclaudit"])


def _mb(n: int) -> str:
    return f"{n / 1e6:,.1f} MB"


def report(
    light: dict[str, object], full: dict[str, tuple[str, int]], light_import: float, full_import: float
) -> str:
    dists: dict[str, tuple[str, int]] = light["dists"]  # type: ignore[assignment]
    light_bytes = sum(size for _, size in dists.values())
    full_bytes = sum(size for _, size in full.values())
    biggest = sorted(full.items(), key=lambda kv: -kv[1][1])[:8]
    rows = "\n".join(
        f"| {name} | {version} | {_mb(size)} |" for name, (version, size) in sorted(dists.items())
    )
    big = "\n".join(f"| {name} | {version} | {_mb(size)} |" for name, (version, size) in biggest)
    return f"""# The light client: install size (issue 21)

Produced by `.venv/bin/python scripts/client_size.py --write` on {platform.machine()}, Python
{platform.python_version()} (method in the script's docstring). Light: `pip install ./clients/python` into an
empty venv (the `iclaudit-client` distribution: the same `iclaudit.client` module and `iclaudit` client commands,
with httpx, pydantic, typer and rich only).
Full: the `iclaudit` distribution (the server) and its dependency closure without extras, as `make venv`
installs it (the CPU build of torch; a CUDA torch is several GB more).

| install | distributions | on disk | `import iclaudit.client` |
|---|---|---|---|
| light (`pip install ./clients/python`) | {len(dists)} | {_mb(light_bytes)} | {light_import:.2f} s |
| full (`pip install .`, the server) | {len(full)} | {_mb(full_bytes)} | {full_import:.2f} s |

The light install is {light_bytes / full_bytes:.2%} of the full one ({full_bytes / light_bytes:,.0f}x smaller);
its `pip install` took {light["install_seconds"]:.0f} s here (downloads included, a {os.cpu_count()}-core machine shared with
other work: load average {os.getloadavg()[0]:.1f} when this was written, so the times are indicative).

What the light install holds:

| distribution | version | on disk |
|---|---|---|
{rows}

The full install's largest distributions:

| distribution | version | on disk |
|---|---|---|
{big}

Checked by `tests/cli/test_client.py::test_light_client_installs_alone_and_runs_an_audit`: the same
install into an empty venv, no server distribution in it, then a `bound` audit submitted and waited for
against a live server.
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {DOC.relative_to(ROOT)}")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="iclaudit-client-") as tmp:
        light = install_light(Path(tmp) / "venv")
        light_import = import_seconds(light["python"])  # type: ignore[arg-type]
        full = full_install()
        full_import = import_seconds(ROOT / ".venv" / "bin" / "python")
        text = report(light, full, light_import, full_import)
    print(text)
    if args.write:
        DOC.write_text(text)
    return 0


if __name__ == "__main__":
    os.environ.setdefault("PIP_DISABLE_PIP_VERSION_CHECK", "1")
    sys.exit(main())
