"""Budgets (issue 22 §2) on the kinds that call a model besides mia: iclinf keeps the queries it finished
and synthetic_generation the texts it finished, each marked inconclusive (budget) with what it spent; the
partial measurement is exactly the first part of the full run; too small a budget fails naming the cap;
a budget the run fits in changes nothing. `bound` calls nothing, so a budget there is a 422 naming it.

The engine is a small deterministic stand-in (a hashed distribution per prompt, ten prompt tokens a
prompt), so the calls counted are exact and the tests cost no model."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import numpy as np
import pytest

from app.audit.budget import BudgetExhausted
from app.audit.kinds import iclinf, mia, synthetic_generation
from app.audit.runtime import RunContext
from app.audit.standalone import local_context
from app.engines.protocol import EngineCounters, Prompt, TokenDistribution
from testkit.client import wait_for

VOCAB = 8


def _rng(*parts: object) -> np.random.Generator:
    digest = hashlib.sha256(repr(parts).encode()).digest()
    return np.random.default_rng(int.from_bytes(digest[:8], "little"))


class ToyLM:
    """Log-probabilities hashed from the prompt (and its continuation): deterministic, any prompt."""

    eos_token_ids = ()

    def __init__(self) -> None:
        self.counters = EngineCounters()

    def _count(self, n: int) -> None:
        self.counters.forward_passes += n
        self.counters.prompt_tokens += 10 * n

    def label_logprobs(self, prompts: Sequence[str], labels: Sequence[str]) -> np.ndarray:
        self._count(len(prompts))
        return np.log(np.stack([_rng(str(p)).dirichlet(np.ones(len(labels))) for p in prompts]))

    def next_token_logprobs(
        self, prompts: Sequence[Prompt], top_k: object = "all"
    ) -> list[TokenDistribution]:
        self._count(len(prompts))
        return [
            TokenDistribution(np.log(_rng(p.text, tuple(p.continuation)).dirichlet(np.ones(VOCAB))))
            for p in prompts
        ]

    def decode(self, token_ids: Sequence[int]) -> str:
        return " ".join(f"t{t}" for t in token_ids)


class ToyEngines:
    def __init__(self) -> None:
        self.engine = ToyLM()

    def llm(self, name: str) -> ToyLM:
        return self.engine


def context(messages: list[str] | None = None) -> RunContext:
    kept = messages if messages is not None else []
    ctx = local_context(progress=lambda stage, fraction, message="": kept.append(message))
    ctx.engines = ToyEngines()
    return ctx


ICLINF = {"kind": "iclinf", "dataset": "dbpedia14", "model": "toy", "shots": 2, "queries": 5, "seed": 3}


def without_budget(result: dict) -> dict:
    return {k: v for k, v in result.items() if k not in ("budget", "spent")}


def test_iclinf_stops_at_the_cap_with_the_queries_it_finished() -> None:
    full = iclinf.run(iclinf.Request.model_validate(ICLINF), context()).stored()
    messages: list[str] = []
    # k + 1 = 3 prompts a query: 7 calls pay for two queries, the third's would pass the cap
    result = iclinf.run(
        iclinf.Request.model_validate(ICLINF | {"budget": {"max_calls": 7}}), context(messages)
    ).stored()
    assert result["stopped"] == {
        "reason": "budget",
        "cap": "max_calls",
        "message": result["stopped"]["message"],
        "queries": 2,
    }
    assert result["queries"] == 2 and result["spent"]["calls"] == 6 and result["budget"]["max_calls"] == 7
    assert result["verdict"] == "inconclusive" and "budget: max_calls = 7" in result["verdict_reason"]
    assert "2 of 5 queries" in result["verdict_reason"] and result["headline"].startswith(
        "Inconclusive (budget)"
    )
    # the partial measurement is the full run's first two queries (a prefix of one uniform draw)
    assert result["per_query"] == full["per_query"][:2]
    assert result["iclinf"] == pytest.approx(np.mean(full["per_query"][:2]))
    assert messages[-1].startswith("query 2/5 · calls 6/7, tokens 60, ")  # the spend against the budget

    with pytest.raises(BudgetExhausted, match="max_calls = 2"):
        iclinf.run(iclinf.Request.model_validate(ICLINF | {"budget": {"max_calls": 2}}), context()).stored()

    roomy = iclinf.run(
        iclinf.Request.model_validate(ICLINF | {"budget": {"max_calls": 15}}), context()
    ).stored()
    assert "stopped" not in roomy and roomy["spent"]["calls"] == 15 and without_budget(roomy) == full


def test_iclinf_max_tokens_stops_after_the_query_that_passed_it() -> None:
    result = iclinf.run(
        iclinf.Request.model_validate(ICLINF | {"budget": {"max_tokens": 70}}), context()
    ).stored()
    # 30 tokens a query: the third passes 70; the audit stops before the fourth
    assert result["stopped"]["cap"] == "max_tokens" and result["queries"] == 3
    assert result["spent"]["tokens"] == 90 and result["verdict"] == "inconclusive"


SYNTH = {
    "kind": "synthetic_generation",
    "dataset": "dbpedia14",
    "model": "toy",
    "label": "Athlete",
    "batch_size": 3,
    "clip": 10.0,
    "temperature": 2.0,
    "sequences": 3,
    "max_new_tokens": 3,
    "seed": 1,
}


def test_synthetic_generation_stops_at_the_cap_with_the_texts_it_finished() -> None:
    full = synthetic_generation.run(synthetic_generation.Request.model_validate(SYNTH), context()).stored()
    # s = 3 prompts a token, 3 tokens a text: 20 calls pay for two texts (18), not a third token of 3
    result = synthetic_generation.run(
        synthetic_generation.Request.model_validate(SYNTH | {"budget": {"max_calls": 20}}), context()
    ).stored()
    assert result["stopped"]["texts"] == 2 and result["sequences"] == 2 and result["spent"]["calls"] == 18
    assert result["texts"] == full["texts"][:2] and result["step_losses"] == full["step_losses"][:2]
    assert result["verdict"] == "inconclusive" and "2 of 3 texts" in result["verdict_reason"]
    assert not result["violation"]
    # the measured curve counts only the texts finished: never more than the full run's
    assert all(a <= b + 1e-12 for a, b in zip(result["rdp_empirical"], full["rdp_empirical"], strict=True))
    assert result["epsilon_empirical"] <= full["epsilon_empirical"] <= full["epsilon_theory"]
    assert result["epsilon_theory"] == full["epsilon_theory"]  # the claim is the full run's

    with pytest.raises(BudgetExhausted, match="max_calls = 8"):
        synthetic_generation.run(
            synthetic_generation.Request.model_validate(SYNTH | {"budget": {"max_calls": 8}}), context()
        ).stored()
    roomy = synthetic_generation.run(
        synthetic_generation.Request.model_validate(SYNTH | {"budget": {"max_calls": 27}}), context()
    ).stored()
    assert "stopped" not in roomy and without_budget(roomy) == full


def test_a_stopped_audit_that_already_shows_a_violation_keeps_it() -> None:
    from app.audit.budget import stopped_verdict

    stop = BudgetExhausted("max_calls", 10, {"calls": 10, "tokens": 0, "seconds": 1.0})
    violation = {"verdict": "violation", "verdict_reason": "ε 3 > 1", "headline": "Violation"}
    assert stopped_verdict(stop, "2 of 3 texts", violation) == violation
    consistent = {"verdict": "consistent", "verdict_reason": "within", "headline": "Consistent"}
    assert stopped_verdict(stop, "2 of 3 texts", consistent)["verdict"] == "inconclusive"


def test_bound_takes_no_budget_and_the_default_budget_reaches_iclinf(app_client, make_key) -> None:
    bound = {"kind": "bound", "counts": {"tp": 60, "fn": 40, "fp": 40, "tn": 60}}
    with app_client(default_budget={"max_calls": 2}) as client:
        client.headers["Authorization"] = f"Bearer {make_key('alice')}"
        refused = client.post("/v1/audits", json=bound | {"budget": {"max_calls": 5}})
        assert refused.status_code == 422, refused.text
        assert [d["path"] for d in refused.json()["error"]["details"]] == ["$.budget"]
        plain = client.post("/v1/audits", json=bound)  # the server's default budget does not reach it
        assert plain.status_code == 202 and "budget" not in plain.json()["request"], plain.text
        # the default reaches an iclinf audit (SmolLM2): 3 prompts for its first query pass max_calls 2
        body = ICLINF | {"model": "smollm2-135m-instruct"}
        with_default = client.post("/v1/audits", json=body)
        assert with_default.status_code == 202, with_default.text
        assert with_default.json()["request"]["budget"]["max_calls"] == 2
        done = wait_for(client.get, with_default.json()["id"], timeout=300)
    assert done["state"] == "FAILED" and "budget: max_calls = 2" in done["error"]["message"]


MIA_DIRECT = {
    "kind": "mia",
    "dataset": "dbpedia14",
    "model": "toy",
    "seed": 2,
    "mechanism": {"name": "private_voting", "partitions": 4, "shots_per_partition": 2},
    "attack": {"name": "inquiry", "threat_model": "black_box"},
    "estimator": "direct",
    "trials": 5000,
}


def test_mia_max_tokens_keeps_the_trials_it_finished() -> None:
    """A direct mia audit's prompts all go out with its first chunk of trials (CleanSource sends each once:
    C1's 4 partitions, then C0's one other, 10 tokens each): max_tokens 45 is passed by C0's, and the audit
    stops at the next report, keeping that chunk's 1,000 pairs, the full run's first 1,000, judged
    inconclusive (budget) with what it spent. max_tokens 40 stops before C0's prompt: no pair, a failure."""
    full = mia.run(mia.Request.model_validate(MIA_DIRECT), context()).stored()
    result = mia.run(
        mia.Request.model_validate(MIA_DIRECT | {"budget": {"max_tokens": 45}}), context()
    ).stored()
    assert result["stopped"] == {
        "reason": "budget",
        "cap": "max_tokens",
        "message": "budget: max_tokens = 45 reached",
        "trials": 1000,
    }
    assert result["trials"] == 1000 and result["verdict"] == "inconclusive"
    assert result["spent"]["calls"] == result["distinct_prompts"] == full["distinct_prompts"] == 5
    assert result["spent"]["tokens"] == 50
    with pytest.raises(
        BudgetExhausted, match=r"max_tokens = 40 reached before .* \(spent: calls 4, tokens 40\)"
    ):
        mia.run(mia.Request.model_validate(MIA_DIRECT | {"budget": {"max_tokens": 40}}), context()).stored()
    first = full["evidence"], result["evidence"]  # the first trials of each context: the same draws
    assert first[0] == first[1]


def test_a_stop_names_the_budget_that_finishes_and_taking_it_finishes() -> None:
    """next_steps of a budget stop (app/audit/stats/next_steps.py): spent × (needed / done), for each kind
    that stops — mia (trials), iclinf (queries), synthetic_generation (texts) — and that budget finishes."""
    stopped = mia.run(
        mia.Request.model_validate(MIA_DIRECT | {"budget": {"max_tokens": 45}}), context()
    ).stored()
    (step,) = stopped["next_steps"]
    # 50 tokens for 1,000 of 5,000 trials: 250 finish them; the step's power is the full run's
    assert step["set"] == {"budget.max_tokens": 250} and step["why"] == "stopped by budget.max_tokens"
    full = mia.run(
        mia.Request.model_validate(MIA_DIRECT | {"budget": {"max_tokens": 250}}), context()
    ).stored()
    assert "stopped" not in full and full["trials"] == 5000
    # η of the design: the full run's power is the one the step promised (None: unbounded, both)
    if (full.get("power") or {}).get("efficiency_source") == "design":
        promised = step["epsilon_detectable"]
        assert full["epsilon_detectable"] == (None if promised is None else pytest.approx(promised, rel=1e-6))

    stopped = iclinf.run(
        iclinf.Request.model_validate(ICLINF | {"budget": {"max_calls": 7}}), context()
    ).stored()
    (step,) = stopped["next_steps"]
    assert step["set"] == {"budget.max_calls": 15}  # 6 calls paid for 2 of the 5 queries
    done = iclinf.run(
        iclinf.Request.model_validate(ICLINF | {"budget": {"max_calls": 15}}), context()
    ).stored()
    assert "stopped" not in done and done["queries"] == 5

    stopped = synthetic_generation.run(
        synthetic_generation.Request.model_validate(SYNTH | {"budget": {"max_calls": 20}}), context()
    ).stored()
    (step,) = stopped["next_steps"]
    assert step["set"] == {"budget.max_calls": 27}  # 18 calls paid for 2 of the 3 texts
    done = synthetic_generation.run(
        synthetic_generation.Request.model_validate(SYNTH | {"budget": {"max_calls": 27}}), context()
    ).stored()
    assert "stopped" not in done and done["verdict"] != "inconclusive"
