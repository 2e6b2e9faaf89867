"""Fields every audit kind shares."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.audit.accounting import MAX_SCALE, MIN_SCALE

MAX_LABELS = 32
LABEL_KEY = r"^[A-Za-z0-9]([A-Za-z0-9_.\-/]*[A-Za-z0-9])?$"


def pattern_keys(schema: dict[str, Any]) -> None:
    """A dict whose keys have a pattern, as JSON Schema states it for every key: pydantic writes
    patternProperties, which leave a key that does not match unconstrained; here the pattern goes to
    propertyNames and the values' schema to additionalProperties."""
    patterns = schema.pop("patternProperties", {})
    if len(patterns) == 1:
        (pattern, values), *_ = patterns.items()
        schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": pattern}
        schema["additionalProperties"] = values


LabelKey = Annotated[str, Field(min_length=1, max_length=63, pattern=LABEL_KEY)]
Labels = Annotated[
    dict[LabelKey, Annotated[str, Field(max_length=255)]],
    Field(
        max_length=MAX_LABELS,
        description=f"Free-form metadata (model version, git sha, pipeline run): up to {MAX_LABELS} labels, "
        "keys ≤ 63 characters, values ≤ 255. Filter with `GET /v1/audits?label=key=value`; carried into "
        "webhook payloads.",
        json_schema_extra=pattern_keys,
    ),
]

MAX_CHAIN_SECONDS = 7 * 24 * 3600.0
MAX_CHAIN_STEPS = 20


class UntilAnswer(BaseModel):
    """`until_answer`: while the audit ends `inconclusive`, the service takes its result's first next step
    that sets request fields and fits the time left, as a new audit (`followed_by` / `follows` link them),
    until one answers, the seconds or steps run out, or no step fits."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    max_seconds: float = Field(
        gt=0,
        le=MAX_CHAIN_SECONDS,
        description="The wall seconds the whole chain may take, from this audit's creation; a step is taken "
        "only when its expected seconds (when known) fit what is left, and a kind with a `budget` gets "
        "`budget.max_seconds` capped at it. Each next step's request carries what is left.",
    )
    max_steps: int = Field(
        default=5,
        ge=0,
        le=MAX_CHAIN_STEPS,
        description="How many next steps the chain may take after this audit (each step's request carries one "
        "fewer).",
    )


# The sparse vector test of Amin et al. (app/audit/icl/synthetic.py): one definition of its parameters for the
# synthetic_generation kind and the synthetic_generation mechanism of a mia audit (`mechanism.svt`).
SVT_THRESHOLD, SVT_NOISE, PUBLIC_TEMPERATURE = 0.5, 0.2, 1.5  # defaults
SvtThreshold = Annotated[
    float,
    Field(ge=0, le=2, description="svt: θ, threshold on the L1 distance of private and public predictions."),
]
SvtNoise = Annotated[
    float,
    Field(ge=MIN_SCALE, le=MAX_SCALE, description="svt: σ, Laplace noise scale (threshold σ, query 2σ)."),
]
PublicTemperature = Annotated[
    float, Field(ge=MIN_SCALE, le=MAX_SCALE, description="svt: temperature of the public tokens.")
]


class AuditRequestBase(BaseModel):
    """`dataset`, `model` and `seed` are common to all kinds (a `bound` audit needs neither data nor model)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)  # NaN/∞ are no numbers a request needs

    if TYPE_CHECKING:  # each kind's request declares its own `kind` literal (the union's discriminator)
        kind: str

    dataset: str | None = Field(default=None, description="Built-in dataset name or an uploaded dataset id.")
    model: str | None = Field(default=None, description="Registered model name (GET /v1/models).")
    seed: int = Field(
        default=0, ge=0, description="Seeds every random choice; the same seed gives the same result."
    )
    labels: Labels = Field(default_factory=dict)
    notify: str | None = Field(
        default=None,
        max_length=2000,
        description="A URL that gets this audit's terminal event, signed with the tenant's notify secret "
        "(GET /v1/webhooks/notify-secret); not part of the science, ignored by the kind.",
    )
    until_answer: UntilAnswer | None = Field(
        default=None,
        description="Follow the result's next steps on the server until an audit answers, within a stated "
        "time (and step) budget; null: an inconclusive audit ends with its `next_steps` for you to take. Not "
        "part of the science, ignored by the kind.",
    )
