// Datasets page: upload a JSONL, CSV or JSON file (POST /v1/datasets, multipart) with a progress bar — sent with
// XMLHttpRequest, whose upload events report the bytes sent (fetch has none) — then the tenant's uploaded
// datasets and the built-in ones.
import { api, ApiError, el, fill, fmt, getKey, initPage, login, soft, when } from "./api.js";

const main = initPage();
const file = el("input", { id: "upload-file", name: "file", type: "file", accept: ".jsonl,.csv,.json,application/json,text/csv", required: true });
const name = el("input", { id: "upload-name", name: "name", type: "text", placeholder: "the file's name", size: 28, maxlength: 200 });
const bar = el("progress", { id: "upload-progress", max: 100, value: 0, "aria-label": "Upload progress" });
const barText = el("span", { id: "upload-progress-text", class: "muted", "aria-live": "polite" });
const send = el("button", { type: "submit", class: "primary", id: "upload-submit" }, "Upload");
const stop = el("button", { type: "button", id: "upload-cancel", hidden: true }, "Cancel upload");
const outcome = el("div", { id: "upload-outcome", "aria-live": "polite" });
const form = el("form", { id: "upload-form", class: "panel upload" },
  el("h2", {}, "Upload a dataset"),
  el("p", {}, "One record per row: ", el("code", {}, "{\"text\": …, \"label\": …}"), " for classification or ",
    el("code", {}, "{\"text\": …, \"summary\": …}"), " for generation; an optional ", el("code", {}, "split"),
    " (train or test) on every row. JSONL, CSV with a header row, or a JSON list. A bad row is refused with its line."),
  el("div", { class: "filters" },
    el("div", {}, el("label", { for: "upload-file" }, "File"), file),
    el("div", {}, el("label", { for: "upload-name" }, "Name (optional)"), name)),
  el("div", { class: "actions" }, send, stop),
  el("div", { class: "upload-bar", hidden: true, id: "upload-bar" }, bar, " ", barText),
  outcome);
const listBox = el("section", { id: "datasets-list", "aria-labelledby": "datasets-h" });
main.append(el("h1", {}, "Datasets"), form, listBox);

let xhr = null;

const mib = (n) => `${(n / 1048576).toFixed(n < 10485760 ? 2 : 1)} MiB`;

/** POST the form with upload progress; resolves {status, body}. */
function post(data, onProgress) {
  return new Promise((resolve, reject) => {
    xhr = new XMLHttpRequest();
    xhr.open("POST", "/v1/datasets");
    xhr.setRequestHeader("Accept", "application/json");
    const key = getKey();
    if (key) xhr.setRequestHeader("Authorization", `Bearer ${key}`);
    xhr.upload.addEventListener("progress", (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); });
    xhr.addEventListener("load", () => {
      let body = null;
      try { body = JSON.parse(xhr.responseText); } catch (_) { /* not JSON */ }
      resolve({ status: xhr.status, body });
    });
    xhr.addEventListener("error", () => reject(new Error("the connection failed")));
    xhr.addEventListener("abort", () => reject(new Error("cancelled")));
    xhr.send(data);
  });
}

function showError(status, body) {
  const error = new ApiError(status, body);
  outcome.replaceChildren(el("div", { class: "alert", role: "alert", id: "upload-error" },
    el("strong", {}, `Not stored (${status}): `, error.message),
    error.details.length ? el("ul", { class: "violations" }, error.details.map((d) => el("li", {}, el("code", {}, d.path), ": ", d.message))) : null));
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  const chosen = file.files[0];
  if (!chosen) return;
  const data = new FormData();
  data.append("file", chosen, chosen.name);
  if (name.value.trim()) data.append("name", name.value.trim());
  send.disabled = true;
  stop.hidden = false;
  outcome.replaceChildren();
  document.getElementById("upload-bar").hidden = false;
  bar.value = 0;
  const progress = (loaded, total) => {
    bar.max = total;
    bar.value = loaded;
    bar.dataset.loaded = String(loaded);
    barText.textContent = loaded < total ? `${mib(loaded)} of ${mib(total)} sent (${Math.round((100 * loaded) / total)} %)`
      : `${mib(total)} sent; the server is checking the rows…`;
  };
  progress(0, chosen.size);
  try {
    for (let attempt = 0; attempt < 3; attempt++) {
      const { status, body } = await post(data, progress);
      if (status === 401) { await login(body && body.error ? body.error.message : ""); continue; }
      if (status >= 400) { showError(status, body); break; }
      bar.value = bar.max;
      barText.textContent = `${mib(chosen.size)} sent and stored.`;
      outcome.replaceChildren(el("p", { class: "note-line", id: "upload-done" }, "Stored as ",
        el("code", { id: "upload-id" }, body.id), ` (${body.name}: ${fmt(body.n_train)} train and ${fmt(body.n_test)} test rows, ${body.task}). `,
        "Use it as ", el("code", {}, `"dataset": "${body.id}"`), " in a request: ", el("a", { href: "/ui/submit" }, "Submit an audit"), "."));
      await renderList();
      break;
    }
  } catch (error) {
    outcome.replaceChildren(el("p", { class: "alert", role: "alert", id: "upload-error" }, `Not stored: ${error.message}.`));
  } finally {
    send.disabled = false;
    stop.hidden = true;
    xhr = null;
  }
});
stop.addEventListener("click", () => { if (xhr) xhr.abort(); });

async function renderList() {
  let data;
  try {
    data = (await api("/v1/datasets")).data;
  } catch (error) {
    listBox.replaceChildren(el("p", { class: "alert", role: "alert" }, error.message));
    return;
  }
  const mine = data.datasets || data.items || [];
  fill(listBox,
    el("h2", { id: "datasets-h" }, "Your datasets"),
    mine.length ? el("div", { class: "table-wrap" }, el("table", { id: "datasets" },
      el("caption", {}, "Uploaded, newest first"),
      // Below 720 px the format, labels, size and date columns hide, so the others keep whole words.
      el("thead", {}, el("tr", {}, ["id", "name", "format", "task", "labels", "train", "test", "size", "uploaded"]
        .map((h, i) => el("th", { scope: "col", class: [2, 4, 7, 8].includes(i) ? "hide-narrow" : null }, h)))),
      el("tbody", {}, mine.map((d) => el("tr", { "data-id": d.id },
        el("td", { class: "mono", title: d.id }, d.id.slice(0, 8)), el("td", {}, d.name), el("td", { class: "hide-narrow" }, d.format), el("td", {}, d.task),
        el("td", { class: "hide-narrow" }, (d.labels || []).join(", ") || "—"), el("td", { class: "num" }, fmt(d.n_train)), el("td", { class: "num" }, fmt(d.n_test)),
        el("td", { class: "num hide-narrow" }, mib(d.size_bytes)), el("td", { class: "hide-narrow" }, when(d.created_at)))))))
      : el("p", { class: "muted", id: "datasets-none" }, "None yet: upload one above."),
    Array.isArray(data.builtins) ? [el("h2", {}, "Built in"), el("div", { class: "table-wrap" }, el("table", { id: "builtins" },
      el("thead", {}, el("tr", {}, ["name", "available", "source or reason"].map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, data.builtins.map((b) => el("tr", {}, el("td", { class: "mono" }, soft(b.name)), el("td", {}, b.available ? "yes" : "no"),
        el("td", {}, b.available ? b.source ?? "—" : b.reason ?? "—"))))))] : null);
}

await renderList();
