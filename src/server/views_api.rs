//! Query endpoints over the projections: the board, runs, a run's timeline, the
//! approval inbox, agents, analytics of history and the audit trail. Each reads the
//! projection's views (never the log), with filters and keyset pagination.
//!
//! Projections keep times as microseconds; here every `*_at` column becomes an
//! RFC 3339 time, like the rest of the API.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::store::rows::Param;

use super::AppState;
use super::error::ApiError;

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
    Query(p): Query<ViewParams>,
) -> Api<Page<BoardRow>> {
    let mut w = Where::default();
    w.any_of("status", &p.statuses());
    if let Some(agent) = &p.agent {
        w.add("assignee = ?", [Param::from(agent.clone())]);
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
pub async fn runs(State(app): State<AppState>, Query(p): Query<ViewParams>) -> Api<Page<RunRow>> {
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
pub async fn inbox(State(app): State<AppState>, Query(p): Query<ViewParams>) -> Api<Vec<GateRow>> {
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
    Query(p): Query<ViewParams>,
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

#[derive(Debug, Deserialize)]
struct Finished {
    workflow: String,
    status: String,
    started_at: Option<i64>,
    duration_ms: Option<i64>,
    cost_usd: f64,
}

/// Per workflow: runs, success rate, p50 / p95 / max duration, cost, and by day.
pub async fn workflow_analytics(
    State(app): State<AppState>,
    Query(p): Query<ViewParams>,
) -> Api<Vec<WorkflowStats>> {
    let mut w = Where::default();
    if let Some(workflow) = &p.workflow {
        w.add("workflow = ?", [Param::from(workflow.clone())]);
    }
    if let Some(since) = p.time(&p.since, "since")? {
        w.add("started_at >= ?", [Param::from(since)]);
    }
    if let Some(until) = p.time(&p.until, "until")? {
        w.add("started_at < ?", [Param::from(until)]);
    }
    let sql = format!(
        "SELECT workflow, status, started_at, duration_ms, cost_usd FROM runs{}",
        w.sql()
    );
    let raw = app.board.store().query_rows(&sql, &w.params).await?;
    let runs: Vec<Finished> = raw
        .into_iter()
        .filter_map(|r| serde_json::from_value(Value::Object(r)).ok())
        .collect();
    let mut by_workflow: BTreeMap<String, Vec<&Finished>> = BTreeMap::new();
    for r in &runs {
        by_workflow.entry(r.workflow.clone()).or_default().push(r);
    }
    let out = by_workflow
        .into_iter()
        .map(|(workflow, runs)| {
            let mut days: BTreeMap<String, Vec<&Finished>> = BTreeMap::new();
            for r in &runs {
                let day = r
                    .started_at
                    .and_then(DateTime::from_timestamp_micros)
                    .map(|t| t.format("%Y-%m-%d").to_string())
                    .unwrap_or_default();
                days.entry(day).or_default().push(r);
            }
            let (all, _) = summarize(&runs);
            WorkflowStats {
                workflow,
                by_day: days
                    .into_iter()
                    .map(|(day, runs)| {
                        let (s, _) = summarize(&runs);
                        DayStats {
                            day,
                            runs: s.runs,
                            succeeded: s.succeeded,
                            failed: s.failed,
                            p50_ms: s.p50,
                            cost_usd: s.cost,
                        }
                    })
                    .collect(),
                runs: all.runs,
                succeeded: all.succeeded,
                failed: all.failed,
                cancelled: all.cancelled,
                active: all.runs - all.succeeded - all.failed - all.cancelled,
                success_rate: all.rate,
                p50_ms: all.p50,
                p95_ms: all.p95,
                max_ms: all.max,
                cost_usd: all.cost,
            }
        })
        .collect();
    Ok(Json(out))
}

struct Summary {
    runs: i64,
    succeeded: i64,
    failed: i64,
    cancelled: i64,
    rate: Option<f64>,
    p50: Option<i64>,
    p95: Option<i64>,
    max: Option<i64>,
    cost: f64,
}

fn summarize(runs: &[&Finished]) -> (Summary, ()) {
    let count = |s: &str| runs.iter().filter(|r| r.status == s).count() as i64;
    let (succeeded, failed, cancelled) = (count("SUCCEEDED"), count("FAILED"), count("CANCELLED"));
    let mut durations: Vec<i64> = runs.iter().filter_map(|r| r.duration_ms).collect();
    durations.sort_unstable();
    let pick = |q: f64| -> Option<i64> {
        (!durations.is_empty())
            .then(|| durations[((durations.len() - 1) as f64 * q).round() as usize])
    };
    let finished = succeeded + failed + cancelled;
    (
        Summary {
            runs: runs.len() as i64,
            succeeded,
            failed,
            cancelled,
            rate: (finished > 0).then(|| succeeded as f64 / finished as f64),
            p50: pick(0.5),
            p95: pick(0.95),
            max: durations.last().copied(),
            cost: runs.iter().map(|r| r.cost_usd).sum(),
        },
        (),
    )
}

/// Per step: attempts, failures by class, retries, mean duration.
pub async fn step_analytics(
    State(app): State<AppState>,
    Query(p): Query<ViewParams>,
) -> Api<Vec<StepStats>> {
    let mut w = Where::default();
    if let Some(workflow) = &p.workflow {
        w.add("workflow = ?", [Param::from(workflow.clone())]);
    }
    let sql = format!(
        "SELECT workflow, step_id, count(*) AS attempts, \
         sum(CASE WHEN outcome = 'FAILED' THEN 1 ELSE 0 END) AS failures, \
         sum(CASE WHEN attempt > 1 THEN 1 ELSE 0 END) AS retries, \
         CAST(avg(duration_ms) AS DOUBLE PRECISION) AS mean_ms \
         FROM run_steps{} GROUP BY workflow, step_id ORDER BY workflow, step_id",
        w.sql()
    );
    let raw = app.board.store().query_rows(&sql, &w.params).await?;
    let class_sql = format!(
        "SELECT workflow, step_id, error_class, count(*) AS n FROM run_steps{} {} error_class IS NOT NULL \
         GROUP BY workflow, step_id, error_class",
        w.sql(),
        if w.clauses.is_empty() { "WHERE" } else { "AND" }
    );
    let classes = app.board.store().query_rows(&class_sql, &w.params).await?;
    let int = |v: Option<&Value>| {
        v.and_then(|v| {
            v.as_i64()
                .or_else(|| v.as_f64().map(|f| f as i64))
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
        .unwrap_or(0)
    };
    let out = raw
        .iter()
        .map(|r| {
            let workflow = r
                .get("workflow")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let step_id = r
                .get("step_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            let failures_by_class = classes
                .iter()
                .filter(|c| {
                    c.get("workflow").and_then(Value::as_str) == Some(&workflow)
                        && c.get("step_id").and_then(Value::as_str) == Some(&step_id)
                })
                .map(|c| {
                    (
                        c.get("error_class")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_string(),
                        int(c.get("n")),
                    )
                })
                .collect();
            StepStats {
                attempts: int(r.get("attempts")),
                failures: int(r.get("failures")),
                retries: int(r.get("retries")),
                mean_ms: r.get("mean_ms").and_then(|v| {
                    v.as_f64()
                        .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
                }),
                workflow,
                step_id,
                failures_by_class,
            }
        })
        .collect();
    Ok(Json(out))
}

/// Per agent: tasks done and failed, review round trips, mean task time.
pub async fn agent_analytics(State(app): State<AppState>) -> Api<Vec<AgentStats>> {
    let sql = "SELECT assignee AS agent_id, \
        sum(CASE WHEN status = 'COMPLETED' THEN 1 ELSE 0 END) AS tasks_done, \
        sum(CASE WHEN status = 'FAILED' THEN 1 ELSE 0 END) AS tasks_failed, \
        CAST(sum(CASE WHEN review_rounds > 1 THEN review_rounds - 1 ELSE 0 END) AS BIGINT) AS review_round_trips, \
        CAST(avg(CASE WHEN status = 'COMPLETED' THEN (updated_at - queued_at) / 1000.0 END) AS DOUBLE PRECISION) AS mean_task_ms \
        FROM board_tasks WHERE assignee IS NOT NULL GROUP BY assignee ORDER BY assignee";
    let raw = app.board.store().query_rows(sql, &[]).await?;
    let num = |v: Option<&Value>| {
        v.and_then(|v| {
            v.as_f64()
                .or_else(|| v.as_str().and_then(|s| s.parse().ok()))
        })
    };
    Ok(Json(
        raw.iter()
            .map(|r| AgentStats {
                agent_id: r
                    .get("agent_id")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                tasks_done: num(r.get("tasks_done")).unwrap_or(0.0) as i64,
                tasks_failed: num(r.get("tasks_failed")).unwrap_or(0.0) as i64,
                review_round_trips: num(r.get("review_round_trips")).unwrap_or(0.0) as i64,
                mean_task_ms: num(r.get("mean_task_ms")),
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
