"""The README stays true: its first commands are the Makefile's, every setting is listed, .ci/run calls
exactly the README's test command."""

from __future__ import annotations

import re
import time
from pathlib import Path

from app.config import Settings

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def test_readme_opens_with_the_two_commands_and_make_has_them() -> None:
    first_block = README.split("```")[1]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands == ["make serve", "make test"]
    targets = re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE)
    assert {"venv", "serve", "test"} <= set(targets)


def test_ci_runs_exactly_the_readme_test_command() -> None:
    lines = [line.strip() for line in (ROOT / ".ci/run").read_text().splitlines()]
    assert lines[1:] and "set -euo pipefail" in lines and lines[-1] == "make test"


def test_every_setting_is_in_the_settings_doc() -> None:
    settings_doc = (ROOT / "docs" / "settings.md").read_text()
    missing = [name for name in Settings.model_fields if f"`ICLAUDIT_{name.upper()}`" not in settings_doc]
    assert missing == []


def test_the_quickstart_example_exists_and_is_a_valid_request() -> None:
    from app.schemas.audits import request_adapter

    assert "iclaudit submit examples/bound-counts.json --watch" in README
    request_adapter().validate_json((ROOT / "examples/bound-counts.json").read_text())


def _quickstart_blocks() -> list[list[str]]:
    """The command lines of each ```bash block of the README's Quickstart section (comments dropped)."""
    section = README.split("## Quickstart", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    blocks = section.split("```bash\n")[1:]
    return [
        [line.split("  #")[0].strip() for line in block.split("```")[0].splitlines() if line.strip()]
        for block in blocks
    ]


def test_the_quickstart_verbatim_on_a_fresh_state_directory(tmp_path: Path) -> None:
    """Every line of the Quickstart, run as written (only <ID> filled in) in a shell whose PORT is the
    server's, not 8000, and with no ICLAUDIT_URL: the CLI and the curl lines find the server as `PORT=…
    make serve` put it. The server is `make serve`-like: auth off, a new state directory, no
    ICLAUDIT_DATA_DIR; every audit it submits ends SUCCEEDED (a `submit --watch` exits with its verdict's
    gate code)."""
    import os
    import subprocess

    import httpx

    from testkit.served import serve, stop

    state = tmp_path / "state"
    state.mkdir()
    env_extra = {"ICLAUDIT_CACHE_DIR": str(ROOT / "var" / "cache")}  # the converted model, as after one run
    saved = os.environ.pop("ICLAUDIT_DATA_DIR", None)  # a fresh machine has no offline benchmark copies
    try:
        proc, url, env = serve(state, auth=False, extra_env=env_extra)
    finally:
        if saved is not None:
            os.environ["ICLAUDIT_DATA_DIR"] = saved
    port = url.rsplit(":", 1)[1]
    assert port != "8000"
    work = tmp_path / "shell"  # the repository as the user's shell sees it, without writing into it
    work.mkdir()
    for name in ("examples", ".venv"):
        (work / name).symlink_to(ROOT / name)
    env = {k: v for k, v in env.items() if k not in ("ICLAUDIT_URL", "HOST")}
    env["PORT"] = port  # as after `PORT=<port> make serve` in the same shell
    cli, http = _quickstart_blocks()
    submitted: list[str] = []
    try:
        for line in cli + http:
            command = line.replace("<ID>", submitted[-1] if submitted else "")
            out = subprocess.run(
                command, shell=True, cwd=work, env=env, capture_output=True, text=True, timeout=900
            )
            # A `submit --watch` exits with the gate's code for its verdict: 1 for a violation or leak (the
            # bound-counts example claims nothing, so its leakage is a leak), 4 when inconclusive; the
            # line itself worked when the audit SUCCEEDED (checked below) and the code is one of these.
            allowed = (0, 1, 4) if " submit " in line and "--watch" in line else (0,)
            assert out.returncode in allowed, f"{line}\n{out.stdout}\n{out.stderr}"
            if " submit " in line or line.startswith("curl -s -X POST"):
                newest = httpx.get(f"{url}/v1/audits", params={"page_size": 1}).json()["audits"][0]["id"]
                assert newest not in submitted
                submitted.append(newest)
        assert (
            len(submitted) == sum(" submit " in x or x.startswith("curl -s -X POST") for x in cli + http) >= 3
        )
        with httpx.Client(base_url=url, timeout=30) as api:
            for audit_id in submitted:
                deadline = time.monotonic() + 120
                while (audit := api.get(f"/v1/audits/{audit_id}").json())["state"] in ("PENDING", "RUNNING"):
                    assert time.monotonic() < deadline, audit
                    time.sleep(0.2)
                assert audit["state"] == "SUCCEEDED", audit
        assert (work / "result.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    finally:
        stop(proc)
