"use strict";
// The compare view (`interlock compare`): an experiment's variants, or two batches of the same
// rows, side by side; then the rows where they differ most, each with the diff of its two runs.
// And the diff of two runs (`interlock diff`).

async function comparePage(batchIds) {
  page = { name: "compare", batchIds, by: "", limit: 10, found: null, asked: 0 };
  const mine = page;
  view.replaceChildren(h("div", { class: "empty" }, "Loading…"));
  await loadCompare(mine);
}

async function loadCompare(mine) {
  const query = new URLSearchParams();
  for (const id of mine.batchIds) query.append("batch", id);
  if (mine.by) query.set("by", mine.by);
  query.set("limit", String(mine.limit));
  const asked = ++mine.asked;
  let found;
  try { found = await api(`/api/compare?${query}`); } catch (error) {
    if (page === mine) view.replaceChildren(h("nav", { class: "toolbar crumbs" }, h("a", { href: "#/batches" }, "← Batches")),
      h("div", { class: "panel", id: "compare-error" }, error.message));
    return;
  }
  if (page !== mine || asked !== mine.asked) return;
  mine.found = found;
  drawCompare(mine);
}

function ratio(value) { return value === null || value === undefined ? "–" : `${Math.round(value * 100)}%`; }
function num(value, digits = 2) { return value === null || value === undefined ? "–" : value.toLocaleString(undefined, { maximumFractionDigits: digits }); }

function drawCompare(mine) {
  const found = mine.found;
  const variants = found.variants;
  const title = mine.batchIds.length === 1 ? `Experiment ${mine.batchIds[0]}` : `${mine.batchIds[0]} vs ${mine.batchIds[1]}`;
  // A true/false metric reads as a pass rate; a numeric one as its mean and median.
  const heads = [];
  for (const name of found.metrics) {
    if (variants.some((v) => v.metrics[name] && v.metrics[name].pass_rate !== null)) heads.push([name, "pass_rate", `${name}: pass rate`]);
    else heads.push([name, "mean", `${name}: mean`], [name, "median", `${name}: median`]);
  }
  const cell = (v, [name, key]) => {
    const m = v.metrics[name];
    if (!m) return "–";
    return key === "pass_rate" ? ratio(m.pass_rate) : num(m[key]);
  };
  const best = {};  // per column, the best variant's value (highest), marked
  for (const head of heads) {
    const values = variants.map((v) => { const m = v.metrics[head[0]]; return m ? m[head[1]] : null; }).filter((x) => x !== null && x !== undefined);
    if (values.length > 1 && new Set(values).size > 1) best[head[2]] = Math.max(...values);
  }
  const summary = h("table", { id: "compare-table", "aria-label": "Variants" }, h("thead", {}, h("tr", {},
    h("th", { scope: "col" }, "variant"), h("th", { scope: "col" }, "batch"), h("th", { scope: "col", class: "num" }, "delivered"),
    h("th", { scope: "col", class: "num" }, "failed"), h("th", { scope: "col", class: "num" }, "cost"), h("th", { scope: "col", class: "num" }, "tokens"),
    h("th", { scope: "col", class: "num" }, "p50 latency"), h("th", { scope: "col", class: "num" }, "p95 latency"),
    heads.map(([, , label]) => h("th", { scope: "col", class: "num" }, label)))),
  h("tbody", {}, variants.map((v) => h("tr", { "data-variant": v.variant },
    h("th", { scope: "row" }, v.variant), h("td", { class: "mono" }, h("a", { href: `#/batches/${v.batch_id}` }, v.batch_id)),
    h("td", { class: "num" }, `${v.delivered}/${v.rows}`), h("td", { class: "num" }, v.failed),
    h("td", { class: "num" }, money(v.cost_usd)), h("td", { class: "num" }, v.tokens.toLocaleString()),
    h("td", { class: "num" }, seconds(v.p50_seconds) || "–"), h("td", { class: "num" }, seconds(v.p95_seconds) || "–"),
    heads.map((head) => {
      const m = v.metrics[head[0]];
      const value = m ? m[head[1]] : null;
      return h("td", { class: value !== null && value === best[head[2]] ? "num best" : "num" }, cell(v, head));
    })))));
  const numeric = found.metrics.filter((name) => variants.some((v) => v.metrics[name] && v.metrics[name].mean !== null && v.metrics[name].pass_rate === null));
  const by = h("select", { id: "compare-by", "aria-label": "Compare rows by metric", onchange: (e) => { mine.by = e.target.value; loadCompare(mine); } },
    numeric.map((name) => h("option", { value: name, selected: name === found.by }, name)));
  const limit = h("select", { id: "compare-limit", "aria-label": "Rows shown", onchange: (e) => { mine.limit = Number(e.target.value); loadCompare(mine); } },
    [10, 25, 100].map((n) => h("option", { value: n, selected: n === mine.limit }, `${n} rows`)));
  let differences;
  if (found.by === null) differences = h("div", { class: "empty" }, "No numeric metric to compare rows by: declare 'metrics:' in the pipeline.");
  else if (!found.differences.length) differences = h("div", { class: "empty" }, `No row differs by ${found.by}.`);
  else differences = h("table", { id: "differences", "aria-label": "Rows that differ most" }, h("thead", {}, h("tr", {},
    h("th", { scope: "col", class: "num" }, "row"), h("th", { scope: "col", class: "num" }, "spread"),
    h("th", { scope: "col" }, "highest"), h("th", { scope: "col" }, "lowest"), h("th", { scope: "col" }, "diff"))),
  h("tbody", {}, found.differences.map((d) => h("tr", { "data-row": d.row },
    h("td", { class: "num" }, d.row), h("td", { class: "num" }, num(d.spread)),
    h("td", {}, h("b", {}, num(d.high.value)), " ", d.high.variant, " ", h("a", { class: "mono", href: `#/runs/${d.high.run_id}` }, d.high.run_id)),
    h("td", {}, h("b", {}, num(d.low.value)), " ", d.low.variant, " ", h("a", { class: "mono", href: `#/runs/${d.low.run_id}` }, d.low.run_id)),
    h("td", {}, h("a", { class: "diff-link", href: `#/diff/${d.low.run_id}/${d.high.run_id}`, title: d.diff }, "diff the two runs"))))));
  view.replaceChildren(
    h("nav", { class: "toolbar crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/batches" }, "← Batches")),
    h("section", { class: "panel", "aria-labelledby": "compare-title" },
      h("h1", { id: "compare-title" }, title),
      h("p", { class: "muted" }, "Per variant: rows delivered, cost, tokens, the p50 and p95 of its delivered runs' durations, and each metric's mean and median, or its pass rate (the best is marked)."),
      h("div", { class: "scroll-x" }, summary)),
    h("section", { class: "panel", "aria-labelledby": "diff-title" },
      h("div", { class: "toolbar filters" }, h("h2", { id: "diff-title" }, found.by ? `Rows that differ most by ${found.by}` : "Rows that differ most"),
        h("span", { class: "spacer" }), numeric.length ? by : null, limit),
      differences));
}

// -- the diff of two runs ---------------------------------------------------------------

async function diffPage(a, b) {
  page = { name: "diff", a, b };
  const mine = page;
  view.replaceChildren(h("div", { class: "empty" }, "Loading…"));
  let found;
  try { found = await api(`/api/runs/${a}/diff/${b}?outputs=true`); } catch (error) {
    if (page === mine) view.replaceChildren(h("div", { class: "panel", id: "diff-error" }, error.message));
    return;
  }
  if (page !== mine) return;
  const show = (value) => (value === null || value === undefined ? "–" : typeof value === "object" ? JSON.stringify(value) : String(value));
  const runs = h("table", { id: "diff-runs", "aria-label": "How the runs differ" }, h("thead", {}, h("tr", {},
    h("th", { scope: "col" }, ""), h("th", { scope: "col" }, "A"), h("th", { scope: "col" }, "B"))),
  h("tbody", {}, h("tr", {}, h("th", { scope: "row" }, "run"), h("td", {}, runLinkTo(found.a)), h("td", {}, runLinkTo(found.b))),
    Object.entries(found.runs).map(([name, [x, y]]) => h("tr", {}, h("th", { scope: "row" }, name),
      h("td", { class: "mono" }, name === "cost_usd" ? money(x) : show(x)), h("td", { class: "mono" }, name === "cost_usd" ? money(y) : show(y))))));
  const tasks = h("table", { id: "diff-tasks", "aria-label": "Tasks" }, h("thead", {}, h("tr", {},
    h("th", { scope: "col" }, "task"), h("th", { scope: "col" }, "A"), h("th", { scope: "col" }, "B"), h("th", { scope: "col" }, "output"),
    h("th", { scope: "col" }, "values that differ"), h("th", { scope: "col", class: "num" }, "cost A / B"))),
  h("tbody", {}, found.tasks.map((t) => [h("tr", { "data-task": t.task_id },
    h("td", { class: "mono" }, t.task_id), h("td", {}, t.a), h("td", {}, t.b), h("td", { class: t.output === "changed" ? "bad" : "" }, t.output),
    h("td", { class: "mono" }, Object.entries(t.values).map(([k, [x, y]]) => h("div", {}, `${k}: ${show(x)} → ${show(y)}`))),
    h("td", { class: "num" }, `${money(t.cost[0])} / ${money(t.cost[1])}`)),
  t.text_diff ? h("tr", { class: "text-diff" }, h("td", { colspan: 6 }, textDiff(t.text_diff))) : null])));
  view.replaceChildren(
    h("nav", { class: "toolbar crumbs", "aria-label": "Breadcrumb" }, h("a", { href: "#/batches", onclick: (e) => { if (history.length > 1) { e.preventDefault(); history.back(); } } }, "← Back")),
    h("section", { class: "panel", "aria-labelledby": "rundiff-title" }, h("h1", { id: "rundiff-title" }, "Diff of two runs"), runs),
    h("section", { class: "panel", "aria-labelledby": "tasks-title" }, h("h2", { id: "tasks-title" }, "Tasks"), tasks),
    h("section", { class: "panel", "aria-labelledby": "decisions-title" }, h("h2", { id: "decisions-title" }, "Decisions that went otherwise"),
      found.decisions.length ? h("ul", { class: "rules" }, found.decisions.map((d) => h("li", {}, d))) : h("div", { class: "empty" }, "The same decisions.")));
}

function runLinkTo(runId) { return h("a", { class: "mono", href: `#/runs/${runId}` }, runId); }

// A unified diff, each line coloured by its sign.
function textDiff(text) {
  return h("pre", { class: "udiff" }, text.replace(/\n+$/, "").split("\n").map((line) => h("span", {
    class: line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "" }, `${line}\n`)));
}
