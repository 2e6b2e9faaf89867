"""Settings, from the environment with the prefix ICLAUDIT_ (pydantic-settings).

Absent URLs mean the embedded default: SQLite in `state_dir`, the in-process executor, the packaged
tiny model. Every field is listed in docs/settings.md, generated from the descriptions here by
scripts/settings_doc.py (a test keeps them equal).
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from app.egress import AllowList, parse_allowlist


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="ICLAUDIT_", env_file=".env", extra="ignore")

    database_url: str | None = Field(
        default=None,
        description="SQLAlchemy URL (`postgresql+psycopg://…`). Absent: SQLite in `state_dir`.",
    )
    broker_url: str | None = Field(default=None, description="Redis URL for Celery. Absent: no broker.")
    executor: Literal["inline", "celery"] = Field(
        default="inline",
        description="Where audits run: `inline` (worker processes started by the API process) or `celery`.",
    )
    inline_workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        json_schema_extra={"default_doc": "the cores"},
        description="Worker processes of the embedded executor (default: the cores): that many audits run at "
        "once, outside the API process. They share a model's weights (a memory-mapped file) and, when models "
        "are preloaded, torch's memory; each worker beyond the first adds about 0.3 GB (proportional set "
        "size) with the packaged model while auditing (docs/results/memory.md), more for a larger model: budget "
        "memory per process.",
    )
    engine_threads: int | None = Field(
        default=None,
        ge=1,
        description="CPU threads of an in-process model (the transformers engine), fixed for the life of "
        "the process and recorded in each result (`engines`), so an audit's scores never depend on the "
        "machine's load. Default: the cores divided by inline_workers, at least 1 (with Celery, set it to "
        "the cores divided by the worker's concurrency). A model entry's `threads` option overrides it.",
    )
    celery_tenant_audits: int = Field(
        default=2,
        ge=1,
        description="Celery: most audits of one tenant in the broker at once (queued or running); the rest "
        "wait in the database and are sent as these finish, so another tenant's audit never waits behind a "
        "backlog. Raise it to let one tenant use more workers at once.",
    )
    state_dir: Path = Field(default=Path("var"), description="SQLite file, model cache, uploaded files.")
    data_dir: Path | None = Field(
        default=None, description="Built-in datasets as `<name>/{train,test}.jsonl` (offline copies)."
    )
    cache_dir: Path | None = Field(
        default=None, description="Converted model weights. Default: `state_dir/cache`."
    )
    models_file: Path | None = Field(default=None, description="YAML/JSON list of extra model entries.")
    default_model: str = Field(
        default="smollm2-135m-instruct", description="Model used when a request names none."
    )
    auth_enabled: bool = Field(
        default=True,
        description="Require `Authorization: Bearer <key>`.",
        json_schema_extra={"default_doc": "`true` (`make serve`: `false`)"},
    )
    max_trials: int = Field(default=2_000_000, ge=1, description="Largest `trials` a request may ask for.")
    max_llm_calls: int = Field(default=5_000, ge=1, description="Largest `llm_calls` a request may ask for.")
    max_audit_seconds: int = Field(
        default=6 * 3600,
        ge=60,
        description=(
            "Longest an audit may run (then FAILED, `DEADLINE_EXCEEDED`); Celery's visibility timeout"
            " is this + 1 h."
        ),
    )
    upload_max_bytes: int = Field(default=50 * 2**20, ge=1, description="Largest dataset upload.")
    upload_max_rows: int = Field(default=200_000, ge=1, description="Most rows in an uploaded dataset.")
    heartbeat_seconds: float = Field(
        default=10.0, gt=0, description="How often a running audit writes its heartbeat."
    )
    stale_after_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A RUNNING audit without a heartbeat for this long is presumed dead and re-run.",
    )
    sweep_seconds: float = Field(
        default=30.0, gt=0, description="How often the API re-enqueues PENDING and stale RUNNING audits."
    )
    preload_models: bool = Field(
        default=True,
        description=(
            "Workers, and the API process with the inline executor (in the background), load "
            "`default_model` once at start-up; the first model audit otherwise shows the stage "
            "`loading model` while it loads."
        ),
    )
    api_concurrency: int = Field(
        default=32,
        ge=1,
        description="Requests that hold a database session at once (the API's pool is this + 4); more wait "
        "in a queue without a thread or a connection.",
    )
    api_queue_seconds: float = Field(
        default=10.0,
        gt=0,
        description="Longest a request waits in that queue before `503` with `Retry-After`.",
    )
    db_retry_seconds: float = Field(
        default=120.0,
        gt=0,
        description=(
            "How long the runner retries a claim, an outcome or a release through a transient "
            "database error (disconnect, restart, failover, lock timeout); the sweep retries each "
            "step for 10 s and runs again after `ICLAUDIT_SWEEP_SECONDS`."
        ),
    )
    endpoint_allowlist: list[str] = Field(
        default_factory=list,
        description=(
            "URLs (JSON list) an `http_endpoint` audit may call, matched on scheme, host and port "
            "exactly, then path prefix on a segment boundary after dot segments are resolved "
            "(userinfo, non-canonical IPv4 such as `127.1` or `2130706433`, and invalid host names "
            "refused); empty refuses such audits. The resolved address is checked at connect time: "
            "loopback, private, link-local and metadata addresses are called only through an entry "
            "that names that address itself and that the whole URL matches "
            "(`http://10.0.0.5:8000/v1`). Redirects are not followed; an endpoint's `headers` may not"
            " set `Host`."
        ),
    )
    target_max_reply_bytes: int = Field(
        default=2**20,
        ge=1024,
        description="Most bytes read of one reply of an audited target (an `http_endpoint` call or step, a chat "
        "`target`): read as a stream and dropped at the limit (at once when its Content-Length says more; a "
        "compressed reply is refused, since none is asked for), and the audit ends AUDIT_ERROR naming this "
        "setting. A webhook receiver's reply is never read past its status line and headers.",
    )
    target_max_body_bytes: int = Field(
        default=2**20,
        ge=1024,
        description="Largest request body sent to an audited target. A template that must pass it, filled with the "
        "request's exemplars at their shortest (`{context}` repeated), is 422 at submit and at plan with the "
        "numbers; otherwise the run counts each filled body before building it and ends AUDIT_ERROR with the "
        "numbers, nothing sent.",
    )
    target_max_stored_bytes: int = Field(
        default=32 * 2**20,
        ge=1024,
        description="Most bytes of target answers one audit and its resumes keep for resume (`target_responses`); "
        "a write that would pass it is refused whole and the audit ends AUDIT_ERROR naming this setting. An "
        "endpoint audit holds at most 50 answers (or 4 MiB of them) in memory before they are stored.",
    )
    plan_max_pairs: int = Field(
        default=4000,
        ge=1,
        description="Most record–context pairs (`attack.canaries` × `attack.contexts`) a plan of an audit over "
        "several canaries may rehearse; more is 422 at the larger of the two fields, with the numbers, before "
        "any rehearsal (a plan's time grows in proportion: about 2 ms a pair on one core).",
    )
    plan_timeout_seconds: float = Field(
        default=60.0,
        gt=0,
        le=280,
        description="A plan still computing this long after its worker started it is stopped there and answered "
        "503 (Retry-After); a plan whose caller went away is stopped at once. The API waits at most 300 s for "
        "a plan's turn, its worker's start and the plan, then stops it too.",
    )
    plan_workers: int = Field(
        default=2,
        ge=1,
        description="Plan processes per API process with the embedded executor, each started at its first plan: a "
        "tenant's plan (one at a time) holds one of them and the tenant served least recently takes the next "
        "free one, so another tenant's plan does not wait for it. With Celery, plans go to the workers of the "
        "`plans` queue.",
    )
    default_budget: dict[str, float] | None = Field(
        default=None,
        description=(
            'The budget (`{"max_calls", "max_tokens", "max_seconds"}`, JSON) every tenant\'s `mia`, '
            "`iclinf` and `synthetic_generation` audit gets, cap by cap, unless its request sets a lower "
            "cap (a tenant may only lower it: `{}`, a null or a larger cap keeps the default's, at submit, "
            "at resume and in a sweep); stored with "
            "the audit at submit (`bound` calls nothing and takes no budget: one in its request is a "
            "422). Every cap (max_calls, max_tokens, max_seconds, this default's or the request's) stops "
            "an audit the same way, with what it finished: a mia audit is judged on the C1/C0 trial "
            "pairs it finished (an endpoint's kept one by one as answered, so a stop wastes at most the "
            "calls in flight), an `iclinf` audit measured on its queries, a `synthetic_generation` audit "
            "on its texts (`inconclusive`, reason budget, unless that already shows a violation; "
            "`result.stopped`, `result.spent`); one that finished nothing (no pair: e.g. a bootstrap mia "
            "audit stopped while collecting) fails naming the cap and what it spent. Under max_seconds a "
            "stretch of endpoint 429s is waited out until the budget stops the audit; without it, for "
            "300 s. Progress messages show the spend against the budget."
        ),
    )
    secrets_dir: Path | None = Field(
        default=None,
        description=(
            'Target credentials by reference: an endpoint header `{"secret": "NAME"}` is read, when '
            'the audit calls its target, from `<dir>/<tenant name>.json` (`{"NAME": "value"}`), else '
            "from `ICLAUDIT_SECRET_NAME` in the server's environment when ICLAUDIT_SECRETS_GRANTS grants "
            "it to the tenant (sent only where the allow-list lets audits go). Stored, returned and logged "
            "as the reference only; a literal credential-looking header (`Authorization`, `*key*`, "
            "`*token*`, `*secret*`, `*auth*`, `*subscription*`, `*signature*`, `Cookie`, …), an unset "
            "or ungranted secret (`SECRET_NOT_SET`) or one whose value no header can carry "
            "(`SECRET_INVALID`: leading/trailing whitespace, a line break, a control or non-ASCII "
            "character) is `422` naming the header (app/secrets.py)."
        ),
    )
    secrets_grants: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Which tenants may use each operator secret `ICLAUDIT_SECRET_<NAME>` (JSON: "
        '{"NAME": ["tenant-a", "tenant-b"]}; "*" grants it to every tenant). A name not granted to a tenant '
        "is, for that tenant, not set (the same 422 or audit error as an unknown name). Empty: no tenant "
        "may use an environment secret (a tenant's own secrets go in its file under ICLAUDIT_SECRETS_DIR).",
    )
    webhook_allowlist: list[str] = Field(
        default_factory=list,
        description=(
            "Internal webhook/`notify` targets allowed (JSON list of URLs), with the endpoint allow-"
            "list's rules: public targets need no entry; a loopback/private/link-local/metadata "
            "address is called only at a URL an entry matches whole (the entry "
            "`http://127.0.0.1:18250/hooks` allows `/hooks/…` there, not `/hooksX`, `/admin` or "
            "`/hooks/../admin`). Checked at submit (webhooks, an audit's or a sweep's `notify`: "
            "`422`) and on every delivery (a refused or unparseable target is `FAILED` at once, never"
            " retried)."
        ),
    )
    idempotency_ttl_seconds: float = Field(
        default=24 * 3600,
        gt=0,
        description="How long an `Idempotency-Key` is remembered (then it may be reused).",
    )
    response_retention_seconds: float = Field(
        default=30 * 86400,
        gt=0,
        description="How long an audited target's stored responses (kept so a FAILED or budget-stopped audit "
        "resumes without calling again) are kept; older ones are deleted by the integrations tick, and a "
        "resume after that calls the target again.",
    )
    sweep_max_audits: int = Field(
        default=256,
        ge=1,
        description=(
            "Most child audits (points × seeds) one sweep may create; computed as the product of the "
            "grid's value counts before anything is expanded (`422` at `$.grid`)."
        ),
    )
    webhook_tick_seconds: float = Field(
        default=1.0,
        gt=0,
        description=(
            "How often each API process writes due webhook events, fires due schedules and hands out "
            "due deliveries."
        ),
    )
    webhook_backoff_seconds: float = Field(
        default=5.0,
        gt=0,
        description="First retry delay of a failed delivery; doubled per attempt (capped at 1 h).",
    )
    webhook_max_attempts: int = Field(
        default=12,
        ge=1,
        description="Attempts before a delivery is `FAILED` (about 2.8 h with the defaults).",
    )
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, description="Timeout of one delivery request.")
    webhook_tenant_concurrency: int = Field(
        default=2,
        ge=1,
        description=(
            "Deliveries of one tenant in flight at once in an API process (embedded default: of its 4"
            " delivery threads, handed out round robin over tenants), so one tenant's slow receivers "
            "leave the others room."
        ),
    )
    max_request_bytes: int = Field(
        default=24 * 2**20,
        ge=1024,
        description="Largest body of POST /v1/audits in bytes; larger is 413 before a byte is read (so before "
        "parsing and authentication). 24 MiB holds a `bound` audit of 400,000 + 400,000 scores (16.5 MB as "
        "JSON). Uploads: upload_max_bytes; every other route: max_small_request_bytes.",
    )
    max_small_request_bytes: int = Field(
        default=2**20,
        ge=1024,
        description="Largest body of every route but POST /v1/audits and POST /v1/datasets (sweeps, "
        "schedules, webhooks, calculators, and a body sent where none is read); larger is 413 before a byte "
        "is read.",
    )
    rate_limit: str = Field(
        default="1200/second",
        description=(
            "Requests per tenant (`limits` notation, `;`-separated windows, e.g. "
            "`100/second;3000/minute`); over it `429` with `Retry-After`. Empty: none."
        ),
    )
    write_rate_limit: str = Field(
        default="50/second;1500/minute",
        description="POST/PUT/PATCH/DELETE requests per tenant, on top of rate_limit. Empty: no limit.",
    )
    list_max_bytes: int = Field(
        default=2 * 2**20,
        ge=1024,
        description=(
            "`GET /v1/audits?view=full` stops a page early, with `next_page_token`, once its audits' "
            "stored request and result bodies (their length, read in the database before any row is "
            "loaded) add up past this; a page holds at least one audit."
        ),
    )
    sweep_max_bytes: int = Field(
        default=16 * 2**20,
        ge=1024,
        description=(
            "Most bytes a sweep (or a scheduled sweep) may store: its base request as JSON × its "
            "child audits, computed before anything is expanded; more is `413` at `$.base`."
        ),
    )
    max_concurrent_uploads: int = Field(
        default=2,
        ge=1,
        description=(
            "Dataset uploads one tenant may stream into one API process at once; one more is `429` "
            "before its body is read. An upload streams into a spooled temp file holding no request "
            "slot or database session, is checked in a separate process, and takes a session only to "
            "be stored."
        ),
    )
    max_open_streams: int = Field(
        default=32,
        ge=1,
        description=(
            "Event streams (`/events`) and long-polls (`?wait=`) one tenant may hold open in one API "
            "process at once; one more is `429` naming the setting, with `Retry-After`. A plain poll "
            "is not counted."
        ),
    )
    header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description="`iclaudit serve`: a connection that has not sent a request's whole headers within this long "
        "(after it opened, or after its previous answer) is closed.",
    )
    body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description=(
            "Longest wait for the next piece of a request body; then `408` and the connection closes."
        ),
    )
    keep_alive_seconds: int = Field(
        default=5,
        ge=1,
        description=(
            "`iclaudit serve`: an idle keep-alive connection is closed after this long (uvicorn's "
            "`timeout_keep_alive`)."
        ),
    )
    max_header_bytes: int = Field(
        default=16 * 1024,
        ge=1024,
        description=(
            "`iclaudit serve`: largest request line and headers (uvicorn's "
            "`h11_max_incomplete_event_size`; `iclaudit serve` runs uvicorn's h11 protocol); more is "
            "`400`."
        ),
    )
    max_active_audits: int = Field(
        default=100,
        ge=1,
        description=(
            "PENDING + RUNNING audits a tenant may have, sweep children and scheduled runs included; "
            "counted and inserted under a per-tenant lock (no race between concurrent submits). A "
            "submit, or a sweep whose children would pass it, is `429` (`Retry-After: 10`), nothing "
            "stored; a scheduled run past it is skipped (listed without an audit)."
        ),
    )
    auth_failure_limit: str = Field(
        default="10/minute",
        description=(
            "Failed authentications per key id from one client address; past it that address gets "
            "`429` for that key id before any scrypt runs. Counted against the failing source, never "
            "the key id alone: guessing from one address cannot lock the key's owner out from another"
            " (and a key that already authenticated in this process is never throttled)."
        ),
    )
    auth_failure_address_limit: str = Field(
        default="30/minute",
        description=(
            "Failed authentications per client address (behind a proxy, run uvicorn with `--proxy-headers`)."
        ),
    )
    rate_limit_storage: str | None = Field(
        default=None,
        description=(
            "Where the counts live (`memory://`, `redis://…`). Unset: the broker's Redis when "
            "`ICLAUDIT_BROKER_URL` is set (shared by every API process), else this process's memory. "
            "A storage outage lets requests through (logged)."
        ),
    )
    metrics_token: str | None = Field(
        default=None,
        description=(
            "Bearer token `GET /metrics` requires; unset: `403` while authentication is on, open when"
            " it is off (`make serve`)."
        ),
    )
    key_recheck_seconds: float = Field(
        default=30.0,
        gt=0,
        le=30,
        description=(
            "How often (≤ 30 s) a long-poll (`?wait=`) or an event stream re-reads its key while it "
            "waits: a revoked key's long-poll answers `401` and its stream ends within this long."
        ),
    )
    max_schedules: int = Field(
        default=100,
        ge=1,
        description="Schedules a tenant may have (counted under the tenant's lock); one more is `429`.",
    )
    schedule_min_interval_seconds: float = Field(
        default=60.0,
        ge=1,
        description=(
            "Shortest time between two runs of a schedule: a smaller `interval_seconds`, or a cron "
            "whose closest two times (among its next 64) are closer, is `422` at that field."
        ),
    )
    log_level: str = Field(default="INFO", description="Log level of the API and workers.")
    log_format: Literal["json", "text"] = Field(
        default="json",
        description=(
            "`json`: one JSON object per log line with `request_id` (the request's `X-Request-ID`, "
            "carried into the audit it started), `audit_id` and `tenant` when known; `text`: plain "
            "lines for people. Query strings are never logged (`?[redacted]`, in the access log and "
            "delivery lines alike)."
        ),
    )

    @field_validator("endpoint_allowlist", "webhook_allowlist")
    @classmethod
    def _parsed_urls(cls, entries: list[str], info: ValidationInfo) -> list[str]:
        parse_allowlist(entries, setting=f"ICLAUDIT_{str(info.field_name).upper()}")  # fails at load
        return entries

    @field_validator("secrets_grants")
    @classmethod
    def _grants(cls, grants: dict[str, list[str]]) -> dict[str, list[str]]:
        import re

        from app.secrets import NAME_PATTERN

        bad = [name for name in grants if not re.match(NAME_PATTERN, name)]
        if bad:
            raise ValueError(f"ICLAUDIT_SECRETS_GRANTS: {bad[0]!r} is not a secret name (A-Z, 0-9, _)")
        return grants

    @field_validator("rate_limit", "write_rate_limit", "auth_failure_limit", "auth_failure_address_limit")
    @classmethod
    def _rates(cls, text: str, info: ValidationInfo) -> str:
        from limits import parse_many

        try:
            if text.strip():
                parse_many(text)
        except ValueError:
            raise ValueError(
                f"ICLAUDIT_{str(info.field_name).upper()}: {text!r} is not a rate such as '20/second;600/minute'"
            ) from None
        return text

    @property
    def endpoint_egress(self) -> AllowList:
        """The parsed ICLAUDIT_ENDPOINT_ALLOWLIST: every `http_endpoint` URL must match an entry; bodies and
        replies bounded by ICLAUDIT_TARGET_MAX_BODY_BYTES and ICLAUDIT_TARGET_MAX_REPLY_BYTES."""
        return parse_allowlist(
            self.endpoint_allowlist,
            max_reply_bytes=self.target_max_reply_bytes,
            max_body_bytes=self.target_max_body_bytes,
        )

    @property
    def webhook_egress(self) -> AllowList:
        """The parsed ICLAUDIT_WEBHOOK_ALLOWLIST: public targets pass, internal ones need an entry."""
        return parse_allowlist(self.webhook_allowlist, required=False, setting="ICLAUDIT_WEBHOOK_ALLOWLIST")

    @property
    def sqlalchemy_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.state_dir / 'iclaudit.db').resolve()}"

    @property
    def required_broker_url(self) -> str:
        """ICLAUDIT_BROKER_URL for the code that only runs with a broker (the Celery executor, workers)."""
        if not self.broker_url:
            raise ValueError("ICLAUDIT_BROKER_URL is not set: the Celery executor and workers need a broker")
        return self.broker_url

    @property
    def model_cache_dir(self) -> Path:
        return self.cache_dir or self.state_dir / "cache"


@lru_cache
def get_settings() -> Settings:
    return Settings()
