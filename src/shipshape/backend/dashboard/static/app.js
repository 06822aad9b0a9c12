// The Shipshape dashboard: a small single-page app over the backend's /api/v1, charts by Chart.js.
// The API key stays in this tab's sessionStorage and goes out only as a bearer token.
"use strict";

const KEY = "shipshape.apiKey";
const charts = {};

function apiKey() { return sessionStorage.getItem(KEY); }

async function api(path, options = {}) {
  const response = await fetch(path, {
    ...options,
    headers: { Authorization: `Bearer ${apiKey()}`, "Content-Type": "application/json", ...(options.headers || {}) },
  });
  if (response.status === 401) { logout(); throw new Error("not logged in"); }
  if (!response.ok) {
    const body = await response.json().catch(() => ({}));
    throw new Error(body.detail || `${response.status}`);
  }
  return response.status === 204 ? null : response.json();
}

function show(id) {
  for (const section of document.querySelectorAll("main > section")) section.hidden = section.id !== id;
  document.getElementById("nav").hidden = id === "login";
}

function logout() { sessionStorage.removeItem(KEY); location.hash = "#/login"; route(); }

function cell(row, text, className) {
  const td = row.insertCell();
  td.textContent = text;
  if (className) td.className = className;
  return td;
}

const money = (v) => (v === null || v === undefined ? "–" : `${v < 0 ? "−" : ""}$${Math.abs(Number(v)).toFixed(2)}`);
const pct = (v) => (v === null || v === undefined ? "–" : `${v}%`);
const ratio = (v) => (v === null || v === undefined ? "–" : `${Math.round(v * 100)}%`);

async function showClusters() {
  show("clusters");
  const clusters = await api("/api/v1/clusters");
  // Rows are built aside and swapped in at once, so overlapping refreshes never mix their rows.
  const body = document.createElement("tbody");
  for (const c of clusters) {
    // Cost and spot share only: the start-up analyses are for the cluster's own page.
    const summary = await api(`/api/v1/clusters/${c.id}/summary?startup=false`).catch(() => null);
    const row = body.insertRow();
    row.className = "link";
    row.dataset.cluster = c.id;
    row.onclick = () => { location.hash = `#/clusters/${c.id}`; };
    cell(row, c.name);
    cell(row, c.node_count, "num");
    cell(row, c.pod_count, "num");
    cell(row, summary ? money(summary.cost.usd_per_hour) : "–", "num");
    cell(row, summary ? pct(summary.cost.savings_pct) : "–", "num");
    cell(row, summary ? pct(summary.spot_share_pct) : "–", "num");
    cell(row, c.last_seen ? new Date(c.last_seen).toLocaleString() : "never");
  }
  document.querySelector("#clusters-table tbody").replaceWith(body);
}

function draw(id, config) {
  if (charts[id]) charts[id].destroy();
  charts[id] = new Chart(document.getElementById(id), { ...config, options: { animation: false, responsive: true, ...(config.options || {}) } });
}

function figure(label, value) {
  const div = document.createElement("div");
  div.className = "figure";
  const b = document.createElement("b");
  b.textContent = value;
  div.append(b, label);
  return div;
}

// The time axis is a linear scale of epoch milliseconds (no date adapter to ship), labelled here.
function timeLabel(ms, spanMs) {
  const at = new Date(ms);
  if (spanMs > 2 * 86400000) return at.toLocaleDateString([], { month: "short", day: "numeric" }) + " " + at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
  return at.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" });
}

// The x axis runs to the end of the window asked for, from the first point (at least an hour back).
function seriesWindow(series) {
  const until = Date.parse(series.until);
  const since = Date.parse(series.since);
  const first = series.points.length ? Date.parse(series.points[0].at) : until;
  return { min: Math.max(since, Math.min(first, until - 3600000)), max: until };
}

function drawSeries(id, series, lines, options = {}) {
  const points = series.points;
  const { min, max } = seriesWindow(series);
  const span = max - min;
  const datasets = lines
    .map(([label, field, colour, scale = 1]) => ({
      label,
      data: points.filter((p) => p[field] !== null).map((p) => ({ x: Date.parse(p.at), y: p[field] * scale })),
      borderColor: colour,
      backgroundColor: colour,
      pointRadius: points.length > 60 ? 0 : 4,
      borderWidth: 2,
      spanGaps: false,
    }))
    .filter((d) => d.data.length);
  draw(id, {
    type: "line",
    data: { datasets },
    options: {
      parsing: false,
      plugins: { legend: { display: options.legend ?? true }, tooltip: { callbacks: { title: (items) => new Date(items[0].parsed.x).toLocaleString() } } },
      scales: {
        x: { type: "linear", min, max, ticks: { callback: (v) => timeLabel(v, span), maxTicksLimit: 8 } },
        y: { beginAtZero: true, ...(options.y || {}) },
      },
    },
  });
}

async function showSeries(id) {
  const series = await api(`/api/v1/clusters/${id}/series`);
  const points = series.points;
  document.getElementById("series-range").textContent = points.length
    ? `(up to a day back, a point per ${series.step_seconds >= 3600 ? series.step_seconds / 3600 + " h" : series.step_seconds / 60 + " min"})`
    : "(no points yet: one is written per minute in which the agent pushed)";
  drawSeries("chart-series-cost", series, [["USD/hour", "usd_per_hour", "#2a9d8f"]], { legend: false });
  drawSeries("chart-series-share", series, [
    ["replicas on spot", "spot_share_pct", "#e76f51"],
    ["CPU requested", "cpu_requested_ratio", "#457b9d", 100],
    ["memory requested", "memory_requested_ratio", "#9b5de5", 100],
    ["CPU used", "cpu_used_ratio", "#1d3557", 100],
    ["memory used", "memory_used_ratio", "#6a4c93", 100],
  ]);
  drawSeries("chart-series-startup", series, [
    ["p50", "startup_p50_seconds", "#52b788"],
    ["p99", "startup_p99_seconds", "#bc4749"],
  ]);
}

async function showCluster(id) {
  show("cluster");
  const [cluster, summary, recommendations] = await Promise.all([
    api(`/api/v1/clusters/${id}`),
    api(`/api/v1/clusters/${id}/summary`),
    api(`/api/v1/clusters/${id}/recommendations`),
  ]);
  // The series draw on their own: a failure there leaves the rest of the page as it is.
  showSeries(id).catch((error) => console.error(error));
  document.getElementById("cluster-name").textContent = cluster.name;
  document.getElementById("figures").replaceChildren(
    figure("nodes", summary.nodes),
    figure("pods", summary.pods),
    figure("USD/hour now", money(summary.cost.usd_per_hour)),
    figure("USD/hour on demand", money(summary.cost.on_demand_usd_per_hour)),
    figure("saved vs on-demand", pct(summary.cost.savings_pct)),
    figure("replicas on spot", pct(summary.spot_share_pct)),
    figure("CPU requested", ratio(summary.utilisation.cpu_requested_ratio)),
    figure("memory requested", ratio(summary.utilisation.memory_requested_ratio)),
    figure("CPU used", ratio(summary.utilisation.cpu_used_ratio)),
    figure("memory used", ratio(summary.utilisation.memory_used_ratio)),
    figure("pod start-up p99 (s)", summary.pod_startup.overall?.endToEnd?.p99?.toFixed?.(1) ?? "–"),
  );
  const pools = summary.pools;
  draw("chart-pools", {
    type: "bar",
    data: {
      labels: pools.map((p) => `${p.instance_type} ${p.zone}`),
      datasets: [
        { label: "spot", data: pools.map((p) => (p.capacity_type === "spot" ? p.nodes : 0)), backgroundColor: "#f0a202" },
        { label: "on-demand", data: pools.map((p) => (p.capacity_type !== "spot" ? p.nodes : 0)), backgroundColor: "#12324f" },
      ],
    },
    options: { scales: { x: { stacked: true }, y: { stacked: true, beginAtZero: true, ticks: { precision: 0 } } } },
  });
  const workloads = summary.workloads;
  draw("chart-workloads", {
    type: "bar",
    data: {
      labels: workloads.map((w) => w.workload),
      datasets: [
        { label: "spot", data: workloads.map((w) => w.spot), backgroundColor: "#f0a202" },
        { label: "on-demand", data: workloads.map((w) => w.on_demand), backgroundColor: "#12324f" },
      ],
    },
    options: { indexAxis: "y", scales: { x: { stacked: true, ticks: { precision: 0 } }, y: { stacked: true } } },
  });
  const histogram = summary.pod_startup.histogram;
  draw("chart-startup", {
    type: "bar",
    data: { labels: histogram.map((b) => b.bucket), datasets: [{ label: "pods", data: histogram.map((b) => b.pods), backgroundColor: "#3c7dc4" }] },
    options: { scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
  });
  const nodes = summary.node_startup.nodes.filter((n) => n.timeToReady !== null).slice(0, 30);
  draw("chart-nodes", {
    type: "bar",
    data: { labels: nodes.map((n) => n.name), datasets: [{ label: "seconds to Ready", data: nodes.map((n) => n.timeToReady), backgroundColor: "#6a994e" }] },
    options: { indexAxis: "y" },
  });
  const slowest = document.createElement("tbody");
  for (const pod of summary.pod_startup.slowest.slice(0, 10)) {
    const row = slowest.insertRow();
    cell(row, `${pod.namespace}/${pod.name}`);
    cell(row, pod.workload || "");
    cell(row, pod.node || "");
    cell(row, pod.endToEnd?.toFixed?.(1) ?? "–", "num");
  }
  document.querySelector("#slowest-table tbody").replaceWith(slowest);
  const findings = document.getElementById("findings");
  findings.replaceChildren();
  for (const f of summary.pod_startup.findings) {
    const li = document.createElement("li");
    li.textContent = `${f.title}: ${f.cause} — ${f.fix}`;
    findings.append(li);
  }
  if (!summary.pod_startup.findings.length) findings.append(Object.assign(document.createElement("li"), { textContent: "none" }));
  renderRecommendations(id, recommendations);
}

function renderRecommendations(clusterId, recommendations) {
  const body = document.createElement("tbody");
  for (const r of recommendations) {
    const row = body.insertRow();
    row.dataset.recommendation = r.id;
    const evidence = r.recommendation.evidence || {};
    const title = cell(row, r.title);
    // What the finding rests on, as the analysis wrote it (right-sizing: per container the change,
    // the percentile and peak it came from, the samples and hours of usage; HPA notes).
    if (Array.isArray(evidence.summary) && evidence.summary.length) {
      const list = document.createElement("ul");
      list.className = "evidence";
      for (const line of evidence.summary) list.append(Object.assign(document.createElement("li"), { textContent: line }));
      title.append(list);
    }
    const target = r.recommendation.target;
    cell(row, target ? `${target.kind}/${target.namespace}/${target.name}` : (evidence.workload || evidence.scope || ""));
    const saving = cell(row, money(r.monthly_savings_usd), "num");
    if (r.monthly_savings_usd < 0) saving.title = "costs more: the workload asks for less than it uses";
    cell(row, `${Math.round(r.confidence * 100)}%`, "num");
    const status = cell(row, r.status, `status status-${r.status}`);
    if (r.detail) status.title = r.detail;
    const actions = row.insertCell();
    if (r.status === "open") {
      // Advisory findings (no instruction the agent could apply) can only be dismissed.
      const verbs = r.recommendation.instruction ? [["Approve", "approve"], ["Dismiss", "dismiss"]] : [["Dismiss", "dismiss"]];
      for (const [label, verb] of verbs) {
        const button = document.createElement("button");
        button.textContent = label;
        button.className = verb;
        button.onclick = async () => {
          button.disabled = true;
          try {
            await api(`/api/v1/recommendations/${r.id}/${verb}`, { method: "POST" });
          } catch (error) {
            alert(error.message);
          }
          renderRecommendations(clusterId, await api(`/api/v1/clusters/${clusterId}/recommendations`));
        };
        actions.append(button);
      }
    }
  }
  document.querySelector("#recommendations-table tbody").replaceWith(body);
}

async function route() {
  if (!apiKey()) { show("login"); return; }
  const match = location.hash.match(/^#\/clusters\/([^/]+)$/);
  try {
    if (match) await showCluster(match[1]);
    else await showClusters();
  } catch (error) {
    console.error(error);
  }
}

document.getElementById("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const key = document.getElementById("api-key").value.trim();
  const response = await fetch("/api/v1/clusters", { headers: { Authorization: `Bearer ${key}` } });
  if (!response.ok) {
    document.getElementById("login-error").textContent = "That key is not valid.";
    return;
  }
  sessionStorage.setItem(KEY, key);
  document.getElementById("login-error").textContent = "";
  if (location.hash === "#/clusters") route();
  else location.hash = "#/clusters";  // the hashchange routes
});
document.getElementById("logout").addEventListener("click", logout);
window.addEventListener("hashchange", route);
// Refresh what is on screen every 10 s (recommendations change as the agent reports back).
setInterval(() => { if (apiKey() && !document.getElementById("cluster").hidden) route(); }, 10000);
route();
