"""Sweeps: a base audit request, a grid of dotted paths into it (`"mechanism.partitions": [4, 16]`) and a
number of seeds. Every combination × seed is one child audit, validated like a submitted one (a bad point
is 422 naming its grid key, and nothing is stored), stored in one transaction with the sweep and enqueued
as one message each, so N workers run N points at once. The sweep's state, progress and cancel are its
children's; its result is the table of verdict fields per child and per point (the bounds, `violation`, and
the verdict itself: `outcome`, `headline`, `epsilon_detectable`).
"""

from __future__ import annotations

import copy
import csv
import io
import itertools
import logging
import math
import statistics
from collections import Counter
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from app.audit.kinds.registry import verdict_of
from app.audit.results.digest import Verdict
from app.audit.stats.verdict import OUTCOMES
from app.config import Settings
from app.csv_cells import safe_cell
from app.db import audits, labels
from app.db import sweeps as store
from app.db.models import TERMINAL_STATES, Audit, AuditState, Sweep, SweepChild
from app.egress import EgressRefused, check_url
from app.jobs.checks import (
    Rejected,
    TooLarge,
    check_active_quota,
    check_request,
    reserve_active,
    with_default_budget,
)
from app.jobs.executors import Executor, enqueue
from app.schemas.audits import request_adapter
from app.schemas.sweeps import (
    SweepChildResource,
    SweepPoint,
    SweepProgress,
    SweepRequest,
    SweepResource,
    SweepResult,
    SweepRow,
)

log = logging.getLogger(__name__)


def _key_path(key: str) -> str:
    return f'$.grid["{key}"]'


def set_path(body: dict[str, Any], key: str, value: Any) -> None:
    """body[a][b] = value for key "a.b"; every step but the last must already be an object."""
    *parents, last = key.split(".")
    node: Any = body
    for i, part in enumerate(parents):
        node = node.get(part) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            where = ".".join(parents[: i + 1])
            raise Rejected(
                _key_path(key), f"grid key {key!r}: base has no object at {where!r} to set {last!r} in."
            )
    node[last] = value


def points(grid: dict[str, list[Any]]) -> list[dict[str, Any]]:
    """Every combination, the first key varying slowest (call `check_size` first: this builds them all)."""
    keys = list(grid)
    return [dict(zip(keys, values, strict=True)) for values in itertools.product(*grid.values())]


def check_size(request: SweepRequest, *, max_audits: int) -> int:
    """The number of audits the sweep would create, computed (the product of the grid's value counts ×
    seeds) before anything is expanded; Rejected at `$.grid` above ICLAUDIT_SWEEP_MAX_AUDITS."""
    counts = [len(values) for values in request.grid.values()]
    total = math.prod(counts) * request.seeds
    if total > max_audits:
        shape = " × ".join(f"{n} {key!r}" for key, n in zip(request.grid, counts, strict=True))
        seeds = f" × {request.seeds} seeds" if request.seeds > 1 else ""
        raise Rejected(
            "$.grid",
            f"grid: the sweep would create {total} audits ({shape}{seeds}), above this service's maximum "
            f"of {max_audits} (ICLAUDIT_SWEEP_MAX_AUDITS); split it.",
            "SERVER_LIMIT",
        )
    return total


def check_bytes(request: SweepRequest, *, audits: int, max_bytes: int) -> int:
    """The bytes the sweep's children would store (its base as JSON × `audits`, before anything is
    expanded); TooLarge (413) at `$.base` above ICLAUDIT_SWEEP_MAX_BYTES."""
    base = len(request.base.model_dump_json())
    total = base * audits
    if total > max_bytes:
        raise TooLarge(
            "$.base",
            f"base: the sweep would store {audits} audits of {base} bytes each ({total} bytes), above this "
            f"service's limit of {max_bytes} bytes (ICLAUDIT_SWEEP_MAX_BYTES); make the base smaller or the "
            "grid coarser.",
        )
    return total


def check_notify(request: SweepRequest, settings: Settings) -> None:
    """The sweep's own `notify` passes the webhook egress policy (app/egress.py), as an audit's does."""
    if request.notify is not None:
        try:
            check_url(request.notify, settings.webhook_egress)
        except EgressRefused as exc:
            raise Rejected("$.notify", f"notify: {exc.reason}.", "EGRESS_REFUSED") from exc


def expand(
    request: SweepRequest, *, max_audits: int, max_bytes: int | None = None
) -> list[tuple[dict[str, Any], int, Any]]:
    """(point, seed, validated child request) for every point and seed; Rejected names the bad grid key.
    The size is checked arithmetically first (`check_size`, and with `max_bytes` `check_bytes`), so an
    oversized grid costs nothing."""
    grid = request.grid
    total = check_size(request, max_audits=max_audits)
    if max_bytes is not None:
        check_bytes(request, audits=total, max_bytes=max_bytes)
    if "seed" in grid and request.seeds > 1:
        raise Rejected("$.seeds", "the grid sets `seed` itself; leave seeds at 1.")
    base = request.base.model_dump(mode="json")
    out = []
    for point in points(grid):
        for s in range(request.seeds):
            body = copy.deepcopy(base)
            body["seed"] = base["seed"] + s
            for key, value in point.items():
                set_path(body, key, value)
            try:
                child = request_adapter().validate_python(body)
            except ValidationError as exc:
                err = exc.errors()[0]
                where = ".".join(str(p) for p in err["loc"][1:]) or "request"
                culprit = next(
                    (k for k in point if where == k or where.startswith(k + ".")), next(iter(point))
                )
                # A rule of the kind across fields (loc: the request itself), met by base and every value
                # on its own but not by this combination: no schema can state it (GRID_POINT_RULE).
                rule = "NO_SOLUTION" if err["type"] == "no_solution" else None
                rule = rule or ("GRID_POINT_RULE" if len(err["loc"]) <= 1 else None)
                raise Rejected(
                    _key_path(culprit), f"grid point {point}: {where}: {err['msg'].rstrip('.')}.", rule
                ) from exc
            out.append((point, body["seed"], child))
    return out


def submit_sweep(
    *,
    session: Session,
    tenant_id: str,
    request: SweepRequest,
    settings: Settings,
    executor: Executor,
    remember: Any = None,
) -> Sweep:
    """Check every child, store the sweep and its children (one transaction), then enqueue each child. The
    children count in the tenant's ICLAUDIT_MAX_ACTIVE_AUDITS as a whole, under the tenant's lock
    (`reserve_active`): a sweep that would pass the cap is refused (429), none of it stored."""
    check_notify(request, settings)
    children = expand(request, max_audits=settings.sweep_max_audits, max_bytes=settings.sweep_max_bytes)
    quota: dict[str, Any] = {
        "tenant_id": tenant_id,
        "settings": settings,
        "adding": len(children),
        "what": "this sweep",
    }
    check_active_quota(session, **quota)
    for point, _, child in children:
        try:
            check_request(session, tenant_id=tenant_id, request=child, settings=settings, quota=False)
        except Rejected as exc:
            key = next((k for k in point if exc.path == f"$.{k}"), None)
            path = _key_path(key) if key else "$.base" + exc.path[1:]
            raise Rejected(path, exc.message, exc.reason) from exc
    reserve_active(session, **quota)
    sweep = store.add_sweep(
        session,
        tenant_id=tenant_id,
        base=request.base.model_dump(mode="json"),
        grid=request.grid,
        seeds=request.seeds,
        labels=request.labels,
        notify=request.notify,
    )
    ids = []
    for position, (point, seed, child) in enumerate(children):
        body = with_default_budget(child, settings).model_dump(mode="json")
        audit = audits.add_audit(session, tenant_id=tenant_id, kind=body["kind"], request=body)
        labels.add_labels(session, audit_id=audit.id, labels=body.get("labels") or {})
        store.add_child(
            session, sweep_id=sweep.id, position=position, audit_id=audit.id, point=point, seed=seed
        )
        ids.append(audit.id)
    if remember is not None:
        remember(session, sweep.id)
    session.commit()
    enqueue(session, executor, ids)  # one message each; one not sent stays PENDING for the requeue sweep
    session.commit()
    return sweep


def sweep_state(states: list[str], cancel_requested: bool) -> AuditState:
    if states and all(s in TERMINAL_STATES for s in states):
        if all(s == AuditState.SUCCEEDED for s in states):
            return AuditState.SUCCEEDED
        if cancel_requested or (AuditState.CANCELLED in states and AuditState.FAILED not in states):
            return AuditState.CANCELLED
        return AuditState.FAILED
    if all(s == AuditState.PENDING for s in states):
        return AuditState.PENDING
    return AuditState.RUNNING


def completed_at(rows: list[tuple[SweepChild, Audit]]) -> datetime | None:
    """When the last child finished, once all have: derived from the children like the sweep's state (the
    stored `sweeps.completed_at` marks the sweep.completed event as written and lags by a dispatch tick)."""
    if not rows or any(a.state not in TERMINAL_STATES for _, a in rows):
        return None
    return max((a.finished_at for _, a in rows if a.finished_at is not None), default=None)


def resource(sweep: Sweep, rows: list[tuple[SweepChild, Audit]]) -> SweepResource:
    states = [a.state for _, a in rows]
    fractions = [1.0 if a.state in TERMINAL_STATES else a.progress_fraction for _, a in rows]
    return SweepResource(
        id=sweep.id,
        state=sweep_state(states, sweep.cancel_requested),
        progress=SweepProgress(
            fraction=statistics.fmean(fractions) if fractions else 0.0,
            total=len(rows),
            counts={AuditState(s): n for s, n in Counter(states).items()},
        ),
        grid=sweep.grid,
        seeds=sweep.seeds,
        base=sweep.base,
        labels=sweep.labels,
        cancel_requested=sweep.cancel_requested,
        created_at=sweep.created_at,
        completed_at=completed_at(rows),
        children=[
            SweepChildResource(
                position=c.position, point=c.point, seed=c.seed, audit_id=a.id, state=AuditState(a.state)
            )
            for c, a in rows
        ],
    )


def cancel_sweep(session: Session, *, sweep: Sweep) -> None:
    """Cancel cascades: every child not yet finished is cancelled (PENDING at once, RUNNING at its next batch)."""
    store.request_cancel(session, sweep_id=sweep.id)
    for _, audit in store.children(session, sweep_id=sweep.id):
        if audit.state not in TERMINAL_STATES:
            audits.request_cancel(session, tenant_id=sweep.tenant_id, audit_id=audit.id)
    session.commit()
    session.refresh(sweep)


def result(sweep: Sweep, rows: list[tuple[SweepChild, Audit]]) -> SweepResult:
    """Verdict fields per child, and per point over its seeds."""
    table = []
    for child, audit in rows:
        done = audit.state == AuditState.SUCCEEDED
        v = (verdict_of(audit.kind, audit.result) if done else None) or Verdict()
        table.append(
            SweepRow(
                position=child.position,
                point=child.point,
                seed=child.seed,
                audit_id=audit.id,
                state=AuditState(audit.state),
                epsilon_lower=v.epsilon_lower,
                epsilon_theory=v.epsilon_theory,
                violation=v.violation,
                outcome=v.outcome,
                headline=v.headline,
                epsilon_detectable=v.epsilon_detectable,
            )
        )
    grouped: dict[str, list[SweepRow]] = {}
    for row in table:
        grouped.setdefault(repr(sorted(row.point.items())), []).append(row)
    summary = []
    for group in grouped.values():
        eps = [r.epsilon_lower for r in group if r.epsilon_lower is not None]
        theory = [r.epsilon_theory for r in group if r.epsilon_theory is not None]
        judged = [r for r in group if r.outcome is not None]
        worst = min(judged, key=lambda r: OUTCOMES.index(r.outcome), default=None)
        summary.append(
            SweepPoint(
                point=group[0].point,
                audits=len(group),
                epsilon_lower_mean=statistics.fmean(eps) if eps else None,
                epsilon_lower_min=min(eps) if eps else None,
                epsilon_lower_max=max(eps) if eps else None,
                epsilon_theory=theory[0] if theory else None,
                violations=sum(1 for r in group if r.violation),
                outcome=worst.outcome if worst else None,
                outcomes=dict(Counter(r.outcome for r in judged if r.outcome is not None)),
                headline=worst.headline if worst else None,
            )
        )
    return SweepResult(sweep_id=sweep.id, grid=sweep.grid, rows=table, points=summary)


CSV_VERDICT_COLUMNS = (
    "epsilon_lower",
    "epsilon_theory",
    "violation",
    "outcome",
    "epsilon_detectable",
    "headline",
)


def result_csv(res: SweepResult) -> str:
    """One line per child: position, each grid key, seed, audit id, state, ε_lower, ε_theory, violation,
    outcome (the verdict), ε_detectable, headline. A text cell a spreadsheet would run as a formula (a grid
    value, a headline) is escaped (app/csv_cells.py)."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    keys = list(res.grid)
    writer.writerow(["position", *keys, "seed", "audit_id", "state", *CSV_VERDICT_COLUMNS])
    for r in res.rows:
        writer.writerow(
            [
                safe_cell(x)
                for x in (r.position, *(r.point[k] for k in keys), r.seed, r.audit_id, r.state.value)
            ]
            + ["" if x is None else x for x in (r.epsilon_lower, r.epsilon_theory, r.violation)]
            + ["" if x is None else safe_cell(x) for x in (r.outcome, r.epsilon_detectable, r.headline)]
        )
    return out.getvalue()
