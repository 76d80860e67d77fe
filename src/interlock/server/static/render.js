"use strict";
// DOM building without innerHTML: every piece of run data (model output included) becomes a
// text node, so nothing a worker writes can run as script in the dashboard.

function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (key === "class") node.className = value;
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

function pill(status) {
  return h("span", { class: `pill s-${status}` }, status.replace("_", " "));
}

function ago(iso) {
  if (!iso) return "";
  const seconds = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (seconds < 60) return `${Math.floor(seconds)}s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)}m ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)}h ago`;
  return `${Math.floor(seconds / 86400)}d ago`;
}

function seconds(value) {
  if (value === null || value === undefined) return "";
  if (value < 1) return `${Math.round(value * 1000)} ms`;
  if (value < 120) return `${value.toFixed(1)} s`;
  return `${Math.floor(value / 60)}m ${Math.round(value % 60)}s`;
}

function money(value) {
  return value ? `$${value.toFixed(value < 0.01 ? 4 : 2)}` : "–";
}

function clock(epoch) {
  return new Date(epoch * 1000).toLocaleTimeString([], { hour12: false });
}

// Inline markup: `code` and **bold**; everything else stays literal text.
function inline(text) {
  const parts = [];
  const pattern = /(`[^`]+`|\*\*[^*]+\*\*)/g;
  let last = 0;
  for (const match of text.matchAll(pattern)) {
    if (match.index > last) parts.push(text.slice(last, match.index));
    const token = match[0];
    parts.push(token.startsWith("`") ? h("code", {}, token.slice(1, -1)) : h("strong", {}, token.slice(2, -2)));
    last = match.index + token.length;
  }
  if (last < text.length) parts.push(text.slice(last));
  return parts;
}

// A small Markdown subset: headings, lists, fenced code, paragraphs.
function markdown(text) {
  const root = h("div", { class: "output" });
  const lines = text.replace(/\r\n/g, "\n").split("\n");
  let list = null;
  let para = [];
  const flush = () => {
    if (para.length) root.append(h("p", {}, inline(para.join(" "))));
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    if (line.startsWith("```")) {
      flush(); list = null;
      const code = [];
      for (i++; i < lines.length && !lines[i].startsWith("```"); i++) code.push(lines[i]);
      root.append(h("pre", {}, h("code", {}, code.join("\n"))));
      continue;
    }
    const heading = line.match(/^(#{1,3})\s+(.*)$/);
    const item = line.match(/^\s*(?:[-*]|\d+\.)\s+(.*)$/);
    if (heading) {
      flush(); list = null;
      root.append(h(`h${heading[1].length}`, {}, inline(heading[2])));
    } else if (item) {
      flush();
      if (!list) { list = h("ul"); root.append(list); }
      list.append(h("li", {}, inline(item[1])));
    } else if (!line.trim()) {
      flush(); list = null;
    } else {
      list = null;
      para.push(line);
    }
  }
  flush();
  return root;
}
