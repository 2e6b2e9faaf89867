"""Mechanism name → builder from the request's `mechanism` object (duck-typed; see kinds/mia.py)."""

from __future__ import annotations

from typing import Any

from app.audit.mechanisms.base import Mechanism, calibrate
from app.audit.runtime import AuditError

MECHANISMS: tuple[str, ...] = ("private_voting", "esa", "none", "prompt_defense")
"""Names a request may use; `theory` is None for `none` and `prompt_defense` (no ε, leakage only)."""


def build_mechanism(spec: Any, *, epsilon: float, delta: float) -> Mechanism:
    """The mechanism `spec.name` with its noise calibrated for the claimed (ε, δ)."""
    from app.audit.accounting.gaussian import VOTE_SENSITIVITY, esa_sensitivity

    if spec.bug and spec.name != "private_voting":
        raise AuditError("mechanism.bug: planted bugs exist for private_voting only")
    if spec.name == "private_voting":
        from app.audit.mechanisms.private_voting import PrivateVoting

        theory = calibrate(epsilon, delta, spec.sensitivity or VOTE_SENSITIVITY, spec.calibration)
        return PrivateVoting(
            partitions=spec.partitions,
            theory=theory,
            temperature=spec.temperature,
            partitioning=spec.partitioning,
            bug=spec.bug,
        )
    if spec.name == "esa":
        from app.audit.mechanisms.esa import ESA

        sensitivity = spec.sensitivity or esa_sensitivity(spec.partitions)
        return ESA(
            partitions=spec.partitions,
            theory=calibrate(epsilon, delta, sensitivity, spec.calibration),
            temperature=spec.temperature,
            candidates=spec.candidates,
            max_new_tokens=spec.max_new_tokens,
            partitioning=spec.partitioning,
        )
    if spec.name == "none":
        from app.audit.mechanisms.plain import PlainICL

        return PlainICL(temperature=spec.temperature)
    if spec.name == "prompt_defense":
        from app.audit.mechanisms.prompt_defense import PromptDefense

        return PromptDefense(level=spec.defense_level, temperature=spec.temperature)
    raise AuditError(
        f"mechanism.name: unknown mechanism {spec.name!r}; choose one of {', '.join(MECHANISMS)}"
    )
