"""Docker cannot run here: parse docker-compose.yml and the Dockerfiles and check that every service running
our images builds it and runs an `iclaudit` command that exists with the options it passes; the CPU worker
(default profile) beside the GPU one (profile gpu); one fixed UID in both images; the images install what
`make serve` installs; and the workers' healthcheck, run as compose runs it, against a real worker holding
an audit for longer than the check's window (issue 21)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import click
import pytest
import redis
import typer.main
import yaml
from fastapi.testclient import TestClient

from app.cli import _register, app
from app.config import Settings
from app.main import create_app
from testkit.client import wait_for
from testkit.held_endpoint import HeldEndpoint
from testkit.servers import fresh_database
from testkit.workers import celery_env, start_worker

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load((ROOT / "docker-compose.yml").read_text())


@pytest.fixture(scope="module")
def cli() -> click.Group:
    _register()
    return typer.main.get_command(app)  # type: ignore[return-value]


def _ours(compose: dict) -> dict[str, dict]:
    images = {s["image"] for s in compose["services"].values() if "build" in s and "image" in s}
    return {n: s for n, s in compose["services"].items() if "build" in s or s.get("image") in images}


def test_every_service_of_our_images_runs_an_existing_cli_command(compose: dict, cli: click.Group) -> None:
    ours = _ours(compose)
    assert {"migrate", "api", "worker", "worker-gpu"} <= set(ours)
    for name, service in ours.items():
        program, *args = service["command"]
        assert program == "iclaudit", name
        command: click.Command = cli
        while isinstance(command, click.Group):
            assert args and args[0] in command.commands, (name, args)
            command, args = command.commands[args[0]], args[1:]
        command.make_context(command.name, list(args))  # raises on an unknown option or a bad value


def test_dockerfiles_exist_and_their_default_commands_exist(compose: dict, cli: click.Group) -> None:
    for service in compose["services"].values():
        if "build" in service:
            dockerfile = ROOT / service["build"]["dockerfile"]
            assert dockerfile.is_file()
            cmd = next(line for line in dockerfile.read_text().splitlines() if line.startswith("CMD"))
            assert '"iclaudit"' in cmd and yaml.safe_load(cmd[3:])[1] in cli.commands


def test_a_cpu_worker_by_default_and_a_gpu_worker_in_its_profile(compose: dict) -> None:
    services = compose["services"]
    cpu, gpu = services["worker"], services["worker-gpu"]
    assert "profiles" not in cpu and "deploy" not in cpu and "CUDA_VISIBLE_DEVICES" not in cpu["environment"]
    assert cpu["build"] == services["api"]["build"] and cpu["image"] == services["api"]["image"]
    assert gpu["profiles"] == ["gpu"] and gpu["build"]["dockerfile"] == "docker/worker-gpu.Dockerfile"
    devices = gpu["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    for worker in (cpu, gpu):
        assert worker["command"] == ["iclaudit", "worker", "--queues", "audits"]
        assert worker["environment"]["ICLAUDIT_EXECUTOR"] == "celery"
    vllm = services["vllm"]
    assert vllm["profiles"] == ["vllm"] and vllm["entrypoint"] == ["vllm", "serve"]
    for name in ("api", "worker", "worker-gpu", "migrate"):
        env = services[name]["environment"]
        assert env["ICLAUDIT_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["ICLAUDIT_BROKER_URL"].startswith("redis://")


def test_webhooks_have_a_worker_of_their_own_and_every_queue_a_consumer(compose: dict) -> None:
    """Issue 20 M4: deliveries never wait behind a long audit on a solo pool, so the audit workers consume
    only `audits` and a `webhooks` service consumes the queue app.integrations.dispatch sends to."""
    from app.integrations.dispatch import WEBHOOK_QUEUE
    from app.jobs.broker import create_celery

    consumed: dict[str, set[str]] = {}
    for name, service in compose["services"].items():
        command = service.get("command") or []
        if command[:2] == ["iclaudit", "worker"]:
            consumed[name] = set(command[command.index("--queues") + 1].split(","))
    audits_queue = create_celery(Settings()).conf.task_default_queue
    assert consumed["webhooks"] == {WEBHOOK_QUEUE}
    assert all(queues == {audits_queue} for name, queues in consumed.items() if name != "webhooks")
    assert "profiles" not in compose["services"]["webhooks"]


def test_every_service_that_runs_our_image_builds_it(compose: dict) -> None:
    ours = {n: s for n, s in compose["services"].items() if s.get("command", [None])[0] == "iclaudit"}
    assert {"migrate", "api", "worker", "worker-gpu"} <= set(ours)
    for name, service in ours.items():
        assert (ROOT / service["build"]["context"] / service["build"]["dockerfile"]).is_file(), name
    by_image: dict[str, set[str]] = {}
    for service in ours.values():
        by_image.setdefault(service["image"], set()).add(service["build"]["dockerfile"])
    assert all(len(files) == 1 for files in by_image.values()), by_image  # one Dockerfile per image tag


LONG_RUNNING = ("postgres", "redis", "api", "worker", "webhooks", "worker-gpu", "vllm")


def test_every_service_has_a_restart_policy_and_a_healthcheck(compose: dict) -> None:
    for name, service in compose["services"].items():
        assert service.get("restart"), name
        check = service.get("healthcheck", {})
        if name in LONG_RUNNING:
            assert check.get("test") and not check.get("disable"), name
            assert service["restart"] == "unless-stopped", name
        else:  # a one-shot job (migrate): retried on failure, waited for by completion, not health
            assert check == {"disable": True} and service["restart"].startswith("on-failure"), name
            assert all(
                dep.get(name, {}).get("condition") in (None, "service_completed_successfully")
                for dep in (s.get("depends_on", {}) for s in compose["services"].values())
            )


def test_state_data_volumes_and_the_models_file_are_wired(compose: dict) -> None:
    from app.engines.registry import _read_models_file

    declared = set(compose["volumes"])
    for name in ("api", "worker", "worker-gpu"):
        service = compose["services"][name]
        env = service["environment"]
        mounts = {m.split(":")[1]: m.split(":")[0] for m in service["volumes"]}
        assert mounts[env["ICLAUDIT_STATE_DIR"]] in declared
        assert mounts[env["ICLAUDIT_DATA_DIR"]] in declared
        models_file = ROOT / mounts[env["ICLAUDIT_MODELS_FILE"]]
        llms, _ = _read_models_file(models_file)  # the registry accepts it
    vllm = compose["services"]["vllm"]
    port = vllm["command"][vllm["command"].index("--port") + 1]
    served = vllm["command"][0]
    wired = [m for m in llms if m.engine == "openai" and m.options["base_url"] == f"http://vllm:{port}/v1"]
    assert wired and wired[0].options["model"] == served
    assert compose["services"]["worker-gpu"]["depends_on"]["vllm"] == {
        "condition": "service_healthy",
        "required": False,
    }


DOCKERFILES = ("docker/api.Dockerfile", "docker/worker-gpu.Dockerfile")


def _lines(dockerfile: str) -> list[str]:
    """The Dockerfile's instructions, continuation lines joined."""
    return (ROOT / dockerfile).read_text().replace("\\\n", " ").splitlines()


def test_the_images_run_as_one_fixed_unprivileged_uid() -> None:
    uids = {}
    for dockerfile in DOCKERFILES:
        lines = _lines(dockerfile)
        users = [line.split()[1] for line in lines if line.startswith("USER ")]
        assert users and users[-1] not in ("root", "0"), dockerfile
        args = dict(
            line.split()[1].split("=", 1) for line in lines if line.startswith("ARG ") and "=" in line
        )
        useradd = next(line for line in lines if "useradd" in line)
        uid = re.search(r"--uid (\S+)", useradd).group(1)  # type: ignore[union-attr]
        gid = re.search(r"groupadd [^&]*--gid (\S+)", useradd).group(1)  # type: ignore[union-attr]
        uid, gid = (args.get(v.strip("${}"), v) for v in (uid, gid))
        assert uid.isdigit() and int(uid) > 0 and uid == gid
        assert f" {users[-1]}" in useradd.split("&&")[1], dockerfile  # the USER is the one created
        uids[dockerfile] = uid
    assert len(set(uids.values())) == 1, uids  # both write the shared `state` volume as the same owner


def _pip_installs(lines: list[str]) -> list[list[str]]:
    """Each `pip install …` (the Makefile's `$(PIP) install …`) of the given shell lines, as its words (quotes
    dropped)."""
    found = []
    for line in lines:
        for part in line.split("&&"):
            words = shlex.split(part.replace("$(PIP)", "pip"))
            if "pip" in words and "install" in words:
                found.append(words[words.index("install") + 1 :])
    return found


def test_the_images_install_what_make_serve_installs() -> None:
    makefile = (ROOT / "Makefile").read_text().splitlines()
    start = next(i for i, line in enumerate(makefile) if line.startswith("$(STAMP): pyproject.toml"))
    recipe = [line for line in makefile[start + 1 :] if line.startswith("\t")]
    recipe = recipe[: next((i for i, line in enumerate(recipe) if "touch $@" in line), len(recipe))]
    serve = _pip_installs(recipe)
    torch = next(w for words in serve for w in words if w.startswith("torch=="))
    project = next(w for words in serve for w in words if w.startswith(".["))
    extras = set(project[2:-1].split(",")) - {"dev"}  # dev: the test tools, not the service
    no_deps = next(words for words in serve if "--no-deps" in words)
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    # testkit (the tests' servers and set-ups) and bench are installed for development, not served.
    top_level = {p.rstrip("*") for p in packages["include"]} - {"testkit", "bench"}
    for dockerfile in DOCKERFILES:
        lines = _lines(dockerfile)
        image = _pip_installs([line.removeprefix("RUN ") for line in lines if line.startswith("RUN ")])
        words = [w for words in image for w in words]
        installed = next(w for w in words if w.startswith(".["))
        assert extras <= set(installed[2:-1].split(",")), (dockerfile, installed)
        assert no_deps in image, dockerfile
        if dockerfile == "docker/api.Dockerfile":  # the GPU image keeps the CUDA torch of its vLLM base
            assert torch in words, dockerfile
        copied = {line.split()[1] for line in lines if line.startswith("COPY ")}
        assert top_level <= copied and "pyproject.toml" in copied, (dockerfile, top_level - copied)


def test_the_worker_healthcheck_is_the_liveness_file(compose: dict) -> None:
    for name in ("worker", "worker-gpu"):
        worker = compose["services"][name]
        check = worker["healthcheck"]
        assert check["test"][:4] == ["CMD", "python3", "-m", "workers.liveness"], name
        assert "ping" not in " ".join(check["test"])  # the solo pool cannot answer a ping mid-audit
        assert worker["environment"]["ICLAUDIT_WORKER_HEARTBEAT_FILE"].startswith("/tmp/")
        max_age = float(check["test"][check["test"].index("--max-age") + 1])
        assert max_age >= 3 * 10  # three missed beats at the default ICLAUDIT_WORKER_HEARTBEAT_SECONDS


@pytest.mark.postgres
@pytest.mark.redis
def test_worker_healthcheck_stays_green_through_a_held_audit(
    compose: dict, postgres_server, redis_server, tmp_path: Path, data_dir: Path
) -> None:
    """A real `iclaudit worker` (solo pool) holds an audit on a gated endpoint for 3x the check's window;
    compose's healthcheck command passes all along, then fails once the worker is gone."""
    alive = tmp_path / "alive"
    check = compose["services"]["worker"]["healthcheck"]["test"][1:]
    check[check.index("--max-age") + 1] = "2"
    check = [sys.executable if w == "python3" else w for w in check]
    redis.Redis.from_url(redis_server.url).flushall()
    with HeldEndpoint() as gate:
        env = celery_env(fresh_database("postgres", tmp_path), redis_server.url, data_dir, tmp_path) | {
            "ICLAUDIT_PRELOAD_MODELS": "false",
            "ICLAUDIT_ENDPOINT_ALLOWLIST": json.dumps([gate.url]),
            "ICLAUDIT_WORKER_HEARTBEAT_FILE": str(alive),
            "ICLAUDIT_WORKER_HEARTBEAT_SECONDS": "0.5",
        }
        healthy = lambda: subprocess.run(check, env={**os.environ, **env}, capture_output=True).returncode  # noqa: E731
        log = tmp_path / "worker.log"
        worker = start_worker(env, log)
        try:
            deadline = time.monotonic() + 60
            while b" ready." not in log.read_bytes() or not alive.exists():
                assert worker.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
                time.sleep(0.1)
            settings = Settings(
                **{k.removeprefix("ICLAUDIT_").lower(): v for k, v in env.items() if "HEARTBEAT_" not in k}
                | {"endpoint_allowlist": [gate.url]}
            )
            with TestClient(create_app(settings)) as api:
                held = api.post("/v1/audits", json=gate.request()).json()
                gate.wait_held()
                assert api.get(f"/v1/audits/{held['id']}").json()["state"] == "RUNNING"
                checks = []
                until = time.monotonic() + 6  # 3x the window, the solo pool busy all along
                while time.monotonic() < until:
                    checks.append(healthy())
                    time.sleep(0.5)
                assert checks and set(checks) == {0}, checks
                gate.release()
                assert wait_for(api.get, held["id"], timeout=60)["state"] == "SUCCEEDED"
        finally:
            worker.kill()
            worker.wait()
        time.sleep(2.5)
        assert healthy() == 1  # no heartbeat: unhealthy within the window
