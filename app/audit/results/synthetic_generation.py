"""The result of a `synthetic_generation` audit: the privacy spent generating DP synthetic texts."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.audit.results.base import ResultBase, Verdict


class SyntheticGenerationAuditResult(ResultBase):
    """ε actually spent by DP synthetic text generation on these private examples, beside its budget."""

    kind: Literal["synthetic_generation"] = "synthetic_generation"
    epsilon_empirical: float = Field(
        description="ε spent on these very examples (data-dependent accounting of the tokens generated): "
        "at most epsilon_theory when the generator works as designed."
    )
    epsilon_theory: float = Field(description="The ε budget the parameters guarantee for any examples.")
    ratio: float | None = Field(
        default=None, description="epsilon_empirical / epsilon_theory (below 1: less spent than budgeted)."
    )
    alpha: float | None = Field(default=None, description="Rényi order at which the accounting is done.")
    total_rdp: float | None = Field(default=None, description="Rényi privacy loss summed over all tokens.")
    temperature: float | None = Field(
        default=None, description="Sampling temperature used (solved or given)."
    )
    clip: float | None = Field(default=None, description="Logit clipping level used.")
    batch_size: int | None = Field(default=None, description="Private examples per batch.")
    sequences: int | None = Field(default=None, description="Synthetic texts generated.")
    max_new_tokens: int | None = Field(default=None, description="Token limit per text.")
    delta: float | None = Field(default=None, description="The δ at which ε is stated.")
    target_epsilon: float | None = Field(
        default=None, description="The ε asked for, when a parameter was solved."
    )
    generated_tokens: int | None = Field(default=None, description="Tokens generated in all.")
    step_losses: list[list[float]] | None = Field(default=None, description="Rényi loss per token, per text.")
    texts: list[str] | None = Field(default=None, description="The synthetic texts.")
    dataset: str | None = Field(default=None, description="Dataset of the private examples.")
    model: str | None = Field(default=None, description="The model audited.")
    label: str | None = Field(default=None, description="The label shared by examples and texts.")
    llm_forward_passes: int | None = Field(default=None, description="Forward passes the model ran.")

    def verdicts(self) -> list[Verdict]:
        """Spending more than the budget would be a bug in the generator or its accounting."""
        over = self.epsilon_empirical > self.epsilon_theory * (1 + 1e-9)
        return [Verdict("synthetic_generation", self.epsilon_empirical, self.epsilon_theory, over)]


Result = SyntheticGenerationAuditResult


# The output of a real run of examples/synthgen-eps1.json with sequences = 1, max_new_tokens = 4, batch_size = 4 (shown in the OpenAPI document as the example result).
EXAMPLE: dict[str, Any] = {
    "kind": "synthetic_generation",
    "dataset": "ag_news",
    "model": "smollm2-135m-instruct",
    "label": "Sports",
    "batch_size": 4,
    "clip": 10.0,
    "temperature": 20.22692684427546,
    "sequences": 1,
    "max_new_tokens": 4,
    "delta": 1e-05,
    "target_epsilon": 1.0,
    "epsilon_theory": 1.0,
    "alpha": 18.0,
    "total_rdp": 0.005953511601777183,
    "epsilon_empirical": 0.9120082787088413,
    "ratio": 0.9120082787088413,
    "generated_tokens": 4,
    "step_losses": [
        [0.0014338218532308471, 0.0017626547124550238, 0.0014730806917340712, 0.001283954344357241]
    ],
    "texts": ["Actuallywara Playersistocene"],
    "llm_forward_passes": 5,
}
