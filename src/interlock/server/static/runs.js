"use strict";
// The runs list: search, filters, sorting and pages (keyset cursors from the server).

const STATUSES = ["running", "waiting", "paused", "delivered", "failed", "cancelled"];
const SORTS = { "created:desc": "newest first", "created:asc": "oldest first", "cost:desc": "highest cost", "cost:asc": "lowest cost" };

// The search, filters and sort outlive a visit to a run: back on the list, they still apply.
const listState = { q: "", status: "", pipeline: "", since: "", until: "", sort: "created:desc", children: "" };

async function runsPage() {
  const keep = listState;
  page = { name: "runs", list: keep, cursors: [""], index: 0, next: null, summaries: new Map() };
  const set = (key) => (e) => { page.list[key] = e.target.value; firstPage(); };
  let typing = null;
  const search = h("input", { id: "run-search", type: "search", value: keep.q, placeholder: "search id, topic, input value", size: 30,
    "aria-label": "Search runs by id, topic or input value",
    oninput: (e) => { page.list.q = e.target.value; clearTimeout(typing); typing = setTimeout(firstPage, 250); } });
  const status = h("select", { id: "filter-status", "aria-label": "Filter by status", onchange: set("status") },
    ["", ...STATUSES].map((s) => h("option", { value: s, selected: s === keep.status }, s || "all statuses")));
  const pipeline = h("select", { id: "filter-pipeline", "aria-label": "Filter by pipeline", onchange: set("pipeline") },
    h("option", { value: "" }, "all pipelines"));
  const since = h("input", { id: "filter-since", type: "date", value: keep.since, "aria-label": "Created on or after", onchange: set("since") });
  const until = h("input", { id: "filter-until", type: "date", value: keep.until, "aria-label": "Created on or before", onchange: set("until") });
  const sort = h("select", { id: "sort", "aria-label": "Sort by", onchange: set("sort") },
    Object.entries(SORTS).map(([v, text]) => h("option", { value: v, selected: v === keep.sort }, text)));
  const children = h("input", { id: "hide-children", type: "checkbox", checked: keep.children === "hide",
    onchange: (e) => { page.list.children = e.target.checked ? "hide" : ""; firstPage(); } });
  const newer = h("button", { id: "page-newer", type: "button", class: "ghost", onclick: () => turn(-1) }, "← Previous");
  const older = h("button", { id: "page-older", type: "button", class: "ghost", onclick: () => turn(1) }, "Next →");
  view.replaceChildren(
    h("div", { class: "toolbar" }, h("h1", {}, "Runs")),
    can("operate") ? startPanel() : null,
    h("section", { class: "panel", "aria-label": "Runs" },
      h("form", { class: "toolbar filters", role: "search", onsubmit: (e) => { e.preventDefault(); firstPage(); } },
        search, status, pipeline, h("label", { class: "muted" }, "from ", since), h("label", { class: "muted" }, "to ", until), sort,
        h("label", { class: "muted", for: "hide-children" }, children, " hide child runs")),
      h("table", { "aria-label": "Runs" }, h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "status"), h("th", { scope: "col" }, "run"), h("th", { scope: "col" }, "pipeline"), h("th", { scope: "col" }, "topic"),
        h("th", { scope: "col" }, "phase"), h("th", { scope: "col", class: "num" }, "events"), h("th", { scope: "col", class: "num" }, "tokens"),
        h("th", { scope: "col", class: "num" }, "cost"), h("th", { scope: "col", class: "num" }, "age"))), h("tbody", { id: "runs" })),
      h("nav", { class: "pager", "aria-label": "Pages" }, newer, h("span", { id: "page-number", class: "muted", "aria-live": "polite" }), older)));
  api("/api/workflows").then((list) => {
    pipeline.append(...list.map((w) => h("option", { value: w.pipeline, selected: w.pipeline === keep.pipeline }, w.pipeline)));
  }).catch(() => {});
  await loadRuns();
  // Run summaries, at most a few frames a second whatever the event rate. Each (re)connection
  // starts with a hello: the list is read again then, so nothing changed while away is missed.
  live("/ws/runs?view=summary", () => null, (message) => {
    if (page.name !== "runs") return;
    if (message.type === "hello") scheduleReload();
    if (message.type === "runs") message.runs.forEach(showSummary);
  });
}

// A run on this page is updated in place; a run not on it (a new one), or one that may now
// belong elsewhere (status filter, cost order), or that ended (its tokens), reloads the page.
function showSummary(s) {
  // The newest summaries are kept (a bounded number): a reload reads a list that may be older
  // than them, and what they say wins where it is newer.
  page.summaries.delete(s.run_id);
  page.summaries.set(s.run_id, s);
  if (page.summaries.size > 1000) page.summaries.delete(page.summaries.keys().next().value);
  const row = document.querySelector(`#runs tr[data-run="${s.run_id}"]`);
  if (!row) { scheduleReload(1000); return; }
  paint(row, s);
  if ((page.list.status && page.list.status !== s.state) || page.list.sort.startsWith("cost") || s.final) scheduleReload(1000);
}

function paint(row, s) {
  const status = row.querySelector(".run-status");
  status.replaceChildren(pill(s.state));
  status.title = waitingTitle(s.waiting);
  row.querySelector(".run-phase").textContent = s.phase || "–";
  row.querySelector(".run-events").textContent = s.seq;
  row.querySelector(".run-cost").textContent = `${s.estimated && s.cost_usd ? "~" : ""}${money(s.cost_usd)}`;
}

function waitingTitle(waiting) {
  if (!waiting) return "";
  if (waiting.for === "slot") return `waiting for a slot of ${waiting.key}`;
  if (waiting.for === "task_slot") return `waiting for a slot of ${waiting.key} for task ${waiting.task}`;
  if (waiting.for === "child") return `waiting for child run ${waiting.child}`;
  if (waiting.for === "spend_cap") return waiting.text;
  if (waiting.for === "signal") return `waiting for signal ${waiting.signal}`;
  return waiting.until ? `waiting until ${waiting.until}` : "waiting";
}

function firstPage() { page.cursors = [""]; page.index = 0; loadRuns(); }

function turn(step) {
  if (step > 0 && !page.next) return;
  if (step > 0) { page.cursors[page.index + 1] = page.next; page.index += 1; }
  else page.index = Math.max(0, page.index - 1);
  loadRuns();
}

// Reloads are debounced by `wait` ms; a later call with a longer wait never postpones one
// already due sooner, so a busy stream reloads at most about once a second, yet does reload.
let reloadTimer = null;
let reloadDue = 0;
function scheduleReload(wait = 150) {
  const due = Date.now() + wait;
  if (reloadTimer && reloadDue <= due) return;
  clearTimeout(reloadTimer);
  reloadDue = due;
  reloadTimer = setTimeout(() => { reloadTimer = null; loadRuns(); }, wait);
}

function listQuery() {
  const l = page.list;
  const [sort, order] = l.sort.split(":");
  const query = new URLSearchParams({ limit: "50", sort, order });
  for (const key of ["q", "status", "pipeline", "since", "until", "children"]) if (l[key]) query.set(key, l[key]);
  if (page.cursors[page.index]) query.set("cursor", page.cursors[page.index]);
  return query.toString();
}

// Loads overlap (a filter changed while a live update reloads): only the latest one asked for
// is shown, so an older answer arriving last cannot undo a newer filter.
let loadsAsked = 0;
async function loadRuns() {
  if (page.name !== "runs") return;
  const asked = ++loadsAsked;
  let answer;
  try { answer = await api(`/api/runs?${listQuery()}`, { withHeaders: true }); } catch (error) { toast(error.message, true); return; }
  if (asked !== loadsAsked) return;
  const body = document.getElementById("runs");
  if (!body) return;
  const runs = answer.body;
  page.next = answer.headers.get("x-next-cursor");
  document.getElementById("page-older").disabled = !page.next;
  document.getElementById("page-newer").disabled = page.index === 0;
  document.getElementById("page-number").textContent = `page ${page.index + 1}`;
  const filtered = Object.entries(page.list).some(([k, v]) => k !== "sort" && v);
  if (!runs.length) { body.replaceChildren(h("tr", {}, h("td", { colspan: 9, class: "empty" }, filtered ? "No run matches." : "No runs yet."))); return; }
  body.replaceChildren(...family(runs).map(([r, depth]) => h("tr", { class: depth ? "link child-row" : "link", "data-run": r.run_id,
    onclick: (e) => { if (e.target.tagName !== "A") location.hash = `#/runs/${r.run_id}`; } },
    h("td", { class: "run-status", title: waitingTitle(r.waiting) }, pill(r.status)), h("td", { class: "mono" }, h("span", { class: "indent" }, "\u00a0\u00a0".repeat(depth)),
      depth ? h("span", { class: "muted", title: `child run of ${r.parent_run} (task ${r.parent_task})` }, "↳ ") : null,
      h("a", { href: `#/runs/${r.run_id}` }, r.run_id),
      r.parent_run && !depth ? h("div", { class: "muted child-of" }, "↳ child of ", h("a", { href: `#/runs/${r.parent_run}` }, r.parent_run)) : null),
    h("td", {}, r.pipeline), h("td", {}, r.topic.length > 60 ? `${r.topic.slice(0, 60)}…` : r.topic),
    h("td", { class: "run-phase" }, r.phase || "–"), h("td", { class: "num run-events" }, r.events), h("td", { class: "num" }, r.tokens ? `${r.estimated ? "~" : ""}${r.tokens}` : "–"),
    h("td", { class: "num run-cost", title: r.estimated ? "estimated: a server reported no token counts" : "" }, `${r.estimated && r.cost_usd ? "~" : ""}${money(r.cost_usd)}`), h("td", { class: "num muted", title: r.created_at }, ago(r.created_at)))));
  for (const row of body.children) {
    const s = page.summaries.get(row.dataset.run);
    if (s && s.seq >= Number(row.querySelector(".run-events").textContent)) paint(row, s);
  }
}

// A child run whose parent is on the page follows it, indented (children of children deeper);
// one whose parent is not says whose child it is. Each run keeps its place in the sort otherwise.
function family(runs) {
  const here = new Set(runs.map((r) => r.run_id));
  const under = new Map();
  for (const r of runs) {
    if (r.parent_run && here.has(r.parent_run)) {
      if (!under.has(r.parent_run)) under.set(r.parent_run, []);
      under.get(r.parent_run).push(r);
    }
  }
  const rows = [];
  const place = (r, depth) => { rows.push([r, depth]); for (const c of under.get(r.run_id) || []) place(c, depth + 1); };
  for (const r of runs) if (!(r.parent_run && here.has(r.parent_run))) place(r, 0);
  return rows;
}
