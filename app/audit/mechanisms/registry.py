"""Mechanism name → class; each class builds itself from the request's `mechanism` object (`from_spec`)."""

from __future__ import annotations

from typing import Any, cast

from app.audit.mechanisms.base import Mechanism
from app.audit.mechanisms.bugs import SCALES_NOISE
from app.audit.mechanisms.esa import ESA
from app.audit.mechanisms.http_endpoint import HttpEndpoint
from app.audit.mechanisms.ksa import KSA
from app.audit.mechanisms.plain import PlainICL
from app.audit.mechanisms.private_voting import PrivateVoting
from app.audit.mechanisms.prompt_defense import PromptDefense
from app.audit.mechanisms.synthetic_generation import SyntheticGeneration
from app.audit.runtime import AuditError

MECHANISMS: dict[str, type[Mechanism]] = {
    cls.name: cls
    for cls in (PrivateVoting, ESA, KSA, PlainICL, PromptDefense, HttpEndpoint, SyntheticGeneration)
}
"""Names a request may use; `theory` is None for `none` and `prompt_defense` (no ε, leakage only)."""


def build_mechanism(spec: Any, *, epsilon: float | None, delta: float) -> Mechanism:
    """The mechanism `spec.name` with its noise calibrated for the claimed (ε, δ); `epsilon` is None for a
    mechanism that claims nothing (a mia request's validator leaves it None exactly then)."""
    cls = MECHANISMS.get(spec.name)
    if cls is None:
        raise AuditError(
            f"mechanism.name: unknown mechanism {spec.name!r}; choose one of {', '.join(MECHANISMS)}"
        )
    check_bug(spec.bug, cls)
    if epsilon is None and cls.claims:
        raise AuditError(f"epsilon: mechanism {spec.name!r} claims an (ε, δ) and needs its ε")
    # a mechanism that claims nothing ignores ε (None here)
    mechanism = cls.from_spec(spec, epsilon=cast(float, epsilon), delta=delta)
    if spec.bug == SCALES_NOISE:
        mechanism.noise_factor = float(spec.bug_factor or 1.0)
    return mechanism


def check_bug(bug: str | None, cls: type[Mechanism]) -> None:
    """A planted bug the mechanism accepts: noise_scale on every Gaussian mechanism, the rest on private
    voting only."""
    if bug is None:
        return
    if bug == SCALES_NOISE and not cls.scales_noise:
        raise AuditError("mechanism.bug: noise_scale applies to private_voting, esa and ksa only")
    if bug != SCALES_NOISE and not cls.plants_bugs:
        raise AuditError("mechanism.bug: planted bugs exist for private_voting only")
