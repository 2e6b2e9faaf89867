"""A chat-completions app audited directly (issue 22 §4): the vLLM OpenAI-compatible server of
.venv-extras serving SmolLM2 is the deployed app; the audit's prompts (the records in the system message,
the attack's query as the user's) go to its /chat/completions, and the grey-box attacks read its
top_logprobs through the project's OpenAI-compatible client: the likelihood attack on the records'
labels, and private voting's label votes. The request's Authorization goes by secret reference."""

from __future__ import annotations

import pytest

from app.audit.kinds import mia
from app.audit.runtime import AuditError, no_progress
from app.audit.standalone import local_context

pytestmark = pytest.mark.extras


def target(url: str) -> dict:
    return {"url": url, "model": "smollm2", "top_k": 10, "headers": {"Authorization": {"secret": "APP_KEY"}}}


def test_likelihood_and_label_votes_from_a_chat_target(vllm_server: str, monkeypatch) -> None:
    monkeypatch.setenv("ICLAUDIT_SECRET_APP_KEY", "Bearer app-key")
    ctx = local_context(progress=no_progress)
    likelihood = {
        "kind": "mia",
        "dataset": "synthetic_records",
        "seed": 0,
        "target": target(vllm_server),
        "mechanism": {"name": "none", "shots_per_partition": 2},
        "attack": {
            "name": "likelihood",
            "threat_model": "white_box",
            "secret": "label",
            "canaries": 2,
            "contexts": 2,
        },
    }
    result = mia.run(mia.Request.model_validate(likelihood), ctx).stored()
    assert result["llm_forward_passes"] > 0 and result["verdict"] in ("leak", "inconclusive", "consistent")
    assert result["white_box"]["auc"] is not None  # scores from the app's top_logprobs

    voting = {
        "kind": "mia",
        "dataset": "ag_news",
        "seed": 0,
        "target": target(vllm_server),
        "epsilon": 8.0,
        "mechanism": {"name": "private_voting", "partitions": 2, "shots_per_partition": 1},
        "attack": {"name": "inquiry", "threat_model": "both"},
        "llm_calls": 50,
        "trials": 2000,
    }
    result = mia.run(mia.Request.model_validate(voting), ctx).stored()
    assert result["distinct_prompts"] == 3  # the canary's partition in C1 and C0, and the shared one
    assert result["llm_forward_passes"] >= result["distinct_prompts"]  # one request or more per prompt
    assert result["verdict"] in ("violation", "inconclusive", "consistent")


def test_a_target_that_is_down_fails_the_audit_without_its_reply(monkeypatch) -> None:
    monkeypatch.setenv("ICLAUDIT_SECRET_APP_KEY", "Bearer app-key")
    body = {
        "kind": "mia",
        "dataset": "synthetic_records",
        "target": target("http://127.0.0.1:9/v1") | {"timeout_s": 2},
        "mechanism": {"name": "none", "shots_per_partition": 2},
        "attack": {
            "name": "likelihood",
            "threat_model": "white_box",
            "secret": "label",
            "canaries": 1,
            "contexts": 1,
        },
    }
    with pytest.raises(AuditError, match=r"target http://127\.0\.0\.1:9/v1 failed"):
        mia.run(mia.Request.model_validate(body), local_context(progress=no_progress)).stored()
