"use strict";
// Loaded last: every page's functions exist, so the first route can be drawn.

window.addEventListener("hashchange", route);
setInterval(() => { if (page.name === "runs") loadRuns(); }, 30000);  // keep ages fresh
route();
