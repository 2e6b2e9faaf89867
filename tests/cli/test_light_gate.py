"""The CI gate with only the light client installed: docs/ci.md's GitHub Actions workflow and GitLab job,
run as written (their YAML read from the document) in a fresh venv holding nothing but `iclaudit-client`,
installed by the workflow's own `pip install "iclaudit-client @ git+…#subdirectory=clients/python"` from a
git repository of this checkout's client, against a live `iclaudit serve` (testkit/served.py) with auth on.
Also: the light `iclaudit` has the client commands with the gate's exit codes; `--help` and `status`
start fast in both distributions; a base URL ending in `/v1` works."""

from __future__ import annotations

import json
import os
import re
import resource
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
import yaml
from junitparser import JUnitXml

from testkit.served import Served, make_key, serve, stop

ROOT = Path(__file__).resolve().parents[2]
CI_DOC = ROOT / "docs" / "ci.md"
FULL_ICLAUDIT = Path(sys.executable).parent / "iclaudit"
LONG_TRIALS = 16_000_000  # an oracle audit still running when it is cancelled
SERVER_MODULES = ("app", "fastapi", "sqlalchemy", "celery", "uvicorn", "torch", "numpy", "scipy")


def ci_yaml(first_line: str) -> dict:
    """The YAML block of docs/ci.md whose first line is `first_line` (the file it goes in)."""
    for block in re.findall(r"```yaml\n(.*?)```", CI_DOC.read_text(), flags=re.S):
        if block.splitlines()[0].strip() == first_line:
            return yaml.safe_load(block)
    raise AssertionError(f"docs/ci.md has no yaml block starting {first_line!r}")


def _git(repo: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=test", "-c", "user.email=test@example.org", *args],
        cwd=repo,
        check=True,
        capture_output=True,
    )


@dataclass
class Light:
    """A fresh venv (only what `python -m venv` puts there, then the client) and where pip finds the client."""

    venv: Path
    git_url: str

    @property
    def bin(self) -> Path:
        return self.venv / "bin"

    def env(self, **extra: str) -> dict[str, str]:
        """The job's environment: the venv first on PATH (as setup-python's), no server settings."""
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ICLAUDIT_", "VIRTUAL_ENV"))}
        return {
            **env,
            "PATH": f"{self.bin}:{env.get('PATH', '')}",
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            **extra,
        }


@pytest.fixture(scope="module")
def light(tmp_path_factory: pytest.TempPathFactory) -> Light:
    """A git repository holding this checkout's client as the repository does (clients/python, its
    `iclaudit` a link to the top-level package), and an empty venv."""
    base = tmp_path_factory.mktemp("light")
    repo = base / "iclaudit-repo"
    shutil.copytree(ROOT / "iclaudit", repo / "iclaudit", ignore=shutil.ignore_patterns("__pycache__"))
    (repo / "clients" / "python").mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / "clients" / "python" / name, repo / "clients" / "python" / name)
    (repo / "clients" / "python" / "iclaudit").symlink_to("../../iclaudit")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "the client")
    subprocess.run([sys.executable, "-m", "venv", str(base / "venv")], check=True)
    # file://localhost/…: pip's requirement parser wants a host in a git+ URL (git+file:///… is refused)
    return Light(base / "venv", f"file://localhost{repo}")


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, data_dir: Path) -> Iterator[Served]:
    state = tmp_path_factory.mktemp("shared-service")
    extra = {"ICLAUDIT_DATA_DIR": str(data_dir), "ICLAUDIT_MAX_TRIALS": str(LONG_TRIALS)}
    proc, url, _ = serve(state, auth=True, extra_env=extra, ready_within=300)  # a busy machine
    try:
        yield Served(url, make_key(state, "ci"), make_key(state, "other"), state / "serve.log")
    finally:
        stop(proc)


def workspace(tmp_path: Path) -> Path:
    """The audited project's checkout: its ci/audit-endpoint.json is the consistent oracle audit (exit 0)."""
    (tmp_path / "ci").mkdir()
    shutil.copy(ROOT / "examples" / "mia-oracle-eps1.json", tmp_path / "ci" / "audit-endpoint.json")
    return tmp_path


def run_step(
    script: str, env: dict[str, str], cwd: Path, timeout: float = 900
) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-e", "-c", script], env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout
    )


def only_the_client(light: Light, cwd: Path) -> None:
    """Nothing of the server is importable in the venv: the gate ran on the client alone."""
    probe = "import importlib.util as u, json; print(json.dumps([m for m in %r if u.find_spec(m)]))"
    out = subprocess.run(
        [str(light.bin / "python"), "-c", probe % (SERVER_MODULES,)],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(out.stdout) == []


def audit_of(served: Served, label: str) -> dict:
    page = httpx.get(
        f"{served.url}/v1/audits",
        params={"label": label, "view": "full"},
        headers={"Authorization": f"Bearer {served.alice}"},
        timeout=30,
    ).json()
    (audit,) = page["audits"]
    return audit


def check_junit(path: Path, audit: dict) -> None:
    suite = next(iter(JUnitXml.fromfile(str(path))))
    props = {p.name: p.value for p in suite.properties()}
    assert props["audit_id"] == audit["id"] and props["verdict"] == "consistent" == audit["result"]["verdict"]
    assert props["headline"] == audit["result"]["headline"]
    assert {case.name for case in suite} == {"black_box", "white_box", "calibration"}


def test_the_github_workflow_gates_with_only_the_client(light: Light, served: Served, tmp_path: Path) -> None:
    job = ci_yaml("# .github/workflows/privacy-audit.yml")["jobs"]["audit"]
    expressions = {
        "vars.ICLAUDIT_URL": f"{served.url}/v1",  # as people paste it: the /v1 root works too
        "secrets.ICLAUDIT_API_KEY": served.alice,
        "vars.ICLAUDIT_GIT_URL": light.git_url,
        "github.sha": "5eed0f1a",
        "github.run_id": "4242",
        "github.run_attempt": "1",
    }

    def expand(text: str) -> str:
        return re.sub(r"\$\{\{\s*([\w.]+)\s*\}\}", lambda m: expressions[m.group(1)], text)

    env = light.env(**{name: expand(str(value)) for name, value in job["env"].items()})
    cwd = workspace(tmp_path)
    ran = []
    for step in job["steps"]:
        if "run" not in step:  # checkout, setup-python (this venv) and the JUnit action
            continue
        out = run_step(expand(step["run"]), env, cwd)
        assert out.returncode == 0, (step["name"], out.stdout[-2000:], out.stderr[-3000:])
        ran.append(out)
    assert len(ran) == 2  # the client's install, then the gate
    only_the_client(light, cwd)
    gate = ran[-1]
    audit = audit_of(served, "git_sha=5eed0f1a")
    assert gate.stdout.strip().splitlines()[-1] == audit["result"]["headline"]  # the headline, last
    assert "SUCCEEDED" in gate.stderr  # a progress line per stage
    check_junit(cwd / "iclaudit-junit.xml", audit)
    # the idempotency key of a retried step: the same audit, not a second one
    again = run_step(expand(job["steps"][3]["run"]), env, cwd)
    assert again.returncode == 0 and f"audit {audit['id']}" in again.stderr


def test_the_gitlab_job_gates_with_only_the_client(light: Light, served: Served, tmp_path: Path) -> None:
    job = ci_yaml("# .gitlab-ci.yml")["privacy-audit"]
    assert job["artifacts"]["reports"]["junit"] == "iclaudit-junit.xml"
    env = light.env(
        ICLAUDIT_URL=served.url,
        ICLAUDIT_API_KEY=served.alice,
        ICLAUDIT_GIT_URL=light.git_url,
        CI_COMMIT_SHA="c0ffee",
        CI_PIPELINE_ID="7",
        CI_JOB_ID="8",
    )
    cwd = workspace(tmp_path)
    for line in job["script"]:
        out = run_step(line, env, cwd)
        assert out.returncode == 0, (line, out.stdout[-2000:], out.stderr[-3000:])
    only_the_client(light, cwd)
    audit = audit_of(served, "git_sha=c0ffee")
    assert out.stdout.strip().splitlines()[-1] == audit["result"]["headline"]
    check_junit(cwd / "iclaudit-junit.xml", audit)


def _light_cli(light: Light, served: Served, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = light.env(ICLAUDIT_URL=served.url, ICLAUDIT_API_KEY=served.alice, COLUMNS="200")
    if not (light.bin / "iclaudit").exists():  # this test alone: install the client as the workflow does
        pip = [
            str(light.bin / "pip"),
            "install",
            "--quiet",
            f"iclaudit-client @ git+{light.git_url}#subdirectory=clients/python",
        ]
        subprocess.run(pip, env=env, check=True, capture_output=True, timeout=900)
    return subprocess.run(
        [str(light.bin / "iclaudit"), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=600
    )


def _headline(stdout: str) -> str:
    """The verdict's headline: the last line before an inconclusive result's `next: …` lines."""
    lines = stdout.strip().splitlines()
    while lines and lines[-1].startswith("next: "):
        lines.pop()
    return lines[-1]


def test_the_light_commands_and_their_exit_codes(light: Light, served: Served, tmp_path: Path) -> None:
    """submit (--set, --wait, the gate's codes), status, result, list, cancel, plan and datasets upload,
    from the light client alone."""
    cwd = workspace(tmp_path)
    request = "ci/audit-endpoint.json"
    weak = _light_cli(
        light, served, cwd, "submit", request, "--set", "trials=25", "--set", "epsilon=2", "--wait"
    )
    assert weak.returncode == 4, weak.stderr  # inconclusive: 25 trials cannot resolve the claim
    audit_id = weak.stderr.split("submitted mia audit ")[1].split()[0]
    assert _headline(weak.stdout).startswith("Inconclusive:")
    assert weak.stdout.strip().splitlines()[-1].startswith("next: set trials = ")  # what would answer
    stored = httpx.get(
        f"{served.url}/v1/audits/{audit_id}", headers={"Authorization": f"Bearer {served.alice}"}, timeout=30
    ).json()
    assert stored["request"]["trials"] == 25 and stored["request"]["epsilon"] == 2  # typed: numbers
    allowed = _light_cli(light, served, cwd, "watch", audit_id, "--allow-inconclusive")
    assert allowed.returncode == 0 and "--allow-inconclusive passes it" in allowed.stderr

    status = _light_cli(light, served, cwd, "status", audit_id[:12])
    assert status.returncode == 0 and "SUCCEEDED" in status.stdout
    assert _headline(status.stdout) == stored["result"]["headline"]
    result = _light_cli(light, served, cwd, "result", audit_id, "--format", "table")
    assert (
        result.returncode == 0 and "epsilon_detectable" in result.stdout and "inconclusive" in result.stdout
    )
    listed = _light_cli(light, served, cwd, "list", "--format", "json")
    assert audit_id in {a["id"] for a in json.loads(listed.stdout)}
    # plan takes the same overrides (the service validates them before it computes a plan)
    plan = _light_cli(light, served, cwd, "plan", request, "--set", 'trials="many"')
    assert plan.returncode == 3 and "422" in plan.stderr and "trials" in plan.stderr, plan.stderr

    queued = _light_cli(light, served, cwd, "submit", request, "--set", f"trials={LONG_TRIALS}")
    assert queued.returncode == 0, queued.stderr
    cancelled = _light_cli(light, served, cwd, "cancel", queued.stdout.strip())
    assert cancelled.returncode == 0 and queued.stdout.strip() in cancelled.stdout
    rows = tmp_path / "tickets.jsonl"
    rows.write_text("".join(json.dumps({"text": f"ticket {i}: my order is late"}) + "\n" for i in range(40)))
    uploaded = _light_cli(light, served, cwd, "datasets", "upload", str(rows), "--name", "tickets")
    assert uploaded.returncode == 0 and "stored 'tickets'" in uploaded.stderr, uploaded.stderr

    # --baseline: the same counts do not regress; more true positives do (exit 1 whatever the verdict)
    bound = str(ROOT / "examples" / "bound-counts.json")
    claim = ("--set", "epsilon=5")
    first = _light_cli(light, served, cwd, "submit", bound, *claim, "--label", "branch=main", "--wait")
    assert first.returncode in (0, 4), first.stderr
    none_yet = _light_cli(light, served, cwd, "submit", bound, *claim, "--baseline", "branch=next")
    assert none_yet.returncode == first.returncode and "no baseline to compare with" in none_yet.stderr
    same = _light_cli(light, served, cwd, "submit", bound, *claim, "--baseline", "branch=main")
    assert same.returncode == first.returncode and "No regression: measured ε ≥ 0.404" in same.stderr
    more = ("--set", "counts.tp=3000", "--set", "counts.fn=1000")
    worse = _light_cli(light, served, cwd, "submit", bound, *claim, *more, "--baseline", "branch=main")
    assert worse.returncode == 1 and "Regression: measured ε ≥" in worse.stderr, worse.stderr
    assert _headline(worse.stdout).startswith(("Inconclusive", "Consistent"))  # the verdict, last
    worse_id = worse.stderr.split("submitted bound audit ")[1].split()[0]
    first_id = first.stderr.split("submitted bound audit ")[1].split()[0]
    compared = httpx.get(
        f"{served.url}/v1/audits/{worse_id}/regression",
        params={"baseline": first_id},
        headers={"Authorization": f"Bearer {served.alice}"},
        timeout=30,
    ).json()
    (test,) = compared["tests"]
    assert compared["regressed"] and test["epsilon_lower"] > test["baseline_epsilon_upper"]
    assert test["assumption"] == "none" and test["baseline_confidence"] == 0.95

    usage = _light_cli(light, served, cwd, "submit", request, "--set", "trials")
    assert usage.returncode == 3 and "write PATH=VALUE" in usage.stderr
    refused = _light_cli(light, served, cwd, "submit", request, "--set", 'trials="many"', "--wait")
    assert refused.returncode == 3 and "422" in refused.stderr and "trials" in refused.stderr


# --- start-up time ------------------------------------------------------------------------------------

QUIET_PASS_CPU_S = 0.03
"""CPU seconds of `python -c pass` on this machine when it is quiet (0.02–0.04 s measured)."""
START_BUDGET_S = 0.5
MARGIN = 2.0
"""A busy machine inflates big imports' CPU time (cache misses) far more than the bare interpreter's: at a
load average of 10 on 2 cores `python -c pass` took 0.02 s of CPU as when quiet, and `--help` and `status`
0.32–0.35 s in both distributions (before pydantic and rich's tables left their start: status 0.53 s light,
0.63 s full at that load; 0.70–0.91 s at a load of 19). The import checks (here, and what
tests/cli/test_cli_start.py keeps out) are the exact guard; this bound catches a start that loads the
numerics or the typed models again (the server's models, numpy and scipy: seconds of CPU)."""


def cpu_seconds(cmd: list[str], env: dict[str, str] | None = None, runs: int = 5) -> float:
    """The least CPU time (user + system) of `runs` runs of `cmd`: CPU, not wall time, so that waiting for
    a busy machine's cores does not count; the least, so that one disturbed run does not either."""
    best = float("inf")
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=120)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        best = min(best, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return best


def imported(python: Path, entry: str, args: list[str], env: dict[str, str]) -> set[str]:
    """The modules a command line loads (`python -X importtime`), run as its console script does."""
    code = f"import sys; sys.argv = ['iclaudit', *{args!r}]; from {entry} import main; main()"
    out = subprocess.run(
        [str(python), "-X", "importtime", "-c", code], env=env, capture_output=True, text=True, timeout=120
    )
    return {
        line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")
    }


HEAVY = ("numpy", "scipy", "torch", "sqlalchemy", "fastapi")  # and every module under them
HEAVY_APP = (  # the server's modules that load numerics or the database (the packages' own __init__s do not)
    "app.audit.stats",
    "app.audit.kinds.registry",
    "app.audit.results",
    "app.schemas",
    "app.db",
    "app.api",
)


def heavy(module: str) -> bool:
    return module.split(".")[0] in HEAVY or any(module == m or module.startswith(m + ".") for m in HEAVY_APP)


def test_help_and_status_start_fast_in_both_distributions(light: Light, served: Served) -> None:
    """`iclaudit --help` and `iclaudit status ID` load no numerics, no server and no typed models, and
    take at most START_BUDGET_S of CPU (MARGIN for a busy machine, scaled by how much slower the bare
    interpreter starts in the same run than when the machine is quiet)."""
    audit = httpx.post(
        f"{served.url}/v1/audits",
        json=json.loads((ROOT / "examples" / "bound-counts.json").read_text()),
        headers={"Authorization": f"Bearer {served.alice}"},
        timeout=30,
    ).json()
    for _ in range(600):
        got = httpx.get(
            f"{served.url}/v1/audits/{audit['id']}", headers={"Authorization": f"Bearer {served.alice}"}
        ).json()
        if got["state"] == "SUCCEEDED":
            break
        time.sleep(0.1)
    env = light.env(ICLAUDIT_URL=served.url, ICLAUDIT_API_KEY=served.alice)
    if not (light.bin / "iclaudit").exists():
        _light_cli(light, served, ROOT, "--help")
    full_env = {**os.environ, "ICLAUDIT_URL": served.url, "ICLAUDIT_API_KEY": served.alice}
    commands = {
        "light --help": ([str(light.bin / "iclaudit"), "--help"], env),
        "light status": ([str(light.bin / "iclaudit"), "status", audit["id"]], env),
        "full --help": ([str(FULL_ICLAUDIT), "--help"], full_env),
        "full status": ([str(FULL_ICLAUDIT), "status", audit["id"]], full_env),
    }
    for name, (cmd, cmd_env) in commands.items():
        out = subprocess.run(cmd, env=cmd_env, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, (name, out.stderr)
    for python, entry, cmd_env in (
        (light.bin / "python", "iclaudit.cli", env),
        (Path(sys.executable), "app.cli", full_env),
    ):
        for args in (["--help"], ["status", audit["id"]]):
            loaded = imported(python, entry, args, cmd_env)
            assert "typer" in loaded and not [m for m in loaded if heavy(m)], (entry, args)

    bare = {
        "light": cpu_seconds([str(light.bin / "python"), "-c", "pass"]),
        "full": cpu_seconds([sys.executable, "-c", "pass"]),
    }
    slowdown = max(1.0, min(bare.values()) / QUIET_PASS_CPU_S)
    limit = START_BUDGET_S * MARGIN * slowdown
    seconds = {name: cpu_seconds(cmd, cmd_env) for name, (cmd, cmd_env) in commands.items()}
    print(f"bare interpreter {bare}, slowdown {slowdown:.2f}, limit {limit:.2f} s: {seconds}")
    assert max(seconds.values()) <= limit, (seconds, bare, limit)
