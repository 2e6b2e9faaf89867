#!/usr/bin/env bash
# `pip install` / `pip uninstall` into a venv, done by uv: the one installer of the project's venvs (.venv
# by the Makefile, the side venvs by setup-extras.sh and setup-mlflow.sh).
#
# Why uv: it installs the project's ~150 wheels in parallel and links them from its cache. Measured here
# (2 cores, docs/ci.md): `make venv` in a second clone 115 s with pip, 38 s with uv, bytecode included.
#
# uv reads none of pip's configuration, so what this machine's pip is told (pip.conf files and PIP_*
# variables: an index, extra indexes, a folder of wheels, constraints, a CA bundle) is handed to uv under
# its own names, with pip's rule for several indexes (the best version among all of them). Bytecode is
# compiled at install, as pip does: test subprocesses may run under PYTHONDONTWRITEBYTECODE.
#
# Usage: scripts/uv-pip.sh VENV install|uninstall ARGS...   (VENV made by `python -m venv`, so it has pip)
set -euo pipefail

UV_VERSION=0.13.9

venv="$1"
shift
py="$venv/bin/python"

"$py" -c 'import uv' 2>/dev/null \
  || "$py" -m pip install -qq --disable-pip-version-check "uv==$UV_VERSION"

# pip's effective settings for `pip install`: an environment variable over the [install] section over [global].
eval "$("$py" -m pip config list 2>/dev/null | "$py" -c '
import ast, shlex, sys
settings = {}
for line in sys.stdin:
    key, _, value = line.strip().partition("=")
    section, _, name = key.rpartition(".")
    rank = {"global": 0, "install": 1, ":env:": 2}.get(section)
    if rank is not None and rank >= settings.get(name, (-1, ""))[0]:
        settings[name] = (rank, ast.literal_eval(value))
uv_names = {  # pip name: (uv variable, its separator)
    "index-url": ("UV_INDEX_URL", " "),
    "extra-index-url": ("UV_EXTRA_INDEX_URL", " "),
    "find-links": ("UV_FIND_LINKS", ","),
    "constraint": ("UV_CONSTRAINT", " "),
    "cert": ("SSL_CERT_FILE", " "),
}
for name, (variable, separator) in uv_names.items():
    if name in settings:
        print(f"export {variable}={shlex.quote(separator.join(settings[name][1].split()))}")
')"
export UV_INDEX_STRATEGY=unsafe-best-match UV_COMPILE_BYTECODE=1

command="$1"
shift
exec "$py" -m uv pip "$command" --python "$py" "$@"
