"use strict";
// What a person can do to a run: approve with a note, send it back to a phase with feedback,
// edit an output at a pause, rerun it from a phase, cancel it (after a confirmation). Each is
// shown only to a token with the operate scope; what is typed survives the live redraws.

const READ_ONLY = "Read-only: your token has the read scope only; acting on runs needs the operate scope.";

function typed(key, attrs, tag = "input") {
  return h(tag, { ...attrs, value: tag === "input" ? page.typed[key] || "" : null,
    oninput: (e) => { page.typed[key] = e.target.value; } }, tag === "textarea" ? page.typed[key] || "" : null);
}

function headerControls(run) {
  if (ended(run)) return null;
  if (!can("operate")) return h("div", { class: "muted read-only", id: "read-only" }, READ_ONLY);
  // The note can be written while the run still works; approving waits for the pause.
  // A pause for tool calls is answered call by call (`toolCallsPanel`).
  const paused = run.status === "paused" && !(run.pause && run.pause.reason === "tool");
  return h("div", { class: "actions", role: "group", "aria-label": "Run controls" },
    typed("note", { id: "note", placeholder: "note (optional)", size: 28, "aria-label": "Note kept with the approval" }),
    h("button", { class: "ok", id: "approve", type: "button", disabled: !paused, title: paused ? null : "the run is not paused", onclick: approve }, "Approve"),
    h("button", { class: "danger", id: "cancel", type: "button", onclick: askCancel }, "Cancel…"));
}

// Tool calls that wait for a person (`approve:` of a worker's MCP server): each one shown with
// its tool, the start of its arguments and its turn, and let run or refused with a reason.
function toolCallsPanel(run) {
  const calls = (run.pause && run.pause.tool_calls) || [];
  if (run.status !== "paused" || !calls.length) return null;
  const rows = calls.map((call) => h("div", { class: "tool-call", "data-call": call.ref },
    h("div", {}, h("strong", {}, call.tool), " ", h("code", {}, call.arguments), h("span", { class: "muted" }, ` turn ${call.turn} of ${call.task}`)),
    can("operate") ? h("div", { class: "actions" },
      typed(`reason:${call.ref}`, { class: "call-reason", placeholder: "reason (told to the model if refused)", size: 32, "aria-label": `Reason for tool call ${call.ref}` }),
      h("button", { class: "ok approve-call", type: "button", onclick: () => decideCall(call, "approve") }, "Approve call"),
      h("button", { class: "ghost reject-call", type: "button", onclick: () => decideCall(call, "reject") }, "Refuse call")) : null));
  return h("section", { class: "panel", id: "tool-calls", "aria-labelledby": "tool-calls-title" },
    h("h2", { id: "tool-calls-title" }, "Tool calls waiting for approval"), rows);
}

function decideCall(call, verdict) {
  const path = `tool-calls/${encodeURIComponent(call.task)}/${call.turn}/${call.call}/${verdict}`;
  send(path, { message: page.typed[`reason:${call.ref}`] || "" }, () => {
    delete page.typed[`reason:${call.ref}`];
    toast(verdict === "approve" ? `Tool call ${call.ref} approved` : `Tool call ${call.ref} refused`);
  });
}

function reviewPanel(run) {
  // A run paused by its child run has its pipeline task in flight: it is sent back (or
  // edited) in the child, where the review is, and the note on this page links there.
  if (run.status !== "paused" || !can("operate") || (run.pause && run.pause.child)) return null;
  if (run.pause && run.pause.reason === "tool") return null; // decided call by call above
  const visited = run.phases.filter((p) => p.visits > 0).map((p) => p.id);
  const to = page.typed.rejectTo && visited.includes(page.typed.rejectTo) ? page.typed.rejectTo : run.phase;
  return h("section", { class: "panel", "aria-labelledby": "review-title" }, h("h2", { id: "review-title" }, "Send back"),
    h("form", { class: "review", onsubmit: reject },
      h("label", { for: "reject-to" }, "Run again from phase "),
      h("select", { id: "reject-to", onchange: (e) => { page.typed.rejectTo = e.target.value; } },
        visited.map((id) => h("option", { value: id, selected: id === to }, id))),
      typed("feedback", { id: "feedback", rows: 3, placeholder: "what to change: the phase's models are told it ({{ feedback }} in templates)", "aria-label": "Feedback" }, "textarea"),
      h("button", { id: "reject", type: "submit", class: "ghost" }, "Reject and send back")));
}

function rerunPanel(run) {
  if (!ended(run) || !can("operate")) return null;
  return h("section", { class: "panel", "aria-labelledby": "rerun-title" }, h("h2", { id: "rerun-title" }, "Rerun"),
    h("form", { class: "toolbar", onsubmit: rerun },
      h("label", { for: "rerun-from" }, "Run again from "),
      h("select", { id: "rerun-from", onchange: (e) => { page.typed.rerunFrom = e.target.value; } },
        h("option", { value: "" }, "wherever inputs changed (reuse the rest)"),
        run.phases.map((p) => h("option", { value: p.id, selected: p.id === page.typed.rerunFrom }, `phase ${p.id}`))),
      typed("rerunTopic", { id: "rerun-topic", placeholder: "new topic (optional: a fork)", size: 30, "aria-label": "Topic of the new run" }),
      h("button", { id: "rerun", type: "submit" }, "Rerun"),
      h("span", { class: "muted" }, "Tasks before that phase whose inputs match are reused at no cost.")));
}

async function send(path, body, done) {
  try {
    const answer = await api(`/api/runs/${page.runId}/${path}`, { method: "POST", body: JSON.stringify(body) });
    done(answer);
  } catch (error) { toast(error.message, true); }
}

function approve() {
  send("approve", { message: page.typed.note || "" }, () => {
    page.typed.note = "";
    const note = document.getElementById("note");
    if (note) note.value = "";
    toast("Approval sent");
  });
}

function reject(event) {
  event.preventDefault();
  const to = document.getElementById("reject-to").value;
  send("reject", { to, message: page.typed.feedback || "" }, () => { page.typed.feedback = ""; toast(`Sent back to ${to}`); });
}

function rerun(event) {
  event.preventDefault();
  const from = document.getElementById("rerun-from").value;
  const topic = (page.typed.rerunTopic || "").trim();
  const body = { ...(from ? { from_phase: from } : {}), ...(topic ? { topic } : {}) };
  send("rerun", body, (run) => { toast(`Rerun ${run.run_id} started`); location.hash = `#/runs/${run.run_id}`; });
}

function askCancel() {
  document.getElementById("cancel-run-id").textContent = page.runId;
  document.getElementById("cancel-reason").value = "";
  document.getElementById("cancel-dialog").showModal();
}

document.getElementById("cancel-dialog").addEventListener("close", (event) => {
  if (event.target.returnValue !== "confirm") { const button = document.getElementById("cancel"); if (button) button.focus(); return; }
  send("cancel", { message: document.getElementById("cancel-reason").value }, () => toast("Cancellation sent"));
});

// -- editing an output at a pause ------------------------------------------------------------

function editable(name) {
  return page.run.status === "paused" && can("operate") && name !== "final.md";
}

function editButton(name) {
  if (!editable(name) || page.editing === name) return null;
  return h("button", { id: "edit-output", type: "button", class: "ghost", onclick: () => startEdit(name) }, `Edit ${name}`);
}

async function startEdit(name) {
  try {
    page.typed.edit = String(await api(`/api/runs/${page.runId}/outputs/${encodeURIComponent(name)}`));
    page.editing = name;
    drawRun();
    document.getElementById("edit-text").focus();
  } catch (error) { toast(error.message, true); }
}

function editor(name) {
  if (page.editing !== name || !editable(name)) return null;
  return h("form", { class: "editor", onsubmit: saveEdit, "aria-label": `Edit ${name}` },
    typed("edit", { id: "edit-text", rows: 14, "aria-label": `New text of ${name}` }, "textarea"),
    h("div", { class: "toolbar" }, typed("editNote", { id: "edit-note", placeholder: "why (optional)", size: 30, "aria-label": "Note kept with the edit" }),
      h("button", { id: "edit-save", type: "submit" }, "Save edit"),
      h("button", { id: "edit-discard", type: "button", class: "ghost", onclick: () => { page.editing = null; drawRun(); } }, "Discard")));
}

async function saveEdit(event) {
  event.preventDefault();
  const name = page.editing;
  try {
    const note = encodeURIComponent(page.typed.editNote || "");
    await api(`/api/runs/${page.runId}/outputs/${encodeURIComponent(name)}?note=${note}`, { method: "PUT", body: page.typed.edit || "",
      headers: { "Content-Type": "text/plain; charset=utf-8" } });
    page.editing = null;
    page.typed.editNote = "";
    toast(`${name} edited: tasks that read it run again when the run goes on`);
    refreshRun();
  } catch (error) { toast(error.message, true); }
}

// -- signals -----------------------------------------------------------------------------------

function signalPanel(run) {
  const waited = run.waiting && run.waiting.signal;
  const declared = (page.graph.phases || []).map((p) => p.wait_for).filter(Boolean);
  // A run waiting because its child run waits passes on a signal only the child waits for.
  const viaChild = run.waiting && run.waiting.for === "child";
  if (ended(run) || !can("operate") || (!waited && !declared.length && !viaChild)) return null;
  if (page.typed.signal === undefined) page.typed.signal = waited || declared[0] || "";
  return h("section", { class: "panel", "aria-labelledby": "signal-title" }, h("h2", { id: "signal-title" }, "Send a signal"),
    h("form", { class: "review", onsubmit: sendSignal },
      h("label", { for: "signal-name" }, "Signal"),
      typed("signal", { id: "signal-name", list: "signal-names", autocomplete: "off", size: 24 }),
      h("datalist", { id: "signal-names" }, [...new Set(declared)].map((name) => h("option", { value: name }))),
      typed("signalData", { id: "signal-data", rows: 3, placeholder: "data as JSON (optional), e.g. {\"approved\": true}", "aria-label": "Signal data as JSON" }, "textarea"),
      h("button", { id: "send-signal", type: "submit" }, "Send signal")));
}

function sendSignal(event) {
  event.preventDefault();
  const name = (page.typed.signal || "").trim();
  if (!name) { toast("name the signal to send", true); return; }
  let data = null;
  const text = (page.typed.signalData || "").trim();
  if (text) {
    try { data = JSON.parse(text); } catch (error) { toast(`the data is not JSON: ${error.message}`, true); return; }
  }
  send(`signals/${encodeURIComponent(name)}`, { data }, (answer) => {
    page.typed.signalData = "";
    toast(answer.duplicate ? `Signal ${name} was already sent` : `Signal ${name} sent`);
  });
}

function waitingNote(run) {
  const w = run.waiting;
  if (!w) return null;
  if (w.for === "child") return h("div", { class: "warn waiting", id: "waiting" }, "Waiting in child ", runLink(w.child),
    `: ${(w.detail || "it waits").replace(`run ${w.child} `, "")}. A signal it waits for can be sent here or there.`);
  if (w.for === "slot") return h("div", { class: "warn waiting", id: "waiting" }, `Waiting for a slot of “${w.key}” (${w.limit} at once).`);
  if (w.for === "task_slot") {
    const more = w.tasks > 1 ? ` and ${w.tasks - 1} more` : "";
    return h("div", { class: "warn waiting", id: "waiting" }, `Waiting for a slot of “${w.key}” (${w.limit} at once) for task ${w.task}${more}.`);
  }
  const until = w.until ? ` until ${new Date(w.until).toLocaleString()}` : "";
  const what = w.signal ? `for signal “${w.signal}”${until}` : `until ${new Date(w.until).toLocaleString()}`;
  return h("div", { class: "warn waiting", id: "waiting" }, `Waiting ${w.when === "after" ? "after" : "before"} phase ${w.phase} ${what}.`);
}
