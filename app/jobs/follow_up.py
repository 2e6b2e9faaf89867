"""A chain of next steps (the request's `until_answer`): when an audit that asks for it ends `inconclusive`,
its result's first next step that sets request fields and fits the time left becomes a new audit, stored
in the transaction that stores the outcome (`followed_by` on the first, `follows` on the second), so a
poller that sees the outcome sees the link too.

The rule, with `left` = until_answer.max_seconds − (this audit's finish − its creation):
- a step is taken when `until_answer.max_steps` ≥ 1, the step has a `set`, and its expected `seconds` are
  unknown or ≤ `left`; the first such step of `result.next_steps` (their order is the kind's preference);
- its request is this one with the step's fields set (dotted paths), `until_answer` = {left, max_steps − 1},
  and, for a kind with a `budget`, `budget.max_seconds` capped at `left` (the chain stops within it);
- it passes the checks of a submit (app/jobs/checks.py) and the kind's schema; a step that fails them is
  not taken, and the reason is this audit's progress message, as is the step taken.

The follow-up counts against no quota: it replaces its audit among the tenant's active ones. It is stored
PENDING; the executor that ran this audit sends it (app/jobs/executors.py), else the sweep or the
releaser does.
"""

from __future__ import annotations

import copy
import logging
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import update
from sqlalchemy.orm import Session

from app.audit.kinds.base import AuditRequestBase
from app.audit.kinds.registry import kind_module, verdict_of
from app.config import Settings
from app.db import audits, labels
from app.db.models import Audit, AuditState
from app.db.retry import is_transient
from app.jobs.checks import Rejected, TooLarge, check_request, with_default_budget

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Followed:
    """What the chain did after an audit: the follow-up's id (None: none taken) and why, in one line."""

    audit_id: str | None
    message: str


def with_set(body: dict[str, Any], changes: dict[str, Any]) -> dict[str, Any]:
    """`body` with each dotted path of `changes` set to its value (a missing or null parent becomes {})."""
    out = copy.deepcopy(body)
    for path, value in changes.items():
        node = out
        *parents, last = path.split(".")
        for name in parents:
            if not isinstance(node.get(name), dict):
                node[name] = {}
            node = node[name]
        node[last] = value
    return out


def seconds_left(audit: Audit) -> float:
    """until_answer.max_seconds less the wall seconds from the audit's creation to its finish."""
    chain = audit.request.get("until_answer") or {}
    assert audit.finished_at is not None
    return float(chain["max_seconds"]) - (audit.finished_at - audit.created_at).total_seconds()


def next_request(audit: Audit, step: dict[str, Any], left: float) -> dict[str, Any]:
    """The follow-up's request body (the module docstring's rule); not yet validated."""
    chain = audit.request["until_answer"]
    body = with_set(audit.request, step["set"])
    body["until_answer"] = {"max_seconds": round(left, 3), "max_steps": int(chain.get("max_steps", 5)) - 1}
    if "budget" in kind_module(audit.kind).Request.model_fields:
        given = body.get("budget")
        budget: dict[str, Any] = given if isinstance(given, dict) else {}
        cap = budget.get("max_seconds")
        budget["max_seconds"] = round(left if cap is None else min(float(cap), left), 3)
        body["budget"] = budget
    return body


def take_next_step(session: Session, *, audit_id: str, settings: Settings) -> Followed | None:
    """In the transaction that wrote the audit's outcome: store its next step as a new PENDING audit when
    its request asks (`until_answer`) and the rule allows; record what was done in its progress message.
    None when the audit asks for no chain or answered. Choosing the step only reads, so a failure there
    (other than the database's, which retries the whole write) costs the chain, never the outcome."""
    audit = session.get(Audit, audit_id)
    if audit is None or not audit.request.get("until_answer") or audit.state != AuditState.SUCCEEDED:
        return None
    verdict = verdict_of(audit.kind, audit.result)
    if verdict is None or verdict.outcome != "inconclusive":
        return None
    try:
        chosen, message = _choose(session, audit, settings)
    except Exception as exc:
        if is_transient(exc):
            raise
        reference = uuid.uuid4().hex[:12]
        log.exception("audit %s: until_answer failed (reference %s)", audit.id, reference)
        chosen, message = None, f"inconclusive; until_answer failed (reference {reference}): no step taken"
    follow_up_id = None
    if chosen is not None:
        request = with_default_budget(chosen, settings)
        follow_up = audits.add_audit(
            session,
            tenant_id=audit.tenant_id,
            kind=audit.kind,
            request=request.model_dump(mode="json"),
            request_id=audit.request_id,
        )
        follow_up.follows, follow_up_id = audit.id, follow_up.id
        labels.add_labels(session, audit_id=follow_up.id, labels=request.labels)
        session.flush()
        message = message.format(audit_id=follow_up.id)
    session.execute(
        update(Audit)
        .where(Audit.id == audit.id)
        .values(followed_by=follow_up_id, progress_message=message)
        .execution_options(synchronize_session=False)
    )
    log.info("audit %s: %s", audit.id, message)
    return Followed(follow_up_id, message)


def _choose(session: Session, audit: Audit, settings: Settings) -> tuple[AuditRequestBase | None, str]:
    """The follow-up's request (None: no step is taken) and the line that says so (`{audit_id}` where the
    follow-up's id goes). Reads only."""
    chain = audit.request["until_answer"]
    if int(chain.get("max_steps", 5)) < 1:
        return None, "inconclusive; until_answer: no steps left to take"
    left = seconds_left(audit)
    steps = [s for s in (audit.result or {}).get("next_steps") or [] if isinstance(s, dict) and s.get("set")]
    if not steps:
        return None, "inconclusive; until_answer: no next step sets a request field"
    refusals = []
    for step in steps:
        seconds = step.get("seconds")
        if left <= 0 or (seconds is not None and seconds > left):
            need = f"~{seconds:.0f} s" if seconds is not None else "time"
            refusals.append(f"{step.get('text', step['set'])} needs {need}, {max(left, 0):.0f} s left")
            continue
        try:
            request = kind_module(audit.kind).Request.model_validate(next_request(audit, step, left))
            check_request(session, tenant_id=audit.tenant_id, request=request, settings=settings, quota=False)
        except ValidationError as exc:
            refusals.append(f"{step['set']}: {exc.errors()[0]['msg']}")
            continue
        except (Rejected, TooLarge) as exc:
            refusals.append(exc.message)
            continue
        text = str(step.get("text", step["set"])).replace("{", "{{").replace("}", "}}")
        return request, "inconclusive; took its next step as audit {audit_id}: " + text
    return None, "inconclusive; until_answer took no step: " + "; ".join(refusals)
