"""What the attacks over several canaries share (the likelihood attack, attacks/likelihood.py, and the
generated-text audits, attacks/released_text.py): a record's neighbouring contexts, the record's split into
prefix and continuation, the engine-cost counter, TPR at low FPR, and the bounded result with its
per-record table. One module each side imports, so the attacks import no one another.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from app.audit.icl.contexts import NeighbouringContexts
from app.audit.mechanisms.base import Mechanism
from app.audit.mechanisms.plain import PlainICL
from app.audit.runtime import AuditError, RunContext
from app.audit.seeds import SeedTree
from app.audit.stats.auditor import Auditor
from app.datasets.types import Example
from app.engines.protocol import Prompt


def split_canary(text: str) -> tuple[str, str]:
    """(prefix, continuation): the first ⌊n/2⌋ words of the canary and the rest, whitespace normalized."""
    words = text.split()
    if len(words) < 2:
        raise AuditError("attack repeat: the canary needs at least two words (a prefix and its continuation)")
    cut = len(words) // 2
    return " ".join(words[:cut]), " ".join(words[cut:])


@dataclass
class Cost:
    """Engine work beside the from-scratch count: every scored (prompt, answer) sequence its own pass
    over all of its tokens (a single-token answer set shares the prompt's pass)."""

    forward_passes: int = 0
    prompt_tokens: int = 0
    scratch_forward_passes: int = 0
    scratch_tokens: int = 0
    sequences: set = field(default_factory=set)

    def count(self, llm: Any, prompts: Sequence[Prompt], answers: Sequence[str]) -> None:
        format_ids, encode = getattr(llm, "format_ids", None), getattr(llm, "encode", None)
        for p in prompts:
            if (p, tuple(answers)) in self.sequences:
                continue
            self.sequences.add((p, tuple(answers)))
            lengths = [len(encode(a)) for a in answers] if encode else [1] * len(answers)
            n = len(format_ids(p)) if format_ids else 0
            multi = [k for k in lengths if k > 1]
            single = len(multi) < len(lengths)
            self.scratch_forward_passes += int(single) + len(multi)
            self.scratch_tokens += n * int(single) + sum(n + k - 1 for k in multi)

    def as_dict(self) -> dict:
        reuse = 1 - self.prompt_tokens / self.scratch_tokens if self.scratch_tokens else None
        return {
            "forward_passes": self.forward_passes,
            "prompt_tokens": self.prompt_tokens,
            "from_scratch_forward_passes": self.scratch_forward_passes,
            "from_scratch_tokens": self.scratch_tokens or None,
            "tokens_saved": reuse,
        }


def record_contexts(
    train: Sequence[Example], pool: np.ndarray, canary: Example, n: int, rng: np.random.Generator
) -> NeighbouringContexts:
    """A neighbouring pair for one record: C0 = n exemplars drawn from `pool`, C1 = C0 with a uniformly
    placed exemplar replaced by the record."""
    chosen = rng.choice(pool, size=n, replace=False)
    without = tuple(train[int(i)] for i in chosen)
    position = int(rng.integers(n))
    return NeighbouringContexts(
        without, (*without[:position], canary, *without[position + 1 :]), canary, position
    )


def tpr_at(scores_in: np.ndarray, scores_out: np.ndarray, fprs: Sequence[float] = (1e-3, 1e-2)) -> dict:
    """TPR at FPR = each of `fprs` (threshold = the C0 scores' (1 − FPR) quantile, strictly above), the
    low-FPR operating points the membership-inference literature reports (Carlini et al. 2022). None
    when there are fewer than 1/FPR C0 trials (the point is not resolved)."""
    out: dict[str, float | None] = {}
    for fpr in fprs:
        if scores_out.size < 1 / fpr:
            out[f"{fpr:g}"] = None
            continue
        threshold = np.quantile(scores_out, 1 - fpr, method="higher")
        out[f"{fpr:g}"] = float(np.mean(scores_in > threshold))
    return out


def bounded_result(request: Any, ctx: RunContext, mechanism: Mechanism, trials: Any, seeds: SeedTree) -> dict:
    """Both bounds per threat model of multi-canary trials (`scores_*` white box, `decisions_*` black
    box, which may be a continuous score of the released output) → verdict, + the per-record table.
    Shared by the likelihood attack and the generated-text attacks (attacks/released_text.py)."""
    from app.audit.attacks.evidence import several_canaries
    from app.audit.stats.records import record_table

    theory = mechanism.theory
    auditor = Auditor.for_request(
        request,
        gaussian=mechanism.gaussian,
        claimed=theory.epsilon if theory is not None else None,
        seeds=seeds,
    )
    models = auditor.threat_models
    result: dict = {"estimator": "direct"}
    for i, name in enumerate(models):
        ctx.progress("bound", 0.9 + 0.05 * i / len(models), f"{name} lower bound")
        if name == "black_box":
            s_in, s_out = trials.decisions_in.astype(float), trials.decisions_out.astype(float)
        else:
            s_in, s_out = trials.scores_in, trials.scores_out
        result[name] = auditor.bound(s_in, s_out) | {"tpr_at_fpr": tpr_at(s_in, s_out)}
    if theory is not None:
        result.update(theory.as_dict())
    else:
        result.update(epsilon_theory=None, mu_theory=None, epsilon_ceiling=None)
    result["violation"] = any(result[m]["violation"] for m in models)
    result["assumption"] = auditor.assumption
    result["confidence"] = {"stated": request.confidence, **auditor.confidence_split}
    result["theory_violation"] = result.get("calibration_valid") is False
    result["llm_forward_passes"] = trials.cost.forward_passes
    result["distinct_prompts"] = trials.distinct_prompts
    result["llm_calls"] = request.llm_calls if not isinstance(mechanism, PlainICL) else 1
    result["trials"] = int(trials.scores_in.size)
    result["canary"] = None
    result["mechanism"] = {
        "name": request.mechanism.name,
        "partitions": mechanism.n_partitions,
        "bug": None,
        "gaussian": mechanism.gaussian,
        "canary_included": mechanism.canary_included,  # every record in a partition of each of its pairs
    }
    result["utility"] = None
    white = "white_box" in models
    scores_in = trials.scores_in if white else trials.decisions_in.astype(float)
    scores_out = trials.scores_out if white else trials.decisions_out.astype(float)
    result["records"] = record_table(
        trials.records,
        scores_in,
        scores_out,
        trials.record,
        confidence=request.confidence,
        delta=request.delta,
        assumption=auditor.assumption,
    )
    result["evidence"] = several_canaries(result["records"], trials.records, trials)
    if ctx.on_counters is not None:
        ctx.on_counters(ctx.engines.llm(request.model or "oracle").counters.as_dict())  # type: ignore[union-attr]
    ctx.progress("bound", 1.0, "done")
    return result
