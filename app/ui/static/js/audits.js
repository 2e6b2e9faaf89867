// Audits page: the tenant's audits newest first, filters (state, kind, verdict, name, labels), paging, live
// progress (no reloads), cancel; each audit's name (its `name` label) and labels, the ε it measured and its
// verdict; a sweep's children grouped under one row of their sweep; a selection of 2–4 audits to compare.
import {
  api, claimedEpsilon, datasetName, el, fmt, initPage, measuredEpsilon, OUTCOMES, progressBar, soft, stateBadge, TERMINAL, verdictBadge, verdictOf, watch, when,
} from "./api.js";

const STATES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];
const PAGE_SIZE = 20;

const main = initPage();
const params = new URLSearchParams(location.search);
const filters = {
  state: params.get("state") || "", kind: params.get("kind") || "", verdict: params.get("verdict") || "",
  name: params.get("name") || "", labels: params.get("labels") || "",
};
const selected = new Set(); // audit ids ticked for /ui/compare
const sweepOf = new Map(); // audit id → {sweep, point, seed}
const groups = new Map(); // sweep id → {tr, body rows, open}
const placedOnce = new Set(); // audits looked up in the sweeps (a new one may be a new sweep's child)
let sweepsLoading = null;
const tokens = [null]; // page tokens: tokens[i] opens page i
let pageIndex = 0;
let controller = null;
const rows = new Map(); // audit id → {tr, update}
let active = 0; // audits on this page still in progress

function select(id, label, options, value) {
  const s = el("select", { id, name: id }, el("option", { value: "" }, "any"),
    options.map((o) => el("option", { value: o, selected: o === value }, o)));
  return el("div", {}, el("label", { for: id }, label), s);
}

const { data: ex } = await api("/ui/examples.json");
const form = el("form", { class: "filters", role: "search", "aria-label": "Filter audits" },
  select("f-state", "State", STATES, filters.state),
  select("f-kind", "Kind", ex.kinds, filters.kind),
  select("f-verdict", "Verdict", OUTCOMES, filters.verdict),
  el("div", {}, el("label", { for: "f-name" }, "Name"),
    el("input", { id: "f-name", name: "f-name", type: "search", value: filters.name, placeholder: "the name label", size: 14 })),
  el("div", {}, el("label", { for: "f-labels" }, "Labels"),
    el("input", { id: "f-labels", name: "f-labels", type: "search", value: filters.labels, placeholder: "key=value, …", size: 18 })),
);
const compare = el("a", { class: "button", id: "compare", href: "#", "aria-disabled": "true" }, "Compare selected (0)");
const status = el("p", { class: "muted", id: "list-status", "aria-live": "polite" });
const tbody = el("tbody");
const table = el("table", { id: "audits" },
  el("caption", {}, "Your audits, newest first"),
  el("thead", {}, el("tr", {},
    ["Audit", "Created", "Kind", "Dataset", "Model", "Mechanism", "ε claimed", "ε measured", "State", "Progress", "Verdict", ""]
      .map((h, i) => el("th", { scope: "col", class: [1, 3, 4, 5].includes(i) ? "hide-narrow" : i === 6 ? "num hide-narrow" : i === 7 ? "num" : null }, h)))),
  tbody);
const newer = el("button", { type: "button", id: "newer", onclick: () => go(pageIndex - 1) }, "← Newer");
const older = el("button", { type: "button", id: "older", onclick: () => go(pageIndex + 1) }, "Older →");
const pageLabel = el("span", { class: "muted" });

main.append(
  el("h1", {}, "Audits"),
  el("p", { class: "actions" }, el("a", { class: "button primary", href: "/ui/submit" }, "Submit an audit"),
    el("a", { class: "button", href: "/ui/datasets" }, "Upload a dataset"), compare),
  form, status, el("div", { class: "table-wrap" }, table),
  el("div", { class: "pager" }, newer, pageLabel, older),
);

form.addEventListener("submit", (event) => event.preventDefault());
form.addEventListener("change", () => {
  filters.state = form.elements["f-state"].value;
  filters.kind = form.elements["f-kind"].value;
  filters.verdict = form.elements["f-verdict"].value;
  filters.name = form.elements["f-name"].value.trim();
  filters.labels = form.elements["f-labels"].value.trim();
  const q = new URLSearchParams(Object.entries(filters).filter(([, v]) => v));
  history.replaceState(null, "", q.toString() ? `/ui?${q}` : "/ui");
  tokens.length = 1;
  go(0);
});

async function cancel(audit, button) {
  button.disabled = true;
  try {
    await api(`/v1/audits/${encodeURIComponent(audit.id)}/cancel`, { method: "POST" });
    status.textContent = `Cancel requested for ${audit.id}.`;
  } catch (error) {
    status.textContent = `Could not cancel ${audit.id}: ${error.message}`;
    button.disabled = false;
  }
}

function updateCompare() {
  const ids = [...selected];
  compare.textContent = `Compare selected (${ids.length})`;
  const ok = ids.length >= 2 && ids.length <= 4;
  compare.setAttribute("aria-disabled", ok ? "false" : "true");
  compare.href = ok ? `/ui/compare?ids=${ids.map(encodeURIComponent).join(",")}` : "#";
  compare.title = ok ? "" : "Tick 2 to 4 audits to compare them";
}
compare.addEventListener("click", (event) => { if (compare.getAttribute("aria-disabled") === "true") event.preventDefault(); });

/** The audit's name (its `name` label), its other labels as chips, or its sweep point for a sweep child. */
function nameCell(audit) {
  const labels = (audit.request && audit.request.labels) || {};
  const member = sweepOf.get(audit.id);
  const out = [];
  if (labels.name) out.push(el("span", { class: "run-name", "data-name": labels.name }, labels.name));
  if (member) {
    const point = Object.entries(member.point).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ");
    out.push(el("span", { class: "muted point" }, `${point} · seed ${member.seed}`));
  }
  const chips = Object.entries(labels).filter(([k]) => k !== "name")
    .map(([k, v]) => el("span", { class: "chip", "data-label": `${k}=${v}` }, `${k}=${v}`));
  if (chips.length) out.push(el("span", { class: "chips" }, chips));
  return out;
}

function row(audit) {
  const r = audit.request || {};
  const mech = r.mechanism ? r.mechanism.name + (r.mechanism.bug ? ` (bug: ${r.mechanism.bug})` : "") : "—";
  const progress = progressBar(audit);
  const stateCell = el("td");
  const verdictCell = el("td", { class: "cell-verdict" });
  const actionCell = el("td", { class: "cell-action" });
  const measuredCell = el("td", { class: "num cell-measured" });
  const tick = el("input", { type: "checkbox", class: "pick", "aria-label": `Select audit ${audit.id} to compare`, checked: selected.has(audit.id) });
  tick.addEventListener("change", () => {
    if (tick.checked) selected.add(audit.id); else selected.delete(audit.id);
    updateCompare();
  });
  const tr = el("tr", { "data-id": audit.id },
    el("td", { class: "cell-audit" }, tick, " ",
      el("a", { href: `/ui/audits/${encodeURIComponent(audit.id)}`, class: "mono", title: audit.id, "aria-label": `audit ${audit.id}` }, audit.id.slice(0, 8)),
      " ", nameCell(audit)),
    el("td", { class: "hide-narrow" }, when(audit.created_at)),
    el("td", {}, audit.kind),
    el("td", { class: "hide-narrow" }, datasetName(r.dataset)),
    el("td", { class: "hide-narrow" }, r.model ?? "—"),
    el("td", { class: "hide-narrow" }, soft(mech)),
    el("td", { class: "num hide-narrow" }, fmt(claimedEpsilon(audit))),
    measuredCell,
    stateCell,
    el("td", { class: "cell-progress" }, progress),
    verdictCell,
    actionCell,
  );
  const update = (a) => {
    stateCell.replaceChildren(stateBadge(a.state));
    progress.update(a);
    verdictCell.replaceChildren(verdictBadge(a));
    measuredCell.textContent = measuredEpsilon(a);
    const active = !TERMINAL.includes(a.state);
    const existing = actionCell.querySelector("button");
    if (active && !existing) {
      const b = el("button", { type: "button", class: "danger", "aria-label": `Cancel audit ${a.id}` }, "Cancel");
      b.addEventListener("click", () => cancel(a, b));
      actionCell.append(b);
    } else if (!active && existing) existing.remove();
    if (existing && a.cancel_requested) existing.disabled = true;
  };
  update(audit);
  return { tr, update };
}

let lastList = null;

function render(list) {
  lastList = list;
  // The verdict filter is asked of the server (?verdict=); a server that does not filter by verdict sends
  // every audit of the page, so the page is filtered here too (a no-op when the server did it).
  const honoured = !filters.verdict || list.audits.every((a) => verdictOf(a) === filters.verdict);
  let audits = list.audits;
  if (filters.verdict) audits = audits.filter((a) => verdictOf(a) === filters.verdict);
  const seen = new Set();
  const order = [];
  const placed = new Set(); // sweeps whose group row is already in `order`
  for (const a of audits) {
    seen.add(a.id);
    let entry = rows.get(a.id);
    if (!entry) rows.set(a.id, (entry = row(a)));
    else entry.update(a);
    const member = sweepOf.get(a.id);
    if (!member) { order.push(entry.tr); continue; }
    // A sweep's children on this page follow one row of their sweep, folded until it is opened.
    const group = sweepGroup(member.sweep);
    if (!placed.has(member.sweep.id)) { placed.add(member.sweep.id); order.push(group.tr); group.members = []; }
    group.members.push(a);
    entry.tr.classList.add("sweep-child");
    entry.tr.dataset.sweep = member.sweep.id;
    entry.tr.hidden = !group.open;
    order.push(entry.tr);
  }
  for (const id of placed) groups.get(id).update();
  // An audit this page has not seen may be the child of a sweep submitted since: look the sweeps up again
  // (once per new audit); its row moves under its sweep on the next poll.
  const unseen = audits.filter((a) => !placedOnce.has(a.id));
  unseen.forEach((a) => placedOnce.add(a.id));
  if (unseen.some((a) => !sweepOf.has(a.id)) && placedOnce.size > unseen.length && !sweepsLoading) {
    const shown = list;
    sweepsLoading = loadSweeps().then(() => { if (lastList === shown) render(shown); }).finally(() => { sweepsLoading = null; });
  }
  for (const id of [...rows.keys()]) if (!seen.has(id)) rows.delete(id);
  const current = [...tbody.children];
  if (current.length !== order.length || current.some((tr, i) => tr !== order[i])) tbody.replaceChildren(...order);
  if (!order.length) {
    tbody.replaceChildren(el("tr", {}, el("td", { colspan: 12, class: "muted" },
      "No audits match. ", el("a", { href: "/ui/submit" }, "Submit one"), ".")));
  }
  tokens[pageIndex + 1] = list.next_page_token;
  older.disabled = !list.next_page_token;
  newer.disabled = pageIndex === 0;
  pageLabel.textContent = `page ${pageIndex + 1}`;
  active = list.audits.filter((a) => !TERMINAL.includes(a.state)).length;
  status.textContent = `${audits.length} audit${audits.length === 1 ? "" : "s"} on this page` +
    (active ? ` · ${active} in progress (live)` : "") +
    (filters.verdict ? ` · verdict ${filters.verdict} (succeeded audits only${honoured ? "" : "; filtered on this page"})` : "");
}

/** The row of one sweep: its id, grid and how its children on this page fared; a button folds them. */
function sweepGroup(sweep) {
  let group = groups.get(sweep.id);
  if (group) return group;
  const toggle = el("button", { type: "button", class: "fold", "aria-expanded": "false", "aria-label": `Show the audits of sweep ${sweep.id}` }, "▸");
  const info = el("span", { class: "muted" });
  const tr = el("tr", { class: "sweep-row", "data-sweep-id": sweep.id },
    el("td", { colspan: 12 }, toggle, " ", el("strong", {}, "Sweep "),
      el("a", { class: "mono", href: `/ui/sweeps?id=${encodeURIComponent(sweep.id)}` }, sweep.id.slice(0, 8)),
      sweep.labels && sweep.labels.name ? [" ", el("span", { class: "run-name" }, sweep.labels.name)] : null,
      " · ", `over ${Object.keys(sweep.grid).join(", ")}`, " · ", info));
  group = { tr, open: false, members: [] };
  group.update = () => {
    const done = group.members.filter((a) => TERMINAL.includes(a.state)).length;
    const verdicts = {};
    for (const a of group.members) { const v = verdictOf(a); if (v) verdicts[v] = (verdicts[v] || 0) + 1; }
    info.textContent = `${group.members.length} audit${group.members.length === 1 ? "" : "s"} here, ${done} finished` +
      (Object.keys(verdicts).length ? ` · ${Object.entries(verdicts).map(([k, n]) => `${n} ${k}`).join(", ")}` : "");
  };
  toggle.addEventListener("click", () => {
    group.open = !group.open;
    toggle.setAttribute("aria-expanded", String(group.open));
    toggle.textContent = group.open ? "▾" : "▸";
    for (const tr of tbody.querySelectorAll(`tr[data-sweep="${CSS.escape(sweep.id)}"]`)) tr.hidden = !group.open;
  });
  groups.set(sweep.id, group);
  return group;
}

/** Which audits belong to which sweep (the tenant's newest 200 sweeps). */
async function loadSweeps() {
  let token = null;
  for (let pages = 0; pages < 4; pages++) {
    const q = new URLSearchParams({ page_size: "50" });
    if (token) q.set("page_token", token);
    let list;
    try {
      list = (await api(`/v1/sweeps?${q}`)).data;
    } catch (_) {
      return; // a server without sweeps: nothing is grouped
    }
    for (const s of list.sweeps) for (const c of s.children) sweepOf.set(c.audit_id, { sweep: s, point: c.point, seed: c.seed });
    token = list.next_page_token;
    if (!token) return;
  }
}

/** `name` and `labels` filters → the API's label=key=value (all must match). */
function labelFilters() {
  const out = [];
  if (filters.name) out.push(`name=${filters.name}`);
  for (const part of filters.labels.split(/[,\s]+/)) if (part.includes("=")) out.push(part);
  return out;
}

function listUrl() {
  const q = new URLSearchParams({ page_size: String(PAGE_SIZE), view: "full" });
  const state = filters.verdict ? "SUCCEEDED" : filters.state;
  if (state) q.set("state", state);
  if (filters.kind) q.set("kind", filters.kind);
  if (filters.verdict) q.set("verdict", filters.verdict);
  for (const l of labelFilters()) q.append("label", l);
  if (tokens[pageIndex]) q.set("page_token", tokens[pageIndex]);
  return `/v1/audits?${q}`;
}

function go(index) {
  if (index < 0 || (index > 0 && !tokens[index])) return;
  pageIndex = index;
  if (controller) controller.abort();
  controller = new AbortController();
  rows.clear();
  tbody.replaceChildren();
  // The list has no long-poll: poll it (If-None-Match) every second while an audit on it is in
  // progress, every 5 s otherwise; each audit's bar is redrawn in place.
  watch(listUrl(), render, { signal: controller.signal, longPoll: false, minMs: () => (active ? 1000 : 5000) }).catch((error) => {
    status.textContent = error.message;
  });
}

updateCompare();
await loadSweeps();
updateCompare();
await loadSweeps();
go(0);
