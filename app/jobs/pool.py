"""The inline executor's worker processes: each runs one audit at a time, loads its models once (kept for
the life of the process) and has its own database engine; the API process only hands out audit ids.

Processes start from a `forkserver` (a clean single-threaded server process that imports this module once,
then forks a child per worker cheaply): forking the API process itself, which holds threads, locks and
possibly torch, is unsafe. Parent and child talk over one duplex pipe per process:

- parent → child: `(audit_id, request_id)` to run, or None to stop;
- child → parent: `("log", record)` (its log records, handled by the parent's loggers so the operator's
  log and its format are the API's), `("wrote", None)` (a commit: the parent wakes its long-polls at once)
  and `("done", audit_id)`;
- and, in shared memory, the child's count of writes begun and ended (app.jobs.writes), which the parent's
  kept poll answers are checked against.

A child that dies (SIGKILL, out of memory) is noticed by its slot, which starts a new one; the audit it held
is RUNNING with a heartbeat that goes stale, so the sweep re-runs it (architecture.md, *Running exactly once*).
"""

from __future__ import annotations

import contextlib
import gc
import logging
import multiprocessing
import os
import signal
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Event as ProcessEvent
from typing import Any

from sqlalchemy import event
from sqlalchemy.orm import Session

from app.config import Settings, get_settings
from app.db.retry import is_transient, short_reason
from app.jobs.providers import preload_in_background
from app.jobs.runner import run_audit
from app.jobs.writes import WriteCounts
from app.observability import ContextFilter, bind

log = logging.getLogger(__name__)

AUDIT_NICE = 10
"""Added to the nice value of the audit processes (and of the threads the thread executor used): an audit
gets the CPU the requests leave, so polls and /healthz stay fast while it runs; alone it gets a whole core."""

PRELOAD = [
    "app.jobs.runner",
    "app.jobs.providers",
    "app.jobs.pool",
    "numpy",
    "scipy.stats",
    "transformers.utils.logging",
]
"""Imported once by the forkserver, so each worker process starts with them (~7 s of imports on a busy
2-core machine) and shares their memory with the others."""

MODEL_PRELOAD = ["torch", "app.engines.transformers_engine", "transformers.models.llama.modeling_llama"]
"""Also preloaded when the workers preload the default model (ICLAUDIT_PRELOAD_MODELS), which imports them
anyway: torch and transformers take ~220 MB in a process that imports its own (the packaged model is a
llama). Importing torch starts no thread (its intra-op pool starts at the first operator, which the
forkserver never runs), so forking after it is safe. The weights themselves are shared through a
memory-mapped file (app/engines/shared_weights.py)."""

_context: multiprocessing.context.ForkServerContext | None = None
_context_lock = threading.Lock()


def context() -> multiprocessing.context.ForkServerContext:
    """The forkserver context, its server preloading this module (and through it the runner and the db)."""
    global _context
    with _context_lock:
        if _context is None:
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload(PRELOAD + (MODEL_PRELOAD if get_settings().preload_models else []))
            _context = ctx
        return _context


class _PipeLog(logging.Handler):
    """Sends each record, formatted and stamped with its context (audit, tenant, request), to the parent."""

    def __init__(self, send: Any) -> None:
        super().__init__()
        self._send = send
        self.addFilter(ContextFilter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            record.msg = record.getMessage()
            record.args = None
            if record.exc_info and not record.exc_text:
                record.exc_text = logging.Formatter().formatException(record.exc_info)
            if record.exc_text:  # set already when the secret scrubber cleaned it (app/secrets.py)
                record.msg = f"{record.msg}\n{record.exc_text}"
            record.exc_info = record.exc_text = None
            self._send(("log", record))
        except Exception:  # the parent is gone: nothing to log to
            pass


def _die_with_api(lifeline: Connection) -> None:
    """Exit at once when the API process ends (the write end of `lifeline`, which only it holds, closes):
    an API process killed outright leaves no audit computing unwatched; the sweep of its next start
    re-runs the audit. (The forkserver, the parent of this process, lives as long as its children.)"""

    def watch() -> None:
        with contextlib.suppress(EOFError, OSError):
            lifeline.recv()
        os._exit(1)

    threading.Thread(target=watch, name="lifeline", daemon=True).start()


def child_setup(
    conn: Connection, lifeline: Connection, log_level: int, environ: dict[str, str]
) -> Callable[[tuple[str, Any]], None]:
    """What every child process of the API (audit workers, the plan process) does first: take the parent's
    environment (the forkserver's is older: engines and secrets read it), ignore SIGINT/SIGTERM (Ctrl-C
    reaches the whole process group, and the API stops its children itself, a running audit back to
    PENDING), die with the API (`lifeline`), run below the API's priority (later threads inherit it), and
    log through `conn` as ("log", record). Returns the locked `send` over `conn`."""
    gc.freeze()  # what the forkserver imported lives as long as this process: collections leave it shared
    os.environ.clear()
    os.environ.update(environ)
    from app.config import get_settings

    get_settings.cache_clear()
    lock = threading.Lock()

    def send(message: tuple[str, Any]) -> None:
        with lock:
            conn.send(message)

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _die_with_api(lifeline)
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0) + AUDIT_NICE)
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    root.addHandler(_PipeLog(send))
    root.setLevel(log_level)
    return send


def child_main(
    conn: Connection,
    lifeline: Connection,
    settings: Settings,
    stopping: ProcessEvent,
    log_level: int,
    environ: dict[str, str],
    writes: Any = None,
    slot: int = 0,
) -> None:
    """A worker process: take audit ids from `conn` and run each to its end; `stopping` (set by the parent
    at shutdown) makes a running audit go back to PENDING at its next progress call. `environ` is the
    parent's environment when it started the process (the forkserver's is older): engines and secrets
    read it."""
    send = child_setup(conn, lifeline, log_level, environ)
    from app.db.engine import make_engine, make_session_factory

    def wrote(_session: Session) -> None:
        with contextlib.suppress(OSError):
            send(("wrote", None))

    event.listen(Session, "after_commit", wrote)
    if writes is not None:  # counted in shared memory before each write can be seen (app.jobs.writes)
        WriteCounts(0, counts=writes).listen(slot)
    engine = make_engine(
        settings.sqlalchemy_url, pool_size=2, max_overflow=2, connect_retry_seconds=5, name="iclaudit-audits"
    )
    sessions = make_session_factory(engine)
    if settings.preload_models:
        preload_in_background(settings.default_model)
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):  # the parent is gone
                return
            if message is None:
                return
            audit_id, request_id = message
            with bind(request_id=request_id):
                while not stopping.is_set():
                    try:
                        run_audit(audit_id, session_factory=sessions, settings=settings, stopping=stopping)
                        break
                    except Exception as exc:
                        if not is_transient(exc):
                            log.exception("audit %s: the runner failed", audit_id)
                            break
                        log.warning(
                            "audit %s: database unavailable (%s); trying again", audit_id, short_reason(exc)
                        )
                        stopping.wait(2.0)
            send(("done", audit_id))
    finally:
        engine.dispose()


class WorkerProcess:
    """The parent's handle on one worker process, and a thread that reads what it sends."""

    def __init__(
        self,
        *,
        settings: Settings,
        stopping: ProcessEvent,
        name: str,
        on_write: Any,
        writes: Any = None,
        slot: int = 0,
    ) -> None:
        ctx = context()
        self._conn, child_conn = ctx.Pipe(duplex=True)
        lifeline, self._lifeline = ctx.Pipe(duplex=False)  # nothing is sent: it closes when this process ends
        level = min(logging.getLogger().getEffectiveLevel(), logging.INFO)
        self.process = ctx.Process(
            target=child_main,
            args=(child_conn, lifeline, settings, stopping, level, dict(os.environ), writes, slot),
            name=name,
            daemon=True,
        )
        self.process.start()
        child_conn.close()  # so that the parent's recv sees EOF when the child dies
        lifeline.close()
        self._on_write = on_write
        self._done: list[str] = []
        self._changed = threading.Condition()
        self._alive = True
        self._reader = threading.Thread(target=self._read, name=f"{name}-reader", daemon=True)
        self._reader.start()

    def _read(self) -> None:
        while True:
            try:
                kind, payload = self._conn.recv()
            except (EOFError, OSError):
                break
            if kind == "log":
                logger = logging.getLogger(payload.name)
                if logger.isEnabledFor(payload.levelno):
                    logger.handle(payload)
            elif kind == "wrote":
                if self._on_write is not None:
                    self._on_write()
            elif kind == "done":
                with self._changed:
                    self._done.append(payload)
                    self._changed.notify_all()
        with self._changed:
            self._alive = False
            self._changed.notify_all()

    def run(self, audit_id: str, request_id: str | None) -> bool:
        """Send the audit and wait until the process reports it done (True) or dies (False)."""
        try:
            self._conn.send((audit_id, request_id))
        except OSError:
            self._alive = False
            return False
        with self._changed:
            while audit_id not in self._done and self._alive:
                self._changed.wait(1.0)
            if audit_id in self._done:
                self._done.remove(audit_id)
                return True
        return False

    @property
    def alive(self) -> bool:
        return self._alive and self.process.is_alive()

    def stop(self, timeout: float) -> None:
        """Ask the process to end (after the audit it runs, which `stopping` cuts short); kill it past
        `timeout` seconds."""
        with contextlib.suppress(OSError):
            self._conn.send(None)
        self.process.join(timeout)
        if self.process.is_alive():
            log.warning("audit process %s did not stop in %.0f s; killed", self.process.name, timeout)
            self.process.kill()
            self.process.join(5)
        self._reader.join(5)
        self._conn.close()
        self._lifeline.close()
