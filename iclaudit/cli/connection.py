"""The HTTP client of one command: its address, key and TLS settings, and a client error (the service
refused, or is not there) said in one line on stderr with exit 3."""

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

import typer

from iclaudit.cli.exits import Exit
from iclaudit.cli.output import err_console, fail
from iclaudit.cli.reach import CONNECT_TIMEOUT_S, PROXY_VARIABLES, START_HINT, default_url

if TYPE_CHECKING:
    from iclaudit.client import ClientError, IclauditClient


def client_error_exit(exc: "ClientError") -> typer.Exit:
    from iclaudit.client import ApiError, ServiceUnreachable

    if isinstance(exc, ApiError):
        err_console.print(f"[red]{exc.status}[/] {exc.message}", highlight=False, soft_wrap=True)
        for path, message in exc.details:  # each with its JSON path ($.mechanism.epsilon), the first too
            same = message.rstrip(".") in exc.message
            err_console.print(
                f"  at {path}" if same else f"  {path}: {message}", highlight=False, soft_wrap=True
            )
        return typer.Exit(Exit.USAGE)
    if isinstance(exc, ServiceUnreachable):
        return fail(f"{exc}: {START_HINT}")
    return fail(str(exc))


def open_client(url: str | None, api_key: str | None, typed: bool = True) -> "IclauditClient":
    from iclaudit.client import IclauditClient

    url = url or default_url()
    return IclauditClient(
        url,
        api_key,
        connect_timeout=CONNECT_TIMEOUT_S,
        retry_unreachable=False,
        typed=typed,
        verify=_tls(url),
    )


def _tls(url: str) -> Any:
    """httpx's default (certifi's authorities) for a service over TLS or behind a proxy; for plain HTTP with
    no proxy set, where the command speaks no TLS, a context that trusts no authority (it would refuse any
    TLS peer): loading certifi's bundle is tens of ms of a command's start."""
    import os
    import ssl

    if not url.startswith("http://") or any(os.environ.get(name) for name in PROXY_VARIABLES):
        return True
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


@contextmanager
def connected(url: str | None, api_key: str | None, *, typed: bool = True) -> Iterator["IclauditClient"]:
    """The client for one command; a client error (the service refused, or is not there) becomes one line
    on stderr and exit 3. `typed=False` where the command shows no result table (status, list, cancel):
    no typed result models to import, so it starts as fast in the server's distribution as in the light
    client's."""
    from iclaudit.client import ClientError

    try:
        with open_client(url, api_key, typed) as client:
            yield client
    except ClientError as exc:
        raise client_error_exit(exc) from None
