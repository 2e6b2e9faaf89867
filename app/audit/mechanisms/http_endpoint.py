"""`http_endpoint`: the user's own deployed DP-ICL system, audited black-box over HTTP.

The deployed system holds the private context in its own prompt and answers one user query per call
(002 §3: SP = (E_1, …, E_N) + Q). Per call the audit fills the request template — any JSON value —
with the neighbouring context C1 or C0 and the attack's user query: a string that is exactly
`"{context}"` becomes the JSON list of formatted exemplars (the system partitions them itself),
`{context}` inside a longer string the exemplars joined by blank lines, `{query}` the query text.
The answer is read at `answer_path` (`choices.0.text`, `$.choices[0].text`) and matched to the
attack's answers (case and spacing ignored; anything else = no valid answer, index −1).

There is no clean statistic to resample: every membership trial is one real call (estimator
`direct`), and only the released answer is observable (black box). Timeouts and retries (connection
errors, HTTP 429 and 5xx, with exponential back-off) come from the request; a call that still
fails ends the audit with an `AuditError` naming the URL and the status, never the reply's body.
In the service every call goes through `app.egress.egress_client(RunContext.egress)`: the URL must
match ICLAUDIT_ENDPOINT_ALLOWLIST, the resolved address is checked at connect time, and redirects
are not followed. A header may name a secret (`{"secret": "TARGET_KEY"}`, app/secrets.py) instead of
holding it: the value is resolved through `RunContext.secrets` only when the client is built.

Deployments (issue 22): every answered call goes to `RunContext.responses` keyed by the exact request
and its occurrence, and a resumed audit replays those instead of calling again; a 429/503 `Retry-After`
is waited out, `rate` paces the calls (halved after a 429), the audit's budget is checked before each
request; `steps`/`close` make a multi-step target (`_trial`). `ChatTargetSpec`/`TargetEngines` let a
deployed chat-completions app stand in for the model of any mia audit.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from app.audit.budget import Meter
from app.audit.icl.contexts import format_exemplar
from app.audit.mechanisms.base import BinaryTarget, CleanSource, Mechanism, Release, Theory, claimed_theory
from app.audit.runtime import AuditError, ResponseStore
from app.datasets.types import Example
from app.egress import AllowList, EgressRefused, egress_client
from app.secrets import NAME_PATTERN, MissingSecret, resolver

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
STORE_EVERY = 50  # answered calls written to the response store at once
MAX_RETRY_AFTER = 60.0  # longest Retry-After honoured, seconds
MAX_INTERVAL = 60.0  # slowest pace adaptive back-off reaches, seconds per call


def _retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header (delta-seconds or an HTTP date), capped; None if absent/invalid."""
    if not value:
        return None
    try:
        seconds = float(value)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            seconds = parsedate_to_datetime(value).timestamp() - time.time()
        except (TypeError, ValueError):
            return None
    return min(MAX_RETRY_AFTER, max(0.0, seconds))


_PATH_TOKEN = re.compile(r"[^.\[\]]+|\[\d+\]")


class SecretRef(BaseModel):
    """A header value held by the server: the tenant's secrets file or ICLAUDIT_SECRET_<secret>."""

    model_config = ConfigDict(extra="forbid")

    secret: str = Field(pattern=NAME_PATTERN, description="The secret's name, e.g. TARGET_KEY.")


HeaderValue = str | SecretRef


class StepSpec(BaseModel):
    """One request of a multi-step target, sent before (`steps`) or after (`close`) the audited call.

    Its URL and body are templates like the endpoint's: `{context}`, `{query}` and every value an
    earlier step saved (`{session_id}`; a string that is exactly `"{name}"` keeps the value's JSON type)."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", max_length=2000, description="URL template of this request.")
    method: Literal["POST", "GET", "PUT", "PATCH", "DELETE"] = "POST"
    body: Any = Field(default=None, description="JSON body template (none for GET/DELETE when null).")
    save: dict[str, str] = Field(
        default_factory=dict,
        max_length=16,
        description="Values to keep from this step's JSON reply: name → JSON path ($.id).",
    )


class ChatTargetSpec(BaseModel):
    """A deployed chat-completions app audited directly as the model (issue 22 §4): the audit's prompts —
    the private records in the system message, the attack's query as the user's — go to its
    OpenAI-compatible `/chat/completions`, and the grey-box attacks read the returned `top_logprobs`."""

    model_config = ConfigDict(extra="forbid")

    url: str = Field(pattern=r"^https?://", max_length=2000, description="Its base URL (…/v1).")
    model: str = Field(min_length=1, max_length=200, description="The served model name it expects.")
    headers: dict[str, HeaderValue] = Field(
        default_factory=dict, description='Extra HTTP headers; credentials by reference: {"secret": "NAME"}.'
    )
    top_k: int = Field(default=20, ge=1, le=20, description="top_logprobs asked per step.")
    timeout_s: float = Field(default=60.0, gt=0, le=300)


def resolve_headers(
    headers: dict[str, Any], secrets: Callable[[str], str] | None, where: str
) -> dict[str, str]:
    """`headers` with every secret reference replaced by its value (AuditError naming a missing one)."""
    resolve = secrets or resolver(tenant=None)
    out = {}
    for name, value in headers.items():
        if isinstance(value, str):
            out[name] = value
            continue
        ref = value.secret if isinstance(value, SecretRef) else value["secret"]
        try:
            out[name] = resolve(ref)
        except MissingSecret as exc:
            raise AuditError(f"{where}.{name}: {exc}") from None
    return out


def target_engine(
    spec: ChatTargetSpec, *, egress: AllowList | None, secrets: Callable[[str], str] | None
) -> Any:
    """The LLM engine of a chat-completions target: the project's OpenAI-compatible client, through the
    egress policy, with the tenant's resolved headers; its refusals and failures as AuditErrors that name
    the URL and never quote the reply."""
    from app.engines.openai_engine import OpenAIServerError, chat_target_engine

    engine = chat_target_engine(
        base_url=spec.url,
        model=spec.model,
        headers=resolve_headers(spec.headers, secrets, "target.headers"),
        egress=egress,
        top_k=spec.top_k,
        timeout_s=spec.timeout_s,
    )

    class _Guarded:
        """Failures of the target become the audit's error (AuditError), never an internal one."""

        def __getattr__(self, name: str) -> Any:
            attr = getattr(engine, name)
            if not callable(attr) or name.startswith("_"):
                return attr

            def call(*args: Any, **kwargs: Any) -> Any:
                try:
                    return attr(*args, **kwargs)
                except EgressRefused as exc:
                    raise AuditError(f"target {spec.url} refused by this service: {exc.reason}") from None
                except OpenAIServerError as exc:
                    raise AuditError(f"target {spec.url} failed: {exc}") from None

            return call

    return _Guarded()


class TargetEngines:
    """The run's engine provider with a chat-completions target as its one model (built on first use,
    through the run's egress policy and secrets); embedders come from the service's own provider."""

    def __init__(self, ctx: Any, spec: ChatTargetSpec) -> None:
        self._engines = ctx.engines
        self._spec = spec
        self._egress = ctx.egress
        self._secrets = ctx.secrets
        self._llm: Any = None

    def llm(self, name: str) -> Any:
        if self._llm is None:
            self._llm = target_engine(self._spec, egress=self._egress, secrets=self._secrets)
        return self._llm

    def embedder(self, name: str | None = None) -> Any:
        return self._engines.embedder(name)


@dataclass(frozen=True)
class EndpointCall:
    """One call body's ingredients: the formatted exemplars of the context and the user query."""

    exemplars: tuple[str, ...]
    query: str


def fill_body(template: Any, call: EndpointCall, saved: dict[str, Any] | None = None) -> Any:
    """The request body: `template` with `{context}` / `{query}` (and a multi-step target's `saved` values)
    substituted in every string."""
    if isinstance(template, dict):
        return {key: fill_body(value, call, saved) for key, value in template.items()}
    if isinstance(template, list):
        return [fill_body(value, call, saved) for value in template]
    if isinstance(template, str):
        if template == "{context}":
            return list(call.exemplars)
        for name, value in (saved or {}).items():
            if template == "{" + name + "}":
                return value
        text = template.replace("{context}", "\n\n".join(call.exemplars))
        for name, value in (saved or {}).items():
            text = text.replace("{" + name + "}", value if isinstance(value, str) else json.dumps(value))
        return text.replace("{query}", call.query)
    return template


def read_path(body: Any, path: str) -> Any:
    """The value at a dotted JSON path (`choices.0.text`, `$.choices[0].text`); KeyError if absent."""
    value = body
    for token in _PATH_TOKEN.findall(path.removeprefix("$").lstrip(".")):
        key = token.strip("[]")
        if isinstance(value, list):
            if not key.isdigit() or int(key) >= len(value):
                raise KeyError(path)
            value = value[int(key)]
        elif isinstance(value, dict) and key in value:
            value = value[key]
        else:
            raise KeyError(path)
    return value


def _normal(text: str) -> str:
    return " ".join(str(text).split()).casefold()


class HttpEndpoint(Mechanism):
    name = "http_endpoint"
    needs_llm = False
    white_box_available = False
    estimators = frozenset({"direct"})
    estimators_note = (
        "an endpoint has no clean statistic to resample; every trial is a real call, so use direct "
        "(trials = calls per context)"
    )
    call_batch = 100  # calls between progress reports (and cancellation checks)

    @classmethod
    def from_spec(cls, spec: Any, *, epsilon: float, delta: float) -> HttpEndpoint:
        if spec.endpoint is None:
            raise AuditError("mechanism.endpoint: http_endpoint needs an endpoint (url, body, answer_path)")
        e = spec.endpoint
        return cls(
            url=e.url,
            body=e.body,
            answer_path=e.answer_path,
            headers=e.headers,
            timeout_s=e.timeout_s,
            retries=e.retries,
            rate=getattr(e, "rate", None),
            steps=list(getattr(e, "steps", None) or []),
            close=getattr(e, "close", None),
            theory=claimed_theory(epsilon, delta),
        )

    def result_extras(self) -> dict:
        return {"endpoint_calls": self.calls, "endpoint_replayed": self.replayed}

    def __init__(
        self,
        *,
        url: str,
        body: Any,
        answer_path: str,
        theory: Theory,
        headers: dict[str, HeaderValue] | None = None,
        timeout_s: float = 10.0,
        retries: int = 2,
        rate: float | None = None,
        steps: Sequence[StepSpec] = (),
        close: StepSpec | None = None,
    ) -> None:
        super().__init__(partitions=1, theory=theory)
        self.url = url
        self.body = body
        self.answer_path = answer_path
        self.headers = dict(headers or {})
        self.timeout_s = timeout_s
        self.retries = retries
        self.calls = 0
        self.egress: AllowList | None = None  # set from RunContext.egress by the kind (the service always)
        self.secrets: Callable[[str], str] | None = None  # RunContext.secrets; None: ICLAUDIT_SECRET_* only
        self.meter: Meter | None = None  # the audit's budget (set by the kind)
        self.responses: ResponseStore | None = (
            None  # RunContext.responses: answered calls, replayed on resume
        )
        self.replayed = 0
        self.close_failures = 0
        self._seen: dict[str, int] = {}
        self.interval = 1.0 / rate if rate else 0.0
        self.steps = list(steps)
        self.close = close
        self._next_at = 0.0

    def resolved_headers(self) -> dict[str, str]:
        """The headers with every secret reference replaced by its value (AuditError naming a missing one)."""
        return resolve_headers(self.headers, self.secrets, "mechanism.endpoint.headers")

    def blocks(self, n: int, canary_position: int, rng: np.random.Generator) -> list[np.ndarray]:
        """The whole context goes to the endpoint; the deployed system partitions it itself."""
        return [np.arange(n)]

    def audit_inputs(self, query, parts: Sequence[tuple[Example, ...]]) -> list[EndpointCall]:
        if not query.context_in_system:
            raise AuditError(
                "mechanism http_endpoint: the attack's query must be a user query apart from the context "
                "(attack canary_prompt)"
            )
        user = query.prompt(()).text
        return [EndpointCall(tuple(format_exemplar(e) for e in part), user) for part in parts]

    def collect(
        self,
        prompts: Sequence[EndpointCall],
        answers: Sequence[str],
        source: CleanSource,
        n_calls: int,
        rng: np.random.Generator,
    ) -> np.ndarray:
        """`n_calls` real calls with the (single) context; the released answer's index, shape (n, 1)."""
        import httpx

        (call,) = prompts
        body = fill_body(self.body, call)
        index = {_normal(a): i for i, a in enumerate(answers)}
        out = np.empty((n_calls, 1))
        # the exact request (URL and body; never the headers) and its occurrence in this audit's calls
        plan = [
            self.url,
            body,
            [st.model_dump() for st in self.steps],
            self.close and self.close.model_dump(),
        ]
        digest = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()
        first = self._seen.get(digest, 0)
        self._seen[digest] = first + n_calls
        keys = [f"{digest}#{first + i}" for i in range(n_calls)]
        stored = self.responses.get(keys) if self.responses is not None else {}
        fresh: dict[str, Any] = {}
        headers = self.resolved_headers()
        if self.egress is not None:
            client = egress_client(self.egress, timeout=self.timeout_s, retries=self.retries, headers=headers)
        else:  # a trusted local run (library, tests): no allow-list
            transport = httpx.HTTPTransport(retries=self.retries)
            client = httpx.Client(transport=transport, timeout=self.timeout_s, headers=headers)
        try:
            with client:
                for i, key in enumerate(keys):
                    if key in stored:
                        answer = stored[key]
                        self.replayed += 1
                    else:
                        answer = (
                            self._trial(client, call, body)
                            if self.steps or self.close
                            else self._call(client, body)
                        )
                        fresh[key] = answer
                        if len(fresh) >= STORE_EVERY:
                            self._store(fresh)
                    out[i, 0] = index.get(_normal(answer), -1)
        finally:  # what was answered is kept, whatever ends the loop (an outage, a budget)
            self._store(fresh)
        return out

    def _store(self, fresh: dict[str, Any]) -> None:
        if self.responses is not None and fresh:
            self.responses.put(dict(fresh))
        fresh.clear()

    def _trial(self, client, call: EndpointCall, body: Any) -> Any:
        """One multi-step trial: a fresh cookie jar, the `steps` (saving values from their replies), the
        audited call with those values, then `close` whatever happened (its failure is not the trial's)."""
        client.cookies.clear()
        saved: dict[str, Any] = {}
        try:
            for step in self.steps:
                reply = self._call(
                    client,
                    fill_body(step.body, call, saved),
                    url=fill_body(step.url, call, saved),
                    method=step.method,
                    raw=True,
                )
                for name, path in step.save.items():
                    try:
                        saved[name] = read_path(reply, path)
                    except KeyError:
                        raise AuditError(
                            f"endpoint step {step.url}: no value at {path!r} for {{{name}}} in its JSON reply "
                            "(the reply itself is not shown)"
                        ) from None
            return self._call(client, fill_body(self.body, call, saved), url=fill_body(self.url, call, saved))
        finally:
            if self.close is not None and (saved or not self.steps):
                try:
                    self._call(
                        client,
                        fill_body(self.close.body, call, saved),
                        url=fill_body(self.close.url, call, saved),
                        method=self.close.method,
                        raw=True,
                    )
                except AuditError:
                    self.close_failures += 1

    def _call(
        self, client, body: Any, *, url: str | None = None, method: str = "POST", raw: bool = False
    ) -> Any:
        """One real call (paced to `rate`, checked against the budget); the value at answer_path."""
        if self.meter is not None:
            self.meter.check(calls=1)  # the call that would pass max_calls is not made
        if self.interval > 0:
            wait = self._next_at - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            self._next_at = max(time.monotonic(), self._next_at) + self.interval
        reply = self._post(client, body, url=url or self.url, method=method)
        self.calls += 1
        if self.meter is not None:
            self.meter.charge(calls=1)
        if raw:
            return reply
        try:
            return read_path(reply, self.answer_path)
        except KeyError as exc:
            raise AuditError(
                f"endpoint {self.url}: no answer at {self.answer_path!r} in its JSON reply "
                f"(a {type(reply).__name__}; the reply itself is not shown)"
            ) from exc

    def _post(self, client, body: Any, *, url: str, method: str = "POST") -> Any:
        import httpx

        for attempt in range(self.retries + 1):
            try:
                sends = body is not None or method not in ("GET", "DELETE")
                response = client.request(method, url, json=body) if sends else client.request(method, url)
            except EgressRefused as exc:
                raise AuditError(f"endpoint {url} refused by this service: {exc.reason}") from None
            except httpx.HTTPError as exc:
                problem = f"{type(exc).__name__}: {exc}"
            else:
                if 300 <= response.status_code < 400:
                    raise AuditError(
                        f"endpoint {url} answered a redirect (HTTP {response.status_code}); redirects "
                        "are not followed: give the final URL"
                    )
                if response.status_code < 300:
                    if not response.content:  # 204 and the like (a close step)
                        return None
                    try:
                        return response.json()
                    except json.JSONDecodeError:
                        raise AuditError(
                            f"endpoint {url} did not answer JSON (HTTP {response.status_code}, "
                            f"{len(response.content)} bytes; the reply is not shown)"
                        ) from None
                # Reply bodies are never shown: the error goes to the tenant.
                problem = f"HTTP {response.status_code}"
                if response.status_code not in _RETRY_STATUS:
                    break
                if response.status_code == 429 and self.interval > 0:
                    self.interval = min(MAX_INTERVAL, 2 * self.interval)  # adaptive: half the rate from now
                told = _retry_after(response.headers.get("retry-after"))
                if told is not None and attempt < self.retries:
                    time.sleep(told)  # the target said when: honour it (capped at MAX_RETRY_AFTER)
                    continue
            if attempt < self.retries:
                time.sleep(min(2.0, 0.1 * 2**attempt))
        raise AuditError(f"endpoint {url} failed ({problem})")

    def release(self, clean: np.ndarray, rng: np.random.Generator) -> Release:
        """The endpoint already released: its answers pass through unchanged."""
        answer = np.asarray(clean, dtype=np.int64)[:, 0]
        return Release(answer=answer, white_box=np.zeros((len(answer), 0)))

    def binary_view(self, release: Release, target: BinaryTarget) -> tuple[np.ndarray, np.ndarray]:
        """Black box only: released answer = the attack's "present" answer (002 A.3: "1")."""
        decision = release.answer == target.positive
        return decision, decision.astype(np.float64)
