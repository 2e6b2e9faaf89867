"""Liveness (`/healthz`: the process answers) and readiness (`/readyz`: database, and broker if configured)."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app.api.state import state_of

router = APIRouter(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """Liveness: answered on the event loop, with no thread, no slot and no database."""
    return {"status": "ok"}


@router.get("/readyz")
def readyz(request: Request) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        with state_of(request.app).session_factory() as session:
            session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"unreachable: {type(exc).__name__}"
    broker_url = state_of(request.app).settings.broker_url
    if broker_url:
        import redis

        try:
            client = redis.Redis.from_url(broker_url, socket_connect_timeout=2, socket_timeout=2)
            client.ping()
            client.close()
            checks["broker"] = "ok"
        except Exception as exc:
            checks["broker"] = f"unreachable: {type(exc).__name__}"
    ready = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status_code=200 if ready else 503
    )
