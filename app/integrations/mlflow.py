"""MLflow sinks: every finished audit of the tenant becomes a run in the sink's experiment, spoken over
MLflow's REST API (`/api/2.0/mlflow/…`, `/api/2.0/mlflow-artifacts/…`) with httpx: no mlflow package in
the service.

A run holds: params, the request flattened to dotted keys (`mechanism.epsilon`; nulls, `labels` and
`notify` left out; a value cut at PARAM_MAX characters, the whole request is the `request.json`
artifact); metrics, the result's ε lower bounds, AUC, TPR/FPR at the operating point and
ε_detectable (top level and per threat model: `black_box.auc`), at step 0 and the audit's finish time;
tags, `iclaudit.audit_id`, `iclaudit.kind`, `iclaudit.state`, `iclaudit.verdict`, each label as
`label.<key>`, the headline as the run's description (`mlflow.note.content`) and the `name` label as its
name; artifacts `result.json`, `request.json` and `report.html` (the audit's HTML report), the records' text
redacted in all three as in a shared report (app/privacy/redact.py), when the server proxies artifacts (`mlflow server --serve-artifacts`, the default since MLflow 2). The run's status is the
audit's: FINISHED, FAILED or KILLED (cancelled). A sweep's children are nested runs of one parent run
(`mlflow.parentRunId`), which gets the sweep's grid as params and its counts as metrics once the sweep
has completed.

Deliveries are rows of the webhook outbox (`sink_id` set): the same claim, backoff, attempts, allow-list
(ICLAUDIT_WEBHOOK_ALLOWLIST, app/egress.py) and delivery log. A retry finds the run an earlier attempt made
by its `iclaudit.audit_id` tag and completes it instead of making a second one.
"""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit

import httpx
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from app.audit.kinds.registry import typed_result, verdict_of
from app.audit.results.digest import Verdict
from app.config import Settings
from app.db import mlflow as store
from app.db import sweeps as sweep_rows
from app.db.datasets import names_of
from app.db.models import Audit, AuditState, MlflowSink, Sweep, SweepChild, WebhookDelivery, utcnow
from app.egress import check_url, egress_client
from app.privacy.redact import redact_request, redact_result

log = logging.getLogger(__name__)

RUN_EVENT = "mlflow.run"
SWEEP_EVENT = "mlflow.sweep"
API = "/api/2.0/mlflow"
ARTIFACTS = "/api/2.0/mlflow-artifacts/artifacts"
PARAM_MAX = 500
"""Longest param value sent (MLflow takes 6,000); longer values are cut, `request.json` has them whole."""
BATCH = 100
"""Params (and tags) per log-batch call: MLflow's limit."""
METRICS = (
    "epsilon_lower",
    "epsilon_empirical",
    "epsilon_empirical_assumption_free",
    "epsilon_point",
    "epsilon_theory",
    "epsilon_ceiling",
    "epsilon_detectable",
    "mu_lower",
    "auc",
    "tpr",
    "fpr",
    "accuracy",
    "iclinf",
    "iclinf_std",
    "chance_accuracy",
)
"""Result fields sent as metrics, where a result has them as numbers (and under each threat model)."""
THREAT_MODELS = ("black_box", "white_box")
STATUS = {AuditState.SUCCEEDED: "FINISHED", AuditState.FAILED: "FAILED", AuditState.CANCELLED: "KILLED"}
SWEEP_CLAIM_SECONDS = 300.0
"""A claim on a sweep's parent run that made no run in this long is taken over."""
_KEY_BAD = re.compile(r"[^A-Za-z0-9_\-. /]")


class MlflowError(Exception):
    """The tracking server refused a call, or the run cannot be written yet; `status` its HTTP status."""

    def __init__(self, message: str, status: int | None = None, *, permanent: bool = False) -> None:
        super().__init__(message)
        self.message, self.status, self.permanent = message, status, permanent


# --- what a run holds -----------------------------------------------------------------------------------


def _key(key: str) -> str:
    """An MLflow key (letters, digits, `_ - . /` and spaces, at most 250 characters)."""
    return _KEY_BAD.sub("_", key)[:250]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def flatten(value: Any, prefix: str = "") -> dict[str, str]:
    """Dotted keys to text values; lists stay whole (as JSON), nulls are left out."""
    if isinstance(value, dict):
        out: dict[str, str] = {}
        for k, v in value.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    if value is None or not prefix:
        return {}
    return {_key(prefix): _cut(_text(value), PARAM_MAX)}


def params_of(request: dict[str, Any]) -> dict[str, str]:
    return flatten({k: v for k, v in request.items() if k not in ("labels", "notify")})


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None


def metrics_of(kind: str, result: dict[str, Any] | None) -> dict[str, float]:
    """ε lower bounds, AUC, TPR/FPR, ε_detectable, … of a result (the verdict's ε_lower as `epsilon_lower`)."""
    if not result:
        return {}
    out: dict[str, float] = {}
    for scope, values in [("", result)] + [(f"{t}.", result.get(t)) for t in THREAT_MODELS]:
        if not isinstance(values, dict):
            continue
        for name in METRICS:
            if (number := _number(values.get(name))) is not None:
                out[scope + name] = number
    verdict = verdict_of(kind, result)
    if verdict is not None and (number := _number(verdict.epsilon_lower)) is not None:
        out["epsilon_lower"] = number
    return out


def tags_of(audit: Audit) -> dict[str, str]:
    request = audit.request or {}
    labels = request.get("labels") or {}
    done = audit.state == AuditState.SUCCEEDED
    verdict = (verdict_of(audit.kind, audit.result) if done else None) or Verdict()
    tags = {
        "iclaudit.audit_id": audit.id,
        "iclaudit.kind": audit.kind,
        "iclaudit.state": str(audit.state),
        "iclaudit.verdict": verdict.outcome or "none",
        "mlflow.runName": str(labels.get("name") or f"{audit.kind} {audit.id[:8]}"),
        "mlflow.source.name": "iclaudit",
        "mlflow.source.type": "JOB",
    }
    if verdict.headline:
        tags["mlflow.note.content"] = verdict.headline
    if audit.error:
        tags["iclaudit.error"] = _cut(str(audit.error.get("message") or audit.error), 5000)
    tags.update({_key(f"label.{k}"): _cut(str(v), 5000) for k, v in labels.items()})
    return tags


def _ms(when: Any) -> int:
    return int(when.timestamp() * 1000)


# --- the REST calls ---------------------------------------------------------------------------------------


class Tracking:
    """The calls a sink makes, through an egress client (the allow-list is checked on every request)."""

    def __init__(self, client: httpx.Client, tracking_uri: str, token: str | None) -> None:
        self._client = client
        self._base = tracking_uri.rstrip("/")
        self._headers = {"user-agent": "iclaudit-mlflow/1"}
        if token:
            self._headers["authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: dict | None = None, params: dict | None = None) -> dict:
        reply = self._client.request(
            method, self._base + API + path, json=body, params=params, headers=self._headers
        )
        if reply.status_code >= 400:
            try:
                error = reply.json()
                what = f"{error.get('error_code', '')}: {error.get('message', '')}".strip(": ")
            except ValueError:
                what = reply.text[:200]
            raise MlflowError(
                f"MLflow answered {reply.status_code} to {path} ({_cut(what, 300)})", reply.status_code
            )
        return reply.json() if reply.content else {}

    def experiment_id(self, name: str) -> str:
        """The id of experiment `name`, made if there is none (a concurrent maker's is read back)."""
        for attempt in range(2):
            try:
                found = self.call("GET", "/experiments/get-by-name", params={"experiment_name": name})
                return str(found["experiment"]["experiment_id"])
            except MlflowError as exc:
                if exc.status != 404 or attempt:
                    raise
            try:
                return str(self.call("POST", "/experiments/create", {"name": name})["experiment_id"])
            except MlflowError as exc:
                if exc.status != 400:  # RESOURCE_ALREADY_EXISTS: made meanwhile, read it again
                    raise
        raise MlflowError(f"experiment {name!r} could not be made")

    def find_run(self, experiment_id: str, tag: str, value: str) -> dict | None:
        found = self.call(
            "POST",
            "/runs/search",
            {"experiment_ids": [experiment_id], "filter": f"tags.`{tag}` = '{value}'", "max_results": 1},
        )
        runs = found.get("runs") or []
        return runs[0] if runs else None

    def create_run(self, experiment_id: str, start_ms: int, tags: dict[str, str]) -> dict:
        body = {
            "experiment_id": experiment_id,
            "start_time": start_ms,
            "run_name": tags.get("mlflow.runName", ""),
            "tags": [{"key": k, "value": v} for k, v in tags.items()],
        }
        return self.call("POST", "/runs/create", body)["run"]

    def log(
        self,
        run_id: str,
        *,
        params: dict[str, str],
        metrics: dict[str, float],
        tags: dict[str, str],
        at_ms: int,
    ) -> None:
        """log-batch calls of at most BATCH params and tags each (metrics: at most 1,000)."""
        p, t = list(params.items()), list(tags.items())
        m = [{"key": _key(k), "value": v, "timestamp": at_ms, "step": 0} for k, v in metrics.items()]
        for i in range(0, max(len(p), len(t), 1), BATCH):
            self.call(
                "POST",
                "/runs/log-batch",
                {
                    "run_id": run_id,
                    "params": [{"key": k, "value": v} for k, v in p[i : i + BATCH]],
                    "tags": [{"key": k, "value": v} for k, v in t[i : i + BATCH]],
                    "metrics": m if i == 0 else [],
                },
            )

    def end(self, run_id: str, status: str, end_ms: int) -> None:
        self.call("POST", "/runs/update", {"run_id": run_id, "status": status, "end_time": end_ms})

    def upload(self, artifact_uri: str, name: str, content: bytes, content_type: str) -> bool:
        """PUT one artifact through the server's artifact proxy; False when the run's artifacts are not
        proxied (an artifact URI other than `mlflow-artifacts:`), which this sink cannot write to."""
        if not artifact_uri.startswith("mlflow-artifacts:"):
            return False
        path = urlsplit(artifact_uri).path.strip("/")
        reply = self._client.put(
            f"{self._base}{ARTIFACTS}/{path}/{name}",
            content=content,
            headers={**self._headers, "content-type": content_type},
        )
        if reply.status_code >= 400:
            raise MlflowError(
                f"MLflow answered {reply.status_code} to the artifact {name}", reply.status_code
            )
        return True


# --- enqueueing (in the transaction that writes the webhook events) ---------------------------------------


def enqueue(session: Session, *, tenant_id: str, event_type: str, subject: dict[str, str]) -> int:
    """One delivery per sink of the tenant (`subject`: {"audit_id"} or {"sweep_id"})."""
    from app.db import webhooks as outbox
    from app.integrations.webhooks import new_message_id

    sinks = store.sinks_of(session, tenant_id=tenant_id)
    for sink in sinks:
        outbox.add_delivery(
            session,
            id=new_message_id(),
            tenant_id=tenant_id,
            sink_id=sink.id,
            url=sink.tracking_uri,
            event_type=event_type,
            payload={"experiment": sink.experiment, **subject},
        )
    return len(sinks)


# --- delivering ------------------------------------------------------------------------------------------


def _report(audit: Audit, dataset: str | None) -> bytes | None:
    """The audit's HTML report with the records' text redacted, as GET /v1/audits/{id}/report.html gives it."""
    if audit.state != AuditState.SUCCEEDED:
        return None
    from app.reports import html as report

    return report.render(
        {
            "id": audit.id,
            "kind": audit.kind,
            "request": redact_request(audit.request),
            "result": redact_result(audit.result),
            "created_at": audit.created_at.isoformat(timespec="seconds"),
            "finished_at": audit.finished_at.isoformat(timespec="seconds") if audit.finished_at else None,
        },
        redacted=True,
        dataset=dataset,
    ).encode()


def _json(value: Any) -> bytes:
    return json.dumps(value, indent=2, ensure_ascii=False).encode()


def _sweep_parent(
    tracking: Tracking, sessions: sessionmaker[Session], sink: MlflowSink, experiment_id: str, sweep: Sweep
) -> str:
    """The run id of the sweep's parent run in this sink, made by the one delivery that claims it."""
    with sessions() as session:
        row = store.sweep_run(session, sink_id=sink.id, sweep_id=sweep.id)
        if row is not None and row.run_id:
            return row.run_id
        stale = utcnow() - timedelta(seconds=SWEEP_CLAIM_SECONDS)
        if not store.claim_sweep_run(session, sink_id=sink.id, sweep_id=sweep.id, stale_before=stale):
            raise MlflowError("the sweep's parent run is being made by another delivery")
    found = tracking.find_run(experiment_id, "iclaudit.sweep_id", sweep.id)
    if found is None:
        labels = sweep.labels or {}
        tags = {
            "iclaudit.sweep_id": sweep.id,
            "iclaudit.kind": "sweep",
            "mlflow.runName": str(labels.get("name") or f"sweep {sweep.id[:8]}"),
            "mlflow.source.name": "iclaudit",
            "mlflow.source.type": "JOB",
            **{_key(f"label.{k}"): _cut(str(v), 5000) for k, v in labels.items()},
        }
        found = tracking.create_run(experiment_id, _ms(sweep.created_at), tags)
    run_id = str(found["info"]["run_id"])
    with sessions() as session:
        store.set_sweep_run(session, sink_id=sink.id, sweep_id=sweep.id, run_id=run_id)
    return run_id


def _deliver_audit(
    tracking: Tracking, sessions: sessionmaker[Session], sink: MlflowSink, experiment_id: str, audit_id: str
) -> None:
    with sessions() as session:
        audit = session.get(Audit, audit_id)
        if audit is None:
            raise MlflowError("the audit no longer exists", permanent=True)
        sweep = session.scalar(
            select(Sweep)
            .join(SweepChild, SweepChild.sweep_id == Sweep.id)
            .where(SweepChild.audit_id == audit_id)
        )
        dataset_id = (audit.request or {}).get("dataset")
        named = names_of(session, tenant_id=audit.tenant_id, dataset_ids=[dataset_id] if dataset_id else [])
        dataset = f"{named[dataset_id][0]} v{named[dataset_id][1]}" if dataset_id in named else None
        session.expunge_all()
    end_ms = _ms(audit.finished_at or utcnow())
    tags = tags_of(audit)
    if sweep is not None:
        tags["mlflow.parentRunId"] = _sweep_parent(tracking, sessions, sink, experiment_id, sweep)
        tags["iclaudit.sweep_id"] = sweep.id
    run = tracking.find_run(experiment_id, "iclaudit.audit_id", audit.id)
    if run is not None and run["info"].get("status") in STATUS.values() and run["info"].get("end_time"):
        return  # an earlier attempt wrote it whole
    if run is None:
        run = tracking.create_run(experiment_id, _ms(audit.started_at or audit.created_at), tags)
    info = run["info"]
    result = redact_result(audit.result) if audit.state == AuditState.SUCCEEDED else None
    request = redact_request(audit.request) or {}
    tracking.log(
        info["run_id"],
        params=params_of(request),
        metrics=metrics_of(audit.kind, result),
        tags=tags,
        at_ms=end_ms,
    )
    artifacts = [("request.json", _json(request), "application/json")]
    if result is not None:  # as GET /v1/audits/{id}/result?records=redacted answers it
        typed = typed_result(audit.kind, result)
        artifacts.append(
            ("result.json", _json(typed.model_dump(mode="json") if typed else result), "application/json")
        )
    if (report := _report(audit, dataset)) is not None:
        artifacts.append(("report.html", report, "text/html"))
    uploaded = all(tracking.upload(info["artifact_uri"], n, c, t) for n, c, t in artifacts)
    if not uploaded:
        tracking.log(
            info["run_id"],
            params={},
            metrics={},
            tags={
                "iclaudit.artifacts": "not uploaded: the server does not proxy artifacts (--serve-artifacts)"
            },
            at_ms=end_ms,
        )
    tracking.end(info["run_id"], STATUS[AuditState(audit.state)], end_ms)


def _deliver_sweep(
    tracking: Tracking, sessions: sessionmaker[Session], sink: MlflowSink, experiment_id: str, sweep_id: str
) -> None:
    from app.integrations.webhooks import sweep_data

    with sessions() as session:
        sweep = session.get(Sweep, sweep_id)
        if sweep is None:
            raise MlflowError("the sweep no longer exists", permanent=True)
        data = sweep_data(session, sweep)
        rows = sweep_rows.children(session, sweep_id=sweep_id)
        finished = max((a.finished_at for _, a in rows if a.finished_at), default=None)
        session.expunge_all()
    run_id = _sweep_parent(tracking, sessions, sink, experiment_id, sweep)
    metrics = {"children": float(len(rows)), "violations": float(data["violations"])}
    metrics.update({f"outcomes.{k}": float(v) for k, v in data["outcomes"].items()})
    metrics.update({f"states.{k}": float(v) for k, v in data["counts"].items()})
    params = {_key(f"grid.{k}"): _cut(_text(v), PARAM_MAX) for k, v in (sweep.grid or {}).items()}
    params["seeds"] = str(sweep.seeds)
    params["kind"] = str((sweep.base or {}).get("kind"))
    end_ms = _ms(finished or utcnow())
    tracking.log(
        run_id, params=params, metrics=metrics, tags={"iclaudit.state": str(data["state"])}, at_ms=end_ms
    )
    tracking.end(run_id, "KILLED" if data["state"] == "CANCELLED" else "FINISHED", end_ms)


def deliver(delivery: WebhookDelivery, *, sessions: sessionmaker[Session], settings: Settings) -> None:
    """Write one delivery's run (or a sweep's parent run) to its sink. Raises MlflowError (retried like a
    webhook's non-2xx answer), EgressRefused (permanent) or httpx.HTTPError (retried)."""
    with sessions() as session:
        sink = session.get(MlflowSink, delivery.sink_id)
        if sink is None:
            raise MlflowError("the MLflow sink was deleted", permanent=True)
        session.expunge(sink)
    allow = settings.webhook_egress
    check_url(sink.tracking_uri, allow)
    with egress_client(allow, timeout=settings.webhook_timeout_seconds) as client:
        tracking = Tracking(client, sink.tracking_uri, sink.token)
        experiment_id = tracking.experiment_id(sink.experiment)
        payload = delivery.payload
        if delivery.event_type == SWEEP_EVENT:
            _deliver_sweep(tracking, sessions, sink, experiment_id, str(payload["sweep_id"]))
        else:
            _deliver_audit(tracking, sessions, sink, experiment_id, str(payload["audit_id"]))
