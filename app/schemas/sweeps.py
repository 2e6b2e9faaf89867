"""A sweep: one base audit request, a grid of dotted paths into it, and seeds; one child audit per point."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from app.audit.kinds.base import Labels
from app.audit.stats.verdict import Outcome
from app.db.constants import AuditState
from app.schemas.audits import request_union

GridValue = str | int | float | bool
MAX_GRID_VALUES = 64
GRID_KEY = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*$"


def _grid_schema(schema: dict[str, Any]) -> None:
    """State the key rule for every key in the schema: pydantic writes it as patternProperties, which leave a
    key that does not match unconstrained; here it is propertyNames' pattern and every value a list of 1-64."""
    patterns = schema.pop("patternProperties", {})
    schema["propertyNames"] = {**schema.get("propertyNames", {}), "pattern": GRID_KEY}
    schema["additionalProperties"] = patterns.get(GRID_KEY, {"type": "array", "minItems": 1})


_SCALAR = {"string", "integer", "number", "boolean"}
_NOT_SETTABLE = {"kind"}  # the tag: a grid point changes fields of base's kind, never the kind


def _resolved(prop: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    ref = prop.get("$ref") or next((p.get("$ref") for p in prop.get("allOf", []) if "$ref" in p), None)
    return defs[ref.rsplit("/", 1)[-1]] if ref else prop


def _scalar(prop: dict[str, Any]) -> dict[str, Any] | None:
    """The part of a field's schema that a grid value (a string, number or boolean) can meet, or None."""
    if "anyOf" in prop:
        kept = [branch for branch in map(_scalar, prop["anyOf"]) if branch is not None]
        return None if not kept else kept[0] if len(kept) == 1 else {"anyOf": kept}
    if prop.get("type") in _SCALAR or ("enum" in prop and "type" not in prop) or "const" in prop:
        return {k: v for k, v in prop.items() if k not in ("title", "description", "default")}
    return None


def grid_keys(schema: dict[str, Any], defs: dict[str, Any], prefix: str = "") -> dict[str, dict[str, Any]]:
    """Each dotted path into a kind's request that a grid may set, and its values' schema: a field taking a
    string, number or boolean, at the top or inside an object base always holds (a model field, never null)."""
    keys: dict[str, dict[str, Any]] = {}
    for name, prop in schema.get("properties", {}).items():
        if not prefix and name in _NOT_SETTABLE:
            continue
        inner = _resolved(prop, defs)
        if inner.get("type") == "object" and "properties" in inner:
            keys |= grid_keys(inner, defs, f"{prefix}{name}.")
        elif (values := _scalar(prop)) is not None:
            keys[prefix + name] = values
    return keys


def _per_kind_grid(schema: dict[str, Any]) -> None:
    """State, per kind of base, the grid keys it takes and each key's values: a point is base
    with each key's value set, validated as a submitted audit; and `seed` on the grid with seeds 1 only."""
    from app.schemas.audits import request_models

    kinds = []
    for model in request_models():
        own = model.model_json_schema()
        keys = grid_keys(own, own.get("$defs", {}))
        kind = own["properties"]["kind"].get("const") or own["properties"]["kind"]["enum"][0]
        grid = {
            "propertyNames": {"enum": sorted(keys)},
            "properties": {key: {"type": "array", "items": values} for key, values in sorted(keys.items())},
        }
        kinds.append({"properties": {"base": {"properties": {"kind": {"const": kind}}}, "grid": grid}})
    one_seed = {"properties": {"grid": {"propertyNames": {"not": {"const": "seed"}}}}}
    schema["allOf"] = [{"anyOf": kinds}, {"anyOf": [{"properties": {"seeds": {"const": 1}}}, one_seed]}]


class SweepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", json_schema_extra=_per_kind_grid)

    base: Annotated[request_union(), Field(description="The audit every point starts from.")]  # type: ignore[valid-type]
    grid: dict[
        Annotated[str, Field(min_length=1, max_length=200, pattern=GRID_KEY)],
        Annotated[list[GridValue], Field(min_length=1, max_length=MAX_GRID_VALUES)],
    ] = Field(
        min_length=1,
        max_length=8,
        description='Dotted paths into `base` and the values each takes, e.g. {"epsilon": [1, 2, 4, 8], '
        '"mechanism.partitions": [4, 16]}; every combination is a point.',
        json_schema_extra=_grid_schema,
    )
    seeds: int = Field(
        default=1, ge=1, le=100, description="Audits per point, with seeds base.seed, base.seed + 1, …"
    )
    labels: Labels = Field(default_factory=dict, description="Labels of the sweep (children keep base's).")
    notify: str | None = Field(
        default=None,
        max_length=2000,
        description="URL that gets `sweep.completed` (signed, see /v1/webhooks).",
    )


EXAMPLE: dict[str, Any] = {
    "base": {
        "kind": "mia",
        "dataset": "dbpedia14",
        "model": "oracle",
        "mechanism": {"name": "private_voting", "partitions": 4, "shots_per_partition": 2},
        "epsilon": 1.0,
        "attack": {"name": "inquiry", "threat_model": "both"},
        "llm_calls": 200,
        "trials": 100_000,
    },
    "grid": {"epsilon": [1, 2, 4, 8], "mechanism.partitions": [4, 16]},
    "seeds": 2,
}


class SweepChildResource(BaseModel):
    position: int
    point: dict[str, GridValue]
    seed: int
    audit_id: str
    state: AuditState


class SweepProgress(BaseModel):
    fraction: float = Field(ge=0.0, le=1.0, description="Mean progress of the children.")
    total: int
    counts: dict[AuditState, int] = Field(description="Children per state.")


class SweepResource(BaseModel):
    id: str
    state: AuditState = Field(
        description="PENDING until a child starts; SUCCEEDED when all did; FAILED or CANCELLED when every "
        "child finished and one failed or was cancelled; RUNNING otherwise."
    )
    progress: SweepProgress
    grid: dict[str, list[GridValue]]
    seeds: int
    base: dict[str, Any]
    labels: dict[str, str]
    cancel_requested: bool
    created_at: datetime
    completed_at: datetime | None = Field(description="When the last child finished (sweep.completed).")
    children: list[SweepChildResource]


class SweepList(BaseModel):
    sweeps: list[SweepResource]
    next_page_token: str | None


class SweepRow(BaseModel):
    """One child: the point, its seed, and the verdict fields of its result."""

    position: int
    point: dict[str, GridValue]
    seed: int
    audit_id: str
    state: AuditState
    epsilon_lower: float | None = Field(
        description="The lower bound the verdict used (max over threat models)."
    )
    epsilon_theory: float | None = Field(description="The ε the mechanism claims (the verdict's bound).")
    violation: bool | None
    outcome: Outcome | None = Field(
        default=None,
        description="The child's verdict (its result's `verdict`): violation, leak, inconclusive or "
        "consistent; null until it SUCCEEDED, or for a kind that measures no leakage (iclinf).",
    )
    headline: str | None = Field(default=None, description="The child's verdict in plain words.")
    epsilon_detectable: float | None = Field(
        default=None,
        description="The child's power (its result's `epsilon_detectable`); null when unbounded or not needed.",
    )


class SweepPoint(BaseModel):
    """The seeds of one grid point together."""

    point: dict[str, GridValue]
    audits: int
    epsilon_lower_mean: float | None
    epsilon_lower_min: float | None
    epsilon_lower_max: float | None
    epsilon_theory: float | None
    violations: int = Field(description="Children whose verdict is a violation.")
    outcome: Outcome | None = Field(
        default=None,
        description="The point's verdict over its seeds: the most severe of its children's (violation, then "
        "leak, inconclusive, consistent), as a CI gate on the point would read it; null when none has one.",
    )
    outcomes: dict[Outcome, int] = Field(
        default_factory=dict, description="Children per verdict (only the verdicts seen)."
    )
    headline: str | None = Field(
        default=None, description="The headline of the first child whose verdict is the point's `outcome`."
    )


class SweepResult(BaseModel):
    sweep_id: str
    grid: dict[str, list[GridValue]]
    rows: list[SweepRow]
    points: list[SweepPoint]
