// Submit page: start an audit from an example or an edited JSON request; the API's 422 details are
// listed beside the editor, each naming its field and selecting that field's line in the request.
// "Plan" asks POST /v1/audits/plan for the same body and shows what the audit would cost and could
// resolve (calls, tokens, expected time, detectable ε, trials needed) without running it.
import { api, ApiError, compact, el, fmt, initPage } from "./api.js";

const main = initPage();
const params = new URLSearchParams(location.search);
const { data } = await api("/ui/examples.json");
const examples = data.examples;

const picker = el("select", { id: "example", name: "example" },
  el("option", { value: "" }, "— choose an example —"),
  examples.map((ex, i) => el("option", { value: String(i) }, ex.name)));
const editor = el("textarea", { id: "request", name: "request", spellcheck: "false", "aria-describedby": "request-help problems-h", autocomplete: "off" });
const problems = el("ul", { class: "violations", id: "problems" });
const problemsBox = el("div", { "aria-live": "assertive", id: "problems-box" }, el("h2", { id: "problems-h" }, "Problems"), problems);
problemsBox.hidden = true;
const submit = el("button", { type: "submit", class: "primary", id: "submit" }, "Submit audit");
const planButton = el("button", { type: "button", id: "plan" }, "Plan");
const planPanel = el("section", { id: "plan-panel", "aria-live": "polite", "aria-labelledby": "plan-h" });
planPanel.hidden = true;
const status = el("p", { class: "muted", id: "submit-status", "aria-live": "polite" });
const datasets = el("div", { id: "datasets" });

const form = el("form", { id: "submit-form", novalidate: true },
  el("div", {}, el("label", { for: "example" }, "Start from an example"), el("br"), picker),
  el("p", {}, el("label", { for: "request" }, "Request (JSON)"), el("br"),
    el("span", { class: "muted", id: "request-help" }, "The body of POST /v1/audits; its kind picks the audit.")),
  editor,
  el("div", { class: "actions" }, submit, planButton),
  status,
);
main.append(el("h1", {}, "Submit an audit"),
  el("div", { class: "submit-grid" }, form,
    el("aside", { "aria-label": "Plan, problems and datasets" }, planPanel, problemsBox, datasets)));

function setBody(body) {
  editor.value = JSON.stringify(body, null, 2);
  clearProblems();
}

picker.addEventListener("change", () => {
  if (picker.value !== "") setBody(examples[Number(picker.value)].body);
});

function clearProblems() {
  planPanel.hidden = true;
  problems.replaceChildren();
  problemsBox.hidden = true;
  editor.removeAttribute("aria-invalid");
}

/** The character range of the line holding the last key of a JSON path like $.mechanism.epsilon. */
function locate(path) {
  const text = editor.value;
  const keys = (path || "").replace(/^\$\.?/, "").split(/\.|\[\d+\]/).filter(Boolean);
  let from = 0;
  for (const key of keys) {
    const at = text.indexOf(`"${key}"`, from);
    if (at < 0) break;
    from = at;
  }
  if (!keys.length || from === 0) return null;
  const start = text.lastIndexOf("\n", from) + 1;
  let end = text.indexOf("\n", from);
  if (end < 0) end = text.length;
  return { start, end, line: text.slice(0, start).split("\n").length };
}

function showProblems(details, message) {
  problems.replaceChildren();
  const list = details.length ? details : [{ path: "$", message }];
  for (const d of list) {
    const where = locate(d.path);
    const item = el("li", { "data-path": d.path },
      el("code", {}, d.path), where ? ` (line ${where.line})` : "", ": ", d.message);
    if (where) {
      const go = el("button", { type: "button", class: "link" }, "Show");
      go.addEventListener("click", () => { editor.focus(); editor.setSelectionRange(where.start, where.end); });
      item.append(" ", go);
    }
    problems.append(item);
  }
  problemsBox.hidden = false;
  editor.setAttribute("aria-invalid", "true");
  const first = list.map((d) => locate(d.path)).find(Boolean);
  if (first) editor.setSelectionRange(first.start, first.end);
}

/** The editor's request, or null after listing why it is not JSON. */
function requestBody() {
  clearProblems();
  try {
    return JSON.parse(editor.value);
  } catch (error) {
    showProblems([{ path: "$", message: `Not valid JSON: ${error.message}` }]);
    return null;
  }
}

/** One row of the plan: its figure as text, the raw value kept in data-value. */
function planRow(id, label, value, text) {
  return [el("dt", {}, label), el("dd", { id, "data-value": value === null || value === undefined ? "" : String(value) }, text)];
}

function seconds(s) {
  if (s === null || s === undefined) return "unknown: no finished audit of this model or endpoint here yet";
  return s < 120 ? `${fmt(s, { digits: 3 })} s` : `${fmt(s / 60, { digits: 3 })} min`;
}

function showPlan(plan) {
  const calls = plan.calls || {}, tokens = plan.tokens || {}, time = plan.time || {}, power = plan.power || {};
  const total = (calls.model || 0) + (calls.endpoint || 0);
  const where = calls.endpoint ? `${fmt(calls.endpoint)} endpoint` : `${fmt(calls.model || 0)} model`;
  const callText = total === 0 ? "none: nothing is called" : `${where} calls${calls.exact ? " (exact)" : " (at most)"}`;
  const tokenText = tokens.prompt === null || tokens.prompt === undefined
    ? "not counted (no tokenizer for this model or endpoint)"
    : `${fmt(tokens.prompt)} prompt · ${fmt(tokens.generated)} generated`;
  const detectable = power.epsilon_detectable;
  const detectText = detectable === null || detectable === undefined
    ? (power.note || "—")
    : `ε ≥ ${fmt(detectable, { digits: 3 })}${typeof power.trials === "number" ? ` at ${fmt(power.trials)} trials` : ""}`;
  const needed = power.trials_needed;
  const neededText = needed === null || needed === undefined
    ? "— (no claim to resolve, or none within this service's maximum trials)"
    : `${fmt(needed)} trials${power.llm_calls_needed ? ` · ${fmt(power.llm_calls_needed)} llm_calls` : ""}`;
  planPanel.replaceChildren(
    el("h2", { id: "plan-h" }, `Plan (${plan.kind})`),
    el("dl", { class: "kv" },
      planRow("plan-calls", "Calls", total, callText),
      planRow("plan-tokens", "Tokens", tokens.prompt, tokenText),
      planRow("plan-time", "Expected time", time.expected_seconds, seconds(time.expected_seconds)),
      planRow("plan-detectable", "Detectable ε", detectable, detectText),
      planRow("plan-needed", "Trials needed", needed, neededText)),
    time.basis ? el("p", { class: "muted" }, `Time from ${time.basis}.`) : "",
    (plan.notes || []).length ? el("ul", { class: "muted", id: "plan-notes" }, plan.notes.map((n) => el("li", {}, n))) : "");
  planPanel.hidden = false;
}

planButton.addEventListener("click", async () => {
  const body = requestBody();
  if (body === null) return;
  planButton.disabled = true;
  status.textContent = "Planning… (a worker rehearses the audit; seconds)";
  try {
    const { data: plan } = await api("/v1/audits/plan", { method: "POST", body });
    showPlan(plan);
    status.textContent = "Planned: nothing was run or stored.";
  } catch (error) {
    status.textContent = error instanceof ApiError ? `${error.status}: ${error.message}` : error.message;
    if (error instanceof ApiError) showProblems(error.details, error.message);
  } finally {
    planButton.disabled = false;
  }
});

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const body = requestBody();
  if (body === null) return;
  submit.disabled = true;
  status.textContent = "Submitting…";
  try {
    const { data: audit } = await api("/v1/audits", { method: "POST", body });
    status.textContent = `Submitted ${audit.id}; opening it…`;
    location.assign(`/ui/audits/${encodeURIComponent(audit.id)}`);
  } catch (error) {
    status.textContent = error instanceof ApiError ? `${error.status}: ${error.message}` : error.message;
    if (error instanceof ApiError) showProblems(error.details, error.message);
    submit.disabled = false;
  }
});

async function showDatasets() {
  try {
    const { data: d } = await api("/v1/datasets");
    const builtins = d.builtins || [];
    // Say beside each example whether its dataset can be loaded here (a 422 names ICLAUDIT_DATA_DIR).
    const unavailable = new Set(builtins.filter((b) => !b.available).map((b) => b.name));
    examples.forEach((ex, i) => {
      const ds = ex.body && ex.body.dataset;
      if (ds && unavailable.has(ds)) picker.options[i + 1].textContent = `${ex.name} (needs ${ds}: not on this server)`;
    });
    datasets.replaceChildren(el("h2", {}, "Datasets"),
      builtins.length ? el("ul", {}, builtins.map((b) => el("li", {}, el("code", {}, b.name), b.available ? " — available" : ` — unavailable: ${b.reason}`))) : "",
      (d.datasets || []).length ? el("p", {}, "Your uploads: ", d.datasets.map((u) => `${u.name} (${u.id})`).join(", ")) : "");
  } catch (_) {
    datasets.replaceChildren();
  }
}

if (params.get("from")) {
  try {
    const { data: a } = await api(`/v1/audits/${encodeURIComponent(params.get("from"))}`);
    setBody(compact(a.request));
    status.textContent = `The request of audit ${a.id}; edit and submit.`;
  } catch (error) {
    status.textContent = error.message;
  }
} else {
  const first = examples.findIndex((e) => e.name === "bound-counts.json");
  picker.value = String(first >= 0 ? first : 0);
  setBody(examples[Number(picker.value)].body);
}
showDatasets();
