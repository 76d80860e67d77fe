"use strict";
// The form that starts a run: the pipeline, its topic, and a field per declared input (a
// checkbox for a true/false default, a number field for a numeric one, text otherwise).

let workflows = [];

function startPanel() {
  const pipeline = h("select", { id: "start-pipeline", "aria-label": "Pipeline to start", onchange: drawInputs });
  const topic = h("input", { id: "start-topic", placeholder: "topic", size: 36, required: true, "aria-label": "Topic" });
  const start = h("button", { id: "start-run", type: "submit", disabled: !can("operate"), title: can("operate") ? null : NO_OPERATE }, "Start run");
  const form = h("form", { id: "start-form", onsubmit: startRun, "aria-labelledby": "start-title" },
    h("div", { class: "toolbar" }, pipeline, topic, start),
    h("div", { class: "muted", id: "start-about" }), h("div", { class: "fields", id: "start-inputs" }));
  api("/api/workflows").then((list) => {
    workflows = list;
    pipeline.replaceChildren(...list.map((w) => h("option", { value: w.pipeline }, w.pipeline)));
    if (!list.length) { start.disabled = true; pipeline.append(h("option", {}, "no workflows registered")); }
    else start.disabled = !can("operate");
    drawInputs();
  }).catch(() => {});
  return h("section", { class: "panel", "aria-labelledby": "start-title" }, h("h2", { id: "start-title" }, "Start a run"), form);
}

function inputKind(spec) {
  const d = spec.default;
  if (typeof d === "boolean") return "bool";
  if (typeof d === "number") return Number.isInteger(d) ? "int" : "float";
  return "text";
}

function drawInputs() {
  const box = document.getElementById("start-inputs");
  const choice = workflows.find((w) => w.pipeline === document.getElementById("start-pipeline").value);
  if (!box || !choice) return;
  document.getElementById("start-about").textContent = choice.description || "";
  box.replaceChildren(...Object.entries(choice.inputs).map(([name, spec]) => {
    const id = `input-${name}`;
    const kind = inputKind(spec);
    const hint = spec.description ? h("span", { class: "muted hint", id: `${id}-hint` }, spec.description) : null;
    const common = { id, name, "data-kind": kind, "aria-describedby": hint ? `${id}-hint` : null };
    const control = kind === "bool"
      ? h("input", { ...common, type: "checkbox", checked: spec.default === true })
      : h("input", { ...common, type: kind === "text" ? "text" : "number", step: kind === "float" ? "any" : kind === "int" ? "1" : null,
        value: spec.default === null || spec.default === undefined ? "" : spec.default, required: spec.required && spec.default === null });
    return h("div", { class: "field" }, h("label", { for: id }, name, spec.required ? h("span", { class: "req", "aria-hidden": "true" }, " *") : null,
      kind !== "text" ? h("span", { class: "muted" }, ` (${kind === "bool" ? "yes/no" : "number"})`) : null), control, hint);
  }));
}

function inputValues() {
  const values = {};
  for (const field of document.querySelectorAll("#start-inputs input")) {
    const kind = field.dataset.kind;
    if (kind === "bool") values[field.name] = field.checked;
    else if (field.value === "") continue;  // left empty: the declared default applies
    else values[field.name] = kind === "text" ? field.value : Number(field.value);
  }
  return values;
}

async function startRun(event) {
  event.preventDefault();
  const pipeline = document.getElementById("start-pipeline").value;
  const topic = document.getElementById("start-topic").value.trim();
  if (!topic) { toast("give the run a topic", true); document.getElementById("start-topic").focus(); return; }
  if (!event.target.reportValidity()) return;
  try {
    const run = await api("/api/runs", { method: "POST", body: JSON.stringify({ pipeline, topic, inputs: inputValues() }) });
    location.hash = `#/runs/${run.run_id}`;
  } catch (error) { toast(error.message, true); }
}
