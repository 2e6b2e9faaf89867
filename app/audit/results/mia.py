"""The result of a `mia` audit: ε measured by a membership-inference attack beside the ε claimed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from app.audit.results.base import (
    ASSUMPTION,
    EPSILON_ASSUMPTION_FREE,
    EPSILON_EMPIRICAL,
    EPSILON_POINT,
    OutcomeCounts,
    ResultBase,
    VerdictRow,
)
from app.audit.results.digest import bound_used
from app.audit.results.part import ResultPart


class ThreatModelResult(ResultPart):
    """What the attack achieved under one threat model."""

    model_config = ConfigDict(extra="allow")

    mu_lower: float = Field(
        description="Lower bound on the Gaussian-DP parameter μ the attack demonstrates (0 = no leak shown)."
    )
    epsilon_empirical: float | None = Field(description=EPSILON_EMPIRICAL)
    epsilon_empirical_unbounded: bool | None = Field(
        default=None, description="True when the data admit no finite bound (epsilon_empirical is null)."
    )
    epsilon_empirical_assumption_free: float | None = Field(default=None, description=EPSILON_ASSUMPTION_FREE)
    assumption: Literal["gdp", "none"] | None = Field(default=None, description=ASSUMPTION)
    epsilon_lower: float | None = Field(
        default=None,
        description="The lower bound the verdict uses: epsilon_empirical under assumption gdp, "
        "epsilon_empirical_assumption_free under none.",
    )
    confidence: float | None = Field(
        default=None,
        description="Confidence of this threat model's bound alone (the audit's confidence is shared among "
        "the tests that feed one verdict).",
    )
    violation: bool = Field(
        description="True when the measured lower bound exceeds the claimed ε: the system leaks more than it "
        "promises (a bug, or a claim that does not hold)."
    )
    tpr: float | None = Field(default=None, description="True-positive rate of the attack's test.")
    fpr: float | None = Field(default=None, description="False-positive rate of the attack's test.")
    epsilon_point: float | None = Field(default=None, description=EPSILON_POINT)
    epsilon_point_unbounded: bool | None = Field(
        default=None, description="True when FPR = 0, so log(TPR/FPR) is infinite."
    )
    threshold: float | None = Field(default=None, description="Score at or above which the attack says 'in'.")
    threshold_strategy: str | None = Field(default=None, description="How the threshold was chosen.")
    auc: float | None = Field(default=None, description="Area under the attack's ROC curve (0.5 = guessing).")
    accuracy: float | None = Field(default=None, description="Share of trials the attack called right.")
    counts: OutcomeCounts | None = Field(default=None, description="The attack's decisions behind the bound.")
    biased: bool | None = Field(
        default=None,
        description="True when the threshold was chosen on the trials its bound uses (in_sample): the bound "
        "is optimistic and the verdict inconclusive.",
    )


class RecordRisk(ResultPart):
    """One record of an audit over several canaries (app/audit/stats/records.py): its own evidence of leaking."""

    model_config = ConfigDict(extra="allow")

    rank: int = Field(description="1 = the record that leaks most (smallest p-value, then largest ε bound).")
    record_id: str = Field(description="The record: split and row of the dataset (e.g. train:123).")
    record_hash: str | None = Field(
        default=None, description="A stable short hash of the record's text (app/privacy/redact.py)."
    )
    text: str | None = Field(
        default=None, description="The record's text (personal data masked unless asked)."
    )
    trials: int = Field(description="Paired trials (C1, C0) of this record.")
    score_in_mean: float | None = Field(default=None, description="Mean attack score with the record in.")
    score_out_mean: float | None = Field(default=None, description="Mean attack score with it out.")
    gap_mean: float | None = Field(default=None, description="Mean paired gap score_in − score_out.")
    auc: float | None = Field(default=None, description="P(score_in > score_out) over its trials.")
    epsilon_lower: float | None = Field(
        default=None, description="This record's own ε lower bound at the audit's confidence."
    )
    p_value: float = Field(
        description="Exact one-sided sign test of the gaps (H0: the record does not leak)."
    )
    flagged: bool = Field(
        description="p_value ≤ (1 − confidence)/records: leaks, with at most 1 − confidence chance that any "
        "flag is false."
    )


class AuditedMechanism(ResultPart):
    """The mechanism that was audited."""

    model_config = ConfigDict(extra="allow")

    name: str = Field(description="The DP-ICL mechanism (private_voting, esa, ksa, http_endpoint, …).")
    partitions: int | None = Field(default=None, description="Disjoint partitions of the exemplars (T).")
    bug: str | None = Field(default=None, description="The planted bug, when the audit planted one.")
    gaussian: bool | None = Field(
        default=None,
        description="Whether the mechanism adds Gaussian noise (then the Gaussian-DP bound is valid for it).",
    )
    canary_included: bool | None = Field(
        default=None,
        description="Whether C1's partitions held the canary (every record, in each of its context pairs). "
        "Disjoint-Poisson partitioning can leave an exemplar out; the audit keeps the canary in, since no "
        "claim here credits amplification by subsampling. False: the audit could not see the canary.",
    )


class ConfidenceSplit(ResultPart):
    """How the audit's confidence is shared among the tests behind its verdict."""

    model_config = ConfigDict(extra="allow")

    stated: float = Field(description="The confidence the request asked for, for the whole verdict.")
    per_test: float | None = Field(
        default=None, description="Confidence of each test's bound (null for the exact estimator)."
    )
    tests: list[str] = Field(default_factory=list, description="The tests that share it (threat models).")
    correction: str | None = Field(
        default=None, description="bonferroni (split evenly over the tests) or none (a single test)."
    )


class EvidenceTrial(ResultPart):
    """One trial of one side: the black-box output (a decision, or a score of the released text) and the
    white-box score."""

    trial: int = Field(description="The trial's index in the audit.")
    decision: Literal["in", "out"] | None = Field(
        default=None, description="The black-box decision: in = the release gave the canary-present answer."
    )
    released: str | None = Field(default=None, description="The released answer, as the decision reads it.")
    output: float | None = Field(default=None, description="The black-box score of a released text.")
    score: float | None = Field(default=None, description="The white-box score (higher = record in).")


class EvidenceRecord(ResultPart):
    """One record (the canary) and the first trials with it (C1) and without it (C0)."""

    record_id: str = Field(description="The record's id in the dataset (or the canary's).")
    record_hash: str | None = Field(
        default=None, description="A stable short hash of the record's text (app/privacy/redact.py)."
    )
    text: str | None = Field(default=None, description="The record's text (at most 600 characters).")
    secret: str | None = Field(default=None, description="The part of the record the attack guesses.")
    query: str | None = Field(default=None, description="The attack's query, without a context.")
    prompt_in: str | None = Field(default=None, description="The canary's partition prompt in C1.")
    prompt_out: str | None = Field(default=None, description="The same partition's prompt in C0.")
    c1: list[EvidenceTrial] = Field(description="The first trials with the record (at most 8).")
    c0: list[EvidenceTrial] = Field(description="The first trials without it (at most 8).")


class Evidence(ResultPart):
    """A bounded sample for a person to read: no figure of the result is computed from it."""

    answers: list[str | None] | None = Field(default=None, description="The answers the query offers.")
    positive_answer: str | None = Field(default=None, description="The answer that says 'canary present'.")
    records: list[EvidenceRecord] = Field(
        description="The canary, or the riskiest records of a many-canary audit."
    )
    max_trials: int = Field(description="Trials kept per side.")


ENDPOINT_ABSENT = ("llm_forward_passes", "distinct_prompts", "llm_calls")
"""Model-call fields an endpoint audit's result leaves out."""


class MiaAuditResult(ResultBase):
    """Whether a DP-ICL system keeps the ε it claims, measured by a membership-inference attack on a canary."""

    kind: Literal["mia"] = "mia"
    estimator: str = Field(
        description="bootstrap (trials resampled from real model answers), direct (every trial a fresh "
        "mechanism call) or exact (infinitely many trials in closed form)."
    )
    black_box: ThreatModelResult | None = Field(
        default=None,
        description="The attack seeing only the released answer (what a user of the system sees).",
    )
    white_box: ThreatModelResult | None = Field(
        default=None, description="The attack seeing the noisy statistic before it is turned into an answer."
    )
    violation: bool = Field(
        description="True when the verdict is violation (a threat model's bound exceeds the claimed ε)."
    )
    max_epsilon: float | None = Field(
        default=None, description="The leakage allowed without a claim (null under a claim)."
    )
    epsilon_theory: float | None = Field(
        default=None, description="The ε the mechanism claims (null for mechanisms without noise)."
    )
    mu_theory: float | None = Field(
        default=None, description="The Gaussian-DP μ that the calibrated noise really gives (Δ₂/σ)."
    )
    epsilon_ceiling: float | None = Field(
        default=None,
        description="The exact ε at δ of the calibrated noise: the most any attack can show, however strong "
        "and however many trials. Below epsilon_theory when the noise is calibrated conservatively; a "
        "measurement above it means the noise is not what the claim says.",
    )
    epsilon_exact_at_delta: float | None = Field(
        default=None, description="The same as epsilon_ceiling (null when the noise level is unknown)."
    )
    calibration_valid: bool | None = Field(
        default=None,
        description="Whether the noise really gives the claimed (ε, δ) (false: the calibration formula does "
        "not hold at this ε — a breach in theory, apart from the measured verdict).",
    )
    theory_violation: bool | None = Field(
        default=None,
        description="True when the noise cannot give the claimed ε even in theory (calibration_valid is "
        "false): the claim fails before any attack.",
    )
    assumption: Literal["gdp", "none"] | None = Field(default=None, description=ASSUMPTION)
    confidence: ConfidenceSplit | None = Field(
        default=None, description="How the requested confidence is shared among the threat models."
    )
    sigma: float | None = Field(default=None, description="Standard deviation of the mechanism's noise.")
    sensitivity: float | None = Field(default=None, description="L2 sensitivity Δ₂ the noise is scaled to.")
    calibration: str | None = Field(default=None, description="classic or analytic Gaussian calibration.")
    llm_forward_passes: int | None = Field(default=None, description="Forward passes the model ran.")
    endpoint_calls: int | None = Field(default=None, description="HTTP calls made to a deployed endpoint.")
    distinct_prompts: int | None = Field(default=None, description="Different prompts sent to the model.")
    llm_calls: int | None = Field(default=None, description="Clean statistics collected per context.")
    trials: int | None = Field(default=None, description="Membership trials per context (null for exact).")
    canary: str | None = Field(default=None, description="The canary text whose membership was tested.")
    mechanism: AuditedMechanism | None = Field(default=None, description="The audited mechanism.")
    utility: dict[str, Any] | None = Field(
        default=None, description="Task accuracy of the mechanism vs zero-shot, when utility_queries > 0."
    )
    likelihood: dict[str, Any] | None = Field(
        default=None,
        description="The likelihood attack's setup (secret, reference, canaries, contexts per canary) and "
        "its cost: forward passes and fed tokens beside the from-scratch count.",
    )
    generated: dict[str, Any] | None = Field(
        default=None,
        description="A generated-text audit's setup (attack, score rouge_l|exact, canaries, contexts and calls "
        "per canary), a few released texts beside the secret, and its cost beside the from-scratch count.",
    )
    records: list[RecordRisk] | None = Field(
        default=None, description="Per-record risk of an audit over several canaries, riskiest first."
    )
    evidence: Evidence | None = Field(
        default=None,
        description="The record, the query and the first trials, C1 beside C0 (≤ 8 per side, ≤ 4 records); "
        "null for the exact estimator, which runs no trials.",
    )
    signal: dict[str, Any] | None = Field(
        default=None,
        description="The clean pool's canary effect (app/audit/design.py): P(the canary's partition votes the "
        "canary's answer) with the canary (p_with) and without it (p_without), effect = their difference, "
        "valid_with/valid_without = P(that vote is an answer at all), at the mechanism's temperature; 003 Lemma "
        "3.1: only effect 1 with valid votes on both sides lets an audit reach the claim. Null without votes.",
    )
    design: dict[str, Any] | None = Field(
        default=None,
        description='attack "auto": the design and T its pilot chose (odd training rows, seed stream pilot), '
        "each candidate's pilot score, and the pilot's forward passes; the measurement used the even rows.",
    )

    @model_serializer(mode="wrap")
    def _no_model_fields_for_an_endpoint(self, handler: SerializerFunctionWrapHandler):
        """An endpoint audit's calls are its own (`endpoint_calls`): the model-call fields are left out.
        (No return annotation: the serialization schema stays the model's.)"""
        data = handler(self)
        if self.endpoint_calls is not None:
            for key in ENDPOINT_ABSENT:
                data.pop(key, None)
        return data

    def verdicts(self) -> list[VerdictRow]:
        rows = []
        for name in ("black_box", "white_box"):
            tm: ThreatModelResult | None = getattr(self, name)
            if tm is None:
                continue
            rows.append(VerdictRow(name, bound_used(tm)[0], self.epsilon_theory, bool(tm.violation)))
        if not rows:
            rows.append(VerdictRow("mia", None, self.epsilon_theory, self.violation))
        if self.calibration_valid is not None:
            rows.append(
                VerdictRow(
                    "calibration",
                    self.epsilon_exact_at_delta,
                    self.epsilon_theory,
                    bool(self.theory_violation or self.calibration_valid is False),
                    "exact ε at δ of the calibrated noise vs the claim (theory, no attack)",
                )
            )
        return rows


Result = MiaAuditResult


# The output of a real run of examples/mia-oracle-eps1.json with trials = 20000 (shown in the OpenAPI document as the example result).
EXAMPLE: dict[str, Any] = {
    "estimator": "bootstrap",
    "black_box": {
        "tpr": 0.3936,
        "fpr": 0.29835,
        "mu_lower": 0.2180345132719131,
        "epsilon_empirical": 0.7973906367299604,
        "epsilon_empirical_assumption_free": 0.23294427252525007,
        "epsilon_point": 0.2770678712100074,
        "threshold": 1.0,
        "auc": 0.547625,
        "accuracy": 0.547625,
        "threshold_strategy": "decision",
        "counts": {"tp": 7872, "fn": 12128, "fp": 5967, "tn": 14033},
        "assumption": "gdp",
        "confidence": 0.975,
        "epsilon_lower": 0.7973906367299604,
        "violation": False,
    },
    "white_box": {
        "tpr": 0.7786,
        "fpr": 0.6998,
        "mu_lower": 0.18249855513264335,
        "epsilon_empirical": 0.6564245216335737,
        "epsilon_empirical_assumption_free": 0.22787720490375674,
        "epsilon_point": 0.10670285524276767,
        "threshold": -7.775454078746342,
        "auc": 0.5746316775,
        "accuracy": 0.5394,
        "threshold_strategy": "split",
        "counts": {"tp": 7786, "fn": 2214, "fp": 6998, "tn": 3002},
        "assumption": "gdp",
        "confidence": 0.975,
        "epsilon_lower": 0.6564245216335737,
        "violation": False,
    },
    "epsilon_theory": 1.0,
    "mu_theory": 0.26805112321129454,
    "epsilon_ceiling": 1.0,
    "epsilon_exact_at_delta": 1.0,
    "calibration_valid": True,
    "sigma": 5.27590985417481,
    "sensitivity": 1.4142135623730951,
    "calibration": "analytic",
    "violation": False,
    "assumption": "gdp",
    "confidence": {
        "stated": 0.95,
        "per_test": 0.975,
        "tests": ["black_box", "white_box"],
        "correction": "bonferroni",
    },
    "theory_violation": False,
    "llm_forward_passes": 5,
    "distinct_prompts": 5,
    "llm_calls": 200,
    "trials": 20000,
    "canary": "OPEC votes to lift output, aims to ease fears OPEC ministers yesterday agreed to increase "
    "their ceiling for oil production to help bring down stubbornly high prices in a decision "
    "that traders and analysts dismissed as symbolic because the cartel already is pumping more "
    "than its new target.",
    "mechanism": {"name": "private_voting", "partitions": 4, "bug": None, "gaussian": True},
    "utility": None,
}
