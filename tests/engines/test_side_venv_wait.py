"""`make test` builds the side venvs in the background; the tests that need one wait for that build."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from testkit.extras import BUILD_PID_ENV, built_python


def test_a_test_waits_for_the_background_build_then_gets_its_python(tmp_path: Path, monkeypatch) -> None:
    venv = tmp_path / "venv"
    build = subprocess.Popen(
        ["sh", "-c", f"sleep 1.5 && mkdir -p {venv}/bin && touch {venv}/bin/python {venv}/stamp"]
    )
    monkeypatch.setenv(BUILD_PID_ENV, str(build.pid))
    monkeypatch.setenv("CI", "false")
    started = time.monotonic()
    assert built_python(venv, venv / "stamp", "scripts/build.sh") == venv / "bin" / "python"
    assert time.monotonic() - started >= 1.0
    build.wait()


def test_a_venv_that_was_not_built_skips_or_fails_under_ci(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(BUILD_PID_ENV, raising=False)
    monkeypatch.setenv("CI", "false")
    with pytest.raises(pytest.skip.Exception, match=r"run scripts/build\.sh"):
        built_python(tmp_path / "missing", tmp_path / "missing" / "stamp", "scripts/build.sh")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="required under CI"):
        built_python(tmp_path / "missing", tmp_path / "missing" / "stamp", "scripts/build.sh")
