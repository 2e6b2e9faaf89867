"""Docker cannot run here: parse docker-compose.yml and check that every service running our images
runs an `iclaudit` command that exists with the options it passes, and the rest of the wiring."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
import typer.main
import yaml

from app.cli import _register, app

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
    assert {"migrate", "api", "worker"} <= set(ours)
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


def test_worker_reserves_a_gpu_and_vllm_is_optional(compose: dict) -> None:
    worker = compose["services"]["worker"]
    devices = worker["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"] and worker["environment"]["ICLAUDIT_EXECUTOR"] == "celery"
    vllm = compose["services"]["vllm"]
    assert vllm["profiles"] == ["vllm"] and vllm["entrypoint"] == ["vllm", "serve"]
    for name in ("api", "worker", "migrate"):
        env = compose["services"][name]["environment"]
        assert env["ICLAUDIT_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert env["ICLAUDIT_BROKER_URL"].startswith("redis://")


LONG_RUNNING = ("postgres", "redis", "api", "worker", "vllm")


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
    for name in ("api", "worker"):
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
    assert compose["services"]["worker"]["depends_on"]["vllm"] == {
        "condition": "service_healthy",
        "required": False,
    }


def test_the_images_run_as_an_unprivileged_user() -> None:
    for dockerfile in ("docker/api.Dockerfile", "docker/worker-gpu.Dockerfile"):
        users = [
            line.split()[1]
            for line in (ROOT / dockerfile).read_text().splitlines()
            if line.startswith("USER ")
        ]
        assert users and users[-1] not in ("root", "0"), dockerfile
