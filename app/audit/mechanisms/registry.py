"""Mechanism name → builder from the request's `mechanism` object (duck-typed; see kinds/mia.py)."""

from __future__ import annotations

from typing import Any

from app.audit.mechanisms.base import Mechanism, calibrate
from app.audit.runtime import AuditError

MECHANISMS: tuple[str, ...] = ("private_voting", "esa", "ksa", "none", "prompt_defense", "http_endpoint")
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
    if spec.name == "ksa":
        from app.audit.mechanisms.ksa import KSA, ksa_sensitivity

        sensitivity = spec.sensitivity or ksa_sensitivity(spec.max_words)
        return KSA(
            partitions=spec.partitions,
            theory=calibrate(epsilon, delta, sensitivity, spec.calibration),
            temperature=spec.temperature,
            candidates=spec.candidates,
            max_new_tokens=spec.max_new_tokens,
            max_words=spec.max_words,
            keywords=spec.keywords,
            partitioning=spec.partitioning,
        )
    if spec.name == "http_endpoint":
        from app.audit.mechanisms.base import claimed_theory
        from app.audit.mechanisms.http_endpoint import HttpEndpoint

        if spec.endpoint is None:
            raise AuditError("mechanism.endpoint: http_endpoint needs an endpoint (url, body, answer_path)")
        e = spec.endpoint
        return HttpEndpoint(
            url=e.url,
            body=e.body,
            answer_path=e.answer_path,
            headers=e.headers,
            timeout_s=e.timeout_s,
            retries=e.retries,
            theory=claimed_theory(epsilon, delta),
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
