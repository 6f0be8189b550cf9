// The page: the status bar, the flights (newest first) and a flight's own view, kept live by
// the daemon's Server-Sent Events (GET /api/events). Every value from the daemon is set as
// text, never as HTML.
"use strict";

const flights = new Map();
let csrf = "";
let shown = null;
let disk = {};
let lastStatus = null;
let offered = { fill: false, upload: false, vehicle_logs: false };
// The flight whose signals are drawn, the log time its plots start at, and the plots.
let plotted = null;
let plotFrom = 0;
let plotSpan = 1;
// What the first look reads, as the plots say when a flight has none of it.
let firstLook = "";
const plots = [];

const $ = (id) => document.getElementById(id);
const el = (tag, props = {}, ...children) => {
  const e = document.createElement(tag);
  Object.assign(e, props);
  for (const c of children) e.append(c);
  return e;
};

function bytes(n) {
  if (n == null) return "—";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let u = 0;
  while (n >= 1000 && u < units.length - 1) { n /= 1000; u++; }
  return (u ? n.toFixed(1) : n) + " " + units[u];
}

function seconds(s) {
  if (s < 60) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60);
  return m + " min " + Math.round(s - 60 * m) + " s";
}

function started(utc) {
  // "2026-11-29T07:00:00Z": UTC, and the browser's local time.
  const d = new Date(utc);
  if (isNaN(d)) return utc;
  return d.toISOString().replace("T", " ").slice(0, 19) + " UTC (" + d.toLocaleString() + ")";
}

function startCell(utc) {
  const d = new Date(utc);
  if (isNaN(d)) return el("span", { textContent: utc });
  return el("span", {}, d.toISOString().replace("T", " ").slice(0, 16) + " UTC",
    el("br"), el("small", { className: "muted", textContent: d.toLocaleString() + " local" }));
}

function setCard(id, big, detail, level) {
  $(id).textContent = big;
  $(id + "-detail").textContent = detail;
  const card = $("card-" + id);
  card.classList.remove("bad", "warn");
  if (level) card.classList.add(level);
}

function renderStatus(s) {
  const v = s.vehicle;
  if (v) {
    const armed = v.armed == null ? "armed state unknown" : v.armed ? "ARMED" : "disarmed";
    const autopilot = { px4: "PX4", ardupilot: "ArduPilot" }[v.autopilot] || v.autopilot;
    setCard("vehicle", "sysid " + v.system_id + " (" + autopilot + "), " + armed,
      "component " + v.component_id + ", heard " + v.last_heard_s_ago.toFixed(0) + " s ago",
      v.last_heard_s_ago > 5 ? "warn" : null);
  } else {
    setCard("vehicle", "not heard", "waiting on " + s.link.address, "warn");
  }
  const l = s.link;
  setCard("link", l.kind + (l.open ? "" : " (closed)"),
    bytes(l.log_bytes_per_s) + "/s, " + l.loss_percent.toFixed(1) + " % lost" +
      (l.problem ? " — " + l.problem : ""),
    l.problem || !l.open ? "bad" : l.loss_percent > 5 ? "warn" : null);
  const g = s.logging;
  setCard("logging", g.streaming ? "streaming" : "idle",
    (g.open_session ? g.open_session + ", " + bytes(g.open_log_bytes) + "; " : "") +
      g.dropouts + " dropouts since the start", null);
  const d = s.disk || disk;
  const storeBad = s.store.paused || s.store.failed_bytes > 0;
  setCard("disk", bytes(d.logs_bytes) + (d.budget_bytes ? " of " + bytes(d.budget_bytes) : ""),
    bytes(d.free_bytes) + " free" + (s.store.paused ? " — DISK FULL, writing paused" : "") +
      (s.store.failed_bytes ? " — " + bytes(s.store.failed_bytes) + " not written" : ""),
    storeBad ? "bad" : null);
  if (s.uploads == null) {
    setCard("uploads", "off", "no bucket or Flight Review configured", null);
  } else {
    const failing = /fail/i.test(s.uploads);
    setCard("uploads", failing ? "failing" : "on", s.uploads, failing ? "bad" : null);
  }
}

// The stream as received: what the link lost, and what the vehicle itself dropped before
// its stream (ArduPilot counts those; its card has them).
function streamCell(f) {
  const source = f.dropped_at_source ? f.dropped_at_source + " dropped by the vehicle" : "";
  if (!f.closed && f.dropouts_received === 0 && !source) return el("span", { className: "ok", textContent: "recording, whole so far" });
  if (f.dropouts_received === 0 && !source) return el("span", { className: "ok", textContent: "whole" });
  const link = f.dropouts_received ? f.dropouts_received + " dropouts, " + (f.dropout_ms_received / 1000).toFixed(1) + " s lost" : "";
  return el("span", { className: "warn", textContent: [link, source].filter(Boolean).join("; ") });
}

function fillCell(f) {
  const x = f.fill;
  const text = {
    whole: "not needed", filled: "filled (" + x.records_recovered + " records)",
    partly: x.gaps_unfilled + " gaps left" + (x.reason ? ": " + x.reason : ""),
    failed: "failed: " + (x.reason || ""), not_filled: "not filled yet", recording: "—",
  }[x.state] || x.state;
  const cls = { whole: "ok", filled: "ok", partly: "warn", failed: "bad", not_filled: "warn" }[x.state] || "muted";
  return el("span", { className: cls, textContent: text });
}

function findingsCell(f) {
  if (!f.findings.length) return el("span", { className: "muted", textContent: "none" });
  const span = el("span");
  for (const sev of ["critical", "warning", "info"]) {
    const n = f.findings.filter((x) => x.severity === sev).length;
    if (n) span.append(el("span", { className: "sev " + sev, textContent: n, title: sev }));
  }
  span.append(" " + f.findings.map((x) => x.analyzer).filter((a, i, all) => all.indexOf(a) === i).join(", "));
  return span;
}

function bucketCell(f) {
  const u = f.uploads;
  if (u.complete) return el("span", { className: "ok", textContent: "uploaded" });
  if (u.failing) return el("span", { className: "bad", textContent: "failing: " + u.failing });
  // This daemon uploads nothing: what was not uploaded before is not waiting for anything.
  if (!offered.upload && !u.splits_uploaded && !u.manifest_uploaded) {
    return el("span", { className: "muted", textContent: "off", title: "uploads are not configured" });
  }
  if (!u.closed) return el("span", { className: "muted", textContent: "recording" });
  if (u.splits_uploaded || u.manifest_uploaded) return el("span", { className: "info",
    textContent: u.splits_uploaded + "/" + u.splits_closed + " splits" + (u.in_progress ? ", " + u.in_progress : "") });
  return el("span", { className: "muted", textContent: "pending" });
}

function reviewCell(f) {
  if (f.log_format === "dataflash") {
    return el("span", { className: "muted", textContent: "not for ArduPilot", title: "Flight Review reads PX4's ULog logs only" });
  }
  const r = f.uploads.flight_review;
  if (!r) return el("span", { className: "muted", textContent: "—" });
  if (/^https?:\/\//.test(r)) {
    const note = f.uploads.flight_review_note;
    return el("a", { href: r, textContent: note ? "open (may be there twice)" : "open", title: note || "", target: "_blank", rel: "noopener" });
  }
  return el("span", { className: "bad", textContent: r });
}

function downloads(f) {
  if (f.log_format === "dataflash") {
    // An ArduPilot flight: the whole flight as one .bin, its fills merged (each split, which
    // opens alone too, is in its view).
    return el("span", {},
      el("a", { href: "api/flights/" + encodeURIComponent(f.id) + "/download?format=bin", textContent: ".bin", className: "dl-bin" }), " ",
      el("a", { href: "api/flights/" + encodeURIComponent(f.id) + "/download?format=mcap", textContent: ".mcap", className: "dl-mcap" }));
  }
  const base = "api/flights/" + encodeURIComponent(f.id) + "/download?format=";
  return el("span", {},
    el("a", { href: base + "ulg", textContent: ".ulg", className: "dl-ulg" }), " ",
    el("a", { href: base + "mcap", textContent: ".mcap", className: "dl-mcap" }));
}

function renderFlights() {
  const body = document.querySelector("#flights tbody");
  const rows = [...flights.values()].sort((a, b) => (a.id < b.id ? 1 : -1));
  body.replaceChildren(...rows.map((f) => {
    // Each cell says what it is: a phone shows the rows as cards, labelled.
    const td = (className, label, content) => {
      const cell = el("td", { className }, content);
      cell.dataset.label = label;
      return cell;
    };
    const tr = el("tr", {},
      td("start", "Start", startCell(f.started_utc)),
      td("vehicle", "Vehicle", "sysid " + f.system_id + (f.log_format === "dataflash" ? " · ArduPilot" : "")),
      td("duration", "Duration", seconds(f.duration_s)),
      td("size", "Size", bytes(f.size_bytes)),
      td("stream", "Stream", streamCell(f)),
      td("fill", "Fill", fillCell(f)),
      td("findings", "Findings", findingsCell(f)),
      td("bucket", "Bucket", bucketCell(f)),
      td("review", "Flight Review", reviewCell(f)),
      td("downloads", "Download", downloads(f)));
    tr.dataset.id = f.id;
    tr.dataset.closed = f.closed;
    tr.addEventListener("click", (e) => { if (e.target.tagName !== "A") showFlight(f.id, true); });
    return tr;
  }));
  $("no-flights").hidden = rows.length > 0;
}

async function api(path, options = {}) {
  const response = await fetch(path, { credentials: "same-origin", ...options });
  if (response.status === 401) { location.href = "login"; throw new Error("not logged in"); }
  const body = await response.json();
  if (!response.ok) throw new Error(body.error || response.statusText);
  return body;
}

function cssColor(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

// One signal's plot: seconds from the flight's start, as the timeline above it; its holes
// (dropouts) left open. The plots share one cursor.
function plot(series) {
  const box = el("div", { className: "plot" });
  box.dataset.name = series.name;
  $("plots").append(box);
  const fg = cssColor("--fg"), line = cssColor("--line");
  const axis = { stroke: fg, grid: { stroke: line }, ticks: { stroke: line } };
  const chart = new uPlot({
    title: series.name + (series.unit ? " (" + series.unit + ")" : ""),
    width: Math.max(260, $("plots").clientWidth), height: 150,
    cursor: { sync: { key: "flight" } },
    scales: { x: { time: false, range: [0, plotSpan] } },
    axes: [{ ...axis, label: "s since the log's start", size: 40 }, axis],
    series: [{ label: "s" }, { label: series.source, stroke: cssColor("--info"), width: 1.5, spanGaps: false }],
  }, [series.t_us.map((t) => (t - plotFrom) / 1e6), series.values], box);
  plots.push(chart);
}

async function loadSignals(id) {
  for (const chart of plots) chart.destroy();
  plots.length = 0;
  $("plots").replaceChildren();
  $("plot-said").textContent = "reading the flight…";
  try {
    const signals = await api("api/flights/" + encodeURIComponent(id) + "/signals");
    if (plotted !== id) return;
    if (plotFrom === null) spanOf(signals.series);
    signals.series.forEach(plot);
    $("plot-fields").replaceChildren(...signals.fields.map((f) => el("option", { value: f })));
    $("plot-said").textContent = signals.series.length ? "" : "none of " + firstLook + " in this flight";
  } catch (e) {
    $("plot-said").textContent = "Not read: " + e.message;
  }
}

async function plotField() {
  const id = plotted, field = $("plot-field").value.trim();
  if (!id || !field) return;
  $("plot-said").textContent = "reading " + field + "…";
  try {
    const signals = await api("api/flights/" + encodeURIComponent(id) + "/signals?field=" + encodeURIComponent(field));
    if (plotted !== id) return;
    signals.series.forEach(plot);
    $("plot-said").textContent = signals.series.length ? "" : "no samples of " + field + " in this flight";
  } catch (e) {
    $("plot-said").textContent = "Not plotted: " + e.message;
  }
}

// An ArduPilot flight's span, from its signals when its report has no log times: the plots'
// axis.
function spanOf(series) {
  const t = series.flatMap((x) => (x.t_us.length ? [x.t_us[0], x.t_us[x.t_us.length - 1]] : []));
  if (!t.length) return;
  plotFrom = Math.min(...t);
  plotSpan = Math.max(1, Math.max(...t) - plotFrom) / 1e6;
}

// The timeline's marks from `from` to `to` (µs of log time): the gaps the fills filled
// first, so a dropout still missing inside one stays on top, then the dropouts, then the
// findings.
function timelineMarks(from, to, filled, dropouts, findings) {
  const at = (us) => Math.min(100, Math.max(0, (100 * (us - from)) / (to - from)));
  const width = (a, b) => "left:" + at(a) + "%;width:" + Math.max(0.2, at(b) - at(a)) + "%";
  return [
    ...filled.map((g) => el("div", {
      className: "mark filled", title: "filled from the SD log, " + g.records + " records" + (g.complete ? "" : " (the SD log lost some too)"),
      style: width(g.first_us, g.last_us) })),
    ...dropouts.map((d) => el("div", {
      className: "mark dropout", title: d.ms === null ? "dropout, of unknown length" : "dropout, " + d.ms + " ms",
      style: width(d.at_us, d.at_us + (d.ms || 0) * 1000) })),
    ...findings.map((x) => el("div", {
      className: "mark finding", title: x.severity + ": " + x.summary, style: "left:" + at(x.at_us) + "%" })),
  ];
}

// A flight's view; its signals read again when it is opened (`replot`), not at each change.
async function showFlight(id, replot = false) {
  if (shown !== id) $("flight-said").textContent = "";
  shown = id;
  const { flight: f, report } = await api("api/flights/" + encodeURIComponent(id));
  if (shown !== id) return;
  $("flight").hidden = false;
  $("flight").dataset.id = id;
  $("flight-title").textContent = started(f.started_utc);
  if (!report || report.session.autopilot === "ardupilot") return showFlightFiles(id, f, replot, report);
  const s = report.session, log = report.flight;
  const from = log.start_timestamp, to = Math.max(log.last_timestamp, from + 1);
  $("timeline").replaceChildren(...timelineMarks(from, to, s.filled,
    log.dropouts.map((d) => ({ at_us: d.timestamp, ms: d.duration_ms })), f.findings));
  if (replot || plotted !== id) {
    plotted = id;
    plotFrom = from;
    plotSpan = (to - from) / 1e6;
    firstLook = "battery_status, vehicle_local_position, vehicle_attitude";
    $("plot-field").placeholder = "battery_status.current_a";
    loadSignals(id);
  }
  const facts = [
    ["Vehicle", "sysid " + f.system_id + ", component " + f.component_id],
    ["Duration", seconds(f.duration_s)],
    ["Size", bytes(f.size_bytes) + " in " + s.splits + " splits" + (s.closed ? "" : " (still recording)")],
    ["As received", s.dropouts_received + " dropouts, " + (f.dropout_ms_received / 1000).toFixed(1) + " s lost"],
    ["Filled from the SD log", s.gaps_filled + " gaps, " + s.records_recovered + " records"],
    ["Still missing", s.dropouts_remaining + " dropouts"],
    ["Bucket", bucketCell(f).textContent],
    ["Flight Review", f.uploads.flight_review || "—"],
  ];
  $("flight-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { textContent: k }), el("dd", { textContent: v })]));
  $("flight-findings").replaceChildren(...(f.findings.length ? f.findings.map((x) => el("li", {},
    el("span", { className: "sev " + x.severity, textContent: x.severity }),
    " " + ((x.at_us - from) / 1e6).toFixed(1) + " s  " + x.analyzer + ": " + x.summary)) : [el("li", { className: "muted", textContent: "none" })]));
  $("flight-files").replaceChildren(...f.splits.map((sp) => el("li", {},
    el("a", { href: "api/flights/" + encodeURIComponent(id) + "/files/" + sp.file.split("/").map(encodeURIComponent).join("/"), textContent: sp.file }),
    " " + bytes(sp.size_bytes) + (sp.closed ? "" : " (open)"))));
  $("flight-delete").disabled = !f.closed;
  $("flight-fill").hidden = !(offered.fill && f.closed);
  $("flight-upload").hidden = !(offered.upload && f.closed && !f.uploads.complete);
}

// An ArduPilot flight's view: its line's facts, its timeline (from its `report`, when it has
// one: what the fills recovered, what is still missing), its findings, its plots (read from
// its own messages), its files and its actions.
function showFlightFiles(id, f, replot, report) {
  const log = report && report.flight;
  const known = log && log.first_us !== null && log.last_us !== null;
  if (known) {
    const from = log.first_us, to = Math.max(log.last_us, from + 1);
    $("timeline").replaceChildren(...timelineMarks(from, to, report.session.filled,
      log.dropouts.map((d) => ({ at_us: d.at_us, ms: d.duration_ms })), f.findings));
  } else {
    $("timeline").replaceChildren();
  }
  if (replot || plotted !== id) {
    plotted = id;
    plotFrom = known ? log.first_us : null;
    plotSpan = known ? Math.max(1, log.last_us - log.first_us) / 1e6 : plotSpan;
    firstLook = "BAT, POS, ATT";
    $("plot-field").placeholder = "BAT.Curr";
    loadSignals(id);
  }
  const facts = [
    ["Vehicle", "sysid " + f.system_id + ", component " + f.component_id + ", ArduPilot"],
    ["Duration", seconds(f.duration_s)],
    ["Size", bytes(f.size_bytes) + " in " + f.splits.length + " splits" + (f.closed ? "" : " (still recording)")],
    ["As received", f.dropouts_received + " dropouts, " + (f.dropout_ms_received / 1000).toFixed(1) + " s lost; " + f.dropped_at_source + " messages dropped by the vehicle"],
    ["Filled from the card", fillCell(f).textContent + (report && report.session.gaps_filled ? ": " + report.session.gaps_filled + " gaps, " + report.session.records_recovered + " records" : "")],
    ["Still missing", report ? log.dropouts.length + " dropouts" : "—"],
    ["Bucket", bucketCell(f).textContent],
    ["Flight Review", "not for ArduPilot logs"],
  ];
  $("flight-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", { textContent: k }), el("dd", { textContent: v })]));
  $("flight-findings").replaceChildren(...(f.findings.length ? f.findings.map((x) => el("li", {},
    el("span", { className: "sev " + x.severity, textContent: x.severity }),
    " " + (x.at_us / 1e6).toFixed(1) + " s  " + x.analyzer + ": " + x.summary)) : [el("li", { className: "muted", textContent: "none" })]));
  $("flight-files").replaceChildren(...f.splits.map((sp) => el("li", {},
    el("a", { href: "api/flights/" + encodeURIComponent(id) + "/files/" + sp.file.split("/").map(encodeURIComponent).join("/"), textContent: sp.file }),
    " " + bytes(sp.size_bytes) + (sp.closed ? "" : " (open)"))));
  $("flight-delete").disabled = !f.closed;
  $("flight-fill").hidden = !(offered.fill && f.closed);
  $("flight-upload").hidden = !(offered.upload && f.closed && !f.uploads.complete);
}

async function act(what) {
  const id = shown;
  if (!id) return;
  try {
    await api("api/flights/" + encodeURIComponent(id) + "/" + what, { method: "POST", headers: { "X-CSRF-Token": csrf } });
    $("flight-said").textContent = what === "fill" ? "fill asked for: the row follows it" : "upload asked for: the row follows it";
  } catch (e) {
    $("flight-said").textContent = "Not done: " + e.message;
  }
}

// A fetched log's link, or the button that fetches it whole onto the companion.
function copyCell(path, fetched) {
  if (fetched) {
    return el("a", { href: "api/vehicle/fetched/" + encodeURIComponent(fetched), textContent: "download " + fetched, className: "fetched" });
  }
  const button = el("button", { type: "button", textContent: "Fetch whole" });
  button.addEventListener("click", async () => {
    button.disabled = true;
    try {
      await api("api/vehicle/fetch?path=" + encodeURIComponent(path), { method: "POST", headers: { "X-CSRF-Token": csrf } });
    } catch (e) {
      button.disabled = false;
      $("sd-said").textContent = "Not fetched: " + e.message;
    }
  });
  return button;
}

// A fetch's progress (the sd_fetch event, or GET api/vehicle/fetch) in its row.
function showFetch(f) {
  const row = [...document.querySelectorAll("#sd-logs tbody tr")].find((r) => r.dataset.path === f.path);
  if (!row) return;
  const cell = row.cells[3];
  if (f.state === "done") {
    cell.replaceChildren(copyCell(f.path, f.file));
  } else if (f.state === "failed") {
    cell.replaceChildren(el("span", { className: "bad", textContent: "failed: " + f.error + " " }), copyCell(f.path, null));
  } else {
    const bar = el("progress", { max: f.size_bytes, value: f.have_bytes });
    const said = { waiting: "waiting for the vehicle's files…", paused: "paused while the vehicle is armed, at " + bytes(f.have_bytes) }[f.state]
      || bytes(f.have_bytes) + " of " + bytes(f.size_bytes);
    cell.replaceChildren(bar, " " + said);
  }
  cell.dataset.state = f.state;
}

async function showSdCard() {
  $("sd-said").textContent = "asking the vehicle…";
  try {
    const logs = await api("api/vehicle/logs");
    const body = document.querySelector("#sd-logs tbody");
    body.replaceChildren(...logs.map((l) => {
      const here = l.session
        ? el("a", { href: "#", textContent: l.session, onclick: (e) => { e.preventDefault(); showFlight(l.session); } })
        : el("span", { className: "muted", textContent: "—" });
      const tr = el("tr", {}, el("td", { textContent: l.path }), el("td", { textContent: bytes(l.size_bytes) }), el("td", {}, here),
        el("td", {}, copyCell(l.path, l.fetched)));
      tr.dataset.path = l.path;
      return tr;
    }));
    const fetching = await api("api/vehicle/fetch");
    if (fetching && fetching.state !== "done") showFetch(fetching);
    $("sd-logs").hidden = false;
    $("sd-said").textContent = logs.length + " logs on the vehicle";
  } catch (e) {
    $("sd-said").textContent = "Not read: " + e.message;
  }
}

async function deleteShown() {
  const id = shown;
  if (!id || !confirm("Delete every local file of the flight " + id + "? This cannot be undone.")) return;
  try {
    await api("api/flights/" + encodeURIComponent(id) + "/delete", { method: "POST", headers: { "X-CSRF-Token": csrf } });
    flights.delete(id);
    renderFlights();
    $("flight").hidden = true;
    shown = null;
  } catch (e) {
    alert("Not deleted: " + e.message);
  }
}

async function reload() {
  const list = await api("api/flights");
  flights.clear();
  for (const f of list) flights.set(f.id, f);
  renderFlights();
}

function follow() {
  const events = new EventSource("api/events");
  const pill = $("connection");
  events.onopen = () => { pill.textContent = "live"; pill.className = "pill live"; reload(); };
  events.onerror = () => { pill.textContent = "reconnecting…"; pill.className = "pill down"; };
  events.addEventListener("status", (e) => { lastStatus = JSON.parse(e.data); renderStatus(lastStatus); });
  events.addEventListener("disk", (e) => { disk = JSON.parse(e.data); if (lastStatus) renderStatus(lastStatus); });
  events.addEventListener("flight", (e) => {
    const f = JSON.parse(e.data);
    flights.set(f.id, f);
    renderFlights();
    if (shown === f.id) showFlight(f.id);
  });
  events.addEventListener("flight_removed", (e) => {
    const { id } = JSON.parse(e.data);
    flights.delete(id);
    renderFlights();
  });
  events.addEventListener("dropout", (e) => {
    const d = JSON.parse(e.data);
    const f = d.session && flights.get(d.session);
    if (f) {
      f.dropouts_received += 1;
      f.dropout_ms_received += d.duration_ms || 0;
      renderFlights();
    }
  });
  events.addEventListener("finding", (e) => {
    const x = JSON.parse(e.data);
    const f = flights.get(x.session);
    if (f) { f.findings.push(x); renderFlights(); }
  });
  events.addEventListener("sd_fetch", (e) => showFetch(JSON.parse(e.data)));
  events.addEventListener("resync", reload);
}

document.addEventListener("DOMContentLoaded", async () => {
  $("flight-close").addEventListener("click", () => { $("flight").hidden = true; shown = null; plotted = null; });
  $("plot-add").addEventListener("click", plotField);
  $("plot-field").addEventListener("keydown", (e) => { if (e.key === "Enter") plotField(); });
  window.addEventListener("resize", () => {
    for (const chart of plots) chart.setSize({ width: Math.max(260, $("plots").clientWidth), height: 150 });
  });
  $("flight-delete").addEventListener("click", deleteShown);
  $("flight-fill").addEventListener("click", () => act("fill"));
  $("flight-upload").addEventListener("click", () => act("upload"));
  $("sd-show").addEventListener("click", showSdCard);
  const status = await api("api/status");
  offered = status.actions;
  $("sd-section").hidden = !offered.vehicle_logs;
  renderStatus(status);
  csrf = (await api("api/session")).csrf_token;
  await reload();
  follow();
});
