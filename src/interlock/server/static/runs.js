"use strict";
// The runs list: search, filters, sorting, pages; and the form that starts a run.

// -- runs list ---------------------------------------------------------------------------

async function runsPage() {
  page = { name: "runs", filter: page.filter || "" };
  const status = h("select", { onchange: (e) => { page.filter = e.target.value; loadRuns(); } },
    ["", "running", "paused", "delivered", "failed", "cancelled"].map((s) =>
      h("option", { value: s, selected: s === page.filter }, s || "all statuses")));
  const pipeline = h("select", { id: "start-pipeline" });
  const topic = h("input", { id: "start-topic", placeholder: "topic", size: 36 });
  const start = h("button", { type: "submit", disabled: !can("operate"), title: can("operate") ? null : NO_OPERATE }, "Start run");
  const form = h("form", { class: "toolbar", onsubmit: startRun }, pipeline, topic, start);
  view.replaceChildren(
    h("div", { class: "toolbar" }, h("h1", {}, "Runs"), h("span", { class: "spacer" }), status),
    h("div", { class: "panel" }, h("h2", {}, "Start"), form),
    h("div", { class: "panel" }, h("table", {}, h("thead", {}, h("tr", {},
      h("th", {}, "status"), h("th", {}, "run"), h("th", {}, "pipeline"), h("th", {}, "topic"),
      h("th", {}, "phase"), h("th", { class: "num" }, "events"), h("th", { class: "num" }, "cost"),
      h("th", { class: "num" }, "age"))), h("tbody", { id: "runs" }))));
  api("/api/workflows").then((list) => {
    pipeline.replaceChildren(...list.map((w) => h("option", { value: w.pipeline }, w.pipeline)));
    if (!list.length) { start.disabled = true; pipeline.append(h("option", {}, "no workflows registered")); }
    else start.disabled = !can("operate");
  }).catch(() => {});
  await loadRuns();
  let since = null;
  live("/ws/runs", () => since, (message) => {
    if (message.type === "hello") since = message.since;
    if (message.type !== "event") return;
    since = message.id;
    if (page.name === "runs") scheduleReload();
  });
}

let reloadTimer = null;
function scheduleReload() {
  clearTimeout(reloadTimer);
  reloadTimer = setTimeout(loadRuns, 150);
}

async function loadRuns() {
  const query = page.filter ? `?status=${encodeURIComponent(page.filter)}` : "";
  let runs;
  try { runs = await api(`/api/runs${query}`); } catch (error) { toast(error.message, true); return; }
  const body = document.getElementById("runs");
  if (!body) return;
  if (!runs.length) { body.replaceChildren(h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No runs yet."))); return; }
  body.replaceChildren(...runs.map((r) => h("tr", { class: "link", onclick: () => { location.hash = `#/runs/${r.run_id}`; } },
    h("td", {}, pill(r.status)), h("td", { class: "mono" }, h("a", { href: `#/runs/${r.run_id}` }, r.run_id)),
    h("td", {}, r.pipeline), h("td", {}, r.topic.length > 60 ? `${r.topic.slice(0, 60)}…` : r.topic),
    h("td", {}, r.phase || "–"), h("td", { class: "num" }, r.events), h("td", { class: "num" }, money(r.cost_usd)),
    h("td", { class: "num muted", title: r.created_at }, ago(r.created_at)))));
}

async function startRun(event) {
  event.preventDefault();
  const pipeline = document.getElementById("start-pipeline").value;
  const topic = document.getElementById("start-topic").value.trim();
  if (!topic) { toast("give the run a topic", true); return; }
  try {
    const run = await api("/api/runs", { method: "POST", body: JSON.stringify({ pipeline, topic }) });
    location.hash = `#/runs/${run.run_id}`;
  } catch (error) { toast(error.message, true); }
}

