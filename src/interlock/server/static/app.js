"use strict";
// The dashboard: a runs list and a run page, kept current over the server's WebSocket streams.

const view = document.getElementById("view");
const conn = document.getElementById("conn");
let token = sessionStorage.getItem("interlock-token") || "";
let socket = null;
let page = { name: null };
let me = { scopes: [], auth: false };  // who the token names; buttons follow its scopes
const NO_OPERATE = "your token has the read scope only: acting needs the operate scope";

function can(scope) { return me.scopes.includes(scope); }

async function loadMe() {
  try { me = await api("/api/me"); } catch (error) { me = { scopes: [], auth: true }; }
}

function toast(text, error = false) {
  const box = document.getElementById("toast");
  box.textContent = text;
  box.className = error ? "toast error" : "toast";
  box.hidden = false;
  clearTimeout(toast.timer);
  toast.timer = setTimeout(() => { box.hidden = true; }, 4000);
}

async function api(path, options = {}) {
  const headers = { ...(options.headers || {}) };
  if (token) headers.Authorization = `Bearer ${token}`;
  if (options.body) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...options, headers });
  if (response.status === 401) askToken();
  const type = response.headers.get("content-type") || "";
  const body = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) throw new Error(body.error ? body.error.message : `HTTP ${response.status}`);
  return body;
}

function askToken() {
  const dialog = document.getElementById("token-dialog");
  if (!dialog.open) dialog.showModal();
}
document.getElementById("token-btn").addEventListener("click", askToken);
document.getElementById("token-dialog").addEventListener("close", (event) => {
  if (event.target.returnValue === "ok") {
    token = document.getElementById("token-input").value.trim();
    sessionStorage.setItem("interlock-token", token);
    route();
  }
});

// One live connection per page; reconnects resume after the last event seen (no gaps).
function live(path, cursor, onMessage) {
  if (socket) { socket.onclose = null; socket.close(); }
  const scheme = location.protocol === "https:" ? "wss" : "ws";
  const protocols = token ? ["interlock", `bearer.${token}`] : ["interlock"];
  const open = () => {
    const since = cursor() === null ? "" : `?since=${cursor()}`;
    const ws = new WebSocket(`${scheme}://${location.host}${path}${since}`, protocols);
    socket = ws;
    ws.onopen = () => { conn.textContent = "live"; conn.className = "conn live"; };
    ws.onmessage = (event) => {
      const message = JSON.parse(event.data);
      if (message.type === "error") { toast(message.error.message, true); if (message.error.code.includes("token") || message.error.code === "unauthorized") askToken(); return; }
      onMessage(message);
    };
    ws.onclose = (event) => {
      if (socket !== ws) return;
      if (event.code === 1000) { conn.textContent = "ended"; conn.className = "conn"; return; }
      conn.textContent = "reconnecting…"; conn.className = "conn down";
      if (event.code !== 4401 && event.code !== 4403) setTimeout(() => { if (socket === ws) open(); }, 1000);
    };
  };
  open();
}

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

// -- one run -----------------------------------------------------------------------------

async function runPage(runId) {
  page = { name: "run", runId, lastSeq: 0, events: [], output: null, streams: {}, note: "", toastAfter: 0 };
  view.replaceChildren(h("div", { class: "empty" }, "Loading…"));
  try { await loadRun(); } catch (error) { view.replaceChildren(h("div", { class: "panel" }, error.message)); return; }
  // Only what happens from now on pops up: the history replayed below is old news.
  page.toastAfter = page.run.last_seq;
  live(`/ws/runs/${runId}`, () => page.lastSeq, (message) => {
    if (page.name !== "run" || page.runId !== runId) return;
    if (message.type === "token") {
      page.streams[message.task_id] = ((page.streams[message.task_id] || "") + message.text).slice(-400);
      drawStreams();
      return;
    }
    if (message.type !== "event" || message.seq <= page.lastSeq) return;
    page.lastSeq = message.seq;
    page.events.push(message);
    if (message.data && message.data.task_id) delete page.streams[message.data.task_id];
    appendTrace(message, true);
    if (message.notification && message.seq > page.toastAfter) toast(message.notification.title);
    clearTimeout(page.timer);
    page.timer = setTimeout(refreshRun, 120);
  });
}

async function loadRun() {
  page.run = await api(`/api/runs/${page.runId}`);
  page.outputs = await api(`/api/runs/${page.runId}/outputs`);
  drawRun();
}

async function refreshRun() {
  try { await loadRun(); } catch (error) { toast(error.message, true); }
}

function drawRun() {
  const run = page.run;
  // The note survives redraws (a redraw happens exactly when the run pauses), focus included.
  const old = document.getElementById("note");
  const typing = old && document.activeElement === old ? [old.selectionStart, old.selectionEnd] : null;
  const message = h("input", { id: "note", placeholder: "message (optional)", size: 28, value: page.note,
    disabled: !can("operate"), oninput: (e) => { page.note = e.target.value; } });
  const denied = can("operate") ? null : NO_OPERATE;
  const approve = h("button", { class: "ok", id: "approve", title: denied, disabled: !can("operate") || run.status !== "paused", onclick: () => act("approve") }, "Approve");
  const cancel = h("button", { class: "danger", id: "cancel", title: denied, disabled: !can("operate") || ["delivered", "failed", "cancelled"].includes(run.status), onclick: () => act("cancel") }, "Cancel");
  const bar = h("div"); bar.style.width = `${Math.round(run.progress * 100)}%`;
  const head = h("div", { class: "panel" }, h("div", { class: "head" },
    h("div", { class: "meta" },
      h("h1", {}, run.pipeline, " ", pill(run.status)),
      h("div", { class: "mono muted" }, run.run_id),
      h("div", {}, run.topic),
      h("div", { class: "stats" },
        stat(`${Math.round(run.progress * 100)}%`, "progress"), stat(run.phase || "–", "phase"),
        stat(money(run.cost_usd), "cost"), stat(run.tokens, "tokens"), stat(run.retry_count, "retries"),
        stat(run.events, "events"), stat(ago(run.created_at), "started"))),
    ["delivered", "failed", "cancelled"].includes(run.status) ? null : h("div", { class: "actions" }, message, approve, cancel)), h("div", { class: "bar" }, bar));
  const notes = [];
  if (run.failure) notes.push(h("div", { class: "warn failure" }, run.status === "cancelled" ? "Cancelled: " : "Failed: ", run.failure));
  if (run.status === "paused") notes.push(h("div", { class: "warn" }, `Paused (${run.pause_reason || "approval"}): review the outputs, then approve or cancel.`));
  for (const warning of run.warnings) notes.push(h("div", { class: "warn" }, warning));
  view.replaceChildren(...[
    h("div", { class: "toolbar" }, h("a", { href: "#/" }, "← Runs")),
    head,
    notes.length ? h("div", { class: "panel" }, h("h2", {}, "Attention"), notes) : null,
    h("div", { class: "panel" }, h("h2", {}, "Phases"), timeline(run)),
    h("div", { class: "grid" },
      h("div", {}, h("div", { class: "panel" }, h("h2", {}, "Workers"), workers(run), h("div", { id: "streams" })),
        h("div", { class: "panel" }, h("h2", {}, "Outputs"), outputs())),
      h("div", { class: "panel" }, h("h2", {}, "Decisions: why each step happened"),
        h("div", { class: "scroll", id: "trace-box" }, h("table", { class: "trace" }, h("tbody", { id: "trace" })))))].filter(Boolean));
  if (!page.events.length) loadTrace(); else page.events.forEach((m) => appendTrace(m, false));
  drawStreams();
  const note = document.getElementById("note");
  if (note && typing) { note.focus(); note.setSelectionRange(typing[0], typing[1]); }
}

function stat(value, label) { return h("div", { class: "stat" }, h("b", {}, value), h("span", {}, label)); }

function timeline(run) {
  return h("div", { class: "timeline" }, run.phases.map((p) => h("div", { class: `step s-${p.status}${p.id === run.phase ? " current" : ""}` },
    h("div", { class: "name" }, p.id), h("div", { class: "sub" }, p.status, p.visits > 1 ? ` · visit ${p.visits}` : ""))));
}

function workers(run) {
  if (!run.tasks.length) return h("div", { class: "empty" }, "No task dispatched yet.");
  return h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "task"), h("th", {}, "phase"), h("th", {}, "status"),
    h("th", { class: "num" }, "attempt"), h("th", { class: "num" }, "duration"), h("th", {}, "model"), h("th", {}, "output"))),
  h("tbody", {}, run.tasks.map((t) => h("tr", {},
    h("td", { class: "mono" }, t.task_id), h("td", {}, t.phase), h("td", {}, pill(t.status), t.error ? h("div", { class: "muted" }, t.error.slice(0, 200)) : null),
    h("td", { class: "num" }, t.attempt), h("td", { class: "num" }, seconds(t.duration_s)), h("td", { class: "muted" }, t.model || "–"),
    h("td", {}, t.output ? h("a", { href: "#", onclick: (e) => { e.preventDefault(); showOutput(t.output); } }, t.output) : "–")))));
}

function outputs() {
  if (!page.outputs.length) return h("div", { class: "empty" }, "Nothing written yet.");
  const choice = page.output || page.outputs[page.outputs.length - 1].name;
  return h("div", {}, h("div", { class: "tabs" }, page.outputs.map((o) => h("button", { class: o.name === choice ? "on" : "", onclick: () => showOutput(o.name) }, o.name))),
    h("div", { id: "output" }, h("div", { class: "muted" }, "…")), loadOutput(choice));
}

function showOutput(name) { page.output = name; drawRun(); }

function loadOutput(name) {
  const path = `/api/runs/${page.runId}/outputs/${encodeURIComponent(name)}`;
  api(path).then((text) => {
    const box = document.getElementById("output");
    if (box) box.replaceChildren(markdown(String(text)), h("a", { id: "download", href: `${path}?download=1`, download: name,
      onclick: (e) => { e.preventDefault(); download(path, name); } }, "download"));
  }).catch((error) => toast(error.message, true));
  return null;
}

// Fetched with the token in its header (a plain link would go without it), saved from memory.
async function download(path, name) {
  try {
    const response = await fetch(`${path}?download=1`, { headers: token ? { Authorization: `Bearer ${token}` } : {} });
    if (response.status === 401) askToken();
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body.error ? body.error.message : `HTTP ${response.status}`);
    }
    const url = URL.createObjectURL(await response.blob());
    const link = h("a", { href: url, download: name, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 60000);
  } catch (error) { toast(error.message, true); }
}

function drawStreams() {
  const box = document.getElementById("streams");
  if (!box) return;
  box.replaceChildren(...Object.entries(page.streams).map(([task, text]) => h("div", { class: "stream" }, `${task}: …${text}`)));
}

async function loadTrace() {
  const events = await api(`/api/runs/${page.runId}/events`);
  for (const e of events) {
    if (e.seq <= page.lastSeq) continue;
    page.lastSeq = e.seq;
    page.events.push(e);
    appendTrace(e, false);
  }
}

function appendTrace(e, fresh) {
  const body = document.getElementById("trace");
  if (!body) return;
  body.prepend(h("tr", { class: fresh ? "new" : "" },
    h("td", { class: "num muted mono" }, e.seq), h("td", { class: "muted mono" }, clock(e.at)),
    h("td", {}, e.message, e.rule ? h("div", { class: "why" }, h("code", {}, e.rule), " ", e.why || "") : null)));
}

async function act(kind) {
  const note = document.getElementById("note");
  const body = JSON.stringify({ message: note ? note.value : "" });
  try {
    await api(`/api/runs/${page.runId}/${kind}`, { method: "POST", body });
    page.note = "";
    if (note) note.value = "";
    toast(kind === "approve" ? "Approval sent" : "Cancellation sent");
  } catch (error) { toast(error.message, true); }
}

async function route() {
  await loadMe();
  const match = location.hash.match(/^#\/runs\/([a-z0-9-]+)$/);
  if (match) runPage(match[1]); else runsPage();
}
window.addEventListener("hashchange", route);
setInterval(() => { if (page.name === "runs") loadRuns(); }, 30000);  // keep ages fresh
route();
