"""Server commands: serve, worker, migrate, keys create|revoke. The client commands (submit, watch,
status, result, list, cancel, datasets, models) are in iclaudit/cli/commands.py."""

# No `from __future__ import annotations`: typer reads every command's signature a few times at each start,
# and string annotations would be compiled and evaluated each time (tens of ms of `--help` and `status`).
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console

if TYPE_CHECKING:
    from contextlib import AbstractContextManager

    from sqlalchemy.orm import Session

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
    """JSON log lines with request_id, audit_id and tenant (ICLAUDIT_LOG_FORMAT=text for people)."""
    from app.config import get_settings
    from app.observability import configure_logging

    settings = get_settings()
    configure_logging(settings.log_level, settings.log_format)


def banner(settings: Any, host: str, port: int, workers: int = 1) -> str:
    """What `serve` prints for people before the JSON log lines: where the dashboard is, whether anyone
    may call it without a key, where audits run and on which model."""
    shown = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    base = f"http://{'[' + shown + ']' if ':' in shown else shown}:{port}"
    if settings.auth_enabled:
        auth = "on: every request needs `Authorization: Bearer <key>` (iclaudit keys create --tenant NAME)"
    else:
        auth = "OFF: every caller is one tenant; never expose this server beyond localhost"
    if settings.executor == "celery":
        runs = f"Celery workers (`iclaudit worker`) through {_hidden(settings.broker_url or '')}"
    else:
        runs = f"{settings.inline_workers} worker processes beside the API (ICLAUDIT_INLINE_WORKERS)"
    load = "loaded by each worker at start-up" if settings.preload_models else "loaded at first use"
    lines = [
        f"iclaudit {_version()} on {base}" + (f" ({workers} API processes)" if workers > 1 else ""),
        f"  dashboard  {base}/ui      API docs {base}/docs",
        f"  auth       {auth}",
        f"  audits     {runs}",
        f"  model      {settings.default_model} (the default; {load})",
        f"  database   {_hidden(settings.sqlalchemy_url)}",
        "  logs       "
        + (
            "JSON lines follow (ICLAUDIT_LOG_FORMAT=text for plain ones)"
            if settings.log_format == "json"
            else "plain lines follow"
        ),
    ]
    return "\n".join(lines)


def _hidden(url: str) -> str:
    """`url` without its password."""
    from sqlalchemy.engine import make_url

    try:
        return make_url(url).render_as_string(hide_password=True)
    except Exception:  # not a URL SQLAlchemy parses: the host part only
        return url.rsplit("@", 1)[-1]


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("iclaudit")
    except PackageNotFoundError:
        return "(source)"


def serve(
    host: Annotated[str, typer.Option(help="Interface to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="TCP port.")] = 8000,
    workers: Annotated[
        int,
        typer.Option(
            min=1,
            help="API processes sharing the port (uvicorn workers). Above 1 the rate limits must be counted "
            "where every process sees them: ICLAUDIT_RATE_LIMIT_STORAGE=redis://… or a broker.",
        ),
    ] = 1,
) -> None:
    """Run the HTTP API (uvicorn). With no URLs set: SQLite in ./var and the in-process executor."""
    import uvicorn

    from app.api.connections import shared_limits, uvicorn_options
    from app.config import get_settings

    _logging()
    settings = get_settings()
    if workers > 1 and not shared_limits(settings):
        err_console.print(
            f"--workers {workers} needs rate limits shared by the processes: set ICLAUDIT_RATE_LIMIT_STORAGE "
            "to a redis:// URL (or ICLAUDIT_BROKER_URL); in each process's memory every process would allow "
            "the whole ICLAUDIT_RATE_LIMIT."
        )
        raise typer.Exit(2)
    typer.echo(banner(settings, host, port, workers) + "\n", err=True)
    uvicorn.run(
        "app.main:create_app",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        **uvicorn_options(settings),  # header deadline and size, keep-alive, logging
    )


def worker(
    loglevel: Annotated[str, typer.Option(help="Celery log level.")] = "INFO",
    queues: Annotated[
        str,
        typer.Option(
            help="Queues to consume: audits, plans (POST /v1/audits/plan, seconds each) and webhooks (signed "
            "deliveries, short tasks)."
        ),
    ] = "audits,plans,webhooks",
    nice: Annotated[
        int,
        typer.Option(
            help="Added to the process's nice value: on a host shared with an API process, audits get the "
            "CPU its requests leave (as the inline executor's threads do). 0 keeps the priority."
        ),
    ] = 10,
) -> None:
    """Run one Celery worker process (--pool=solo: one audit at a time; one process per GPU)."""
    import os

    from workers.celery_app import celery_app

    _logging()
    if nice:
        os.nice(nice)
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


def _session() -> "AbstractContextManager[Session]":
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


def register(app: typer.Typer) -> None:
    app.command()(serve)
    app.command()(worker)
    app.command()(migrate)
    app.add_typer(keys, name="keys")
