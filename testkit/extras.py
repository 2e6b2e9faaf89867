"""Paths and environment for processes in the extras venv (imported by conftest and test_extras)."""

from __future__ import annotations

import os
from pathlib import Path

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
