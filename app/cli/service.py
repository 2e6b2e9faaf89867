"""Service commands: serve, worker, migrate, keys create|revoke, submit [--watch], status, result
(JSON, CSV or a PNG plot)."""

from __future__ import annotations

import csv
import io
import json
import logging
import sys
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn
from rich.table import Table

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
console = Console()
err_console = Console(stderr=True)

UrlOpt = Annotated[str, typer.Option("--url", envvar="ICLAUDIT_URL", help="The running service.")]
KeyOpt = Annotated[
    str | None,
    typer.Option("--api-key", envvar="ICLAUDIT_API_KEY", help="Bearer key (not needed with auth off)."),
]
DEFAULT_URL = "http://127.0.0.1:8000"


def _logging() -> None:
    from app.config import get_settings

    logging.basicConfig(
        level=get_settings().log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
) -> None:
    """Run the HTTP API (uvicorn). With no URLs set: SQLite in ./var and the in-process executor."""
    import uvicorn

    _logging()
    uvicorn.run("app.main:create_app", factory=True, host=host, port=port, log_config=None)


def worker(
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
    queues: Annotated[str, typer.Option(help="Queues to consume.")] = "audits",
) -> None:
    """Run one Celery worker process (--pool=solo: one audit at a time; one process per GPU)."""
    from workers.celery_app import celery_app

    _logging()
    celery_app.worker_main(
        [
            "worker",
            "--pool=solo",
            f"--loglevel={loglevel}",
            "-Q",
            queues,
            "--without-gossip",
            "--without-mingle",
        ]
    )


def migrate(revision: Annotated[str, typer.Option(help="Target revision.")] = "head") -> None:
    """Upgrade the database (ICLAUDIT_DATABASE_URL, or the SQLite default) to `revision`."""
    from app.config import get_settings
    from app.db.migrate import upgrade

    url = get_settings().sqlalchemy_url
    upgrade(url, revision)
    console.print(f"database at {revision}")


keys = typer.Typer(help="API keys (stored as salted scrypt hashes).", no_args_is_help=True)


def _session():  # type: ignore[no-untyped-def]
    from app.config import get_settings
    from app.db.engine import make_engine, make_session_factory

    return make_session_factory(make_engine(get_settings().sqlalchemy_url)).begin()


@keys.command("create")
def keys_create(tenant: Annotated[str, typer.Option(help="Tenant name (created if new).")]) -> None:
    """Make a key for TENANT and print it once; only its hash is stored."""
    from app.db import keys as key_rows

    with _session() as session:
        _, key = key_rows.create_api_key(session, tenant)
    err_console.print(f"API key for tenant [bold]{tenant}[/] (shown once; store it now):")
    print(key)


@keys.command("revoke")
def keys_revoke(
    key: Annotated[str, typer.Argument(help="The key, or its id (the part after `ica_`).")],
) -> None:
    """Revoke a key; requests with it answer 401 from then on."""
    from app.db import keys as key_rows

    parsed = key_rows.parse_api_key(key)
    key_id = parsed[0] if parsed else key
    with _session() as session:
        revoked = key_rows.revoke_api_key(session, key_id)
    if not revoked:
        err_console.print(f"no live key with id {key_id!r}")
        raise typer.Exit(1)
    console.print(f"revoked {key_id}")


# --- client commands ------------------------------------------------------------------------------------


def _client(url: str, api_key: str | None):  # type: ignore[no-untyped-def]
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=30)


def _check(response: Any) -> Any:
    if response.status_code >= 400:
        try:
            error = response.json()["error"]
            err_console.print(f"[red]{response.status_code}[/] {error['message']}")
            for detail in error.get("details", [])[1:]:
                err_console.print(f"  {detail['path']}: {detail['message']}")
        except (ValueError, KeyError, TypeError):
            err_console.print(f"[red]{response.status_code}[/] {response.text}")
        raise typer.Exit(2)
    return response.json()


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested JSON → (dotted.path, scalar) rows; list items are indexed (`bounds.0.epsilon`)."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = ((str(i), v) for i, v in enumerate(value))
    else:
        return [(prefix, value)]
    rows: list[tuple[str, Any]] = []
    for key, item in items:
        rows.extend(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    return rows


def result_table(result: dict[str, Any], title: str) -> Table:
    table = Table(title=title)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    for key, value in flatten(result):
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    return table


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA –"
    return f"ETA {int(seconds) // 60}:{int(seconds) % 60:02d}"


def watch(client: Any, audit_id: str, poll_seconds: float = 0.5) -> dict[str, Any]:
    """Poll until a terminal state, drawing stage, % and ETA; returns the final audit."""
    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.fields[eta]}"),
    )
    with Progress(*columns, console=err_console, transient=False) as bar:
        task = bar.add_task("queued", total=1.0, eta="ETA –")
        while True:
            audit = _check(client.get(f"/v1/audits/{audit_id}"))
            p = audit["progress"]
            stage = p["stage"] + (f" · {p['message']}" if p["message"] else "")
            bar.update(task, completed=p["fraction"], description=stage, eta=_eta(p["eta_seconds"]))
            if audit["state"] in TERMINAL:
                return audit
            time.sleep(poll_seconds)


def _finish(audit: dict[str, Any]) -> None:
    if audit["state"] == "SUCCEEDED":
        console.print(result_table(audit["result"], f"{audit['kind']} audit {audit['id']}"))
        return
    error = audit.get("error") or {}
    err_console.print(f"[red]audit {audit['id']} {audit['state']}[/] {error.get('message', '')}")
    raise typer.Exit(1)


def submit(
    file: Annotated[Path, typer.Argument(exists=True, dir_okay=False, help="A request body (JSON).")],
    watch_: Annotated[
        bool, typer.Option("--watch", help="Show progress until it ends, then the result.")
    ] = False,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """POST FILE to /v1/audits; print the audit id (and with --watch, follow it to the end)."""
    try:
        body = json.loads(file.read_text())
    except json.JSONDecodeError as exc:
        err_console.print(f"[red]{file} is not valid JSON:[/] {exc}")
        raise typer.Exit(2) from exc
    with _client(url, api_key) as client:
        audit = _check(client.post("/v1/audits", json=body))
        err_console.print(f"submitted {audit['kind']} audit [bold]{audit['id']}[/] ({audit['state']})")
        if not watch_:
            print(audit["id"])
            return
        _finish(watch(client, audit["id"]))


def status(audit_id: str, url: UrlOpt = DEFAULT_URL, api_key: KeyOpt = None) -> None:
    """Show an audit's state and progress."""
    with _client(url, api_key) as client:
        audit = _check(client.get(f"/v1/audits/{audit_id}"))
    p = audit["progress"]
    console.print(
        f"{audit['id']} {audit['kind']} [bold]{audit['state']}[/] attempt {audit['attempt']} · "
        f"{p['stage']} {100 * p['fraction']:.0f}% {_eta(p['eta_seconds'])} {p['message']}"
    )
    if audit.get("error"):
        console.print(f"[red]{audit['error']['code']}[/] {audit['error']['message']}")


def result(
    audit_id: str,
    format_: Annotated[
        str,
        typer.Option("--format", help="json, csv (flattened: field,value) or png (a plot; needs --output)."),
    ] = "json",
    output: Annotated[
        Path | None, typer.Option("--output", "-o", dir_okay=False, help="Write to this file, not stdout.")
    ] = None,
    url: UrlOpt = DEFAULT_URL,
    api_key: KeyOpt = None,
) -> None:
    """Print a SUCCEEDED audit's result (or write it, or its plot, to --output)."""
    if format_ not in ("json", "csv", "png"):
        err_console.print("--format must be json, csv or png")
        raise typer.Exit(2)
    if format_ == "png":
        if output is None:
            err_console.print("--format png needs --output FILE (a PNG is not for the terminal)")
            raise typer.Exit(2)
        with _client(url, api_key) as client:
            response = client.get(f"/v1/audits/{audit_id}/result.png")
        if response.status_code >= 400:
            _check(response)
        output.write_bytes(response.content)
        err_console.print(f"wrote {output} ({len(response.content):,} bytes)")
        return
    with _client(url, api_key) as client:
        body = _check(client.get(f"/v1/audits/{audit_id}/result"))
    if format_ == "json":
        text = json.dumps(body, indent=2) + "\n"
    else:
        out = io.StringIO()
        writer = csv.writer(out)
        writer.writerow(["field", "value"])
        writer.writerows(flatten(body))
        text = out.getvalue()
    if output is not None:
        output.write_text(text)
    else:
        sys.stdout.write(text)


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(worker)
    app.command()(migrate)
    app.add_typer(keys, name="keys")
    app.command()(submit)
    app.command()(status)
    app.command()(result)
