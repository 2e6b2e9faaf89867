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
errors and HTTP 5xx, with exponential back-off) come from the request; a stretch of HTTP 429 is waited out
for as long as the budget's `max_seconds` allows (then the budget stops the audit, which keeps its trials)
or, without one, RATE_LIMIT_PATIENCE seconds; a call that still fails ends the audit with an `AuditError`
naming the URL, the status and that its retries ran out (tries, seconds), never the reply's body.
In the service every call goes through `app.egress.egress_client(RunContext.egress)`: the URL must
match ICLAUDIT_ENDPOINT_ALLOWLIST, the resolved address is checked at connect time, and redirects
are not followed; the policy also bounds sizes: a reply is read up to ICLAUDIT_TARGET_MAX_REPLY_BYTES, and a
filled body is counted before it is built (`filled_size`) and refused past ICLAUDIT_TARGET_MAX_BODY_BYTES;
placeholders are filled in one pass, so a value never brings in more of them. A header may name a secret (`{"secret": "TARGET_KEY"}`, app/secrets.py) instead of
holding it: the value is resolved through `RunContext.secrets` only when the client is built.

Deployments: every answered call goes to `RunContext.responses` keyed by the exact request
and its occurrence, and a resumed audit replays those instead of calling again; a 429/503 `Retry-After`
is waited out by every call, `rate` paces the calls, and `max_concurrency` calls may be in flight at once
(`Throttle`: a 429/503 halves both, answers win them back additively: AIMD); C1's and C0's calls go out
interleaved trial by trial, and the audit's budget is reserved before each call in that order, so a stop
keeps the pairs answered before it; `steps`/`close` make a multi-step target (`_trial`). Concurrent calls
change nothing but the wall time: every answer is kept under its trial's key (`{trial}`, the trial's index
within its context, may also go into a template for a target seeded per request), the trials are taken and
recorded in trial order, and the failure reported is the one of the earliest trial.
`ChatTargetSpec`/`TargetEngines` let a deployed chat-completions app stand in for the model of any mia audit.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import re
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from app.audit.budget import BudgetExhausted
from app.audit.icl.contexts import format_exemplar
from app.audit.mechanisms.base import BinaryTarget, CleanSource, Mechanism, Release, Theory, claimed_theory
from app.audit.runtime import AuditError
from app.datasets.types import Example
from app.egress import AllowList, EgressRefused, egress_client, header_refused
from app.secrets import NAME_PATTERN, MissingSecret, resolver
from app.secrets import problem as value_problem

_RETRY_STATUS = frozenset({429, 500, 502, 503, 504})
STORE_EVERY = 50  # answered calls written to the response store at once
STORE_BYTES = 4 * 2**20  # or fewer, once their answers add up to this many bytes (JSON)
MAX_RETRY_AFTER = 60.0  # longest Retry-After honoured, seconds
MAX_BACKOFF = 10.0  # longest wait between two tries of a 429 without Retry-After, seconds
RATE_LIMIT_PATIENCE = 300.0  # how long a 429 stretch is waited out without budget.max_seconds, seconds
MAX_INTERVAL = 60.0  # slowest pace adaptive back-off reaches, seconds per call
RATE_STEP = 0.1  # share of the asked `rate` an answered call wins back after a back-off
_CONGESTION = frozenset({429, 503})  # the target says it is overloaded: back off (AIMD)


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


class Throttle:
    """What an endpoint audit may send now: at most `allowed` requests in flight, at most
    `rate` a second, none while a Retry-After runs.

    The back-off is AIMD, like TCP's congestion window: a 429 or 503 halves the allowed concurrency (never
    below 1) and the rate (never below 1/MAX_INTERVAL) once per congestion event — a reply to a request sent
    before the last decrease (an older `epoch`) does not halve again, so four 429s to four calls in flight
    halve once — and each answered call adds 1/limit to the concurrency (one more per round of answers) and
    RATE_STEP of the asked rate to the rate, up to what the request asked. One Throttle serves a mechanism's
    whole audit (its workers share it), so a back-off carries over from one chunk of trials to the next."""

    def __init__(self, max_concurrency: int = 1, rate: float | None = None) -> None:
        self.max_concurrency = max_concurrency
        self.limit = float(max_concurrency)
        self.base_rate = rate
        self.rate = rate
        self.in_flight = 0
        self.peak = 0  # most requests in flight at once
        self.decreases = 0  # congestion events that halved the limit
        self.epoch = 0
        self.pause_until = 0.0
        self.next_at = 0.0
        self._cond = threading.Condition()

    @property
    def allowed(self) -> int:
        return max(1, int(self.limit))

    def send(self, *, paced: bool = True) -> int:
        """Take a slot once one is free and no Retry-After runs, then wait for the rate's turn (`paced`: a
        retry is not paced, it waits its own back-off). Returns the epoch the request goes out in."""
        with self._cond:
            while True:
                wait = self.pause_until - time.monotonic()
                if self.in_flight < self.allowed and wait <= 0:
                    break
                self._cond.wait(wait if wait > 0 else 0.5)
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
            at = time.monotonic()
            if paced and self.rate:
                at = max(at, self.next_at)
                self.next_at = at + 1.0 / self.rate
        while (wait := max(at, self.pause_until) - time.monotonic()) > 0:  # the rate's turn, a new pause
            time.sleep(wait)
        return self.epoch

    def received(self, status: int | None, epoch: int, retry_after: float | None) -> None:
        """The request is back (`status` None: no reply): free its slot, back off or win back."""
        with self._cond:
            self.in_flight -= 1
            if status in _CONGESTION:
                if epoch == self.epoch:
                    self.epoch += 1
                    self.decreases += 1
                    self.limit = max(1.0, self.limit / 2)
                    if self.rate:
                        self.rate = max(1.0 / MAX_INTERVAL, self.rate / 2)
                if retry_after is not None:  # every call waits it out, not only this one
                    self.pause_until = max(self.pause_until, time.monotonic() + retry_after)
            elif status is not None and status < 300:
                self.limit = min(float(self.max_concurrency), self.limit + 1.0 / self.limit)
                if self.rate and self.base_rate:
                    self.rate = min(self.base_rate, self.rate + RATE_STEP * self.base_rate)
            self._cond.notify_all()


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
    """A deployed chat-completions app audited directly as the model: the audit's prompts —
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
    """`headers` with every secret reference replaced by its value; an AuditError naming the header for a
    header the client owns, a literal that is not a valid value, and a missing or invalid secret (never
    quoting a value)."""
    resolve = secrets or resolver(tenant=None)
    out = {}
    for name, value in headers.items():
        if (refused := header_refused(name)) is not None:
            raise AuditError(f"{where}: {refused}")
        if isinstance(value, str):
            if (why := value_problem(value)) is not None:
                raise AuditError(f"{where}.{name}: not a valid header value ({why})")
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


_PLACEHOLDER = re.compile(r"\{([^{}]+)\}")


def _values(call: EndpointCall, saved: dict[str, Any] | None) -> dict[str, Any]:
    """What each `{name}` of a template stands for: the saved values, `{context}` and `{query}`."""
    return {**(saved or {}), "context": "\n\n".join(call.exemplars), "query": call.query}


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def fill_body(template: Any, call: EndpointCall, saved: dict[str, Any] | None = None) -> Any:
    """The request body: `template` with `{context}` / `{query}` (and a multi-step target's `saved` values)
    substituted in every string, in one pass (a substituted value is never read for placeholders again)."""
    values = _values(call, saved)

    def fill(template: Any) -> Any:
        if isinstance(template, dict):
            return {key: fill(value) for key, value in template.items()}
        if isinstance(template, list):
            return [fill(value) for value in template]
        if isinstance(template, str):
            if template == "{context}":
                return list(call.exemplars)
            whole = _PLACEHOLDER.fullmatch(template)
            if whole and whole.group(1) in (saved or {}):
                return saved[whole.group(1)]  # type: ignore[index]
            return _PLACEHOLDER.sub(
                lambda m: _text(values[m.group(1)]) if m.group(1) in values else m.group(0), template
            )
        return template

    return fill(template)


def filled_size(template: Any, call: EndpointCall, saved: dict[str, Any] | None = None) -> int:
    """Characters of `fill_body(template, call, saved)` as JSON, counted without building it (a lower bound
    on its encoded bytes: escapes and UTF-8 only add), so a template that repeats `{context}` is refused
    before its body takes memory."""
    values = {name: len(_text(value)) for name, value in _values(call, saved).items()}

    def size(template: Any) -> int:
        if isinstance(template, dict):
            return (
                2
                + sum(len(json.dumps(k)) + 1 + size(v) for k, v in template.items())
                + max(0, len(template) - 1)
            )
        if isinstance(template, list):
            return 2 + sum(size(v) for v in template) + max(0, len(template) - 1)
        if isinstance(template, str):
            if template == "{context}":
                return 2 + sum(len(e) + 2 for e in call.exemplars) + max(0, len(call.exemplars) - 1)
            whole = _PLACEHOLDER.fullmatch(template)
            if whole and whole.group(1) in (saved or {}):
                return len(json.dumps(saved[whole.group(1)]))  # type: ignore[index]
            total = 2 + len(template)
            for m in _PLACEHOLDER.finditer(template):
                if m.group(1) in values:
                    total += values[m.group(1)] - len(m.group(0))
            return total
        return len(json.dumps(template))

    return size(template)


def body_floors(endpoint: Any, exemplars: int) -> list[tuple[str, int, int]]:
    """(field, fewest bytes, `{context}` copies) of each request template of an endpoint spec, filled with
    `exemplars` of the shortest formatted exemplar (`Text: `), an empty query and empty saved values: what a
    submit can check before any dataset is read (the run checks the real sizes, `HttpEndpoint._fill`)."""
    saved: dict[str, Any] = {"trial": 0}
    for step in endpoint.steps:
        saved |= dict.fromkeys(step.save, "")
    call = EndpointCall(("Text: ",) * exemplars, "")
    templates = [("mechanism.endpoint.body", endpoint.body), ("mechanism.endpoint.url", endpoint.url)]
    for k, step in enumerate(endpoint.steps):
        templates += [
            (f"mechanism.endpoint.steps[{k}].body", step.body),
            (f"mechanism.endpoint.steps[{k}].url", step.url),
        ]
    if endpoint.close is not None:
        templates += [
            ("mechanism.endpoint.close.body", endpoint.close.body),
            ("mechanism.endpoint.close.url", endpoint.close.url),
        ]
    return [
        (where, filled_size(template, call, saved), json.dumps(template).count("{context}"))
        for where, template in templates
    ]


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
            max_concurrency=getattr(e, "max_concurrency", 1),
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
        max_concurrency: int = 1,
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
        self.replayed = 0
        self.close_failures = 0
        self._seen: dict[str, int] = {}
        self.throttle = Throttle(max_concurrency, rate)
        self.steps = list(steps)
        self.close = close
        self._lock = threading.Lock()  # calls, replayed, close_failures and the budget's reservation
        self._reserved = 0  # budget calls reserved by trials taken and not yet made
        self._local = threading.local()  # the trial's calls made so far (its worker's)

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
        return self._answers(prompts, answers, n_calls)[0]

    def collect_pair(
        self,
        prompts: tuple[Sequence[EndpointCall], Sequence[EndpointCall]],
        answers: Sequence[str],
        source: CleanSource,
        n_calls: int,
        rngs: tuple[np.random.Generator, np.random.Generator],
    ) -> tuple[np.ndarray, np.ndarray]:
        """C1's and C0's calls interleaved trial by trial (C1 0, C0 0, C1 1, …): each context's answers are
        those `collect` would get (the same requests, occurrences and store keys), and a budget stop keeps
        the pairs answered before it (BudgetExhausted.partial), wasting at most the calls in flight."""
        clean_in, clean_out = self._answers([*prompts[0], *prompts[1]], answers, n_calls)
        return clean_in, clean_out

    def _answers(
        self, calls: Sequence[EndpointCall], answers: Sequence[str], n_calls: int
    ) -> list[np.ndarray]:
        """`n_calls` real calls with each of `calls`' contexts, interleaved trial by trial; per context the
        released answer's index, shape (n, 1). A stop raises with `partial`: the rows of every context up to
        the first trial one of them lacks."""
        index = {_normal(a): i for i, a in enumerate(answers)}
        jobs: list[tuple[str, EndpointCall, int]] = []  # (store key, call, trial) in the order they go out
        sides = [self._keys(call, n_calls) for call in calls]
        for i in range(n_calls):
            jobs.extend((keys[i], call, first + i) for (keys, first), call in zip(sides, calls, strict=True))
        stored = self.responses.get([key for key, _, _ in jobs]) if self.responses is not None else {}
        got: dict[int, int] = {}  # a trial's answer as its index: the answers themselves are not kept
        for j, (key, _, _) in enumerate(jobs):
            if key in stored:
                got[j] = index.get(_normal(stored[key]), -1)
                self.replayed += 1
        del stored
        todo = [j for j in range(len(jobs)) if j not in got]
        width = len(calls)

        def rows(trials: int) -> list[np.ndarray]:
            return [
                np.array([got[i * width + c] for i in range(trials)], dtype=float).reshape(trials, 1)
                for c in range(width)
            ]

        try:
            got.update(self._issue(todo, jobs, lambda a: index.get(_normal(a), -1)))
        except BudgetExhausted as exc:  # keep every context's answers up to the first trial one lacks
            got.update(exc.partial or {})
            missing = next((j for j in range(len(jobs)) if j not in got), len(jobs))
            exc.partial = tuple(rows(missing // width))
            raise
        return rows(n_calls)

    def _keys(self, call: EndpointCall, n_calls: int) -> tuple[list[str], int]:
        """The response-store keys of the next `n_calls` calls with `call`'s context — the exact request (URL
        and body; never the headers) and its occurrence in this audit's calls — and the first occurrence."""
        body = self._fill(self.body, call, None, "mechanism.endpoint.body")
        plan = [
            self.url,
            body,
            [st.model_dump() for st in self.steps],
            self.close and self.close.model_dump(),
        ]
        digest = hashlib.sha256(json.dumps(plan, sort_keys=True, default=str).encode()).hexdigest()
        first = self._seen.get(digest, 0)
        self._seen[digest] = first + n_calls
        return [f"{digest}#{first + i}" for i in range(n_calls)], first

    def _client(self, headers: dict[str, str]) -> Any:
        import httpx

        if self.egress is not None:
            return egress_client(self.egress, timeout=self.timeout_s, retries=self.retries, headers=headers)
        # a trusted local run (library, tests): no allow-list
        transport = httpx.HTTPTransport(retries=self.retries)
        return httpx.Client(transport=transport, timeout=self.timeout_s, headers=headers)

    def _issue(
        self, todo: list[int], jobs: list[tuple[str, EndpointCall, int]], score: Callable[[Any], int]
    ) -> dict[int, int]:
        """The answers of `todo` (indices into `jobs`: store key, call, trial) as `score`s, called by up to `max_concurrency`
        workers, each with its own client (a multi-step trial's cookies are its own). Trials are taken in
        order and each reserves its calls in the budget as it is taken, so a budget stops at the same trial
        whatever the concurrency; answers go to the response store in trial order (every STORE_EVERY or
        STORE_BYTES, and all at the end whatever ends the run) and are dropped once stored, so an audit holds
        at most a batch of them; the error raised is the earliest trial's (BudgetExhausted included, with the
        scores answered before it as `partial`), or the store's (its byte cap)."""
        headers = self.resolved_headers()
        per_trial = len(self.steps) + 1 + (self.close is not None)
        answered: dict[int, Any] = {}  # answers not yet stored
        sizes: dict[int, int] = {}
        scored: dict[int, int] = {}
        failed: dict[int, BaseException] = {}
        state = {"next": 0, "stored": 0, "stop": False}
        done = threading.Condition()

        def flush(final: bool = False) -> None:  # the caller's thread only (the store is not shared)
            """Store the answered trials in trial order, STORE_EVERY (or STORE_BYTES) at a time; `final`: all
            the rest."""
            while True:
                with done:
                    start = upto = state["stored"]
                    held = 0
                    while (
                        upto < len(todo)
                        and upto - start < STORE_EVERY
                        and held < STORE_BYTES
                        and todo[upto] in answered
                    ):
                        held += sizes[todo[upto]]
                        upto += 1
                    batch = [todo[j] for j in range(start, upto)]
                    if final:  # and the answers after a gap (a failed or untaken trial), in trial order
                        batch = sorted(answered)
                    elif len(batch) < STORE_EVERY and held < STORE_BYTES:
                        return
                    state["stored"] = len(todo) if final else upto
                    fresh = {jobs[i][0]: answered.pop(i) for i in batch}
                    for i in batch:
                        sizes.pop(i, None)
                if self.responses is not None and fresh:
                    self.responses.put(fresh)
                if final:
                    return

        def worker(client: Any, inline: bool) -> None:
            with client:
                while True:
                    with done:
                        if failed or state["stop"] or state["next"] >= len(todo):
                            return
                        i = todo[state["next"]]
                        state["next"] += 1
                        try:
                            self._reserve(per_trial)
                        except BudgetExhausted as exc:
                            failed[i] = exc
                            return
                    self._local.made = 0
                    try:
                        answer = self._trial(client, jobs[i][1], jobs[i][2])
                    except BaseException as exc:  # kept: the earliest trial's error is raised
                        with done:
                            failed[i] = exc
                            done.notify_all()
                        return
                    finally:
                        self._release(per_trial - self._local.made)
                    size = len(json.dumps(answer, default=str))
                    with done:
                        answered[i] = answer
                        sizes[i] = size
                        scored[i] = score(answer)
                        done.notify_all()
                    if inline:
                        flush()

        workers = min(self.throttle.max_concurrency, len(todo))
        try:
            if workers <= 1:
                worker(self._client(headers), inline=True)
            else:  # clients made first, so the first calls go out together
                clients = [self._client(headers) for _ in range(workers)]
                threads = [
                    threading.Thread(
                        target=contextvars.copy_context().run, args=(worker, client, False), daemon=True
                    )
                    for client in clients
                ]
                for thread in threads:
                    thread.start()
                try:
                    while any(thread.is_alive() for thread in threads):
                        with done:
                            done.wait(0.2)
                        flush()
                finally:  # the store refused (its byte cap): the workers stop after their trial
                    with done:
                        state["stop"] = True
                    for thread in threads:
                        thread.join()
        finally:  # what was answered is kept, whatever ends the run (an outage, a budget)
            flush(final=True)
        if failed:
            error = failed[min(failed)]
            if isinstance(error, BudgetExhausted):
                error.partial = scored
            raise error
        return scored

    def _reserve(self, calls: int) -> None:
        """Reserve a trial's calls in the budget (BudgetExhausted if they would pass it)."""
        with self._lock:
            if self.meter is not None:
                # the call that would pass max_calls is not made
                self.meter.check(calls=self._reserved + calls)
            self._reserved += calls

    def _release(self, calls: int) -> None:
        with self._lock:
            self._reserved -= calls

    def _trial(self, client, call: EndpointCall, trial: int) -> Any:
        """One trial: the audited call, or for a multi-step target a fresh cookie jar, the `steps` (saving
        values from their replies), the audited call with those values, then `close` whatever happened (its
        failure is not the trial's). `{trial}` in a template is the trial's index within its context."""
        given: dict[str, Any] = {"trial": trial}
        if not self.steps and self.close is None:
            return self._call(client, self._fill(self.body, call, given, "mechanism.endpoint.body"))
        client.cookies.clear()
        saved: dict[str, Any] = {}
        try:
            for k, step in enumerate(self.steps):
                values = given | saved
                where = f"mechanism.endpoint.steps[{k}]"
                reply = self._call(
                    client,
                    self._fill(step.body, call, values, f"{where}.body"),
                    url=self._fill(step.url, call, values, f"{where}.url"),
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
            values = given | saved
            return self._call(
                client,
                self._fill(self.body, call, values, "mechanism.endpoint.body"),
                url=self._fill(self.url, call, values, "mechanism.endpoint.url"),
            )
        finally:
            if self.close is not None and (saved or not self.steps):
                values = given | saved
                try:
                    self._call(
                        client,
                        self._fill(self.close.body, call, values, "mechanism.endpoint.close.body"),
                        url=self._fill(self.close.url, call, values, "mechanism.endpoint.close.url"),
                        method=self.close.method,
                        raw=True,
                    )
                except AuditError:
                    with self._lock:
                        self.close_failures += 1

    def _fill(self, template: Any, call: EndpointCall, values: dict[str, Any] | None, where: str) -> Any:
        """`fill_body`, refused (AuditError with the numbers) before it is built when its size would pass the
        service's ICLAUDIT_TARGET_MAX_BODY_BYTES (`egress.max_body_bytes`; the transport checks the exact
        encoded size again before sending)."""
        limit = self.egress.max_body_bytes if self.egress is not None else None
        if limit is not None:
            size = filled_size(template, call, values)
            if size > limit:
                copies = json.dumps(template).count("{context}")
                raise AuditError(
                    f"{where}: filled, it would be at least {size:,} bytes ({copies} × {{context}} of "
                    f"{len(_values(call, None)['context']):,} characters), above this service's {limit:,} "
                    f"({self.egress.body_setting}); not sent"  # type: ignore[union-attr]
                )
        return fill_body(template, call, values)

    def _call(
        self, client, body: Any, *, url: str | None = None, method: str = "POST", raw: bool = False
    ) -> Any:
        """One real call (through the throttle, charged to the budget its trial reserved); the value at
        answer_path."""
        reply = self._post(client, body, url=url or self.url, method=method)
        with self._lock:
            self.calls += 1
            self._reserved -= 1
            self._local.made = getattr(self._local, "made", 0) + 1
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
        """One request and its JSON reply. Connection errors and 5xx are retried `retries` times (a 503's
        Retry-After waited out); a 429 stretch is waited out for as long as the budget's max_seconds
        allows (then the budget stops the audit, keeping its trials) or, without one, RATE_LIMIT_PATIENCE
        seconds; an error says that the retries ran out, after how many tries and how long."""
        import httpx

        began, tries, failures = time.monotonic(), 0, 0
        while True:
            tries += 1
            epoch = self.throttle.send(paced=tries == 1)
            status, told = None, None
            try:
                sends = body is not None or method not in ("GET", "DELETE")
                response = client.request(method, url, json=body) if sends else client.request(method, url)
            except BaseException as exc:
                self.throttle.received(None, epoch, None)  # whatever it is: a slot kept would stall the rest
                if isinstance(exc, EgressRefused):
                    raise AuditError(f"endpoint {url} refused by this service: {exc.reason}") from None
                if isinstance(exc, (httpx.InvalidURL, httpx.LocalProtocolError, UnicodeError)):
                    # the filled URL or a header is not valid HTTP (a saved value with a line break): the
                    # tenant's input, not a fault of this service; the library's words may quote a value
                    raise AuditError(
                        f"endpoint {url!r}: the request is not valid HTTP once filled in ({type(exc).__name__}; "
                        "a URL or header value holds a line break, a control or a non-ASCII character)"
                    ) from None
                if not isinstance(exc, httpx.HTTPError):
                    raise
                problem = f"{type(exc).__name__}: {exc}"
            else:
                status = response.status_code
                if status in _CONGESTION:
                    told = _retry_after(response.headers.get("retry-after"))
                self.throttle.received(status, epoch, told)
                if 300 <= status < 400:
                    raise AuditError(
                        f"endpoint {url} answered a redirect (HTTP {status}); redirects "
                        "are not followed: give the final URL"
                    )
                if status < 300:
                    if not response.content:  # 204 and the like (a close step)
                        return None
                    try:
                        return response.json()
                    except json.JSONDecodeError:
                        raise AuditError(
                            f"endpoint {url} did not answer JSON (HTTP {status}, "
                            f"{len(response.content)} bytes; the reply is not shown)"
                        ) from None
                # Reply bodies are never shown: the error goes to the tenant.
                problem = f"HTTP {status}"
                if status not in _RETRY_STATUS:
                    raise AuditError(f"endpoint {url} failed ({problem})")
            if status == 429:  # rate limited: wait, within the budget's time or the patience
                pause = told or min(MAX_BACKOFF, 0.1 * 2 ** (tries - 1))  # Retry-After 0: back off
                self._wait_out_429(url, began, tries, pause)
                if not told:  # a Retry-After is waited out by the next send (the throttle's pause)
                    time.sleep(pause)
                continue
            failures += 1
            if failures > self.retries:
                raise AuditError(
                    f"endpoint {url} failed ({problem}); its retries ran out: {tries} tries over "
                    f"{time.monotonic() - began:.1f} s (endpoint.retries = {self.retries})"
                )
            if told is None:
                time.sleep(min(2.0, 0.1 * 2 ** (failures - 1)))

    def _wait_out_429(self, url: str, began: float, tries: int, pause: float) -> None:
        """Whether a 429 stretch may wait `pause` more seconds: under a max_seconds budget while the budget
        has them (else BudgetExhausted: the audit stops and keeps its trials), without one until
        RATE_LIMIT_PATIENCE seconds have gone (else an AuditError saying how long it waited)."""
        meter = self.meter
        left = meter.seconds_left() if meter is not None else None
        if meter is not None and meter.spec is not None and left is not None:  # left: a max_seconds cap
            if pause >= left:
                raise BudgetExhausted("max_seconds", meter.spec.max_seconds or 0)
            return
        waited = time.monotonic() - began
        if waited + pause > RATE_LIMIT_PATIENCE:
            raise AuditError(
                f"endpoint {url} failed (HTTP 429, rate limited); its retries ran out: {tries} tries over "
                f"{waited:.1f} s, and an audit without budget.max_seconds waits out 429s for at most "
                f"{RATE_LIMIT_PATIENCE:g} s"
            )

    def release(self, clean: np.ndarray, rng: np.random.Generator) -> Release:
        """The endpoint already released: its answers pass through unchanged."""
        answer = np.asarray(clean, dtype=np.int64)[:, 0]
        return Release(answer=answer, white_box=np.zeros((len(answer), 0)))

    def binary_view(self, release: Release, target: BinaryTarget) -> tuple[np.ndarray, np.ndarray]:
        """Black box only: released answer = the attack's "present" answer (002 A.3: "1")."""
        decision = release.answer == target.positive
        return decision, decision.astype(np.float64)
