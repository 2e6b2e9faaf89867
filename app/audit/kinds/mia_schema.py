"""The rules of a mia request across fields as JSON Schema, built from the registries: one
branch per mechanism (its estimators, teacher outputs, threat models, endpoint, bugs, assumption, svt,
target) and within it one per attack that audits it (the attack's own `check_request`, and
`check_generated` for generated-text audits). A rule is stated on the effective value: an absent field is
its default.

Not stated (arithmetic no schema holds): a synthetic_generation mechanism whose claim no temperature reaches
(released_text.check_generated's build_mechanism): its 422 carries reason NO_SOLUTION."""

from __future__ import annotations

from functools import cache
from typing import Any

DEFAULTS = {
    ("attack", "name"): "inquiry",
    ("attack", "threat_model"): "both",
    ("attack", "variant"): "binary",
    ("attack", "secret"): "continuation",
    ("attack", "reference"): False,
    ("estimator",): "bootstrap",
    ("assumption",): "auto",
    ("mechanism", "teacher_output"): "free_text",
}
_ESTIMATORS = ("bootstrap", "direct", "exact")


def _at(path: tuple[str, ...], leaf: dict[str, Any], required: bool) -> dict[str, Any]:
    """`leaf` holds at `path` (each step required when `required`, else only where present)."""
    node = leaf
    for step in reversed(path):
        node = {"properties": {step: node}, **({"required": [step]} if required else {})}
    return node


def is_(path: tuple[str, ...], *values: Any) -> dict[str, Any]:
    """The effective value at `path` (its default when absent) is one of `values`."""
    leaf = {"enum": list(values)}
    return _at(path, leaf, required=DEFAULTS.get(path) not in values)


def unset(*path: str) -> dict[str, Any]:
    """The optional field at `path` is absent or null."""
    return _at(path, {"type": "null"}, required=False)


def given(path: tuple[str, ...], schema: dict[str, Any]) -> dict[str, Any]:
    """The optional field at `path` is given (not null) and meets `schema`."""
    return _at(path, schema, required=True)


def _all(*rules: dict[str, Any]) -> dict[str, Any]:
    rules = tuple(r for r in rules if r)  # {}: no rule
    return {} if not rules else rules[0] if len(rules) == 1 else {"allOf": list(rules)}


def _any(*rules: dict[str, Any]) -> dict[str, Any]:
    return rules[0] if len(rules) == 1 else {"anyOf": list(rules)}


def _one(*rules: dict[str, Any]) -> dict[str, Any]:
    """Branches that exclude each other (each names its mechanism or attack): oneOf, which schemathesis's
    generator takes branch by branch where an anyOf of allOfs would be multiplied out."""
    return rules[0] if len(rules) == 1 else {"oneOf": list(rules)}


def _generated(name: str) -> dict[str, Any] | None:
    """released_text.check_generated: the rules of a generated-text audit of mechanism `name` (None: none)."""
    from app.audit.attacks.released_text import MECHANISMS

    if name not in MECHANISMS:
        return None
    rules = [is_(("estimator",), "direct"), unset("attack", "canary")]
    if name in ("none", "prompt_defense"):
        rules.append(is_(("attack", "threat_model"), "black_box"))
    if name == "synthetic_generation":
        rules.append(given(("mechanism", "shots_per_partition"), {"const": 1}))
        rules.append(_at(("mechanism", "partitions"), {"minimum": 2}, required=False))
    return _all(*rules)


def _not_exact() -> dict[str, Any]:
    return is_(("estimator",), "bootstrap", "direct")


def _attack_rules(attack: str, mechanism: str) -> dict[str, Any] | None:
    """The attack's own check_request for this mechanism as a schema ({}: no rule; None: never valid)."""
    from app.audit.attacks.registry import attack_module

    module = attack_module(attack)
    check = getattr(module, "check_request", None)
    where = getattr(check, "__module__", "") or ""
    if check is None:
        return {}
    if where.endswith("canary_prompt"):
        secret = _generated(mechanism)
        score = given(("attack", "score"), {"enum": ["rouge_l", "exact"]})
        branches = [_all(is_(("attack", "variant"), "secret"), score, secret)] if secret else []
        if mechanism not in ("esa", "ksa"):
            branches.append(_all(is_(("attack", "variant"), "binary", "list"), unset("attack", "score")))
        return _any(*branches) if branches else None
    if where.endswith("repeat"):
        generated = _generated(mechanism)
        score = given(("attack", "score"), {"enum": ["rouge_l", "exact"]})
        branches = [_all(score, generated)] if generated else []
        if mechanism != "ksa":
            branches.append(unset("attack", "score"))
        return _any(*branches) if branches else None
    if where.endswith("attacks.likelihood"):
        own = (
            is_(("attack", "secret"), "label")
            if mechanism == "private_voting"
            else is_(("attack", "threat_model"), "white_box")
        )
        return _all(own, _not_exact())
    if where.endswith("token_likelihood"):
        rules = [
            is_(("attack", "secret"), "continuation", "code"),
            is_(("attack", "threat_model"), "white_box"),
            is_(("attack", "reference"), False),
            _not_exact(),
        ]
        if attack == "lira_offline":
            rules.append(_at(("attack", "contexts"), {"minimum": 2}, required=False))
        return _all(*rules)
    if where.endswith("design"):
        return _all(_not_exact(), unset("attack", "canary"))
    if where.endswith("count_score"):
        from app.audit.attacks.count_score import split_name

        base, changes = split_name(attack)
        inner = _attack_rules(base, mechanism)
        return None if inner is None else _all(inner, _not_exact() if "other_weight" in changes else {})
    raise KeyError(f"mia_schema: no schema for attack {attack!r}'s check_request ({where})")


def _mechanism_rules(name: str) -> dict[str, Any] | None:
    """One mechanism's branch: its own rules and one branch per attack that audits it."""
    from app.audit.attacks.registry import ATTACKS, attack_module
    from app.audit.mechanisms.registry import MECHANISMS

    m = MECHANISMS[name]
    rules = [
        given(("mechanism", "name"), {"const": name}),
        is_(("estimator",), *sorted(m.estimators)),
        is_(("mechanism", "teacher_output"), *sorted(m.teacher_outputs)),
        given(("mechanism", "endpoint"), {"type": "object"})
        if name == "http_endpoint"
        else unset("mechanism", "endpoint"),
        {} if name == "synthetic_generation" else unset("mechanism", "svt"),
    ]
    if not m.white_box_available:
        rules.append(is_(("attack", "threat_model"), "black_box"))
    if not m.gaussian:
        rules.append(is_(("assumption",), "auto", "none"))
    if m.plants_bugs:
        rules.append(_any(unset("mechanism", "bug"), _not_exact()))
    else:
        rules.append(unset("mechanism", "bug"))
    if m.needs_llm:
        rules.append(_any(unset("target"), _all(given(("target",), {"type": "object"}), unset("model"))))
    else:
        rules.append(unset("target"))
    attacks = []
    for attack in ATTACKS:
        if name not in attack_module(attack).MECHANISMS:
            continue
        own = _attack_rules(attack, name)
        if own is not None:
            attacks.append(_all(is_(("attack", "name"), attack), own))
    if not attacks:
        return None
    return _all(*rules, _one(*attacks))


@cache
def rules_schema() -> dict[str, Any]:
    """The mia request's json_schema_extra: names from the registries, and one branch per mechanism."""
    from app.audit.attacks.registry import ATTACKS
    from app.audit.mechanisms.bugs import BUGS
    from app.audit.mechanisms.registry import MECHANISMS

    branches = [b for b in map(_mechanism_rules, MECHANISMS) if b is not None]
    names = {
        "properties": {
            "dataset": {"type": "string", "minLength": 1},
            "mechanism": {
                "properties": {
                    "name": {"enum": list(MECHANISMS)},
                    "bug": {"anyOf": [{"enum": list(BUGS)}, {"type": "null"}]},
                }
            },
            "attack": {"properties": {"name": {"enum": list(ATTACKS)}}},
        },
        "required": ["dataset"],
    }
    return {"allOf": [names, _one(*branches)]}


def add_rules(schema: dict[str, Any]) -> None:
    """pydantic json_schema_extra for the mia Request."""
    schema.setdefault("allOf", []).extend(rules_schema()["allOf"])
