"""What keeps `iclaudit --help` and `iclaudit status` short (tests/cli/test_light_gate.py times them):
neither loads pydantic (typer's converters, the client's models) nor rich's tables, in either command line;
typer converts their values as its own pydantic adapters would; `status` says what the typed audit says; a
plain-HTTP service is reached without loading certifi's authorities, and a TLS one still checked with them."""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from enum import Enum
from pathlib import Path

import pytest
import typer
import typer.main
import uvicorn
from typer._coercion import build_runtime_param as typers_own

from app.cli import science, server
from app.config import Settings
from app.main import create_app
from iclaudit.cli import commands, connection
from iclaudit.cli.reach import PROXY_VARIABLES
from iclaudit.client import IclauditClient
from testkit.client import VERDICT_REQUESTS
from testkit.servers import free_port, fresh_database

NOT_FOR_HELP = ("pydantic", "pydantic_core", "typer._adapters")
NOT_FOR_STATUS = (*NOT_FOR_HELP, "rich.table", "rich.markdown", "httpx._main")  # and the modules under them


def _loaded(entry: str, args: list[str], env: dict[str, str], listing: Path) -> set[str]:
    """The modules a command line has loaded when it exits, run as its console script runs it."""
    code = (
        "import atexit, sys\n"
        f"atexit.register(lambda: open({str(listing)!r}, 'w').write('\\n'.join(k for k, v in sys.modules.items() if v)))\n"
        f"sys.argv = ['iclaudit', *{args!r}]\n"
        f"from {entry} import main\n"
        "main()\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(listing.read_text().split())


def _among(modules: set[str], names: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == n or m.startswith(n + ".") for n in names)]


def _params() -> Iterator[tuple[typer.Context, typer.core.TyperOption | typer.core.TyperArgument]]:
    """Every parameter of every command of the full command line, with a context to convert it in."""
    app = typer.Typer()
    server.register(app)
    commands.register(app)
    science.register(app)

    def walk(command: typer.core.TyperCommand | typer.core.TyperGroup) -> Iterator:
        ctx = typer.Context(command)
        for param in command.params:
            yield ctx, param
        for sub in getattr(command, "commands", {}).values():
            yield from walk(sub)

    yield from walk(typer.main.get_command(app))


def _converted(runtime, value, param, ctx):  # type: ignore[no-untyped-def]
    try:
        return "value", runtime.coerce(value, param=param, ctx=ctx)
    except typer.BadParameter as exc:
        return "error", exc.format_message()


def test_values_convert_as_typers_own_adapters_convert_them() -> None:
    """Unset values, text and choices (as text: exact, other case, unknown; as members), and a value that
    needs typer's adapter (a number, a flag given as text): the same value or the same message."""
    seen = set()
    for ctx, param in _params():
        annotation = param.type_descriptor.annotation
        values: list[object] = [None, "text", "", "ünï code", "3", "yes", "-1.5"]
        if isinstance(annotation, type) and issubclass(annotation, Enum):
            values += [m.value for m in annotation] + [m.value.upper() for m in annotation] + list(annotation)
        for value in values:
            ours = _converted(param.get_runtime_param(), value, param, ctx)
            theirs = _converted(typers_own(param.type_descriptor), value, param, ctx)
            assert ours == theirs, (param.name, annotation, value)
        seen.add(annotation if not isinstance(annotation, type) or not issubclass(annotation, Enum) else Enum)
    assert {str, int, float, bool, Enum} <= seen  # each kind of value the commands take was compared


@pytest.fixture(scope="module")
def audits(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, list[str]]]:
    """A live API (uvicorn in this process, SQLite, auth off) with a SUCCEEDED audit of each verdict."""
    state = tmp_path_factory.mktemp("start")
    settings = Settings(
        database_url=fresh_database("sqlite", state),
        state_dir=state,
        executor="inline",
        auth_enabled=False,
        preload_models=False,
    )
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), port=port, log_config=None))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port}"
        with IclauditClient(url) as client:
            ids = [client.submit(request).id for request in VERDICT_REQUESTS.values()]
            for audit_id in ids:
                assert client.wait(audit_id, timeout=300).state == "SUCCEEDED"
        yield url, ids
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def test_help_and_status_load_neither_pydantic_nor_tables(
    audits: tuple[str, list[str]], tmp_path: Path
) -> None:
    url, ids = audits
    env = {**os.environ, "ICLAUDIT_URL": url}
    for entry in ("app.cli", "iclaudit.cli"):
        helped = _loaded(entry, ["--help"], env, tmp_path / "help")
        assert "typer.rich_utils" in helped and _among(helped, NOT_FOR_HELP) == [], entry
        for audit_id in (ids[0], ids[0][:10]):  # a whole id, and a prefix the client resolves
            status = _loaded(entry, ["status", audit_id], env, tmp_path / "status")
            assert "httpx" in status and _among(status, NOT_FOR_STATUS) == [], (entry, audit_id)


def test_status_says_what_the_typed_audit_says(audits: tuple[str, list[str]]) -> None:
    """State, attempt, progress, the verdict's headline and next steps: as the client's models read them."""
    url, ids = audits
    env = {**os.environ, "ICLAUDIT_URL": url, "COLUMNS": "400"}
    with IclauditClient(url) as client:
        for audit_id in ids:
            audit = client.get(audit_id)
            p = audit.progress
            out = subprocess.run(
                [sys.executable, "-c", "from app.cli import main; main()", "status", audit_id[:12]],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
                cwd=Path(__file__).parent,
            )
            assert out.returncode == 0, out.stderr
            eta = (
                "–" if p.eta_seconds is None else f"{int(p.eta_seconds) // 60}:{int(p.eta_seconds) % 60:02d}"
            )
            first = f"{audit.id} {audit.kind} {audit.state} attempt {audit.attempt} · {p.stage}"
            first += f" {100 * p.fraction:.0f}% ETA {eta}"
            steps = [
                f"next: {step['text'] if isinstance(step, dict) else step.text}"
                for step in getattr(audit.result, "next_steps", None) or []
            ]
            expected = [first + (f" {p.message}" if p.message else ""), audit.headline, *steps]
            assert out.stdout.splitlines() == expected, (out.stdout, expected)


def test_plain_http_loads_no_authorities_and_tls_keeps_them(monkeypatch: pytest.MonkeyPatch) -> None:
    """Over plain HTTP with no proxy set the command speaks no TLS: a context that trusts no authority (so
    it would refuse any TLS peer, never accept one unchecked); TLS, or a proxy, keeps httpx's authorities."""
    for name in PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    plain = connection._tls("http://127.0.0.1:8000")
    assert isinstance(plain, ssl.SSLContext)
    assert plain.verify_mode == ssl.CERT_REQUIRED and plain.check_hostname
    assert plain.cert_store_stats()["x509_ca"] == 0
    assert connection._tls("https://audits.example.org") is True
    monkeypatch.setenv("HTTPS_PROXY", "https://proxy.example.org:3128")
    assert connection._tls("http://127.0.0.1:8000") is True
