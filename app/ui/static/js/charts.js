// Interactive charts on the vendored uPlot (static/vendor/uplot, MIT): ROC in log axes with Gaussian-DP
// trade-off curves, ε bars, per-position bars. Each chart is a <figure> holding uPlot's <canvas>.
import { el, fmt } from "./api.js";

/** Φ(x), the standard normal CDF (Abramowitz & Stegun 7.1.26 on erf; |error| < 1.5e-7). */
export function phi(x) {
  const z = Math.abs(x) / Math.SQRT2;
  const t = 1 / (1 + 0.3275911 * z);
  const y = 1 - (((((1.061405429 * t - 1.453152027) * t) + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-z * z);
  return 0.5 * (1 + (x >= 0 ? y : -y));
}

/** Φ⁻¹(p) (Acklam's rational approximation; relative error < 1.2e-9). */
export function phiInv(p) {
  const a = [-39.69683028665376, 220.9460984245205, -275.9285104469687, 138.357751867269, -30.66479806614716, 2.506628277459239];
  const b = [-54.47609879822406, 161.5858368580409, -155.6989798598866, 66.80131188771972, -13.28068155288572];
  const c = [-0.007784894002430293, -0.3223964580411365, -2.400758277161838, -2.549732539343734, 4.374664141464968, 2.938163982698783];
  const d = [0.007784695709041462, 0.3224671290700398, 2.445134137142996, 3.754408661907416];
  const lo = 0.02425;
  if (p <= 0) return -Infinity;
  if (p >= 1) return Infinity;
  if (p < lo) {
    const q = Math.sqrt(-2 * Math.log(p));
    return (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) / ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  if (p > 1 - lo) return -phiInv(1 - p);
  const q = p - 0.5;
  const r = q * q;
  return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q / (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

/** TPR = Φ(Φ⁻¹(FPR) + μ): the most powerful test against a μ-GDP mechanism (Dong, Roth & Su 2022). */
export const gdpCurve = (fpr, mu) => phi(phiInv(fpr) + mu);

export const COLORS = ["#0b5cad", "#c05600", "#17663a", "#6b4fa0", "#a4161a", "#4f5660"];
const FLOOR = 1e-4;

/** A legend value: the hovered point's number, nothing while no point is hovered (never "value: —"). */
const hovered = (u, v) => (v === null || v === undefined ? "" : fmt(v));
/** Axis tick labels as the page writes numbers (uPlot's own rounding wrote 0.0025 as 0.003 and 1e-4 as 0). */
const ticks = (u, splits) => splits.map((v) => (v === null || v === undefined ? "" : fmt(v)));
/** Log-axis labels at the powers of 10 only (the minor ticks stay unlabelled), 1e-4 written as such. */
const logTicks = (u, splits) => splits.map((v) => {
  if (!(typeof v === "number" && v > 0)) return "";
  const k = Math.log10(v);
  if (Math.abs(k - Math.round(k)) > 1e-9) return "";
  return v >= 1e-3 ? fmt(v) : `1e${Math.round(k)}`;
});

function figure(id, title, note) {
  const plot = el("div", { class: "plot" });
  const fig = el("figure", { class: "chart", id, "aria-label": title }, el("h3", {}, title), plot);
  if (note) fig.append(el("figcaption", { class: "note" }, note));
  return { fig, plot };
}

function width(node) {
  return Math.max(260, Math.min(640, (node.clientWidth || node.parentElement.clientWidth || 600) - 16));
}

/** Mount a uPlot once its container has a width; resize it with the container. */
function mount(fig, plot, opts, data) {
  const make = () => {
    const u = new window.uPlot({ ...opts, width: width(fig), height: opts.height || 300 }, data, plot);
    new ResizeObserver(() => u.setSize({ width: width(fig), height: opts.height || 300 })).observe(fig);
    fig.uplot = u; // for tests and the console
    fig.dataset.drawn = "true";
    return u;
  };
  if (fig.isConnected) return make();
  requestAnimationFrame(() => make());
  return null;
}

/**
 * ROC space with log axes. `curves`: [{label, mu}] drawn as GDP trade-off curves; `points`:
 * [{label, fpr, tpr}] drawn as markers. The chance line is μ = 0.
 */
export function rocChart(id, title, curves, points, note) {
  const { fig, plot } = figure(id, title, note);
  const xs = new Set();
  for (let i = 0; i <= 160; i++) xs.add(FLOOR * Math.pow(1 / FLOOR, i / 160));
  for (const p of points) xs.add(Math.max(FLOOR, p.fpr));
  const x = [...xs].sort((a, b) => a - b);
  const series = [{ label: "FPR", value: hovered }];
  const data = [x];
  series.push({ label: "chance (μ = 0)", stroke: "#8a939c", dash: [4, 4], width: 1, points: { show: false }, value: hovered });
  data.push(x.map((v) => v));
  curves.forEach((c, i) => {
    series.push({ label: c.label, stroke: c.color || COLORS[(i + 2) % COLORS.length], width: 2, dash: c.dash || undefined, points: { show: false }, value: hovered });
    data.push(x.map((v) => Math.max(FLOOR, gdpCurve(v, c.mu))));
  });
  points.forEach((p, i) => {
    const fx = Math.max(FLOOR, p.fpr);
    series.push({
      label: p.label, stroke: p.color || COLORS[i % COLORS.length], fill: p.color || COLORS[i % COLORS.length], width: 0,
      paths: () => null, points: { show: true, size: 11 },
      value: (u, v) => (v === null || v === undefined ? `FPR ${fmt(p.fpr)}, TPR ${fmt(p.tpr)}` : fmt(v)),
    });
    data.push(x.map((v) => (v === fx ? Math.max(FLOOR, p.tpr) : null)));
  });
  const opts = {
    title: undefined,
    scales: { x: { time: false, distr: 3, range: [FLOOR, 1] }, y: { distr: 3, range: [FLOOR, 1] } },
    axes: [{ label: "false-positive rate (log)", values: logTicks }, { label: "true-positive rate (log)", values: logTicks, size: 56 }],
    series,
    legend: { live: true },
    cursor: { drag: { x: true, y: true, uni: 20 } },
  };
  mount(fig, plot, opts, data);
  return fig;
}

/**
 * Grouped bars: groups (x categories) × series (bars in a group). `values[s][g]` may be null (no bar).
 */
export function barChart(id, title, groups, seriesDefs, note, { yLabel = "ε", lines = [], top: topGiven = null } = {}) {
  const { fig, plot } = figure(id, title, note);
  const n = seriesDefs.length;
  const gap = 0.8 / Math.max(1, n);
  const x = [];
  const data = seriesDefs.map(() => []);
  const lineData = lines.map(() => []);
  groups.forEach((_, g) => {
    seriesDefs.forEach((_, s) => {
      x.push(g - 0.4 + gap * (s + 0.5));
      seriesDefs.forEach((def, t) => data[t].push(t === s ? def.values[g] ?? null : null));
      lines.forEach((line, l) => lineData[l].push(line.value));
    });
  });
  const bars = window.uPlot.paths.bars({ size: [Math.min(0.9, 0.9 / 1), 60], align: 0 });
  const finite = seriesDefs.flatMap((d) => d.values).concat(lines.map((l) => l.value)).filter((v) => v !== null && Number.isFinite(v));
  const top = topGiven ?? Math.max(0.1, ...finite) * 1.15;
  const opts = {
    scales: { x: { time: false, range: [-0.5, groups.length - 0.5] }, y: { range: [0, top] } },
    axes: [
      { splits: () => groups.map((_, i) => i), values: () => groups, grid: { show: false } },
      { label: yLabel, values: ticks, size: 64 },
    ],
    series: [
      // uPlot names an unlabelled x series "Value" (the legend read "Value: —"): name the hovered group instead.
      { label: "group", value: (u, v) => (v === null || v === undefined ? "" : groups[Math.round(v)] ?? "") },
      ...seriesDefs.map((d, i) => ({
        label: d.label, stroke: d.color || COLORS[i % COLORS.length], fill: (d.color || COLORS[i % COLORS.length]) + "cc",
        width: 1, paths: bars, points: { show: false }, value: hovered,
      })),
      ...lines.map((l) => ({ label: l.label, stroke: l.color || "#17663a", width: 2, dash: [6, 4], points: { show: false }, value: () => fmt(l.value) })),
    ],
    cursor: { points: { show: false } },
  };
  mount(fig, plot, opts, [x, ...data, ...lineData]);
  // The numbers, for readers who do not read bars (and for screen readers).
  const table = el("table", { class: "chart-data" },
    el("thead", {}, el("tr", {}, el("th", { scope: "col" }, ""), seriesDefs.map((d) => el("th", { scope: "col", class: "num" }, d.label)))),
    el("tbody", {}, groups.map((g, gi) => el("tr", {}, el("th", { scope: "row" }, g),
      seriesDefs.map((d) => el("td", { class: "num" }, fmt(d.values[gi], { unbounded: d.unbounded && d.unbounded[gi] })))))));
  fig.append(el("details", {}, el("summary", {}, "Numbers"), table));
  return fig;
}

/** Bars over 1..n (e.g. ICLInf by removed position) with horizontal reference lines; the y axis starts at 0. */
export function seriesBars(id, title, labelX, values, lines, note, { yLabel = "" } = {}) {
  const { fig, plot } = figure(id, title, note);
  const x = values.map((_, i) => i + 1);
  const bars = window.uPlot.paths.bars({ size: [0.6, 80], align: 0 });
  const finite = values.concat(lines.map((l) => l.value)).filter((v) => v !== null && Number.isFinite(v));
  const low = Math.min(0, ...finite);
  const high = Math.max(0, ...finite);
  const opts = {
    // Bars start at 0, whatever the data: an auto range from the smallest bar made equal bars look different.
    scales: { x: { time: false, range: [0.4, values.length + 0.6] }, y: { auto: false, range: [low, high > low ? high * 1.12 : 1] } },
    axes: [{ label: labelX, splits: () => x, values: (u, s) => s.map(String) }, { label: yLabel, values: ticks, size: 64 }],
    series: [
      { label: labelX, value: (u, v) => (v === null || v === undefined ? "" : String(v)) },
      { label: yLabel || title, stroke: COLORS[0], fill: COLORS[0] + "bb", paths: bars, points: { show: false }, value: hovered },
      ...lines.map((l, i) => ({ label: l.label, stroke: COLORS[(i + 4) % COLORS.length], width: 2, dash: [6, 4], points: { show: false }, value: () => fmt(l.value) })),
    ],
  };
  mount(fig, plot, opts, [x, values, ...lines.map((l) => x.map(() => l.value))]);
  return fig;
}

/** Lines over a shared x (e.g. per-step losses of each generated sequence). */
export function lineChart(id, title, labelX, x, lines, note, { yLabel = "", logY = false } = {}) {
  const { fig, plot } = figure(id, title, note);
  const opts = {
    scales: { x: { time: false }, y: logY ? { distr: 3 } : {} },
    axes: [{ label: labelX }, { label: yLabel, values: logY ? logTicks : ticks, size: 64 }],
    series: [{ label: labelX, value: hovered }, ...lines.map((l, i) => ({ label: l.label, stroke: COLORS[i % COLORS.length], width: 2, value: hovered }))],
  };
  mount(fig, plot, opts, [x, ...lines.map((l) => l.values)]);
  return fig;
}
