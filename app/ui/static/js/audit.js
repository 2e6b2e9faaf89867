// Audit page: the verdict's headline at the top (a badge: red for violation or leak, amber for inconclusive,
// green for consistent) with the result's next steps under it, the request, live progress, the result (every
// other ε figure under Details, one line each on what it is), tables and interactive charts, downloads (JSON,
// CSV, PNG), and how to reproduce it (iclaudit submit, curl).
import {
  api, ApiError, claimedEpsilon, compact, datasetName, download, el, fill, flatten, fmt, initPage, outcomeBadge, progressBar, soft, stateBadge,
  TERMINAL, toCsv, verdictBadge, verdictOf, watch, when,
} from "./api.js";
import { barChart, lineChart, rocChart, seriesBars } from "./charts.js";

const main = initPage();
const id = document.body.dataset.audit;
const path = `/v1/audits/${encodeURIComponent(id)}`;
const THREATS = { black_box: "black-box", white_box: "white-box" };

const heading = el("h1", {}, "Audit ", el("span", { class: "mono" }, id));
const verdictPanel = el("section", { class: "headline", id: "verdict", "aria-label": "Verdict", hidden: true });
const summary = el("dl", { class: "kv", id: "summary" });
const progressHolder = el("div", { id: "progress" });
const live = el("p", { class: "muted", "aria-live": "polite", id: "live" });
const actions = el("div", { class: "actions", id: "actions" });
const errorBox = el("div", { id: "error" });
const resultBox = el("section", { id: "result", "aria-labelledby": "result-h" });
const requestBox = el("section", { id: "request", "aria-labelledby": "request-h" });
main.append(heading, verdictPanel, el("div", { class: "panel" }, summary, progressHolder, live), actions, errorBox, resultBox, requestBox);

let bar = null;
let resultShown = false;

/** A table with row labels; the columns in `narrow` are hidden below 720 px so the others stay on screen. */
function table(caption, head, body, id, { narrow = [] } = {}) {
  const cls = (i, base) => [base, narrow.includes(i) ? "hide-narrow" : null].filter(Boolean).join(" ") || null;
  return el("div", { class: "table-wrap" }, el("table", { id },
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { scope: "col", class: cls(i, i ? "num" : null) }, h)))),
    el("tbody", {}, body.map((r) => el("tr", {}, r.map((c, i) => {
      const text = typeof c === "string" ? soft(c) : c; // a dotted field name wraps at its dots, never inside a word
      return i ? el("td", { class: cls(i, "num") }, text) : el("th", { scope: "row" }, text);
    }))))));
}

function kv(pairs) {
  return el("dl", { class: "kv" }, pairs.filter(([, v]) => v !== undefined).flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v instanceof Node ? v : fmt(v))]));
}

function renderSummary(a) {
  const r = a.request || {};
  summary.replaceChildren(...kv([
    ["Kind", a.kind],
    ["State", stateBadge(a.state)],
    ["Verdict", verdictBadge(a)],
    ["Dataset", datasetName(r.dataset)],
    ["Model", r.model ?? "—"],
    ["Mechanism", r.mechanism ? r.mechanism.name : "—"],
    ["ε claimed", claimedEpsilon(a) ?? "none"],
    ["Created", when(a.created_at)],
    ["Started", when(a.started_at)],
    ["Finished", when(a.finished_at)],
    ["Attempt", a.attempt],
  ]).childNodes);
  if (!bar) progressHolder.append((bar = progressBar(a)));
  bar.update(a);
  live.textContent = TERMINAL.includes(a.state) ? `The audit ${a.state.toLowerCase()}.` : "Updating live.";
  const active = !TERMINAL.includes(a.state);
  let cancel = actions.querySelector("#cancel");
  if (active && !cancel) {
    cancel = el("button", { type: "button", id: "cancel", class: "danger" }, "Cancel audit");
    cancel.addEventListener("click", async () => {
      cancel.disabled = true;
      try {
        await api(`${path}/cancel`, { method: "POST" });
        live.textContent = "Cancel requested; a running audit stops at its next batch.";
      } catch (error) {
        live.textContent = error.message;
        cancel.disabled = false;
      }
    });
    actions.prepend(cancel);
  } else if (!active && cancel) cancel.remove();
  if (cancel && a.cancel_requested) cancel.disabled = true;
  if (a.error) {
    errorBox.replaceChildren(el("div", { class: "alert", role: "alert" }, el("strong", {}, `${a.state}: `), a.error.message));
  }
}

/**
 * The request, folded under the result: its fields without the nulls (defaults left out, the same request), a
 * download, and how to submit it again with the CLI or curl.
 */
function renderRequest(a) {
  const body = JSON.stringify(compact(a.request), null, 2);
  const origin = location.origin;
  const auth = document.querySelector("#who button") ? " -H \"Authorization: Bearer $ICLAUDIT_API_KEY\"" : "";
  const curl = `curl -s -X POST ${origin}/v1/audits${auth} -H 'Content-Type: application/json' -d @request.json`;
  const cli = `iclaudit submit request.json --watch --url ${origin}`;
  requestBox.replaceChildren(
    el("h2", { id: "request-h" }, "Request and how to reproduce it"),
    el("p", {}, "The request is seeded: submitting it again gives the same result."),
    el("details", { id: "request-fold" }, el("summary", {}, "The request (JSON; fields left at their default are not shown)"),
      el("pre", { class: "block", id: "request-json" }, body)),
    el("div", { class: "actions" },
      el("button", { type: "button", onclick: () => download("request.json", body + "\n", "application/json") }, "Download request.json"),
      el("a", { class: "button", href: `/ui/submit?from=${encodeURIComponent(a.id)}` }, "Edit as a new audit")),
    el("h3", {}, "With the CLI (the request saved as request.json)"),
    el("pre", { class: "block", id: "reproduce-cli" }, cli),
    el("h3", {}, "With curl"),
    el("pre", { class: "block", id: "reproduce-curl" }, curl),
  );
}

function warnings(result) {
  const list = [].concat(result.warnings || [], result.warning ? [result.warning] : []);
  return list.map((w) => el("p", { class: "warning", role: "note" }, typeof w === "string" ? w : w.message || JSON.stringify(w)));
}

const ASSUMPTION = { gdp: "Gaussian-DP", none: "assumption-free" };
const isNum = (v) => typeof v === "number" && Number.isFinite(v);

/** The verdict's headline, badge and reason at the top of the page (neutral for a kind without a verdict). */
function renderVerdict(a) {
  const res = a.result || {};
  const outcome = verdictOf(a);
  const headline = res.headline || (outcome ? `Verdict: ${outcome}` : `No verdict: a ${a.kind} audit measures no ε lower bound to judge a claim by.`);
  verdictPanel.dataset.verdict = outcome || "none";
  // The reason goes under the headline, unless the headline already says it word for word (inconclusive's does).
  const reason = res.verdict_reason && !headline.includes(res.verdict_reason) ? res.verdict_reason : null;
  // The headline's second line: what would make the audit answer (the result's computed next steps).
  const steps = (Array.isArray(res.next_steps) ? res.next_steps : []).filter((s) => s && typeof s.text === "string");
  fill(verdictPanel,
    el("p", {}, outcomeBadge(outcome, { id: "verdict-badge" }), " ", el("span", { class: "headline-text", id: "headline" }, headline)),
    steps.length ? el("ul", { class: "next-steps", id: "next-steps", "aria-label": "Next steps" },
      steps.map((s, i) => el("li", { "data-set": s.set ? JSON.stringify(s.set) : null }, i === 0 ? "Next: " : "Or: ", s.text))) : null,
    reason ? el("p", { class: "why", id: "verdict-reason" }, "Why: ", reason) : null,
    chainLine(a),
  );
  verdictPanel.hidden = false;
}

/** An `until_answer` chain: the audit that takes this one's next step, or the one whose step this is. */
function chainLine(a) {
  const link = (id, elId) => el("a", { href: `/ui/audits/${encodeURIComponent(id)}`, class: "mono", id: elId, title: id }, id.slice(0, 8));
  return [
    a.follows ? el("p", { class: "chain" }, "This audit is the next step of audit ", link(a.follows, "follows"), ".") : null,
    a.followed_by ? el("p", { class: "chain" }, "The service took its next step as audit ", link(a.followed_by, "followed-by"), ".") : null,
  ];
}

/** One line of Details: the value, what it is, and whether the verdict used it. */
function detail(key, value, name, what, { used = false, unbounded = false } = {}) {
  return el("li", { "data-figure": key, "data-used": used ? "true" : null },
    el("span", { class: "value" }, fmt(value, { unbounded })), el("span", { class: "name" }, name),
    what ? [" — ", el("span", { class: "what" }, what)] : null);
}

/** The claim (or, without one, max_epsilon) and the audit's power: what the verdict compared its bound with. */
function claimFigures(res, claimed) {
  const out = [];
  if (isNum(claimed)) out.push(detail("claimed", claimed, "ε claimed", "what the system promises; a lower bound above it is a violation"));
  else out.push(detail("max_epsilon", res.max_epsilon ?? 0, "max_epsilon (nothing is claimed)", "the leakage allowed without a claim; a lower bound above it is a leak"));
  if (isNum(res.epsilon_detectable) || res.epsilon_detectable_unbounded) {
    out.push(detail("detectable", res.epsilon_detectable, "ε detectable",
      res.epsilon_detectable_unbounded ? "no true ε up to 100 would be flagged with probability ≥ 0.8: the audit could not see a leak"
        : "this audit's power: the smallest true ε it flags with probability ≥ 0.8 (consistent needs it ≤ 1.5 × the claim)",
      { unbounded: !!res.epsilon_detectable_unbounded }));
  }
  return out;
}

/** Details lines of one membership test's bounds: the one the verdict used first, the others said for what they are. */
function testFigures(prefix, label, b, confidence) {
  const assumption = b.assumption || "gdp";
  const conf = isNum(confidence) ? ` at ${fmt(100 * confidence)} % confidence` : "";
  const lower = b.epsilon_lower !== undefined ? b.epsilon_lower : assumption === "none" ? b.epsilon_empirical_assumption_free : b.epsilon_empirical;
  const lowerUnbounded = assumption === "gdp" ? !!b.epsilon_empirical_unbounded : !!b.epsilon_lower_unbounded;
  const out = [detail(`${prefix}lower`, lower, `${label}ε lower bound, ${ASSUMPTION[assumption] || assumption}`,
    `the bound the verdict used: the system leaks at least this much${conf}` + (b.biased ? " (threshold chosen in-sample: optimistic)" : ""),
    { used: true, unbounded: lowerUnbounded })];
  if (assumption === "none") {
    out.push(detail(`${prefix}gdp`, b.epsilon_empirical, `${label}ε empirical, Gaussian-DP`,
      "the same test read through the Gaussian trade-off curve: valid only for Gaussian noise, which is not assumed here — not used by the verdict",
      { unbounded: !!b.epsilon_empirical_unbounded }));
  } else if (b.epsilon_empirical_assumption_free !== undefined) {
    out.push(detail(`${prefix}free`, b.epsilon_empirical_assumption_free, `${label}ε empirical, assumption-free`,
      "holds for any mechanism, not only Gaussian ones; usually lower — not used by the verdict, which relies on the mechanism's Gaussian noise"));
  }
  if (b.epsilon_point !== undefined || b.epsilon_point_unbounded) {
    out.push(detail(`${prefix}point`, b.epsilon_point, `${label}ε point estimate`,
      "log(TPR/FPR) of the observed test: no confidence margin and no δ — not a bound", { unbounded: !!b.epsilon_point_unbounded }));
  }
  return out;
}

/**
 * Why the exact ε of the calibrated noise (the ceiling) sits below a measured bound, in one line; null when it
 * does not. The ceiling is the most any attack can show against the noise the claim was calibrated with, so a
 * bound above it means either the release is not that noise (the verdict's own bound is above it) or the
 * figure above it is a Gaussian-DP reading the verdict did not use (it overstates ε for a non-Gaussian release).
 */
function ceilingNote(res, tms) {
  const ceiling = isNum(res.epsilon_ceiling) ? res.epsilon_ceiling : res.epsilon_exact_at_delta;
  if (!isNum(ceiling)) return null;
  const classic = isNum(res.epsilon_theory) && ceiling < res.epsilon_theory - 1e-9
    ? ` (${res.calibration === "classic" ? "classic calibration is conservative, so it is" : "it is"} below the claimed ${fmt(res.epsilon_theory)})`
    : "";
  const used = tms.map((t) => [t, res[t].epsilon_lower]).filter(([, v]) => isNum(v) && v > ceiling + 1e-9);
  if (used.length) {
    const [t, v] = used.reduce((x, y) => (y[1] > x[1] ? y : x));
    const mech = res.mechanism || {};
    const cause = mech.bug ? `the planted bug ${mech.bug} changes the noise the system releases`
      : "the system does not release the noise the claim was calibrated with (a bug, or another mechanism than the one claimed)";
    return `Why the measured ε ≥ ${fmt(v)} (${THREATS[t]}) is above the calibrated noise's exact ε = ${fmt(ceiling)}${classic}: ` +
      `no attack can show more than that against the calibrated noise, so ${cause}.`;
  }
  for (const t of tms) {
    const b = res[t];
    if ((b.assumption || res.assumption) === "none" && isNum(b.epsilon_empirical) && b.epsilon_empirical > ceiling + 1e-9) {
      return `Why ${THREATS[t]} ε empirical (Gaussian-DP) = ${fmt(b.epsilon_empirical)} is above the calibrated noise's exact ε = ${fmt(ceiling)}${classic}: ` +
        `it reads the test through the Gaussian trade-off curve, which can overstate ε for a release that is not Gaussian; ` +
        `the verdict used the assumption-free bound ${fmt(b.epsilon_lower)}, which is not above it.`;
    }
  }
  return null;
}

function detailsSection(figures, note) {
  return el("section", { id: "details", "aria-labelledby": "details-h" },
    el("h3", { id: "details-h" }, "Details"),
    el("p", { class: "muted" }, "Every ε figure of the result, one line each on what it is; the verdict's is first and marked."),
    note ? el("p", { class: "note-line", id: "ceiling-note", role: "note" }, note) : null,
    el("ul", { class: "figures", id: "figures" }, figures));
}

/** The non-ε statistics of one test (the ε figures are under Details). */
function testRows(b, threshold, thresholdName) {
  const lower = b.epsilon_lower;
  return [
    ["TPR", fmt(b.tpr)], ["FPR", fmt(b.fpr)], ["AUC", fmt(b.auc)], ["accuracy", fmt(b.accuracy)],
    ["μ lower bound (Gaussian-DP)", fmt(b.mu_lower)],
    ["ε lower bound the verdict used", fmt(lower, { unbounded: b.epsilon_lower_unbounded || (b.assumption === "gdp" && b.epsilon_empirical_unbounded) })],
    ["assumption (gdp: Gaussian-DP trade-off; none: any mechanism)", fmt(b.assumption)],
    [`above ${thresholdName}`, isNum(lower) ? (lower > threshold ? "yes" : "no") : lower === null ? "yes (∞)" : "—"],
    ["threshold", `${fmt(b.threshold)} (${b.threshold_strategy ?? "—"})`],
    ["counts tp / fn / fp / tn", b.counts ? `${b.counts.tp} / ${b.counts.fn} / ${b.counts.fp} / ${b.counts.tn}` : "—"],
  ];
}

/**
 * The ε chart: one bar per test, the bound the verdict used (red when it is above the claim or max_epsilon),
 * against the claim (or max_epsilon) and the audit's power. Other bounds are not drawn: they are under Details.
 */
function verdictChart(groups, bounds, res, claimed) {
  const threshold = isNum(claimed) ? claimed : res.max_epsilon ?? 0;
  const over = bounds.some((b) => isNum(b.value) ? b.value > threshold : b.unbounded);
  const finite = bounds.map((b) => b.value).filter(isNum).concat([threshold, res.epsilon_detectable].filter(isNum));
  const top = Math.max(0.1, ...finite) * 1.3;
  const lines = [];
  if (isNum(claimed)) lines.push({ label: "ε claimed", value: claimed, color: "#17663a" });
  else if (threshold > 0) lines.push({ label: "max_epsilon", value: threshold, color: "#17663a" });
  if (isNum(res.epsilon_detectable)) lines.push({ label: "ε detectable (the audit's power)", value: res.epsilon_detectable, color: "#7a4a00" });
  const assumptions = [...new Set(bounds.map((b) => ASSUMPTION[b.assumption] || b.assumption))].join(" / ");
  return barChart("chart-epsilon", "The bound the verdict used", groups, [{
    label: `ε lower bound (${assumptions})`,
    values: bounds.map((b) => (isNum(b.value) ? b.value : b.unbounded ? top / 1.15 : null)),
    unbounded: bounds.map((b) => b.unbounded),
    color: over ? "#a4161a" : "#0b5cad",
  }], `The bar is the lower bound the verdict used${isNum(claimed) ? "; above the dashed claim it is a violation" : "; nothing is claimed, so above max_epsilon it is a leak"}. The other ε figures are under Details.`,
  { lines, top });
}

function renderMia(a, res) {
  const tms = Object.keys(THREATS).filter((t) => res[t] && typeof res[t] === "object");
  const claimed = res.epsilon_theory ?? null;
  const threshold = isNum(claimed) ? claimed : res.max_epsilon ?? 0;
  const thresholdName = isNum(claimed) ? "the claim (violation)" : "max_epsilon (leak)";
  const perTest = res.confidence && typeof res.confidence === "object" ? res.confidence.per_test : null;
  const figures = [
    ...tms.flatMap((t) => testFigures(`${t}-`, tms.length > 1 ? `${THREATS[t]}: ` : "", res[t], res[t].confidence ?? perTest)),
    ...claimFigures(res, claimed),
  ];
  if (isNum(res.epsilon_ceiling) || isNum(res.epsilon_exact_at_delta)) {
    figures.push(detail("ceiling", res.epsilon_ceiling ?? res.epsilon_exact_at_delta, "ε ceiling (exact ε at δ of the calibrated noise)",
      "the most any attack could show if the noise is what the claim says; theory, not measured"));
  }
  const rows = testRows({}, threshold, thresholdName).map(([name], i) => [name, ...tms.map((t) => testRows(res[t], threshold, thresholdName)[i][1])]);
  const out = [
    detailsSection(figures, ceilingNote(res, tms)),
    table("Membership tests, per threat model", ["", ...tms.map((t) => THREATS[t])], rows, "threat-models"),
    table("The mechanism and its noise", ["", "value"], [
      ["μ theory (Gaussian-DP μ of the calibrated noise)", fmt(res.mu_theory)],
      ["δ", fmt(a.request.delta ?? res.delta)],
      ["noise σ", fmt(res.sigma)], ["sensitivity", fmt(res.sensitivity)], ["calibration", fmt(res.calibration)],
      ["calibration valid", fmt(res.calibration_valid)],
      ["estimator", fmt(res.estimator)],
    ], "theory"),
    table("Cost", ["", "value"], [
      ["LLM forward passes", fmt(res.llm_forward_passes)], ["distinct prompts", fmt(res.distinct_prompts)],
      ["LLM calls", fmt(res.llm_calls)], ["trials per context", fmt(res.trials)],
    ], "cost"),
  ];
  if (res.utility && typeof res.utility === "object") {
    out.push(table("Utility", ["", "value"], flatten(res.utility).map(([k, v]) => [k, fmt(v)]), "utility"));
  } else out.push(el("p", { class: "muted" }, "Utility: not measured for this audit."));
  const charts = el("div", { class: "grid2" });
  const curves = [];
  if (isNum(res.mu_theory)) curves.push({ label: `claim: μ theory = ${fmt(res.mu_theory)}`, mu: res.mu_theory });
  tms.forEach((t) => {
    if (!isNum(res[t].mu_lower)) return;
    const unused = (res[t].assumption || res.assumption) === "none" ? " (Gaussian-DP reading, not the verdict's)" : "";
    curves.push({ label: `${THREATS[t]} μ lower = ${fmt(res[t].mu_lower)}${unused}`, mu: res[t].mu_lower });
  });
  charts.append(
    rocChart("chart-roc", "ROC (log axes)", curves,
      tms.filter((t) => isNum(res[t].tpr)).map((t) => ({ label: `${THREATS[t]} test`, fpr: res[t].fpr, tpr: res[t].tpr })),
      "A μ-GDP mechanism admits no test above its curve: a point above the claim's curve is a violation. Drag to zoom, double-click to reset."),
    verdictChart(tms.map((t) => THREATS[t]), tms.map((t) => ({
      value: res[t].epsilon_lower, assumption: res[t].assumption || res.assumption || "gdp",
      unbounded: res[t].epsilon_lower === null && !!(res[t].epsilon_lower_unbounded || res[t].epsilon_empirical_unbounded),
    })), res, claimed),
  );
  out.push(el("h2", {}, "Charts"), charts);
  return out;
}

function renderBound(a, res) {
  const claimed = res.epsilon_claimed ?? null;
  const threshold = isNum(claimed) ? claimed : res.max_epsilon ?? 0;
  const thresholdName = isNum(claimed) ? "the claim (violation)" : "max_epsilon (leak)";
  const figures = [...testFigures("", "", res, res.confidence), ...claimFigures(res, claimed)];
  return [
    detailsSection(figures, null),
    table("Bound from the test's outcomes", ["", "value"], [...testRows(res, threshold, thresholdName),
      ["confidence", fmt(res.confidence)], ["δ", fmt(res.delta)],
      ["n in / n out", `${fmt(res.n_in)} / ${fmt(res.n_out)}`]], "bound"),
    el("h2", {}, "Charts"),
    el("div", { class: "grid2" },
      rocChart("chart-roc", "ROC (log axes)", [{ label: `μ lower = ${fmt(res.mu_lower)}${res.assumption === "none" ? " (Gaussian-DP reading, not the verdict's)" : ""}`, mu: res.mu_lower }],
        [{ label: "observed (FPR, TPR)", fpr: res.fpr, tpr: res.tpr }], "Drag to zoom, double-click to reset."),
      verdictChart(["this test"], [{
        value: res.epsilon_lower ?? null, assumption: res.assumption || "gdp",
        unbounded: res.epsilon_lower === null && !!res.epsilon_empirical_unbounded,
      }], res, claimed)),
  ];
}

function renderIclinf(a, res) {
  const chance = res.labels && res.labels.length ? 1 / res.labels.length : null;
  const below = res.accuracy !== null && res.accuracy !== undefined && chance !== null && res.accuracy < chance;
  const out = [
    table("ICLInf", ["", "value"], [
      ["ICLInf (mean of the largest leave-one-out loss)", fmt(res.iclinf)], ["ICLInf std over queries", fmt(res.iclinf_std)],
      ["accuracy", fmt(res.accuracy)], ["chance accuracy (1 / labels)", fmt(chance)],
      ["shots", fmt(res.shots)], ["queries", fmt(res.queries)], ["output space", fmt(res.output_space)],
      ["calibration", fmt(res.calibration)], ["LLM forward passes", fmt(res.llm_forward_passes)],
      ["forward passes per query", fmt(res.forward_passes_per_query)],
    ], "iclinf"),
  ];
  if (below && !(res.warnings && res.warnings.length) && !res.warning) {
    out.push(el("p", { class: "warning", role: "note" }, `Accuracy ${fmt(res.accuracy)} is below chance (${fmt(chance)}): the model does not solve this task in context, so its influence numbers say little.`));
  }
  out.push(el("h2", {}, "Charts"), el("div", { class: "grid2" },
    seriesBars("chart-positions", "Leave-one-out loss by removed position", "position", res.per_position || [],
      [{ label: `ICLInf = ${fmt(res.iclinf)}`, value: res.iclinf }], "Mean over queries of the loss increase when the exemplar at that position is removed.", { yLabel: "loss" }),
    seriesBars("chart-queries", "ICLInf per query", "query", res.per_query || [], [], null, { yLabel: "max loss" })));
  return out;
}

function renderSynth(a, res) {
  const figures = [
    detail("spent", res.epsilon_empirical, "ε spent on these examples (data-dependent)",
      "the figure the verdict used: the measured RDP curve converted to (ε, δ); exact for these examples, no sampling", { used: true }),
    detail("budget", res.epsilon_theory, "ε budget (theory)", "what the parameters guarantee for any examples; spending more is a violation"),
  ];
  if (isNum(res.target_epsilon) && res.target_epsilon !== res.epsilon_theory) {
    figures.push(detail("target", res.target_epsilon, "ε asked for", "the target a parameter was solved for"));
  }
  const out = [
    detailsSection(figures, null),
    table("DP synthetic generation", ["", "value"], [
      ["variant", res.variant ?? "simplified"], ["order α of ε spent", fmt(res.alpha_empirical)],
      ["theory order α*", fmt(res.alpha)], ["temperature", fmt(res.temperature)], ["sequences", fmt(res.sequences)],
      ["private / generated tokens", `${fmt(res.private_tokens)} / ${fmt(res.generated_tokens)}`], ["LLM forward passes", fmt(res.llm_forward_passes)],
    ], "synthgen"),
  ];
  if (Array.isArray(res.texts)) out.push(el("h3", {}, "Generated texts"), el("ol", {}, res.texts.map((t) => el("li", {}, el("code", {}, t)))));
  const over = isNum(res.epsilon_empirical) && isNum(res.epsilon_theory) && res.epsilon_empirical > res.epsilon_theory;
  const charts = el("div", { class: "grid2" },
    barChart("chart-epsilon", "ε spent against the budget", ["this run"], [
      { label: "ε spent (the verdict's figure)", values: [res.epsilon_empirical ?? null], color: over ? "#a4161a" : "#0b5cad" },
    ], "Above the dashed budget it is a violation.", { lines: [{ label: "ε budget", value: res.epsilon_theory, color: "#17663a" }] }));
  if (Array.isArray(res.orders) && Array.isArray(res.rdp_empirical) && Array.isArray(res.rdp_theory)) {
    charts.append(lineChart("chart-rdp", "RDP curve: data-dependent vs theory", "order α", res.orders,
      [{ label: "data-dependent", values: res.rdp_empirical }, { label: "theory", values: res.rdp_theory }],
      "Rényi DP of the whole run at each order; ε empirical converts the data-dependent curve.", { yLabel: "RDP", logY: true }));
  }
  if (Array.isArray(res.step_losses) && res.step_losses.length) {
    const steps = Math.max(...res.step_losses.map((s) => s.length));
    charts.append(lineChart("chart-steps", "Privacy loss per generated token", "token", Array.from({ length: steps }, (_, i) => i + 1),
      res.step_losses.map((s, i) => ({ label: `sequence ${i + 1}`, values: s })), null, { yLabel: "loss" }));
  }
  out.push(el("h2", {}, "Charts"), charts);
  return out;
}

const RENDER = { mia: renderMia, bound: renderBound, iclinf: renderIclinf, synthetic_generation: renderSynth };

/**
 * Per-record risk (app/audit/records.py). A record is flagged by its exact sign test (p-value ≤ (1 − confidence)
 * / records, Bonferroni over the records), not by its own ε lower bound, which a record's few trials rarely
 * lift above 0: so the chart draws the evidence that decided the flag (−log₁₀ p against the flag line), never a
 * row of zero ε bars beside flagged records.
 */
async function renderRecords(a) {
  let records = a.result && a.result.records;
  if (!records && a.kind === "mia") {
    try {
      records = (await api(`${path}/records`)).data;
    } catch (_) {
      return []; // no per-record risk on this server or for this audit
    }
  }
  const list = Array.isArray(records) ? records : records && (records.records || records.items);
  if (!Array.isArray(list) || !list.length) return [];
  if (typeof list[0].p_value === "number") return recordEvidence(a, list);
  const keyOf = (r) => ["risk", "score", "auc", "epsilon_lower", "epsilon"].find((k) => typeof r[k] === "number") || Object.keys(r).find((k) => typeof r[k] === "number");
  const key = keyOf(list[0]);
  if (!key) return [];
  const sorted = list[0].rank !== undefined ? [...list].sort((x, y) => x.rank - y.rank) : [...list].sort((x, y) => (y[key] ?? 0) - (x[key] ?? 0));
  const top = sorted.slice(0, 50);
  const cols = Object.keys(top[0]).filter((k) => !["text", "record_id", "index", "id"].includes(k));
  return [el("h2", {}, "Per-record risk"),
    seriesBars("chart-records", `Records by ${key} (highest ${top.length})`, "rank", top.map((r) => r[key]), [], "Each bar is one record of the private set."),
    table("Records, riskiest first", ["record", ...cols], top.slice(0, 20).map((r, i) => [String(r.record_id ?? r.index ?? r.id ?? i + 1), ...cols.map((k) => fmt(r[k]))]), "records")];
}

function recordEvidence(a, list) {
  const res = a.result || {};
  const stated = res.confidence && typeof res.confidence === "object" ? res.confidence.stated : (a.request || {}).confidence;
  const confidence = isNum(stated) ? stated : 0.95;
  const cut = (1 - confidence) / list.length;
  const evidence = (p) => -Math.log10(Math.max(p, 1e-300));
  const sorted = list[0].rank !== undefined ? [...list].sort((x, y) => x.rank - y.rank) : [...list].sort((x, y) => x.p_value - y.p_value);
  const flagged = list.filter((r) => r.flagged === true).length;
  const top = sorted.slice(0, 50);
  const zeroBound = list.filter((r) => r.flagged === true && !(r.epsilon_lower > 0)).length;
  const trials = Math.max(...list.map((r) => r.trials || 0));
  return [el("h2", {}, "Per-record risk"),
    el("p", { id: "records-summary" }, el("strong", {}, `${flagged} of ${list.length} records flagged as leaking`),
      ` — each by the exact sign test on its paired trials (C1 vs C0), flagged when p ≤ ${fmt(cut)} `
      + `(${fmt(100 * confidence)} % over all ${list.length} records, Bonferroni).`),
    seriesBars("chart-records", `Evidence per record: −log₁₀ p-value (highest ${top.length})`, "rank", top.map((r) => evidence(r.p_value)),
      [{ label: `flag line: p = ${fmt(cut)}`, value: evidence(cut) }],
      "Each bar is one record, riskiest first; a bar above the dashed line is flagged.", { yLabel: "−log₁₀ p" }),
    zeroBound ? el("p", { class: "muted", id: "records-bound-note" },
      `${zeroBound} flagged record${zeroBound === 1 ? " has" : "s have"} an own ε lower bound of 0: with ${trials} trials a single record cannot certify an ε, `
      + "so the flag rests on the sign test's p-value, not on that bound.") : null,
    table("Records, riskiest first", ["record", "flagged", "p-value (sign test)", "trials", "AUC", "mean gap in − out", "own ε lower bound"],
      top.slice(0, 20).map((r) => [String(r.record_id), r.flagged ? "yes" : "no", fmt(r.p_value), fmt(r.trials), fmt(r.auc), fmt(r.gap_mean), fmt(r.epsilon_lower)]),
      "records", { narrow: [3, 5, 6] })];
}

/** One side's sample of trials: the release's answer (or output score), the white-box score, the test's call. */
function trialTable(id, caption, trials, threshold) {
  const hasDecision = trials.some((t) => t.decision);
  const hasOutput = trials.some((t) => t.output !== undefined && t.output !== null);
  const head = ["trial", ...(hasDecision ? ["released answer", "black-box call"] : []), ...(hasOutput ? ["output score"] : []), "white-box score",
    ...(isNum(threshold) ? [`score ≥ ${fmt(threshold)}`] : [])];
  return el("table", { id, class: "evidence-trials" },
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, head.map((h) => el("th", { scope: "col" }, h)))),
    el("tbody", {}, trials.map((t) => el("tr", { "data-trial": t.trial },
      el("th", { scope: "row" }, String(t.trial)),
      hasDecision ? [el("td", {}, t.released ?? "—"), el("td", { "data-call": t.decision, class: `call-${t.decision}` }, t.decision ?? "—")] : null,
      hasOutput ? el("td", { class: "num" }, fmt(t.output)) : null,
      el("td", { class: "num", "data-score": t.score ?? "" }, fmt(t.score)),
      isNum(threshold) ? el("td", { class: isNum(t.score) && t.score >= threshold ? "call-in" : "call-out" }, isNum(t.score) ? (t.score >= threshold ? "in" : "out") : "—") : null))));
}

/**
 * The evidence: for each record its text, the attack's query, and a sample of trials with the record in (C1)
 * beside the same trials' counterparts without it (C0) — what the model released and how the attack scored it.
 */
function renderEvidence(a, res) {
  const ev = res.evidence;
  if (!ev || !Array.isArray(ev.records) || !ev.records.length) return [];
  const threshold = res.white_box && isNum(res.white_box.threshold) ? res.white_box.threshold : null;
  return [el("section", { id: "evidence", "aria-labelledby": "evidence-h" },
    el("h2", { id: "evidence-h" }, "Evidence, record by record"),
    el("p", { class: "muted" }, `The first ${ev.max_trials} trials of each side, exactly as the audit ran them (texts cut at 600 characters). `
      + "C1 holds the record in the context, C0 does not; a leak shows as C1's answers and scores standing apart from C0's."
      + (ev.positive_answer ? ` The answer that says "record present" is "${ev.positive_answer}".` : "")),
    ev.records.map((r, i) => el("article", { class: "evidence-record", "data-record": r.record_id },
      el("h3", {}, `Record ${i + 1}: `, el("span", { class: "mono" }, r.record_id), r.record_hash ? el("span", { class: "mono muted" }, ` #${r.record_hash}`) : null),
      el("blockquote", { class: "record-text" }, r.text ?? "—"),
      r.secret ? el("p", {}, "The secret the attack guesses: ", el("code", { class: "record-secret" }, r.secret)) : null,
      r.query ? [el("h4", {}, "The attack's query"), el("pre", { class: "block evidence-query" }, r.query)] : null,
      r.prompt_in || r.prompt_out ? el("details", {}, el("summary", {}, "The prompt of the record's partition, C1 and C0"),
        el("div", { class: "grid2" }, el("pre", { class: "block prompt-in" }, r.prompt_in ?? "—"), el("pre", { class: "block prompt-out" }, r.prompt_out ?? "—"))) : null,
      el("div", { class: "c1c0" },
        trialTable(`evidence-${i}-c1`, "C1: record in", r.c1 || [], threshold),
        trialTable(`evidence-${i}-c0`, "C0: record out", r.c0 || [], threshold)))))];
}

let recordsView = "redacted"; // the records' text as the page shows it: personal data masked unless asked

async function renderResult(a) {
  resultShown = true;
  let res = a.result;
  try {
    res = (await api(`${path}/result?records=${recordsView}`)).data;
  } catch (_) {
    if (recordsView !== "full") res = { ...a.result, evidence: null }; // show no record text unredacted
  }
  renderVerdict(a);
  const render = RENDER[a.kind];
  const pngButton = el("button", { type: "button", id: "download-png" }, "Download PNG");
  const img = el("img", { id: "result-png", alt: `Plot of the ${a.kind} result`, hidden: true, style: "max-width:100%" });
  const reportButton = el("button", { type: "button", id: "download-report", class: "primary" }, "Download report (HTML)");
  reportButton.addEventListener("click", async () => {
    reportButton.disabled = true;
    try {
      const r = await api(`${path}/report.html?records=${recordsView}`, { raw: true });
      download(`iclaudit-report-${a.id}.html`, r.data, "text/html");
    } finally {
      reportButton.disabled = false;
    }
  });
  pngButton.addEventListener("click", async () => {
    const r = await api(`${path}/result.png`, { raw: true });
    download(`audit-${a.id}.png`, r.data);
  });
  fill(resultBox,
    el("h2", { id: "result-h" }, "Result"),
    ...warnings(res),
    ...(render ? render(a, res) : []),
    ...renderEvidence(a, res),
    res.evidence || res.records ? el("p", { class: "muted", id: "records-view", "data-records": recordsView },
      recordsView === "full" ? "The records' text is shown as stored. " : "The records' text is redacted: e-mail addresses, phone, card and IBAN numbers and long digit runs masked; each record has a stable hash. ",
      el("button", { type: "button", id: "toggle-records", onclick: () => { recordsView = recordsView === "full" ? "redacted" : "full"; renderResult(a); } },
        recordsView === "full" ? "Redact the records" : "Show the records' text")) : null,
    el("h2", {}, "Downloads"),
    el("p", { class: "muted" }, "The report is one self-contained HTML file to share: it opens offline and prints to PDF."),
    el("div", { class: "actions" },
      reportButton,
      el("button", { type: "button", id: "download-json", onclick: () => download(`audit-${a.id}.json`, JSON.stringify(res, null, 2) + "\n", "application/json") }, "Download JSON"),
      el("button", { type: "button", id: "download-csv", onclick: () => download(`audit-${a.id}.csv`, toCsv(flatten(res)), "text/csv") }, "Download CSV"),
      pngButton),
    el("details", {}, el("summary", {}, "The result as a plot (PNG)"), img),
    el("details", {}, el("summary", {}, "Every result field"),
      table("All fields", ["field", "value"], flatten(res).map(([k, v]) => [k, fmt(v)]), "all-fields")),
  );
  api(`${path}/result.png`, { raw: true }).then((r) => { img.src = URL.createObjectURL(r.data); img.hidden = false; }).catch(() => {});
  const records = await renderRecords(a);
  if (records.length) resultBox.append(el("div", { id: "records-section" }, records));
}

let requestShown = false;
watch(path, (a) => {
  document.title = `Audit ${a.id.slice(0, 12)} · ${a.state} · iclaudit`;
  renderSummary(a);
  if (!requestShown) { renderRequest(a); requestShown = true; }
  if (a.state === "SUCCEEDED" && a.result && !resultShown) renderResult(a);
}, { done: (a) => TERMINAL.includes(a.state) }).catch((error) => {
  const message = error instanceof ApiError && error.status === 404 ? error.message : `Could not load the audit: ${error.message}`;
  main.replaceChildren(el("h1", {}, "Audit not found"), el("p", { class: "alert", role: "alert", id: "not-found" }, message),
    el("p", {}, el("a", { href: "/ui" }, "Back to your audits")));
});
