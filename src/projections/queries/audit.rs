//! The audit projection: who did what and when.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::page::{Cursor, Page};
use crate::store::EventStore;
use crate::store::rows::Param;

use super::{QueryError, Where, micros, rows};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AuditRow {
    pub position: i64,
    pub at: Option<DateTime<Utc>>,
    pub actor: Option<String>,
    pub stream_type: String,
    pub stream_id: String,
    pub event_type: String,
}

#[derive(Debug, Clone, Default)]
pub struct AuditFilter {
    pub actor: Option<String>,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    /// Rows before this position (the cursor's key).
    pub after: Option<Cursor>,
    pub limit: usize,
}

/// Newest first.
pub async fn audit(store: &EventStore, f: &AuditFilter) -> Result<Page<AuditRow>, QueryError> {
    let mut w = Where::default();
    if let Some(actor) = &f.actor {
        w.add("actor = ?", [Param::from(actor.clone())]);
    }
    if let Some(since) = f.since {
        w.add("at >= ?", [Param::from(micros(since))]);
    }
    if let Some(until) = f.until {
        w.add("at < ?", [Param::from(micros(until))]);
    }
    if let Some(c) = &f.after {
        w.add("position < ?", [Param::from(c.key)]);
    }
    let sql = format!(
        "SELECT * FROM audit{} ORDER BY position DESC LIMIT {}",
        w.sql(),
        f.limit + 1
    );
    let found: Vec<AuditRow> = rows(store, "audit", &sql, &w.params).await?;
    Ok(Page::cut(found, f.limit, |r| Cursor::at(r.position)))
}
