"""Plans are computed where audits run, never in the API process.

A plan rehearses the audit's own computation (app/audit/plan.py: seconds of CPU); in the API process it
would hold the event loop's GIL and the CPU its polls need. The API checks the request as a submit does
(422s), then hands the body to:

- the embedded executor's plan process (`InlinePlanner`): a worker process like the audit ones
  (app/jobs/pool.py: the same forkserver, the same lowered priority, its own database engine), one per API
  process, started at the first plan, fed plans in tenant turns (`FairQueue`) over a pipe. It is apart
  from the audit processes, so a plan never waits behind an hours-long audit, nor an audit behind plans;
- with ICLAUDIT_EXECUTOR=celery, a Celery task `iclaudit.plan_audit` on the `plans` queue (which
  `iclaudit worker` consumes), whose answer comes back as a Redis list `iclaudit:plan:<id>` (BLPOP).

Both end in `compute_plan`, which reads the throughput from the tenant's finished audits
(`measured_rates`) and plans the request. The API process only waits, in a worker thread, up to
PLAN_WAIT_SECONDS (then `PlanUnavailable`: 503). app/api/connections.py's PlanSlots still lets a tenant
have one plan at a time, now to share the planning worker's time among tenants.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any, Protocol

from sqlalchemy.orm import Session, sessionmaker

from app import observability
from app.config import Settings
from app.db.models import Audit, AuditState
from app.jobs.checks import Rejected, check_request
from app.jobs.fair_queue import FairQueue

log = logging.getLogger(__name__)

PLAN_WAIT_SECONDS = 300
"""How long the API waits for a worker to answer a plan (then 503, and the plan is stopped)."""
PLAN_GRACE_SECONDS = 10.0
"""How long a plan process has to stop a plan past its deadline (or after its caller went away) before it
is killed."""
PLAN_STOP_KEY = "iclaudit:plan-stop:"
PLAN_TASK = "iclaudit.plan_audit"
PLAN_QUEUE = "plans"
PLAN_KEY = "iclaudit:plan:"
PLAN_HISTORY = 20
"""Finished audits a plan's throughput is measured from (the tenant's latest of the same kind and model, or
of the same endpoint)."""


class PlanUnavailable(Exception):
    """No worker answered the plan in time (or the plan process died computing it)."""


def _origin(url: str) -> str:
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def measured_rates(session: Session, *, tenant_id: str, request: Any) -> Any:
    """Seconds per model call of the tenant's latest SUCCEEDED audits of this kind and model, and per
    endpoint call of those to this endpoint's origin, from (calls, finished − started) of up to
    PLAN_HISTORY of each (calls as the plan counts them: app.audit.plan.run_calls): a fixed part and a
    per-call part when their calls differ (app.audit.plan.fit_rate), else the median seconds per call.
    An audit's `model_load_seconds` (the model's load in a cold worker process) is taken out of its
    seconds and reported apart: the latest one measured for the model."""
    from app.audit.plan import Rates, run_calls
    from app.db.scoping import owned

    endpoint = getattr(getattr(request, "mechanism", None), "endpoint", None)
    rows = session.scalars(
        owned(Audit, tenant_id)
        .where(Audit.kind == request.kind, Audit.state == AuditState.SUCCEEDED, Audit.started_at.is_not(None))
        .order_by(Audit.finished_at.desc())
        .limit(20 * PLAN_HISTORY)
    ).all()
    model: list[tuple[int, float]] = []
    url: list[tuple[int, float]] = []
    load: float | None = None
    for audit in rows:
        body = audit.request or {}
        if audit.finished_at is None or audit.started_at is None:
            continue
        loaded = audit.model_load_seconds or 0.0
        if loaded and load is None and body.get("model") == request.model:
            load = loaded  # the latest measured load of this model
        seconds = (audit.finished_at - audit.started_at).total_seconds() - loaded
        calls = run_calls(audit.kind, body, audit.result or {})
        their = ((body.get("mechanism") or {}).get("endpoint") or {}).get("url")
        if calls is None:
            continue
        if calls[0] == "endpoint":
            if endpoint is not None and their and _origin(their) == _origin(endpoint.url):
                url.append((calls[1], seconds))
        elif body.get("model") == request.model and calls[1]:
            model.append((calls[1], seconds))
    model, url = model[:PLAN_HISTORY], url[:PLAN_HISTORY]
    basis = ", ".join(
        f"{len(v)} finished {request.kind} audits {what}"
        for v, what in ((model, f"of {request.model}"), (url, "of this endpoint"))
        if v
    )
    return Rates.fitted(
        model, url, basis=basis or "no finished audit to measure from", model_load_seconds=load
    )


def compute_plan(
    *,
    session_factory: sessionmaker[Session],
    tenant_id: str,
    body: dict,
    settings: Settings,
    check: Callable[[], None] | None = None,
) -> dict:
    """The plan of a checked request body, in a worker: {"plan": …}, {"rejected": message} when the run
    itself would refuse it (app.audit.runtime.AuditError), or {"stopped": reason} when `check` stopped it
    (app.audit.plan.PlanStopped: its caller went away, its deadline passed)."""
    from app.audit.kinds.registry import kind_module
    from app.audit.plan import PlanStopped, model_tokens, plan_request
    from app.audit.runtime import AuditError
    from app.jobs.providers import TenantDatasets

    request = kind_module(body["kind"]).Request.model_validate(body)
    with session_factory() as session:
        rates = measured_rates(session, tenant_id=tenant_id, request=request)
    datasets = TenantDatasets(
        session_factory=session_factory,
        tenant_id=tenant_id,
        data_dir=settings.data_dir,
        max_rows=settings.upload_max_rows,
    )
    endpoint = getattr(getattr(request, "mechanism", None), "name", None) == "http_endpoint"
    try:
        tokens = None if endpoint or request.kind == "bound" else model_tokens(request.model)
        plan = plan_request(
            request,
            datasets=datasets,
            rates=rates,
            tokens=tokens,
            max_trials=settings.max_trials,
            check=check,
        )
    except AuditError as exc:
        return {"rejected": f"this request cannot be planned: {exc}"}
    except PlanStopped as exc:
        return {"stopped": str(exc)}
    return {"plan": plan}


def stop_check(deadline: float, stop: Callable[[], bool], timeout: float) -> Callable[[], None]:
    """A plan's `check`: PlanStopped once the wall clock passes `deadline` (time.time()) or `stop()` says its
    caller went away."""
    from app.audit.plan import PlanStopped

    def check() -> None:
        if time.time() > deadline:
            raise PlanStopped(
                f"the plan did not finish within {timeout:g} s (ICLAUDIT_PLAN_TIMEOUT_SECONDS) and was stopped"
            )
        if stop():
            raise PlanStopped("its caller went away; the plan was stopped")

    return check


def _plan_child(
    conn: Connection, lifeline: Connection, stop: Any, settings: Settings, level: int, environ: dict
) -> None:
    """A plan process: `(plan_id, request_id, tenant_id, body)` in, `("started", plan_id)` when it starts
    and `("planned", (plan_id, answer))` out (`("log", record)` for its log lines, as the audit processes
    send theirs); None stops it. A plan stops ICLAUDIT_PLAN_TIMEOUT_SECONDS after it started, or when the
    API process sets `stop` (its caller went away)."""
    from app.jobs.pool import child_setup

    send = child_setup(conn, lifeline, level, environ)
    from app.db.engine import make_engine, make_session_factory

    engine = make_engine(
        settings.sqlalchemy_url, pool_size=1, max_overflow=2, connect_retry_seconds=5, name="iclaudit-plans"
    )
    sessions = make_session_factory(engine)
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                return
            if message is None:
                return
            plan_id, request_id, tenant_id, body = message
            send(("started", plan_id))
            deadline = time.time() + settings.plan_timeout_seconds
            check = stop_check(deadline, stop.is_set, settings.plan_timeout_seconds)
            with observability.bind(request_id=request_id):
                try:
                    answer = compute_plan(
                        session_factory=sessions,
                        tenant_id=tenant_id,
                        body=body,
                        settings=settings,
                        check=check,
                    )
                except Exception as exc:
                    log.exception("plan %s failed", plan_id)
                    answer = {"error": type(exc).__name__}
            send(("planned", (plan_id, answer)))
    finally:
        engine.dispose()


@dataclass
class _Plan:
    """One plan waiting for, or held by, a plan process."""

    request_id: str | None
    tenant_id: str
    body: dict
    done: concurrent.futures.Future[dict] = field(default_factory=concurrent.futures.Future)
    gone: threading.Event = field(default_factory=threading.Event)  # its caller went away


class _PlanProcess:
    """One plan process (`_plan_child`) and the slot thread's side of it: started at its first plan and
    again after it died or was killed."""

    def __init__(self, settings: Settings, index: int) -> None:
        self._settings = settings
        self._index = index
        self._answers: dict[str, dict] = {}
        self._started: dict[str, float] = {}  # plan id → when the process started computing it (monotonic)
        self._changed = threading.Condition()
        self._process: Any = None
        self._conn: Connection | None = None
        self._lifeline: Connection | None = None
        self._stop: Any = None
        self._alive = False
        self._life = threading.Lock()  # a start and a stop (the slot thread's, close's) one at a time
        self.pid: int | None = None

    def _start(self) -> None:
        with self._life:
            self._start_locked()

    def _start_locked(self) -> None:
        from app.jobs.pool import context

        ctx = context()
        self._conn, child = ctx.Pipe(duplex=True)
        lifeline, self._lifeline = ctx.Pipe(duplex=False)
        self._stop = ctx.Event()
        level = min(logging.getLogger().getEffectiveLevel(), logging.INFO)
        self._process = ctx.Process(
            target=_plan_child,
            args=(child, lifeline, self._stop, self._settings, level, dict(os.environ)),
            name=f"iclaudit-plans-{self._index}",
            daemon=True,
        )
        self._process.start()
        child.close()
        lifeline.close()
        self.pid = self._process.pid
        self._alive = True
        threading.Thread(target=self._read, args=(self._conn,), name="plan-reader", daemon=True).start()

    def _read(self, conn: Connection) -> None:
        while True:
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                break
            if kind == "log":
                logger = logging.getLogger(payload.name)
                if logger.isEnabledFor(payload.levelno):
                    logger.handle(payload)
            elif kind == "started":
                with self._changed:
                    self._started[payload] = time.monotonic()
            elif kind == "planned":
                with self._changed:
                    self._answers[payload[0]] = payload[1]
                    self._changed.notify_all()
        with self._changed:
            self._alive = False
            self._changed.notify_all()

    def compute(self, plan: _Plan) -> dict | None:
        """Send one plan to the process (started if need be) and wait for its answer; None if it died. The
        process stops the plan itself at its deadline, or when told here that its caller went away (or that
        the deadline passed PLAN_GRACE_SECONDS ago); one that has not answered PLAN_GRACE_SECONDS after that is
        killed (a step of the rehearsal that never checks)."""
        if self._process is None or not self._alive or not self._process.is_alive():
            self.stop(timeout=0)
            self._start()
        plan_id = uuid.uuid4().hex
        self._stop.clear()
        try:
            self._conn.send((plan_id, plan.request_id, plan.tenant_id, plan.body))  # type: ignore[union-attr]
        except OSError:
            return None
        stopped_at: float | None = None
        limit = self._settings.plan_timeout_seconds + PLAN_GRACE_SECONDS
        with self._changed:
            while plan_id not in self._answers and self._alive:
                self._changed.wait(0.25)
                began = self._started.get(plan_id)
                late = began is not None and time.monotonic() - began > limit
                if stopped_at is None and (plan.gone.is_set() or late):
                    self._stop.set()
                    stopped_at = time.monotonic()
                if stopped_at is not None and time.monotonic() - stopped_at > PLAN_GRACE_SECONDS:
                    break
            answer = self._answers.pop(plan_id, None)
            self._started.pop(plan_id, None)
        if answer is None and stopped_at is not None:
            log.warning("plan process %s did not stop its plan; killed", self.pid)
            self.stop(timeout=0)
            return {"stopped": "the plan was stopped (its caller went away or its deadline passed)"}
        return answer

    def stop(self, timeout: float) -> None:
        with self._life:
            self._stop_locked(timeout)

    def _stop_locked(self, timeout: float) -> None:
        if self._process is None:
            return
        with contextlib.suppress(OSError):
            self._conn.send(None)  # type: ignore[union-attr]
        self._process.join(timeout)
        if self._process.is_alive():
            self._process.kill()
            self._process.join(5)
        for conn in (self._conn, self._lifeline):
            if conn is not None:
                conn.close()
        self._process = self._conn = self._lifeline = None
        with self._changed:
            self._alive = False  # a plan being waited for fails now instead of at its process's end
            self._changed.notify_all()


class InlinePlanner:
    """The embedded executor's plan processes (the module docstring): ICLAUDIT_PLAN_WORKERS of them, each
    fed by a slot thread from one FairQueue (the tenant served least recently first), so a tenant's plan
    (one at a time: PlanSlots) holds at most one process and another tenant's plan takes the next free one.
    Each plan stops at its deadline (ICLAUDIT_PLAN_TIMEOUT_SECONDS) or when its caller goes away."""

    def __init__(self, settings: Settings) -> None:
        self._settings = settings
        self._queue = FairQueue()
        self._stopping = threading.Event()
        self._processes = [_PlanProcess(settings, i) for i in range(settings.plan_workers)]
        self._slots = [
            threading.Thread(target=self._work, args=(process,), name=f"plan-slot-{i}", daemon=True)
            for i, process in enumerate(self._processes)
        ]
        for slot in self._slots:
            slot.start()

    @property
    def pids(self) -> list[int]:
        """The started plan processes' ids (tests stop them to show where plans are computed)."""
        return [p.pid for p in self._processes if p.pid is not None]

    @property
    def pid(self) -> int | None:
        """The first plan process's id, once started."""
        return self._processes[0].pid

    def _work(self, process: _PlanProcess) -> None:
        while (plan := self._queue.get(self._stopping)) is not None:
            if plan.gone.is_set() or not plan.done.set_running_or_notify_cancel():
                continue  # its caller stopped waiting
            try:
                answer = process.compute(plan)
            except Exception as exc:
                plan.done.set_exception(exc)
                continue
            if answer is None:
                plan.done.set_exception(PlanUnavailable("the plan process died computing this plan"))
            else:
                plan.done.set_result(answer)

    def plan(
        self, tenant_id: str, body: dict, timeout: float | None = None, gone: threading.Event | None = None
    ) -> dict:
        """The worker's answer to one plan (blocks the calling thread, not the event loop), waiting up to
        `timeout` seconds (`plan_wait`); `gone` set by the caller (its client went away) stops it."""
        timeout = plan_wait(self._settings) if timeout is None else timeout
        plan = _Plan(observability.request_id.get(), tenant_id, body, gone=gone or threading.Event())
        self._queue.put(tenant_id, plan)
        waited = time.monotonic() + timeout
        while True:
            try:
                return plan.done.result(0.25)
            except concurrent.futures.TimeoutError:
                pass
            if plan.gone.is_set():
                plan.done.cancel()  # dropped where it waits; stopped where it runs
                raise PlanUnavailable("its caller went away; the plan was stopped")
            if time.monotonic() > waited:
                plan.gone.set()
                plan.done.cancel()
                raise PlanUnavailable(f"no worker answered the plan within {timeout:.0f} s; it was stopped")

    def close(self) -> None:
        self._stopping.set()
        self._queue.wake_all()
        for process in self._processes:
            with process._changed:
                process._alive = False  # a plan being waited for fails now instead of at its process's end
                process._changed.notify_all()
        for slot in self._slots:
            slot.join(10)
        for process in self._processes:
            process.stop(timeout=10)


def plan_wait(settings: Settings) -> float:
    """How long the API waits for a plan's answer: PLAN_WAIT_SECONDS, for its turn, a plan process's start
    and the plan (whose own computation stops at ICLAUDIT_PLAN_TIMEOUT_SECONDS); then 503, and the plan is
    stopped wherever it is."""
    return PLAN_WAIT_SECONDS


class CeleryPlanner:
    """Plans as Celery tasks on the `plans` queue; each answer is pushed to a Redis list (BLPOP here)."""

    def __init__(self, settings: Settings) -> None:
        from app.jobs.broker import create_celery

        self._celery = create_celery(settings)
        self._broker_url = settings.required_broker_url
        self._settings = settings

    def plan(
        self, tenant_id: str, body: dict, timeout: float | None = None, gone: threading.Event | None = None
    ) -> dict:
        import redis
        from kombu.exceptions import OperationalError

        timeout = plan_wait(self._settings) if timeout is None else timeout
        plan_id = uuid.uuid4().hex
        request_id = observability.request_id.get()
        got = None
        try:  # a broker down is a 503 like no worker answering, not a 500 (as schemathesis checks)
            self._celery.send_task(
                PLAN_TASK,
                args=[plan_id, tenant_id, body],
                kwargs={"request_id": request_id} if request_id else {},
                queue=PLAN_QUEUE,
                expires=timeout,  # a plan nobody waits for any more is not computed
            )
            client = redis.Redis.from_url(self._broker_url, socket_connect_timeout=5, socket_timeout=15)
            try:
                waited = time.monotonic() + timeout
                while got is None and time.monotonic() < waited:
                    if gone is not None and gone.is_set():  # the worker's check reads this key
                        client.set(PLAN_STOP_KEY + plan_id, "1", ex=PLAN_WAIT_SECONDS)
                        raise PlanUnavailable("its caller went away; the plan was stopped")
                    got = client.blpop([PLAN_KEY + plan_id], timeout=1)
            finally:
                client.close()
        except (OperationalError, redis.exceptions.ConnectionError) as exc:
            raise PlanUnavailable(f"the queue is unreachable ({type(exc).__name__})") from None
        if got is None:
            raise PlanUnavailable(f"no worker answered the plan within {timeout:.0f} s")
        return json.loads(got[1])

    def close(self) -> None:
        self._celery.close()


def answer_plan(
    plan_id: str,
    tenant_id: str,
    body: dict,
    *,
    sessions: sessionmaker[Session],
    settings: Settings,
) -> None:
    """A Celery worker's side of a plan: compute it (stopped ICLAUDIT_PLAN_TIMEOUT_SECONDS after it starts,
    or once the API process set the plan's stop key: its caller went away) and push the answer for the
    waiting API process."""
    import redis

    client = redis.Redis.from_url(settings.required_broker_url, socket_connect_timeout=5)
    asked_at, stopped = 0.0, False

    def stop() -> bool:  # the stop key, read at most once a second
        nonlocal asked_at, stopped
        if not stopped and time.monotonic() - asked_at >= 1.0:
            asked_at = time.monotonic()
            with contextlib.suppress(redis.exceptions.RedisError):
                stopped = bool(client.exists(PLAN_STOP_KEY + plan_id))
        return stopped

    check = stop_check(time.time() + settings.plan_timeout_seconds, stop, settings.plan_timeout_seconds)
    try:
        try:
            answer = compute_plan(
                session_factory=sessions, tenant_id=tenant_id, body=body, settings=settings, check=check
            )
        except Exception as exc:
            log.exception("plan %s failed", plan_id)
            answer = {"error": type(exc).__name__}
        client.rpush(PLAN_KEY + plan_id, json.dumps(answer))
        client.expire(PLAN_KEY + plan_id, PLAN_WAIT_SECONDS)
    finally:
        client.close()


_lock = threading.Lock()


class HoldsPlanner(Protocol):
    """Where a process keeps its planner (the API's AppState, app/api/state.py)."""

    settings: Settings
    planner: InlinePlanner | CeleryPlanner | None


def planner(state: HoldsPlanner) -> InlinePlanner | CeleryPlanner:
    """The process's planner, made at its first plan (the executor's kind)."""
    with _lock:
        if state.planner is None:
            settings = state.settings
            state.planner = (
                CeleryPlanner(settings) if settings.executor == "celery" else InlinePlanner(settings)
            )
        return state.planner


def close_planner(state: HoldsPlanner) -> None:
    """Stop the process's planner, if a plan started one (the app's shutdown)."""
    if state.planner is not None:
        state.planner.close()
        state.planner = None


def check_plan(session: Session, tenant_id: str, request: Any, settings: Settings) -> None:
    """The checks of a submit (422s), the quota aside: a plan stores nothing."""
    check_request(session, tenant_id=tenant_id, request=request, settings=settings, quota=False)
    check_plan_cost(request, settings)


def check_plan_cost(request: Any, settings: Settings) -> None:
    """A plan whose rehearsal would pass ICLAUDIT_PLAN_MAX_PAIRS record–context pairs is refused before any
    rehearsal (422 with the numbers, at the field that asks for the more of them)."""
    from app.audit.plan import rehearsed_pairs

    cost = rehearsed_pairs(request)
    if cost is None or cost[0] <= settings.plan_max_pairs:
        return
    pairs, field = cost
    attack = request.attack
    raise Rejected(
        f"$.{field}",
        f"{field}: a plan rehearses every record in every context: attack.canaries × attack.contexts = "
        f"{attack.canaries:,} × {attack.contexts:,} = {pairs:,} pairs, above this service's {settings.plan_max_pairs:,} "
        "for a plan (ICLAUDIT_PLAN_MAX_PAIRS). Plan fewer (its calls and time grow in proportion) or submit "
        "the audit itself.",
        "SERVER_LIMIT",
    )


def plan_of(answer: dict) -> dict:
    """The plan in a worker's answer; Rejected (422) when the run would refuse the request."""
    if "rejected" in answer:
        raise Rejected("$", answer["rejected"])
    if "stopped" in answer:
        raise PlanUnavailable(answer["stopped"])
    if "plan" not in answer:
        raise RuntimeError(f"the plan failed in the worker ({answer.get('error')})")
    return answer["plan"]
