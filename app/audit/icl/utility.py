"""Utility of the audited mechanism on held-out queries, private vs zero-shot (003 Figs. 12, 21; 002 Fig. 4).

Classification (vote mechanisms): accuracy of the released label with the C0 partitions as context
(003 Prompt 4), its teachers answering as the audited ones do (`mechanism.teacher_output`), against the
zero-shot prompt's most likely label. Generation (ESA): ROUGE-1 / ROUGE-L
F1 (rouge-score) of the released candidate against the reference summary, against a zero-shot
generation. Each query is one mechanism call, seeded.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from app.audit.attacks.base import AuditQuery
from app.audit.icl.prompts import MISLABEL, SUMMARIZE
from app.audit.mechanisms.base import CleanSource, Mechanism
from app.audit.mechanisms.esa import ESA
from app.audit.runtime import AuditError
from app.datasets.types import Dataset, Example


def utility(
    mechanism: Mechanism,
    dataset: Dataset,
    partitions: Sequence[tuple[Example, ...]],
    source: CleanSource,
    n_queries: int,
    rng: np.random.Generator,
) -> dict:
    """{metric: {"private": …, "zero_shot": …}, "queries": n} or {"skipped": reason}."""
    queries = dataset.test[:n_queries]
    if not queries:
        return {"skipped": f"dataset {dataset.name!r} has no test rows"}
    if not mechanism.needs_llm:
        return {"skipped": "a deployed endpoint's utility is not measured by the audit"}
    if mechanism.name == "ksa":
        return {"skipped": "KSA releases keywords, not an answer to score"}
    try:
        if isinstance(mechanism, ESA):
            return _generation_utility(mechanism, partitions, source, queries, rng)
        return _classification_utility(mechanism, dataset, partitions, source, queries, rng)
    except AuditError as exc:  # e.g. the oracle answers audit queries only
        return {"skipped": str(exc)}


def _classification_utility(mechanism, dataset, partitions, source, queries, rng) -> dict:
    if dataset.task != "classification":
        raise AuditError("vote mechanisms need a classification dataset for utility")
    labels = tuple(dataset.labels)
    private = zero_shot = 0
    for example in queries:
        query = AuditQuery(MISLABEL, labels, fields={"labels": ", ".join(labels), "canary": example.text})
        prompts = mechanism.audit_inputs(query, partitions)
        clean = mechanism.collect(prompts, labels, source, 1, rng)
        released = int(mechanism.release(clean, rng).answer[0])
        private += released >= 0 and labels[released] == example.label
        zero = source.label_logprobs(mechanism.audit_inputs(query, [()]), labels)[0]
        zero_shot += labels[int(np.argmax(zero))] == example.label
    n = len(queries)
    return {"accuracy": {"private": private / n, "zero_shot": zero_shot / n}, "queries": n}


def _generation_utility(mechanism: ESA, partitions, source, queries, rng) -> dict:
    from rouge_score import rouge_scorer

    scorer = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
    totals = {"private": np.zeros(2), "zero_shot": np.zeros(2)}
    for example in queries:
        if example.summary is None:
            raise AuditError("generation utility needs rows with a summary")
        query = AuditQuery(SUMMARIZE, (), fields={"canary": example.text})
        mechanism.prepare(query, source)
        prompts = mechanism.audit_inputs(query, partitions)
        clean = mechanism.collect(prompts, (), source, 1, rng)
        released = mechanism.candidate_texts[int(mechanism.release(clean, rng).answer[0])]
        for key, text in (("private", released), ("zero_shot", mechanism.candidate_texts[0])):
            s = scorer.score(example.summary, text)
            totals[key] += [s["rouge1"].fmeasure, s["rougeL"].fmeasure]
    n = len(queries)
    return {
        "rouge1": {k: float(v[0] / n) for k, v in totals.items()},
        "rougeL": {k: float(v[1] / n) for k, v in totals.items()},
        "queries": n,
    }
