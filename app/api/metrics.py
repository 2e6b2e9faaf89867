"""`GET /metrics`: Prometheus text exposition for operators (prometheus-client).

Audit figures come from the database at scrape time, so they are right however many API processes and
Celery workers there are: `iclaudit_audits{kind,state}`, `iclaudit_oldest_pending_audit_seconds` (queue
lag), `iclaudit_audit_duration_seconds{kind,state}` (a histogram of finished audits' run time),
`iclaudit_audit_violations_total{kind}` (audits whose result found a violation of the claimed ε) and
`iclaudit_audit_verdicts_total{kind,verdict}` (succeeded audits by verdict: violation, leak, inconclusive,
consistent; every verdict of a kind that has one, 0 included). HTTP
latency histograms per route template, method and status (`http_request_duration_seconds`, …) come from
prometheus-fastapi-instrumentator in this process. Labels stay low-cardinality: kind, state, route
template, method, status — never an audit id, tenant or free-form audit label (those are in the logs and
webhooks). Operator-level and tenant-free: with authentication on it needs ICLAUDIT_METRICS_TOKEN (403 while
none is set).
"""

from __future__ import annotations

import hmac
from collections.abc import Callable, Iterator

from fastapi import APIRouter, FastAPI, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_fastapi_instrumentator.middleware import PrometheusInstrumentatorMiddleware
from sqlalchemy.orm import Session, sessionmaker
from starlette.middleware import Middleware

from app.api.errors import ApiError
from app.api.state import state_of
from app.audit.stats.verdict import OUTCOMES
from app.db import audits as audit_rows
from app.db import stats
from app.db.models import AuditState, utcnow

router = APIRouter(tags=["health"])


DURATION_BUCKETS = (1.0, 5.0, 15.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0, 24 * 3600.0)


class AuditCollector(Collector):
    def __init__(self, session_factory: sessionmaker[Session] | Callable[[], sessionmaker[Session]]) -> None:
        self._sessions = session_factory

    def _factory(self) -> sessionmaker[Session]:
        factory = self._sessions
        return factory if isinstance(factory, sessionmaker) else factory()

    def collect(self) -> Iterator[Metric]:
        with self._factory()() as session:
            counts = audit_rows.audit_counts(session)
            oldest = audit_rows.oldest_pending_created_at(session)
            durations = stats.duration_buckets(session, DURATION_BUCKETS)
            violations = stats.violation_counts(session)
            verdicts = stats.verdict_counts(session)
        histogram = HistogramMetricFamily(
            "iclaudit_audit_duration_seconds",
            "Run time (start to finish) of finished audits, by kind and final state.",
            labels=["kind", "state"],
        )
        for row in durations:
            buckets = [(f"{b:g}", c) for b, c in zip(DURATION_BUCKETS, row.cumulative, strict=True)]
            histogram.add_metric([row.kind, row.state], [*buckets, ("+Inf", row.count)], row.total_seconds)
        yield histogram
        found = CounterMetricFamily(
            "iclaudit_audit_violations",
            "Audits whose result found a violation of the claimed ε, by kind.",
            labels=["kind"],
        )
        for kind, n in violations:
            found.add_metric([kind], n)
        yield found
        judged = CounterMetricFamily(
            "iclaudit_audit_verdicts",
            "Succeeded audits by kind and verdict (violation, leak, inconclusive, consistent).",
            labels=["kind", "verdict"],
        )
        by_verdict = {(kind, verdict): n for kind, verdict, n in verdicts}
        for kind in sorted({kind for kind, _ in by_verdict}):
            for verdict in OUTCOMES:
                judged.add_metric([kind, verdict], by_verdict.get((kind, verdict), 0))
        yield judged
        audits = GaugeMetricFamily("iclaudit_audits", "Audits by kind and state.", labels=["kind", "state"])
        seen = {(kind, state): n for kind, state, n in counts}
        for kind in sorted({kind for kind, _ in seen}):
            for state in AuditState:
                audits.add_metric([kind, state.value], seen.get((kind, state.value), 0))
        yield audits
        lag = (utcnow() - oldest).total_seconds() if oldest is not None else 0.0
        yield GaugeMetricFamily(
            "iclaudit_oldest_pending_audit_seconds", "Age of the longest-waiting PENDING audit.", value=lag
        )


@router.get("/metrics", include_in_schema=False)
def metrics(request: Request) -> Response:
    """Behind `Authorization: Bearer <ICLAUDIT_METRICS_TOKEN>` when that is set; without it, closed (403)
    when authentication is on (the figures span every tenant), open when it is off (a local server)."""
    settings = state_of(request.app).settings
    token = settings.metrics_token
    if not token and settings.auth_enabled:
        raise ApiError(
            403,
            "GET /metrics is closed: authentication is on and no ICLAUDIT_METRICS_TOKEN is set; an operator "
            "sets one and scrapes with `Authorization: Bearer <token>`.",
        )
    if token:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise ApiError(
                401, "GET /metrics needs `Authorization: Bearer <token>` (ICLAUDIT_METRICS_TOKEN)."
            )
    return Response(generate_latest(state_of(request.app).metrics_registry), media_type=CONTENT_TYPE_LATEST)


def http_metrics(registry: CollectorRegistry) -> Middleware:
    """The HTTP latency histograms (prometheus-fastapi-instrumentator's middleware, as its `instrument`
    adds it), in this app's own registry so several apps in one process do not collide."""
    return Middleware(
        PrometheusInstrumentatorMiddleware,
        registry=registry,
        excluded_handlers=["/metrics", "/healthz", "/readyz"],
        should_group_status_codes=False,
    )


def install_metrics(app: FastAPI, registry: CollectorRegistry) -> None:
    """The database's audit figures in the app's registry (the HTTP ones: `http_metrics`), served by
    `GET /metrics`."""
    registry.register(AuditCollector(lambda: state_of(app).session_factory))
