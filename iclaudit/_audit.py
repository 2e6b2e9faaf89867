"""The audit models `iclaudit.client` returns (`Audit`, its `Progress` and `AuditFailure`, `AuditPage`):
pydantic models, in a module of their own so that the client (and the CLI's `status`) loads pydantic only
when a model is made. Import them from `iclaudit.client`."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationInfo, model_validator

from iclaudit.client import TERMINAL_STATES, _schema, validate_result

if TYPE_CHECKING:
    from app.audit.results.digest import Verdict


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
    result: Any = None
    """The result once SUCCEEDED: its kind's typed model (the server's distribution, unless the client was
    made with `typed=False`), else a loose model with every field the server sent."""
    error: AuditFailure | None = None
    cancel_requested: bool = False
    attempt: int = 0
    created_at: datetime | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    epsilon_claimed: float | None = None
    verdict: dict[str, Any] | None = None
    """The server's verdict digest as sent (null until SUCCEEDED); `digest` is it typed."""
    follows: str | None = None
    """The audit whose next step this one is (the request's `until_answer` chain)."""
    followed_by: str | None = None
    """The audit that takes this one's next step (`until_answer`), once this one is done; null: none."""

    @property
    def done(self) -> bool:
        return self.state in TERMINAL_STATES

    @property
    def digest(self) -> Verdict | None:
        """The verdict digest (`outcome`, `headline`, `epsilon_lower`, `epsilon_theory`, `epsilon_detectable`,
        `violation`; app/audit/results/digest.py)."""
        if self.verdict is None:
            return None
        return _schema("audits", "Verdict").model_validate(self.verdict)

    def _field(self, digest_name: str, result_name: str) -> Any:
        """A verdict field from the digest, else from the result (a server that sends no digest)."""
        if self.verdict is not None and self.verdict.get(digest_name) is not None:
            return self.verdict[digest_name]
        return getattr(self.result, result_name, None) if self.result is not None else None

    @property
    def outcome(self) -> str | None:
        """violation, leak, inconclusive or consistent; None until SUCCEEDED or for a kind without one."""
        return self._field("outcome", "verdict")

    @property
    def headline(self) -> str | None:
        """The verdict in plain words."""
        return self._field("headline", "headline")

    @property
    def epsilon_detectable(self) -> float | None:
        """The audit's power: the smallest true ε it flags with probability ≥ 0.8 (None: unbounded, or not
        needed for the verdict)."""
        return self._field("epsilon_detectable", "epsilon_detectable")

    @property
    def failing(self) -> bool:
        """What fails a CI gate: a violation, or a leak where nothing is claimed."""
        return self.outcome in ("violation", "leak")

    @model_validator(mode="before")
    @classmethod
    def _typed_result(cls, data: Any, info: ValidationInfo) -> Any:
        """The result as its kind's model (`validate_result`; loose when the validation context says
        `typed: False`); a result sent without its `kind` (the result route's raw JSON) still parses."""
        if isinstance(data, dict) and isinstance(data.get("result"), dict):
            typed = (info.context or {}).get("typed", True)
            data = {**data, "result": validate_result(data.get("kind", ""), data["result"], typed)}
        return data


class AuditPage(BaseModel):
    audits: list[Audit]
    next_page_token: str | None = None
