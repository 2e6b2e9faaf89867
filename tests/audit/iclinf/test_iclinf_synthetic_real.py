"""DP synthetic generation on the real SmolLM2: remove-one neighbours vs the batch really without the
prompt (001 App. C.3.3), and the synthetic_generation kind end to end (slow)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from pydantic import ValidationError

from app.audit.accounting import rdp
from app.audit.icl.synthetic import aggregate, clip_logits, log_softmax, step_distributions
from app.audit.icl.templates import generation_prompt
from app.audit.kinds import synthetic_generation
from app.engines.protocol import Prompt

pytestmark = pytest.mark.slow

TEXTS = (
    "Galaxy, Crew Play to 0-0 Tie (AP) AP - Kevin Hartman made seven saves.",
    "Sox win in extra innings as Ortiz homers.",
    "Federer beats Roddick to reach the final.",
)


def test_neighbours_equal_the_batch_with_the_prompt_removed_divided_by_s(smollm2, direct_logprobs):
    prompts = [generation_prompt(t) for t in TEXTS]
    continuation = tuple(smollm2.encode(" The"))  # a step after one generated token
    dists = smollm2.next_token_logprobs([Prompt(p, continuation=continuation) for p in prompts])
    clip, tau = 10.0, 2.0
    step = step_distributions(clip_logits(np.stack([d.logprobs for d in dists]), clip), tau)
    for p in range(len(prompts)):
        # recompute Alg. 1 on D ∖ {p}: fresh plain forward passes of the remaining prompts only
        rest = [q for i, q in enumerate(prompts) if i != p]
        logits = np.stack(
            [direct_logprobs(smollm2.format_ids(Prompt(q, continuation=continuation)))[-1] for q in rest]
        )
        removed = log_softmax(aggregate(clip_logits(logits, clip), batch_size=len(prompts)) / tau)
        assert step.log_neighbours[p] == pytest.approx(removed, abs=1e-4)


def test_kind_end_to_end(real_ctx):
    body = {
        "model": "smollm2-135m-instruct",
        "batch_size": 3,
        "clip": 10.0,
        "target_epsilon": 5.0,
        "sequences": 2,
        "max_new_tokens": 3,
        "seed": 1,
    }
    progress: list[float] = []
    real_ctx.progress = lambda stage, fraction, message="": progress.append(fraction)
    result = synthetic_generation.run(synthetic_generation.Request(**body), real_ctx).stored()
    tau, alpha, eps = rdp.solve_temperature(
        target_epsilon=5.0, delta=1e-5, clip=10.0, batch_size=3, sequences=2, max_new_tokens=3
    )
    assert result["temperature"] == pytest.approx(tau) and result["alpha"] == alpha
    assert result["epsilon_theory"] == pytest.approx(eps)
    assert len(result["texts"]) == 2 and len(result["step_losses"]) == 2
    assert "ratio" not in result and "total_rdp" not in result  # dropped: ratio was ≈ 2·conv/ε_theory
    orders, emp, theory = result["orders"], result["rdp_empirical"], result["rdp_theory"]
    # the curve at α* is the sum of the per-token losses (Thm C.7); ε_empirical converts the whole curve
    total = sum(sum(s) for s in result["step_losses"])
    assert emp[orders.index(alpha)] == pytest.approx(total)
    assert (result["epsilon_empirical"], result["alpha_empirical"]) == pytest.approx(
        rdp.rdp_curve_epsilon(orders, emp, 1e-5)
    )
    assert theory == pytest.approx(
        [rdp.synthetic_generation_rdp(a, clip=10.0, batch_size=3, temperature=tau, steps=6) for a in orders]
    )
    assert all(0 <= e < t for e, t in zip(emp, theory, strict=True))  # measured below the bound
    assert result["epsilon_empirical"] < result["epsilon_theory"]
    assert result["private_tokens"] == result["generated_tokens"] and result["public_tokens"] == 0
    assert all(0 <= v < math.inf for s in result["step_losses"] for v in s)
    assert progress == sorted(progress) and progress[-1] <= 1.0
    assert result["llm_forward_passes"] <= 2 * 3  # one batched pass per generated token
    # the same seed gives the same texts
    again = synthetic_generation.run(synthetic_generation.Request(**body), real_ctx).stored()
    assert again["texts"] == result["texts"] and again["step_losses"] == result["step_losses"]


def test_svt_variant_end_to_end(real_ctx):
    """Amin et al.'s public logits + sparse vector test: only private tokens pay, the curve adds each SVT run at
    its measured sensitivity (≤ 1/s), and the theory is Amin et al. Thm 1 on the r private tokens."""
    body = {
        "model": "smollm2-135m-instruct",
        "batch_size": 3,
        "clip": 10.0,
        "target_epsilon": 8.0,
        "sequences": 2,
        "max_new_tokens": 3,
        "seed": 2,
        "variant": "svt",
        "svt_threshold": 0.5,
        "svt_noise": 1.0,
        "max_private_tokens": 4,
    }
    result = synthetic_generation.run(synthetic_generation.Request(**body), real_ctx).stored()
    tau, alpha, eps = rdp.solve_temperature(
        target_epsilon=8.0, delta=1e-5, clip=10.0, batch_size=3, sequences=2, max_new_tokens=3,
        svt_noise=1.0, private_tokens=4,
    )  # fmt: skip
    assert result["temperature"] == pytest.approx(tau) and result["epsilon_theory"] == pytest.approx(eps)
    masks, losses = result["private_mask"], result["step_losses"]
    private = sum(sum(m) for m in masks)
    assert result["private_tokens"] == private <= 4
    assert result["public_tokens"] == result["generated_tokens"] - private
    assert all(
        v == 0.0 for m, s in zip(masks, losses, strict=True) for priv, v in zip(m, s, strict=True) if not priv
    )
    runs = result["svt_sensitivities"]
    assert private <= len(runs) <= private + 1 and all(0 <= d <= 1 / 3 + 1e-12 for d in runs)
    orders, emp = result["orders"], result["rdp_empirical"]
    em_part = sum(sum(s) for s in losses)
    assert emp[orders.index(alpha)] == pytest.approx(em_part + alpha * sum(2 * d**2 for d in runs))
    theory = [
        rdp.synthetic_generation_rdp(a, clip=10.0, batch_size=3, temperature=tau, steps=4, svt_noise=1.0)
        for a in orders
    ]
    assert result["rdp_theory"] == pytest.approx(theory)
    assert result["epsilon_empirical"] == pytest.approx(rdp.rdp_curve_epsilon(orders, emp, 1e-5)[0])
    assert result["epsilon_empirical"] <= result["epsilon_theory"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"temperature": None}, "temperature"),
        ({"target_epsilon": 1.0, "temperature": 2.0}, "exactly one"),
        ({"batch_size": 1, "temperature": 2.0}, "batch_size"),
        ({"delta": 1.0, "temperature": 2.0}, "delta"),
        ({"temperature": 2.0, "max_private_tokens": 3}, "max_private_tokens"),
        ({"temperature": 2.0, "variant": "dp"}, "variant"),
        (
            {"variant": "svt", "svt_noise": 0.001, "target_epsilon": 1.0, "temperature": None},
            "target_epsilon",
        ),
    ],
)
def test_validation_names_the_field(body, field):
    with pytest.raises(ValidationError, match=field):
        synthetic_generation.Request(model="smollm2-135m-instruct", **body)


def test_example_is_valid():
    request = synthetic_generation.Request.model_validate(synthetic_generation.EXAMPLE)
    assert synthetic_generation.theory(request)["epsilon"] <= 1.0


@pytest.mark.parametrize(("bug", "factor"), [(None, None), ("temperature_scale", 0.5), ("clip_scale", 4.0)])
def test_a_release_that_spends_more_than_its_parameters_is_a_violation(real_ctx, bug, factor):
    """The claim, not only the batch: sampling at τ/2 or clipping at 4c while accounting for (τ, c) is a
    violation on every seed (the release outspends its accounted parameters on the same steps), although
    this batch's own ε may be within the claim; the honest release never is (10 seeds each)."""
    body = {
        "model": "smollm2-135m-instruct",
        "batch_size": 3,
        "clip": 10.0,
        "target_epsilon": 5.0,
        "sequences": 1,
        "max_new_tokens": 3,
        "bug": bug,
        "bug_factor": factor,
    }
    verdicts = []
    for seed in range(5000, 5010):
        r = synthetic_generation.run(synthetic_generation.Request(**body, seed=seed), real_ctx).stored()
        verdicts.append(r["verdict"])
        assert r["epsilon_detectable"] is None and r["epsilon_accounted_batch"] <= r["epsilon_theory"]
    if bug is None:
        assert "violation" not in verdicts
    else:
        assert verdicts.count("violation") >= 9, verdicts
