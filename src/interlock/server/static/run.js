"use strict";
// One run: its state, timeline, graph, costs, outputs and decisions, kept live.

// -- one run -----------------------------------------------------------------------------

async function runPage(runId) {
  page = { name: "run", runId, lastSeq: 0, events: [], output: null, streams: {}, typed: {}, editing: null, toastAfter: 0 };
  view.replaceChildren(h("div", { class: "empty" }, "Loading…"));
  const mine = page;
  try { await loadRun(); } catch (error) { if (page === mine) view.replaceChildren(h("div", { class: "panel" }, error.message)); return; }
  if (page !== mine) return;  // the person went elsewhere while the run loaded
  // Only what happens from now on pops up: the history replayed below is old news.
  page.toastAfter = page.run.last_seq;
  live(`/ws/runs/${runId}`, () => page.lastSeq, (message) => {
    if (page !== mine) return;
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

// Whatever a request answers after the person has moved to another page is dropped: it
// belongs to the page that asked (`mine`), not to the one on screen now.
async function loadRun() {
  const mine = page;
  const [run, outputs, attempts, graph] = await Promise.all([api(`/api/runs/${mine.runId}`),
    api(`/api/runs/${mine.runId}/outputs`), api(`/api/runs/${mine.runId}/attempts`), api(`/api/runs/${mine.runId}/graph`)]);
  if (page !== mine) return;
  attempts.loadedAt = Date.now() / 1000;
  Object.assign(page, { run, outputs, attempts, graph, loadedAt: Date.now() });
  drawRun();
}

function ended(run) { return ["delivered", "failed", "cancelled"].includes(run.status); }

// While tasks run, their bars grow between events: redraw the timeline alone once a second.
function tickTimeline() {
  if (page.name !== "run" || !page.attempts || ended(page.run)) return;
  const box = document.getElementById("timeline-box");
  const focused = document.activeElement && document.activeElement.dataset ? document.activeElement.dataset.seq : null;
  if (!box || !page.attempts.attempts.some((a) => ["queued", "running"].includes(a.outcome))) return;
  box.replaceChildren(timelineView(page.attempts, false));
  if (focused) { const again = box.querySelector(`[data-seq="${focused}"]`); if (again) again.focus(); }
}
setInterval(tickTimeline, 1000);

// The stream keeps the page current; a run that has been quiet for a while is read again
// anyway, so a message lost on the way (a proxy, a dropped connection) costs seconds, not the
// rest of the run.
function resyncRun() {
  if (page.name !== "run" || !page.run || ended(page.run) || document.hidden) return;
  if (Date.now() - (page.loadedAt || 0) >= 5000) refreshRun();
}
setInterval(resyncRun, 5000);

async function refreshRun() {
  if (page.name !== "run") return;  // a timer set on a run page the person has left
  try { await loadRun(); } catch (error) { toast(error.message, true); }
}

function drawRun() {
  const run = page.run;
  // Whatever had the keyboard's focus keeps it across the redraw (a redraw happens whenever
  // the run records something), a text field its selection too; typed text lives in `page.typed`.
  const active = document.activeElement;
  const focus = active && view.contains(active) ? { id: active.id, seq: active.dataset.seq,
    range: "selectionStart" in active && active.type !== "checkbox" ? [active.selectionStart, active.selectionEnd] : null } : null;
  const bar = h("div"); bar.style.width = `${Math.round(run.progress * 100)}%`;
  const head = h("div", { class: "panel" }, h("div", { class: "head" },
    h("div", { class: "meta" },
      h("h1", {}, run.pipeline, " ", pill(run.status)),
      h("div", { class: "mono muted" }, run.run_id),
      h("div", {}, run.topic),
      inputsView(run.inputs),
      configLine(run.config),
      h("div", { class: "stats" },
        stat(`${Math.round(run.progress * 100)}%`, "progress"), stat(run.phase || "–", "phase"),
        stat(`${run.estimated && run.cost_usd ? "~" : ""}${run.unpriced_note ? `${run.cost_usd ? money(run.cost_usd) : "$0"} + unpriced` : money(run.cost_usd)}`, run.estimated ? "cost (estimated)" : "cost"),
        stat(`${run.estimated ? "~" : ""}${run.tokens}`, run.estimated ? "tokens (estimated)" : "tokens"), stat(run.retry_count, "retries"),
        stat(run.events, "events"), stat(ago(run.created_at), "started"))),
    headerControls(run)), h("div", { class: "bar" }, bar));
  const notes = [];
  if (run.failure) notes.push(h("div", { class: "warn failure" }, run.status === "cancelled" ? "Cancelled: " : "Failed: ", run.failure));
  if (run.waiting && run.waiting.for === "spend_cap") notes.push(spendCapNote(run.waiting));
  else if (run.waiting) notes.push(waitingNote(run));
  if (run.failing) notes.push(h("div", { class: "warn failure", id: "failing" }, `Failing: task ${run.failing.task} failed for good (${run.failing.error || "no detail"}). The run fails once ${run.failing.waiting_for.join(", ") || "all"} ${run.failing.waiting_for.length === 1 ? "has" : "have"} ended, so that what was paid for is kept for a rerun; cancel it to stop now.`));
  const pausedChild = run.status === "paused" && run.pause && run.pause.child;
  if (pausedChild) notes.push(pausedInChild(run.pause.child));
  else if (run.status === "paused" && run.pause && run.pause.reason === "tool") notes.push(h("div", { class: "warn", id: "paused-for-tool" }, "Paused: a tool call waits for approval (below): approve it to let it run once, or refuse it and the model is told why."));
  else if (run.status === "paused") notes.push(h("div", { class: "warn" }, `Paused (${run.pause_reason || "approval"}): review the outputs, then approve, edit, send back or cancel.`));
  if (run.parent_run && run.status === "paused") notes.push(h("div", { class: "warn", id: "pauses-parent" },
    "This pause holds the parent run ", runLink(run.parent_run.run_id), " too: approving here or there lets both go on."));
  notes.push(...failedItemNotes(run));
  for (const warning of run.warnings) notes.push(h("div", { class: "warn" }, warning));
  if (run.unpriced_note) notes.push(h("div", { class: "warn", id: "unpriced" }, `Note: ${run.unpriced_note}`));
  view.replaceChildren(...[
    h("nav", { class: "toolbar crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/" }, "← Runs"), parentCrumb(run)),
    head,
    notes.length ? h("div", { class: "panel" }, h("h2", {}, "Attention"), notes) : null,
    toolCallsPanel(run),
    reviewPanel(run),
    signalPanel(run),
    rerunPanel(run),
    h("div", { class: "panel" }, h("h2", {}, "Phases"), phaseStrip(run)),
    h("section", { class: "panel", "aria-labelledby": "timeline-title" }, h("h2", { id: "timeline-title" }, "Timeline"),
      h("div", { id: "timeline-box" }, timelineView(page.attempts, ended(run)))),
    h("section", { class: "panel", "aria-labelledby": "cost-title" }, h("h2", { id: "cost-title" }, "Cost"), costView(page.attempts.costs)),
    h("section", { class: "panel", "aria-labelledby": "graph-title" }, h("h2", { id: "graph-title" }, "Graph"), graphView(page.graph, run, page.attempts)),
    h("div", { class: "grid" },
      h("div", {}, h("div", { class: "panel" }, h("h2", {}, "Workers"), workers(run), h("div", { id: "streams" })),
        h("div", { class: "panel" }, h("h2", {}, "Outputs"), outputs())),
      h("div", { class: "panel" }, h("h2", {}, "Decisions: why each step happened"),
        h("div", { class: "scroll", id: "trace-box" }, h("table", { class: "trace" }, h("tbody", { id: "trace" })))))].filter(Boolean));
  if (!page.events.length) loadTrace(); else page.events.forEach((m) => appendTrace(m, false));
  drawStreams();
  if (focus) {
    const again = focus.seq ? view.querySelector(`[data-seq="${focus.seq}"]`) : focus.id ? document.getElementById(focus.id) : null;
    if (again) { again.focus(); if (focus.range && again.setSelectionRange) again.setSelectionRange(...focus.range); }
  }
}

// The interlock.toml files the run's models were resolved from when it was created: each
// file's path and the start of its SHA-256, said changed or gone when it is now.
function configLine(config) {
  if (!config) return null;
  if (!config.files.length) return h("div", { id: "run-config", class: "muted" }, "config: none found when the run started (every model alias answered with the offline stand-in)");
  const states = { changed: " (changed since the run started)", gone: " (gone since the run started)" };
  return h("div", { id: "run-config", class: "muted" }, "config: ", config.files.map((f, i) => h("span", { class: "config-file", title: `${f.path}\nsha256 ${f.sha256}` },
    i ? ", " : "", h("span", { class: "mono" }, f.path), " (sha256 ", h("span", { class: "mono sha" }, f.sha256.slice(0, 12)), ")",
    i === 0 && config.explicit ? " (named by --config or INTERLOCK_CONFIG)" : "", states[f.state] || "")));
}

function stat(value, label) { return h("div", { class: "stat" }, h("b", {}, value), h("span", {}, label)); }

function phaseStrip(run) {
  return h("div", { class: "timeline", role: "list", "aria-label": "Phases" }, run.phases.map((p) => h("div", { role: "listitem", class: `step s-${p.status}${p.id === run.phase ? " current" : ""}` },
    h("div", { class: "name" }, p.id), h("div", { class: "sub" }, p.status, p.visits > 1 ? ` · visit ${p.visits}` : ""),
    p.items ? h("div", { class: "sub items-outcome" }, itemsText(p.items)) : null)));
}

// A fan-out's items by outcome: "3/5 done · 2 failed (tolerate 2)".
function itemsText(items) {
  const failed = items.failed || items.tolerate !== null ? ` · ${items.failed} failed` : "";
  const tolerate = items.tolerate !== null ? ` (tolerate ${items.tolerate})` : "";
  return `${items.completed}/${items.count} done${failed}${tolerate}`;
}

// Each failed item of a fan-out that tolerates failures, with its task and error.
function failedItemNotes(run) {
  return run.phases.filter((p) => p.items && p.items.failed_items.length).map((p) => h("div", { class: "warn", id: `failed-items-${p.id}` },
    `${p.items.failed} of ${p.items.count} items of ${p.id} failed (tolerate ${p.items.tolerate}, ${p.items.allowed} may fail): `,
    p.items.failed_items.map((f) => `item ${f.index} (${f.task}): ${f.error}`).join("; ")));
}

function workers(run) {
  if (!run.tasks.length) return h("div", { class: "empty" }, "No task dispatched yet.");
  return h("table", {}, h("thead", {}, h("tr", {}, h("th", {}, "task"), h("th", {}, "phase"), h("th", {}, "status"),
    h("th", { class: "num" }, "attempt"), h("th", { class: "num" }, "duration"), h("th", {}, "model"), h("th", {}, "output"))),
  h("tbody", {}, run.tasks.map((t) => h("tr", {},
    h("td", { class: "mono" }, t.task_id, t.child ? childLine(t.child) : null), h("td", {}, t.phase), h("td", {}, pill(t.status), t.spend_wait ? h("div", { class: "spend-wait" }, t.spend_wait) : null, batchLine(run, t), t.error ? h("div", { class: "muted" }, t.error.slice(0, 200)) : null),
    h("td", { class: "num" }, t.attempt), h("td", { class: "num" }, seconds(t.duration_s)), h("td", { class: "muted" }, t.model || "–"),
    h("td", {}, t.output ? h("a", { href: "#", onclick: (e) => { e.preventDefault(); showOutput(t.output); } }, t.output) : "–")))));
}

// A task whose model call waits in (or is gathered for) a provider batch: which batch, when
// it was sent and what the provider said of it last (from the orchestrator driving the run,
// as fresh as its last poll).
function batchLine(run, t) {
  const w = (run.provider_batches || {})[t.task_id];
  if (!w) return null;
  if (!w.batch_id) return h("div", { class: "provider-batch muted" }, w.text);
  // The API gives times as RFC 3339 text.
  const sent = w.submitted_at ? new Date(w.submitted_at).toISOString().slice(0, 16).replace("T", " ") : null;
  return h("div", { class: "provider-batch muted", title: `model ${w.alias}, interlock's tag ${w.tag}` },
    "in provider batch ", h("span", { class: "mono" }, w.batch_id),
    sent ? `, submitted ${sent} UTC` : "", `, provider status: ${w.status}`);
}

// A call past a spend cap waits (no event records it: the API has it from the orchestrator
// driving the run, and the page asks again every few seconds while the run is live).
function spendCapNote(w) {
  const more = w.tasks > 1 ? ` (${w.tasks} tasks; the longest waiting is ${w.task})` : ` (task ${w.task})`;
  return h("div", { class: "warn waiting", id: "waiting" }, `${w.text.replace(/^waiting/, "Waiting")}${more}. `,
    "It goes on when the window resets or the cap is raised in interlock.toml (`interlock limits` shows the caps).");
}

// -- child runs (of `pipeline` workers) and the parent of a child --------------------------

function runLink(runId) { return h("a", { class: "mono", href: `#/runs/${runId}` }, runId); }

function parentCrumb(run) {
  const parent = run.parent_run;
  if (!parent) return null;
  return h("span", { id: "parent-crumb" }, "› parent ", runLink(parent.run_id), " ", parent.pipeline ? h("span", { class: "muted" }, parent.pipeline) : null,
    " ", pill(parent.status), h("span", { class: "muted" }, ` · task ${parent.task_id}`), " › this child run");
}

// The child's own state, shown where its task is: running, waiting, paused for approval,
// delivered, failed, cancelled; with what it waits for and what it cost so far.
function childLine(child) {
  const state = child.status === "paused" ? "paused for approval" : child.status;
  return h("div", { class: "child-run", "data-child": child.run_id }, "↳ child run ", runLink(child.run_id), " ",
    h("span", { class: `pill s-${child.status}` }, state), ` · cost ${child.cost_usd ? money(child.cost_usd) : "$0"} · ${child.tokens} tokens`,
    child.detail ? h("div", { class: "muted" }, child.detail) : null);
}

function pausedInChild(child) {
  return h("div", { class: "warn", id: "paused-in-child" }, "Paused in child ", runLink(child.run),
    ": approve here or there (approving here approves the child, and both go on); edit or send back in the child.",
    child.detail ? h("div", { class: "muted" }, child.detail.replace(`run ${child.run} `, "")) : null);
}

function outputs() {
  if (!page.outputs.length) return h("div", { class: "empty" }, "Nothing written yet.");
  const choice = page.output || page.outputs[page.outputs.length - 1].name;
  const tabs = h("div", { class: "tabs", role: "group", "aria-label": "Outputs" }, page.outputs.map((o) => h("button", { type: "button", class: o.name === choice ? "on" : "",
    "aria-pressed": o.name === choice ? "true" : "false", onclick: () => showOutput(o.name) }, o.name)), editButton(choice));
  if (page.editing === choice && editable(choice)) return h("div", {}, tabs, editor(choice));
  return h("div", {}, tabs, h("div", { id: "output" }, h("div", { class: "muted" }, "…")), loadOutput(choice));
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
    const sent = token;
    const response = await fetch(`${path}?download=1`, { headers: sent ? { Authorization: `Bearer ${sent}` } : {} });
    if (response.status === 401 && sent === token) askToken();
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
  const mine = page;
  const events = await api(`/api/runs/${mine.runId}/events`);
  if (page !== mine) return;
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


