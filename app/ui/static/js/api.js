// What every page shares: calling the API with the session's key, the login dialog, watching an audit
// live (ETag long-poll), building DOM safely (text nodes only: data never becomes markup), formatting.

const KEY = "iclaudit.apiKey";
export const TERMINAL = ["SUCCEEDED", "FAILED", "CANCELLED"];
export const LONG_POLL = "30s";

export function getKey() {
  return sessionStorage.getItem(KEY);
}

function setKey(key) {
  if (key) sessionStorage.setItem(KEY, key);
  else sessionStorage.removeItem(KEY);
  showWho();
}

let loginPending = null;

/** Ask for an API key (once per tab); resolves when the user has entered one. */
export function login(message) {
  if (loginPending) return loginPending;
  const dialog = document.getElementById("login");
  const form = document.getElementById("login-form");
  const input = document.getElementById("login-key");
  document.getElementById("login-error").textContent = message || "";
  loginPending = new Promise((resolve) => {
    const onSubmit = (event) => {
      event.preventDefault();
      const key = input.value.trim();
      if (!key) return;
      form.removeEventListener("submit", onSubmit);
      setKey(key);
      input.value = "";
      dialog.close();
      loginPending = null;
      resolve(key);
    };
    form.addEventListener("submit", onSubmit);
    dialog.addEventListener("cancel", (event) => event.preventDefault());
  });
  dialog.showModal();
  input.focus();
  return loginPending;
}

export class ApiError extends Error {
  constructor(status, body) {
    const error = (body && body.error) || {};
    super(error.message || `HTTP ${status}`);
    this.status = status;
    this.details = error.details || [];
    this.code = error.status;
  }
}

/**
 * fetch() against the API with `Authorization: Bearer <key>` when a key is held. A 401 opens the login
 * dialog and retries. Returns {status, data, etag, response}; throws ApiError for other 4xx/5xx.
 */
export async function api(path, { method = "GET", body, headers = {}, raw = false, signal } = {}) {
  for (let attempt = 0; ; attempt++) {
    const h = { Accept: raw ? "*/*" : "application/json", ...headers };
    const key = getKey();
    if (key) h.Authorization = `Bearer ${key}`;
    let payload;
    if (body !== undefined) {
      h["Content-Type"] = "application/json";
      payload = typeof body === "string" ? body : JSON.stringify(body);
    }
    const response = await fetch(path, { method, headers: h, body: payload, signal, cache: "no-store" });
    if (response.status === 401 && attempt < 5) {
      let message = "";
      try {
        message = (await response.json()).error.message;
      } catch (_) {
        /* not JSON */
      }
      // Sent before a key was entered (another request's login, perhaps while this answer was being
      // read): retry with the key now held, rather than open the dialog again after the user closed it.
      if (getKey() && getKey() !== key) continue;
      await login(key ? `${message} Enter another key.` : "");
      continue;
    }
    const etag = response.headers.get("ETag");
    if (response.status === 304) return { status: 304, data: null, etag, response };
    if (raw) {
      if (!response.ok) throw new ApiError(response.status, await response.json().catch(() => null));
      return { status: response.status, data: await response.blob(), etag, response };
    }
    const data = response.status === 204 ? null : await response.json().catch(() => null);
    if (!response.ok) throw new ApiError(response.status, data);
    return { status: response.status, data, etag, response };
  }
}

const sleep = (ms, signal) =>
  new Promise((resolve) => {
    const t = setTimeout(resolve, ms);
    if (signal) signal.addEventListener("abort", () => { clearTimeout(t); resolve(); }, { once: true });
  });

/**
 * Watch a resource until `done(data)`: GET with If-None-Match and `wait` (the server holds the request
 * until the representation changes, 304 when it does not within the wait); a server that answers at once
 * is polled at most every `minMs`. Calls onUpdate(data) on every new representation.
 */
export async function watch(path, onUpdate, { done = () => false, signal, minMs = 700, longPoll = true } = {}) {
  let etag = null;
  for (;;) {
    if (signal && signal.aborted) return;
    const started = performance.now();
    try {
      const sep = path.includes("?") ? "&" : "?";
      const url = etag && longPoll ? `${path}${sep}wait=${LONG_POLL}` : path;
      const r = await api(url, { headers: etag ? { "If-None-Match": etag } : {}, signal });
      if (r.status !== 304) {
        etag = r.etag;
        onUpdate(r.data);
        if (done(r.data)) return;
      }
    } catch (error) {
      if (signal && signal.aborted) return;
      if (error instanceof ApiError && error.status === 404) throw error;
      await sleep(2000, signal); // network blip or 5xx: back off, keep watching
    }
    const elapsed = performance.now() - started;
    const least = typeof minMs === "function" ? minMs() : minMs;
    if (elapsed < least) await sleep(least - elapsed, signal);
    while (document.hidden && !(signal && signal.aborted)) await sleep(1000, signal);
  }
}

/** Build an element: el("a", {href: "/x", class: "y"}, "text", childNode). Strings become text nodes. */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "class") node.className = v;
    else if (k === "style") node.style.cssText = v; // CSSOM, which a Content-Security-Policy allows
    else node.setAttribute(k, v === true ? "" : String(v));
  }
  node.append(...nodes(children));
  return node;
}

/** Children as el() takes them (nested arrays, strings; null, undefined and false left out) → DOM nodes. */
function nodes(children) {
  return children.flat(Infinity).filter((c) => c !== null && c !== undefined && c !== false)
    .map((c) => (c instanceof Node ? c : document.createTextNode(String(c))));
}

/** Replace `node`'s children as el() builds them: a child left out is never printed as "null". */
export function fill(node, ...children) {
  node.replaceChildren(...nodes(children));
  return node;
}

/**
 * Text that may wrap after "_", "/", ":" or "=", or a "." before a letter (a <wbr> there): a long identifier such
 * as black_box.epsilon_lower breaks between its parts, never inside a word (nor inside a number).
 */
export function soft(text) {
  return String(text).split(/(?<=[_/:=]|\.(?=\p{L}))/u).flatMap((part, i) => (i ? [el("wbr"), part] : [part]));
}

/** A JSON value without its null members (recursively): a request as a person reads it, defaults left out. */
export function compact(value) {
  if (Array.isArray(value)) return value.map(compact);
  if (value === null || typeof value !== "object") return value;
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== null && v !== undefined).map(([k, v]) => [k, compact(v)]));
}

/** A number for people: 4 significant digits, ∞ for an unbounded estimate, — for none. Never "None". */
export function fmt(value, { unbounded = false, digits = 4 } = {}) {
  if (value === null || value === undefined) return unbounded ? "∞" : "—";
  if (typeof value === "boolean") return value ? "yes" : "no";
  if (typeof value !== "number") return String(value);
  if (!Number.isFinite(value)) return value > 0 ? "∞" : "−∞";
  if (Number.isInteger(value)) return value.toLocaleString("en-US");
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e6)) return value.toExponential(2);
  return Number(value.toPrecision(digits)).toString();
}

export function eta(seconds) {
  if (seconds === null || seconds === undefined) return "ETA –";
  const s = Math.max(0, Math.round(seconds));
  return `ETA ${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}`;
}

export function stateBadge(state) {
  return el("span", { class: `badge state-${state}`, "data-state": state }, state);
}

/**
 * The ε the audited system claims, or null when it claims none. A finished result says it best (mia's
 * epsilon_theory is null for a mechanism without noise even though the request carries a default ε; bound's
 * epsilon_claimed); before that, the server's epsilon_claimed, then the request's own field.
 */
export function claimedEpsilon(audit) {
  const res = audit.result;
  if (res && typeof res === "object") {
    for (const k of ["epsilon_theory", "epsilon_claimed"]) if (k in res) return res[k];
  }
  if (audit.epsilon_claimed !== undefined) return audit.epsilon_claimed;
  const r = audit.request || {};
  return r.epsilon ?? r.target_epsilon ?? null;
}

/**
 * The ε the verdict measured, for a cell: its largest lower bound, ∞ when the data admit no finite bound, — until
 * the audit succeeded; "not measured" for an inconclusive audit that shows no bound above 0 (a 0 beside
 * "inconclusive" reads as "no leak", which such an audit could not have seen).
 */
export function measuredEpsilon(audit) {
  if (audit.state !== "SUCCEEDED") return "—";
  const value = audit.verdict ? audit.verdict.epsilon_lower ?? null : null;
  const res = audit.result || {};
  const unbounded = value === null && ["black_box", "white_box"].some((t) => res[t] && (res[t].epsilon_lower_unbounded || res[t].epsilon_empirical_unbounded));
  if (verdictOf(audit) === "inconclusive" && !unbounded && !(value > 0)) return "not measured";
  return fmt(value, { unbounded });
}

/** The four outcomes of a verdict (app/audit/verdict.py), in the order the filter offers them. */
export const OUTCOMES = ["violation", "leak", "inconclusive", "consistent"];

/** What each outcome means, for a badge's tooltip and screen readers. */
export const OUTCOME_MEANING = {
  violation: "a measured lower bound exceeds the claimed ε",
  leak: "nothing is claimed and the measured lower bound exceeds max_epsilon",
  inconclusive: "the audit could not have shown a violation or a leak",
  consistent: "the audit could have seen a violation and saw none",
};

/**
 * The verdict's outcome (violation, leak, inconclusive, consistent), or null when there is none: the audit
 * has not succeeded, its kind measures no leakage (iclinf), or its result was stored before verdicts had
 * four outcomes (then only a stored violation is read as one; its `false` is not read as a pass).
 */
export function verdictOf(audit) {
  if (audit.state && audit.state !== "SUCCEEDED") return null;
  const digest = audit.verdict && typeof audit.verdict === "object" ? audit.verdict.outcome : undefined;
  const outcome = digest ?? (audit.result ? audit.result.verdict : undefined);
  if (OUTCOMES.includes(outcome)) return outcome;
  const violation = audit.verdict ? audit.verdict.violation : audit.result ? audit.result.violation : undefined;
  return violation === true ? "violation" : null;
}

/** A badge naming the outcome: red for violation and leak, amber for inconclusive, green for consistent. */
export function outcomeBadge(outcome, attrs = {}) {
  if (!outcome) return el("span", { class: "badge verdict-none", "data-verdict": "none", ...attrs }, "no verdict");
  return el("span", { class: `badge verdict-${outcome}`, "data-verdict": outcome, title: OUTCOME_MEANING[outcome], ...attrs }, outcome);
}

export function verdictBadge(audit) {
  if (audit.state !== "SUCCEEDED") return el("span", { class: "muted", "data-verdict": "pending" }, "—");
  return outcomeBadge(verdictOf(audit));
}

/** A progress bar with stage and ETA; update() redraws it in place. */
export function progressBar(audit) {
  const fill = el("span");
  const bar = el("div", { class: "bar", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100 }, fill);
  const label = el("div", { class: "label" });
  const node = el("div", { class: "progress" }, bar, label);
  node.update = (a) => {
    const p = a.progress || { stage: "", fraction: 0, eta_seconds: null, message: "" };
    const pct = Math.round(100 * (a.state === "SUCCEEDED" ? 1 : p.fraction));
    fill.style.width = `${pct}%`;
    bar.setAttribute("aria-valuenow", pct);
    bar.setAttribute("aria-label", `audit ${a.id}: ${p.stage} ${pct}%`);
    node.dataset.fraction = String(a.state === "SUCCEEDED" ? 1 : p.fraction);
    node.dataset.stage = p.stage;
    const running = !TERMINAL.includes(a.state);
    label.textContent = running
      ? `${p.stage} ${pct}% · ${eta(p.eta_seconds)}${p.message ? ` · ${p.message}` : ""}`
      : a.state === "SUCCEEDED" ? "done" : a.state.toLowerCase();
  };
  node.update(audit);
  return node;
}

const datasetLabels = new Map();
let datasetLabelsLoading = null;

/** A request's dataset as people name it: an upload as "name vN" (its id in the title), a built-in name as
 * it is. The caller's uploads are read once per page (GET /v1/datasets); spans made before that show the
 * upload's id cut to 8 characters, as audit ids are (a whole 32-hex id would widen its column), and are
 * relabelled. */
export function datasetName(id) {
  if (!id) return "—";
  if (!datasetLabelsLoading) datasetLabelsLoading = loadDatasetLabels();
  const shown = datasetLabels.get(id) || (/^[0-9a-f]{32}$/.test(id) ? `${id.slice(0, 8)}…` : id);
  return el("span", { class: "dataset-name", "data-dataset-id": id, title: id }, soft(shown));
}

async function loadDatasetLabels() {
  try {
    let token = null;
    do {
      const query = `page_size=500${token ? `&page_token=${encodeURIComponent(token)}` : ""}`;
      const { data } = await api(`/v1/datasets?${query}`);
      for (const d of data.datasets || []) datasetLabels.set(d.id, `${d.name} v${d.version}`);
      token = data.next_page_token;
    } while (token);
  } catch {
    return; // the ids stay shown
  }
  for (const node of document.querySelectorAll("[data-dataset-id]")) {
    const label = datasetLabels.get(node.dataset.datasetId);
    if (label) node.textContent = label;
  }
}

export function when(iso) {
  if (!iso) return "—";
  const d = new Date(iso);
  return d.toLocaleString(undefined, { dateStyle: "short", timeStyle: "medium" });
}

/** Show who is signed in (a key is held) with a sign-out button; mark the current nav link. */
export function showWho() {
  const who = document.getElementById("who");
  if (!who) return;
  who.replaceChildren();
  if (getKey()) {
    who.append(
      "API key held for this tab",
      el("button", { type: "button", onclick: () => { setKey(null); location.reload(); } }, "Sign out"),
    );
  }
}

export function initPage() {
  const page = document.body.dataset.page;
  const link = document.querySelector(`nav a[data-nav="${page === "audit" || page === "compare" ? "audits" : page}"]`);
  if (link) link.setAttribute("aria-current", "page");
  showWho();
  // The Sweeps link shows only when this server has sweeps and this tenant has one.
  const sweepsLink = document.querySelector('nav a[data-nav="sweeps"]');
  if (sweepsLink && page !== "sweeps") {
    sweepsLink.parentElement.hidden = true;
    api("/v1/sweeps?page_size=1")
      .then((r) => { if (r.data && r.data.sweeps && r.data.sweeps.length) sweepsLink.parentElement.hidden = false; })
      .catch(() => {});
  }
  const main = document.getElementById("main");
  main.replaceChildren();
  return main;
}

/** Save a Blob or text as a file. */
export function download(name, content, type = "application/octet-stream") {
  const blob = content instanceof Blob ? content : new Blob([content], { type });
  const url = URL.createObjectURL(blob);
  const a = el("a", { href: url, download: name });
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 10000);
}

/** Nested JSON → [dotted.path, scalar] rows (list items indexed), like `iclaudit result --format csv`. */
export function flatten(value, prefix = "") {
  if (value !== null && typeof value === "object") {
    const rows = [];
    for (const [k, v] of Object.entries(value)) rows.push(...flatten(v, prefix ? `${prefix}.${k}` : k));
    return rows;
  }
  return [[prefix, value]];
}

export function toCsv(rows) {
  const cell = (v) => {
    let s = v === null || v === undefined ? "" : String(v);
    // CSV injection (OWASP), as app/csv_cells.py: a text cell starting with = + - @ tab or CR gets a leading
    // quote so a spreadsheet shows it instead of running it; numbers (and text that is just a number) stay.
    if (typeof v === "string" && /^[=+\-@\t\r]/.test(s) && !/^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?$/.test(s)) s = `'${s}`;
    return /[",\n\r]/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
  };
  return ["field,value", ...rows.map(([k, v]) => `${cell(k)},${cell(v)}`)].join("\n") + "\n";
}
