"""A small typed Python client of the iclaudit REST API (the `iclaudit` CLI uses it; there is no other
HTTP code path in the CLI).

    from iclaudit.client import IclauditClient

    with IclauditClient("http://127.0.0.1:8000", api_key="ica_…") as client:
        audit = client.submit({"kind": "bound", "counts": {"tp": 2400, "fn": 1600, "fp": 1500, "tn": 2500}})
        audit = client.wait(audit.id, timeout=600)          # long-poll with ETags until SUCCEEDED/FAILED/CANCELLED
        print(audit.headline or audit.error)                # "Measured ε ≥ 3.45 (95 %) against a claimed 1: violation"
        leaks = client.list(verdict="leak").audits          # violation, leak, inconclusive or consistent

The verdict (app/audit/stats/verdict.py) is on every audit the client returns, list pages included:
`audit.outcome` (violation, leak, inconclusive, consistent; None until SUCCEEDED, or for a kind that
measures no leakage), `audit.headline`, `audit.epsilon_detectable` (the audit's power), `audit.failing`
(what fails a CI gate: a violation or a leak) and `audit.digest`, the server's typed summary.

Sweeps, webhooks and schedules come back as the API's own response models (app/schemas: `SweepResource`,
`SweepResult`, `WebhookCreated`, `DeliveryList`, `ScheduleResource`, `ScheduleRunList`, …); `wait_sweep`
polls a sweep with back-off until every child audit has ended.

Retries: connection failures, time-outs and 429/502/503/504 answers are retried with exponential
back-off and jitter, waiting at least what `Retry-After` asks. Every POST carries an `Idempotency-Key`
(one per logical call, reused by its retries), so a retried submit never creates a second audit. The
server de-duplicates submitAudit, uploadDataset and submitSweep by that key; the other creating POSTs
(createWebhook, createSchedule) are retried only when they cannot have been processed: no connection
made, or a 429/503 answer (refused before any write).

Waiting: `GET /v1/audits/{id}?wait=30s` with `If-None-Match` (304 while nothing changed); a server that
answers at once (no long-poll support) is polled with back-off instead of hammered.

Errors: `ApiError` (the server answered 4xx/5xx: status, message, per-field details),
`ServiceUnreachable` (no answer after the retries), `WaitTimeout` (`wait`/`wait_sweep` ran past its timeout).

Server-only code (FastAPI, SQLAlchemy, Celery) is never imported (tests/project/test_layering.py). The
server's models (every kind's result and request models: numpy, scipy, seconds on a busy machine) are
imported on first use, and so are the client's own pydantic models (iclaudit/_audit.py): importing the
client costs httpx only, and `get_json` reads an audit with no model made (the CLI's `status`). `typed=False`
keeps even a result loose (the CLI's `status --format json`, `list` and `cancel`).

A base URL ending in `/v1` (`http://host:8000/v1`) is read as the service's root (`http://host:8000`).
"""

from __future__ import annotations

import builtins
import email.utils
import io
import random
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

import httpx


def _server_models() -> bool:
    """Whether the server's distribution (app/) is installed beside the client: results, sweeps, webhooks
    and schedules then come back as its typed models, else as the light client's loose ones. Only looked
    up here; the models are imported on first use (every kind's models load numpy and scipy: seconds)."""
    import importlib.util

    try:
        return importlib.util.find_spec("app.audit.kinds.registry") is not None
    except ImportError:
        return False


TYPED = _server_models()

if TYPE_CHECKING:
    import ssl

    from pydantic import BaseModel

    from app.audit.results.base import ResultBase
    from app.schemas.schedules import ScheduleList, ScheduleResource, ScheduleRunList
    from app.schemas.sweeps import SweepList, SweepResource, SweepResult
    from app.schemas.webhooks import (
        DeliveryList,
        DeliveryResource,
        NotifySecret,
        WebhookCreated,
        WebhookList,
        WebhookResource,
    )
    from iclaudit._audit import Audit, AuditPage

MODELS = frozenset({"Audit", "AuditFailure", "AuditPage", "Progress"})
"""The audit models (iclaudit/_audit.py), made on first use: importing the client loads no pydantic."""


def __getattr__(name: str) -> Any:
    if name in MODELS:
        from iclaudit import _audit

        return getattr(_audit, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


TERMINAL_STATES = frozenset({"SUCCEEDED", "FAILED", "CANCELLED"})  # app/db/constants.py (test_client.py)
RETRY_STATUS = frozenset({429, 502, 503, 504})
# Answers after which the server has written nothing (rate limit, busy, database unavailable).
NOT_PROCESSED_STATUS = frozenset({429, 503})
# Failures before the request reached the server.
NOT_SENT_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
MAX_RETRY_AFTER_S = 120.0


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


class AmbiguousId(ClientError):
    """An id prefix that starts more than one audit's id; `candidates` (at most SHOWN + 1 of them)."""

    SHOWN = 10

    def __init__(self, prefix: str, candidates: list[str]) -> None:
        more = " and more" if len(candidates) > self.SHOWN else ""
        listed = ", ".join(candidates[: self.SHOWN])
        super().__init__(f"the id prefix {prefix!r} is ambiguous: it starts {listed}{more}; give more of it")
        self.prefix = prefix
        self.candidates = candidates


class ServiceUnreachable(ClientError):
    """No answer from the service (connection refused, DNS, time-out) after the retries."""


class WaitTimeout(ClientError):
    """The audit (`wait`) or sweep (`wait_sweep`) had not ended when the timeout ran out; `last` is the
    last state seen."""

    def __init__(self, last: Audit | SweepResource, timeout: float) -> None:
        what = "sweep" if type(last).__name__.startswith("Sweep") else "audit"
        super().__init__(f"{what} {last.id} still {last.state} after {timeout:g} s")
        self.last = last


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


def _body(value: Mapping[str, Any] | BaseModel) -> dict[str, Any]:
    """A request body from a dict or from the API's own request model (dumped as the server stores it)."""
    return dict(value) if isinstance(value, Mapping) else value.model_dump(mode="json")


def _schema(module: str, name: str, typed: bool = True) -> Any:
    """A response model of app/schemas (imported on first use: it builds every kind's request model), or
    the light client's loose model where the server's distribution is not installed (or `typed` is off)."""
    if TYPED and typed:
        import importlib

        return getattr(importlib.import_module(f"app.schemas.{module}"), name)
    from iclaudit import _loose

    return getattr(_loose, name)


def validate_result(kind: str, body: dict[str, Any], typed: bool = True) -> ResultBase:
    """A result as its kind's typed model (the server's distribution), else as a loose model keeping every
    field the server sent."""
    if TYPED and typed:
        from app.audit.kinds.registry import validate_result as typed_result

        return typed_result(kind, body)
    from iclaudit import _loose

    return _loose.validate_result(kind, body)  # type: ignore[return-value]


def base_url(url: str) -> str:
    """The service's root: a URL ending in `/v1` (where the API's routes start, as people often paste it)
    is taken as the root it is under, so `…/v1` and `…` reach the same routes instead of `/v1/v1/…` (404)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _page(size: int, token: str | None) -> dict[str, str | int]:
    """The query of one page of a list (`page_token` from the previous page's `next_page_token`)."""
    return {"page_size": size, **({"page_token": token} if token else {})}


class _Pause:
    """The sleep between two polls: `first` seconds after a change, x1.5 per unchanged poll up to `most`,
    never past the deadline."""

    def __init__(self, first: float = 0.25, most: float = 2.0) -> None:
        self.first, self.most, self.delay = first, most, first

    def __call__(self, changed: bool, deadline: float | None) -> None:
        self.delay = self.first if changed else min(self.delay * 1.5, self.most)
        left = self.delay if deadline is None else deadline - time.monotonic()
        time.sleep(max(0.0, min(self.delay, left)))


# --- resources ----------------------------------------------------------------------------------------


class _Watched(io.RawIOBase):
    """A file being uploaded: reads go through, `on_progress(sent, total)` after each (a retry starts again
    from 0, as httpx seeks back to the start)."""

    def __init__(self, raw: BinaryIO, total: int, on_progress: Callable[[int, int], None] | None) -> None:
        self.raw, self.total, self.on_progress = raw, total, on_progress

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.raw.seek(offset, whence)

    def tell(self) -> int:
        return self.raw.tell()

    def read(self, size: int = -1) -> bytes:
        chunk = self.raw.read(size)
        if self.on_progress is not None:
            self.on_progress(self.raw.tell(), self.total)
        return chunk


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
        connect_timeout: float | None = None,
        retry_unreachable: bool = True,
        typed: bool = True,
        transport: httpx.BaseTransport | None = None,
        verify: ssl.SSLContext | bool = True,
    ) -> None:
        """`connect_timeout` bounds opening a connection (default: `timeout`); `retry_unreachable=False`
        gives up at once when the first call finds no server (refused, time-out), as the CLI does; once
        the server has answered, a lost connection is retried as usual. `url` is the service's root; one
        ending in `/v1` is read as the root it is under. `typed=False` returns loose models (every field the
        server sent) even where the server's typed ones are installed: no numpy or scipy to import, as the
        CLI's `status` and `list` need none. `verify` is httpx's: True checks a TLS service against certifi's
        authorities, or give the `ssl.SSLContext` to check it with (your own authority)."""
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.url = base_url(url)
        self.typed = typed
        self.timeout = timeout
        self.connect_timeout = connect_timeout
        self.retries = retries
        self.retry_unreachable = retry_unreachable
        self._answered = False
        self.backoff, self.max_backoff = backoff, max_backoff
        self._http = httpx.Client(
            base_url=self.url,
            headers=headers,
            timeout=self._timeout(timeout),
            transport=transport,
            verify=verify,
        )

    def _timeout(self, seconds: float) -> httpx.Timeout:
        return httpx.Timeout(seconds, connect=self.connect_timeout or seconds)

    def __enter__(self) -> IclauditClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    # -- transport -----------------------------------------------------------------------------------

    def _wait(self, attempt: int, exc: Exception) -> float:
        """Exponential back-off with jitter (`backoff`·2^(n-1) + U(0, `backoff`), at most `max_backoff`),
        but never less than the server's Retry-After."""
        delay = min(self.backoff * 2 ** (attempt - 1) + random.uniform(0, self.backoff), self.max_backoff)
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
        replay_safe: bool = True,
        **kwargs: Any,
    ) -> httpx.Response:
        """One call with retries; 2xx (and any status in `ok`) is returned, other answers raise ApiError.
        A POST gets an Idempotency-Key (a fresh one unless given) that all its retries share. A call that
        is not `replay_safe` (a POST the server does not de-duplicate) is retried only when it cannot have
        been processed: no connection made, or a 429/503 answer."""
        if method.upper() == "POST":
            kwargs["headers"] = {
                **kwargs.get("headers", {}),
                "Idempotency-Key": idempotency_key or str(uuid.uuid4()),
            }

        def once() -> httpx.Response:
            response = self._http.request(method, path, **kwargs)
            self._answered = True
            if response.status_code in RETRY_STATUS:
                raise _Retryable(response)
            return response

        def worth_retrying(exc: BaseException) -> bool:
            if not (self.retry_unreachable or self._answered) and isinstance(exc, NOT_SENT_ERRORS):
                return False
            if replay_safe:
                return isinstance(exc, _Retryable | httpx.TransportError)
            if isinstance(exc, _Retryable):
                return exc.response.status_code in NOT_PROCESSED_STATUS
            return isinstance(exc, NOT_SENT_ERRORS)

        attempt = 0
        while True:
            attempt += 1
            try:
                response = once()
                break
            except (_Retryable, httpx.TransportError) as exc:
                if attempt <= self.retries and worth_retrying(exc):
                    time.sleep(self._wait(attempt, exc))
                    continue
                if isinstance(exc, _Retryable):
                    response = exc.response
                    break
                what = type(exc).__name__
                raise ServiceUnreachable(f"cannot reach {self.url} ({what}: {exc or 'no answer'})") from exc
        if response.is_success or response.status_code in ok:
            return response
        raise ApiError.of(response)

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        return self.request(method, path, **kwargs).json()

    # -- audits --------------------------------------------------------------------------------------

    def submit(self, request: Mapping[str, Any] | BaseModel, *, idempotency_key: str | None = None) -> Audit:
        """POST /v1/audits: start an audit (202); the same idempotency key returns the same audit."""
        return self._audit(
            self._json("POST", "/v1/audits", json=_body(request), idempotency_key=idempotency_key)
        )

    def get(self, audit_id: str) -> Audit:
        return self._audit(self.get_json(audit_id))

    def get_json(self, audit_id: str) -> dict[str, Any]:
        """GET /v1/audits/{id} as the server sends it (no model made: the CLI's `status` line reads it)."""
        return self._json("GET", f"/v1/audits/{audit_id}")

    def _audit(self, body: Any) -> Audit:
        from iclaudit._audit import Audit

        return Audit.model_validate(body, context={"typed": self.typed})

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
        pause = _Pause()
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
                timeout=self._timeout(self.timeout + hold),
            )
            changed = False
            if response.status_code != 304:
                seen = self._audit(response.json())
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
                pause(changed, deadline)

    def result(self, audit_id: str) -> ResultBase:
        """The typed result of a SUCCEEDED audit (ApiError 404 before)."""
        audit = self.get(audit_id)
        if audit.state != "SUCCEEDED" or audit.result is None:
            body = self._json("GET", f"/v1/audits/{audit_id}/result")  # raises the server's 404 reason
            return validate_result(audit.kind, body, self.typed)
        return audit.result

    def result_json(self, audit_id: str) -> dict[str, Any]:
        """GET /v1/audits/{id}/result as the server sends it."""
        return self._json("GET", f"/v1/audits/{audit_id}/result")

    def records(self, audit_id: str, *, full: bool = False) -> list[dict[str, Any]]:
        """Every row of GET /v1/audits/{id}/records (per-record risk, riskiest first), page by page; the
        records' text redacted unless `full`."""
        rows: list[dict[str, Any]] = []
        view = "full" if full else "redacted"
        while True:
            page = self._json(
                "GET",
                f"/v1/audits/{audit_id}/records",
                params={"offset": len(rows), "limit": 500, "records": view},
            )
            rows.extend(page["items"])
            if not page["items"] or len(rows) >= page["total"]:
                return rows

    def records_csv(self, audit_id: str, *, full: bool = False) -> str:
        """The per-record table as the server's CSV (the records' text redacted unless `full`)."""
        params = {"format": "csv", "records": "full" if full else "redacted"}
        return self.request("GET", f"/v1/audits/{audit_id}/records", params=params).text

    def report_html(self, audit_id: str, *, full: bool = False) -> str:
        """The self-contained HTML report (the records' text redacted unless `full`)."""
        params = {"records": "full" if full else "redacted"}
        return self.request("GET", f"/v1/audits/{audit_id}/report.html", params=params).text

    def junit(self, audit_id: str) -> bytes:
        """GET /v1/audits/{id}/report.junit.xml: the ended audit as a JUnit XML report (the CI gate's; the
        server writes it from the typed result, so both distributions write the same file)."""
        return self.request("GET", f"/v1/audits/{audit_id}/report.junit.xml").content

    def regression(self, audit_id: str, baseline_id: str) -> dict[str, Any]:
        """GET /v1/audits/{id}/regression?baseline=…: each membership test's lower bound on ε against the
        baseline audit's upper confidence bound; `regressed`, `headline` and the `tests` compared."""
        return self._json("GET", f"/v1/audits/{audit_id}/regression", params={"baseline": baseline_id})

    def result_png(self, audit_id: str) -> bytes:
        return self.request("GET", f"/v1/audits/{audit_id}/result.png").content

    def cancel(self, audit_id: str) -> Audit:
        return self._audit(self._json("POST", f"/v1/audits/{audit_id}/cancel"))

    def list(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        labels: dict[str, str] | None = None,
        verdict: str | None = None,
        id_prefix: str | None = None,
        page_size: int = 50,
        page_token: str | None = None,
    ) -> AuditPage:
        """One page of the caller's audits, newest first; `verdict` (violation, leak, inconclusive or
        consistent) keeps the SUCCEEDED audits whose result has it (ApiError 422 for another word);
        `id_prefix` those whose id starts with it."""
        from iclaudit._audit import AuditPage

        body = self._list_json(
            state=state,
            kind=kind,
            labels=labels,
            verdict=verdict,
            id_prefix=id_prefix,
            page_size=page_size,
            page_token=page_token,
        )
        return AuditPage.model_validate(body, context={"typed": self.typed})

    def _list_json(
        self,
        *,
        state: str | None = None,
        kind: str | None = None,
        labels: dict[str, str] | None = None,
        verdict: str | None = None,
        id_prefix: str | None = None,
        page_size: int = 50,
        page_token: str | None = None,
    ) -> dict[str, Any]:
        params: list[tuple[str, str | int]] = [("page_size", page_size)]
        filters = (
            ("state", state),
            ("kind", kind),
            ("verdict", verdict),
            ("id_prefix", id_prefix),
            ("page_token", page_token),
        )
        params += [(k, v) for k, v in filters if v]
        params += [("label", f"{k}={v}") for k, v in (labels or {}).items()]
        return self._json("GET", "/v1/audits", params=params)

    def resolve_id(self, given: str) -> str:
        """The whole id of the caller's one audit whose id starts with `given` (a whole id is returned as
        it is); AmbiguousId when several do, ApiError 404 when none does."""
        prefix = given.strip().lower()
        if len(prefix) >= 32 or not prefix or any(c not in "0123456789abcdef" for c in prefix):
            return given
        page = self._list_json(id_prefix=prefix, page_size=AmbiguousId.SHOWN + 1)
        found = [audit["id"] for audit in page["audits"]]
        if len(found) == 1:
            return found[0]
        if not found:
            raise ApiError(404, f"no audit of yours has an id starting with {prefix!r}")
        raise AmbiguousId(prefix, found)

    def iter_audits(self, **filters: Any) -> Iterator[Audit]:
        """Every audit matching the filters (those of `list`: state, kind, labels, verdict), page after page."""
        token = None
        while True:
            page = self.list(page_token=token, **filters)
            yield from page.audits
            if not page.next_page_token:
                return
            token = page.next_page_token

    # -- datasets and models -------------------------------------------------------------------------

    def upload_dataset(
        self,
        path: str | Path,
        *,
        name: str | None = None,
        fmt: str | None = None,
        on_progress: Callable[[int, int], None] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """POST /v1/datasets: the file streamed as multipart (`file`, and `name`/`format` when given; the
        format defaults to the file's extension, .jsonl/.csv/.json), `on_progress(sent, total)` as its bytes
        go out. Returns the stored dataset (use its `id` as a request's `dataset`); a bad row is an ApiError
        422 naming its line."""
        path = Path(path)
        total = path.stat().st_size
        fields = {k: v for k, v in (("name", name), ("format", fmt)) if v}
        with path.open("rb") as fh:
            body = _Watched(fh, total, on_progress)
            return self._json(
                "POST",
                "/v1/datasets",
                files={"file": (path.name, body, "application/octet-stream")},
                data=fields,
                idempotency_key=idempotency_key,
                timeout=self._timeout(max(self.timeout, 300.0)),
            )

    def datasets(self) -> dict[str, Any]:
        return self._json("GET", "/v1/datasets")

    def models(self) -> dict[str, Any]:
        return self._json("GET", "/v1/models")

    # -- sweeps --------------------------------------------------------------------------------------

    def submit_sweep(
        self, sweep: Mapping[str, Any] | BaseModel, *, idempotency_key: str | None = None
    ) -> SweepResource:
        """POST /v1/sweeps: {base: <audit request>, grid: {path: [values]}, seeds: n} (a dict or a
        `SweepRequest`); the same idempotency key returns the same sweep."""
        model = _schema("sweeps", "SweepResource", self.typed)

        body = self._json("POST", "/v1/sweeps", json=_body(sweep), idempotency_key=idempotency_key)
        return model.model_validate(body)

    def get_sweep(self, sweep_id: str) -> SweepResource:
        model = _schema("sweeps", "SweepResource", self.typed)

        return model.model_validate(self._json("GET", f"/v1/sweeps/{sweep_id}"))

    def list_sweeps(self, *, page_size: int = 20, page_token: str | None = None) -> SweepList:
        """One page of the caller's sweeps, newest first."""
        model = _schema("sweeps", "SweepList", self.typed)

        return model.model_validate(self._json("GET", "/v1/sweeps", params=_page(page_size, page_token)))

    def wait_sweep(
        self,
        sweep_id: str,
        *,
        timeout: float | None = None,
        max_poll: float = 5.0,
        on_update: Callable[[SweepResource], None] | None = None,
    ) -> SweepResource:
        """Until every child audit has ended (the sweep SUCCEEDED, FAILED or CANCELLED): GET /v1/sweeps/{id}
        0.25 s after a change, x1.5 longer per unchanged poll up to `max_poll` s (the route has no
        long-poll), calling `on_update` with every new state. WaitTimeout after `timeout` s (None: never)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        pause = _Pause(most=max_poll)
        last: SweepResource | None = None
        while True:
            sweep = self.get_sweep(sweep_id)
            changed = sweep != last
            last = sweep
            if changed and on_update is not None:
                on_update(sweep)
            if sweep.state in TERMINAL_STATES:
                return sweep
            if deadline is not None and time.monotonic() >= deadline:
                raise WaitTimeout(sweep, timeout or 0.0)
            pause(changed, deadline)

    def cancel_sweep(self, sweep_id: str) -> SweepResource:
        """Cancels every child not yet finished (409 when all had)."""
        model = _schema("sweeps", "SweepResource", self.typed)

        return model.model_validate(self._json("POST", f"/v1/sweeps/{sweep_id}/cancel"))

    def sweep_result(self, sweep_id: str) -> SweepResult:
        """The grid as a table (per child and per point over its seeds); 409 until every child ended."""
        model = _schema("sweeps", "SweepResult", self.typed)

        return model.model_validate(self._json("GET", f"/v1/sweeps/{sweep_id}/result"))

    def sweep_result_csv(self, sweep_id: str) -> str:
        return self.request("GET", f"/v1/sweeps/{sweep_id}/result.csv").text

    def sweep_result_png(self, sweep_id: str) -> bytes:
        return self.request("GET", f"/v1/sweeps/{sweep_id}/result.png").content

    # -- webhooks ------------------------------------------------------------------------------------

    def create_webhook(
        self, url: str, events: builtins.list[str] | None = None, *, description: str = ""
    ) -> WebhookCreated:
        """POST /v1/webhooks (`events` None or empty: all of them); the answer holds the signing secret,
        shown this once."""
        body = {"url": url, "events": events or [], "description": description}
        return _schema("webhooks", "WebhookCreated", self.typed).model_validate(
            self._json("POST", "/v1/webhooks", json=body, replay_safe=False)
        )

    def get_webhook(self, webhook_id: str) -> WebhookResource:
        return _schema("webhooks", "WebhookResource", self.typed).model_validate(
            self._json("GET", f"/v1/webhooks/{webhook_id}")
        )

    def list_webhooks(self, *, page_size: int = 50, page_token: str | None = None) -> WebhookList:
        return _schema("webhooks", "WebhookList", self.typed).model_validate(
            self._json("GET", "/v1/webhooks", params=_page(page_size, page_token))
        )

    def delete_webhook(self, webhook_id: str) -> None:
        """Stops every delivery to it and drops its delivery log."""
        self.request("DELETE", f"/v1/webhooks/{webhook_id}")

    def webhook_deliveries(
        self, webhook_id: str, *, page_size: int = 50, page_token: str | None = None
    ) -> DeliveryList:
        """Newest first: each event sent to the webhook, its state, attempts and last answer."""
        return _schema("webhooks", "DeliveryList", self.typed).model_validate(
            self._json("GET", f"/v1/webhooks/{webhook_id}/deliveries", params=_page(page_size, page_token))
        )

    def redeliver(self, webhook_id: str, delivery_id: str) -> DeliveryResource:
        """Send a delivery again (same `webhook-id`, so a receiver de-duplicates it)."""
        path = f"/v1/webhooks/{webhook_id}/deliveries/{delivery_id}/redeliver"
        return _schema("webhooks", "DeliveryResource", self.typed).model_validate(self._json("POST", path))

    def notify_secret(self) -> NotifySecret:
        """The secret that signs deliveries to a request's `notify` URL."""
        return _schema("webhooks", "NotifySecret", self.typed).model_validate(
            self._json("GET", "/v1/webhooks/notify-secret")
        )

    # -- schedules -----------------------------------------------------------------------------------

    def create_schedule(
        self,
        *,
        request: Mapping[str, Any] | BaseModel | None = None,
        sweep: Mapping[str, Any] | BaseModel | None = None,
        cron: str | None = None,
        interval_seconds: float | None = None,
    ) -> ScheduleResource:
        """POST /v1/schedules: an audit `request` or a `sweep`, re-run at every `cron` time (UTC; five
        fields, or six with seconds last) or every `interval_seconds`."""
        model = _schema("schedules", "ScheduleResource", self.typed)

        body: dict[str, Any] = {
            name: value
            for name, value in (("cron", cron), ("interval_seconds", interval_seconds))
            if value is not None
        }
        if request is not None:
            body["request"] = _body(request)
        if sweep is not None:
            body["sweep"] = _body(sweep)
        return model.model_validate(self._json("POST", "/v1/schedules", json=body, replay_safe=False))

    def get_schedule(self, schedule_id: str) -> ScheduleResource:
        model = _schema("schedules", "ScheduleResource", self.typed)

        return model.model_validate(self._json("GET", f"/v1/schedules/{schedule_id}"))

    def list_schedules(self, *, page_size: int = 50, page_token: str | None = None) -> ScheduleList:
        model = _schema("schedules", "ScheduleList", self.typed)

        return model.model_validate(self._json("GET", "/v1/schedules", params=_page(page_size, page_token)))

    def schedule_runs(self, schedule_id: str) -> ScheduleRunList:
        """Each firing, newest first (at most 100), with its audit's state and verdict."""
        model = _schema("schedules", "ScheduleRunList", self.typed)

        return model.model_validate(self._json("GET", f"/v1/schedules/{schedule_id}/runs"))

    def delete_schedule(self, schedule_id: str) -> None:
        """No further runs; the audits it started stay."""
        self.request("DELETE", f"/v1/schedules/{schedule_id}")
