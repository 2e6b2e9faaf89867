"""Settings, from the environment with the prefix ICLAUDIT_ (pydantic-settings).

Absent URLs mean the embedded default: SQLite in `state_dir`, the in-process executor, the packaged
tiny model. Every field is listed in the README.
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
        default=None, description="SQLAlchemy URL (postgresql+psycopg://…). Absent: SQLite in state_dir."
    )
    broker_url: str | None = Field(default=None, description="Redis URL for Celery. Absent: no broker.")
    executor: Literal["inline", "celery"] = Field(default="inline", description="Where audits run.")
    inline_workers: int = Field(
        default_factory=lambda: os.cpu_count() or 1,
        ge=1,
        description="Worker processes of the embedded executor (default: the cores): that many audits run at "
        "once. Each process loads its own copy of the models it uses, once (about 0.5 GB for the packaged "
        "model, a few GB for a 1B model): budget memory per process.",
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
        default=None, description="Built-in datasets as <name>/{train,test}.jsonl (offline copies)."
    )
    cache_dir: Path | None = Field(
        default=None, description="Converted model weights. Default: state_dir/cache."
    )
    models_file: Path | None = Field(default=None, description="YAML/JSON list of extra model entries.")
    default_model: str = Field(
        default="smollm2-135m-instruct", description="Model used when a request names none."
    )
    auth_enabled: bool = Field(default=True, description="Require `Authorization: Bearer <key>`.")
    max_trials: int = Field(default=2_000_000, ge=1, description="Largest `trials` a request may ask for.")
    max_llm_calls: int = Field(default=5_000, ge=1, description="Largest `llm_calls` a request may ask for.")
    max_audit_seconds: int = Field(default=6 * 3600, ge=60, description="Longest an audit may run.")
    upload_max_bytes: int = Field(default=50 * 2**20, ge=1, description="Largest dataset upload.")
    upload_max_rows: int = Field(default=200_000, ge=1, description="Most rows in an uploaded dataset.")
    heartbeat_seconds: float = Field(
        default=10.0, gt=0, description="How often a running audit proves it is alive."
    )
    stale_after_seconds: float = Field(
        default=60.0,
        gt=0,
        description="A RUNNING audit with no heartbeat for this long is re-run by the sweep.",
    )
    sweep_seconds: float = Field(
        default=30.0, gt=0, description="How often the API re-enqueues PENDING and stale RUNNING audits."
    )
    preload_models: bool = Field(
        default=True,
        description="Workers (and the API process with the inline executor, in the background) load "
        "default_model once at start-up.",
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
        description="Longest a request waits in that queue before a 503 with Retry-After.",
    )
    db_retry_seconds: float = Field(
        default=120.0,
        gt=0,
        description="How long the runner retries a claim, an outcome or a release through a transient database "
        "error (disconnect, restart, failover, lock timeout) before giving it up.",
    )
    endpoint_allowlist: list[str] = Field(
        default_factory=list,
        description="URLs an `http_endpoint` audit may call (JSON list; scheme, host and port matched exactly, "
        "then path prefix; app/egress.py). Empty: such audits are refused. Internal addresses are called only "
        "when an entry names the address itself (`http://10.0.0.5:8000/`).",
    )
    default_budget: dict[str, float] | None = Field(
        default=None,
        description="Budget given to every tenant's audit that sets none and calls a model or an endpoint "
        '(mia, iclinf, synthetic_generation; JSON: {"max_calls": 100000, "max_seconds": 3600}; '
        "app/audit/budget.py). Stored with the audit at submit.",
    )
    secrets_dir: Path | None = Field(
        default=None,
        description="Per-tenant target secrets: `<dir>/<tenant>.json` maps names to values, read when an audit "
        'calls its target (`{"secret": NAME}` headers; app/secrets.py). Without it, only ICLAUDIT_SECRET_<NAME> '
        "(granted by ICLAUDIT_SECRETS_GRANTS).",
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
        description="Internal webhook targets allowed (JSON list of URLs, same matching); public targets need "
        "no entry. Loopback, private, link-local and metadata addresses are refused unless named here.",
    )
    idempotency_ttl_seconds: float = Field(
        default=24 * 3600,
        gt=0,
        description="How long an `Idempotency-Key` is remembered (then it may be reused).",
    )
    sweep_max_audits: int = Field(default=256, ge=1, description="Most child audits one sweep may create.")
    webhook_tick_seconds: float = Field(
        default=1.0,
        gt=0,
        description="How often the API writes due webhook events and dispatches deliveries.",
    )
    webhook_backoff_seconds: float = Field(
        default=5.0,
        gt=0,
        description="First retry delay of a failed delivery; doubled per attempt (capped at 1 h).",
    )
    webhook_max_attempts: int = Field(default=12, ge=1, description="Attempts before a delivery is FAILED.")
    webhook_timeout_seconds: float = Field(default=10.0, gt=0, description="Timeout of one delivery request.")
    webhook_tenant_concurrency: int = Field(
        default=2,
        ge=1,
        description="Deliveries of one tenant in flight at once in an API process (embedded default: of its 4 "
        "delivery threads), so one tenant's slow receivers leave the others room.",
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
        description="Requests per tenant, in `limits` notation (`100/second;3000/minute`); over it 429 with "
        "Retry-After. Empty: no limit.",
    )
    write_rate_limit: str = Field(
        default="50/second;1500/minute",
        description="POST/PUT/PATCH/DELETE requests per tenant, on top of rate_limit. Empty: no limit.",
    )
    list_max_bytes: int = Field(
        default=2 * 2**20,
        ge=1024,
        description="GET /v1/audits?view=full stops a page early (with next_page_token) once its audits' "
        "stored request and result bodies add up past this many bytes; a page holds at least one audit.",
    )
    sweep_max_bytes: int = Field(
        default=16 * 2**20,
        ge=1024,
        description="Largest base request × number of child audits a sweep (or a scheduled sweep) may store; "
        "larger is 413.",
    )
    max_concurrent_uploads: int = Field(
        default=2,
        ge=1,
        description="Dataset uploads one tenant may stream into one API process at once; one more is 429.",
    )
    max_open_streams: int = Field(
        default=32,
        ge=1,
        description="Event streams and long-polls (`?wait=`) one tenant may hold open in one API process at "
        "once; one more is 429.",
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
        description="Longest wait for the next piece of a request body; then 408 and the connection closes.",
    )
    keep_alive_seconds: int = Field(
        default=5,
        ge=1,
        description="`iclaudit serve`: an idle keep-alive connection is closed after this long.",
    )
    max_header_bytes: int = Field(
        default=16 * 1024,
        ge=1024,
        description="`iclaudit serve`: largest request line and headers (h11's max incomplete event size); "
        "more is 400 and the connection closes.",
    )
    max_active_audits: int = Field(
        default=100, ge=1, description="PENDING + RUNNING audits a tenant may have; a submit past it is 429."
    )
    auth_failure_limit: str = Field(
        default="10/minute",
        description="Failed authentications per key id from one client address before 429 (checked before "
        "scrypt runs); another address is not refused, so guessing cannot lock a key's owner out.",
    )
    auth_failure_address_limit: str = Field(
        default="30/minute", description="Failed authentications per client address before 429."
    )
    rate_limit_storage: str | None = Field(
        default=None,
        description="Where rate-limit counts live (`memory://`, `redis://…`). Absent: broker_url's Redis when "
        "set (shared by every API process), else this process's memory.",
    )
    metrics_token: str | None = Field(
        default=None,
        description="Bearer token that GET /metrics requires. Absent: /metrics is closed (403) when auth is on, "
        "open when auth is off.",
    )
    key_recheck_seconds: float = Field(
        default=30.0,
        gt=0,
        le=30,
        description="How often a long-poll or an event stream re-reads its caller's key: a revoked key's "
        "stream ends and its long-poll answers 401 within this long.",
    )
    max_schedules: int = Field(default=100, ge=1, description="Schedules a tenant may have; one more is 429.")
    schedule_min_interval_seconds: float = Field(
        default=60.0,
        ge=1,
        description="Shortest time between two runs of a schedule (interval_seconds, or the closest two "
        "times of its cron); shorter is 422.",
    )
    log_level: str = Field(default="INFO")
    log_format: Literal["json", "text"] = Field(
        default="json",
        description="json: one JSON object per log line with request_id, audit_id and tenant; text: for people.",
    )

    @field_validator("endpoint_allowlist", "webhook_allowlist")
    @classmethod
    def _parsed_urls(cls, entries: list[str], info: ValidationInfo) -> list[str]:
        parse_allowlist(entries, setting=f"ICLAUDIT_{info.field_name.upper()}")  # fails at load
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
                f"ICLAUDIT_{info.field_name.upper()}: {text!r} is not a rate such as '20/second;600/minute'"
            ) from None
        return text

    @property
    def endpoint_egress(self) -> AllowList:
        """The parsed ICLAUDIT_ENDPOINT_ALLOWLIST: every `http_endpoint` URL must match an entry."""
        return parse_allowlist(self.endpoint_allowlist)

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
    def model_cache_dir(self) -> Path:
        return self.cache_dir or self.state_dir / "cache"


@lru_cache
def get_settings() -> Settings:
    return Settings()
