"""The audit rows' plain vocabulary, shared by the tables (app/db/models.py), the API models (app/schemas)
and the Python client (iclaudit.client). Standard library only, so the API models and the client load no
database code."""

from __future__ import annotations

import enum


class AuditState(enum.StrEnum):
    PENDING = "PENDING"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"


TERMINAL_STATES = frozenset({AuditState.SUCCEEDED, AuditState.FAILED, AuditState.CANCELLED})

# The request fields that hold the ε a kind claims (mia: `epsilon`; synthetic_generation: `target_epsilon`).
CLAIM_FIELDS = ("epsilon", "target_epsilon")
