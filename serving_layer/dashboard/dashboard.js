// The dashboard: a chart per view (final batch rows apart from provisional speed rows), the view's
// freshness, late events and days, the deployment's health, and a SQL box. Everything comes from the
// same HTTP API analysts use (serving_layer/api.py); a token, if the server needs one, is taken from
// the page's #token=... fragment.
"use strict";

const token = new URLSearchParams(location.hash.slice(1)).get("token");
const HOURS = 24;   // how far back from a view's newest window the chart reaches
const POINTS = 3000;

async function api(path, options = {}) {
  const headers = { "Content-Type": "application/json" };
  if (token) headers.Authorization = `Bearer ${token}`;
  const response = await fetch(path, { ...options, headers });
  const body = await response.json();
  if (!response.ok) throw new Error(body.detail || response.statusText);
  return body;
}

const $ = (id) => document.getElementById(id);
let views = {}, health = null;

function facts(pairs) {
  $("facts").replaceChildren(...pairs.flatMap(([term, value]) => {
    const dt = document.createElement("dt"), dd = document.createElement("dd");
    dt.textContent = term;
    dd.textContent = value;
    return [dt, dd];
  }));
}

function quality(check) {
  if (!check) return "none yet";
  const verdict = check.failed ? `${check.failed} critical failed` : "passed";
  return `${verdict}, ${check.warnings} warnings (${check.first_day}..${check.last_day})`;
}

async function newestWindow(view) {
  const sql = `SELECT max(window_start) AS newest FROM "${view}"`;
  return (await api("/query", { method: "POST", body: JSON.stringify({ sql }) })).rows[0][0];
}

async function showView() {
  const view = views[$("view").value], state = health.views[view.name];
  const hasDays = state.final_days !== "none" || state.provisional_days !== "none";
  const newest = hasDays ? await newestWindow(view.name) : null;
  $("description").textContent = view.description;
  if ($("measure").dataset.view !== view.name) {
    $("measure").replaceChildren(...view.measures.map((m) => new Option(m, m)));
    $("measure").dataset.view = view.name;
  }
  facts([
    ["window", view.window], ["keys", view.keys.join(", ") || "none"],
    ["newest window", newest || "none yet"],
    ["speed rows written", health.speed_rows_age_seconds === null ? "never"
      : `${health.speed_rows_age_seconds.toFixed(1)} s ago`],
    ["late events", state.late_events], ["final days", state.final_days],
    ["provisional days", state.provisional_days],
    ["last quality check", quality(state.last_quality_check)],
  ]);
  const measure = $("measure").value;
  let rows = [];
  if (newest) {
    const start = new Date(Date.parse(newest) - HOURS * 3600e3).toISOString();
    rows = (await api(`/views/${view.name}?start=${encodeURIComponent(start)}&limit=${POINTS}`)).rows;
  }
  const trace = (final, name, color) => {
    const part = rows.filter((r) => r.is_final === final);
    return {
      name, type: "scatter", mode: "markers", marker: { color, size: 6 },
      x: part.map((r) => r.window_start), y: part.map((r) => r[measure]),
      text: part.map((r) => view.keys.map((k) => `${k}=${r[k]}`).join(" ")),
    };
  };
  Plotly.react("chart", [trace(true, "final (batch)", "#1f6fb4"), trace(false, "provisional (speed)", "#e8871e")], {
    title: { text: `${view.name}: ${measure}, last ${HOURS} h of data` },
    xaxis: { title: { text: "window start (UTC)" } }, yaxis: { title: { text: measure } },
    margin: { t: 40 }, legend: { orientation: "h" },
  }, { displaylogo: false, responsive: true });
}

async function runQuery() {
  $("error").textContent = "";
  $("result").replaceChildren();
  try {
    const { columns, rows } = await api("/query", { method: "POST", body: JSON.stringify({ sql: $("sql").value }) });
    const head = document.createElement("tr");
    head.replaceChildren(...columns.map((c) => Object.assign(document.createElement("th"), { textContent: c })));
    $("result").replaceChildren(head, ...rows.map((row) => {
      const tr = document.createElement("tr");
      tr.replaceChildren(...row.map((v) => Object.assign(document.createElement("td"), { textContent: v })));
      return tr;
    }));
  } catch (error) {
    $("error").textContent = error.message;
  }
}

async function main() {
  const [listing, report] = await Promise.all([api("/views"), api("/health")]);
  health = report;
  const speed = report.speed_layer;
  $("health").textContent = `speed layer ${speed.running ? "running" : "not running"}` +
    (speed.running ? `, lag ${speed.lag ?? "unknown"} records` : "") +
    ` · dead letters ${report.dead_letters}`;
  views = Object.fromEntries(listing.map((v) => [v.name, v]));
  $("view").replaceChildren(...listing.map((v) => new Option(v.name, v.name)));
  $("sql").value = `SELECT * FROM ${listing[0].name} ORDER BY window_start DESC LIMIT 20`;
  $("view").addEventListener("change", showView);
  $("measure").addEventListener("change", showView);
  $("run").addEventListener("click", runQuery);
  await showView();
}

main().catch((error) => { $("error").textContent = error.message; });
