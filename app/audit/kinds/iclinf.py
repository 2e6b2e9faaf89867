"""`kind: "iclinf"` — the data-dependent privacy loss of ICL exemplars (001 §3 Eq. 4, §4, App. B, E.1).

For each of m test queries (drawn without replacement) k exemplars are drawn from the training set
without replacement, fresh per query. The k + 1 prompts (all k, and each one removed) are scored in
one engine call, the full context first (leave-one-out prompt i shares with it everything before
exemplar i, which the transformers engine reuses from its KV cache); the loss of position i is
max_y |log A(S, x') − log A(S ∖ e_i, x')| over the label set (renormalized) or the full vocabulary,
optionally calibrated by the content-free distribution of the same exemplars (001 App. B): the query
left blank (`content_free: blank`, the default) or the mean over "N/A", "" and "[MASK]" (`zhao2021`,
the inputs of the method 001 App. B cites, Zhao et al. 2021 §4).

    python -m app.audit.kinds.iclinf examples/iclinf-dbpedia-k4.json
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from app.audit.budget import (
    BudgetExhausted,
    BudgetSpec,
    MeteredEngine,
    stopped,
    stopped_verdict,
    with_budget,
)
from app.audit.icl.iclinf import (
    CONTENT_FREE_INPUTS,
    calibrate,
    content_free_distribution,
    leave_one_out_losses,
    renormalize,
    summarize,
)
from app.audit.icl.templates import (
    BUILTIN_TEMPLATES,
    ClassificationTemplate,
    custom_template,
    resolve_template,
)
from app.audit.kinds.base import AuditRequestBase
from app.audit.results.iclinf import IclinfAuditResult
from app.audit.runtime import AuditError, RunContext
from app.audit.stats.next_steps import budget_step
from app.datasets.types import Dataset, Example
from app.engines.protocol import LLMEngine

_PLAIN = r"(?:[^{}]|\}\}|\{\{(?!examples\}|query\}))*"  # braces doubled, none spelling a placeholder
_UNIT = r"(?:[^{}]|\}\}|\{\{(?!text\}|label\})|\{text\}|\{label\})"
TEMPLATE_PATTERN = "^" + _PLAIN + r"\{examples\}" + _PLAIN + r"\{query\}" + _PLAIN + "$"
"""A custom template: {examples} then {query}, each once, other braces doubled (and no doubled one spelling
a placeholder, which str.count would find)."""
EXAMPLE_FORMAT_PATTERN = (
    "^" + _UNIT + r"*(?:\{text\}" + _UNIT + r"*\{label\}|\{label\}" + _UNIT + r"*\{text\})" + _UNIT + "*$"
)
"""An example_format: {text} and {label}, other braces doubled (no doubled one spelling either)."""

# The schema states what _check_template checks: content_free other than blank only with
# calibration: true; example_format only beside a custom template (a string that is no built-in name); a
# custom template's and example_format's placeholders (the patterns, enforced in _check_template).
TEMPLATE_SCHEMA: dict = {
    "allOf": [
        {"properties": {
            "template": {"anyOf": [{"type": "null"}, {"enum": sorted({*BUILTIN_TEMPLATES, "generic"})},
                                   {"type": "string", "pattern": TEMPLATE_PATTERN}]},
            "example_format": {"anyOf": [{"type": "null"},
                                         {"type": "string", "pattern": EXAMPLE_FORMAT_PATTERN}]},
        }},
        {"anyOf": [{"properties": {"content_free": {"const": "blank"}}},
                   {"required": ["calibration"], "properties": {"calibration": {"const": True}}}]},
        {"anyOf": [{"properties": {"example_format": {"type": "null"}}},
                   {"required": ["template"],
                    "properties": {"template": {"type": "string",
                                                "not": {"enum": sorted({*BUILTIN_TEMPLATES, "generic"})}}}}]},
    ]
}  # fmt: skip


class Request(AuditRequestBase):
    model_config = ConfigDict(json_schema_extra=TEMPLATE_SCHEMA)

    kind: Literal["iclinf"] = "iclinf"
    dataset: str = Field(description="Classification dataset (built-in name or uploaded id).")
    model: str = Field(description="Registered model name (GET /v1/models).")
    shots: int = Field(default=4, ge=1, le=32, description="k: exemplars per prompt, drawn fresh per query.")
    queries: int = Field(
        default=500, ge=1, le=10_000, description="m: test queries, drawn without replacement."
    )
    output_space: Literal["labels", "vocabulary"] = Field(
        default="labels",
        description="labels: renormalized over the label set (001 §4.2); vocabulary: the full next-token "
        "distribution (001 App. E.1).",
    )
    calibration: bool = Field(
        default=False, description="Divide by the content-free distribution and renormalize (001 App. B)."
    )
    content_free: Literal["blank", "zhao2021"] = Field(
        default="blank",
        description="With calibration: the content-free queries p_cf is taken from. blank: the query left "
        "empty (001 App. B); zhao2021: the mean probabilities over 'N/A', '' and '[MASK]' (Zhao et al. 2021, "
        "the method 001 App. B cites).",
    )
    template: str | None = Field(
        default=None,
        description="None: 001 Table 2 for ag_news/dbpedia14/trec, else generic; a built-in name "
        "(ag_news, dbpedia14, trec, generic); or a custom string with {examples} and {query}.",
    )
    example_format: str | None = Field(
        default=None,
        description="Custom templates only: how one exemplar is written, with {text} and {label} "
        "(default 'Input: {text}\\nOutput: {label}').",
    )
    budget: BudgetSpec | None = Field(
        default=None,
        description="Caps on model calls (prompts scored: k + 1 a query, more with calibration), tokens and "
        "seconds (app/audit/budget.py). Stopped by one, the audit keeps the queries it finished — a uniform "
        "sample of the m drawn, so ICLInf and its spread are estimated on them — and is inconclusive: "
        "budget; stopped before its first query, it fails naming the cap.",
    )

    @model_validator(mode="after")
    def _check_template(self) -> Request:
        if self.content_free != "blank" and not self.calibration:
            raise ValueError("content_free applies only with calibration: true")
        custom = self.template is not None and self.template not in {*BUILTIN_TEMPLATES, "generic"}
        if self.example_format is not None and not custom:
            raise ValueError("example_format applies only to a custom template (one with {examples}/{query})")
        if custom:
            custom_template(self.template or "", self.example_format or "Input: {text}\nOutput: {label}")
            if not re.fullmatch(TEMPLATE_PATTERN, self.template or ""):
                raise ValueError(
                    "template: use {examples} and {query} only as they are (no !conversion or :format), and "
                    "no doubled braces around a placeholder's name"
                )
        if self.example_format is not None and not re.fullmatch(EXAMPLE_FORMAT_PATTERN, self.example_format):
            raise ValueError(
                "example_format: use {text} and {label} only as they are (no !conversion or :format), and "
                "no doubled braces around a placeholder's name"
            )
        return self


def label_field(request: Request) -> str | None:
    """This kind always reads the records' labels (an unlabelled dataset cannot serve it)."""
    return "$.kind"


EXAMPLE: dict = {
    "kind": "iclinf",
    "dataset": "dbpedia14",
    "model": "smollm2-135m-instruct",
    "shots": 4,
    "queries": 50,
    "output_space": "labels",
    "calibration": False,
    "seed": 0,
}


def draw_queries(
    dataset: Dataset, shots: int, queries: int, seed: int
) -> list[tuple[Example, list[Example]]]:
    """m test queries without replacement, each with k training exemplars drawn without replacement,
    fresh per query (001 §4.1), from one numpy Generator seeded by `seed`."""
    rng = np.random.default_rng(seed)
    query_ids = rng.choice(len(dataset.test), size=queries, replace=False)
    return [
        (
            dataset.test[int(q)],
            [dataset.train[int(i)] for i in rng.choice(len(dataset.train), size=shots, replace=False)],
        )
        for q in query_ids
    ]


def leave_one_out_prompts(
    template: ClassificationTemplate, exemplars: Sequence[Example], query: str
) -> list[str]:
    """The k + 1 prompts of one query: all k exemplars first, then exemplar i removed for i = 0..k−1."""
    sets = [list(exemplars)] + [[e for j, e in enumerate(exemplars) if j != i] for i in range(len(exemplars))]
    return [template.render(s, query) for s in sets]


def score(engine: LLMEngine, prompts: Sequence[str], output_space: str, words: Sequence[str]) -> np.ndarray:
    """log A(·) for each prompt: label-sequence logprobs renormalized over `words`, or the full
    next-token log-distribution. Shape (len(prompts), Y).

    All prompts go to the engine in one call, the full context first: the transformers engine runs
    it, then each leave-one-out prompt feeds only the tokens after its removed exemplar on a crop of
    the full prompt's KV cache, and each multi-token label only its own tokens after the prompt's.
    """
    if output_space == "labels":
        return renormalize(engine.label_logprobs(list(prompts), list(words)))
    dists = engine.next_token_logprobs(list(prompts), top_k="all")
    return renormalize(np.stack([d.logprobs for d in dists]))


def content_free_logprobs(
    engine: LLMEngine,
    template: ClassificationTemplate,
    exemplars: Sequence[Example],
    inputs: Sequence[str],
    output_space: str,
    words: Sequence[str],
    first_only: bool = False,
) -> np.ndarray:
    """log p_cf for the k + 1 exemplar sets of one query (or the full set only): each content-free
    input in place of the query, averaged over the inputs (`content_free_distribution`). Shape (k + 1, Y)."""
    per_input = []
    for text in inputs:
        prompts = leave_one_out_prompts(template, exemplars, text)
        per_input.append(score(engine, prompts[:1] if first_only else prompts, output_space, words))
    return content_free_distribution(np.stack(per_input))


def run(request: Request, ctx: RunContext) -> IclinfAuditResult:
    engines = ctx.engines
    if engines is None or ctx.datasets is None:
        raise AuditError("iclinf needs an engine and a dataset provider")
    dataset = ctx.datasets.load(request.dataset)
    if dataset.task != "classification" or len(dataset.labels) < 2:
        raise AuditError(f"dataset {request.dataset!r} is not a classification dataset with ≥ 2 labels")
    if len(dataset.train) < request.shots:
        raise AuditError(f"shots={request.shots} exceeds the {len(dataset.train)} training examples")
    if len(dataset.test) < request.queries:
        raise AuditError(f"queries={request.queries} exceeds the {len(dataset.test)} test examples")
    template = resolve_template(request.template, request.dataset, dataset.labels, request.example_format)
    words = template.words(dataset.labels)
    label_index = {label: i for i, label in enumerate(dataset.labels)}
    ctx, meter = with_budget(ctx, request.budget)
    raw_engine = engines.llm(request.model)
    passes_before = raw_engine.counters.forward_passes
    engine = MeteredEngine(raw_engine, meter) if request.budget is not None else raw_engine

    k, m = request.shots, request.queries
    inputs = CONTENT_FREE_INPUTS[request.content_free]
    losses = np.empty((m, k))
    correct = done = 0
    stop: BudgetExhausted | None = None
    try:
        for j, (query, exemplars) in enumerate(draw_queries(dataset, k, m, request.seed)):
            prompts = leave_one_out_prompts(template, exemplars, query.text)
            logp = score(engine, prompts, request.output_space, words)
            if request.calibration:
                logp = calibrate(
                    logp,
                    content_free_logprobs(engine, template, exemplars, inputs, request.output_space, words),
                )
            losses[j] = leave_one_out_losses(logp[0], logp[1:])
            if request.output_space == "labels":
                label_logp = logp[0]
            else:
                label_logp = score(engine, prompts[:1], "labels", words)[0]
                if request.calibration:
                    cf = content_free_logprobs(
                        engine, template, exemplars, inputs, "labels", words, first_only=True
                    )
                    label_logp = calibrate(label_logp, cf[0])
            correct += int(np.argmax(label_logp)) == label_index.get(query.label or "", -1)
            done = j + 1
            ctx.progress("iclinf", (j + 1) / m, f"query {j + 1}/{m}")
    except BudgetExhausted as exc:  # a cap: keep the queries finished, a prefix of a uniform draw
        if done == 0:
            raise meter.unfinished(exc, "a query") from None
        stop = exc if done < m else None  # the report after the last query: nothing was left undone
    meter.settle()
    losses, m = losses[:done], done

    summary = summarize(losses)
    chance = 1.0 / len(dataset.labels)
    warnings = []
    if correct / m < chance:
        warnings.append(
            f"accuracy {correct / m:.3g} is below chance ({chance:.3g} = 1/{len(dataset.labels)} labels): the "
            "model does not solve this task in context, so its ICLInf says little about what it learns from "
            "the exemplars."
        )
    forward_passes = raw_engine.counters.forward_passes - passes_before
    if ctx.on_counters is not None:
        ctx.on_counters({"forward_passes": forward_passes})
    extra: dict = {}
    if stop is not None:
        extra = stopped_verdict(stop, f"{done} of {request.queries} queries")
        extra["stopped"] = stopped(stop, queries=done)
    if request.budget is not None:
        extra.update(meter.as_dict())
    if stop is not None and (
        step := budget_step(
            extra["stopped"], extra.get("spent"), done=done, needed=request.queries, unit="queries"
        )
    ):
        extra["next_steps"] = [step.as_dict()]
    return IclinfAuditResult(
        **extra,
        kind="iclinf",
        dataset=request.dataset,
        model=request.model,
        shots=k,
        queries=m,
        output_space=request.output_space,
        calibration=request.calibration,
        content_free=list(inputs) if request.calibration else None,
        template=request.template or (request.dataset if request.dataset in BUILTIN_TEMPLATES else "generic"),
        labels=list(words),
        iclinf=summary.iclinf,
        iclinf_std=summary.iclinf_std,
        per_position=list(summary.per_position),
        per_query=list(summary.per_query),
        accuracy=correct / m,
        chance_accuracy=chance,
        warnings=warnings,
        llm_forward_passes=forward_passes,
        forward_passes_per_query=forward_passes / m,
    )


if __name__ == "__main__":
    from app.audit.standalone import main

    raise SystemExit(main())
