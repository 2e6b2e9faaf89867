// Compare page (/ui/compare?ids=a,b,…): 2–4 audits side by side — a headline row each, the requests diffed
// (fields that differ first and marked), the results in columns, and the ROC points and GDP curves overlaid.
import { api, claimedEpsilon, datasetName, el, flatten, fmt, initPage, measuredEpsilon, outcomeBadge, soft, stateBadge, verdictOf } from "./api.js";
import { COLORS, rocChart } from "./charts.js";

const main = initPage();
const ids = [...new Set((new URLSearchParams(location.search).get("ids") || "").split(/[,\s]+/).filter(Boolean))];
const THREATS = { black_box: "black-box", white_box: "white-box" };
const isNum = (v) => typeof v === "number" && Number.isFinite(v);

function fail(message) {
  main.replaceChildren(el("h1", {}, "Compare audits"), el("p", { class: "alert", role: "alert", id: "compare-error" }, message),
    el("p", {}, el("a", { href: "/ui" }, "Back to your audits")));
}

const nameOf = (a) => ((a.request || {}).labels || {}).name || a.id.slice(0, 8);
const same = (values) => values.every((v) => JSON.stringify(v) === JSON.stringify(values[0]));

/** Rows of dotted fields × audits; a row whose values differ is marked and listed first. */
function fieldTable(id, caption, audits, objects, { only = null } = {}) {
  const keys = [];
  for (const o of objects) for (const [k] of flatten(o || {})) if (!keys.includes(k) && (!only || only(k))) keys.push(k);
  const lookup = objects.map((o) => new Map(flatten(o || {})));
  const rows = keys.map((k) => ({ k, values: lookup.map((m) => (m.has(k) ? m.get(k) : undefined)) }));
  const differ = rows.filter((r) => !same(r.values));
  const alike = rows.filter((r) => same(r.values));
  const head = el("thead", {}, el("tr", {}, el("th", { scope: "col" }, "field"),
    audits.map((a, i) => el("th", { scope: "col", style: `border-top: 4px solid ${COLORS[i % COLORS.length]}` }, nameOf(a)))));
  const line = (r, differs) => el("tr", { "data-field": r.k, "data-differs": differs ? "true" : "false", class: differs ? "differs" : null },
    el("th", { scope: "row" }, soft(r.k)), r.values.map((v) => el("td", { class: typeof v === "number" ? "num" : null }, v === undefined ? "(absent)" : soft(fmt(v)))));
  return el("div", { class: "table-wrap" }, el("table", { id, class: "compare", style: `--audits: ${audits.length}` },
    el("caption", {}, caption, el("span", { class: "muted" }, ` — ${differ.length} field${differ.length === 1 ? "" : "s"} differ, ${alike.length} the same`)),
    head,
    el("tbody", {}, differ.map((r) => line(r, true))),
    alike.length ? el("tbody", { class: "alike" }, alike.map((r) => line(r, false))) : null));
}

function headline(audits) {
  const cell = (f) => audits.map((a) => el("td", {}, f(a)));
  const row = (label, f) => el("tr", {}, el("th", { scope: "row" }, label), cell(f));
  return el("div", { class: "table-wrap" }, el("table", { id: "compare-summary", class: "compare", style: `--audits: ${audits.length}` },
    el("caption", {}, "The audits"),
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, ""),
      audits.map((a, i) => el("th", { scope: "col", style: `border-top: 4px solid ${COLORS[i % COLORS.length]}` },
        el("a", { href: `/ui/audits/${encodeURIComponent(a.id)}`, class: "mono", title: a.id }, a.id.slice(0, 8)))))),
    el("tbody", {},
      row("name", nameOf),
      row("kind", (a) => a.kind),
      row("dataset", (a) => datasetName((a.request || {}).dataset)),
      row("state", (a) => stateBadge(a.state)),
      row("verdict", (a) => (a.state === "SUCCEEDED" ? outcomeBadge(verdictOf(a)) : "—")),
      row("ε claimed", (a) => fmt(claimedEpsilon(a))),
      row("ε measured (lower bound)", measuredEpsilon),
      row("ε detectable (power)", (a) => fmt(a.result ? a.result.epsilon_detectable : null, { unbounded: !!(a.result && a.result.epsilon_detectable_unbounded) })),
      row("headline", (a) => (a.result && a.result.headline) || "—"))));
}

/** Every audit's tests as points and its μ lower bounds as GDP curves, one colour per audit. */
function roc(audits) {
  const curves = [];
  const points = [];
  audits.forEach((a, i) => {
    const res = a.result || {};
    const color = COLORS[i % COLORS.length];
    const sides = a.kind === "bound" ? [["", res]] : Object.keys(THREATS).filter((t) => res[t]).map((t) => [` ${THREATS[t]}`, res[t]]);
    sides.forEach(([label, b], j) => {
      if (isNum(b.tpr) && isNum(b.fpr)) points.push({ label: `${nameOf(a)}${label} test`, fpr: b.fpr, tpr: b.tpr, color });
      if (isNum(b.mu_lower) && b.mu_lower > 0) curves.push({ label: `${nameOf(a)}${label} μ lower = ${fmt(b.mu_lower)}`, mu: b.mu_lower, color, dash: j ? [2, 3] : null });
    });
  });
  if (!points.length) return el("p", { class: "muted", id: "compare-roc-none" }, "None of these audits has a membership test to draw.");
  return rocChart("chart-compare-roc", "ROC of every audit (log axes)", curves, points,
    "One colour per audit: its tests as points, its μ lower bounds as Gaussian-DP curves (white-box dotted). Drag to zoom, double-click to reset.");
}

if (ids.length < 2 || ids.length > 4) {
  fail(`Pick 2 to 4 audits to compare (got ${ids.length}): tick them in the list, or open /ui/compare?ids=ID1,ID2.`);
} else {
  try {
    const audits = await Promise.all(ids.map((id) => api(`/v1/audits/${encodeURIComponent(id)}`).then((r) => r.data)));
    document.title = `Compare ${audits.map(nameOf).join(" · ")} · iclaudit`;
    const strip = (r) => { const { notify, ...rest } = r || {}; return rest; }; // where to notify is no part of the science
    main.replaceChildren(
      el("h1", {}, `Compare ${audits.length} audits`),
      headline(audits),
      el("h2", {}, "Requests"),
      fieldTable("compare-request", "Requests, field by field", audits, audits.map((a) => strip(a.request))),
      el("h2", {}, "Results"),
      fieldTable("compare-result", "Results, field by field", audits, audits.map((a) => a.result),
        { only: (k) => !k.startsWith("records.") && !k.startsWith("evidence.") && !k.startsWith("per_query.") }),
      el("h2", {}, "ROC"),
      el("div", { class: "grid2" }, roc(audits)),
    );
  } catch (error) {
    fail(error.status === 404 ? error.message : `Could not load the audits: ${error.message}`);
  }
}
