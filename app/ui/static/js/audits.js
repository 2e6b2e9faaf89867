// Audits page: the tenant's audits newest first, filters, paging, live progress (no reloads), cancel.
import {
  api, claimedEpsilon, el, fmt, initPage, OUTCOMES, progressBar, stateBadge, TERMINAL, verdictBadge, verdictOf, watch, when,
} from "./api.js";

const STATES = ["PENDING", "RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"];
const PAGE_SIZE = 20;

const main = initPage();
const params = new URLSearchParams(location.search);
const filters = { state: params.get("state") || "", kind: params.get("kind") || "", verdict: params.get("verdict") || "" };
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
);
const status = el("p", { class: "muted", id: "list-status", "aria-live": "polite" });
const tbody = el("tbody");
const table = el("table", { id: "audits" },
  el("caption", {}, "Your audits, newest first"),
  el("thead", {}, el("tr", {},
    ["Audit", "Created", "Kind", "Dataset", "Model", "Mechanism", "ε claimed", "State", "Progress", "Verdict", ""]
      .map((h, i) => el("th", { scope: "col", class: [1, 3, 4, 5].includes(i) ? "hide-narrow" : i === 6 ? "num hide-narrow" : null }, h)))),
  tbody);
const newer = el("button", { type: "button", id: "newer", onclick: () => go(pageIndex - 1) }, "← Newer");
const older = el("button", { type: "button", id: "older", onclick: () => go(pageIndex + 1) }, "Older →");
const pageLabel = el("span", { class: "muted" });

main.append(
  el("h1", {}, "Audits"),
  el("p", {}, el("a", { class: "button primary", href: "/ui/submit" }, "Submit an audit")),
  form, status, el("div", { class: "table-wrap" }, table),
  el("div", { class: "pager" }, newer, pageLabel, older),
);

form.addEventListener("change", () => {
  filters.state = form.elements["f-state"].value;
  filters.kind = form.elements["f-kind"].value;
  filters.verdict = form.elements["f-verdict"].value;
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

function row(audit) {
  const r = audit.request || {};
  const mech = r.mechanism ? r.mechanism.name + (r.mechanism.bug ? ` (bug: ${r.mechanism.bug})` : "") : "—";
  const progress = progressBar(audit);
  const stateCell = el("td");
  const verdictCell = el("td", { class: "cell-verdict" });
  const actionCell = el("td", { class: "cell-action" });
  const tr = el("tr", { "data-id": audit.id },
    el("td", {}, el("a", { href: `/ui/audits/${encodeURIComponent(audit.id)}`, class: "mono", title: audit.id, "aria-label": `audit ${audit.id}` }, audit.id.slice(0, 8))),
    el("td", { class: "hide-narrow" }, when(audit.created_at)),
    el("td", {}, audit.kind),
    el("td", { class: "hide-narrow" }, r.dataset ?? "—"),
    el("td", { class: "hide-narrow" }, r.model ?? "—"),
    el("td", { class: "hide-narrow" }, mech),
    el("td", { class: "num hide-narrow" }, fmt(claimedEpsilon(audit))),
    stateCell,
    el("td", { class: "cell-progress" }, progress),
    verdictCell,
    actionCell,
  );
  const update = (a) => {
    stateCell.replaceChildren(stateBadge(a.state));
    progress.update(a);
    verdictCell.replaceChildren(verdictBadge(a));
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

function render(list) {
  // The verdict filter is asked of the server (?verdict=); a server that does not filter by verdict sends
  // every audit of the page, so the page is filtered here too (a no-op when the server did it).
  const honoured = !filters.verdict || list.audits.every((a) => verdictOf(a) === filters.verdict);
  let audits = list.audits;
  if (filters.verdict) audits = audits.filter((a) => verdictOf(a) === filters.verdict);
  const seen = new Set();
  const order = audits.map((a) => {
    seen.add(a.id);
    let entry = rows.get(a.id);
    if (!entry) rows.set(a.id, (entry = row(a)));
    else entry.update(a);
    return entry.tr;
  });
  for (const id of [...rows.keys()]) if (!seen.has(id)) rows.delete(id);
  const current = [...tbody.children];
  if (current.length !== order.length || current.some((tr, i) => tr !== order[i])) tbody.replaceChildren(...order);
  if (!order.length) {
    tbody.replaceChildren(el("tr", {}, el("td", { colspan: 11, class: "muted" },
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

function listUrl() {
  const q = new URLSearchParams({ page_size: String(PAGE_SIZE), view: "full" });
  const state = filters.verdict ? "SUCCEEDED" : filters.state;
  if (state) q.set("state", state);
  if (filters.kind) q.set("kind", filters.kind);
  if (filters.verdict) q.set("verdict", filters.verdict);
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

go(0);
