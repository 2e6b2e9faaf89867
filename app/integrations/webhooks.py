"""Webhooks per the Standard Webhooks specification (standardwebhooks.com): every delivery is a POST of
`{"type", "timestamp", "data"}` with the headers `webhook-id` (the same on every attempt of one delivery,
so a receiver drops repeats), `webhook-timestamp` and `webhook-signature` = `v1,` base64(HMAC-SHA256(
secret, "{id}.{timestamp}.{body}")), signed by the `standardwebhooks` package.

Events: audit.succeeded, audit.failed, audit.cancelled, audit.violation, audit.leak, sweep.completed. Every
audit event's `data.verdict` holds the result's verdict (`outcome`: violation, leak, inconclusive or
consistent; `headline`; `epsilon_detectable`) with the bounds it used (`epsilon_lower`, `epsilon_theory`,
`violation`), null fields until SUCCEEDED; `data.next_steps` the result's next steps (what would make an
inconclusive audit answer: app/audit/stats/next_steps.py), null when it has none; `data.followed_by` the
audit that takes the first of them when the request asked (`until_answer`), and `data.follows` the audit
whose step this one is. They are written
as rows of the deliveries outbox (one per event and target) in the same transaction that marks the audit
(`audits.events_at`) or the sweep (`sweeps.completed_at`) as done, so each is written exactly once, whoever
moved the audit to its terminal state (runner, cancel, the stale sweep). Delivery is at least once: a due
row is claimed (attempts + 1, `next_attempt_at` = lease), POSTed through app.egress (internal addresses
refused unless ICLAUDIT_WEBHOOK_ALLOWLIST names them), and on a non-2xx answer or an error retried after
backoff = ICLAUDIT_WEBHOOK_BACKOFF_SECONDS · 2^(attempt − 1) (at most 1 h), up to
ICLAUDIT_WEBHOOK_MAX_ATTEMPTS; a refused target fails at once. Only the reply's status is read: its body
never is (the connection is dropped), so a receiver that streams gigabytes back costs nothing.

`audit.violation` fires for a SUCCEEDED audit whose verdict is a violation (a claimed ε refuted), and
`audit.leak` for one whose verdict is a leak (nothing claimed, and leakage above `max_epsilon` shown); for a
scheduled run each fires instead when its condition differs from the schedule's previous run's (either way;
`previous_violation` and `previous_outcome` say what that run found), decided in fire order once every
earlier run has ended (`schedule_runs.alarms_at`), so runs that end out of order send each change once.
"""

from __future__ import annotations

import base64
import json
import logging
import secrets
from collections import Counter
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker
from standardwebhooks import Webhook

from app.audit.kinds.registry import verdict_of
from app.audit.results.digest import Verdict
from app.config import Settings
from app.db import sweeps as sweep_rows
from app.db import webhooks as store
from app.db.models import Audit, AuditState, ScheduleRun, Sweep, WebhookDelivery, WebhookEndpoint, utcnow
from app.egress import EgressRefused, check_url, egress_client
from app.secrets import scrub_value

log = logging.getLogger(__name__)

AUDIT_EVENTS = {
    AuditState.SUCCEEDED: "audit.succeeded",
    AuditState.FAILED: "audit.failed",
    AuditState.CANCELLED: "audit.cancelled",
}
EVENT_TYPES = (*AUDIT_EVENTS.values(), "audit.violation", "audit.leak", "sweep.completed")
MAX_BACKOFF_SECONDS = 3600.0


def new_secret() -> str:
    """`whsec_` + base64 of 24 random bytes, the Standard Webhooks secret format."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(24)).decode()


def new_message_id() -> str:
    return "msg_" + secrets.token_hex(16)


def backoff_seconds(attempt: int, base: float) -> float:
    return min(base * 2 ** (attempt - 1), MAX_BACKOFF_SECONDS)


# --- writing events (the outbox) ----------------------------------------------------------------------


def _event(event_type: str, data: dict[str, Any]) -> dict[str, Any]:
    return {"type": event_type, "timestamp": utcnow().isoformat(), "data": data}


def enqueue_event(
    session: Session, *, tenant_id: str, event_type: str, data: dict[str, Any], notify: str | None
) -> int:
    """One delivery per endpoint of the tenant subscribed to `event_type`, and one to `notify`."""
    payload = _event(event_type, data)
    targets: list[tuple[str | None, str]] = [
        (e.id, e.url) for e in store.endpoints_for(session, tenant_id=tenant_id, event_type=event_type)
    ]
    if notify:
        targets.append((None, notify))
    for endpoint_id, url in targets:
        store.add_delivery(
            session,
            id=new_message_id(),
            tenant_id=tenant_id,
            endpoint_id=endpoint_id,
            url=url,
            event_type=event_type,
            payload=payload,
        )
    return len(targets)


def _verdict(audit: Audit) -> Verdict:
    """The audit's verdict digest; every field null until SUCCEEDED."""
    done = audit.state == AuditState.SUCCEEDED
    return (verdict_of(audit.kind, audit.result) if done else None) or Verdict()


def audit_data(audit: Audit, verdict: Verdict | None = None) -> dict[str, Any]:
    v = verdict if verdict is not None else _verdict(audit)
    return {
        "id": audit.id,
        "kind": audit.kind,
        "state": audit.state,
        "labels": (audit.request or {}).get("labels") or {},
        "request_id": audit.request_id,
        "verdict": v.model_dump(mode="json"),
        "error": audit.error,
        "created_at": audit.created_at.isoformat(),
        "finished_at": audit.finished_at.isoformat() if audit.finished_at else None,
        "next_steps": _next_steps(audit),
        "follows": audit.follows,
        "followed_by": audit.followed_by,
        "links": {"self": f"/v1/audits/{audit.id}", "result": f"/v1/audits/{audit.id}/result"},
    }


def _next_steps(audit: Audit) -> list[dict[str, Any]] | None:
    """The result's `next_steps` (what would make an inconclusive audit answer), as stored; null before
    the audit SUCCEEDED or when it has none."""
    if audit.state != AuditState.SUCCEEDED or not isinstance(audit.result, dict):
        return None
    steps = audit.result.get("next_steps")
    return steps if isinstance(steps, list) and steps else None


def alarms(v: Verdict) -> dict[str, bool | None]:
    """Per alarm event, whether this verdict raises it; None where the verdict cannot say (no claim to
    violate; no verdict at all)."""
    return {
        "audit.violation": v.violation,
        "audit.leak": None if v.outcome is None else v.outcome == "leak",
    }


def _previous_verdict(session: Session, run: ScheduleRun) -> Verdict | None:
    """The verdict of the schedule's latest succeeded run fired before `run`; None if there is none."""
    previous = session.execute(
        select(Audit.kind, Audit.result)
        .join(ScheduleRun, ScheduleRun.audit_id == Audit.id)
        .where(
            ScheduleRun.schedule_id == run.schedule_id,
            ScheduleRun.fire_time < run.fire_time,
            Audit.state == AuditState.SUCCEEDED,
        )
        .order_by(ScheduleRun.fire_time.desc())
        .limit(1)
    ).first()
    return (verdict_of(*previous) or Verdict()) if previous is not None else None


def _enqueue_alarms(session: Session, audit: Audit, raised: dict[str, bool], data: dict[str, Any]) -> int:
    notify = (audit.request or {}).get("notify")
    return sum(
        enqueue_event(session, tenant_id=audit.tenant_id, event_type=event_type, data=data, notify=notify)
        for event_type, up in raised.items()
        if up
    )


def _raised(audit: Audit, verdict: Verdict) -> dict[str, bool]:
    """The alarms this verdict can speak to (a SUCCEEDED audit's only)."""
    if audit.state != AuditState.SUCCEEDED:
        return {}
    return {event: up for event, up in alarms(verdict).items() if up is not None}


def write_audit_events(session: Session, audit: Audit) -> int:
    """The events of one audit that reached a terminal state (the caller holds its events_at mark): its
    state's event, then audit.violation / audit.leak when its verdict raises them. A scheduled run's
    alarms wait for write_run_alarms, which decides them in fire order."""
    from app.integrations import mlflow

    verdict = _verdict(audit)
    data = audit_data(audit, verdict)
    n = mlflow.enqueue(
        session, tenant_id=audit.tenant_id, event_type=mlflow.RUN_EVENT, subject={"audit_id": audit.id}
    )
    n += enqueue_event(
        session,
        tenant_id=audit.tenant_id,
        event_type=AUDIT_EVENTS[AuditState(audit.state)],
        data=data,
        notify=(audit.request or {}).get("notify"),
    )
    if session.scalar(select(ScheduleRun.fire_time).where(ScheduleRun.audit_id == audit.id)) is not None:
        return n
    return n + _enqueue_alarms(session, audit, _raised(audit, verdict), data)


def write_run_alarms(session: Session, run: ScheduleRun) -> int:
    """A scheduled run's audit.violation / audit.leak (the caller holds its alarms_at mark, and every
    earlier run of the schedule has ended): each fires when its condition differs from the previous
    succeeded run's, either way (`previous_violation`, `previous_outcome` say what that run found), or,
    for the first, when it is raised. Deciding in fire order, not in the order runs end, sends each
    change once however the runs' ends interleave."""
    audit = session.get(Audit, run.audit_id) if run.audit_id is not None else None
    if audit is None:
        return 0
    verdict = _verdict(audit)
    raised = _raised(audit, verdict)
    if not raised:
        return 0
    previous = _previous_verdict(session, run)
    data = {
        **audit_data(audit, verdict),
        "schedule_id": run.schedule_id,
        "previous_violation": previous.violation if previous is not None else None,
        "previous_outcome": previous.outcome if previous is not None else None,
    }
    if previous is not None:
        before = alarms(previous)
        raised = {event: up if before[event] is None else before[event] != up for event, up in raised.items()}
    return _enqueue_alarms(session, audit, raised, data)


def sweep_data(session: Session, sweep: Sweep) -> dict[str, Any]:
    from app.integrations.sweeps import resource, result

    rows = sweep_rows.children(session, sweep_id=sweep.id)
    res = resource(sweep, rows)
    table = result(sweep, rows)
    return {
        "id": sweep.id,
        "state": res.state,
        "labels": sweep.labels,
        "counts": {str(k): v for k, v in res.progress.counts.items()},
        "violations": sum(p.violations for p in table.points),
        "outcomes": dict(Counter(r.outcome for r in table.rows if r.outcome is not None)),
        "links": {"self": f"/v1/sweeps/{sweep.id}", "result": f"/v1/sweeps/{sweep.id}/result"},
    }


def write_due_events(sessions: sessionmaker[Session], *, limit: int = 100) -> int:
    """Events for every audit and sweep that finished since the last call; each written exactly once."""
    from app.integrations import mlflow

    written = 0
    with sessions() as session:
        audit_ids = store.audits_without_events(session, limit=limit)
    for audit_id in audit_ids:
        with sessions.begin() as session:
            if store.mark_events_written(session, audit_id=audit_id):
                audit = session.get(Audit, audit_id)
                assert audit is not None
                written += write_audit_events(session, audit)
    decided = True
    while decided:  # a run decided here can free the next run of its schedule
        decided = False
        with sessions() as session:
            runs = store.runs_awaiting_alarms(session, limit=limit)
        for schedule_id, fire_time in runs:
            with sessions.begin() as session:
                if store.mark_alarms_decided(session, schedule_id=schedule_id, fire_time=fire_time):
                    decided = True
                    run = session.get(ScheduleRun, (schedule_id, fire_time))
                    assert run is not None
                    written += write_run_alarms(session, run)
    with sessions() as session:
        sweep_ids = sweep_rows.finished_sweeps(session, limit=limit)
    for sweep_id in sweep_ids:
        with sessions.begin() as session:
            if sweep_rows.mark_completed(session, sweep_id=sweep_id):
                sweep = session.get(Sweep, sweep_id)
                assert sweep is not None
                written += mlflow.enqueue(
                    session,
                    tenant_id=sweep.tenant_id,
                    event_type=mlflow.SWEEP_EVENT,
                    subject={"sweep_id": sweep.id},
                )
                written += enqueue_event(
                    session,
                    tenant_id=sweep.tenant_id,
                    event_type="sweep.completed",
                    data=sweep_data(session, sweep),
                    notify=sweep.notify,
                )
    return written


# --- delivering ---------------------------------------------------------------------------------------


def claim_due(sessions: sessionmaker[Session], *, lease_seconds: float) -> list[tuple[str, int]]:
    now = utcnow()
    with sessions.begin() as session:
        return store.claim_due(session, now=now, lease_until=now + timedelta(seconds=lease_seconds))


def sign(secret: str, message_id: str, body: str, when: datetime | None = None) -> dict[str, str]:
    """The Standard Webhooks headers for `body`."""
    when = when or datetime.now(UTC)
    return {
        "webhook-id": message_id,
        "webhook-timestamp": str(int(when.timestamp())),
        "webhook-signature": Webhook(secret).sign(message_id, when, body),
    }


def _secret_of(sessions: sessionmaker[Session], delivery: WebhookDelivery) -> str | None:
    with sessions() as session:
        if delivery.endpoint_id is None:
            return store.notify_secret(session, tenant_id=delivery.tenant_id, make=new_secret)
        endpoint = session.get(WebhookEndpoint, delivery.endpoint_id)
        return endpoint.secret if endpoint is not None else None


def _deliver_mlflow(
    delivery: WebhookDelivery, *, sessions: sessionmaker[Session], settings: Settings
) -> tuple[str, str, int | None]:
    """(state, error, status) of one attempt to write a run to an MLflow sink (app/integrations/mlflow.py),
    its failures mapped as a webhook POST's are."""
    from app.integrations import mlflow

    try:
        mlflow.deliver(delivery, sessions=sessions, settings=settings)
        return store.SUCCEEDED, "", None
    except mlflow.MlflowError as exc:
        return (store.FAILED if exc.permanent else store.PENDING), exc.message, exc.status
    except EgressRefused as exc:
        return store.FAILED, f"refused: {exc.reason}", None
    except httpx.HTTPError as exc:
        log.info("mlflow %s: %s", delivery.id, f"{type(exc).__name__}: {exc}"[:500])
        return store.PENDING, f"{type(exc).__name__} (the tracking server could not be reached)", None
    except Exception as exc:  # anything else still counts as an attempt, so the limit ends it
        log.warning("mlflow %s failed: %s", delivery.id, type(exc).__name__, exc_info=True)
        return store.PENDING, f"the delivery failed ({type(exc).__name__})", None


def deliver(delivery_id: str, attempt: int, *, sessions: sessionmaker[Session], settings: Settings) -> str:
    """POST attempt `attempt` of one delivery and record the outcome; returns the delivery's new state."""
    with sessions() as session:
        delivery = session.get(WebhookDelivery, delivery_id)
        if delivery is None or delivery.state != store.PENDING or delivery.attempts != attempt:
            return "skipped"  # deleted, done, or claimed again since this attempt was sent
        session.expunge(delivery)
    status: int | None = None
    if delivery.sink_id is not None:
        state, error, status = _deliver_mlflow(delivery, sessions=sessions, settings=settings)
    elif (secret := _secret_of(sessions, delivery)) is None:
        state, error = store.FAILED, "the webhook endpoint was deleted"
    else:
        # no target secret known to this process goes out, whatever the stored payload holds
        body = json.dumps(scrub_value(delivery.payload), separators=(",", ":"), ensure_ascii=False)
        headers = {
            **sign(secret, delivery.id, body),
            "content-type": "application/json",
            "user-agent": "iclaudit-webhooks/1",
        }
        request_id = (delivery.payload.get("data") or {}).get("request_id")
        if request_id:  # the X-Request-ID of the request that submitted the audit
            headers["x-request-id"] = request_id
        try:
            allow = settings.webhook_egress
            check_url(delivery.url, allow)
            with (
                egress_client(allow, timeout=settings.webhook_timeout_seconds) as client,
                client.stream("POST", delivery.url, content=body.encode(), headers=headers) as reply,
            ):
                status = reply.status_code  # the reply's body is never read: closing drops the connection
            ok = 200 <= status < 300
            state, error = (store.SUCCEEDED, "") if ok else (store.PENDING, f"the receiver answered {status}")
        except EgressRefused as exc:  # permanent (a URL or address this service will not call): no retry
            state, error = store.FAILED, f"refused: {exc.reason}"
        except httpx.HTTPError as exc:  # the tenant sees the class, never DNS or socket details
            log.info("webhook %s attempt %d: %s", delivery_id, attempt, f"{type(exc).__name__}: {exc}"[:500])
            state, error = store.PENDING, f"{type(exc).__name__} (the receiver could not be reached)"
        except Exception as exc:  # anything else still counts as an attempt, so the limit ends it
            log.warning("webhook %s attempt %d failed: %s", delivery_id, attempt, type(exc).__name__)
            state, error = store.PENDING, f"the delivery failed ({type(exc).__name__})"
    next_at = None
    if state == store.PENDING:
        if attempt >= settings.webhook_max_attempts:
            state, error = store.FAILED, f"gave up after {attempt} attempts; last: {error}"
        else:
            next_at = utcnow() + timedelta(seconds=backoff_seconds(attempt, settings.webhook_backoff_seconds))
    with sessions.begin() as session:
        store.record_attempt(
            session,
            delivery_id=delivery_id,
            attempt=attempt,
            state=state,
            status=status,
            error=error,
            next_attempt_at=next_at,
        )
    log.info("webhook %s (%s) attempt %d → %s %s", delivery_id, delivery.event_type, attempt, state, error)
    return state
