"use strict";
// Batches: the list, and a page per batch (progress, actions, a filterable table of its rows,
// each linking to its run). Kept current by the runs' summary stream: a change to a run of
// the batch (its id starts with the batch's) reads the batch again, and a slow poll covers
// rows that start without a run changing.

const ROW_STATUSES = ["waiting", "starting", "running", "in provider batch", "paused", "delivered", "failed", "cancelled", "paused: batch budget", "not started: batch failed"];
const SHOWN_ROWS = 500;  // rows drawn at once: a filter narrows a batch of thousands

function epochAgo(epoch) { return epoch ? ago(new Date(epoch * 1000).toISOString()) : ""; }

function batchState(b) {
  if (b.cancelled) return "cancelled";
  if (b.failed) return "failed";  // more rows failed than it tolerates: none start
  if (!b.settled) return "running";
  if (b.counts.failed) return "failed";
  if (b.counts.paused || b.counts["paused: batch budget"]) return "paused";
  return b.done === b.row_count ? "delivered" : "paused";
}

function statusPill(status) {
  return h("span", { class: `pill s-${status.replace(/[^a-z]+/g, "_")}` }, status);
}

// A read asked for by live changes, at most one per `wait()` ms: a batch of 10,000 rows takes
// a server some 0.4 s to read, so a busy batch is read again at most every few times that.
function debounced(fn, wait) {
  let timer = null;
  return () => { if (timer) return; timer = setTimeout(() => { timer = null; fn(); }, wait()); };
}

// How long the last read took, for the next wait.
async function timed(mine, read) {
  const started = performance.now();
  try { return await read(); } finally { mine.every = Math.max(mine.floor, 3 * (performance.now() - started)); }
}

// -- the list ---------------------------------------------------------------------------

async function batchesPage() {
  page = { name: "batches", floor: 1000, every: 1000 };
  const mine = page;
  view.replaceChildren(
    h("div", { class: "toolbar" }, h("h1", {}, "Batches")),
    h("section", { class: "panel", "aria-label": "Batches" },
      h("table", { "aria-label": "Batches" }, h("thead", {}, h("tr", {},
        h("th", { scope: "col" }, "state"), h("th", { scope: "col" }, "batch"), h("th", { scope: "col" }, "pipeline"),
        h("th", { scope: "col" }, "progress"), h("th", { scope: "col", class: "num" }, "rows"), h("th", { scope: "col", class: "num" }, "delivered"),
        h("th", { scope: "col", class: "num" }, "failed"), h("th", { scope: "col", class: "num" }, "running"),
        h("th", { scope: "col", class: "num" }, "cost"), h("th", { scope: "col", class: "num" }, "age"))),
      h("tbody", { id: "batches" }))));
  const load = async () => {
    if (page !== mine) return;
    let list;
    try { list = await timed(mine, () => api("/api/batches")); } catch (error) { toast(error.message, true); return; }
    const body = document.getElementById("batches");
    if (page !== mine || !body) return;
    if (!list.length) { body.replaceChildren(h("tr", {}, h("td", { colspan: 10, class: "empty" }, "No batches yet: interlock batch FILE PIPELINE --inputs ROWS, or POST /api/batches."))); return; }
    body.replaceChildren(...list.map((b) => h("tr", { class: "link", "data-batch": b.batch_id, onclick: (e) => { if (e.target.tagName !== "A") location.hash = `#/batches/${b.batch_id}`; } },
      h("td", {}, statusPill(batchState(b))),
      h("td", { class: "mono" }, h("a", { href: `#/batches/${b.batch_id}` }, b.batch_id),
        b.experiment ? h("div", { class: "muted" }, `variant ${b.variant} of `, h("a", { href: `#/compare/${b.experiment}` }, b.experiment)) : null),
      h("td", {}, b.pipeline), h("td", {}, progressBar(b, true)), h("td", { class: "num" }, b.row_count),
      h("td", { class: "num" }, b.counts.delivered || 0), h("td", { class: "num" }, b.counts.failed || 0),
      h("td", { class: "num" }, b.running), h("td", { class: "num" }, `${b.estimated && b.cost_usd ? "~" : ""}${money(b.cost_usd)}`), h("td", { class: "num muted" }, epochAgo(b.created_at)))));
  };
  mine.load = debounced(load, () => mine.every);
  await load();
  live("/ws/runs?view=summary", () => null, (message) => {
    if (page === mine && (message.type === "runs" || message.type === "hello")) mine.load();
  });
}

// A bar of the rows: delivered, failed, cancelled, running, the rest waiting.
function progressBar(b, small = false) {
  const total = Math.max(1, b.row_count);
  const part = (count, cls, label) => {
    if (!count) return null;
    const bit = h("div", { class: cls, title: `${count} ${label}` });
    bit.style.width = `${(100 * count) / total}%`;
    return bit;
  };
  return h("div", { class: small ? "bbar small" : "bbar", role: "img", "aria-label": `${b.done} of ${b.row_count} rows done` },
    part(b.counts.delivered, "b-delivered", "delivered"), part(b.counts.failed, "b-failed", "failed"),
    part(b.counts.cancelled, "b-cancelled", "cancelled"), part(b.running, "b-running", "running"),
    part(b.counts.paused, "b-paused", "paused"));
}

// -- one batch --------------------------------------------------------------------------

async function batchPage(batchId) {
  page = { name: "batch", batchId, batch: null, filter: { status: "", q: "" }, asked: 0, floor: 400, every: 400 };
  const mine = page;
  view.replaceChildren(h("div", { class: "empty" }, "Loading…"));
  mine.load = debounced(() => loadBatch(mine), () => mine.every);
  await loadBatch(mine);
  if (page !== mine || !mine.batch) return;
  // Batches of as many rows can be compared with this one (`interlock compare B1 B2`).
  api("/api/batches").then((list) => {
    mine.others = list.filter((o) => o.batch_id !== batchId && o.row_count === mine.batch.row_count).map((o) => o.batch_id);
    if (page === mine && mine.others.length) drawBatch(mine);
  }).catch(() => {});
  const prefix = `${batchId}-r`;
  live("/ws/runs?view=summary", () => null, (message) => {
    if (page !== mine) return;
    if (message.type === "hello") mine.load();
    if (message.type === "runs" && message.runs.some((r) => r.run_id.startsWith(prefix))) mine.load();
  });
}

// Rows start without any of the batch's runs changing only at its start or after a retry:
// a poll every few seconds while it is not settled covers that, and a lost message.
setInterval(() => { if (page.name === "batch" && page.batch && !page.batch.settled && !document.hidden) page.load(); }, 3000);

async function loadBatch(mine) {
  const asked = ++mine.asked;
  let batch;
  try { batch = await timed(mine, () => api(`/api/batches/${mine.batchId}`)); } catch (error) {
    if (page !== mine) return;
    if (!mine.batch) view.replaceChildren(h("div", { class: "panel", id: "batch-error" }, error.message)); else toast(error.message, true);
    return;
  }
  if (page !== mine || asked !== mine.asked) return;
  mine.batch = batch;
  drawBatch(mine);
}

function drawBatch(mine) {
  const b = mine.batch;
  const active = document.activeElement;
  const focus = active && view.contains(active) && active.id ? { id: active.id, range: active.type === "search" ? [active.selectionStart, active.selectionEnd] : null } : null;
  const counts = b.counts;
  const extra = ["in provider batch", "paused", "cancelled", "paused: batch budget", "not started: batch failed"].filter((s) => counts[s]);
  const head = h("section", { class: "panel", "aria-labelledby": "batch-title" }, h("div", { class: "head" },
    h("div", { class: "meta" },
      h("h1", { id: "batch-title" }, b.batch_id, " ", statusPill(batchState(b))),
      h("div", { class: "muted" }, `pipeline ${b.pipeline} · ${b.row_count} rows from ${b.inputs_file} · started ${epochAgo(b.created_at)}`),
      b.experiment ? h("div", { id: "experiment-of" }, `Variant ${b.variant} of experiment `, h("a", { class: "mono", href: `#/batches/${b.experiment}` }, b.experiment),
        " · ", h("a", { href: `#/compare/${b.experiment}` }, "compare its variants")) : null,
      (mine.others || []).length ? h("div", { class: "compare-with" }, h("label", { for: "compare-with", class: "muted" }, "Compare with "),
        h("select", { id: "compare-with", onchange: (e) => { if (e.target.value) location.hash = `#/compare/${b.batch_id}/${e.target.value}`; } },
          h("option", { value: "" }, "another batch of as many rows…"), mine.others.map((o) => h("option", { value: o }, o)))) : null,
      h("div", { class: "stats", id: "batch-stats" },
        stat(`${b.done}/${b.row_count}`, "done"), stat(counts.delivered || 0, "delivered"), stat(b.running, "running"),
        stat(counts.failed || 0, "failed"), stat(b.waiting, "waiting"), extra.map((s) => stat(counts[s], s)),
        stat(`${b.estimated && b.cost_usd ? "~" : ""}${money(b.cost_usd)}`, b.estimated ? "cost (estimated)" : "cost"), stat(b.tokens, "tokens"),
        stat(b.concurrency, "at once"), b.max_cost_usd ? stat(money(b.max_cost_usd), "budget") : null)),
    batchControls(mine)), progressBar(b));
  const notes = [];
  if (b.failure) notes.push(h("div", { class: "warn", id: "batch-failure" }, `${b.failure}. Retry failed runs the failed rows again and goes on.`));
  if (counts["paused: batch budget"]) notes.push(h("div", { class: "warn" }, `The batch's spend reached its budget (${money(b.max_cost_usd)}): ${counts["paused: batch budget"]} row(s) not started. 'interlock batch resume ${b.batch_id} --max-cost-usd X' raises it.`));
  if (b.undriven || b.stalled) notes.push(h("div", { class: "warn", id: "batch-undriven" }, `${b.undriven_hint}: or Resume here.`));
  if (b.spend_capped) notes.push(h("div", { class: "warn", id: "batch-spend-capped" }, `${b.spend_capped} row(s) in flight wait on a spend cap: their calls go on once it resets or is raised (the rows below say which cap).`));
  if (counts.paused) notes.push(h("div", { class: "warn" }, `${counts.paused} row(s) wait for approval: open their runs below (status paused).`));
  view.replaceChildren(...[
    h("nav", { class: "toolbar crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/batches" }, "← Batches")),
    head,
    notes.length ? h("div", { class: "panel" }, h("h2", {}, "Attention"), notes) : null,
    rowsPanel(mine)].filter(Boolean));
  drawRows(mine);
  if (focus) {
    const again = document.getElementById(focus.id);
    if (again) { again.focus(); if (focus.range && again.setSelectionRange) again.setSelectionRange(...focus.range); }
  }
}

function batchControls(mine) {
  const b = mine.batch;
  const operate = can("operate");
  const why = operate ? null : NO_OPERATE;
  const act = async (path, done) => {
    try { const answer = await api(`/api/batches/${b.batch_id}/${path}`, { method: "POST" }); toast(done(answer)); } catch (error) { toast(error.message, true); }
    loadBatch(mine);
  };
  const failed = b.counts.failed || 0;
  const stoppable = !b.cancelled && (!b.settled || b.waiting > 0);
  return h("div", { class: "actions batch-actions" },
    h("button", { id: "batch-retry", type: "button", disabled: !operate || !failed, title: why || (failed ? `give the ${failed} failed row(s) a new run` : "no row failed"),
      onclick: () => act("retry", (a) => `${a.retried} failed row(s) given a new try`) }, `Retry failed${failed ? ` (${failed})` : ""}`),
    h("button", { id: "batch-resume", type: "button", class: "ghost", disabled: !operate || b.cancelled || !(b.waiting || b.running), title: why || "drive the batch here again (after its process stopped)",
      onclick: () => act("resume", () => "the batch is driven here") }, "Resume"),
    h("button", { id: "batch-cancel", type: "button", class: "danger", disabled: !operate || !stoppable, title: why || (stoppable ? "stop what runs, start nothing more" : "nothing left to cancel"),
      onclick: () => { if (confirmCancel(mine)) act("cancel", (a) => `batch cancelled: ${a.unstarted} row(s) not started, ${a.stopped.length} run(s) stopped`); } },
      Date.now() < (mine.armedUntil || 0) ? `Confirm: cancel ${b.running + b.waiting} row(s)` : "Cancel batch"),
    h("span", { class: "export" }, "Export ",
      h("button", { id: "export-jsonl", type: "button", class: "ghost", onclick: () => saveExport(b.batch_id, "jsonl") }, "JSONL"),
      h("button", { id: "export-csv", type: "button", class: "ghost", onclick: () => saveExport(b.batch_id, "csv") }, "CSV")));
}

// A second click within 5 s confirms (a native dialog would hold up the page); the armed
// state lives on the page, so that a live redraw meanwhile keeps it.
function confirmCancel(mine) {
  if (Date.now() < (mine.armedUntil || 0)) { mine.armedUntil = 0; return true; }
  mine.armedUntil = Date.now() + 5000;
  drawBatch(mine);
  setTimeout(() => { if (page === mine && mine.armedUntil && Date.now() >= mine.armedUntil) { mine.armedUntil = 0; drawBatch(mine); } }, 5100);
  return false;
}

// Downloads are fetched with the token in the header and saved from memory: no token in a link.
async function saveExport(batchId, kind) {
  const sent = token;
  try {
    const response = await fetch(`/api/batches/${batchId}/export?format=${kind}`, { headers: sent ? { Authorization: `Bearer ${sent}` } : {} });
    if (!response.ok) {
      const body = await response.json().catch(() => ({}));
      throw new Error(body.error ? body.error.message : `HTTP ${response.status}`);
    }
    const url = URL.createObjectURL(await response.blob());
    const link = h("a", { href: url, download: `${batchId}.${kind}`, hidden: true });
    document.body.append(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 10000);
  } catch (error) { toast(error.message, true); }
}

function rowText(r) {
  return [r.row, r.topic, r.run_id || "", r.status, r.shown_status || "", r.why || "", JSON.stringify(r.inputs), JSON.stringify(r.values)].join(" ").toLowerCase();
}

function compactValues(values) {
  return Object.entries(values || {}).map(([k, v]) => `${k}=${typeof v === "object" ? JSON.stringify(v) : v}`).join(", ");
}

function rowsPanel(mine) {
  const b = mine.batch;
  const f = mine.filter;
  const present = ROW_STATUSES.filter((s) => b.counts[s]);
  const status = h("select", { id: "row-status", "aria-label": "Filter rows by status",
    onchange: (e) => { f.status = e.target.value; drawRows(mine); } },
    h("option", { value: "" }, `all statuses (${b.row_count})`),
    present.map((s) => h("option", { value: s, selected: s === f.status }, `${s} (${b.counts[s]})`)));
  let typing = null;
  const search = h("input", { id: "row-search", type: "search", value: f.q, size: 32, placeholder: "search topic, inputs, run, values",
    "aria-label": "Search rows by topic, inputs, run id, values or failure",
    oninput: (e) => { f.q = e.target.value; clearTimeout(typing); typing = setTimeout(() => drawRows(mine), 150); } });
  return h("section", { class: "panel", "aria-labelledby": "rows-title" },
    h("div", { class: "toolbar filters" }, h("h2", { id: "rows-title" }, "Rows"), h("span", { class: "spacer" }), status, search,
      h("span", { id: "rows-shown", class: "muted", "aria-live": "polite" })),
    h("div", { class: "scroll rows-scroll" }, h("table", { "aria-label": "Rows", class: "batch-rows" }, h("thead", {}, h("tr", {},
      h("th", { scope: "col", class: "num" }, "row"), h("th", { scope: "col" }, "status"), h("th", { scope: "col" }, "topic and inputs"),
      h("th", { scope: "col" }, "run"), h("th", { scope: "col", class: "num" }, "try"), h("th", { scope: "col", class: "num" }, "cost"),
      h("th", { scope: "col", class: "num" }, "tokens"), h("th", { scope: "col" }, "values or failure"))), h("tbody", { id: "batch-rows" }))));
}

// The rows the filter keeps, drawn (at most SHOWN_ROWS), and how many that is.
function drawRows(mine) {
  const body = document.getElementById("batch-rows");
  if (!body || page !== mine) return;
  const f = mine.filter;
  const q = f.q.trim().toLowerCase();
  const rows = mine.batch.rows.filter((r) => (!f.status || r.status === f.status) && (!q || rowText(r).includes(q)));
  document.getElementById("rows-shown").textContent = rows.length > SHOWN_ROWS
    ? `showing ${SHOWN_ROWS} of ${rows.length} matching rows: narrow the filter` : `${rows.length} of ${mine.batch.row_count} rows`;
  body.replaceChildren(...rowLines(rows));
}

function rowLines(rows) {
  if (!rows.length) return [h("tr", {}, h("td", { colspan: 8, class: "empty" }, "No row matches."))];
  return rows.slice(0, SHOWN_ROWS).map((r) => {
    const inputs = Object.entries(r.inputs).map(([k, v]) => `${k}=${v}`).join(", ");
    const values = compactValues(r.values);
    return h("tr", { "data-row": r.row, class: r.run_id ? "link" : "", onclick: (e) => { if (r.run_id && e.target.tagName !== "A") location.hash = `#/runs/${r.run_id}`; } },
      h("td", { class: "num" }, r.row), h("td", {}, statusPill(r.status), r.mark ? h("div", { class: `row-mark mark-${r.mark}` }, r.shown_status) : null),
      h("td", { class: "row-inputs" }, h("div", {}, r.topic), inputs ? h("div", { class: "muted mono" }, inputs) : null),
      h("td", { class: "mono" }, r.run_id ? h("a", { href: `#/runs/${r.run_id}` }, r.run_id) : "–"),
      h("td", { class: "num" }, r.run_id ? r.try : "–"), h("td", { class: "num" }, `${r.estimated && r.cost_usd ? "~" : ""}${money(r.cost_usd)}`), h("td", { class: "num" }, r.tokens || "–"),
      h("td", { class: "row-values" }, values ? h("div", { class: "mono" }, values) : null, r.why ? h("div", { class: r.mark ? "why" : "bad" }, r.why.slice(0, 300)) : null));
  });
}
