//! Query endpoints over the projections: the board, runs, a run's timeline, the
//! approval inbox, agents, analytics of history and the audit trail. Each reads the
//! projection's views (never the log), with filters and keyset pagination.
//!
//! Projections keep times as microseconds; here every `*_at` column becomes an
//! RFC 3339 time, like the rest of the API.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::rows::Param;

use super::AppState;
use super::error::ApiError;
use super::extract::Params;

type Api<T> = Result<Json<T>, ApiError>;

// ---- shapes -----------------------------------------------------------------------

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct BoardRow {
    pub task_id: String,
    pub status: String,
    pub prompt: String,
    /// JSON array of capability names.
    pub capabilities: String,
    pub repository: Option<String>,
    pub branch: Option<String>,
    pub agent_hint: Option<String>,
    pub priority: i64,
    pub review_required: i64,
    pub assignee: Option<String>,
    /// The open question of a BLOCKED task.
    pub question: Option<String>,
    pub run_id: Option<String>,
    pub step_id: Option<String>,
    pub attempts: i64,
    pub review_rounds: i64,
    pub ending: Option<String>,
    pub queued_at: Option<DateTime<Utc>>,
    /// When it entered its current column.
    pub status_since: Option<DateTime<Utc>>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunRow {
    pub run_id: String,
    pub workflow: String,
    pub workflow_version: String,
    pub status: String,
    pub current_step: Option<String>,
    pub parent_run_id: Option<String>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<i64>,
    pub cost_usd: f64,
    pub tokens: i64,
    pub error: Option<String>,
    pub error_class: Option<String>,
    pub updated_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepRow {
    pub step_id: String,
    pub attempt: i64,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub started_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub duration_ms: Option<i64>,
    /// SUCCEEDED, FAILED, SKIPPED; absent while running.
    pub outcome: Option<String>,
    pub error_class: Option<String>,
    pub error: Option<String>,
    pub recovery: Option<String>,
    pub backoff_ms: Option<i64>,
    pub cost_usd: Option<f64>,
    pub output_summary: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct GateRow {
    pub gate_id: String,
    pub run_id: String,
    pub step_id: String,
    pub workflow: String,
    pub message: String,
    /// JSON array of who may decide (empty: anyone who may decide gates).
    pub approvers: String,
    pub opened_at: Option<DateTime<Utc>>,
    pub expires_at: Option<DateTime<Utc>>,
    /// APPROVED, REJECTED, EXPIRED; absent while open.
    pub decision: Option<String>,
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
    pub comment: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Timeline {
    pub run: RunRow,
    pub steps: Vec<StepRow>,
    pub gates: Vec<GateRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgentRow {
    pub agent_id: String,
    pub status: String,
    pub capabilities: String,
    pub repository: Option<String>,
    pub branch: Option<String>,
    pub registered_at: Option<DateTime<Utc>>,
    pub current_task: Option<String>,
    pub tasks_done: i64,
    pub tasks_failed: i64,
    pub last_seen_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AuditRow {
    pub position: i64,
    pub at: Option<DateTime<Utc>>,
    pub actor: Option<String>,
    pub stream_type: String,
    pub stream_id: String,
    pub event_type: String,
}

/// A page of rows; pass `next` as `after` for the following page.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Page<T> {
    pub rows: Vec<T>,
    pub next: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowStats {
    pub workflow: String,
    pub runs: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub active: i64,
    /// Succeeded over finished.
    pub success_rate: Option<f64>,
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
    pub max_ms: Option<i64>,
    pub cost_usd: f64,
    pub by_day: Vec<DayStats>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DayStats {
    /// YYYY-MM-DD (UTC).
    pub day: String,
    pub runs: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub p50_ms: Option<i64>,
    pub cost_usd: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepStats {
    pub workflow: String,
    pub step_id: String,
    pub attempts: i64,
    pub failures: i64,
    /// Attempts after the first.
    pub retries: i64,
    pub mean_ms: Option<f64>,
    pub failures_by_class: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgentStats {
    pub agent_id: String,
    pub tasks_done: i64,
    pub tasks_failed: i64,
    /// Times its submissions were sent back.
    pub review_round_trips: i64,
    /// Mean time from queued to finished of the tasks it completed.
    pub mean_task_ms: Option<f64>,
    /// Milliseconds spent in each column (ASSIGNED, PENDING_ACK, IN_PROGRESS, BLOCKED,
    /// IN_REVIEW, APPROVED) while holding a task.
    pub time_in_column_ms: BTreeMap<String, i64>,
}

// ---- parameters ---------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ViewParams {
    status: Option<String>,
    agent: Option<String>,
    workflow: Option<String>,
    actor: Option<String>,
    since: Option<String>,
    until: Option<String>,
    after: Option<String>,
    limit: Option<i64>,
}

impl ViewParams {
    fn limit(&self) -> i64 {
        self.limit.unwrap_or(100).clamp(1, 1_000)
    }

    fn time(&self, value: &Option<String>, name: &str) -> Result<Option<i64>, ApiError> {
        value
            .as_deref()
            .map(|v| {
                DateTime::parse_from_rfc3339(v)
                    .map(|t| t.with_timezone(&Utc).timestamp_micros())
                    .map_err(|e| {
                        ApiError::invalid(format!("`{name}` must be an RFC 3339 time: {e}"))
                    })
            })
            .transpose()
    }

    fn statuses(&self) -> Vec<String> {
        self.status
            .as_deref()
            .map(|s| {
                s.split(',')
                    .map(|x| x.trim().to_uppercase())
                    .filter(|x| !x.is_empty())
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// `after` cursors: `<micros>.<id>` (descending lists) or `<number>`.
fn cursor(after: &Option<String>) -> Result<Option<(i64, String)>, ApiError> {
    let Some(after) = after else { return Ok(None) };
    let (n, id) = after.split_once('.').unwrap_or((after.as_str(), ""));
    let n = n.parse().map_err(|_| {
        ApiError::invalid(format!(
            "`after` {after:?} is not a cursor this server gave"
        ))
    })?;
    Ok(Some((n, id.to_string())))
}

// ---- reading rows -----------------------------------------------------------------------

/// Rows as `T`, with `*_at` microseconds turned into RFC 3339 times.
async fn rows<T: DeserializeOwned>(
    app: &AppState,
    sql: &str,
    params: &[Param],
) -> Result<Vec<T>, ApiError> {
    let rows = app.board.store().query_rows(sql, params).await?;
    rows.into_iter()
        .map(|row| {
            let row = times(row);
            serde_json::from_value(Value::Object(row)).map_err(|e| {
                ApiError::new(
                    axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                    "corrupt_view",
                    e.to_string(),
                )
            })
        })
        .collect()
}

fn times(row: Map<String, Value>) -> Map<String, Value> {
    row.into_iter()
        .map(|(k, v)| {
            let v = match (&v, k.ends_with("_at") || k == "at" || k == "status_since") {
                (Value::Number(n), true) => n
                    .as_i64()
                    .and_then(DateTime::from_timestamp_micros)
                    .map(|t| Value::String(t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)))
                    .unwrap_or(v),
                _ => v,
            };
            (k, v)
        })
        .collect()
}

/// `WHERE` clauses and their parameters, built up filter by filter.
#[derive(Default)]
struct Where {
    clauses: Vec<String>,
    params: Vec<Param>,
}

impl Where {
    fn add(&mut self, clause: &str, params: impl IntoIterator<Item = Param>) {
        self.clauses.push(clause.to_string());
        self.params.extend(params);
    }

    fn any_of(&mut self, column: &str, values: &[String]) {
        if values.is_empty() {
            return;
        }
        let marks = vec!["?"; values.len()].join(", ");
        self.add(
            &format!("{column} IN ({marks})"),
            values.iter().map(|v| Param::from(v.clone())),
        );
    }

    fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!(" WHERE {}", self.clauses.join(" AND "))
        }
    }
}

const BOARD_COLUMNS: &str = "task_id, status, prompt, capabilities, repository, branch, agent_hint, priority, \
    review_required, assignee, question, run_id, step_id, attempts, review_rounds, ending, queued_at, status_since, updated_at";
const RUN_COLUMNS: &str = "run_id, workflow, workflow_version, status, current_step, parent_run_id, started_at, \
    finished_at, duration_ms, cost_usd, tokens, error, error_class, updated_at";

// ---- handlers ---------------------------------------------------------------------------

/// The board: tasks oldest first.
pub async fn board(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Page<BoardRow>> {
    let mut w = Where::default();
    w.any_of("status", &p.statuses());
    if let Some(agent) = &p.agent {
        w.add("assignee = ?", [Param::from(agent.clone())]);
    }
    if let Some(since) = p.time(&p.since, "since")? {
        w.add("queued_at >= ?", [Param::from(since)]);
    }
    if let Some(until) = p.time(&p.until, "until")? {
        w.add("queued_at < ?", [Param::from(until)]);
    }
    if let Some((at, id)) = cursor(&p.after)? {
        w.add(
            "(queued_at > ? OR (queued_at = ? AND task_id > ?))",
            [Param::from(at), Param::from(at), Param::from(id)],
        );
    }
    let limit = p.limit();
    let sql = format!(
        "SELECT {BOARD_COLUMNS} FROM board_tasks{} ORDER BY queued_at, task_id LIMIT {}",
        w.sql(),
        limit + 1
    );
    let mut found: Vec<BoardRow> = rows(&app, &sql, &w.params).await?;
    let next = page_end(&mut found, limit, |r| {
        format!(
            "{}.{}",
            r.queued_at.map(|t| t.timestamp_micros()).unwrap_or(0),
            r.task_id
        )
    });
    Ok(Json(Page { rows: found, next }))
}

fn page_end<T>(rows: &mut Vec<T>, limit: i64, key: impl Fn(&T) -> String) -> Option<String> {
    if rows.len() as i64 > limit {
        rows.truncate(limit as usize);
        rows.last().map(key)
    } else {
        None
    }
}

/// Runs, newest first.
pub async fn runs(State(app): State<AppState>, Params(p): Params<ViewParams>) -> Api<Page<RunRow>> {
    let mut w = Where::default();
    w.any_of("status", &p.statuses());
    if let Some(workflow) = &p.workflow {
        w.add("workflow = ?", [Param::from(workflow.clone())]);
    }
    if let Some(since) = p.time(&p.since, "since")? {
        w.add("started_at >= ?", [Param::from(since)]);
    }
    if let Some(until) = p.time(&p.until, "until")? {
        w.add("started_at < ?", [Param::from(until)]);
    }
    if let Some((at, id)) = cursor(&p.after)? {
        w.add(
            "(started_at < ? OR (started_at = ? AND run_id < ?))",
            [Param::from(at), Param::from(at), Param::from(id)],
        );
    }
    let limit = p.limit();
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs{} ORDER BY started_at DESC, run_id DESC LIMIT {}",
        w.sql(),
        limit + 1
    );
    let mut found: Vec<RunRow> = rows(&app, &sql, &w.params).await?;
    let next = page_end(&mut found, limit, |r| {
        format!(
            "{}.{}",
            r.started_at.map(|t| t.timestamp_micros()).unwrap_or(0),
            r.run_id
        )
    });
    Ok(Json(Page { rows: found, next }))
}

/// One run's timeline: every step attempt and gate.
pub async fn timeline(State(app): State<AppState>, Path(run_id): Path<String>) -> Api<Timeline> {
    let id = Param::from(run_id.clone());
    let run: Vec<RunRow> = rows(
        &app,
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?"),
        std::slice::from_ref(&id),
    )
    .await?;
    let run = run.into_iter().next().ok_or_else(|| {
        ApiError::not_found("run_not_found", format!("no run {run_id} in the runs view"))
    })?;
    let steps = rows(
        &app,
        "SELECT step_id, attempt, scheduled_at, started_at, ended_at, duration_ms, outcome, error_class, error, \
         recovery, backoff_ms, cost_usd, output_summary FROM run_steps WHERE run_id = ? \
         ORDER BY scheduled_at, started_at, ended_at IS NULL, ended_at, step_id, attempt",
        std::slice::from_ref(&id),
    )
    .await?;
    let gates = rows(
        &app,
        "SELECT * FROM run_gates WHERE run_id = ? ORDER BY opened_at",
        &[id],
    )
    .await?;
    Ok(Json(Timeline { run, steps, gates }))
}

/// Open gates, oldest first.
pub async fn inbox(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Vec<GateRow>> {
    let mut w = Where::default();
    w.add("decision IS NULL", []);
    if let Some(workflow) = &p.workflow {
        w.add("workflow = ?", [Param::from(workflow.clone())]);
    }
    let sql = format!(
        "SELECT * FROM run_gates{} ORDER BY opened_at LIMIT {}",
        w.sql(),
        p.limit()
    );
    Ok(Json(rows(&app, &sql, &w.params).await?))
}

/// Agents with their current task, tasks done and last call.
pub async fn agents(State(app): State<AppState>) -> Api<Vec<AgentRow>> {
    let sql = "SELECT a.agent_id, a.status, a.capabilities, a.repository, a.branch, a.registered_at, \
        (SELECT t.task_id FROM board_tasks t WHERE t.assignee = a.agent_id \
            AND t.status IN ('ASSIGNED', 'PENDING_ACK', 'IN_PROGRESS', 'BLOCKED') ORDER BY t.updated_at DESC LIMIT 1) AS current_task, \
        (SELECT count(*) FROM board_tasks t WHERE t.assignee = a.agent_id AND t.status = 'COMPLETED') AS tasks_done, \
        (SELECT count(*) FROM board_tasks t WHERE t.assignee = a.agent_id AND t.status = 'FAILED') AS tasks_failed, \
        NULL AS last_seen_at \
        FROM agents a ORDER BY a.agent_id";
    let mut found: Vec<AgentRow> = rows(&app, sql, &[]).await?;
    let ids: Vec<String> = found.iter().map(|a| a.agent_id.clone()).collect();
    let seen = app.board.store().presence(&ids).await?;
    for a in &mut found {
        a.last_seen_at = seen.get(&a.agent_id).copied();
    }
    Ok(Json(found))
}

/// Who did what and when, newest first.
pub async fn audit(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Page<AuditRow>> {
    let mut w = Where::default();
    if let Some(actor) = &p.actor {
        w.add("actor = ?", [Param::from(actor.clone())]);
    }
    if let Some(since) = p.time(&p.since, "since")? {
        w.add("at >= ?", [Param::from(since)]);
    }
    if let Some(until) = p.time(&p.until, "until")? {
        w.add("at < ?", [Param::from(until)]);
    }
    if let Some((position, _)) = cursor(&p.after)? {
        w.add("position < ?", [Param::from(position)]);
    }
    let limit = p.limit();
    let sql = format!(
        "SELECT * FROM audit{} ORDER BY position DESC LIMIT {}",
        w.sql(),
        limit + 1
    );
    let mut found: Vec<AuditRow> = rows(&app, &sql, &w.params).await?;
    let next = page_end(&mut found, limit, |r| r.position.to_string());
    Ok(Json(Page { rows: found, next }))
}

/// Per workflow: runs, success rate, p50 / p95 / max duration, cost, and by day, from
/// the runs projection's counters (durations from its histogram: within a fifth).
pub async fn workflow_analytics(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Vec<WorkflowStats>> {
    let mut w = Where::default();
    if let Some(workflow) = &p.workflow {
        w.add("workflow = ?", [Param::from(workflow.clone())]);
    }
    let day = |t: Option<i64>| {
        t.and_then(DateTime::from_timestamp_micros)
            .map(|t| t.format("%Y-%m-%d").to_string())
    };
    if let Some(since) = day(p.time(&p.since, "since")?) {
        w.add("day >= ?", [Param::from(since)]);
    }
    if let Some(until) = day(p.time(&p.until, "until")?) {
        w.add("day <= ?", [Param::from(until)]);
    }
    let store = app.board.store();
    let days = store
        .query_rows(
            &format!(
                "SELECT * FROM workflow_days{} ORDER BY workflow, day",
                w.sql()
            ),
            &w.params,
        )
        .await?;
    let buckets = store
        .query_rows(
            &format!("SELECT * FROM workflow_durations{}", w.sql()),
            &w.params,
        )
        .await?;
    let int = |r: &Map<String, Value>, k: &str| r.get(k).and_then(Value::as_i64).unwrap_or(0);
    let mut out: BTreeMap<String, WorkflowStats> = BTreeMap::new();
    let mut hist: BTreeMap<String, BTreeMap<String, BTreeMap<i64, i64>>> = BTreeMap::new();
    for b in &buckets {
        let workflow = b
            .get("workflow")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let day = b
            .get("day")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        *hist
            .entry(workflow)
            .or_default()
            .entry(day)
            .or_default()
            .entry(int(b, "bucket"))
            .or_default() += int(b, "n");
    }
    for d in &days {
        let workflow = d
            .get("workflow")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let day = d
            .get("day")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let stats = out
            .entry(workflow.clone())
            .or_insert_with(|| WorkflowStats {
                workflow: workflow.clone(),
                runs: 0,
                succeeded: 0,
                failed: 0,
                cancelled: 0,
                active: 0,
                success_rate: None,
                p50_ms: None,
                p95_ms: None,
                max_ms: None,
                cost_usd: 0.0,
                by_day: Vec::new(),
            });
        let cost = d.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0);
        stats.runs += int(d, "runs");
        stats.succeeded += int(d, "succeeded");
        stats.failed += int(d, "failed");
        stats.cancelled += int(d, "cancelled");
        stats.cost_usd += cost;
        let max = int(d, "max_ms");
        if int(d, "succeeded") + int(d, "failed") + int(d, "cancelled") > 0 {
            stats.max_ms = Some(stats.max_ms.unwrap_or(0).max(max));
        }
        let day_hist = hist.get(&workflow).and_then(|h| h.get(&day));
        stats.by_day.push(DayStats {
            day,
            runs: int(d, "runs"),
            succeeded: int(d, "succeeded"),
            failed: int(d, "failed"),
            p50_ms: day_hist.and_then(|h| percentile_of(h, 0.5)),
            cost_usd: cost,
        });
    }
    for (workflow, stats) in &mut out {
        let finished = stats.succeeded + stats.failed + stats.cancelled;
        stats.active = stats.runs - finished;
        stats.success_rate = (finished > 0).then(|| stats.succeeded as f64 / finished as f64);
        let mut all: BTreeMap<i64, i64> = BTreeMap::new();
        for day in hist.get(workflow).map(|h| h.values()).into_iter().flatten() {
            for (bucket, n) in day {
                *all.entry(*bucket).or_default() += n;
            }
        }
        stats.p50_ms = percentile_of(&all, 0.5);
        stats.p95_ms = percentile_of(&all, 0.95).map(|p| stats.max_ms.map_or(p, |m| p.min(m)));
        stats.p50_ms = stats.p50_ms.map(|p| stats.max_ms.map_or(p, |m| p.min(m)));
    }
    Ok(Json(out.into_values().collect()))
}

/// The `q` quantile of a duration histogram (bucket -> count), as the bucket's upper
/// bound in milliseconds.
fn percentile_of(histogram: &BTreeMap<i64, i64>, q: f64) -> Option<i64> {
    let total: i64 = histogram.values().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as i64;
    let mut seen = 0;
    for (bucket, n) in histogram {
        seen += n;
        if seen >= rank {
            return Some(crate::projections::bucket_upper_ms(*bucket));
        }
    }
    None
}

/// Per step: finished attempts, failures by class, retries, mean duration.
pub async fn step_analytics(
    State(app): State<AppState>,
    Params(p): Params<ViewParams>,
) -> Api<Vec<StepStats>> {
    let mut w = Where::default();
    if let Some(workflow) = &p.workflow {
        w.add("workflow = ?", [Param::from(workflow.clone())]);
    }
    let store = app.board.store();
    let stats = store
        .query_rows(
            &format!(
                "SELECT * FROM step_stats{} ORDER BY workflow, step_id",
                w.sql()
            ),
            &w.params,
        )
        .await?;
    let classes = store
        .query_rows(
            &format!("SELECT * FROM step_failures{}", w.sql()),
            &w.params,
        )
        .await?;
    let text = |r: &Map<String, Value>, k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let int = |r: &Map<String, Value>, k: &str| r.get(k).and_then(Value::as_i64).unwrap_or(0);
    Ok(Json(
        stats
            .iter()
            .map(|r| {
                let (workflow, step_id) = (text(r, "workflow"), text(r, "step_id"));
                let timed = int(r, "timed");
                StepStats {
                    attempts: int(r, "attempts"),
                    failures: int(r, "failures"),
                    retries: int(r, "retries"),
                    mean_ms: (timed > 0).then(|| int(r, "total_ms") as f64 / timed as f64),
                    failures_by_class: classes
                        .iter()
                        .filter(|c| {
                            text(c, "workflow") == workflow && text(c, "step_id") == step_id
                        })
                        .map(|c| (text(c, "error_class"), int(c, "n")))
                        .collect(),
                    workflow,
                    step_id,
                }
            })
            .collect(),
    ))
}

/// Per agent: tasks done and failed, review round trips, mean task time, and the time
/// spent in each column while holding a task.
pub async fn agent_analytics(State(app): State<AppState>) -> Api<Vec<AgentStats>> {
    let store = app.board.store();
    let stats = store
        .query_rows("SELECT * FROM agent_stats ORDER BY agent_id", &[])
        .await?;
    let columns = store.query_rows("SELECT * FROM agent_columns", &[]).await?;
    let text = |r: &Map<String, Value>, k: &str| {
        r.get(k)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let int = |r: &Map<String, Value>, k: &str| r.get(k).and_then(Value::as_i64).unwrap_or(0);
    Ok(Json(
        stats
            .iter()
            .map(|r| {
                let agent_id = text(r, "agent_id");
                let timed = int(r, "timed");
                AgentStats {
                    tasks_done: int(r, "done"),
                    tasks_failed: int(r, "failed"),
                    review_round_trips: int(r, "round_trips"),
                    mean_task_ms: (timed > 0)
                        .then(|| int(r, "total_task_ms") as f64 / timed as f64),
                    time_in_column_ms: columns
                        .iter()
                        .filter(|c| text(c, "agent_id") == agent_id)
                        .map(|c| (text(c, "status"), int(c, "ms")))
                        .collect(),
                    agent_id,
                }
            })
            .collect(),
    ))
}

/// Each projection's checkpoint and lag.
pub async fn projections(
    State(app): State<AppState>,
) -> Api<Vec<crate::projections::ProjectionStatus>> {
    let status = crate::projections::Projections::new(app.board.store().clone())
        .status()
        .await
        .map_err(|e| {
            ApiError::new(
                axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                "projection_error",
                e.to_string(),
            )
        })?;
    Ok(Json(status))
}
