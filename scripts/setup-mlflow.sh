#!/usr/bin/env bash
# Build .venv-mlflow: a separate venv with the real MLflow, in which the MLflow sink's tests run
# `mlflow server` (SQLite backend, --serve-artifacts) and read the runs back with MLflow's own client.
#
# Why separate: the service speaks MLflow's REST API with httpx and does not depend on mlflow; mlflow pins
# its own Flask, pandas, pyarrow, SQLAlchemy and alembic ranges, which must not move the project's venv.
# Cached outside the clone like scripts/setup-extras.sh: the venv lives in
#   ${ICLAUDIT_EXTRAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/iclaudit}/venv-mlflow-<key>
# where <key> hashes this script's code (the pin is in it) and the Python that builds it; the clone's
# `.venv-mlflow` is a symlink to it. Builders of one key take a lock (flock); a build that died half-way
# has no stamp and is rebuilt.
#
# Usage: scripts/setup-mlflow.sh             (the cached venv; .venv-mlflow links to it)
#        MLFLOW_VENV=/path scripts/setup-mlflow.sh   (build at exactly that path, no cache, no link)
set -euo pipefail

MLFLOW=3.17.2

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/setup-mlflow.sh"
PYTHON="${PYTHON:-python3}"
STAMP_NAME=".iclaudit-mlflow-v1"  # tests/integrations/mlflow_support.py looks for it

build() {  # build a venv at $1 (its final path)
  local venv="$1" start
  start=$(date +%s)
  echo "setup-mlflow: building $venv"
  "$PYTHON" -m venv "$venv"
  bash "$ROOT/scripts/uv-pip.sh" "$venv" install --quiet "mlflow==$MLFLOW"
  "$venv/bin/python" -c "import mlflow, mlflow.server; print('mlflow', mlflow.__version__)"
  touch "$venv/$STAMP_NAME"
  echo "setup-mlflow: built in $(( $(date +%s) - start )) s ($(du -sm "$venv" | cut -f1) MB)"
}

if [[ -n "${MLFLOW_VENV:-}" ]]; then
  [[ -f "$MLFLOW_VENV/$STAMP_NAME" ]] || build "$MLFLOW_VENV"
  exit 0
fi

CACHE="${ICLAUDIT_EXTRAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/iclaudit}"
KEY="$({ grep -vE '^[[:space:]]*(#|$)' "$SELF"; "$PYTHON" -c 'import os, platform, sys; print(sys.version, platform.machine(), os.path.realpath(sys.executable))'; } | sha256sum | cut -c1-16)"
TARGET="$CACHE/venv-mlflow-$KEY"
LINK="$ROOT/.venv-mlflow"
mkdir -p "$CACHE"

if [[ ! -f "$TARGET/$STAMP_NAME" ]]; then
  exec 9>"$TARGET.lock"
  flock 9
  if [[ ! -f "$TARGET/$STAMP_NAME" ]]; then  # nobody built it while we waited
    rm -rf "$TARGET"  # a build that died half-way
    build "$TARGET"
  fi
  flock -u 9
fi

if [[ "$(readlink "$LINK" 2>/dev/null)" != "$TARGET" ]]; then
  [[ -e "$LINK" && ! -L "$LINK" ]] && rm -rf "$LINK"
  ln -sfn "$TARGET" "$LINK"
fi
echo "setup-mlflow: $LINK -> $TARGET is ready"
