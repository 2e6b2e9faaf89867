"""The base of every result model and of the models inside one: it remembers the order its fields were given
in, so the stored JSON (`ResultBase.stored()`) is the kind's own, field for field and in its order, while the
API's full dump keeps the declared order."""

from __future__ import annotations

import json
from typing import Any, Self

from pydantic import BaseModel, ModelWrapValidatorHandler, PrivateAttr, model_validator


class ResultPart(BaseModel):
    """A result, or a part of one (a threat model's bound, a next step), that keeps its given order."""

    _given: tuple[str, ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _remember_order(cls, data: Any, handler: ModelWrapValidatorHandler[Self]) -> Self:
        model = handler(data)
        if isinstance(data, dict) and model is not data:
            model._given = tuple(data)
        return model

    def stored(self) -> dict[str, Any]:
        """What is stored, printed and compared: the fields set (by the kind, or later: the runner's `engines`), as strict JSON (no NaN/∞; a
        ValueError otherwise) in the order they were given, those set later at the end."""
        return json.loads(
            json.dumps(_in_given_order(self, self.model_dump(exclude_unset=True)), allow_nan=False)
        )


def _in_given_order(value: Any, dumped: Any) -> Any:
    """`dumped` (a model_dump of `value`) with each model's keys in the order the model was given them."""
    if isinstance(value, ResultPart) and isinstance(dumped, dict):
        rank = {key: i for i, key in enumerate(value._given)}
        keys = sorted(dumped, key=lambda key: rank.get(key, len(rank)))  # stable: the rest keep their order
        return {key: _in_given_order(getattr(value, key, None), dumped[key]) for key in keys}
    if isinstance(value, list | tuple) and isinstance(dumped, list | tuple) and len(value) == len(dumped):
        return [_in_given_order(v, d) for v, d in zip(value, dumped, strict=True)]
    if isinstance(value, dict) and isinstance(dumped, dict):
        return {key: _in_given_order(value.get(key), d) for key, d in dumped.items()}
    return dumped
