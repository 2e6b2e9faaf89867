"""A small typed Python client of the iclaudit REST API (the `iclaudit` CLI uses it; there is no other
HTTP code path in the CLI).

    from app.client import IclauditClient

    with IclauditClient("http://127.0.0.1:8000", api_key="ica_…") as client:
        audit = client.submit({"kind": "bound", "counts": {"tp": 2400, "fn": 1600, "fp": 1500, "tn": 2500}})
        audit = client.wait(audit.id, timeout=600)          # long-poll with ETags until SUCCEEDED/FAILED/CANCELLED
        print(audit.result.epsilon_empirical if audit.result else audit.error)

Retries (tenacity): connection failures, time-outs and 429/502/503/504 answers are retried with exponential
back-off and jitter, waiting at least what `Retry-After` asks. Every POST carries an `Idempotency-Key`
(one per logical call, reused by its retries), so a retried submit never creates a second audit.

Waiting: `GET /v1/audits/{id}?wait=30s` with `If-None-Match` (304 while nothing changed); a server that
answers at once (no long-poll support) is polled with back-off instead of hammered.

Errors: `ApiError` (the server answered 4xx/5xx: status, message, per-field details),
`ServiceUnreachable` (no answer after the retries), `WaitTimeout` (`wait` ran past its timeout).
"""

from __future__ import annotations

import email.utils
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Annotated, Any, Union

import httpx
from pydantic import BaseModel, ConfigDict, Field, model_validator
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential_jitter,
)

from app.audit.kinds.registry import KINDS, result_model, validate_result
from app.audit.results.base import ResultBase

TERMINAL = ("SUCCEEDED", "FAILED", "CANCELLED")
RETRY_STATUS = frozenset({429, 502, 503, 504})
MAX_RETRY_AFTER_S = 120.0

AuditResult = Annotated[
    Union[tuple(result_model(kind) for kind in KINDS)],  # noqa: UP007 - built from the registry
    Field(discriminator="kind"),
]


# --- errors -------------------------------------------------------------------------------------------


class ClientError(Exception):
    """Base of the client's errors."""


class ApiError(ClientError):
    """The server answered with an error: `status`, its sentence, and `details` [(json path, message)]."""

    def __init__(self, status: int, message: str, details: list[tuple[str, str]] | None = None) -> None:
        super().__init__(f"{status} {message}")
        self.status = status
        self.message = message
        self.details = details or []

    @classmethod
    def of(cls, response: httpx.Response) -> ApiError:
        try:
            error = response.json()["error"]
            details = [(d["path"], d["message"]) for d in error.get("details", [])]
            return cls(response.status_code, error["message"], details)
        except (ValueError, KeyError, TypeError):
            return cls(response.status_code, response.text.strip()[:500] or response.reason_phrase)


class ServiceUnreachable(ClientError):
    """No answer from the service (connection refused, DNS, time-out) after the retries."""


class WaitTimeout(ClientError):
    """The audit had not ended when `wait`'s timeout ran out; `audit` is the last state seen."""

    def __init__(self, audit: Audit, timeout: float) -> None:
        super().__init__(f"audit {audit.id} still {audit.state} after {timeout:g} s")
        self.audit = audit


class _Retryable(Exception):
    """An answer worth retrying (429/5xx); `retry_after` in seconds when the server said."""

    def __init__(self, response: httpx.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response
        self.retry_after = retry_after_seconds(response.headers.get("Retry-After"))


def retry_after_seconds(value: str | None, now: datetime | None = None) -> float | None:
    """`Retry-After` as seconds: delta-seconds or an HTTP date (RFC 9110 §10.2.3); None when absent/bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


# --- resources ----------------------------------------------------------------------------------------


class Progress(BaseModel):
    model_config = ConfigDict(extra="allow")

    stage: str
    fraction: float
    eta_seconds: float | None = None
    message: str = ""


class AuditFailure(BaseModel):
    model_config = ConfigDict(extra="allow")

    code: str
    message: str


class Audit(BaseModel):
    """An audit as the API returns it (the list's summary view has no `request` and no `result`)."""

    model_config = ConfigDict(extra="allow")

    id: str
    kind: str
    state: str
    progress: Progress
    request: dict[str, Any] | None = None
    result: AuditResult | None = None
    error: AuditFailure | None = None
    cancel_requested: bool = False
    attempt: int = 0
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None

    @property
    def done(self) -> bool:
        return self.state in TERMINAL

    @model_validator(mode="before")
    @classmethod
    def _result_kind(cls, data: Any) -> Any:
        """A server that sends the result without its `kind` (the result route's raw JSON) still parses."""
        if isinstance(data, dict) and isinstance(data.get("result"), dict) and "kind" not in data["result"]:
            data = {**data, "result": {"kind": data.get("kind"), **data["result"]}}
        return data


class AuditPage(BaseModel):
    audits: list[Audit]
    next_page_token: str | None = None


# --- the client ---------------------------------------------------------------------------------------


class IclauditClient:
    """One service, one key. `retries` is how many times a failed call is tried again."""

    def __init__(
        self,
        url: str = "http://127.0.0.1:8000",
        api_key: str | None = None,
        *,
        timeout: float = 30.0,
        retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 10.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.retries = retries
        self._backoff = wait_exponential_jitter(initial=backoff, max=max_backoff, jitter=backoff)
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout, transport=transport)

    def __enter__(self) -> IclauditClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- transport -----------------------------------------------------------------------------------

    def _wait(self, state: RetryCallState) -> float:
        """Exponential back-off with jitter, but never less than the server's Retry-After."""
        delay = self._backoff(state)
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, _Retryable) and exc.retry_after is not None:
            delay = max(delay, min(exc.retry_after, MAX_RETRY_AFTER_S))
        return delay

    def request(
        self,
        method: str,
        path: str,
        *,
        ok: tuple[int, ...] = (),
        idempotency_key: str | None = None,
        **kwargs: Any,
    ) -> httpx.Response:
        """One call with retries; 2xx (and any status in `ok`) is returned, other answers raise ApiError.
        A POST gets an Idempotency-Key (a fresh one unless given) that all its retries share."""
        if method.upper() == "POST":
            kwargs["headers"] = {
                **kwargs.get("headers", {}),
                "Idempotency-Key": idempotency_key or str(uuid.uuid4()),
            }

        def once() -> httpx.Response:
            response = self._http.request(method, path, **kwargs)
            if response.status_code in RETRY_STATUS:
                raise _Retryable(response)
            return response

        retrying = Retrying(
            retry=retry_if_exception(lambda e: isinstance(e, _Retryable | httpx.TransportError)),
            stop=stop_after_attempt(self.retries + 1),
            wait=self._wait,
            reraise=True,
        )
        try:
            response = retrying(once)
        except _Retryable as exc:
            response = exc.response
        except httpx.TransportError as exc:
            what = type(exc).__name__
            raise ServiceUnreachable(f"cannot reach {self.url} ({what}: {exc or 'no answer'})") from exc
        if response.is_success or response.status_code in ok:
            return response
        raise ApiError.of(response)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    # -- audits --------------------------------------------------------------------------------------

    def submit(self, request: dict[str, Any], *, idempotency_key: str | None = None) -> Audit:
        """POST /v1/audits: start an audit (202); the same idempotency key returns the same audit."""
        return Audit.model_validate(
            self._json("POST", "/v1/audits", json=request, idempotency_key=idempotency_key)
        )

    def get(self, audit_id: str) -> Audit:
        return Audit.model_validate(self._json("GET", f"/v1/audits/{audit_id}"))

    def wait(
        self,
        audit_id: str,
        *,
        timeout: float | None = None,
        poll: float = 30.0,
        on_update: Callable[[Audit], None] | None = None,
    ) -> Audit:
        """Until the audit ends: long-polls of at most `poll` seconds with `If-None-Match`, calling
        `on_update` with every new state. WaitTimeout after `timeout` seconds (None: no limit)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        etag: str | None = None
        audit: Audit | None = None
        idle = 0.25
        while True:
            left = None if deadline is None else deadline - time.monotonic()
            if audit is not None and left is not None and left <= 0:
                raise WaitTimeout(audit, timeout or 0.0)
            hold = poll if left is None else max(0.0, min(poll, left))
            headers = {"If-None-Match": etag} if etag else {}
            params = {"wait": f"{hold:.1f}s"} if audit is not None and hold >= 1 else {}
            started = time.monotonic()
            response = self.request(
                "GET",
                f"/v1/audits/{audit_id}",
                ok=(304,),
                headers=headers,
                params=params,
                timeout=self.timeout + hold,
            )
            changed = False
            if response.status_code != 304:
                seen = Audit.model_validate(response.json())
                etag = response.headers.get("ETag")
                changed = audit is None or seen != audit
                audit = seen
                if changed and on_update is not None:
                    on_update(audit)
                if audit.done:
                    return audit
            assert audit is not None
            # A server without long-poll answers at once: back off instead of hammering it.
            if time.monotonic() - started < min(hold, 1.0) * 0.5:
                idle = 0.25 if changed else min(idle * 1.5, 2.0)
                pause = idle if deadline is None else max(0.0, min(idle, deadline - time.monotonic()))
                time.sleep(pause)

    def result(self, audit_id: str) -> ResultBase:
        """The typed result of a SUCCEEDED audit (ApiError 404 before)."""
        audit = self.get(audit_id)
        if audit.state != "SUCCEEDED" or audit.result is None:
            body = self._json("GET", f"/v1/audits/{audit_id}/result")  # raises the server's 404 reason
            return validate_result(audit.kind, body)
        return audit.result

    def result_json(self, audit_id: str) -> dict[str, Any]:
        """GET /v1/audits/{id}/result as the server sends it."""
        return self._json("GET", f"/v1/audits/{audit_id}/result")  # type: ignore[no-any-return]

    def records(self, audit_id: str) -> list[dict[str, Any]]:
        """Every row of GET /v1/audits/{id}/records (per-record risk, riskiest first), page by page."""
        rows: list[dict[str, Any]] = []
        while True:
            page = self._json(
                "GET", f"/v1/audits/{audit_id}/records", params={"offset": len(rows), "limit": 500}
            )
            rows.extend(page["items"])
            if not page["items"] or len(rows) >= page["total"]:
                return rows

    def records_csv(self, audit_id: str) -> str:
        """The per-record table as the server's CSV."""
        return self.request("GET", f"/v1/audits/{audit_id}/records", params={"format": "csv"}).text

    def result_png(self, audit_id: str) -> bytes:
        return self.request("GET", f"/v1/audits/{audit_id}/result.png").content

    def cancel(self, audit_id: str) -> Audit:
        return Audit.model_validate(self._json("POST", f"/v1/audits/{audit_id}/cancel"))

    def list(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        labels: dict[str, str] | None = None,
        page_size: int = 50,
        page_token: str | None = None,
    ) -> AuditPage:
        """One page of the caller's audits, newest first."""
        params: list[tuple[str, str | int]] = [("page_size", page_size)]
        params += [(k, v) for k, v in (("state", state), ("kind", kind), ("page_token", page_token)) if v]
        params += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        return AuditPage.model_validate(self._json("GET", "/v1/audits", params=params))

    def iter_audits(self, **filters: Any) -> Iterator[Audit]:
        """Every audit matching the filters, page after page."""
        token = None
        while True:
            page = self.list(page_token=token, **filters)
            yield from page.audits
            if not page.next_page_token:
                return
            token = page.next_page_token

    # -- datasets and models -------------------------------------------------------------------------

    def datasets(self) -> dict[str, Any]:
        return self._json("GET", "/v1/datasets")  # type: ignore[no-any-return]

    def models(self) -> dict[str, Any]:
        return self._json("GET", "/v1/models")  # type: ignore[no-any-return]

    # -- sweeps --------------------------------------------------------------------------------------

    def submit_sweep(self, sweep: dict[str, Any], *, idempotency_key: str | None = None) -> dict[str, Any]:
        """POST /v1/sweeps: {base: <audit request>, grid: {path: [values]}, seeds: n}."""
        return self._json("POST", "/v1/sweeps", json=sweep, idempotency_key=idempotency_key)  # type: ignore[no-any-return]

    def get_sweep(self, sweep_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/sweeps/{sweep_id}")  # type: ignore[no-any-return]

    def list_sweeps(self) -> dict[str, Any]:
        return self._json("GET", "/v1/sweeps")  # type: ignore[no-any-return]

    def cancel_sweep(self, sweep_id: str) -> dict[str, Any]:
        return self._json("POST", f"/v1/sweeps/{sweep_id}/cancel")  # type: ignore[no-any-return]

    def sweep_result(self, sweep_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/sweeps/{sweep_id}/result")  # type: ignore[no-any-return]

    # -- webhooks ------------------------------------------------------------------------------------

    def create_webhook(self, url: str, events: list[str] | None = None) -> dict[str, Any]:
        """POST /v1/webhooks; the answer holds the signing secret, shown this once."""
        body: dict[str, Any] = {"url": url}
        if events is not None:
            body["events"] = events
        return self._json("POST", "/v1/webhooks", json=body)  # type: ignore[no-any-return]

    def list_webhooks(self) -> dict[str, Any]:
        return self._json("GET", "/v1/webhooks")  # type: ignore[no-any-return]

    def delete_webhook(self, webhook_id: str) -> None:
        self.request("DELETE", f"/v1/webhooks/{webhook_id}")

    def webhook_deliveries(self, webhook_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/webhooks/{webhook_id}/deliveries")  # type: ignore[no-any-return]
