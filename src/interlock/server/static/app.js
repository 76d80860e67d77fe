"use strict";
// The dashboard: a runs list and a run page, batches and comparisons, kept current over the
// server's WebSocket streams.

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
  const sent = token;
  if (sent) headers.Authorization = `Bearer ${sent}`;
  if (options.body && !headers["Content-Type"]) headers["Content-Type"] = "application/json";
  const response = await fetch(path, { ...options, headers });
  // A request sent before a new token was saved is not a reason to ask again.
  if (response.status === 401 && sent === token) askToken();
  const type = response.headers.get("content-type") || "";
  const body = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) throw new Error(body.error ? body.error.message : `HTTP ${response.status}`);
  return options.withHeaders ? { body, headers: response.headers } : body;
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
  const sent = token;
  const protocols = sent ? ["interlock", `bearer.${sent}`] : ["interlock"];
  const open = () => {
    // batch=1: a frame may carry an array of messages (one send per client per burst).
    const query = `${path.includes("?") ? "&" : "?"}batch=1${cursor() === null ? "" : `&since=${cursor()}`}`;
    const ws = new WebSocket(`${scheme}://${location.host}${path}${query}`, protocols);
    socket = ws;
    ws.onopen = () => { conn.textContent = "live"; conn.className = "conn live"; };
    ws.onmessage = (event) => {
      const data = JSON.parse(event.data);
      for (const message of Array.isArray(data) ? data : [data]) {
        if (message.type === "error") { toast(message.error.message, true); if ((message.error.code.includes("token") || message.error.code === "unauthorized") && sent === token) askToken(); return; }
        onMessage(message);
      }
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

async function route() {
  await loadMe();
  const match = location.hash.match(/^#\/runs\/([a-z0-9-]+)$/);
  const batch = location.hash.match(/^#\/batches(?:\/([a-z0-9-]+))?$/);
  const compared = location.hash.match(/^#\/compare\/([a-z0-9-]+)(?:\/([a-z0-9-]+))?$/);
  const diff = location.hash.match(/^#\/diff\/([a-z0-9-]+)\/([a-z0-9-]+)$/);
  if (match) runPage(match[1]);
  else if (batch) { if (batch[1]) batchPage(batch[1]); else batchesPage(); }
  else if (compared) comparePage(compared.slice(1).filter(Boolean));
  else if (diff) diffPage(diff[1], diff[2]);
  else runsPage();
}
