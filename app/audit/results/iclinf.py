"""The result of an `iclinf` audit: how much each in-context exemplar sways the model's answer."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from app.audit.results.base import ResultBase, VerdictRow


class IclinfAuditResult(ResultBase):
    """ICLInf: the privacy loss of in-context exemplars, measured by leaving each one out."""

    kind: Literal["iclinf"] = "iclinf"
    iclinf: float = Field(
        description="Mean over queries of the largest change (in nats) that removing one exemplar makes to "
        "the answer distribution: 0 = exemplars do not matter, higher = the answer reveals them."
    )
    iclinf_std: float | None = Field(
        default=None, description="Standard deviation of that change over queries."
    )
    per_position: list[float] = Field(
        description="Mean change when the exemplar at each position (first = 1) is removed."
    )
    per_query: list[float] | None = Field(default=None, description="The largest change for each query.")
    accuracy: float | None = Field(
        default=None,
        description="Share of queries the model answered right with all exemplars (compare with chance, "
        "1 / number of labels).",
    )
    chance_accuracy: float | None = Field(
        default=None, description="Accuracy of guessing: 1 / number of labels."
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="What to mind when reading the numbers, e.g. an accuracy below chance (the model does "
        "not solve the task in context, so its ICLInf says little).",
    )
    dataset: str | None = Field(default=None, description="The dataset the exemplars came from.")
    model: str | None = Field(default=None, description="The model audited.")
    shots: int | None = Field(default=None, description="Exemplars per prompt.")
    queries: int | None = Field(default=None, description="Test queries asked.")
    output_space: str | None = Field(
        default=None, description="labels (distribution over the label set) or vocabulary (every token)."
    )
    calibration: bool | None = Field(
        default=None, description="Whether answers were calibrated by the content-free prompt."
    )
    content_free: list[str] | None = Field(
        default=None,
        description="With calibration: the content-free queries the calibration distribution was averaged over.",
    )
    template: str | None = Field(default=None, description="The prompt template used.")
    labels: list[str] | None = Field(default=None, description="The label words as the model saw them.")
    llm_forward_passes: int | None = Field(default=None, description="Forward passes the model ran.")
    forward_passes_per_query: float | None = Field(default=None, description="Forward passes per query.")

    def verdicts(self) -> list[VerdictRow]:
        """One row: ICLInf measures influence, not ε against a claim, so it never fails the gate."""
        return [VerdictRow("iclinf", None, None, False, f"ICLInf {self.iclinf:.4g} nats")]


Result = IclinfAuditResult


# The output of a real run of docs/results/requests/iclinf-trec-k1.json with shots = 2, queries = 3 (shown in the OpenAPI document as the example result).
EXAMPLE: dict[str, Any] = {
    "kind": "iclinf",
    "dataset": "trec",
    "model": "smollm2-135m-instruct",
    "shots": 2,
    "queries": 3,
    "output_space": "labels",
    "calibration": False,
    "template": "trec",
    "labels": ["Abbreviation", "Description", "Entity", "Person", "Location", "Number"],
    "iclinf": 1.8982993285780194,
    "iclinf_std": 0.4107965236103541,
    "per_position": [1.8982993285780194, 1.07228080172968],
    "per_query": [1.4509361938962995, 1.8009974929034938, 2.442964298934265],
    "accuracy": 0.0,
    "chance_accuracy": 0.16666666666666666,
    "warnings": [
        "accuracy 0 is below chance (0.167 = 1/6 labels): the model does not solve this task in "
        "context, so its ICLInf says little about what it learns from the exemplars."
    ],
    "llm_forward_passes": 10,
    "forward_passes_per_query": 3.3333333333333335,
}
