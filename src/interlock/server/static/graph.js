"use strict";
// The pipeline as an inline SVG drawn from the server's JSON: phases left to right in file
// order, their workers inside, `reads:` edges between workers, `next:` edges between phases
// (a loop back arcs below), and the path the run took in the accent colour with its counts.

const SVG = "http://www.w3.org/2000/svg";
const G = { col: 190, gap: 110, head: 38, row: 38, box: 28, pad: 12, top: 14 };

function s(tag, attrs, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

// As graph.py's edge_key: a rule's edge is counted apart from another rule between the
// same phases, so only the rule that held shows as taken.
function edgeKey(e) { return e.rule ? `${e.from}->${e.to}#${e.rule}` : `${e.from}->${e.to}`; }

function clip(text, n) { return text.length > n ? `${text.slice(0, n - 1)}…` : text; }

function graphView(graph, run, attempts) {
  const visits = {};
  for (const v of graph.visits || []) visits[v.phase] = Math.max(visits[v.phase] || 0, v.visit);
  const taken = graph.taken || {};
  const latest = {};
  for (const a of (attempts && attempts.attempts) || []) latest[a.role] = a;
  const place = {};  // phase id -> {x, y, w, h}; role -> its box
  let bottom = 0;
  graph.phases.forEach((p, i) => {
    const x = G.pad + i * (G.col + G.gap);
    const height = G.head + p.workers.length * G.row + 4;
    place[p.id] = { x, y: G.top, w: G.col, h: height };
    p.workers.forEach((w, j) => { place[`@${w.role}`] = { x: x + 10, y: G.top + G.head + j * G.row, w: G.col - 20, h: G.box }; });
    bottom = Math.max(bottom, G.top + height);
  });
  const endX = G.pad + graph.phases.length * (G.col + G.gap);
  place[graph.end] = { x: endX, y: G.top + 4, w: 56, h: 30 };
  // Edges to the next column are straight; those that skip columns arc above the phases,
  // those that go back (loops) arc below, each on a lane of its own.
  const column = (id) => (id === graph.end ? graph.phases.length : graph.phases.findIndex((p) => p.id === id));
  const loops = graph.flow.filter((e) => column(e.to) <= column(e.from));
  const skips = graph.flow.filter((e) => column(e.to) > column(e.from) + 1);
  const lift = skips.length * 24;
  for (const box of Object.values(place)) box.y += lift;
  bottom += lift;
  const height = bottom + 34 + loops.length * 26;
  const width = endX + 56 + G.pad;
  const nodes = [], edges = [], labels = [];
  graph.phases.forEach((p) => {
    const box = place[p.id];
    const seen = visits[p.id] || 0;
    const current = run && run.phase === p.id && !["delivered", "failed", "cancelled"].includes(run.status);
    const status = run ? (run.phases.find((q) => q.id === p.id) || {}).status : null;
    const kind = [p.mode === "sequential" ? "sequential" : null, p.for_each ? `for each ${p.for_each}` : null, p.pause_after ? "pauses after" : null,
      p.wait_for ? `waits ${p.wait_when} for signal ${p.wait_for}` : null, p.delay ? "waits for a time" : null].filter(Boolean).join(", ");
    nodes.push(s("g", { class: `g-phase${seen ? " g-visited" : ""}${current ? " g-current" : ""}` },
      s("title", {}, `phase ${p.id}${kind ? ` (${kind})` : ""}: ${status || "not run"}, ${seen} visit(s)`),
      s("rect", { x: box.x, y: box.y, width: box.w, height: box.h, rx: 8 }),
      s("text", { x: box.x + 10, y: box.y + 20, class: "g-title" }, clip(p.id, 18)),
      s("text", { x: box.x + box.w - 10, y: box.y + 20, class: "g-sub", "text-anchor": "end" },
        [p.wait_for || p.delay ? "waits" : null, p.pause_after ? "pauses" : null, p.for_each ? "each" : null, seen ? `${seen}×` : null].filter(Boolean).join(" · "))));
    p.workers.forEach((w) => {
      const wb = place[`@${w.role}`];
      const last = latest[w.role];
      const label = `worker ${w.role} (${w.kind}${w.model ? ` ${w.model}` : ""}${w.pipeline ? ` ${w.pipeline}, runs a child run` : ""}), writes ${w.output}${w.final ? ", final" : ""}${last ? `; last attempt ${last.outcome}` : "; not run"}`;
      const open = () => { if (last) openAttempt(last.seq); };
      nodes.push(s("g", { id: `g-node-${w.role}`, class: `g-node o-${last ? last.outcome : "none"}${w.pipeline ? " g-child" : ""}`, tabindex: last ? 0 : -1, role: last ? "button" : "img", "aria-label": label,
        onclick: open, onkeydown: (e) => { if (e.key === "Enter" || e.key === " ") { e.preventDefault(); open(); } } },
        s("title", {}, label),
        s("rect", { x: wb.x, y: wb.y, width: wb.w, height: wb.h, rx: 5 }),
        s("circle", { cx: wb.x + 11, cy: wb.y + wb.h / 2, r: 4, class: "g-dot" }),
        s("text", { x: wb.x + 22, y: wb.y + 18 }, clip(`${w.role}${w.final ? " ★" : ""}`, 16)),
        s("text", { x: wb.x + wb.w - 8, y: wb.y + 18, class: "g-sub", "text-anchor": "end" }, clip(w.pipeline ? `↳ ${w.pipeline}` : w.model || w.kind, 9))));
    });
  });
  const end = place[graph.end];
  const delivered = run && run.status === "delivered";
  nodes.push(s("g", { class: `g-phase g-end${delivered ? " g-visited" : ""}` }, s("title", {}, delivered ? "delivered" : "delivery"),
    s("rect", { x: end.x, y: end.y, width: end.w, height: end.h, rx: 15 }), s("text", { x: end.x + end.w / 2, y: end.y + 19, "text-anchor": "middle" }, "end")));
  for (const e of graph.reads) {
    const a = place[`@${e.from}`], b = place[`@${e.to}`];
    if (!a || !b) continue;
    const x1 = a.x + a.w, y1 = a.y + a.h / 2, x2 = b.x, y2 = b.y + b.h / 2;
    const d = x2 > x1 ? `M${x1},${y1} C${x1 + 40},${y1} ${x2 - 40},${y2} ${x2},${y2}` : `M${a.x},${y1} C${a.x - 30},${y1} ${b.x - 30},${y2} ${b.x},${y2}`;
    edges.push(s("path", { d, class: "g-read", "marker-end": "url(#g-arrow-read)" }, s("title", {}, `${e.to} reads ${e.file} (written by ${e.from})`)));
  }
  let loop = 0, skip = 0;
  for (const e of graph.flow) {
    const a = place[e.from], b = place[e.to];
    const count = taken[edgeKey(e)] || 0;
    // A label between two neighbouring phases has only the gap: the condition is shortened
    // there (its whole text is in the edge's title and in the list of rules).
    const room = column(e.to) === column(e.from) + 1 ? 14 : 30;
    const text = e.rule ? `${e.condition ? clip(e.condition, room) : "always"}${e.max_visits && room > 14 ? ` (max ${e.max_visits})` : ""}` : "";
    const cls = `g-flow${count ? " g-taken" : ""}`;
    const title = `${e.from} → ${e.to}: ${e.rule ? `rule ${e.rule}, ${e.condition ? `if ${e.condition}` : "always"}` : "in order"}${count ? `, taken ${count}×` : ", not taken"}`;
    let d, lx, ly;
    if (column(e.to) === column(e.from) + 1) {
      const y = a.y + 19;
      d = `M${a.x + a.w},${y} L${b.x},${e.to === graph.end ? b.y + 15 : y}`;
      lx = (a.x + a.w + b.x) / 2; ly = y - 6;
    } else if (column(e.to) > column(e.from)) {
      const y = G.top + 4 + skip * 24;
      skip += 1;
      const x1 = a.x + a.w * 0.75, x2 = b.x + Math.min(b.w, 56) / 2;
      d = `M${x1},${a.y} L${x1},${y} L${x2},${y} L${x2},${b.y}`;
      lx = (x1 + x2) / 2; ly = y - 5;
    } else {
      const y = bottom + 22 + loop * 26;
      loop += 1;
      d = `M${a.x + a.w / 2},${a.y + a.h} L${a.x + a.w / 2},${y} L${b.x + b.w / 2},${y} L${b.x + b.w / 2},${b.y + b.h}`;
      lx = (a.x + b.x + b.w) / 2; ly = y - 5;
    }
    edges.push(s("path", { d, class: cls, "marker-end": `url(#g-arrow${count ? "-taken" : ""})` }, s("title", {}, title)));
    const words = [text, count ? `${count}×` : ""].filter(Boolean).join(" · ");
    if (words) labels.push(s("text", { x: lx, y: ly, "text-anchor": "middle", class: `g-label${count ? " g-taken" : ""}` }, s("title", {}, title), words));
  }
  const marker = (id, cls) => s("marker", { id, viewBox: "0 0 10 10", refX: 9, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto-start-reverse" },
    s("path", { d: "M0,0 L10,5 L0,10 z", class: cls }));
  const summary = `Graph of pipeline ${run ? run.pipeline : ""}: ${graph.phases.length} phases, ${graph.flow.length} next edges, ${graph.reads.length} reads edges`;
  const svg = s("svg", { viewBox: `0 0 ${width} ${height}`, width, height, class: "graph", role: "group", "aria-label": summary },
    s("defs", {}, marker("g-arrow", "g-head"), marker("g-arrow-taken", "g-head g-taken"), marker("g-arrow-read", "g-head g-read-head")),
    edges, nodes, labels);
  const rules = graph.flow.filter((e) => e.rule).map((e) => {
    const count = taken[edgeKey(e)] || 0;
    return h("li", {}, h("code", {}, e.from), " → ", h("code", {}, e.to), e.condition ? [" if ", h("code", {}, e.condition)] : " always",
      e.max_visits ? ` (at most ${e.max_visits} visits)` : "", h("span", { class: count ? "g-count" : "muted" }, count ? ` · taken ${count}×` : " · not taken"));
  });
  return h("div", { class: "graph-box", id: "graph", role: "region", "aria-label": summary }, h("div", { class: "graph-scroll" }, svg),
    rules.length ? h("ul", { class: "rules", "aria-label": "next rules" }, rules) : null);
}
