"""Prompt defenses 1–3 as 002 §3.2 places them: exemplars in the system prompt, the defense after them,
the query alone in the user turn (app/audit/mechanisms/prompt_defense.py)."""

from __future__ import annotations

from app.audit.attacks.likelihood import build_query
from app.audit.icl.prompts import CONTEXT_IN_SYSTEM, DEFENSES
from app.audit.kinds.mia import Request, run
from app.audit.mechanisms.prompt_defense import PromptDefense
from app.audit.runtime import RunContext
from app.audit.standalone import LocalDatasets, LocalEngines, default_data_dir
from app.datasets.types import Example


def test_exemplars_then_defense_in_the_system_prompt_and_the_query_alone_in_the_user_turn() -> None:
    exemplars = (Example("Patient Ada Lovelace (MRN-1234567-0001) reports a cough.", "x"),)
    query = build_query(canary=exemplars[0], dataset=None, spec=type("S", (), {"secret": "continuation"})())
    (prompt,) = PromptDefense(level=3).audit_inputs(query, [exemplars])
    system = prompt.system or ""
    assert exemplars[0].text in system and system.endswith(DEFENSES[3])
    assert system.index(exemplars[0].text) < system.index(DEFENSES[3])
    assert exemplars[0].text not in prompt.text and CONTEXT_IN_SYSTEM in prompt.text
    (zero_shot,) = PromptDefense(level=1).audit_inputs(query, [()])
    assert zero_shot.system.endswith(DEFENSES[1]) and "Ada" not in zero_shot.system


def test_the_oracle_still_completes_the_record_from_the_system_prompt() -> None:
    body = {
        "kind": "mia",
        "dataset": "synthetic_records",
        "model": "oracle",
        "mechanism": {"name": "prompt_defense", "defense_level": 2, "shots_per_partition": 2},
        "attack": {"name": "likelihood", "threat_model": "white_box", "canaries": 5, "contexts": 4},
    }
    ctx = RunContext(engines=LocalEngines(), datasets=LocalDatasets(default_data_dir()))
    result = run(Request.model_validate(body), ctx).stored()
    assert result["white_box"]["auc"] == 1.0
