// Sweeps page: the tenant's sweeps; one sweep's grid as a line chart of the ε lower bound over the first swept
// parameter (one line per value of the others) with the claimed ε, and a heat-map table whose cells link
// to the point's audits.
import { api, el, fmt, initPage, OUTCOMES, outcomeBadge, progressBar, stateBadge, TERMINAL, watch, when } from "./api.js";
import { lineChart } from "./charts.js";

const main = initPage();
const sweepId = new URLSearchParams(location.search).get("id");

function keyOf(point, keys) {
  return keys.map((k) => `${k}=${point[k]}`).join(", ");
}

/**
 * Rows (one per child) grouped by grid point: mean ε lower bound over seeds, the claim, and the point's verdict:
 * the most severe of its children's (violation, leak, inconclusive, consistent), with the count of each.
 */
function points(rows, keys) {
  const byPoint = new Map();
  for (const r of rows) {
    const k = keyOf(r.point, keys);
    if (!byPoint.has(k)) byPoint.set(k, { point: r.point, rows: [] });
    byPoint.get(k).rows.push(r);
  }
  return [...byPoint.values()].map((p) => {
    const eps = p.rows.map((r) => r.epsilon_lower ?? r.epsilon_empirical).filter((v) => v !== null && v !== undefined);
    return {
      point: p.point, rows: p.rows,
      mean: eps.length ? eps.reduce((a, b) => a + b, 0) / eps.length : null,
      theory: p.rows.find((r) => r.epsilon_theory !== null && r.epsilon_theory !== undefined)?.epsilon_theory ?? null,
      outcome: OUTCOMES.find((o) => p.rows.some((r) => r.outcome === o)) ?? (p.rows.some((r) => r.violation === true) ? "violation" : null),
      outcomes: OUTCOMES.map((o) => [o, p.rows.filter((r) => r.outcome === o).length]).filter(([, n]) => n),
    };
  });
}

function heat(value, theory) {
  if (value === null || theory === null || !theory) return null;
  const ratio = Math.min(1.5, value / theory);
  // white (0) → amber (≈ claim) → red (above): text stays dark on every shade (contrast ≥ 4.5:1).
  const hue = ratio > 1 ? 0 : 40;
  const light = 97 - Math.min(1, ratio) * 30;
  return `hsl(${hue}, 85%, ${light}%)`;
}

async function showSweep(id) {
  const header = el("h1", {}, "Sweep ", el("span", { class: "mono" }, id));
  const info = el("div", { class: "panel", id: "sweep-info" });
  const body = el("section", { id: "sweep-result" });
  main.replaceChildren(el("p", {}, el("a", { href: "/ui/sweeps" }, "← all sweeps")), header, info, body);
  let bar = null;
  let shown = false;
  await watch(`/v1/sweeps/${encodeURIComponent(id)}`, async (s) => {
    const fake = { id: s.id, state: s.state, progress: { stage: `${s.progress.total} audits`, fraction: s.progress.fraction, eta_seconds: null, message: "" } };
    if (!bar) bar = progressBar(fake);
    bar.update(fake);
    info.replaceChildren(el("p", {}, stateBadge(s.state), ` ${s.base.kind} sweep over ${Object.keys(s.grid).join(", ")}, ${s.seeds} seed(s) per point, created ${when(s.created_at)}`), bar);
    if (TERMINAL.includes(s.state) && !shown) {
      shown = true;
      const { data: res } = await api(`/v1/sweeps/${encodeURIComponent(id)}/result`);
      body.replaceChildren(...renderResult(res));
    }
  }, { done: (s) => TERMINAL.includes(s.state) });
}

function renderResult(res) {
  const keys = Object.keys(res.grid);
  const pts = points(res.rows, keys);
  const out = [];
  const [first, ...rest] = keys;
  const xs = res.grid[first];
  const numeric = xs.every((v) => typeof v === "number");
  if (numeric) {
    const others = new Map();
    for (const p of pts) {
      const k = rest.length ? keyOf(p.point, rest) : "ε lower bound (mean over seeds)";
      if (!others.has(k)) others.set(k, new Map());
      others.get(k).set(p.point[first], p.mean);
    }
    const x = [...xs].sort((a, b) => a - b);
    const lines = [...others.entries()].map(([label, m]) => ({ label, values: x.map((v) => m.get(v) ?? null) }));
    const theory = x.map((v) => pts.find((p) => p.point[first] === v)?.theory ?? null);
    if (theory.some((t) => t !== null)) lines.push({ label: "ε theory (claimed)", values: theory });
    out.push(lineChart("chart-sweep", `ε lower bound over ${first}`, first, x, lines, "Mean over seeds; the claimed ε is the theory line.", { yLabel: "ε" }));
  }
  const table = el("table", { id: "sweep-grid" },
    el("caption", {}, "Every point (cells shaded by ε lower bound / ε theory; red: above the claim)"),
    el("thead", {}, el("tr", {}, keys.map((k) => el("th", { scope: "col" }, k)),
      el("th", { scope: "col", class: "num" }, "ε lower bound (mean)"), el("th", { scope: "col", class: "num hide-narrow" }, "ε theory"),
      el("th", { scope: "col" }, "verdict"), el("th", { scope: "col" }, "audits"))),
    el("tbody", {}, pts.map((p) => el("tr", {},
      keys.map((k) => el("td", {}, fmt(p.point[k]))),
      el("td", { class: "num", style: heat(p.mean, p.theory) ? `background:${heat(p.mean, p.theory)}` : null }, fmt(p.mean)),
      el("td", { class: "num hide-narrow" }, fmt(p.theory)),
      el("td", {}, outcomeBadge(p.outcome), p.outcomes.length ? el("span", { class: "muted" }, ` ${p.outcomes.map(([o, n]) => `${n} ${o}`).join(", ")}`) : null),
      el("td", {}, p.rows.map((r, i) => [i ? ", " : "", el("a", { href: `/ui/audits/${encodeURIComponent(r.audit_id)}` }, `seed ${r.seed}`)]))))));
  out.push(el("div", { class: "table-wrap" }, table));
  return out;
}

async function showList() {
  main.replaceChildren(el("h1", {}, "Sweeps"));
  let list;
  try {
    list = (await api("/v1/sweeps?page_size=50")).data;
  } catch (error) {
    main.append(el("p", { class: "muted" }, `Sweeps are not available on this server (${error.message}).`));
    return;
  }
  if (!list.sweeps.length) {
    main.append(el("p", { class: "muted" }, "No sweeps yet: POST /v1/sweeps (see the API docs) runs a grid of audits."));
    return;
  }
  main.append(el("div", { class: "table-wrap" }, el("table", { id: "sweeps" },
    el("caption", {}, "Your sweeps, newest first"),
    el("thead", {}, el("tr", {}, ["Sweep", "Created", "Kind", "Grid", "Audits", "State"].map((h, i) => el("th", { scope: "col", class: i === 1 || i === 2 ? "hide-narrow" : null }, h)))),
    el("tbody", {}, list.sweeps.map((s) => el("tr", {},
      el("td", {}, el("a", { class: "mono", href: `/ui/sweeps?id=${encodeURIComponent(s.id)}` }, s.id.slice(0, 12))),
      el("td", { class: "hide-narrow" }, when(s.created_at)), el("td", { class: "hide-narrow" }, s.base.kind),
      el("td", {}, Object.entries(s.grid).map(([k, v]) => `${k}: ${v.join(", ")}`).join("; ")),
      el("td", { class: "num" }, String(s.progress.total)), el("td", {}, stateBadge(s.state))))))));
}

if (sweepId) showSweep(sweepId).catch((error) => main.append(el("p", { class: "alert", role: "alert" }, error.message)));
else showList();
