// Submit page: start an audit from an example or an edited JSON request; the API's 422 details are
// listed beside the editor, each naming its field and selecting that field's line in the request.
import { api, ApiError, el, initPage } from "./api.js";

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
const status = el("p", { class: "muted", id: "submit-status", "aria-live": "polite" });
const datasets = el("div", { id: "datasets" });

const form = el("form", { id: "submit-form", novalidate: true },
  el("div", {}, el("label", { for: "example" }, "Start from an example"), el("br"), picker),
  el("p", {}, el("label", { for: "request" }, "Request (JSON)"), el("br"),
    el("span", { class: "muted", id: "request-help" }, "The body of POST /v1/audits; its kind picks the audit.")),
  editor,
  el("div", { class: "actions" }, submit),
  status,
);
main.append(el("h1", {}, "Submit an audit"),
  el("div", { class: "submit-grid" }, form, el("aside", { "aria-label": "Problems and datasets" }, problemsBox, datasets)));

function setBody(body) {
  editor.value = JSON.stringify(body, null, 2);
  clearProblems();
}

picker.addEventListener("change", () => {
  if (picker.value !== "") setBody(examples[Number(picker.value)].body);
});

function clearProblems() {
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

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  clearProblems();
  let body;
  try {
    body = JSON.parse(editor.value);
  } catch (error) {
    showProblems([{ path: "$", message: `Not valid JSON: ${error.message}` }]);
    return;
  }
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
    setBody(a.request);
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
