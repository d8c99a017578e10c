/*
 * console/static/app.js — the Hourglass console's page: one app, each view
 * at its own URL (/, /dlq, /dlq/GROUP, /dlq/GROUP/ID, /messages?…, /orders,
 * /orders/ID), talking to the JSON API under /api (docs/console.md). A group
 * or topic named "." or ".." travels in the query, its segment left empty
 * (/dlq?group=.., /dlq//ID?group=..): browsers resolve dot segments away. An
 * address that does not decode (a bad % escape) is a page that says so.
 *
 * Text from the server is only ever set with textContent (never parsed as
 * HTML), its control and bidirectional characters as escapes (visible); charts are SVG drawn here. Every POST carries the session's CSRF
 * token in X-CSRF-Token; actions show only to users with the role admin
 * (the server checks again). No library, no build step.
 */
"use strict";

const state = { session: null, timer: null, backupName: "", backupNotice: null };
const SVGNS = "http://www.w3.org/2000/svg";

/* ---------------------------------------------------------------- DOM helpers */

/* Server text as it is shown: a character that would act instead of showing
 * — a C0 control but tab and newline, DEL, a C1 control (also a byte that is
 * not UTF-8 in 0x80..0x9f: the API sends such bytes as \u00XX), a bidirectional
 * control (U+061C, U+200E/F, U+202A..U+202E, U+2066..U+2069: U+202E would turn
 * the rest of a key or reason around) — becomes its escape, "\u202E", so it is
 * seen and cannot disguise the text around it. */
const ACTING = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]/g;

function visible(text) {
  return String(text).replace(ACTING, (ch) => "\\u" + ch.charCodeAt(0).toString(16).toUpperCase().padStart(4, "0"));
}

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : document.createTextNode(visible(c)));
  }
  return e;
}

function svg(tag, attrs, ...children) {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  for (const c of children.flat()) if (c) e.append(c instanceof Node ? c : document.createTextNode(visible(c)));
  return e;
}

function link(href, text) {
  return el("a", { href, "data-link": true }, text);
}

function badge(text) {
  return el("span", { class: "badge " + text }, text);
}

function main() {
  return document.getElementById("main");
}

function show(...nodes) {
  main().replaceChildren(...nodes.flat().filter((n) => n !== null && n !== undefined && n !== false));
}

function notice(text, kind) {
  return el("div", { class: "notice " + (kind || "") }, text);
}

/* ---------------------------------------------------------------- formatting */

function fmtTime(ms) {
  if (!ms) return "-";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z");
}

function fmtAge(ms) {
  if (ms === null || ms === undefined) return "-";
  const neg = ms < 0;
  let s = Math.floor(Math.abs(ms) / 1000);
  let out;
  if (s < 60) out = s + "s";
  else if (s < 3600) out = Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
  else if (s < 86400) out = Math.floor(s / 3600) + "h" + String(Math.floor((s % 3600) / 60)).padStart(2, "0") + "m";
  else out = Math.floor(s / 86400) + "d" + String(Math.floor((s % 86400) / 3600)).padStart(2, "0") + "h";
  return (neg ? "-" : "") + out;
}

function fmtNum(v, digits) {
  if (v === null || v === undefined) return "-";
  return Number(v).toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
}

/* ---------------------------------------------------------------- API */

class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

async function api(method, path, params) {
  const opts = { method, credentials: "same-origin", headers: {} };
  let url = "/api/" + path;
  if (method === "GET" && params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== null && v !== "") q.append(k, v);
    if ([...q].length) url += "?" + q.toString();
  } else if (method === "POST") {
    const body = new URLSearchParams();
    for (const [k, v] of Object.entries(params || {})) {
      if (Array.isArray(v)) v.forEach((x) => body.append(k, x));
      else if (v !== undefined && v !== null) body.append(k, v);
    }
    opts.body = body;
    opts.headers["Content-Type"] = "application/x-www-form-urlencoded";
    if (state.session) opts.headers["X-CSRF-Token"] = state.session.csrf;
  }
  const res = await fetch(url, opts);
  let doc = null;
  try {
    doc = await res.json();
  } catch (e) {
    doc = null;
  }
  if (res.status === 401 && path !== "login") {
    state.session = null;
    renderLogin("Your session ended: log in again.");
    throw new ApiError(401, "not logged in");
  }
  if (!res.ok) throw new ApiError(res.status, (doc && doc.error) || res.statusText);
  return doc;
}

/* A POST the console runs as a job (202 {"job": …}: a DLQ's requeue or drop of
 * all, a topic's purge): polls GET /api/jobs/{id} until it has ended, saying in
 * status how long it has run. Returns the job's result, or throws an ApiError
 * with its status and error. */
async function runJob(path, params, status, what) {
  let job = (await api("POST", path, params)).job;
  const t0 = Date.now();
  while (job.state === "running") {
    if (status) status.replaceChildren(notice(what + ": running for " + fmtAge(Date.now() - t0) + " (job " + job.id +
      "; the console's other pages keep working)"));
    await new Promise((resolve) => setTimeout(resolve, 500));
    job = (await api("GET", "jobs/" + job.id)).job;
  }
  if (job.state !== "done") throw new ApiError(job.status, job.error);
  return job.result;
}

/* The console's jobs (GET /api/jobs), newest first; null when there are none. */
function renderJobsPanel(jobs) {
  if (!jobs.length) return null;
  const outcome = (j) => j.state === "running" ? "running for " + fmtAge(Date.now() - j.started_ms)
    : j.result ? Object.entries(j.result).filter(([k]) => k !== "group" && k !== "topic")
      .map(([k, v]) => k + " " + fmtNum(v, 0)).join(", ") + " in " + fmtAge(j.ended_ms - j.started_ms)
    : j.error;
  return el("div", { class: "panel scroll full", id: "jobs" }, el("h2", {}, "Console jobs"),
    el("table", { id: "jobs-table" }, el("thead", {}, el("tr", {},
      ["Job", "What", "User", "State", "Started", "Outcome"].map((t) => el("th", {}, t)))),
    el("tbody", {}, jobs.map((j) => el("tr", { "data-job": j.id },
      el("td", { class: "num" }, String(j.id)), el("td", { class: "wrap" }, j.what), el("td", {}, j.user),
      el("td", {}, badge(j.state)), el("td", {}, fmtAge(Date.now() - j.started_ms) + " ago"),
      el("td", { class: "wrap" }, outcome(j)))))));
}

function enc(s) {
  return encodeURIComponent(s);
}

/* A group or topic name that is "." or ".." cannot be a path segment: browsers resolve dot segments away,
 * percent-encoded or not. Its segment stays empty and the name goes in the parameter key instead, which the
 * API and route() read (docs/console.md, "Names in paths"). */
function isDots(name) {
  return name === "." || name === "..";
}

function nameSeg(name) {
  return isDots(name) ? "" : enc(name);
}

function nameParams(key, name) {
  return isDots(name) ? { [key]: name } : {};
}

/* The page of a group's DLQ (or of one of its messages, id), with query. */
function dlqHref(group, id, query) {
  const q = new URLSearchParams(nameParams("group", group));
  for (const [k, v] of Object.entries(query || {})) q.append(k, v);
  const s = q.toString();
  return "/dlq/" + nameSeg(group) + (id ? "/" + enc(id) : "") + (s ? "?" + s : "");
}

/* ---------------------------------------------------------------- confirmation */

function confirmAction(text) {
  return new Promise((resolve) => {
    const d = document.getElementById("dialog");
    document.getElementById("dialog-text").textContent = visible(text);
    d.hidden = false;
    const ok = document.getElementById("dialog-ok"), cancel = document.getElementById("dialog-cancel");
    const done = (v) => {
      d.hidden = true;
      ok.onclick = cancel.onclick = null;
      resolve(v);
    };
    ok.onclick = () => done(true);
    cancel.onclick = () => done(false);
    cancel.focus();
  });
}

/* ---------------------------------------------------------------- routing */

function navigate(href) {
  history.pushState(null, "", href);
  route();
}

document.addEventListener("click", (ev) => {
  const a = ev.target.closest("a[data-link]");
  if (!a || ev.ctrlKey || ev.metaKey || ev.shiftKey || a.target) return;
  ev.preventDefault();
  navigate(a.getAttribute("href"));
});
window.addEventListener("popstate", () => route());

function setActive(view) {
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("active", a.dataset.view === view);
}

async function route() {
  if (state.timer) {
    clearInterval(state.timer);
    state.timer = null;
  }
  if (!state.session) {
    let s;
    try {
      s = await api("GET", "session");
    } catch (e) {
      if (e.status !== 401) show(notice("The console is not reachable: " + e.message, "error"));
      return;
    }
    if (!s.logged_in) {
      renderLogin();
      return;
    }
    state.session = s;
    showWho();
  }
  const path = location.pathname.replace(/\/+$/, "") || "/";
  const q = new URLSearchParams(location.search);
  try {
    let parts;
    try {
      parts = path === "/" ? [] : path.split("/").slice(1).map(decodeURIComponent);
    } catch (e) { /* a bad % escape: decodeURIComponent throws URIError */
      show(notice("No such page: " + location.pathname + " (a bad % escape in the address)", "error"));
      return;
    }
    if (parts.length === 0) {
      setActive("overview");
      await renderOverview();
      state.timer = setInterval(() => renderOverview().catch(() => {}), 5000);
    } else if (parts[0] === "topics") {
      setActive("topics");
      await renderTopics(q.get("after"));
    } else if (parts[0] === "dlq") {
      setActive("dlq");
      const group = parts[1] || q.get("group"); /* /dlq?group=.. and /dlq//ID?group=.. (isDots) */
      if (!group) await renderDlqGroups();
      else if (parts.length <= 2) await renderDlqPage(group, q.get("after"));
      else await renderDlqOne(group, parts[2]);
    } else if (parts[0] === "messages") {
      setActive("messages");
      await renderMessages(q.get("id"), q.get("topic"), q.get("key"));
    } else if (parts[0] === "orders") {
      setActive("orders");
      if (parts.length === 1) await renderOverdue(q.get("older_than"), q.get("after"));
      else await renderOrder(parts[1]);
    } else {
      show(notice("No such page: " + path, "error"));
    }
  } catch (e) {
    if (e.status !== 401) show(notice(e.message, "error"));
  }
}

/* ---------------------------------------------------------------- login */

function showWho() {
  const s = state.session;
  document.getElementById("nav").hidden = !s;
  document.getElementById("who").hidden = !s;
  if (!s) return;
  document.getElementById("who-name").textContent = visible(s.user);
  document.getElementById("who-roles").textContent =
    "(" + (s.roles.join(", ") || "no role") + (s.can_act ? "" : ", read-only") + ")";
}

function renderLogin(message) {
  showWho();
  const user = el("input", { id: "login-user", name: "user", autocomplete: "username", required: true });
  const pass = el("input", { id: "login-password", name: "password", type: "password",
    autocomplete: "current-password" });
  const out = el("div");
  const form = el("form", { id: "login-form" },
    el("label", {}, "User", user),
    el("label", {}, "Password", pass),
    el("button", { type: "submit", id: "login-submit" }, "Log in"));
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    try {
      state.session = await api("POST", "login", { user: user.value, password: pass.value });
      showWho();
      route();
    } catch (e) {
      out.replaceChildren(notice(e.message, "error"));
    }
  });
  show(el("div", { class: "login panel" }, el("h1", {}, "Log in"),
    el("p", { class: "muted" }, "With your broker user: admin acts, other roles look."),
    message ? notice(message) : null, out, form));
  user.focus();
}

document.addEventListener("DOMContentLoaded", () => {
  document.getElementById("logout").addEventListener("click", async () => {
    try {
      await api("POST", "logout");
    } catch (e) {
      /* gone already */
    }
    state.session = null;
    renderLogin("Logged out.");
  });
  route();
});

/* ---------------------------------------------------------------- charts */

function barChart(rows, opts) {
  const w = 560, rowH = 18, left = 70, right = 60;
  const h = rows.length * rowH + 8;
  const max = Math.max(1, ...rows.map((r) => r.value));
  const g = svg("svg", { viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": opts.label });
  rows.forEach((r, i) => {
    const y = 4 + i * rowH;
    const bw = Math.max(r.value > 0 ? 2 : 0, ((w - left - right) * r.value) / max);
    g.append(svg("text", { x: left - 6, y: y + 12, "text-anchor": "end", class: "chart-axis" }, r.label));
    g.append(svg("rect", { x: left, y: y + 2, width: bw, height: rowH - 6, fill: r.bad ? "#e53e3e" : opts.color,
      rx: 2 }));
    g.append(svg("text", { x: left + bw + 4, y: y + 12, class: "chart-axis" }, r.text));
  });
  return g;
}

function lineChart(series, opts) {
  const w = 560, h = 170, left = 44, bottom = 20, top = 8;
  const g = svg("svg", { viewBox: `0 0 ${w} ${h}`, role: "img", "aria-label": opts.label });
  const xs = series.flatMap((s) => s.points.map((p) => p[0]));
  const ys = series.flatMap((s) => s.points.map((p) => p[1])).filter((v) => v !== null);
  if (xs.length < 2) {
    g.append(svg("text", { x: w / 2, y: h / 2, "text-anchor": "middle", class: "chart-axis" },
      "collecting samples…"));
    return g;
  }
  const x0 = Math.min(...xs), x1 = Math.max(...xs), ymax = Math.max(1e-9, ...ys) * 1.1;
  const X = (x) => left + ((w - left - 8) * (x - x0)) / Math.max(1, x1 - x0);
  const Y = (y) => h - bottom - ((h - bottom - top) * y) / ymax;
  for (const f of [0, 0.5, 1]) {
    g.append(svg("line", { x1: left, x2: w - 8, y1: Y(ymax * f), y2: Y(ymax * f), stroke: "#edf2f7" }));
    g.append(svg("text", { x: left - 4, y: Y(ymax * f) + 3, "text-anchor": "end", class: "chart-axis" },
      fmtNum(ymax * f, 1)));
  }
  g.append(svg("text", { x: left, y: h - 4, class: "chart-axis" }, new Date(x0).toISOString().slice(11, 19)));
  g.append(svg("text", { x: w - 8, y: h - 4, "text-anchor": "end", class: "chart-axis" },
    new Date(x1).toISOString().slice(11, 19)));
  for (const s of series) {
    const pts = s.points.filter((p) => p[1] !== null).map((p) => `${X(p[0]).toFixed(1)},${Y(p[1]).toFixed(1)}`);
    if (pts.length) g.append(svg("polyline", { points: pts.join(" "), fill: "none", stroke: s.color,
      "stroke-width": 2 }));
  }
  return g;
}

function legend(series) {
  return el("div", { class: "legend" }, series.map((s) => el("span", {}, el("i", { class: "swatch-" + s.key }),
    s.name + (s.last !== undefined ? ": " + fmtNum(s.last, 2) : ""))));
}

/* ---------------------------------------------------------------- overview */

function card(label, value, bad, id) {
  return el("div", { class: "card" + (bad ? " bad" : ""), id }, el("div", { class: "label" }, label),
    el("div", { class: "value" }, value));
}

async function renderOverview() {
  const o = await api("GET", "overview");
  const jobs = (await api("GET", "jobs")).jobs;
  const h = o.history || [];
  const last = h.length ? h[h.length - 1] : {};
  const dlqTotal = (o.groups || []).reduce((a, g) => a + g.dlq, 0);
  const cards = el("div", { class: "cards" },
    card("Broker", o.broker.ok ? "up" : "down", !o.broker.ok, "card-broker"),
    card("Sends total", fmtNum(o.totals.sends, 0), false, "card-sends"),
    card("Deliveries total", fmtNum(o.totals.deliveries, 0), false, "card-deliveries"),
    card("Acks total", fmtNum(o.totals.acks, 0), false, "card-acks"),
    card("Delayed now", fmtNum(o.totals.delayed, 0), false, "card-delayed"),
    card("In DLQs", fmtNum(dlqTotal, 0), dlqTotal > 0, "card-dlq"),
    card("Pending orders", fmtNum(o.orders.pending, 0), false, "card-pending"),
    card("Overdue orders", fmtNum(o.orders.overdue, 0), o.orders.overdue > 0, "card-overdue"));

  const alerts = el("div", { class: "panel", id: "alerts" }, el("h2", {}, "Alerts"),
    (o.alerts || []).length === 0 ? el("p", { class: "muted" }, "None firing.")
      : el("ul", {}, o.alerts.map((a) => el("li", {}, badge(a.severity), " ", a.text))));

  const levels = (o.levels || []).filter((l) => l.depth > 0 || l.head_lag_ms > 0);
  const depthRows = (o.levels || []).map((l) => ({ label: "L" + l.level + " " + fmtAge(l.delay_ms),
    value: l.depth, text: fmtNum(l.depth, 0) }));
  const lagRows = (o.levels || []).map((l) => ({ label: "L" + l.level, value: l.head_lag_ms,
    text: l.head_lag_ms ? l.head_lag_ms + " ms" : "0", bad: l.head_lag_ms > 10000 }));

  const rates = [
    { key: "sends", name: "sends/s", color: "#3182ce", points: h.map((x) => [x.t_ms, x.sends_per_s]) },
    { key: "deliveries", name: "deliveries/s", color: "#38a169", points: h.map((x) => [x.t_ms, x.deliveries_per_s]) },
    { key: "acks", name: "acks/s", color: "#d69e2e", points: h.map((x) => [x.t_ms, x.acks_per_s]) },
  ];
  rates.forEach((s) => (s.last = s.points.length ? s.points[s.points.length - 1][1] : null));
  const late = [
    { key: "p50", name: "p50 ms", color: "#805ad5", points: h.map((x) => [x.t_ms, x.lateness_p50_ms]) },
    { key: "p99", name: "p99 ms", color: "#e53e3e", points: h.map((x) => [x.t_ms, x.lateness_p99_ms]) },
  ];
  late.forEach((s) => (s.last = s.points.length ? s.points[s.points.length - 1][1] : null));

  /* The broker's histogram is cumulative: show each bucket's own count. */
  const hist = o.lateness.histogram || [];
  const histRows = hist.map((b, i) => ({ label: "≤ " + (b.le === "+Inf" ? "∞" : b.le + "s"),
    value: b.count - (i ? hist[i - 1].count : 0), text: fmtNum(b.count - (i ? hist[i - 1].count : 0), 0) }));

  const groups = el("table", { id: "groups-table" }, el("thead", {}, el("tr", {},
    ["Group", "Topic", "Ready", "Backlog", "Retry", "In flight", "DLQ"].map((t, i) =>
      el("th", { class: i > 1 ? "num" : "" }, t)))),
  el("tbody", {}, (o.groups || []).map((g) => el("tr", {},
    el("td", {}, link(dlqHref(g.group), g.group)), el("td", {}, g.topic),
    el("td", { class: "num" }, fmtNum(g.ready, 0)), el("td", { class: "num" }, fmtNum(g.backlog, 0)),
    el("td", { class: "num" }, fmtNum(g.retry, 0)), el("td", { class: "num" }, fmtNum(g.inflight, 0)),
    el("td", { class: "num" }, g.dlq > 0 ? badge(String(g.dlq)) : "0")))));

  /* The compensator's layers (compensator-metrics): last run, outcome, failures in a row. */
  const comp = o.compensator || { configured: false };
  const compPanel = !comp.configured ? null : el("div", { class: "panel scroll", id: "compensator" },
    el("h2", {}, "Compensator layers"),
    !comp.ok ? notice("Compensator: " + (comp.error || "not reachable"), "error")
      : el("table", { id: "compensator-table" }, el("thead", {}, el("tr", {},
        ["Layer", "Last run", "Outcome", "Took", "Failed in a row"].map((t, i) =>
          el("th", { class: i > 2 ? "num" : "" }, t)))),
      el("tbody", {}, comp.layers.flatMap((l) => [el("tr", { "data-layer": l.layer },
        el("td", {}, l.layer),
        el("td", {}, l.last_run_ms ? fmtAge(o.now_ms - l.last_run_ms) + " ago" : "never"),
        el("td", {}, l.outcome ? badge(l.outcome) : "—"),
        el("td", { class: "num" }, fmtNum(l.duration_ms, 1) + " ms"),
        el("td", { class: "num" }, fmtNum(l.consecutive_failures, 0))),
      l.error ? el("tr", { class: "layer-error" }, el("td", { colspan: 5, class: "muted wrap" }, l.error)) : null]))),
    comp.ok ? el("p", { class: "muted" }, "Alerts active: " + (comp.alerts.filter((a) => a.active > 0)
      .map((a) => a.alert + " (" + a.active + ")").join(", ") || "none")) : null);

  const backupPanel = renderBackupPanel(o);

  show(el("h1", {}, "Overview"),
    o.broker.ok ? null : notice("Broker: " + (o.broker.error || "not reachable"), "error"),
    o.db.ok ? null : notice("Database: " + (o.db.error || "not reachable"), "error"),
    cards,
    el("div", { class: "grid" },
      el("div", { class: "panel", id: "rates" }, el("h2", {}, "Sends, deliveries, acks per second (last hour)"),
        lineChart(rates, { label: "rates" }), legend(rates)),
      el("div", { class: "panel", id: "lateness" }, el("h2", {}, "Delivery lateness over time"),
        lineChart(late, { label: "lateness" }), legend(late)),
      el("div", { class: "panel", id: "depth" }, el("h2", {}, "Depth per level"),
        barChart(depthRows, { label: "depth", color: "#3182ce" }),
        el("p", { class: "muted" }, levels.length + " of " + (o.levels || []).length + " levels hold messages")),
      el("div", { class: "panel", id: "headlag" }, el("h2", {}, "Head lag per level"),
        barChart(lagRows, { label: "head lag", color: "#d69e2e" })),
      el("div", { class: "panel", id: "histogram" }, el("h2", {}, "Delivery lateness histogram (since the broker started)"),
        histRows.length ? barChart(histRows, { label: "lateness histogram", color: "#805ad5" })
          : el("p", { class: "muted" }, "The broker has no metrics port: no histogram.")),
      alerts,
      backupPanel,
      compPanel,
      el("div", { class: "panel scroll", id: "groups" }, el("h2", {}, "Groups and DLQ depth"), groups),
      renderJobsPanel(jobs)),
    el("p", { class: "muted" }, "Sampled every " + o.interval_ms / 1000 + " s; this page refreshes by itself. " +
      "Latest: " + fmtTime(last.t_ms)));
}

/* The broker's online backups (BACKUP): the last one's outcome and, for
 * admins, "Back up now". The page refreshes itself every few seconds, so
 * the name typed and the last answer live in state, not in the page. */
function renderBackupPanel(o) {
  const b = o.backup || {};
  if (b.last_status === null || b.last_status === undefined)
    return null; /* a broker without BACKUP */
  const when = (ms) => fmtTime(ms) + " (" + fmtAge(o.now_ms - ms) + " ago)";
  const line = b.in_progress ? [badge("running"), " ", b.name]
    : b.last_status === "none" ? ["No backup since the broker started."]
    : [badge(b.last_status), " ", b.name, b.last_ok_ms ? "; last whole copy " + when(b.last_ok_ms) : "",
      b.last_error ? " — " + b.last_error : ""];
  const status = el("div", { id: "backup-result" }, state.backupNotice || null);
  let form = null;
  if (state.session.can_act) {
    if (!state.backupName)
      state.backupName = "console-" + new Date().toISOString().slice(0, 19).replace(/[-:]/g, "").replace("T", "-");
    const name = el("input", { id: "backup-name", name: "name", value: state.backupName });
    name.oninput = () => (state.backupName = name.value);
    const go = async () => {
      try {
        const r = await api("POST", "backup", { name: name.value });
        state.backupNotice = notice(r.started, "ok");
        state.backupName = "";
      } catch (e) {
        state.backupNotice = notice(e.message, "error");
      }
      status.replaceChildren(state.backupNotice);
    };
    form = el("div", { class: "buttons" }, name,
      el("button", { id: "backup-now", type: "button", onclick: go }, "Back up now"));
  }
  return el("div", { class: "panel", id: "backup" }, el("h2", {}, "Backup"),
    el("p", { id: "backup-status" }, ...line), status, form,
    el("p", { class: "muted" }, "BACKUP copies the data directory, consistent as of the click, into the broker's " +
      "backup-dir while it runs."));
}

/* ---------------------------------------------------------------- DLQ */

/* ---------------------------------------------------------------- topics */

/* The topics (TOPICS), a page at a time; admins delete an empty one, or one
 * without groups together with what it keeps for retention (PURGE). */
async function renderTopics(after, message) {
  const d = await api("GET", "topics", { after });
  const can = state.session.can_act;
  const status = el("div", { id: "topics-status" }, message || null);
  const del = (t) => async () => {
    const purge = t.groups.length === 0 && t.delayed === 0 && t.retained > 0;
    if (purge && !(await confirmAction("Delete topic " + t.topic + " with the " + t.retained + " message" +
      (t.retained === 1 ? "" : "s") + " it keeps for retention?")))
      return;
    try {
      const path = "topics/" + nameSeg(t.topic) + "/delete";
      const where = location.pathname + location.search;
      if (purge) await runJob(path, { purge: "1", ...nameParams("topic", t.topic) }, status,
        "Deleting topic " + t.topic + " with its messages");
      else await api("POST", path, nameParams("topic", t.topic));
      if (location.pathname + location.search !== where) return; /* the operator went on elsewhere */
      await renderTopics(after, notice("Deleted topic " + t.topic +
        (purge ? " and its " + t.retained + " retained message" + (t.retained === 1 ? "" : "s") : ""), "ok"));
    } catch (e) {
      status.replaceChildren(notice(e.message, "error"));
    }
  };
  const rows = d.topics.map((t) => el("tr", { "data-topic": t.topic },
    el("td", {}, t.topic),
    el("td", { class: "num" }, fmtNum(t.ready, 0)), el("td", { class: "num" }, fmtNum(t.delayed, 0)),
    el("td", { class: "num" }, fmtNum(t.retained, 0)), el("td", { class: "num" }, fmtNum(t.sends, 0)),
    el("td", {}, t.groups.map((g, i) => [i ? ", " : "", link(dlqHref(g), g)]).flat()),
    can ? el("td", {}, t.groups.length === 0 && t.delayed === 0
      ? el("button", { type: "button", class: "danger", onclick: del(t) }, t.retained > 0 ? "Delete with messages" : "Delete")
      : el("span", { class: "muted" }, t.groups.length ? "has groups" : "messages on the levels")) : null));
  show(el("h1", {}, "Topics"), status,
    el("div", { class: "panel scroll" }, el("table", { id: "topics-table" },
      el("thead", {}, el("tr", {}, ["Topic", "Ready", "Delayed", "Retained", "Sends", "Groups"].map((h, i) =>
        el("th", { class: i > 0 && i < 5 ? "num" : "" }, h)), can ? el("th", {}, "") : null)),
      el("tbody", {}, rows))),
    el("p", { class: "muted" }, "A topic without groups keeps its messages for the broker's retention; deleting it " +
      "with its messages takes them back for good. A topic with groups or messages on the levels cannot be deleted."),
    d.next ? el("p", {}, link("/topics?after=" + enc(d.next), "Next page →")) : null);
}

async function renderDlqGroups() {
  const d = await api("GET", "dlq");
  show(el("h1", {}, "Dead-letter queues"),
    el("div", { class: "panel scroll" }, el("table", { id: "dlq-groups" },
      el("thead", {}, el("tr", {}, el("th", {}, "Group"), el("th", {}, "Topic"), el("th", { class: "num" }, "DLQ"),
        el("th", { class: "num" }, "Max retries"))),
      el("tbody", {}, d.groups.map((g) => el("tr", {},
        el("td", {}, link(dlqHref(g.group), g.group)), el("td", {}, g.topic),
        el("td", { class: "num" }, fmtNum(g.dlq, 0)), el("td", { class: "num" }, g.max_reconsume)))))));
}

async function dlqAct(group, verb, params, what, status) {
  const path = "dlq/" + nameSeg(group) + "/" + verb;
  params = { ...params, ...nameParams("group", group) };
  const r = params.all ? await runJob(path, params, status, (verb === "drop" ? "Dropping" : "Requeuing") + " " + what)
    : await api("POST", path, params);
  const n = verb === "drop" ? r.dropped : r.requeued;
  return notice((verb === "drop" ? "Dropped " : "Requeued ") + n + " message" + (n === 1 ? "" : "s") + " " + what +
    (r.missing && r.missing.length ? " (" + r.missing.length + " no longer there)" : ""), "ok");
}

async function renderDlqPage(group, after, message) {
  const d = await api("GET", "dlq/" + nameSeg(group), { after, count: 50, ...nameParams("group", group) });
  const can = state.session.can_act;
  const checks = [];
  const status = el("div", { id: "dlq-status" }, message || null);
  const rows = d.messages.map((m) => {
    const cb = el("input", { type: "checkbox", value: m.id, "aria-label": "select " + m.id });
    checks.push(cb);
    return el("tr", {},
      can ? el("td", {}, cb) : null,
      el("td", { class: "mono" }, link(dlqHref(group, m.id), m.id)),
      el("td", { class: "wrap" }, m.key),
      el("td", { class: "wrap" }, m.reason),
      el("td", { class: "num" }, m.reconsume),
      el("td", {}, fmtAge(Date.now() - m.parked_ms) + " ago"),
      el("td", { class: "wrap mono" }, m.payload.length > 60 ? m.payload.slice(0, 60) + "…" : m.payload));
  });
  const selected = () => checks.filter((c) => c.checked).map((c) => c.value);
  const act = (verb, all) => async () => {
    const ids = selected();
    if (!all && ids.length === 0) {
      status.replaceChildren(notice("Select messages first.", "error"));
      return;
    }
    const count = all ? d.total : ids.length;
    if (verb === "drop" && !(await confirmAction("Drop " + count + " message" + (count === 1 ? "" : "s") +
      " of group " + group + " for good? This cannot be undone.")))
      return;
    try {
      const where = location.pathname + location.search;
      const n = await dlqAct(group, verb, all ? { all: 1, confirm: d.total } : { id: ids },
        all ? "(all of group " + group + ")" : "", status);
      if (location.pathname + location.search !== where) return; /* the operator went on elsewhere */
      await renderDlqPage(group, after, n);
    } catch (e) {
      status.replaceChildren(notice(e.message, "error"));
    }
  };
  show(el("h1", {}, "DLQ of ", group),
    el("p", { class: "muted" }, d.total + " message" + (d.total === 1 ? "" : "s") + " parked. ",
      link("/dlq", "All groups")),
    status,
    can && d.total > 0 ? el("div", { class: "buttons" },
      el("button", { id: "requeue-selected", type: "button", onclick: act("requeue", false) }, "Requeue selected"),
      el("button", { id: "requeue-all", type: "button", class: "secondary", onclick: act("requeue", true) },
        "Requeue all " + d.total),
      el("button", { id: "drop-selected", type: "button", class: "danger", onclick: act("drop", false) },
        "Drop selected"),
      el("button", { id: "drop-all", type: "button", class: "danger", onclick: act("drop", true) },
        "Drop all " + d.total)) : null,
    d.messages.length === 0 ? el("p", {}, "Empty.") : el("div", { class: "panel scroll" }, el("table", { id: "dlq-table" },
      el("thead", {}, el("tr", {}, can ? el("th", {}, "") : null, el("th", {}, "Id"), el("th", {}, "Key"),
        el("th", {}, "Reason"), el("th", { class: "num" }, "Reconsume"), el("th", {}, "Parked"),
        el("th", {}, "Payload"))),
      el("tbody", {}, rows))),
    d.next ? el("p", {}, link(dlqHref(group, null, { after: d.next }), "Next page →")) : null);
}

async function renderDlqOne(group, id, message) {
  const m = await api("GET", "dlq/" + nameSeg(group) + "/" + enc(id), nameParams("group", group));
  const can = state.session.can_act;
  const status = el("div", {}, message || null);
  const act = (verb) => async () => {
    if (verb === "drop" && !(await confirmAction("Drop 1 message (" + id + ") of group " + group + " for good?")))
      return;
    try {
      status.replaceChildren(await dlqAct(group, verb, { id: [id] }, id));
    } catch (e) {
      status.replaceChildren(notice(e.message, "error"));
    }
  };
  show(el("h1", {}, "Parked message ", el("span", { class: "mono" }, id)),
    el("p", {}, link(dlqHref(group), "← DLQ of " + group)), status,
    el("div", { class: "panel" }, el("dl", { class: "kv" },
      el("dt", {}, "Key"), el("dd", {}, m.key), el("dt", {}, "Reason"), el("dd", {}, m.reason),
      el("dt", {}, "Reconsume"), el("dd", {}, m.reconsume),
      el("dt", {}, "Parked"), el("dd", {}, fmtTime(m.parked_ms) + " (" + fmtAge(Date.now() - m.parked_ms) + " ago)"),
      el("dt", {}, "Payload"), el("dd", { class: "mono" }, m.payload),
      el("dt", {}, "Look up"), el("dd", {}, link("/messages?id=" + m.id, "message state")))),
    can ? el("div", { class: "buttons" },
      el("button", { id: "requeue-one", type: "button", onclick: act("requeue") }, "Requeue"),
      el("button", { id: "drop-one", type: "button", class: "danger", onclick: act("drop") }, "Drop")) : null);
}

/* ---------------------------------------------------------------- messages */

function msgTable(list) {
  return el("div", { class: "panel scroll" }, el("table", { id: "msg-table" },
    el("thead", {}, el("tr", {}, ["Id", "State", "Topic", "Key", "Due", "Reconsume", "Groups"].map((t) =>
      el("th", {}, t)))),
    el("tbody", {}, list.map((m) => el("tr", {},
      el("td", { class: "mono" }, link("/messages?id=" + m.id, m.id)), el("td", {}, badge(m.state)),
      el("td", {}, m.topic || ""), el("td", { class: "wrap" }, m.key || ""),
      el("td", {}, fmtTime(m.due_ms) + (m.level ? " (level " + m.level + ")" : "")),
      el("td", { class: "num" }, m.reconsume === undefined ? "" : m.reconsume),
      el("td", {}, (m.groups || []).map((g) => el("div", {}, g.group + ": ", badge(g.state),
        g.reason ? " " + g.reason : ""))))))));
}

async function renderMessages(id, topic, key, message) {
  const can = state.session.can_act;
  const fid = el("input", { id: "find-id", name: "id", placeholder: "16 hex digits", value: id || "" });
  const ftopic = el("input", { id: "find-topic", name: "topic", placeholder: "order-timeout", value: topic || "" });
  const fkey = el("input", { id: "find-key", name: "key", value: key || "" });
  const form = el("form", { class: "inline", id: "find-form" },
    el("label", {}, "Id", fid), el("span", { class: "muted" }, "or"),
    el("label", {}, "Topic", ftopic), el("label", {}, "Key", fkey),
    el("button", { type: "submit", id: "find-submit" }, "Find"));
  form.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const q = new URLSearchParams();
    if (fid.value.trim()) q.set("id", fid.value.trim());
    else {
      q.set("topic", ftopic.value.trim());
      q.set("key", fkey.value);
    }
    navigate("/messages?" + q.toString());
  });
  const status = el("div", { id: "msg-status" }, message || null);
  let result = null, list = [];
  if (id) {
    const m = await api("GET", "msg/" + enc(id));
    list = [m];
    result = m.state === "gone" ? notice("Message " + id + " is gone: the broker holds no copy.") : msgTable(list);
  } else if (topic) {
    const r = await api("GET", "msg", { topic, key: key || "" });
    list = r.messages;
    result = list.length ? msgTable(list) : notice("No message of topic " + topic + " with key " + key + ".");
  }
  const revocable = list.filter((m) => m.state === "delayed" || m.state === "ready");
  const revoke = async () => {
    const what = id ? "message " + id : revocable.length + " message(s) of " + topic + " with key " + key;
    if (!(await confirmAction("Revoke " + what + "? Revoked messages are never delivered."))) return;
    try {
      const r = id ? await api("POST", "msg/" + enc(id) + "/revoke") : await api("POST", "msg/revoke", { topic, key });
      const text = "Revoked " + r.revoked + " (" + r.delayed + " delayed, " + r.ready + " ready)" +
        (r.refused.length ? "; refused: " + r.refused.map((x) => x.id + " " + x.reason).join("; ") : "");
      await renderMessages(id, topic, key, notice(text, r.revoked ? "ok" : "error"));
    } catch (e) {
      status.replaceChildren(notice(e.message, "error"));
    }
  };
  show(el("h1", {}, "Messages"), form, status, result,
    can && revocable.length ? el("div", { class: "buttons" },
      el("button", { id: "revoke", type: "button", class: "danger", onclick: revoke }, "Revoke")) : null);
}

/* ---------------------------------------------------------------- orders */

function orderRow(o) {
  return el("tr", { class: "clickable", "data-order": o.id, onclick: () => navigate("/orders/" + o.id) },
    el("td", { class: "num" }, link("/orders/" + o.id, String(o.id))),
    el("td", {}, fmtTime(o.expire_ms)),
    el("td", { class: "num" }, fmtAge(o.overdue_ms)),
    el("td", {}, o.outbox ? o.outbox.status + "/" + o.outbox.attempts : "none"),
    el("td", {}, o.broker_known ? (o.messages.length ? o.messages.map((m) => m.state).join(", ") : "none") : "?"),
    el("td", {}, badge(o.late)),
    el("td", { class: "wrap" }, o.why));
}

async function renderOverdue(olderThan, after) {
  const d = await api("GET", "orders/overdue", { older_than: olderThan, after, limit: 50 });
  const fid = el("input", { id: "order-id", name: "id", placeholder: "order id", inputmode: "numeric" });
  const search = el("form", { class: "inline", id: "order-search" }, el("label", {}, "Order", fid),
    el("button", { type: "submit" }, "Show"));
  search.addEventListener("submit", (ev) => {
    ev.preventDefault();
    if (fid.value.trim()) navigate("/orders/" + enc(fid.value.trim()));
  });
  const fold = el("input", { id: "older-than", name: "older_than", placeholder: "e.g. 5m", value: olderThan || "" });
  const filter = el("form", { class: "inline" }, el("label", {}, "Overdue by more than", fold),
    el("button", { type: "submit", class: "secondary" }, "Filter"));
  filter.addEventListener("submit", (ev) => {
    ev.preventDefault();
    navigate("/orders" + (fold.value.trim() ? "?older_than=" + enc(fold.value.trim()) : ""));
  });
  const next = d.next ? "/orders?" + new URLSearchParams(Object.assign({ after: d.next },
    olderThan ? { older_than: olderThan } : {})).toString() : null;
  show(el("h1", {}, "Overdue orders"),
    el("p", { class: "muted" }, "Pending orders past their expiry, oldest first, and why each is late."),
    el("div", { class: "buttons" }, search, filter),
    d.orders.length === 0 ? notice("No overdue orders.", "ok") : el("div", { class: "panel scroll" },
      el("table", { id: "overdue-table" }, el("thead", {}, el("tr", {},
        ["Order", "Expired", "Overdue", "Outbox", "Message", "Late", "Why"].map((t) => el("th", {}, t)))),
      el("tbody", {}, d.orders.map(orderRow)))),
    next ? el("p", {}, link(next, "Next page →")) : null);
}

async function renderOrder(id, message) {
  const o = await api("GET", "orders/" + enc(id));
  const can = state.session.can_act;
  const status = el("div", { id: "order-status" }, message || null);
  const cancel = async () => {
    if (!(await confirmAction("Cancel order " + o.id + " by hand (reason manual)? Its stock goes back."))) return;
    try {
      const r = await api("POST", "orders/" + o.id + "/cancel", { reason: "manual" });
      const kind = r.outcome === "cancelled" ? "ok" : "";
      await renderOrder(id, notice("Outcome: " + r.outcome + (r.outcome === "not-pending"
        ? " — the order was no longer pending; nothing changed." : " — cancelled with reason manual."), kind));
    } catch (e) {
      status.replaceChildren(notice(e.message, "error"));
    }
  };
  show(el("h1", {}, "Order ", String(o.id), " ", badge(o.status)),
    el("p", {}, link("/orders", "← Overdue orders")), status,
    el("div", { class: "grid" },
      el("div", { class: "panel" }, el("h2", {}, "Order"), el("dl", { class: "kv", id: "order-detail" },
        el("dt", {}, "Status"), el("dd", { id: "order-status-value" }, o.status),
        el("dt", {}, "User"), el("dd", {}, String(o.user_id)),
        el("dt", {}, "Created"), el("dd", {}, fmtTime(o.created_ms)),
        el("dt", {}, "Expires"), el("dd", {}, fmtTime(o.expire_ms)),
        o.paid_ms ? [el("dt", {}, "Paid"), el("dd", {}, fmtTime(o.paid_ms))] : null,
        o.cancelled_ms ? [el("dt", {}, "Cancelled"), el("dd", {}, fmtTime(o.cancelled_ms))] : null,
        el("dt", {}, "Cancel reason"), el("dd", { id: "order-reason" }, o.cancel_reason || "-"),
        el("dt", {}, "Late"), el("dd", {}, badge(o.late), " ", o.why))),
      el("div", { class: "panel" }, el("h2", {}, "Items"), el("table", {},
        el("thead", {}, el("tr", {}, el("th", {}, "SKU"), el("th", { class: "num" }, "Qty"))),
        el("tbody", {}, (o.items || []).map((i) => el("tr", {}, el("td", {}, String(i.sku_id)),
          el("td", { class: "num" }, i.qty)))))),
      el("div", { class: "panel" }, el("h2", {}, "Outbox row"), o.outbox ? el("dl", { class: "kv" },
        el("dt", {}, "Status"), el("dd", {}, o.outbox.status), el("dt", {}, "Attempts"), el("dd", {}, o.outbox.attempts),
        el("dt", {}, "Next attempt"), el("dd", {}, fmtTime(o.outbox.next_attempt_ms)),
        el("dt", {}, "Last error"), el("dd", {}, o.outbox.last_error || "-")) : el("p", {}, "No outbox row.")),
      el("div", { class: "panel" }, el("h2", {}, "Messages in the broker"),
        !o.broker_known ? notice("Unknown: " + (o.broker_error || ""), "error")
          : o.messages.length === 0 ? el("p", {}, "None.")
            : el("ul", {}, o.messages.map((m) => el("li", {}, link("/messages?id=" + m.id, m.id), " ", badge(m.state),
              " in " + m.where + (m.detail ? " — " + m.detail : "")))))),
    can && o.status === "pending" ? el("div", { class: "buttons" },
      el("button", { id: "cancel-order", type: "button", class: "danger", onclick: cancel }, "Cancel order by hand"))
      : null);
}
