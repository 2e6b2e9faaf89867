"""The checks every audit request passes beyond its kind's schema, before anything is stored: size limits,
the dataset and model exist, the URLs it would call are allowed, its header secrets are set, the tenant's
room under ICLAUDIT_MAX_ACTIVE_AUDITS, and the operator's default budget. Submits, sweeps, schedules, plans
and a chain's next step (app/jobs/follow_up.py) all go through them."""

from __future__ import annotations

import re
from typing import Any

from sqlalchemy.orm import Session

from app import secrets
from app.audit.kinds.base import AuditRequestBase
from app.config import Settings
from app.db import audits, datasets
from app.egress import EgressRefused, check_url, header_refused
from app.jobs.providers import tenant_name


class Rejected(Exception):
    """A request that fails a cross-cutting check; nothing was stored. `path` is a JSON path in the body;
    `reason` (app.schemas.errors.REFUSALS) when no schema can state the rule (state, configuration)."""

    def __init__(self, path: str, message: str, reason: str | None = None) -> None:
        super().__init__(message)
        self.path = path
        self.message = message
        self.reason = reason


class TooLarge(Exception):
    """What a request would store is over a size limit (`message` names its setting); answered 413 at
    `path`, nothing stored."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(message)
        self.path = path
        self.message = message


class QuotaExceeded(Exception):
    """The tenant has ICLAUDIT_MAX_ACTIVE_AUDITS audits PENDING or RUNNING; answered 429 with Retry-After."""


def check_active_quota(
    session: Session, *, tenant_id: str, settings: Settings, adding: int = 1, what: str = "this audit"
) -> None:
    """QuotaExceeded unless `adding` more audits keep the tenant within ICLAUDIT_MAX_ACTIVE_AUDITS. Alone,
    a quick refusal before the work of building a request (submits racing each other can pass it);
    `reserve_active` is the check that holds."""
    active = audits.count_active(session, tenant_id=tenant_id)
    if active + adding > settings.max_active_audits:
        adds = "" if adding == 1 else f"; {what} would add {adding}"
        raise QuotaExceeded(
            f"This tenant has {active} audits PENDING or RUNNING{adds}; at most {settings.max_active_audits} "
            f"may be (ICLAUDIT_MAX_ACTIVE_AUDITS). Wait for some to finish or cancel some, then retry."
        )


def reserve_active(
    session: Session, *, tenant_id: str, settings: Settings, adding: int = 1, what: str = "this audit"
) -> None:
    """`check_active_quota` under the tenant's lock (app.db.audits.lock_tenant), held until the caller's
    transaction ends: call it right before inserting the `adding` audits, in the transaction that inserts
    them. Concurrent submits, sweeps and schedule runs of one tenant count one after the other, so the cap
    is exact."""
    audits.lock_tenant(session, tenant_id=tenant_id)
    check_active_quota(session, tenant_id=tenant_id, settings=settings, adding=adding, what=what)


def resolve_dataset(session: Session, *, tenant_id: str, name: str) -> str | None:
    """What a request's `dataset` means: the id of the caller's upload with that id, a built-in name, or the
    id of the newest version of the caller's upload with that name (None: none of these)."""
    if datasets.get_dataset(session, tenant_id=tenant_id, dataset_id=name) is not None:
        return name
    from app.datasets.builtin import BUILTIN_NAMES, SYNTHETIC_NAME

    if name in BUILTIN_NAMES or name == SYNTHETIC_NAME:
        return name
    newest = datasets.newest_named(session, tenant_id=tenant_id, name=name)
    return newest.id if newest is not None else None


def check_labels(session: Session, *, tenant_id: str, request: AuditRequestBase) -> None:
    """An audit that reads labels, on an upload of text alone, is refused (422 at the field that reads them:
    the kind's `label_field`), not accepted and FAILED later."""
    row = datasets.get_dataset(session, tenant_id=tenant_id, dataset_id=request.dataset or "")
    if row is None or row.task != "unlabelled":
        return
    from app.audit.kinds.registry import kind_module

    field = getattr(kind_module(request.kind), "label_field", lambda _: "$.kind")(request)
    if field is not None:
        raise Rejected(
            field,
            f"{field[2:]}: this audit reads the records' labels, and dataset {request.dataset!r} has none "
            "(rows of text alone). Upload rows with a label, or use an attack that reads the records' text "
            "only (inquiry, canary_prompt, repeat, likelihood, min_k, …).",
            "DATASET_UNLABELLED",
        )


def check_builtin_available(name: str, settings: Settings) -> None:
    """A built-in dataset this server cannot load is refused at submit (422 naming ICLAUDIT_DATA_DIR),
    not accepted and FAILED later."""
    from app.datasets.builtin import BUILTIN_NAMES, availability

    if name not in BUILTIN_NAMES:
        return
    source, reason = availability(name, settings.data_dir)
    if source is None:
        raise Rejected(
            "$.dataset",
            f"The built-in dataset {name!r} is not available on this server ({reason}). An operator sets "
            f"ICLAUDIT_DATA_DIR to a directory holding {name}/train.jsonl and {name}/test.jsonl; or use "
            "synthetic_records, or upload a dataset (POST /v1/datasets). GET /v1/datasets lists what is available.",
            "DATASET_UNAVAILABLE",
        )


def check_headers(
    headers: dict[str, Any],
    *,
    session: Session,
    tenant_id: str,
    settings: Settings,
    where: str = "mechanism.endpoint.headers",
) -> None:
    """An endpoint's headers: a valid name that the HTTP client does not own (no Host, no hop-by-hop or
    framing header); a literal value that can be sent as written; a credential only by reference
    (`{"secret": NAME}`, never a literal that would be stored and returned with the request), and a
    referenced secret set for (or granted to) this tenant with a valid value. The 422 names the header and
    the secret, never a value."""
    resolve = secrets.resolver(
        tenant=lambda: tenant_name(session, tenant_id),
        secrets_dir=settings.secrets_dir,
        grants=settings.secrets_grants,
    )
    for name, value in headers.items():
        path = f"$.{where}.{name}"
        if (refused := header_refused(name)) is not None:  # the egress client refuses it too
            raise Rejected(path, f"{where}: {refused}")
        if isinstance(value, str):
            if secrets.credential_header(name):
                raise Rejected(
                    path,
                    f"{where}.{name} looks like a credential: give it by reference, "
                    f'{{"secret": "NAME"}}, and set NAME in your secrets file (or have the operator grant you '
                    "ICLAUDIT_SECRET_NAME) on the server; a literal value would be stored with the audit and "
                    "returned by GET /v1/audits/{id}.",
                )
            if (why := secrets.problem(value)) is not None:
                raise Rejected(path, f"{where}.{name}: not a valid header value ({why}).")
            continue
        try:
            resolve(value.secret)
        except secrets.InvalidSecret as exc:
            raise Rejected(f"{path}.secret", f"{where}.{name}: {exc}.", "SECRET_INVALID") from None
        except secrets.MissingSecret as exc:
            raise Rejected(f"{path}.secret", f"{where}.{name}: {exc}.", "SECRET_NOT_SET") from None


def check_body_size(request: Any, settings: Settings) -> None:
    """A templated endpoint request that must pass ICLAUDIT_TARGET_MAX_BODY_BYTES is refused at submit (422
    with the numbers): each template filled with the request's exemplars at their shortest."""
    from app.audit.mechanisms.http_endpoint import body_floors
    from app.audit.mechanisms.registry import MECHANISMS

    spec = request.mechanism
    exemplars = MECHANISMS[spec.name].context_size(spec)
    limit = settings.target_max_body_bytes
    for where, floor, copies in body_floors(spec.endpoint, exemplars):
        if floor > limit:
            raise Rejected(
                f"$.{where}",
                f"{where}: filled, this template is at least {floor:,} bytes ({copies} × {{context}}, each "
                f"{exemplars} exemplars), above this service's {limit:,} (ICLAUDIT_TARGET_MAX_BODY_BYTES).",
                "SERVER_LIMIT",
            )


def check_request(
    session: Session, *, tenant_id: str, request: AuditRequestBase, settings: Settings, quota: bool = True
) -> None:
    """The checks every kind shares beyond its own pydantic model: size limits, dataset (a name is replaced by
    its newest version's id, in `request`) and model exist,
    a `notify` URL this service may call, and (`quota`) room under ICLAUDIT_MAX_ACTIVE_AUDITS for one more
    (a quick check; `reserve_active` is the one that holds)."""
    if request.notify is not None:
        try:
            check_url(request.notify, settings.webhook_egress)
        except EgressRefused as exc:
            raise Rejected("$.notify", f"notify: {exc.reason}.", "EGRESS_REFUSED") from exc
    trials = getattr(request, "trials", None)
    if isinstance(trials, int) and trials > settings.max_trials:
        raise Rejected(
            "$.trials",
            f"trials is {trials}, above this service's maximum of {settings.max_trials} (ICLAUDIT_MAX_TRIALS).",
            "SERVER_LIMIT",
        )
    if quota:
        check_active_quota(session, tenant_id=tenant_id, settings=settings)
    llm_calls = getattr(request, "llm_calls", None)
    if isinstance(llm_calls, int) and llm_calls > settings.max_llm_calls:
        raise Rejected(
            "$.llm_calls",
            f"llm_calls is {llm_calls}, above this service's maximum of {settings.max_llm_calls} (ICLAUDIT_MAX_LLM_CALLS).",
            "SERVER_LIMIT",
        )
    if request.dataset is not None:
        resolved = resolve_dataset(session, tenant_id=tenant_id, name=request.dataset)
        if resolved is None:
            raise Rejected(
                "$.dataset",
                f"Unknown dataset {request.dataset!r}: give a built-in name, or the name or id of a dataset you "
                "uploaded (GET /v1/datasets).",
                "UNKNOWN_DATASET",
            )
        request.dataset = resolved  # a name is stored as its newest version's id: the audit reproduces
        check_builtin_available(request.dataset, settings)
        check_labels(session, tenant_id=tenant_id, request=request)
    endpoint = getattr(getattr(request, "mechanism", None), "endpoint", None)
    if endpoint is not None:
        try:
            check_url(re.sub(r"\{[^{}]*\}", "x", endpoint.url), settings.endpoint_egress)
        except EgressRefused as exc:
            raise Rejected(
                "$.mechanism.endpoint.url", f"mechanism.endpoint.url: {exc.reason}.", "EGRESS_REFUSED"
            ) from exc
        for i, step in enumerate([*getattr(endpoint, "steps", []), getattr(endpoint, "close", None)]):
            if step is None:
                continue
            where = (
                f"$.mechanism.endpoint.steps[{i}].url"
                if i < len(endpoint.steps)
                else "$.mechanism.endpoint.close.url"
            )
            try:  # a template's {values} stand for one path segment each; the real URL is checked per call
                check_url(re.sub(r"\{[^{}]*\}", "x", step.url), settings.endpoint_egress)
            except EgressRefused as exc:
                raise Rejected(where, f"{where[2:]}: {exc.reason}.", "EGRESS_REFUSED") from exc
        headers = getattr(endpoint, "headers", None) or {}
        check_headers(headers, session=session, tenant_id=tenant_id, settings=settings)
        check_body_size(request, settings)
    target = getattr(request, "target", None)
    if target is not None:
        try:
            check_url(target.url, settings.endpoint_egress)
        except EgressRefused as exc:
            raise Rejected("$.target.url", f"target.url: {exc.reason}.", "EGRESS_REFUSED") from exc
        check_headers(
            target.headers, session=session, tenant_id=tenant_id, settings=settings, where="target.headers"
        )
    if request.model is not None:
        from app.engines.registry import UnknownModel, get_model_info

        try:
            get_model_info(request.model)
        except UnknownModel as exc:
            raise Rejected(
                "$.model",
                f"Unknown model {request.model!r}: GET /v1/models lists the registered ones.",
                "UNKNOWN_MODEL",
            ) from exc


def with_default_budget(request: AuditRequestBase, settings: Settings) -> AuditRequestBase:
    """The request under ICLAUDIT_DEFAULT_BUDGET: each of the operator's caps is kept unless the request
    sets a lower one (a tenant may only lower it: `"budget": {}`, a null cap or a larger one keeps the
    default's); caps the default leaves open are the request's. Stored with the audit, so a resume or a
    re-run keeps the caps it was submitted under (and a resume's new budget goes through here again)."""
    if settings.default_budget is None or "budget" not in type(request).model_fields:
        return request
    from app.audit.budget import BudgetSpec

    default = BudgetSpec.model_validate(settings.default_budget).model_dump()
    budget = getattr(request, "budget", None)  # the kinds that take a budget declare it
    given = budget.model_dump() if budget is not None else {}
    caps = {
        cap: min((v for v in (default.get(cap), given.get(cap)) if v is not None), default=None)
        for cap in BudgetSpec.model_fields
    }
    return request.model_copy(update={"budget": BudgetSpec.model_validate(caps)})
