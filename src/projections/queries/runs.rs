//! The runs projection: runs, their timelines (step attempts and gates), the approval
//! inbox, the folded state the CLI lists, and which run a gate belongs to.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::{GateId, RunId};
use crate::domain::run::RunStatus;
use crate::page::{Cursor, Page};
use crate::store::EventStore;
use crate::store::rows::Param;

use super::{QueryError, Where, micros, rows};

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
    /// Why a run on its way waits: paused, or queued for a concurrency slot.
    #[serde(default)]
    pub waiting: Option<String>,
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

/// Which runs, and which page of them.
#[derive(Debug, Clone, Default)]
pub struct RunFilter {
    /// Upper-case statuses; empty: all.
    pub statuses: Vec<String>,
    pub workflow: Option<String>,
    /// Started at or after.
    pub since: Option<DateTime<Utc>>,
    /// Started before.
    pub until: Option<DateTime<Utc>>,
    pub after: Option<Cursor>,
    pub limit: usize,
}

impl RunFilter {
    fn clauses(&self) -> Where {
        let mut w = Where::default();
        w.any_of("status", &self.statuses);
        if let Some(workflow) = &self.workflow {
            w.add("workflow = ?", [Param::from(workflow.clone())]);
        }
        if let Some(since) = self.since {
            w.add("started_at >= ?", [Param::from(micros(since))]);
        }
        if let Some(until) = self.until {
            w.add("started_at < ?", [Param::from(micros(until))]);
        }
        if let Some(c) = &self.after {
            w.add(
                "(started_at < ? OR (started_at = ? AND run_id < ?))",
                [
                    Param::from(c.key),
                    Param::from(c.key),
                    Param::from(c.id.clone()),
                ],
            );
        }
        w
    }
}

const RUN_COLUMNS: &str = "run_id, workflow, workflow_version, status, current_step, parent_run_id, started_at, \
    finished_at, duration_ms, cost_usd, tokens, error, error_class, updated_at, waiting";

/// Runs, newest first.
pub async fn runs(store: &EventStore, f: &RunFilter) -> Result<Page<RunRow>, QueryError> {
    let w = f.clauses();
    let sql = format!(
        "SELECT {RUN_COLUMNS} FROM runs{} ORDER BY started_at DESC, run_id DESC LIMIT {}",
        w.sql(),
        f.limit + 1
    );
    let found: Vec<RunRow> = rows(store, "runs", &sql, &w.params).await?;
    Ok(Page::cut(found, f.limit, |r| {
        Cursor::new(r.started_at.map(micros).unwrap_or(0), r.run_id.clone())
    }))
}

/// Up to `limit` runs that finished (succeeded, failed or were cancelled) before
/// `before`, by id after `after`: what the archive pages through. Only ids, in the
/// order of the table's key, so that a pass over every finished run reads each row
/// once however many there are.
pub async fn finished_run_ids(
    store: &EventStore,
    before: DateTime<Utc>,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<String>, QueryError> {
    let mut w = Where::default();
    let finished: Vec<String> = [
        RunStatus::Succeeded,
        RunStatus::Failed,
        RunStatus::Cancelled,
    ]
    .iter()
    .map(|s| s.as_str().to_string())
    .collect();
    w.any_of("status", &finished);
    w.add("updated_at < ?", [Param::from(micros(before))]);
    if let Some(after) = after {
        w.add("run_id > ?", [Param::from(after.to_string())]);
    }
    let sql = format!(
        "SELECT run_id FROM runs{} ORDER BY run_id LIMIT {}",
        w.sql(),
        limit.clamp(1, 100_000)
    );
    Ok(store
        .query_rows(&sql, &w.params)
        .await?
        .into_iter()
        .filter_map(|row| {
            row.get("run_id")
                .and_then(Value::as_str)
                .map(str::to_string)
        })
        .collect())
}

/// Each run's folded state as the projection keeps it (JSON of the domain's `Run`),
/// newest first: what `awl list` shows.
pub async fn run_states(
    store: &EventStore,
    f: &RunFilter,
) -> Result<Vec<(String, String)>, QueryError> {
    let w = f.clauses();
    let sql = format!(
        "SELECT run_id, state FROM runs{} ORDER BY started_at DESC, run_id DESC LIMIT {}",
        w.sql(),
        f.limit.clamp(1, 100_000)
    );
    Ok(store
        .query_rows(&sql, &w.params)
        .await?
        .into_iter()
        .map(|row| {
            let text = |k: &str| {
                row.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            (text("run_id"), text("state"))
        })
        .collect())
}

/// One run's timeline: every step attempt and gate. `None`: the view has no such run.
pub async fn timeline(store: &EventStore, run_id: &str) -> Result<Option<Timeline>, QueryError> {
    let id = Param::from(run_id.to_string());
    let found: Vec<RunRow> = rows(
        store,
        "runs",
        &format!("SELECT {RUN_COLUMNS} FROM runs WHERE run_id = ?"),
        std::slice::from_ref(&id),
    )
    .await?;
    let Some(run) = found.into_iter().next() else {
        return Ok(None);
    };
    let steps = rows(
        store,
        "run_steps",
        "SELECT step_id, attempt, scheduled_at, started_at, ended_at, duration_ms, outcome, error_class, error, \
         recovery, backoff_ms, cost_usd, output_summary FROM run_steps WHERE run_id = ? \
         ORDER BY scheduled_at, started_at, ended_at IS NULL, ended_at, step_id, attempt",
        std::slice::from_ref(&id),
    )
    .await?;
    let gates = rows(
        store,
        "run_gates",
        "SELECT * FROM run_gates WHERE run_id = ? ORDER BY opened_at",
        &[id],
    )
    .await?;
    Ok(Some(Timeline { run, steps, gates }))
}

#[derive(Debug, Clone, Default)]
pub struct InboxFilter {
    pub workflow: Option<String>,
    pub limit: usize,
}

/// Open gates, oldest first.
pub async fn inbox(store: &EventStore, f: &InboxFilter) -> Result<Vec<GateRow>, QueryError> {
    let mut w = Where::default();
    w.add("decision IS NULL", []);
    // A run that ended (cancelled at its gate, failed elsewhere) asks nobody any more.
    w.add(
        "run_id NOT IN (SELECT run_id FROM runs WHERE status IN ('SUCCEEDED', 'FAILED', 'CANCELLED'))",
        [],
    );
    if let Some(workflow) = &f.workflow {
        w.add("workflow = ?", [Param::from(workflow.clone())]);
    }
    let sql = format!(
        "SELECT * FROM run_gates{} ORDER BY opened_at LIMIT {}",
        w.sql(),
        f.limit
    );
    rows(store, "run_gates", &sql, &w.params).await
}

/// The run a gate belongs to, if the runs projection has seen the gate.
pub async fn gate_run(store: &EventStore, gate_id: GateId) -> Result<Option<RunId>, QueryError> {
    let found = store
        .query_rows(
            "SELECT run_id FROM run_gates WHERE gate_id = ?",
            &[Param::from(gate_id.to_string())],
        )
        .await?;
    Ok(found
        .first()
        .and_then(|row| row.get("run_id"))
        .and_then(Value::as_str)
        .and_then(|id| id.parse().ok()))
}
