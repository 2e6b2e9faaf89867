"""The iclinf kind on the real SmolLM2 against an independent per-prompt computation (slow)."""

from __future__ import annotations

import numpy as np
import pytest
from pydantic import ValidationError

from app.audit.icl.iclinf import calibrate, leave_one_out_losses, renormalize, summarize
from app.audit.icl.templates import resolve_template
from app.audit.kinds import iclinf

pytestmark = pytest.mark.slow


def _reference(smollm2, direct_logprobs, ctx, request, content_free=("",)):
    """Eq. 4 with every prompt scored by its own plain forward pass; labels as token sequences;
    calibration by the mean probabilities over the `content_free` queries."""
    dataset = ctx.datasets.load(request.dataset)
    template = resolve_template(request.template, request.dataset, dataset.labels)
    words = template.words(dataset.labels)
    label_ids = [smollm2.encode(w) for w in words]

    def scores(prompt: str) -> tuple[np.ndarray, np.ndarray]:
        ids = smollm2.format_ids(prompt)
        rows = {lid[:-1]: direct_logprobs(ids + lid[:-1]) for lid in label_ids}
        labels = [
            sum(rows[lid[:-1]][len(ids) - 1 + t, tok] for t, tok in enumerate(lid)) for lid in label_ids
        ]
        return renormalize(np.array(labels)), rows[()][len(ids) - 1]

    losses, vocab_losses, correct = [], [], 0
    for query, exemplars in iclinf.draw_queries(dataset, request.shots, request.queries, request.seed):
        prompts = iclinf.leave_one_out_prompts(template, exemplars, query.text)
        lab, voc = zip(*(scores(p) for p in prompts), strict=True)
        cf_probs = [
            np.stack([np.exp(scores(p)[0]) for p in iclinf.leave_one_out_prompts(template, exemplars, c)])
            for c in content_free
        ]
        cf = np.log(np.mean(cf_probs, axis=0) / np.mean(cf_probs, axis=0).sum(axis=1, keepdims=True))
        cal = calibrate(np.stack(lab), cf)
        losses.append(leave_one_out_losses(cal[0], cal[1:]))
        vocab_losses.append(leave_one_out_losses(voc[0], np.stack(voc[1:])))
        correct += dataset.labels[int(np.argmax(cal[0]))] == query.label
    return summarize(np.array(losses)), summarize(np.array(vocab_losses)), correct / request.queries


def test_iclinf_matches_independent_scoring(smollm2, direct_logprobs, real_ctx):
    # trec: short prompts, and "Abbreviation" is a 3-token label (scored as a sequence)
    body = {"dataset": "trec", "model": "smollm2-135m-instruct", "shots": 2, "queries": 1, "seed": 7}
    calibrated = iclinf.Request(**body, calibration=True)
    expected, expected_vocab, expected_acc = _reference(smollm2, direct_logprobs, real_ctx, calibrated)

    before = smollm2.counters.forward_passes
    result = iclinf.run(calibrated, real_ctx).stored()
    assert result["iclinf"] == pytest.approx(expected.iclinf, abs=1e-3)
    assert result["per_position"] == pytest.approx(expected.per_position, abs=1e-3)
    assert result["accuracy"] == expected_acc
    assert result["llm_forward_passes"] == smollm2.counters.forward_passes - before
    assert result["iclinf"] > 0 and len(result["per_position"]) == 2

    vocab = iclinf.run(iclinf.Request(**body, output_space="vocabulary"), real_ctx).stored()
    assert vocab["iclinf"] == pytest.approx(expected_vocab.iclinf, abs=1e-3)
    # per query: at most one batched pass for the k + 1 prompts (+ label scoring for the accuracy)
    assert vocab["forward_passes_per_query"] <= body["shots"] + 1


def test_zhao2021_calibration_averages_three_content_free_inputs(smollm2, direct_logprobs, real_ctx):
    body = {"dataset": "trec", "model": "smollm2-135m-instruct", "shots": 2, "queries": 1, "seed": 7}
    request = iclinf.Request(**body, calibration=True, content_free="zhao2021")
    expected, _, expected_acc = _reference(
        smollm2, direct_logprobs, real_ctx, request, content_free=("N/A", "", "[MASK]")
    )
    result = iclinf.run(request, real_ctx).stored()
    assert result["content_free"] == ["N/A", "", "[MASK]"]
    assert result["iclinf"] == pytest.approx(expected.iclinf, abs=1e-3)
    assert result["per_position"] == pytest.approx(expected.per_position, abs=1e-3)
    assert result["accuracy"] == expected_acc
    blank = iclinf.run(iclinf.Request(**body, calibration=True), real_ctx).stored()
    assert blank["content_free"] == [""] and blank["iclinf"] != pytest.approx(result["iclinf"], abs=1e-6)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"shots": 0}, "shots"),
        ({"queries": 0}, "queries"),
        ({"output_space": "tokens"}, "output_space"),
        ({"template": "{examples} without query"}, "template"),
        ({"example_format": "{text}"}, "example_format"),
        ({"content_free": "zhao2021"}, "content_free"),
        ({"content_free": "none", "calibration": True}, "content_free"),
    ],
)
def test_validation_names_the_field(body, field):
    with pytest.raises(ValidationError, match=field):
        iclinf.Request(dataset="ag_news", model="smollm2-135m-instruct", **body)


def test_example_is_valid():
    assert iclinf.Request.model_validate(iclinf.EXAMPLE).kind == "iclinf"
