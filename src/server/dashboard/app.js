// The awl dashboard: views of the projections, updated live over Server-Sent Events.
// No framework and no build step: the server embeds this file as it is.
"use strict";

const STATUSES = ["QUEUED", "ASSIGNED", "PENDING_ACK", "IN_PROGRESS", "BLOCKED", "IN_REVIEW",
  "APPROVED", "COMPLETED", "FAILED", "CANCELLED"];
const TOKEN_KEY = "awl.token";
const $ = (id) => document.getElementById(id);
let current = "board";
let openRun = null;

// ---- the API, with the token kept in this browser ---------------------------------------

function token() { return localStorage.getItem(TOKEN_KEY); }

function headers(extra) {
  const h = Object.assign({ "accept": "application/json" }, extra || {});
  if (token()) h["authorization"] = "Bearer " + token();
  return h;
}

class NeedToken extends Error {}

async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = headers(opts.headers);
  const response = await fetch(path, opts);
  if (response.status === 401) throw new NeedToken();
  const body = await response.json().catch(() => null);
  if (!response.ok) {
    const message = body && body.error ? body.error.message : response.statusText;
    throw new Error(message);
  }
  return body;
}

function askToken(error) {
  const dialog = $("token-dialog");
  $("token-error").hidden = !error;
  $("token-error").textContent = error || "";
  if (!dialog.open) dialog.showModal();
  $("token-input").focus();
}

$("token-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  localStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
  try {
    await api("/api/v1/views/board?limit=1");
    $("token-dialog").close();
    start();
  } catch (e) {
    localStorage.removeItem(TOKEN_KEY);
    askToken(e instanceof NeedToken ? "That token is unknown or revoked." : e.message);
  }
});

$("sign-out").addEventListener("click", () => { localStorage.removeItem(TOKEN_KEY); location.reload(); });

// ---- formatting --------------------------------------------------------------------------

function esc(text) {
  return String(text === null || text === undefined ? "" : text)
    .replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;").replace(/"/g, "&quot;");
}
function ago(time) {
  if (!time) return "";
  const s = Math.max(0, (Date.now() - Date.parse(time)) / 1000);
  if (s < 60) return Math.round(s) + "s";
  if (s < 3600) return Math.round(s / 60) + "m";
  if (s < 86400) return Math.round(s / 3600) + "h";
  return Math.round(s / 86400) + "d";
}
function ms(value) {
  if (value === null || value === undefined) return "";
  if (value < 1000) return Math.round(value) + " ms";
  if (value < 60000) return (value / 1000).toFixed(1) + " s";
  return (value / 60000).toFixed(1) + " min";
}
function when(time) { return time ? new Date(time).toLocaleString() : ""; }
function status(s) { return `<span class="status s-${esc(s)}">${esc(s)}</span>`; }
function list(json) { try { return JSON.parse(json || "[]"); } catch { return []; } }

// ---- the views ------------------------------------------------------------------------------

async function loadBoard() {
  const page = await api("/api/v1/views/board?limit=1000");
  const byStatus = {};
  for (const t of page.rows) (byStatus[t.status] = byStatus[t.status] || []).push(t);
  $("columns").innerHTML = STATUSES.map((s) => {
    const cards = (byStatus[s] || []).map((t) => `
      <div class="card" data-task="${esc(t.task_id)}">
        <div class="prompt">${esc(t.prompt)}</div>
        <div class="meta">
          ${t.assignee ? `<span>@${esc(t.assignee)}</span>` : ""}
          ${list(t.capabilities).map((c) => `<span class="chip">${esc(c)}</span>`).join("")}
          ${t.repository ? `<span>${esc(t.repository)}${t.branch ? "#" + esc(t.branch) : ""}</span>` : ""}
          <span title="${esc(when(t.status_since))}">${ago(t.status_since || t.queued_at)}</span>
        </div>
        ${t.question ? `<div class="question">asks: ${esc(t.question)}</div>` : ""}
      </div>`).join("");
    return `<div class="column" data-status="${s}"><h3>${s.replace("_", " ")}<span>${(byStatus[s] || []).length}</span></h3>${cards}</div>`;
  }).join("");
}

// The runs list as last drawn: a refresh that draws the same rows leaves the table as
// it is, so a click on a row is never lost to its row being replaced under the pointer.
let drawnRuns = null;

async function loadRuns() {
  const filter = $("run-status").value;
  const page = await api("/api/v1/views/runs?limit=200" + (filter ? "&status=" + filter : ""));
  const html = page.rows.map((r) => `
    <tr class="click" data-run="${esc(r.run_id)}">
      <td><input type="checkbox" class="pick" ${picked.has(r.run_id) ? "checked" : ""}></td>
      <td><code>${esc(r.run_id.slice(0, 8))}</code></td>
      <td>${esc(r.workflow)} <span class="meta">${esc(r.workflow_version)}</span></td>
      <td>${status(r.status)}</td>
      <td>${r.waiting ? `<span class="waiting" title="${esc(r.waiting)}">${esc(r.waiting)}</span>` : esc(r.current_step || "")}</td>
      <td title="${esc(when(r.started_at))}">${ago(r.started_at)} ago</td>
      <td>${ms(r.duration_ms)}</td>
      <td>${r.cost_usd ? "$" + r.cost_usd.toFixed(4) : ""}</td>
    </tr>`).join("") || `<tr><td colspan="7" class="empty">no runs yet</td></tr>`;
  if (html !== drawnRuns) {
    $("run-rows").innerHTML = html;
    drawnRuns = html;
  }
  showPicked();
  if (openRun) await loadTimeline();
}

// Rows are redrawn as runs change, so their clicks are handled once, on the table body.
$("run-rows").addEventListener("click", (event) => {
  const row = event.target.closest("tr[data-run]");
  if (!row || event.target.classList.contains("pick")) return;
  openRun = row.dataset.run;
  loadTimeline().catch((e) => { if (e instanceof NeedToken) askToken(); else console.error(e); });
});
$("run-rows").addEventListener("change", (event) => {
  const row = event.target.closest("tr[data-run]");
  if (!row || !event.target.classList.contains("pick")) return;
  if (event.target.checked) picked.add(row.dataset.run); else picked.delete(row.dataset.run);
  showPicked();
});

async function loadTimeline() {
  const t = await api(`/api/v1/views/runs/${encodeURIComponent(openRun)}/timeline`);
  $("timeline").hidden = false;
  $("timeline-title").innerHTML = `${esc(t.run.workflow)} <code>${esc(t.run.run_id)}</code> ${status(t.run.status)}`
    + (t.run.waiting ? ` <span class="waiting">${esc(t.run.waiting)}</span>` : "");
  drawTimeline(t);
  // The run as the log folds it: where it came from, what was made from it, what it kept.
  const live = await api(`/api/v1/runs/${encodeURIComponent(openRun)}`).catch(() => null);
  const lineage = [];
  if (live && live.origin) {
    lineage.push(`${esc(live.origin.kind)} of <code>${esc(live.origin.run_id)}</code> from step ${esc(live.origin.from_step)}`);
    const kept = Object.entries(live.steps || {}).filter(([, s]) => s.carried_from).map(([id]) => esc(id));
    if (kept.length) lineage.push(`kept from it: ${kept.join(", ")}`);
  }
  for (const d of (live && live.derived) || []) {
    lineage.push(`${esc(d.kind)} <code>${esc(d.run_id)}</code> made from step ${esc(d.from_step)}`);
  }
  $("timeline-lineage").hidden = lineage.length === 0;
  $("timeline-lineage").innerHTML = lineage.join(" · ");
  const finished = ["SUCCEEDED", "FAILED", "CANCELLED"].includes(t.run.status);
  $("timeline-rows").innerHTML = t.steps.map((s) => `
    <tr data-step="${esc(s.step_id)}"><td>${esc(s.step_id)}</td><td>${s.attempt}</td><td>${status(s.outcome || "RUNNING")}</td>
    <td>${ms(s.duration_ms)}</td><td>${esc(s.error_class ? s.error_class + ": " + (s.error || "") : "")}</td>
    <td><code>${esc(s.output_summary || "")}</code></td>
    <td>${finished ? `<button class="rerun">Rerun from here</button><button class="fork">Fork…</button>` : ""}</td></tr>`).join("");
  for (const row of document.querySelectorAll("#timeline-rows tr[data-step]")) {
    const step = row.dataset.step;
    row.querySelector(".rerun")?.addEventListener("click", () => rerun(t.run.run_id, step, null));
    row.querySelector(".fork")?.addEventListener("click", () => {
      const changed = prompt(`Fork from ${step}: the inputs to change, as JSON`, "{}");
      if (changed === null) return;
      try { rerun(t.run.run_id, step, JSON.parse(changed)); }
      catch (e) { showActionError(`not JSON: ${e.message}`); }
    });
  }
  const active = ["QUEUED", "RUNNING", "WAITING"].includes(t.run.status);
  $("run-pause").hidden = !active;
  $("run-resume").hidden = t.run.status !== "PAUSED";
  $("run-cancel").hidden = finished;
  $("timeline-gates").innerHTML = t.gates.map((g) => `
    <p>gate <b>${esc(g.step_id)}</b>: ${esc(g.message)} —
    ${g.decision ? `${status(g.decision)} by ${esc(g.decided_by || "")} ${esc(when(g.decided_at))}${g.comment ? ": " + esc(g.comment) : ""}` : status("WAITING")}</p>`).join("");
}

// A chart of steps over time: one row per step, one bar per attempt.
function drawTimeline(t) {
  const svg = $("timeline-chart");
  const steps = [...new Set(t.steps.map((s) => s.step_id))];
  const times = t.steps.flatMap((s) => [s.scheduled_at, s.started_at, s.ended_at]).filter(Boolean).map(Date.parse);
  const t0 = Math.min(...times, Date.parse(t.run.started_at || new Date().toISOString()));
  const end = Math.max(...times, t.run.finished_at ? Date.parse(t.run.finished_at) : Date.now());
  const width = svg.clientWidth || 900, left = 140, row = 26, height = steps.length * row + 30;
  const span = Math.max(1, end - t0);
  const x = (time) => left + ((time - t0) / span) * (width - left - 20);
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("height", height);
  const colour = { SUCCEEDED: "#2f9e44", FAILED: "#e03131", SKIPPED: "#adb5bd" };
  let out = "";
  steps.forEach((id, i) => {
    const y = 10 + i * row;
    out += `<text x="8" y="${y + 14}">${esc(id)}</text>`;
    for (const s of t.steps.filter((s) => s.step_id === id)) {
      const a = Date.parse(s.started_at || s.scheduled_at);
      const b = s.ended_at ? Date.parse(s.ended_at) : Date.now();
      const w = Math.max(3, x(b) - x(a));
      out += `<rect class="bar" x="${x(a)}" y="${y}" width="${w}" height="18" rx="3" fill="${colour[s.outcome] || "#3b5bdb"}"><title>${esc(id)} attempt ${s.attempt}: ${esc(s.outcome || "running")} ${ms(s.duration_ms)}</title></rect>`;
    }
  });
  out += `<text x="${left}" y="${height - 4}">0</text><text x="${width - 80}" y="${height - 4}">${ms(span)}</text>`;
  svg.innerHTML = out;
}

async function loadInbox() {
  const gates = await api("/api/v1/views/inbox");
  $("inbox-count").hidden = gates.length === 0;
  $("inbox-count").textContent = gates.length;
  $("gates").innerHTML = gates.map((g) => `
    <div class="gate" data-gate="${esc(g.gate_id)}">
      <div class="message">${esc(g.message)}</div>
      <div class="meta">${esc(g.workflow)} · step ${esc(g.step_id)} · opened ${ago(g.opened_at)} ago
        ${list(g.approvers).length ? " · approvers: " + list(g.approvers).map(esc).join(", ") : ""}
        ${g.expires_at ? " · expires " + esc(when(g.expires_at)) : ""}</div>
      <button class="approve">Approve</button><button class="reject">Reject</button>
    </div>`).join("") || `<p class="empty">No gates are waiting.</p>`;
  for (const card of document.querySelectorAll(".gate")) {
    const id = card.dataset.gate;
    card.querySelector(".approve").addEventListener("click", () => decide(id, "approve", {}));
    card.querySelector(".reject").addEventListener("click", () => {
      const comment = prompt("Why reject it?");
      if (comment) decide(id, "reject", { comment });
    });
  }
}

// ---- many runs at once: pick them in the list, then one bulk action ---------------------------

const picked = new Set();

function showPicked() {
  $("bulk-bar").hidden = picked.size === 0 && !$("bulk-status").textContent;
  $("bulk-count").textContent = `${picked.size} run${picked.size === 1 ? "" : "s"} selected`;
}

// A rerun starts each run again at a step named here.
$("bulk-action").addEventListener("change", () => {
  $("bulk-from").hidden = $("bulk-action").value !== "rerun";
});

$("bulk-apply").addEventListener("click", async () => {
  const action = $("bulk-action").value;
  const request = { action, run_ids: [...picked] };
  if (action === "rerun") {
    request.from_step = $("bulk-from").value.trim();
    if (!request.from_step) {
      $("bulk-status").textContent = "Name the step to rerun them from.";
      return;
    }
  }
  const what = action === "rerun" ? `rerun from ${request.from_step}` : action;
  if (!picked.size || !confirm(`${what} ${picked.size} runs?`)) return;
  try {
    const bulk = await api("/api/v1/bulk", {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify(request),
    });
    picked.clear();
    $("bulk-status").textContent = `bulk ${action} of ${bulk.total} runs started`;
    for (let i = 0; i < 50; i++) {
      const now = await api(`/api/v1/bulk/${encodeURIComponent(bulk.bulk_id)}`);
      $("bulk-status").textContent = `bulk ${action}: ${now.through} of ${now.total} done (${now.acted} acted on, ${now.skipped} skipped)`;
      if (now.status === "COMPLETED") break;
      await new Promise((r) => setTimeout(r, 200));
    }
  } catch (e) {
    $("bulk-status").textContent = `Could not ${action} them: ${e.message}`;
  }
  await loadRuns().catch(() => {});
});

// ---- acting on a run: pause, resume, cancel, rerun from a step, fork -------------------------

function showActionError(message) {
  $("run-action-error").hidden = !message;
  $("run-action-error").textContent = message || "";
}

async function control(how) {
  if (!openRun) return;
  if (how === "cancel" && !confirm("Cancel this run?")) return;
  try {
    await api(`/api/v1/runs/${encodeURIComponent(openRun)}/${how}`, {
      method: "POST", headers: { "content-type": "application/json" }, body: "{}",
    });
    showActionError("");
  } catch (e) {
    showActionError(`Could not ${how} the run: ${e.message}`);
    return;
  }
  await loadRuns().catch(() => {});
}

async function rerun(run, step, inputs) {
  try {
    const body = inputs ? { from_step: step, inputs } : { from_step: step };
    const started = await api(`/api/v1/runs/${encodeURIComponent(run)}/rerun`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    showActionError("");
    openRun = started.run_id;
  } catch (e) {
    showActionError(`Could not rerun from ${step}: ${e.message}`);
    return;
  }
  // The new run reaches the views a moment later; the live stream redraws them too.
  await loadRuns().catch(() => {});
}

$("run-pause").addEventListener("click", () => control("pause"));
$("run-resume").addEventListener("click", () => control("resume"));
$("run-cancel").addEventListener("click", () => control("cancel"));

// ---- whole workflows: their versions, pause and resume ----------------------------------------

async function loadWorkflows() {
  const { workflows } = await api("/api/v1/workflows");
  $("workflow-rows").innerHTML = workflows.map((w) => `
    <tr data-workflow="${esc(w.workflow)}"><td>${esc(w.workflow)}</td>
    <td>${w.latest ? esc(w.latest) : `<span class="meta">every version retired</span>`}</td>
    <td>${w.versions.map((v) => `<span class="chip" title="registered by ${esc(v.registered_by)} ${esc(when(v.registered_at))}${v.retired ? "; retired " + esc(v.retired) : ""}">${esc(v.version)}${v.retired ? " (retired)" : ""}</span>`).join(" ")}</td>
    <td>${w.paused ? `${status("PAUSED")} <span class="meta">${esc(w.paused)}</span>` : status("ACTIVE")}</td>
    <td>${w.paused ? `<button class="resume">Resume</button>` : `<button class="pause">Pause</button>`}</td></tr>`).join("")
    || `<tr><td colspan="5" class="empty">no workflows registered</td></tr>`;
  for (const row of document.querySelectorAll("#workflow-rows tr[data-workflow]")) {
    const name = row.dataset.workflow;
    row.querySelector(".pause")?.addEventListener("click", () => {
      const reason = prompt(`Pause every run of ${name}: why?`);
      if (reason !== null) controlWorkflow(name, "pause", reason);
    });
    row.querySelector(".resume")?.addEventListener("click", () => controlWorkflow(name, "resume", null));
  }
}

async function controlWorkflow(name, how, reason) {
  try {
    await api(`/api/v1/workflows/${encodeURIComponent(name)}/${how}`, {
      method: "POST", headers: { "content-type": "application/json" },
      body: JSON.stringify(reason ? { reason } : {}),
    });
    $("workflow-error").hidden = true;
  } catch (e) {
    $("workflow-error").hidden = false;
    $("workflow-error").textContent = `Could not ${how} ${name}: ${e.message}`;
  }
  await loadWorkflows().catch(() => {});
}

async function decide(gate, how, body) {
  try {
    await api(`/api/v1/gates/${encodeURIComponent(gate)}/${how}`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    await loadInbox();
  } catch (e) {
    alert(`Could not ${how} the gate: ${e.message}`);
  }
}

async function loadAnalytics() {
  const [workflows, steps, agents] = await Promise.all([
    api("/api/v1/views/analytics/workflows"), api("/api/v1/views/analytics/steps"), api("/api/v1/views/analytics/agents"),
  ]);
  $("workflow-stats").innerHTML = `<div class="stats">${workflows.map((w) => `
    <div class="stat"><h2>${esc(w.workflow)}</h2>
      <div class="numbers">
        <div><b>${w.runs}</b><span>runs</span></div>
        <div><b>${w.success_rate === null ? "–" : Math.round(w.success_rate * 100) + "%"}</b><span>success</span></div>
        <div><b>${ms(w.p50_ms)}</b><span>p50</span></div>
        <div><b>${ms(w.p95_ms)}</b><span>p95</span></div>
        <div><b>${ms(w.max_ms)}</b><span>max</span></div>
        <div><b>$${w.cost_usd.toFixed(2)}</b><span>cost</span></div>
      </div>${dayChart(w.by_day)}</div>`).join("") || `<p class="empty">No runs yet.</p>`}</div>`;
  $("step-rows").innerHTML = steps.map((s) => `
    <tr><td>${esc(s.workflow)}</td><td>${esc(s.step_id)}</td><td>${s.attempts}</td><td>${s.failures}</td><td>${s.retries}</td>
    <td>${ms(s.mean_ms)}</td><td>${Object.entries(s.failures_by_class).map(([k, v]) => `${esc(k)}: ${v}`).join(", ")}</td></tr>`).join("");
  $("agent-stat-rows").innerHTML = agents.map((a) => `
    <tr><td>${esc(a.agent_id)}</td><td>${a.tasks_done}</td><td>${a.tasks_failed}</td><td>${a.review_round_trips}</td><td>${ms(a.mean_task_ms)}</td>
    <td>${Object.entries(a.time_in_column_ms).map(([k, v]) => `${esc(k.replace("_", " ").toLowerCase())} ${ms(v)}`).join(", ")}</td></tr>`).join("");
}

// Bars of runs per day, green for the share that succeeded, with the p50 duration as a line.
function dayChart(days) {
  if (!days.length) return "";
  const width = 340, height = 90, bar = Math.max(4, Math.min(28, (width - 20) / days.length - 4));
  const most = Math.max(...days.map((d) => d.runs), 1);
  const slowest = Math.max(...days.map((d) => d.p50_ms || 0), 1);
  let out = "", line = [];
  days.forEach((d, i) => {
    const x = 10 + i * (bar + 4), h = (d.runs / most) * (height - 25), ok = (d.succeeded / most) * (height - 25);
    out += `<rect x="${x}" y="${height - 15 - h}" width="${bar}" height="${h}" fill="#ffc9c9"><title>${d.day}: ${d.runs} runs, ${d.failed} failed</title></rect>`;
    out += `<rect x="${x}" y="${height - 15 - ok}" width="${bar}" height="${ok}" fill="#8ce99a"></rect>`;
    if (d.p50_ms !== null) line.push(`${x + bar / 2},${height - 15 - (d.p50_ms / slowest) * (height - 25)}`);
  });
  if (line.length > 1) out += `<polyline points="${line.join(" ")}" fill="none" stroke="#3b5bdb" stroke-width="1.5"></polyline>`;
  out += `<text x="10" y="${height - 2}">${esc(days[0].day)}</text>`;
  return `<svg class="chart" viewBox="0 0 ${width} ${height}" height="${height}">${out}</svg>`;
}

// ---- model use of awl's own agents -------------------------------------------------------------

async function loadModels() {
  const by = $("model-group").value;
  const [use, solves] = await Promise.all([
    api("/api/v1/views/analytics/models?by=" + by), api("/api/v1/views/solves?limit=50"),
  ]);
  $("model-key").textContent = by;
  const usd = (v) => "$" + (v < 0.01 && v > 0 ? v.toFixed(5) : v.toFixed(2));
  $("model-rows").innerHTML = use.map((u) => `
    <tr data-key="${esc(u.key)}"><td>${u.key ? esc(u.key) : `<span class="meta">asked directly</span>`}</td><td>${u.solves}</td><td>${u.failed}</td>
    <td class="calls">${u.calls}</td><td>${u.retries}</td><td>${u.tokens_in}</td><td>${u.tokens_out}</td><td>${usd(u.cost_usd)}</td>
    <td>${ms(u.p50_latency_ms)}</td><td>${ms(u.p95_latency_ms)}</td><td>${ms(u.max_latency_ms)}</td>
    <td>${u.by_day.map((d) => `<span title="${esc(d.day)}: ${d.tokens_in + d.tokens_out} tokens, ${usd(d.cost_usd)}">${esc(d.day.slice(5))}: ${d.calls}</span>`).join(", ")}</td></tr>`).join("")
    || `<tr><td colspan="12" class="empty">no model calls yet</td></tr>`;
  $("solve-rows").innerHTML = solves.rows.map((s) => `
    <tr data-solve="${esc(s.solve_id)}"><td title="${esc(when(s.started_at))}">${ago(s.started_at)} ago</td><td>${esc(s.agent)}</td><td>${esc(s.model)}</td>
    <td>${esc(s.workflow)}</td><td>${status(s.status.toUpperCase())}</td><td>${s.model_calls}</td><td>${s.tool_calls}</td>
    <td>${s.tokens_in + s.tokens_out}</td><td>${usd(s.cost_usd)}</td><td>${ms(s.total_ms)}</td></tr>`).join("")
    || `<tr><td colspan="10" class="empty">no solves yet</td></tr>`;
}

$("model-group").addEventListener("change", () => refresh("models"));

async function loadAgents() {
  const agents = await api("/api/v1/views/agents");
  $("agent-rows").innerHTML = agents.map((a) => `
    <tr><td>${esc(a.agent_id)}</td><td>${status(a.status)}</td>
    <td>${list(a.capabilities).map((c) => `<span class="chip">${esc(c)}</span>`).join(" ")}</td>
    <td>${esc(a.repository || "")}${a.branch ? "#" + esc(a.branch) : ""}</td>
    <td>${a.current_task ? `<code>${esc(a.current_task.slice(0, 8))}</code>` : ""}</td>
    <td>${a.tasks_done}</td><td>${a.last_seen_at ? ago(a.last_seen_at) + " ago" : ""}</td></tr>`).join("")
    || `<tr><td colspan="7" class="empty">no agents registered</td></tr>`;
}

// ---- learned workflows: what mining proposed, decided with a click ----------------------------

async function loadLearned() {
  const wanted = $("proposal-status").value;
  const [state, open, shown, uses] = await Promise.all([
    api("/api/v1/learn/status"),
    api("/api/v1/learn/proposals?status=OPEN"),
    wanted === "OPEN" ? null : api("/api/v1/learn/proposals" + (wanted ? "?status=" + wanted : "")),
    api("/api/v1/learn/uses"),
  ]);
  $("learned-count").hidden = open.length === 0;
  $("learned-count").textContent = open.length;
  const counts = Object.entries(state.proposals).map(([k, v]) => `${v} ${esc(k.toLowerCase())}`).join(", ");
  $("learn-status").textContent = `${state.tool_calls} tool calls observed in ${state.sessions} sessions; `
    + `${state.patterns} sequences mined; proposals: ${counts || "none yet"}. A sequence is proposed after `
    + `${state.min_successes} successes at confidence ${state.min_confidence} or more.`;
  const proposals = shown || open;
  $("proposals").innerHTML = proposals.map((p) => `
    <div class="proposal" data-proposal="${esc(p.proposal_id)}" data-workflow="${esc(p.workflow)}">
      <div class="tools">${p.tools.map(esc).join(" → ")}</div>
      <div class="meta">${esc(p.workflow)} · ${status(p.status)} · confidence ${p.confidence.toFixed(2)}
        (${p.successes} of ${p.executions} succeeded) · ${(p.evidence.sessions || []).length} sessions
        ${p.mean_ms !== null && p.mean_ms !== undefined ? " · " + ms(p.mean_ms) + " by hand" : ""}
        · ${esc(p.scope)} · proposed ${ago(p.proposed_at)} ago
        ${p.decided_by ? ` · ${esc(p.status.toLowerCase())} by ${esc(p.decided_by)}${p.reason ? ": " + esc(p.reason) : ""}${p.shared ? " (shared)" : ""}` : ""}</div>
      <details><summary>the workflow file</summary><pre>${esc(p.file)}</pre></details>
      ${p.status === "OPEN" ? `<button class="approve">Approve</button><button class="share">Approve and share</button><button class="reject">Reject</button>` : ""}
    </div>`).join("") || `<p class="empty">${wanted === "OPEN" ? "Nothing to decide: no open proposals." : "No proposals."}</p>`;
  for (const card of document.querySelectorAll(".proposal")) {
    const id = card.dataset.proposal;
    card.querySelector(".approve")?.addEventListener("click", () => decideProposal(id, "approve", { shared: false }));
    card.querySelector(".share")?.addEventListener("click", () => decideProposal(id, "approve", { shared: true }));
    card.querySelector(".reject")?.addEventListener("click", () => {
      const reason = prompt(`Reject ${card.dataset.workflow}: why?`);
      if (reason) decideProposal(id, "reject", { reason });
    });
  }
  $("use-rows").innerHTML = uses.map((u) => `
    <tr data-workflow="${esc(u.workflow)}"><td>${esc(u.workflow)}</td><td>${esc(u.scope)}</td><td>${u.runs}</td>
    <td>${u.success_rate === null ? "–" : Math.round(u.success_rate * 100) + "%"}</td>
    <td>${ms(u.mean_run_ms)}</td><td>${ms(u.manual_mean_ms)}</td></tr>`).join("")
    || `<tr><td colspan="6" class="empty">no learned workflow approved yet</td></tr>`;
}

async function decideProposal(id, how, body) {
  try {
    await api(`/api/v1/learn/proposals/${encodeURIComponent(id)}/${how}`, {
      method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body),
    });
    $("learn-error").hidden = true;
  } catch (e) {
    $("learn-error").hidden = false;
    $("learn-error").textContent = `Could not ${how} the proposal: ${e.message}`;
  }
  await loadLearned().catch(() => {});
}

$("proposal-status").addEventListener("change", () => refresh("learned"));

const LOADERS = { board: loadBoard, runs: loadRuns, workflows: loadWorkflows, inbox: loadInbox, analytics: loadAnalytics, models: loadModels, agents: loadAgents, learned: loadLearned };
// Which view streams each tab listens to. The inbox and learned badges always follow
// theirs; the rest follow the open tab only, so at most four streams are open: a browser
// keeps only six connections to one server (two stay free for requests).
const STREAMS = { board: ["board"], runs: ["runs"], workflows: ["runs", "learned"], inbox: ["runs"], analytics: ["runs", "board"], models: ["models"], agents: ["agents", "board"], learned: ["learned", "runs"] };
const ALWAYS = ["runs", "learned"];

async function refresh(tab) {
  try {
    await LOADERS[tab]();
  } catch (e) {
    if (e instanceof NeedToken) askToken();
    else console.error(e);
  }
}

// ---- live updates: SSE read with fetch (EventSource cannot send the token) ---------------------

const pending = {};
function soon(tab) {
  clearTimeout(pending[tab]);
  pending[tab] = setTimeout(() => { if (tab === current || tab === "inbox" || tab === "learned") refresh(tab); }, 120);
}

// The streams open now, each with the controller that closes it.
const following = {};

// Follow the streams the open tab and the badges need; close the others.
function followFor(tab) {
  const wanted = new Set([...ALWAYS, ...STREAMS[tab]]);
  for (const [view, controller] of Object.entries(following)) {
    if (!wanted.has(view)) { controller.abort(); delete following[view]; }
  }
  for (const view of wanted) {
    if (following[view]) continue;
    const controller = new AbortController();
    following[view] = controller;
    follow(view, controller.signal, () => {
      for (const [t, streams] of Object.entries(STREAMS)) if (streams.includes(view)) soon(t);
    });
  }
}

async function follow(view, signal, onChange) {
  let last = null;
  while (!signal.aborted) {
    try {
      const h = headers({ "accept": "text/event-stream" });
      if (last) h["last-event-id"] = last;
      const response = await fetch(`/api/v1/views/${view}/stream`, { headers: h, signal });
      if (response.status === 401) { askToken(); return; }
      $("live").classList.add("on");
      const reader = response.body.getReader();
      const decoder = new TextDecoder();
      let text = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += decoder.decode(value, { stream: true });
        let end;
        while ((end = text.indexOf("\n\n")) >= 0) {
          const block = text.slice(0, end);
          text = text.slice(end + 2);
          const id = block.split("\n").find((l) => l.startsWith("id:"));
          if (id) { last = id.slice(3).trim(); onChange(); }
        }
      }
    } catch (e) {
      if (signal.aborted) return;
      console.warn("stream", view, e);
    }
    $("live").classList.remove("on");
    await new Promise((r) => setTimeout(r, 1000));
  }
}

// ---- tabs and start-up ------------------------------------------------------------------------

function show(tab) {
  current = tab;
  for (const b of document.querySelectorAll("#tabs button")) b.classList.toggle("active", b.dataset.tab === tab);
  for (const s of document.querySelectorAll(".tab")) s.classList.toggle("active", s.id === tab);
  location.hash = tab;
  if (started) followFor(tab);
  refresh(tab);
}

for (const b of document.querySelectorAll("#tabs button")) b.addEventListener("click", () => show(b.dataset.tab));
$("run-status").addEventListener("change", () => refresh("runs"));

let started = false;
async function start() {
  try {
    await api("/api/v1/views/board?limit=1");
  } catch (e) {
    if (e instanceof NeedToken) { askToken(); return; }
  }
  if (started) return;
  started = true;
  $("sign-out").hidden = !token();
  const wanted = (location.hash || "#board").slice(1);
  show(wanted in LOADERS ? wanted : "board");
  refresh("inbox");
  refresh("learned");
  // Ages ("3m") go stale without events: redraw the current tab now and then.
  setInterval(() => refresh(current), 30000);
}

start();
