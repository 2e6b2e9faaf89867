"""What every result model shares: extra fields allowed, and the verdict rows of the CI gate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field

from app.audit.results.part import ResultPart
from app.audit.results.steps import NextStep


@dataclass(frozen=True)
class VerdictRow:
    """One row of an audit's verdict: a threat model (or the audit itself) with its ε values.

    `epsilon_empirical` is the measured lower bound (None: unbounded, or not an ε-measuring kind);
    `epsilon_theory` the ε the system claims (None: no claim); `violation` true when the measurement
    refutes the claim.
    """

    name: str
    epsilon_empirical: float | None
    epsilon_theory: float | None
    violation: bool
    detail: str = ""


class ResultBase(ResultPart):
    """Results accept fields the model does not declare yet (see app/audit/results/__init__.py).

    The verdict fields (app/audit/stats/verdict.py) are shared by every kind that measures leakage."""

    model_config = ConfigDict(extra="allow")

    if TYPE_CHECKING:  # each kind's result declares its own `kind` literal (the union's discriminator)
        kind: str

    verdict: Literal["violation", "leak", "inconclusive", "consistent"] | None = Field(
        default=None,
        description="violation: a measured lower bound exceeds the claimed ε at the stated confidence; leak: "
        "nothing is claimed and the bound exceeds max_epsilon; inconclusive: the audit could not have shown "
        "either (see verdict_reason and epsilon_detectable); consistent: it could have, and did not.",
    )
    verdict_reason: str | None = Field(
        default=None, description="Why the verdict is what it is, in one line."
    )
    headline: str | None = Field(default=None, description="The verdict in plain words, with the ε it used.")
    epsilon_detectable: float | None = Field(
        default=None,
        description="The audit's power: the smallest true ε that this audit (its trials, confidence, bound "
        "and its attack's efficiency from the mechanism's design or a lower confidence bound, never above 1) "
        "flags with probability ≥ 0.8. Null when unbounded (no ε ≤ 100) or when the verdict did not need it. "
        "`consistent` needs it ≤ 1.5 × the claim (or max_epsilon).",
    )
    epsilon_detectable_unbounded: bool | None = Field(
        default=None, description="True when no true ε up to 100 would be flagged with probability ≥ 0.8."
    )
    power: dict[str, Any] | None = Field(
        default=None,
        description="The verdict's power (app/audit/stats/verdict.py): detect_probability and factor (the rule's "
        "constants), threshold, assumption (the power model's), efficiency and efficiency_source (design: the "
        "mechanism as calibrated; measured: a lower confidence bound on the attack's μ, capped at 1), detection "
        "(the probability of a flag at 1.25, 1.5 and 2 × the threshold), epsilon_detectable and "
        "leak_rate_detectable (the smallest rate of a one-sided leak, the canary's answer only when present, "
        "flagged with probability ≥ 0.8). Null when a bound already decided the verdict.",
    )
    stopped: dict[str, Any] | None = Field(
        default=None,
        description="Set when a budget cap stopped the audit (app/audit/budget.py): reason, cap, message and "
        "what it finished (mia: trials a context; iclinf: queries; synthetic_generation: texts), on which it "
        "was measured; the verdict is then inconclusive unless that already shows a violation.",
    )
    budget: dict[str, Any] | None = Field(
        default=None,
        description="The audit's budget caps (max_calls, max_tokens, max_seconds), when it had one.",
    )
    spent: dict[str, Any] | None = Field(
        default=None, description="What it spent against them: calls, tokens, seconds."
    )
    next_steps: list[NextStep] | None = Field(
        default=None,
        description="What would make the audit answer, computed from its own measurements "
        "(app/audit/stats/next_steps.py): every inconclusive result has at least one step; any result whose "
        "per-record test cannot flag a record has the step that would let it. Null when there is none.",
    )
    engines: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="How each in-process model the audit used computed its scores: engine, device, dtype, "
        "CPU threads and library versions. The same request and seed on the same runtime give the same "
        "result; another thread count can move scores by ~1e-5.",
    )

    def verdicts(self) -> list[VerdictRow]:
        """The rows a CI report shows (one per threat model where the kind has them)."""
        raise NotImplementedError

    @property
    def violated(self) -> bool:
        """True when the verdict is a violation of the claimed ε (without a verdict: any row is one)."""
        if self.verdict is not None:
            return self.verdict == "violation"
        return any(v.violation for v in self.verdicts())

    @property
    def failing(self) -> bool:
        """What fails a CI gate: a violation, or a leak where nothing is claimed."""
        return self.verdict in ("violation", "leak") or (self.verdict is None and self.violated)


class OutcomeCounts(ResultPart):
    """How the membership test's decisions split over the trials behind a bound."""

    tp: int = Field(description="Trials with the canary in the context (C1) that the test called 'in'.")
    fn: int = Field(description="C1 trials the test called 'out'.")
    fp: int = Field(description="Trials without the canary (C0) that the test called 'in'.")
    tn: int = Field(description="C0 trials the test called 'out'.")


EPSILON_EMPIRICAL = (
    "The measured privacy loss: a lower bound on ε at the audit's δ that holds with the audit's "
    "confidence — the system leaks at least this much. Read through the Gaussian-DP trade-off curve of "
    "mu_lower, so it is exact for Gaussian-noise mechanisms (see epsilon_empirical_assumption_free for any "
    "mechanism). Null when unbounded (see epsilon_empirical_unbounded)."
)
EPSILON_ASSUMPTION_FREE = (
    "A lower bound on ε at δ that holds for every mechanism, not only Gaussian ones (from the same two "
    "confidence bounds on TPR and FPR). Never above what the data supports; often below epsilon_empirical."
)
EPSILON_POINT = (
    "log(TPR/FPR) of the observed test: the pure-DP ε this single operating point suggests, with no "
    "confidence margin and no δ. Not comparable with epsilon_empirical, which reads the whole trade-off "
    "curve at δ and can be larger. Null when FPR = 0."
)
ASSUMPTION = (
    "Which lower bound the verdict uses: gdp (epsilon_empirical; the mechanism is known to add Gaussian "
    "noise) or none (epsilon_empirical_assumption_free; any mechanism)."
)
