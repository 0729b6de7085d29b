//! Every query of the read models, in one place next to the tables they read: the
//! views API, the CLI, the live streams and the gate lookup all call these, so the SQL
//! of a projection lives beside its DDL and nowhere else.
//!
//! Queries take typed filters (times as `DateTime`, pages as the shared
//! [`Cursor`](crate::page::Cursor)) and return typed rows; parsing what a client sent
//! is the interface's job. Projections keep times as microseconds; every `*_at`
//! column comes back as an RFC 3339 time, like the rest of the API.

mod agents;
mod analytics;
mod audit;
mod board;
mod chat;
mod models;
mod runs;

use chrono::{DateTime, Utc};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{Classified, ErrorKind};
use crate::store::rows::Param;
use crate::store::{EventStore, StoreError};

pub use agents::{AgentRow, agents};
pub use analytics::{
    AgentStats, AnalyticsFilter, DayStats, StepStats, WorkflowStats, agent_stats, step_stats,
    workflow_stats,
};
pub use audit::{AuditFilter, AuditRow, audit};
pub use board::{
    BoardFilter, BoardRow, BoardSnapshot, EndedFilter, StoredState, board, board_snapshot,
    column_counts, ended_tasks,
};
pub use chat::{OpenChatMessage, chat_notice, open_questions};
pub use models::{
    ModelGroup, ModelUseDay, ModelUseFilter, ModelUseStats, SolveFilter, SolveRow, model_use,
    solves,
};
pub use runs::{
    GateRow, InboxFilter, RunFilter, RunRow, StepRow, Timeline, finished_run_ids, gate_run, inbox,
    run_states, runs, timeline,
};

/// Why a query failed.
#[derive(Debug, thiserror::Error)]
pub enum QueryError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A row that does not have the shape of its view (a projection of an older
    /// version not yet rebuilt).
    #[error("the {view} view has a row that cannot be read: {reason}")]
    Corrupt { view: &'static str, reason: String },
}

impl Classified for QueryError {
    fn kind(&self) -> ErrorKind {
        match self {
            Self::Store(e) => e.kind(),
            Self::Corrupt { .. } => ErrorKind::Internal,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::Store(e) => e.code(),
            Self::Corrupt { .. } => "corrupt_view",
        }
    }
}

/// The checkpoint of `projection`: the last log position it has applied (0 when it
/// has applied nothing, or does not exist yet).
pub async fn checkpoint(store: &EventStore, projection: &str) -> Result<i64, QueryError> {
    let rows = store
        .query_rows(
            "SELECT position FROM projection_state WHERE name = ?",
            &[Param::from(projection)],
        )
        .await?;
    Ok(rows
        .first()
        .and_then(|r| r.get("position"))
        .and_then(Value::as_i64)
        .unwrap_or(0))
}

/// Rows of `view` as `T`, with `*_at` microseconds turned into RFC 3339 times.
async fn rows<T: DeserializeOwned>(
    store: &EventStore,
    view: &'static str,
    sql: &str,
    params: &[Param],
) -> Result<Vec<T>, QueryError> {
    store
        .query_rows(sql, params)
        .await?
        .into_iter()
        .map(|row| {
            serde_json::from_value(Value::Object(times(row))).map_err(|e| QueryError::Corrupt {
                view,
                reason: e.to_string(),
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

/// A time as projections keep it.
fn micros(t: DateTime<Utc>) -> i64 {
    t.timestamp_micros()
}

/// `WHERE` clauses and their parameters, built up filter by filter. Values are always
/// bound parameters; only column names (fixed in the code) are written into the text.
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

/// Shared reading of untyped counter rows.
fn text(r: &Map<String, Value>, k: &str) -> String {
    r.get(k)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

fn int(r: &Map<String, Value>, k: &str) -> i64 {
    r.get(k).and_then(Value::as_i64).unwrap_or(0)
}
