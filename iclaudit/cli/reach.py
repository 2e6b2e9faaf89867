"""Where the client commands find the service, and a check that it is there, made before the client's
imports (numpy, scipy: seconds on a busy machine), so that a server that is down is said so at once."""

from __future__ import annotations

import os
import socket
import sys
from urllib.parse import urlsplit

CONNECT_TIMEOUT_S = 1.5  # a server that is down is said so at once (no retry on a refused connection)
START_HINT = (
    "is the service running? Start it with `make serve` in the repository (it listens on "
    "${HOST:-127.0.0.1}:${PORT:-8000}) or `iclaudit serve`, or point --url / ICLAUDIT_URL at it"
)
PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")
CLIENT_COMMANDS = frozenset(
    {"submit", "watch", "status", "result", "list", "cancel", "datasets", "models", "plan", "resume"}
)


def default_url() -> str:
    """Where `make serve` listens: http://${HOST:-127.0.0.1}:${PORT:-8000} (ICLAUDIT_URL overrides it)."""
    return f"http://{os.environ.get('HOST') or '127.0.0.1'}:{os.environ.get('PORT') or '8000'}"


def url_of(argv: list[str]) -> str:
    """The service a command line addresses: --url, else ICLAUDIT_URL, else default_url()."""
    for i, arg in enumerate(argv):
        if arg == "--url" and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith("--url="):
            return arg.split("=", 1)[1]
    return os.environ.get("ICLAUDIT_URL") or default_url()


def unreachable(url: str) -> str | None:
    """Why no TCP connection to the URL's host and port opens within CONNECT_TIMEOUT_S, or None."""
    parts = urlsplit(url)
    if not parts.hostname:
        return None  # not a URL we can check here: the client reports it
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=CONNECT_TIMEOUT_S).close()
    except OSError as exc:
        return exc.strerror or type(exc).__name__
    return None


def preflight(argv: list[str]) -> None:
    """A client command aimed at a service that is not there exits 3 with one line saying how to start it."""
    if not argv or argv[0] not in CLIENT_COMMANDS or "--help" in argv:
        return
    if any(os.environ.get(name) for name in PROXY_VARIABLES):
        return  # the client may reach it only through the proxy: let it try
    url = url_of(argv).rstrip("/")
    why = unreachable(url)
    if why is not None:
        print(f"error: cannot reach {url} ({why}): {START_HINT}", file=sys.stderr)
        raise SystemExit(3)
