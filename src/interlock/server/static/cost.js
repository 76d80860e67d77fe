"use strict";
// Where the money went: cost and tokens by kind per phase and per task, the run's total, and
// how much of the pipeline's budget it used. A running child run's spend so far counts (its
// tokens in a column of their own: they are recorded as one total, not by kind).

const KINDS = [["input_tokens", "input"], ["output_tokens", "output"], ["cache_read_tokens", "cache read"],
  ["cache_write_tokens", "cache write"], ["reasoning_tokens", "reasoning"]];

function costView(costs) {
  const used = KINDS.filter(([key]) => costs.run.tokens[key]);
  const shown = used.length ? used : KINDS.slice(0, 2);
  const child = costs.run.child_tokens > 0;
  const cells = (b) => [h("td", { class: "num" }, b.attempts), ...shown.map(([key]) => h("td", { class: "num" }, b.tokens[key] ? `${b.estimated ? "~" : ""}${b.tokens[key]}` : "–")),
    ...(child ? [h("td", { class: "num" }, b.child_tokens || "–")] : []),
    h("td", { class: "num" }, b.cost_usd ? `${b.estimated ? "~" : ""}$${b.cost_usd.toFixed(4)}` : "–")];
  // A phase's tasks are listed under it; a wide fan-out starts folded (its button unfolds it).
  const rows = [];
  page.costOpen = page.costOpen || {};
  for (const [phase, bucket] of Object.entries(costs.phases)) {
    const tasks = Object.entries(costs.tasks).filter(([, t]) => t.phase === phase);
    const open = page.costOpen[phase] ?? tasks.length <= 12;
    const toggle = h("button", { type: "button", class: "fold", id: `cost-${phase}`, "aria-expanded": String(open),
      onclick: () => { page.costOpen[phase] = !open; drawRun(); } }, `${open ? "▾" : "▸"} ${phase}`);
    rows.push(h("tr", { class: "phase-row" }, h("th", { scope: "row" }, tasks.length ? toggle : phase), ...cells(bucket)));
    if (open) for (const [task, t] of tasks) rows.push(h("tr", {}, h("td", { class: "mono indent" }, task), ...cells(t)));
  }
  const table = h("table", { class: "cost", "aria-label": "Cost per phase and task" },
    h("thead", {}, h("tr", {}, h("th", { scope: "col" }, "phase / task"), h("th", { scope: "col", class: "num" }, "attempts"),
      ...shown.map(([, label]) => h("th", { scope: "col", class: "num" }, `${label} tokens`)),
      ...(child ? [h("th", { scope: "col", class: "num" }, "running child tokens")] : []), h("th", { scope: "col", class: "num" }, "cost"))),
    h("tbody", {}, rows),
    h("tfoot", {}, h("tr", {}, h("th", { scope: "row" }, "run"), ...cells(costs.run))));
  // Counted at four characters a token where a server reported no usage: said, not stated as fact.
  const estimated = costs.run.estimated ? h("p", { class: "muted", id: "cost-estimated" },
    "~: estimated (a server reported no token counts: its tokens, and so its cost, are counted at four characters a token)") : null;
  return h("div", {}, budgetView(costs), table, estimated);
}

function budgetView(costs) {
  const b = costs.budget;
  if (!b) return null;
  const parts = [];
  if (b.max_cost_usd) parts.push(meter("cost", b.cost_fraction, `${money(costs.run.cost_usd) === "–" ? "$0" : money(costs.run.cost_usd)} of $${b.max_cost_usd}`));
  if (b.max_tokens) parts.push(meter("tokens", b.token_fraction, `${costs.run.tokens.input_tokens + costs.run.tokens.output_tokens + (costs.run.child_tokens || 0)} of ${b.max_tokens} tokens`));
  return h("div", { class: "budget" }, h("span", { class: "muted" }, `Budget (${b.on_exceed} when reached): `), parts);
}

function meter(what, fraction, text) {
  const pct = Math.round(Math.min(1, fraction || 0) * 100);
  const fill = h("div", { class: pct >= 90 ? "over" : "" });
  fill.style.width = `${pct}%`;
  return h("span", { class: "meter-wrap" }, h("span", { class: "meter", role: "meter", "aria-label": `Budget used: ${what}`, "aria-valuemin": 0,
    "aria-valuemax": 100, "aria-valuenow": pct, "aria-valuetext": `${pct}%: ${text}` }, fill), ` ${text} (${pct}%)`);
}

function inputsView(inputs) {
  const entries = Object.entries(inputs || {});
  if (!entries.length) return null;
  return h("dl", { class: "inputs", "aria-label": "Inputs" }, entries.map(([k, v]) => h("div", {}, h("dt", {}, k), h("dd", {}, String(v)))));
}
