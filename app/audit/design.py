"""Canary design: the measured canary effect (`signal`) and `attack: {"name": "auto"}`.

`signal` (every private-voting audit of one canary): the clean pool's canary effect, the probability that
the canary's partition votes the canary's answer y+ with the canary (C1) and without it (C0), at the
mechanism's decoding temperature:

    p_with = P(vote = y+ | partition k* of C1),  p_without = P(vote = y+ | partition k* of C0),

k* the one partition whose prompt differs (`valid_with`, `valid_without`: the probability that its vote is
one of the answers at all; an invalid vote casts none). 003 Lemma 3.1: an audit reaches the mechanism's own ε only
when effect = p_with − p_without = 1 (a deterministic flip, [1, T−1] against [0, T] votes); below that
the attack sees a mixture and ε_emp falls with the effect.

`auto` (docs/results/soundness.md, "Design selection"): the design (AUTO_DESIGNS) and T (AUTO_PARTITIONS,
capped by the request's) are chosen on a pilot that the measurement does not reuse:

1. records: the dataset's training rows split by index parity, odd rows for the pilot, even rows for
   the measurement (`pilot_records`, `measurement_records`): no record is in both;
2. randomness: the pilot draws its contexts and partitions from its own seed stream (`pilot`, appended
   to app/audit/seeds.py), which the measurement never reads;
3. rule: each candidate (design, T) is scored on PILOT_CONTEXTS pilot context pairs by the exact
   population μ of private voting (003 Alg. 2 with the request's σ; app/audit/stats/exact.py) summed
   over the requested threat models; the largest mean wins (the first on ties). A design the engine
   refuses (an AuditError, e.g. the simulated engine and the copy query) is skipped. With the white box
   requested, each (design, T) is scored twice from the same pilot votes, once per white-box score: 003
   §3.2's Ṽ_y+ − Ṽ_other (the design itself) and Ṽ_y+ alone (`<design>_count`,
   app/audit/attacks/count_score.py, exact μ by `exact_count_mu`). Of the two, the Neyman-Pearson score of
   the vote pattern the pilot sees wins: Ṽ_y+ − Ṽ_other when the canary moves a vote from another label
   (V_in − V_out = e_y+ − e_other, μ = √2/σ), Ṽ_y+ when the partition without the canary casts no vote
   (V_in − V_out = e_y+: μ = 1/σ against 1/(√2σ) for the difference).

   Candidates are tried in AUTO_DESIGNS order, T ascending; the first (design, T) that flips its
   partition's vote on every pilot context (effect 1 and a valid vote without the canary: 003 Lemma 3.1's
   two-count move, the most one canary can move) ends the pilot, and the best candidate so far wins: that
   saves the later candidates' forward passes, which on a CPU are most of the audit's.

Canary search (`search_canary`, the designs that plant their own canary exemplar: copy, copy_count): DP
holds for every neighbouring pair, so the auditor may pick the pair. Among the canary records
(`search_records`: the drawn one first, then records of the same split that are not in C0, at least
SEARCH_RECORDS and up to SEARCH_PAIRS (record, label) pairs in all, so more records for fewer labels: on
sst2 a copied "negative" beats SmolLM2's "positive" prior for few records: 1 of 16 in one sample) and every label y*
of the dataset, the pair (C0, C1 with the exemplar (x, y*), the query "classify x") with the largest exact
μ of the chosen score (sum over the threat models, from the exact clean label distributions of the
candidate prompts) is audited (`Search`: first at the drawn canary position, record by record, until one
flips; only if none does, the position step: the pairs whose partition already votes y* with the canary
(its vote without the canary is y* too, or none) at the other positions of C0, whose exemplar the canary
then replaces instead), its white-box score Ṽ_y+ − Ṽ_w with w the label the canary's partition votes without
the canary (the Neyman-Pearson score of the move e_y+ − e_w; the strongest other label would add the
noise of every label to it); the search ends at the first pair that flips its partition's vote (effect 1,
valid without). The search reads the model's exact clean label distributions of the candidate pairs only: no
noise, no drawn vote and no trial, so, given the pair it picks, the trials are the same i.i.d. draws of
the mechanism as for a pair fixed in advance, and the Clopper-Pearson bound holds as for any fixed pair
(soundness.md, "Design selection"; tests/audit/mia/test_mia_design.py's null runs it). The pilot runs
the same search on its own contexts, so its μ is the one the measurement's search will look for.

The measurement is then an ordinary audit of the chosen design on the even records, its threshold
chosen on the held-out split as in every audit (thresholds.Split). Soundness: the choice is a function
of the pilot alone, independent of the measurement's records and streams, so given the choice the
measurement is a fixed-design audit whose violation probability is ≤ 1 − γ, hence also unconditionally.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from app.audit.attacks.base import AttackOptions, AuditQuery
from app.audit.icl.contexts import NeighbouringContexts, build_contexts
from app.audit.runtime import AuditError
from app.audit.seeds import SeedTree
from app.datasets.types import Dataset, Example

MECHANISMS = frozenset({"private_voting"})
AUTO_DESIGNS = ("copy", "rare_token", "inquiry", "signal_text")
AUTO_PARTITIONS = (2, 4, 8)
PILOT_CONTEXTS = 2
SEARCH_RECORDS = 8  # canary records the search tries at least
SEARCH_PAIRS = 128  # (record, label) pairs it tries at the drawn position, at most (module docstring)
SEARCHED = ("copy",)  # the designs whose canary the search picks
FLIP = 1.0 - 1e-9  # an effect this large is a full flip of the canary partition's vote


def build_query(
    *, canary: Example, dataset: Dataset, spec: AttackOptions, rng: np.random.Generator
) -> AuditQuery:
    raise AuditError("attack.name: auto is resolved to a design before the audit's query is built")


def check_request(request: Any) -> None:
    if request.estimator == "exact":
        raise ValueError(
            "estimator: auto selection runs trials (bootstrap or direct), not the exact estimator"
        )
    if request.attack.canary is not None:
        raise ValueError("attack.canary: auto draws its canaries from the dataset's records")


def pilot_records(dataset: Dataset) -> Dataset:
    """The pilot's records: the odd training rows."""
    return replace(dataset, train=dataset.train[1::2])


def measurement_records(dataset: Dataset) -> Dataset:
    """The measurement's records: the even training rows (disjoint from the pilot's)."""
    return replace(dataset, train=dataset.train[0::2])


def canary_signal(
    mechanism: Any, query: AuditQuery, prompts_in: list, prompts_out: list, source: Any
) -> dict | None:
    """The clean pool's canary effect (module docstring) from the label distributions the audit already
    holds (CleanSource caches them: no forward pass is added); None for a mechanism without votes."""
    label_probs = getattr(mechanism, "label_probs", None)
    differing = [k for k, (a, b) in enumerate(zip(prompts_in, prompts_out, strict=True)) if a != b]
    if label_probs is None or len(differing) != 1:
        return None
    k = differing[0]
    p_in = label_probs([prompts_in[k]], query.answers, source)[0]
    p_out = label_probs([prompts_out[k]], query.answers, source)[0]
    with_, without = float(p_in[query.positive]), float(p_out[query.positive])
    return {
        "answer": query.answers[query.positive],
        "p_with": with_,
        "p_without": without,
        "effect": with_ - without,
        "valid_with": float(p_in.sum()),  # P(the partition's vote is one of the answers at all)
        "valid_without": float(p_out.sum()),
        "temperature": getattr(mechanism, "temperature", None),
    }


@dataclass
class Choice:
    """The pilot's choice and every candidate's pilot score."""

    attack: str
    partitions: int
    candidates: list[dict] = field(default_factory=list)
    forward_passes: int = 0

    def as_dict(self) -> dict:
        return {
            "attack": self.attack,
            "partitions": self.partitions,
            "rule": "largest mean exact μ (sum over the threat models) on the pilot, per design, T and "
            "white-box score (Ṽ_y+ − Ṽ_other, or Ṽ_y+ for a *_count attack)",
            "pilot_contexts": PILOT_CONTEXTS,
            "pilot_records": "odd training rows (the measurement uses the even ones)",
            "pilot_forward_passes": self.forward_passes,
            "candidates": self.candidates,
        }


def partition_candidates(requested: int, shots: int, n_train: int) -> list[int]:
    """T values the pilot tries: AUTO_PARTITIONS up to the request's T, and the request's T."""
    values = sorted({t for t in AUTO_PARTITIONS if t <= requested} | {requested})
    return [t for t in values if t * shots + 1 <= n_train]


def pair_mus(
    mechanism: Any, query: AuditQuery, prompts_in: list, prompts_out: list, source: Any, request: Any
) -> tuple[float, float, dict | None]:
    """(exact μ summed over the requested threat models with the Ṽ_y+ − Ṽ_other white-box score, the same
    with the Ṽ_y+ score, the canary signal) of one neighbouring pair, from its exact clean label
    distributions (no noise is drawn)."""
    from app.audit.attacks.count_score import exact_count_mu
    from app.audit.stats.exact import exact_vote_audit

    probs_in = mechanism.label_probs(prompts_in, query.answers, source)
    probs_out = mechanism.label_probs(prompts_out, query.answers, source)
    target = mechanism.binary_target(query, source)
    exact = exact_vote_audit(
        probs_in,
        probs_out,
        sigma=mechanism.std,
        target=target.positive,
        other=target.negative,
        delta=request.delta,
    )
    tm = request.attack.threat_model
    black = exact.mu_black_box if tm != "white_box" else 0.0
    mu = black + (exact.mu_white_box if tm != "black_box" else 0.0)
    count_mu = black + (
        exact_count_mu(probs_in, probs_out, sigma=mechanism.std, target=target.positive)
        if tm != "black_box"
        else 0.0
    )
    signal = canary_signal(mechanism, query, prompts_in, prompts_out, source)
    return (
        float(mu) if np.isfinite(mu) else 0.0,
        float(count_mu) if np.isfinite(count_mu) else 0.0,
        signal,
    )


def flips(signal: dict | None) -> bool:
    """Whether the canary's partition votes y+ with the canary and a valid other label without it."""
    if not signal:
        return False
    return bool(signal["effect"] >= FLIP and signal["valid_without"] >= FLIP)


def _swap(parts: list, old: Any, new: Any) -> list:
    """`parts` with the canary exemplar `old` (the object C1's partition holds) replaced by `new`."""
    return [tuple(new if e is old else e for e in part) for part in parts]


def search_records(
    dataset: Dataset, contexts: NeighbouringContexts, rng: np.random.Generator
) -> list[Example]:
    """The canary records the search tries, in order: the drawn canary, SEARCH_RECORDS − 1 records of the
    split not in C0, then more such records up to SEARCH_PAIRS (record, label) pairs in all (more records
    for a dataset with fewer labels; no record twice). The first SEARCH_RECORDS do not depend on how many
    follow, so a search that flips among them picks the same pair whatever the budget."""
    in_c0 = {e.text for e in contexts.without}
    others = [e for e in dataset.train if e.text not in in_c0 and e.text != contexts.canary.text]
    first = [
        int(i) for i in rng.choice(len(others), size=min(SEARCH_RECORDS - 1, len(others)), replace=False)
    ]
    size = min(max(SEARCH_RECORDS, SEARCH_PAIRS // max(len(dataset.labels), 1)) - 1, len(others))
    drawn = set(first)
    rest = [int(i) for i in rng.permutation(len(others)) if int(i) not in drawn][: size - len(first)]
    return [contexts.canary, *(others[i] for i in first + rest)]


Candidate = tuple[float, Any, dict | None]  # (μ of the request's score, what to audit, its canary signal)


@dataclass
class Search:
    """The search order of the module docstring over (record, label, position) triples, given `evaluate`
    (None where no partition holds the position); the largest μ wins, the first on ties."""

    records: Sequence[Any]
    labels: Sequence[str]
    drawn: int
    positions: Sequence[int]  # the other positions of C0, in order
    best: Candidate | None = None
    groups: int = 0  # (record, position) groups tried
    pairs: int = 0  # (record, label, position) triples scored

    def run(self, evaluate: Any) -> Candidate | None:
        takes: list[tuple[Any, list[str]]] = []  # labels whose partition votes y+ with the canary at `drawn`
        for record in self.records:
            scored = self._group(evaluate, record, self.labels, self.drawn)
            took = [label for label, (_, _, signal) in scored if signal and signal["p_with"] >= FLIP]
            if took:
                takes.append((record, took))
            if flips(self.best[2] if self.best else None):
                return self.best
        # the position step: only a pair whose partition already votes y+ with the canary (but y+, or
        # nothing, without it too) can flip by replacing another exemplar of C0 instead
        for position in self.positions:
            for record, labels in takes:
                self._group(evaluate, record, labels, position)
                if flips(self.best[2] if self.best else None):
                    return self.best
        return self.best

    def _group(self, evaluate: Any, record: Any, labels: Sequence[str], position: int) -> list:
        scored: list[tuple[str, Candidate]] = []
        for label in labels:
            candidate = evaluate(record, label, position)
            if candidate is None:  # no partition holds this position
                break
            if not scored:
                self.groups += 1
            self.pairs += 1
            scored.append((label, candidate))
            if self.best is None or candidate[0] > self.best[0]:
                self.best = candidate
        return scored


def search_canary(
    *,
    request: Any,
    module: Any,
    mechanism: Any,
    dataset: Dataset,
    contexts: NeighbouringContexts,
    parts_in: list,
    parts_out: list,
    source: Any,
    rng: np.random.Generator,
) -> tuple[NeighbouringContexts, list, AuditQuery, dict]:
    """The canary search of the module docstring: (contexts, C1's partitions, query, what it tried) of the
    pair with the largest exact μ of the request's white-box score among the canary records and labels."""
    count = request.attack.name.endswith("_count")
    drawn = contexts.canary_position

    def evaluate(record: Example, label: str, position: int) -> Candidate | None:
        base = replace(contexts, with_canary=contexts.without, canary_position=position)
        pair = planted(base, replace(record, label=label))
        parts = _swap(parts_out, contexts.without[position], pair.canary)
        differ = [k for k, (a, b) in enumerate(zip(parts, parts_out, strict=True)) if a != b]
        if len(differ) != 1:  # no partition holds this position (disjoint-Poisson partitions)
            return None
        query = module.build_query(canary=pair.canary, dataset=dataset, spec=request.attack, rng=rng)
        prompts_out = mechanism.audit_inputs(query, parts_out)
        # the white box compares y+ with the label the canary's partition votes without the canary
        # (the Neyman-Pearson score of the move e_y+ − e_w)
        p_out = mechanism.label_probs([prompts_out[differ[0]]], query.answers, source)[0].copy()
        p_out[query.positive] = -1.0
        query = replace(query, negative=int(np.argmax(p_out)))
        mu, count_mu, signal = pair_mus(
            mechanism, query, mechanism.audit_inputs(query, parts), prompts_out, source, request
        )
        return (count_mu if count else mu), (pair, parts, query), signal

    search = Search(
        records=search_records(dataset, contexts, rng),
        labels=dataset.labels,
        drawn=drawn,
        positions=[j for j in range(len(contexts.without)) if j != drawn],
    )
    best = search.run(evaluate)
    if best is None:
        raise AuditError("attack.name: the canary search found no position a partition holds")
    value, (pair, parts, query), signal = best
    report = {
        "records_tried": search.groups,
        "pairs_tried": search.pairs,
        "label": pair.canary.label,  # the record's text is the result's `canary`, masked where shared
        "position": pair.canary_position,
        "position_moved": pair.canary_position != drawn,
        "mu": value,
        "effect": signal["effect"] if signal else None,
    }
    return pair, parts, query, report


def planted(contexts: NeighbouringContexts, canary: Example) -> NeighbouringContexts:
    """The pair with `canary` at the canary's position of C1 (C0 unchanged: still neighbouring)."""
    at = contexts.canary_position
    with_canary = (*contexts.with_canary[:at], canary, *contexts.with_canary[at + 1 :])
    return replace(contexts, with_canary=with_canary, canary=canary)


def _pilot_score(
    request: Any, design: str, partitions: int, dataset: Dataset, llm: Any, seeds: SeedTree
) -> tuple[float, float, float, bool]:
    """(mean exact μ summed over the threat models with the Ṽ_y+ − Ṽ_other white-box score, the same with
    the Ṽ_y+ score, mean canary effect, whether every pilot context flips) of one candidate on the pilot;
    a design that plants its canary is scored after the canary search, as the measurement will run it."""
    from app.audit.attacks.registry import attack_module
    from app.audit.mechanisms.base import CleanSource
    from app.audit.mechanisms.registry import build_mechanism

    spec = request.attack.model_copy(update={"name": design})
    mech_spec = request.mechanism.model_copy(update={"partitions": partitions})
    module = attack_module(design)
    rng = seeds.rng("pilot")  # every candidate starts from the same pilot state
    mus, count_mus, effects, flipped = [], [], [], []
    for _ in range(PILOT_CONTEXTS):
        mechanism = build_mechanism(mech_spec, epsilon=request.epsilon, delta=request.delta)
        contexts = build_contexts(dataset, mechanism.context_size(mech_spec), rng, None)
        if hasattr(module, "plant"):
            contexts = module.plant(contexts, dataset, spec, rng)
        query = module.build_query(canary=contexts.canary, dataset=dataset, spec=spec, rng=rng)
        parts_in, parts_out = mechanism.partition(contexts, rng)
        source = CleanSource(llm, None, seed=seeds.integer("pilot"))
        if searches(request.model_copy(update={"attack": spec})):
            for white_box_score in (design, f"{design}_count"):
                scored = request.model_copy(
                    update={"attack": spec.model_copy(update={"name": white_box_score})}
                )
                _, parts, found, _ = search_canary(
                    request=scored,
                    module=module,
                    mechanism=mechanism,
                    dataset=dataset,
                    contexts=contexts,
                    parts_in=parts_in,
                    parts_out=parts_out,
                    source=source,
                    rng=np.random.default_rng(seeds.integer("pilot")),
                )
                result = pair_mus(
                    mechanism,
                    found,
                    mechanism.audit_inputs(found, parts),
                    mechanism.audit_inputs(found, parts_out),
                    source,
                    request,
                )
                if white_box_score == design:
                    mu, signal = result[0], result[2]
                else:
                    count_mu = result[1]
        else:
            mu, count_mu, signal = pair_mus(
                mechanism,
                query,
                mechanism.audit_inputs(query, parts_in),
                mechanism.audit_inputs(query, parts_out),
                source,
                request,
            )
        mus.append(mu)
        count_mus.append(count_mu)
        effects.append(signal["effect"] if signal else 0.0)
        flipped.append(flips(signal))
    return float(np.mean(mus)), float(np.mean(count_mus)), float(np.mean(effects)), all(flipped)


def searches(request: Any) -> bool:
    """Whether the canary search runs for the request's attack: a copy canary (SEARCHED, either white-box
    score) asked of private voting, whose exact clean label distributions the search reads."""
    from app.audit.attacks.count_score import SUFFIX

    name = request.attack.name
    return name.removesuffix(SUFFIX) in SEARCHED and request.mechanism.name == "private_voting"


def choose(
    request: Any, dataset: Dataset, llm: Any, seeds: SeedTree, designs: Sequence[str] = AUTO_DESIGNS
) -> Choice:
    """The pilot's (design, T): see the module docstring."""
    from app.audit.attacks.count_score import SUFFIX
    from app.audit.attacks.registry import ATTACKS, attack_module

    pilot = pilot_records(dataset)
    passes_before = llm.counters.forward_passes
    best: tuple[float, str, int] | None = None
    candidates = []
    for design in designs:
        if request.mechanism.name not in attack_module(design).MECHANISMS:
            continue
        for t in partition_candidates(
            request.mechanism.partitions, request.mechanism.shots_per_partition, len(pilot.train)
        ):
            try:
                mu, count_mu, effect, flipped = _pilot_score(request, design, t, pilot, llm, seeds)
            except AuditError as exc:  # the design cannot run here (e.g. the engine refuses its query)
                candidates.append({"attack": design, "partitions": t, "skipped": str(exc)[:200]})
                break
            scored = [(design, mu)]
            if request.attack.threat_model != "black_box" and f"{design}{SUFFIX}" in ATTACKS:
                scored.append((f"{design}{SUFFIX}", count_mu))  # the same votes, the Ṽ_y+ score
            for name, value in scored:
                candidates.append(
                    {"attack": name, "partitions": t, "pilot_mu": value, "pilot_effect": effect}
                )
                if best is None or value > best[0]:
                    best = (value, name, t)
            if flipped and best is not None:  # every pilot context flips: nothing moves more (docstring)
                return Choice(best[1], best[2], candidates, llm.counters.forward_passes - passes_before)
    if best is None:
        raise AuditError("attack.name: auto found no design this model and dataset can run")
    return Choice(best[1], best[2], candidates, llm.counters.forward_passes - passes_before)
