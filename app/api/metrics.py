"""`GET /metrics`: Prometheus text exposition for operators (prometheus-client).

Audit counts come from the database at scrape time, so they are right however many API processes and
Celery workers there are: `iclaudit_audits{kind,state}` and `iclaudit_oldest_pending_audit_seconds`
(queue lag). Operator-level and tenant-free; keep the path off the public ingress.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker

from app.api.errors import ApiError
from app.db import audits as audit_rows
from app.db.models import AuditState, utcnow

router = APIRouter(tags=["health"])


class AuditCollector(Collector):
    def __init__(self, session_factory: sessionmaker[Session]) -> None:
        self._sessions = session_factory

    def collect(self) -> Iterator[Metric]:
        with self._sessions() as session:
            counts = audit_rows.audit_counts(session)
            oldest = audit_rows.oldest_pending_created_at(session)
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
    """Open, or behind `Authorization: Bearer <ICLAUDIT_METRICS_TOKEN>` when that is set."""
    token = request.app.state.settings.metrics_token
    if token:
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise ApiError(
                401, "GET /metrics needs `Authorization: Bearer <token>` (ICLAUDIT_METRICS_TOKEN)."
            )
    registry = getattr(request.app.state, "metrics_registry", None)
    if registry is None:
        registry = CollectorRegistry()
        registry.register(AuditCollector(request.app.state.session_factory))
        request.app.state.metrics_registry = registry
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
