"use strict";
// The run's timeline (a row per task, a bar per attempt, pauses as shaded gaps) and the
// attempt detail it opens: the exact prompt, the answer, tokens, cost, a command's logs.

const OUTCOME_TEXT = {
  queued: "queued", running: "running", done: "done", failed: "failed", retried: "failed, retried",
  timed_out: "timed out", reused: "reused", edited: "edited", abandoned: "stopped", retry_wait: "waiting to retry",
};

function epoch(iso) { return iso ? Date.parse(iso) / 1000 : null; }

function tokenText(tokens) {
  if (!tokens) return "–";
  const parts = [["input_tokens", "in"], ["output_tokens", "out"], ["cache_read_tokens", "cache read"],
    ["cache_write_tokens", "cache write"], ["reasoning_tokens", "reasoning"]]
    .filter(([key]) => tokens[key]).map(([key, label]) => `${tokens[key]} ${label}`);
  return parts.length ? parts.join(" · ") : "–";
}

function attemptLabel(a) {
  const time = a.duration_s !== null ? `, ${seconds(a.duration_s)}` : "";
  const cost = a.cost_usd ? `, ${money(a.cost_usd)}` : "";
  return `${a.task_id} attempt ${a.attempt}${a.visit > 1 ? ` (visit ${a.visit})` : ""}: ${OUTCOME_TEXT[a.outcome] || a.outcome}${time}${cost}`;
}

// Where "now" is on the server's clock, so a running bar grows from the server's times.
function serverNow(data) { return Date.now() / 1000 + (data.now - data.loadedAt); }

function timelineView(data, ended) {
  const attempts = data.attempts;
  if (!attempts.length) return h("div", { class: "empty" }, "No task dispatched yet.");
  const start = data.start;
  const end = Math.max(ended ? data.end : serverNow(data), ...attempts.map((a) => epoch(a.finished_at) || 0), start + 0.001);
  const span = end - start;
  const pct = (t) => `${(Math.max(0, Math.min(1, (t - start) / span)) * 100).toFixed(3)}%`;
  const rows = new Map();
  for (const a of attempts) {
    const key = a.item === null ? a.role : `${a.role}[${a.item}]`;
    if (!rows.has(key)) rows.set(key, { key, phase: a.phase, bars: [] });
    rows.get(key).bars.push(a);
  }
  const bands = data.pauses.map((p) => {
    const wait = p.kind === "wait";
    const band = h("div", { class: wait ? "tl-pause tl-wait" : "tl-pause",
      title: wait ? `waiting for ${p.reason}${p.how ? ` (ended: ${p.how})` : ""}` : `paused (${p.reason})${p.by ? `, ended by ${p.by}` : ""}` });
    const from = epoch(p.start);
    const to = epoch(p.end) || end;
    band.style.left = pct(from);
    band.style.width = `calc(${pct(to)} - ${pct(from)})`;
    return band;
  });
  // A `pipeline` worker's row says so: its bars are child runs (the run page links each).
  const kids = new Set(((page.run && page.run.child_runs) || []).map((c) => c.task_id));
  const child = (row) => row.bars.some((a) => kids.has(a.task_id));
  const lines = [...rows.values()].map((row) => h("div", { class: child(row) ? "tl-row tl-child" : "tl-row", role: "listitem" },
    h("div", { class: "tl-label", title: `phase ${row.phase}${child(row) ? ", runs a child run" : ""}` }, h("span", {}, child(row) ? `↳ ${row.key}` : row.key), h("span", { class: "muted" }, row.phase)),
    h("div", { class: "tl-track" }, row.bars.map((a) => bar(a, start, end, pct, ended, data)))));
  return h("div", { class: "tl", id: "timeline", role: "region", "aria-label": `Timeline of ${attempts.length} attempts over ${seconds(span)}` },
    h("div", { class: "tl-axis", "aria-hidden": "true" }, h("div", { class: "tl-label" }), h("div", { class: "tl-track" }, ticks(span, pct, start))),
    h("div", { class: "tl-body" }, h("div", { class: "tl-bands", "aria-hidden": "true" }, bands),
      h("div", { role: "list", "aria-label": "Tasks" }, lines)),
    h("div", { class: "tl-legend muted", "aria-hidden": "true" }, ["done", "running", "retried", "failed", "timed_out", "reused", "edited"].map((o) =>
      h("span", {}, h("i", { class: `tl-key o-${o}` }), OUTCOME_TEXT[o])), h("span", {}, h("i", { class: "tl-key tl-q" }), "queued"),
    data.pauses.some((p) => p.kind !== "wait") ? h("span", {}, h("i", { class: "tl-key tl-pk" }), "paused") : null,
    data.pauses.some((p) => p.kind === "wait") ? h("span", {}, h("i", { class: "tl-key tl-wk" }), "waiting") : null),
    // The API pages attempts (1000 by default): a longer run says what the timeline leaves out.
    data.total > attempts.length ? h("div", { class: "muted" }, `The first ${attempts.length} of ${data.total} attempts.`) : null);
}

function bar(a, start, end, pct, ended, data) {
  const queued = epoch(a.queued_at);
  const began = epoch(a.started_at);
  const open = ["queued", "running"].includes(a.outcome);
  const finished = epoch(a.finished_at) || (open && !ended ? serverNow(data) : end);
  const button = h("button", { type: "button", class: `tl-bar o-${a.outcome}`, "data-seq": a.seq,
    "aria-label": attemptLabel(a), title: `${attemptLabel(a)}${a.model ? ` · ${a.model}` : ""}${a.error ? ` · ${a.error.slice(0, 160)}` : ""}`,
    onclick: () => openAttempt(a.seq) });
  button.style.left = pct(queued);
  button.style.width = `max(6px, calc(${pct(finished)} - ${pct(queued)}))`;
  if (began && began > queued) {
    const wait = h("span", { class: "tl-q" });
    wait.style.width = `${(((began - queued) / Math.max(finished - queued, 0.001)) * 100).toFixed(2)}%`;
    button.append(wait);
  }
  if (a.visit > 1 || a.attempt > 1) button.append(h("span", { class: "tl-tag" }, a.visit > 1 ? `v${a.visit}` : `#${a.attempt}`));
  return button;
}

function ticks(span, pct, start) {
  const steps = [0.1, 0.25, 0.5, 1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400];
  const step = steps.find((s) => span / s <= 8) || 86400;
  const marks = [];
  for (let t = 0; t <= span + 1e-9; t += step) {
    const mark = h("span", { class: "tl-tick" }, t < 120 ? `${+t.toFixed(2)}s` : t < 7200 ? `${Math.round(t / 60)}m` : `${Math.round(t / 3600)}h`);
    mark.style.left = pct(start + t);
    marks.push(mark);
  }
  return marks;
}

// -- attempt detail -------------------------------------------------------------------------

let opener = null;  // what had focus when the detail opened: it gets it back, even if redrawn

async function openAttempt(seq) {
  const dialog = document.getElementById("attempt-dialog");
  const active = document.activeElement;
  if (!dialog.open) opener = active ? { id: active.id, seq: active.dataset ? active.dataset.seq : null } : null;
  const body = document.getElementById("attempt-body");
  body.replaceChildren(h("div", { class: "muted" }, "Loading…"));
  document.getElementById("attempt-title").textContent = "Attempt";
  if (!dialog.open) dialog.showModal();
  try {
    const a = await api(`/api/runs/${page.runId}/attempts/${seq}`);
    document.getElementById("attempt-title").textContent = `${a.task_id} · attempt ${a.attempt}`;
    body.replaceChildren(...attemptDetail(a));
  } catch (error) { body.replaceChildren(h("div", { class: "warn failure" }, error.message)); }
}

function attemptDetail(a) {
  const row = (label, value) => value === null || value === undefined || value === "" ? null : h("tr", {}, h("th", { scope: "row" }, label), h("td", {}, value));
  const from = a.reused_from ? h("span", {}, `${a.reused_from.task} of `, h("a", { href: `#/runs/${a.reused_from.run}`, onclick: closeAttempt }, a.reused_from.run), ` (${a.reused_from.via})`) : null;
  const facts = h("table", { class: "facts" }, h("tbody", {},
    row("outcome", pill(a.outcome)), row("phase", `${a.phase} (visit ${a.visit})`), row("item", a.item),
    row("model", a.model ? `${a.model}${a.alias && a.alias !== a.model ? ` (as ${a.alias})` : ""}` : null), row("provider", a.provider),
    row("tokens", tokenText(a.tokens)), row("cost", a.cost_usd ? `$${a.cost_usd.toFixed(6)}${a.estimated ? " (estimated)" : ""}` : null),
    row("latency", a.latency_s !== null ? seconds(a.latency_s) : null), row("finish reason", a.finish_reason),
    row("tool calls", a.tool_calls ? `${a.tool_calls} over ${a.turns} model turns` : null),
    row("queued", a.queued_at), row("started", a.started_at), row("finished", a.finished_at),
    row("waited", a.queued_s !== null ? seconds(a.queued_s) : null), row("ran", a.duration_s !== null ? seconds(a.duration_s) : null),
    row("worker", a.worker), row("output", a.output), row("reused from", from), row("retry at", a.retry_at),
    row("error", a.error ? h("span", { class: "bad" }, a.error) : null),
    row("edits", a.edits.length ? a.edits.map((e) => h("div", {}, `by ${e.by || "someone"} at ${e.at}${e.note ? `: ${e.note}` : ""}`)) : null)));
  const block = (title, text, id) => text ? h("section", { class: "block", "aria-label": title }, h("h3", {}, title), h("pre", { id, tabindex: "0" }, text)) : null;
  const values = Object.keys(a.values || {}).length ? JSON.stringify(a.values, null, 2) : null;
  const parts = [facts, block("Extracted values", values, "attempt-values")];
  if (a.prompt) parts.push(block("System prompt", a.prompt.system, "attempt-system"), block("User prompt", a.prompt.user, "attempt-user"));
  parts.push(block("Tool calls", a.tools, "attempt-tools"),
    block(a.edits.length ? "Answer (as edited)" : "Answer", a.answer, "attempt-answer"),
    block("stdout", a.logs.stdout, "attempt-stdout"), block("stderr", a.logs.stderr, "attempt-stderr"));
  if (!a.prompt && !a.answer && !a.logs.stdout && !a.logs.stderr) parts.push(h("p", { class: "muted" }, "No prompt, answer or log was kept for this attempt."));
  return parts.filter(Boolean);
}

function closeAttempt() { document.getElementById("attempt-dialog").close(); }
document.getElementById("attempt-close").addEventListener("click", closeAttempt);
document.getElementById("attempt-dialog").addEventListener("close", () => {
  if (!opener) return;
  const target = opener.seq ? view.querySelector(`.tl-bar[data-seq="${opener.seq}"]`) : opener.id ? document.getElementById(opener.id) : null;
  if (target) target.focus();
  opener = null;
});
