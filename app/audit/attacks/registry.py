"""Attack name → module with `build_query(...) -> AuditQuery`, `MECHANISMS` (those it can audit) and
optionally `DEFAULT_CANARY` (the canary text used when the request gives none; default: a dataset row) and
`plant(contexts, dataset, spec, rng)` (a canary design that rewrites the canary exemplar of C1: copy, rare token)."""

from __future__ import annotations

import importlib
from types import ModuleType

ATTACKS: dict[str, str] = {
    "inquiry": "app.audit.attacks.inquiry",
    "signal_text": "app.audit.attacks.signal_text",
    "canary_prompt": "app.audit.attacks.canary_prompt",
    "gap": "app.audit.attacks.gap",
    "brainwash": "app.audit.attacks.brainwash",
    "repeat": "app.audit.attacks.repeat",
    "reference_vector": "app.audit.attacks.reference_vector",
    "output_only": "app.audit.attacks.output_only",
    "ksa_rare_word": "app.audit.attacks.ksa_rare_word",
    "likelihood": "app.audit.attacks.likelihood",
    "min_k": "app.audit.attacks.min_k",
    "min_k_pp": "app.audit.attacks.min_k_pp",
    "zlib_ratio": "app.audit.attacks.zlib_ratio",
    "lira_offline": "app.audit.attacks.lira_offline",
    "recall": "app.audit.attacks.recall",
    "blind": "app.audit.attacks.blind",
    "copy": "app.audit.attacks.copy_canary",
    "rare_token": "app.audit.attacks.rare_token",
    "auto": "app.audit.design",
}
# each canary design with the Ṽ_y+-only white-box score (`*_count`): app/audit/attacks/count_score.py
ATTACKS.update(
    {
        f"{base}_count": "app.audit.attacks.count_score"
        for base in ("copy", "rare_token", "inquiry", "signal_text")
    }
)


def attack_module(name: str) -> ModuleType:
    """The module implementing attack `name` (KeyError for an unknown name); a `*_count` name gets its
    base design's module with the Ṽ_y+ white-box score (count_score.variant)."""
    path = ATTACKS[name]
    if path == "app.audit.attacks.count_score":
        return importlib.import_module(path).variant(name)
    return importlib.import_module(path)


def default_canary(name: str) -> str | None:
    """The attack's own canary text, or None (the audit then draws a training exemplar)."""
    return getattr(attack_module(name), "DEFAULT_CANARY", None)
