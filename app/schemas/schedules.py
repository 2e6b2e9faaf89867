"""Schedules: an audit request or a sweep, re-run at every cron time or every interval (UTC)."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from app.audit.stats.verdict import Outcome
from app.db.constants import AuditState
from app.schemas.audits import request_union
from app.schemas.sweeps import SweepRequest


def _field(value: str) -> str:
    """A cron field: `*` or a value or range of `value`, each with an optional step, comma-separated."""
    item = rf"(\*|({value})(-({value}))?)(/[1-9][0-9]?)?"
    return rf"{item}(,{item})*"


def _names(*names: str) -> str:
    """The names in either case, letter by letter (a JSON Schema pattern has no case-insensitive flag)."""
    return "|".join("".join(f"[{c.upper()}{c}]" for c in name) for name in names)


_MINUTE = r"[0-5]?[0-9]"
_MONTHS = _names("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_DAYS = _names("sun", "mon", "tue", "wed", "thu", "fri", "sat")
_ALIASES = "@(yearly|annually|monthly|weekly|daily|midnight|hourly)"
# Five fields (minute, hour, day of month, month: 1-12 or jan-dec, day of week: 0-7 or sun-sat, 0 and 7
# Sunday), or six with seconds last, one space apart; or an alias (@daily, …). Every string it matches
# croniter parses (tests/api/test_api_schema_rules.py); croniter's L, W and # are not taken.
CRON_PATTERN = (
    f"^({_ALIASES}|"
    + " ".join(
        _field(v)
        for v in (
            _MINUTE,
            r"[01]?[0-9]|2[0-3]",
            r"0?[1-9]|[12][0-9]|3[01]",
            rf"0?[1-9]|1[0-2]|{_MONTHS}",
            f"[0-7]|{_DAYS}",
        )
    )
    + f"( {_field(_MINUTE)})?)$"
)
_CRON = re.compile(CRON_PATTERN)


def _one_of(given: str, given_type: str, other: str) -> dict[str, Any]:
    """`given` present and not null, `other` absent or null."""
    return {"required": [given], "properties": {given: {"type": given_type}, other: {"type": "null"}}}


# The schema states what _one_each checks, so clients see the rule: request xor sweep, cron xor interval_seconds.
ONE_EACH_SCHEMA: dict[str, Any] = {
    "allOf": [
        {"anyOf": [_one_of("request", "object", "sweep"), _one_of("sweep", "object", "request")]},
        {
            "anyOf": [
                _one_of("cron", "string", "interval_seconds"),
                _one_of("interval_seconds", "number", "cron"),
            ]
        },
    ]
}


class ScheduleCreate(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=ONE_EACH_SCHEMA)

    request: Annotated[request_union(), Field(description="The audit to re-run.")] | None = None  # type: ignore[valid-type]
    sweep: SweepRequest | None = Field(default=None, description="Or a sweep to re-run.")
    cron: str | None = Field(
        default=None,
        max_length=200,
        description='Cron in UTC: five fields ("0 3 * * *": nightly at 03:00), or six with seconds last; '
        "numbers, `*`, ranges, steps and lists.",
        json_schema_extra={"pattern": CRON_PATTERN},
    )
    interval_seconds: float | None = Field(
        default=None, ge=1, le=366 * 86400, description="Or: every N seconds."
    )

    @field_validator("cron")
    @classmethod
    def _cron_syntax(cls, cron: str | None) -> str | None:
        if cron is not None and not _CRON.fullmatch(cron):
            raise ValueError(
                f"cron {cron!r} is not a cron expression (five fields, or six with seconds last)"
            )
        return cron

    @model_validator(mode="after")
    def _one_each(self) -> ScheduleCreate:
        if (self.request is None) == (self.sweep is None):
            raise ValueError("give either request or sweep (not both, not neither)")
        if (self.cron is None) == (self.interval_seconds is None):
            raise ValueError("give either cron or interval_seconds (not both, not neither)")
        return self


class ScheduleResource(BaseModel):
    id: str
    target: Literal["audit", "sweep"]
    body: dict[str, Any] = Field(description="The audit request or sweep that each run starts.")
    cron: str | None
    interval_seconds: float | None
    next_fire_at: datetime
    created_at: datetime


class ScheduleList(BaseModel):
    schedules: list[ScheduleResource]
    next_page_token: str | None


class ScheduleRunResource(BaseModel):
    fire_time: datetime
    audit_id: str | None
    sweep_id: str | None
    state: AuditState | None = Field(
        description="The run's audit state (null for a sweep or a run not started)."
    )
    violation: bool | None = Field(
        description="Whether the run's verdict is a violation, once its audit SUCCEEDED (null: no claim)."
    )
    outcome: Outcome | None = Field(
        default=None,
        description="The run's verdict once its audit SUCCEEDED: violation, leak, inconclusive or consistent.",
    )
    headline: str | None = Field(default=None, description="The run's verdict in plain words.")


class ScheduleRunList(BaseModel):
    runs: list[ScheduleRunResource] = Field(description="Newest first (at most 100).")
