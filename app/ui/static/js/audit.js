// Audit page: the request, live progress, the result as tables and interactive charts, downloads
// (JSON, CSV, PNG), and how to reproduce it (iclaudit submit, curl).
import {
  api, ApiError, claimedEpsilon, download, el, flatten, fmt, initPage, progressBar, stateBadge, TERMINAL, toCsv,
  verdictBadge, watch, when,
} from "./api.js";
import { barChart, lineChart, rocChart, seriesBars } from "./charts.js";

const main = initPage();
const id = document.body.dataset.audit;
const path = `/v1/audits/${encodeURIComponent(id)}`;
const THREATS = { black_box: "black-box", white_box: "white-box" };

const heading = el("h1", {}, "Audit ", el("span", { class: "mono" }, id));
const summary = el("dl", { class: "kv", id: "summary" });
const progressHolder = el("div", { id: "progress" });
const live = el("p", { class: "muted", "aria-live": "polite", id: "live" });
const actions = el("div", { class: "actions", id: "actions" });
const errorBox = el("div", { id: "error" });
const resultBox = el("section", { id: "result", "aria-labelledby": "result-h" });
const requestBox = el("section", { id: "request", "aria-labelledby": "request-h" });
main.append(heading, el("div", { class: "panel" }, summary, progressHolder, live), actions, errorBox, resultBox, requestBox);

let bar = null;
let resultShown = false;

function table(caption, head, body, id) {
  return el("div", { class: "table-wrap" }, el("table", { id },
    el("caption", {}, caption),
    el("thead", {}, el("tr", {}, head.map((h, i) => el("th", { scope: "col", class: i ? "num" : null }, h)))),
    el("tbody", {}, body.map((r) => el("tr", {}, r.map((c, i) => (i ? el("td", { class: "num" }, c) : el("th", { scope: "row" }, c))))))));
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
    ["Dataset", r.dataset ?? "—"],
    ["Model", r.model ?? "—"],
    ["Mechanism", r.mechanism ? r.mechanism.name : "—"],
    ["ε claimed", claimedEpsilon(a)],
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

function renderRequest(a) {
  const body = JSON.stringify(a.request, null, 2);
  const oneLine = JSON.stringify(a.request);
  const origin = location.origin;
  const auth = document.querySelector("#who button") ? " -H \"Authorization: Bearer $ICLAUDIT_API_KEY\"" : "";
  const curl = `curl -s -X POST ${origin}/v1/audits${auth} -H 'Content-Type: application/json' -d '${oneLine.replaceAll("'", "'\\''")}'`;
  const cli = `iclaudit submit request.json --watch --url ${origin}`;
  requestBox.replaceChildren(
    el("h2", { id: "request-h" }, "Request and how to reproduce it"),
    el("p", {}, "The request is seeded: submitting it again gives the same result."),
    el("pre", { class: "block", id: "request-json" }, body),
    el("div", { class: "actions" },
      el("button", { type: "button", onclick: () => download(`request-${a.id}.json`, body + "\n", "application/json") }, "Download request.json"),
      el("a", { class: "button", href: `/ui/submit?from=${encodeURIComponent(a.id)}` }, "Edit as a new audit")),
    el("h3", {}, "With the CLI (save the request as request.json)"),
    el("pre", { class: "block", id: "reproduce-cli" }, cli),
    el("h3", {}, "With curl"),
    el("pre", { class: "block", id: "reproduce-curl" }, curl),
  );
}

function warnings(result) {
  const list = [].concat(result.warnings || [], result.warning ? [result.warning] : []);
  return list.map((w) => el("p", { class: "warning", role: "note" }, typeof w === "string" ? w : w.message || JSON.stringify(w)));
}

function boundTables(b, theory) {
  return [
    ["TPR", fmt(b.tpr)], ["FPR", fmt(b.fpr)], ["AUC", fmt(b.auc)], ["accuracy", fmt(b.accuracy)],
    ["μ lower bound", fmt(b.mu_lower)],
    ["ε lower bound the verdict uses", fmt(b.epsilon_lower)],
    ["assumption (gdp: Gaussian-DP trade-off; none: assumption-free)", fmt(b.assumption)],
    ["ε empirical (lower bound)", fmt(b.epsilon_empirical, { unbounded: b.epsilon_empirical_unbounded })],
    ["ε empirical, assumption-free", fmt(b.epsilon_empirical_assumption_free)],
    ["ε point estimate", fmt(b.epsilon_point, { unbounded: b.epsilon_point_unbounded })],
    ["threshold", `${fmt(b.threshold)} (${b.threshold_strategy ?? "—"})`],
    ["counts tp / fn / fp / tn", b.counts ? `${b.counts.tp} / ${b.counts.fn} / ${b.counts.fp} / ${b.counts.tn}` : "—"],
    ...(theory ? [["violation", b.violation === true ? "✗ yes" : b.violation === false ? "no" : "—"]] : []),
  ];
}

function renderMia(a, res) {
  const tms = Object.keys(THREATS).filter((t) => res[t] && typeof res[t] === "object");
  const rows = boundTables({}, true).map(([name], i) => [name, ...tms.map((t) => boundTables(res[t], true)[i][1])]);
  const out = [
    table("Membership tests, per threat model", ["", ...tms.map((t) => THREATS[t])], rows, "threat-models"),
    table("The claim: theory and ceiling", ["", "value"], [
      ["ε theory (claimed)", fmt(res.epsilon_theory)],
      ["μ theory", fmt(res.mu_theory)],
      ["ε ceiling = ε(μ theory): what a perfect attack could show", fmt(res.epsilon_ceiling)],
      ["δ", fmt(a.request.delta ?? res.delta)],
      ["noise σ", fmt(res.sigma)], ["sensitivity", fmt(res.sensitivity)], ["calibration", fmt(res.calibration)],
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
  if (res.mu_theory !== null && res.mu_theory !== undefined) curves.push({ label: `claim: μ theory = ${fmt(res.mu_theory)}`, mu: res.mu_theory });
  tms.forEach((t) => { if (res[t].mu_lower !== null && res[t].mu_lower !== undefined) curves.push({ label: `${THREATS[t]} μ lower = ${fmt(res[t].mu_lower)}`, mu: res[t].mu_lower }); });
  charts.append(
    rocChart("chart-roc", "ROC (log axes)", curves,
      tms.filter((t) => res[t].tpr !== null && res[t].tpr !== undefined).map((t) => ({ label: `${THREATS[t]} test`, fpr: res[t].fpr, tpr: res[t].tpr })),
      "A μ-GDP mechanism admits no test above its curve: a point above the claim's curve is a violation. Drag to zoom, double-click to reset."),
    barChart("chart-epsilon", "ε empirical against ε theory", tms.map((t) => THREATS[t]), [
      { label: "ε empirical (lower bound)", values: tms.map((t) => res[t].epsilon_empirical), unbounded: tms.map((t) => res[t].epsilon_empirical_unbounded) },
      { label: "ε empirical, assumption-free", values: tms.map((t) => res[t].epsilon_empirical_assumption_free ?? null) },
      { label: "ε ceiling", values: tms.map(() => res.epsilon_ceiling ?? null), color: "#4f5660" },
    ], "A lower bound above the dashed claimed ε is a violation.",
    { lines: res.epsilon_theory !== null && res.epsilon_theory !== undefined ? [{ label: "ε theory (claimed)", value: res.epsilon_theory }] : [] }),
  );
  out.push(el("h2", {}, "Charts"), charts);
  return out;
}

function renderBound(a, res) {
  return [
    table("Bound from the test's outcomes", ["", "value"], [...boundTables(res, false),
      ["confidence", fmt(res.confidence)], ["δ", fmt(res.delta)], ["assumption", fmt(res.assumption)],
      ["n in / n out", `${fmt(res.n_in)} / ${fmt(res.n_out)}`]], "bound"),
    el("h2", {}, "Charts"),
    el("div", { class: "grid2" },
      rocChart("chart-roc", "ROC (log axes)", [{ label: `μ lower = ${fmt(res.mu_lower)}`, mu: res.mu_lower }],
        [{ label: "observed (FPR, TPR)", fpr: res.fpr, tpr: res.tpr }], "Drag to zoom, double-click to reset."),
      barChart("chart-epsilon", "ε estimates", ["this test"], [
        { label: "ε empirical (lower bound)", values: [res.epsilon_empirical], unbounded: [res.epsilon_empirical_unbounded] },
        { label: "ε empirical, assumption-free", values: [res.epsilon_empirical_assumption_free ?? null] },
        { label: "ε point", values: [res.epsilon_point], unbounded: [res.epsilon_point_unbounded] },
      ], "The point estimate is not a bound; the lower bounds hold at the stated confidence.")),
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
  const out = [
    table("DP synthetic generation", ["", "value"], [
      ["variant", res.variant ?? "simplified"], ["ε theory (target)", fmt(res.epsilon_theory)],
      ["ε empirical (RDP curve → (ε, δ))", fmt(res.epsilon_empirical)], ["order α of ε empirical", fmt(res.alpha_empirical)],
      ["theory order α*", fmt(res.alpha)], ["temperature", fmt(res.temperature)], ["sequences", fmt(res.sequences)],
      ["private / generated tokens", `${fmt(res.private_tokens)} / ${fmt(res.generated_tokens)}`], ["LLM forward passes", fmt(res.llm_forward_passes)],
    ], "synthgen"),
  ];
  if (Array.isArray(res.texts)) out.push(el("h3", {}, "Generated texts"), el("ol", {}, res.texts.map((t) => el("li", {}, el("code", {}, t)))));
  const charts = el("div", { class: "grid2" },
    barChart("chart-epsilon", "ε empirical against ε theory", ["this run"], [
      { label: "ε empirical", values: [res.epsilon_empirical ?? null] },
    ], null, { lines: [{ label: "ε theory", value: res.epsilon_theory }] }));
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
  const keyOf = (r) => ["epsilon_lower", "risk", "score", "epsilon", "auc"].find((k) => typeof r[k] === "number") || Object.keys(r).find((k) => typeof r[k] === "number");
  const key = keyOf(list[0]);
  if (!key) return [];
  const sorted = list[0].rank !== undefined ? [...list].sort((x, y) => x.rank - y.rank) : [...list].sort((x, y) => (y[key] ?? 0) - (x[key] ?? 0));
  const top = sorted.slice(0, 50);
  const cols = Object.keys(top[0]).filter((k) => !["text", "record_id", "index", "id"].includes(k));
  return [el("h2", {}, "Per-record risk"),
    seriesBars("chart-records", `Records by ${key} (highest ${top.length})`, "rank", top.map((r) => r[key]), [], "Each bar is one record of the private set."),
    table("Records, riskiest first", ["record", ...cols], top.slice(0, 20).map((r, i) => [String(r.record_id ?? r.index ?? r.id ?? i + 1), ...cols.map((k) => fmt(r[k]))]), "records")];
}

async function renderResult(a) {
  resultShown = true;
  const res = a.result;
  const render = RENDER[a.kind];
  const pngButton = el("button", { type: "button", id: "download-png" }, "Download PNG");
  const img = el("img", { id: "result-png", alt: `Plot of the ${a.kind} result`, hidden: true, style: "max-width:100%" });
  pngButton.addEventListener("click", async () => {
    const r = await api(`${path}/result.png`, { raw: true });
    download(`audit-${a.id}.png`, r.data);
  });
  resultBox.replaceChildren(
    el("h2", { id: "result-h" }, "Result"),
    ...warnings(res),
    ...(render ? render(a, res) : []),
    el("h2", {}, "Downloads"),
    el("div", { class: "actions" },
      el("button", { type: "button", id: "download-json", onclick: () => download(`audit-${a.id}.json`, JSON.stringify(res, null, 2) + "\n", "application/json") }, "Download JSON"),
      el("button", { type: "button", id: "download-csv", onclick: () => download(`audit-${a.id}.csv`, toCsv(flatten(res)), "text/csv") }, "Download CSV"),
      pngButton),
    el("details", {}, el("summary", {}, "The result as a plot (PNG)"), img),
    el("details", {}, el("summary", {}, "Every result field"),
      table("All fields", ["field", "value"], flatten(res).map(([k, v]) => [k, fmt(v)]), "all-fields")),
  );
  api(`${path}/result.png`, { raw: true }).then((r) => { img.src = URL.createObjectURL(r.data); img.hidden = false; }).catch(() => {});
  const records = await renderRecords(a);
  if (records.length) resultBox.append(...records);
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
