"""A worker's liveness file, for container healthchecks that must stay green through a long audit.

`celery inspect ping` is answered by the worker's main loop, which the solo pool (one audit at a time,
one process per GPU) gives to the running task: during an audit over ~90 s it returns rc 69 "No nodes
replied" and the container is marked unhealthy. Instead, once the worker is ready
(`worker_ready`), a daemon thread touches `ICLAUDIT_WORKER_HEARTBEAT_FILE` every
`ICLAUDIT_WORKER_HEARTBEAT_SECONDS` (10) while the broker answers a PING, whatever the pool is busy with;
the healthcheck is the file's age:

    python -m workers.liveness --max-age 60     # exit 0 if touched in the last 60 s, else 1

So the check fails when the process is gone or hung with the interpreter, or the broker is unreachable,
and not because an audit is computing. Unset variable: no thread (nothing changes for a bare worker).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
import time
from pathlib import Path

log = logging.getLogger(__name__)

FILE_VARIABLE = "ICLAUDIT_WORKER_HEARTBEAT_FILE"
SECONDS_VARIABLE = "ICLAUDIT_WORKER_HEARTBEAT_SECONDS"


def beat_forever(path: Path, every: float, broker_url: str | None) -> None:
    """Touch `path` every `every` seconds while the broker (if a Redis URL) answers PING."""
    client = None
    if broker_url and broker_url.startswith(("redis://", "rediss://")):
        import redis

        client = redis.Redis.from_url(broker_url, socket_timeout=every, socket_connect_timeout=every)
    while True:
        try:
            if client is not None:
                client.ping()
            path.touch()
        except Exception as exc:  # the broker away: the file ages, the healthcheck fails
            log.warning("liveness: not touching %s (%s)", path, type(exc).__name__)
        time.sleep(every)


def start(broker_url: str | None = None) -> threading.Thread | None:
    """Start the heartbeat thread if ICLAUDIT_WORKER_HEARTBEAT_FILE is set."""
    target = os.environ.get(FILE_VARIABLE)
    if not target:
        return None
    every = float(os.environ.get(SECONDS_VARIABLE, "10"))
    path = Path(target)
    path.parent.mkdir(parents=True, exist_ok=True)
    thread = threading.Thread(
        target=beat_forever, args=(path, every, broker_url), name="liveness", daemon=True
    )
    thread.start()
    return thread


def connect() -> None:
    """Start the thread when the worker is ready (connected on import by workers.celery_app)."""
    from celery.signals import worker_ready

    @worker_ready.connect(weak=False)
    def _on_ready(sender: object = None, **_: object) -> None:
        url = getattr(getattr(getattr(sender, "app", None), "conf", None), "broker_url", None)
        start(url)


def is_fresh(path: Path, max_age: float) -> bool:
    try:
        return time.time() - path.stat().st_mtime <= max_age
    except FileNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Exit 0 if the worker's liveness file is fresh.")
    parser.add_argument("--file", default=os.environ.get(FILE_VARIABLE))
    parser.add_argument("--max-age", type=float, default=60.0)
    args = parser.parse_args(argv)
    if not args.file:
        print(f"{FILE_VARIABLE} is not set", file=sys.stderr)
        return 2
    fresh = is_fresh(Path(args.file), args.max_age)
    if not fresh:
        print(f"{args.file} older than {args.max_age:g} s or missing", file=sys.stderr)
    return 0 if fresh else 1


if __name__ == "__main__":
    sys.exit(main())
else:
    connect()
