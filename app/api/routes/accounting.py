"""POST /v1/accounting/{synthetic-generation,gaussian}: the accounting calculators over HTTP (no audit stored).

Inputs are bounded so every answer is finite (app/audit/accounting/__init__.py): ε in [1e-6, 100],
δ in [1e-300, 1), positive scales within [1e-6, 1e6] and counts up to the limits below. A target no
parameter reaches (e.g. an ε below what the RDP → (ε, δ) conversion allows at δ) is a 422 naming
`target_epsilon`.
"""

from __future__ import annotations

import math
from typing import Literal

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field, StrictBool, model_validator

from app.api.errors import ApiError
from app.api.middleware.strict_json import StrictJSONRoute
from app.audit.accounting import MAX_EPSILON, MAX_SCALE, MIN_DELTA, MIN_EPSILON, MIN_SCALE
from app.audit.accounting.gaussian import gaussian_calibration
from app.audit.accounting.rdp import synthetic_generation_parameters
from app.schemas.errors import FieldViolation

router = APIRouter(prefix="/v1/accounting", tags=["accounting"], route_class=StrictJSONRoute)


def _unanswerable(path: str, error: Exception) -> ApiError:
    message = f"{path.removeprefix('$.')}: {error}"
    return ApiError(422, message, [FieldViolation(path=path, message=message)], reason="NO_SOLUTION")


_GIVEN = {"temperature": {"type": "number"}, "clip": {"type": "number"}, "batch_size": {"type": "integer"}}


def _solving(target: str | None) -> dict:
    """The request solving for `target` (None: for ε): `target` absent or null, target_epsilon given with
    it, each other parameter given (not null)."""
    others = [name for name in _GIVEN if name != target]
    if target is None:
        return {"required": others, "properties": {"solve_for": {"type": "null"}} | _GIVEN}
    return {
        "required": ["solve_for", "target_epsilon", *others],
        "properties": {
            "solve_for": {"const": target},
            "target_epsilon": {"type": "number"},
            target: {"type": "null"},
        }
        | {name: _GIVEN[name] for name in others},
    }


# The schema states what _complete checks, so clients see the rule before they send.
COMPLETE_SCHEMA: dict = {
    "allOf": [
        {"anyOf": [_solving(None), *(_solving(name) for name in _GIVEN)]},
        {"anyOf": [{"properties": {"private_tokens": {"type": "null"}}},
                   {"required": ["svt_noise"], "properties": {"svt_noise": {"type": "number"}}}]},
    ]
}  # fmt: skip


class SyntheticGenerationRequest(BaseModel):
    """001 App. C: give all of temperature/clip/batch_size for their ε, or leave `solve_for`'s one out."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra=COMPLETE_SCHEMA | {
            "examples": [
                {"target_epsilon": 1.0, "delta": 1e-5, "clip": 10, "batch_size": 50, "sequences": 50,
                 "max_new_tokens": 40, "solve_for": "temperature"}
            ]
        },
    )  # fmt: skip

    delta: float = Field(default=1e-5, ge=MIN_DELTA, lt=1, description="δ of the RDP → (ε, δ) conversion.")
    sequences: int = Field(default=50, ge=1, le=1_000_000, description="N_gen: synthetic texts generated.")
    max_new_tokens: int = Field(default=40, ge=1, le=100_000, description="T_max: new tokens per text.")
    target_epsilon: float | None = Field(
        default=None, ge=MIN_EPSILON, le=MAX_EPSILON, description="ε to reach (with solve_for)."
    )
    clip: float | None = Field(
        default=None, ge=MIN_SCALE, le=MAX_SCALE, description="c: logit clipping level."
    )
    batch_size: int | None = Field(
        default=None, ge=1, le=1_000_000_000, description="s: one-shot prompts per batch."
    )
    temperature: float | None = Field(
        default=None, ge=MIN_SCALE, le=MAX_SCALE, description="τ: sampling temperature."
    )
    solve_for: Literal["temperature", "clip", "batch_size"] | None = Field(
        default=None, description="The parameter to solve for target_epsilon (leave it null)."
    )
    svt_noise: float | None = Field(
        default=None,
        ge=MIN_SCALE,
        le=MAX_SCALE,
        description="σ of Amin et al.'s sparse vector test (variant svt): only private tokens pay, each "
        "with one SVT run, ρ = r·(½(c/(sτ))² + 2/(sσ)²) (Amin et al. Thm 1). Null: simplified (every token).",
    )
    private_tokens: int | None = Field(
        default=None,
        ge=1,
        le=100_000_000,
        description="r: private-token budget with svt_noise (default N_gen·T_max).",
    )

    @model_validator(mode="after")
    def _complete(self) -> SyntheticGenerationRequest:
        if self.solve_for is not None:
            if getattr(self, self.solve_for) is not None:
                raise ValueError(f"leave {self.solve_for} null: it is the parameter being solved")
            if self.target_epsilon is None:
                raise ValueError("target_epsilon is required with solve_for")
        if self.private_tokens is not None and self.svt_noise is None:
            raise ValueError(
                "private_tokens needs svt_noise (without the sparse vector test every token is private)"
            )
        for name in ("temperature", "clip", "batch_size"):
            if name != self.solve_for and getattr(self, name) is None:
                raise ValueError(
                    f"{name} is required" + (" (or name it in solve_for)" if not self.solve_for else "")
                )
        return self


class SyntheticGenerationResult(BaseModel):
    temperature: float
    clip: float
    batch_size: int
    alpha: int = Field(description="The optimal Rényi order α* of Alg. 2.")
    epsilon: float = Field(
        description="ε at δ of N_gen × T_max composed steps (with svt_noise: of r private tokens and their SVT runs)."
    )


class GaussianRequest(BaseModel):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,  # numbers are numbers: `"sensitivity": true` is refused, as the schema says
        json_schema_extra={
            "examples": [{"epsilon": 1.0, "delta": 1e-5, "sensitivity": 1.4142, "analytic": True}]
        },
    )

    epsilon: float = Field(ge=MIN_EPSILON, le=MAX_EPSILON, description="ε of the mechanism.")
    delta: float = Field(default=1e-5, ge=MIN_DELTA, lt=1, description="δ of the mechanism.")
    sensitivity: float = Field(
        default=1.0, ge=MIN_SCALE, le=MAX_SCALE, description="L2 sensitivity Δ₂ (√2 for private voting)."
    )
    analytic: StrictBool = Field(
        default=False, description="Analytic Gaussian (Balle & Wang 2018) instead of classic."
    )


class GaussianResult(BaseModel):
    sigma: float = Field(description="Noise standard deviation.")
    mu: float = Field(description="The mechanism's GDP parameter μ = Δ₂/σ.")
    method: Literal["classic", "analytic"]
    epsilon_exact_at_delta: float = Field(
        description="The exact ε at δ of this σ (Balle & Wang 2018); above `epsilon` when the classic "
        "calibration does not keep its claim (ε ≳ 8.4 at δ = 1e-5)."
    )
    calibration_valid: bool = Field(description="Whether σ really gives (ε, δ)-DP.")
    warning: str | None = Field(
        description="Null when the calibration is valid; else why, suggesting analytic."
    )


@router.post("/synthetic-generation", response_model=SyntheticGenerationResult)
def synthetic_generation(body: SyntheticGenerationRequest) -> dict:
    """ε of DP synthetic generation (001 App. C), or the temperature/clip/batch size reaching a target ε."""
    path = "$.target_epsilon" if body.solve_for else "$"
    try:
        result = synthetic_generation_parameters(**body.model_dump())
    except (ValueError, OverflowError) as error:
        raise _unanswerable(path, error) from error
    if not all(math.isfinite(v) for v in result.values() if isinstance(v, int | float)):
        raise _unanswerable(path, ValueError("no finite answer for these parameters"))
    return result


@router.post("/gaussian", response_model=GaussianResult)
def gaussian(body: GaussianRequest) -> dict:
    """σ of the Gaussian mechanism for (ε, δ)-DP, its μ = Δ₂/σ, and whether σ keeps the claim: the classic
    calibration does not above ε ≈ 8.4 at δ = 1e-5 (`calibration_valid: false`, a `warning` suggesting analytic)."""
    try:
        result = gaussian_calibration(
            body.epsilon, body.delta, sensitivity=body.sensitivity, analytic=body.analytic
        )
    except (ValueError, OverflowError) as error:
        raise _unanswerable("$.epsilon", error) from error
    if not all(math.isfinite(result[k]) for k in ("sigma", "mu", "epsilon_exact_at_delta")):
        raise _unanswerable("$.epsilon", ValueError("no finite σ for this ε, δ and sensitivity"))
    return result
