//! Schedules as the interfaces show them, and what declaring one takes.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::schedule::{Schedule, ScheduleSource};
use crate::workflow::schedule::ScheduleSpec;

/// A schedule: what it starts, when, and what it did so far.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleView {
    pub name: String,
    pub workflow: String,
    /// `workflow` (declared in the workflow's file) or `api`.
    pub source: String,
    /// Absent only for a stream that holds no declaration (never the case for a
    /// schedule listed or found).
    pub spec: Option<ScheduleSpec>,
    /// ACTIVE, PAUSED or REMOVED.
    pub status: String,
    /// Who paused it and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub paused: Option<String>,
    /// Its next time, and when that time fires (plus its jitter).
    pub next_due: Option<DateTime<Utc>>,
    pub next_fires: Option<DateTime<Utc>>,
    /// Times waiting for the previous run to end.
    pub queued: Vec<DateTime<Utc>>,
    pub last_run: Option<Uuid>,
    pub last_fired_at: Option<DateTime<Utc>>,
    /// Runs started, and times skipped, over its life.
    pub fired: u64,
    pub skipped: u64,
}

impl ScheduleView {
    pub fn of(schedule: &Schedule) -> Self {
        let next = schedule.next();
        ScheduleView {
            name: schedule.name().to_string(),
            workflow: schedule.workflow().to_string(),
            source: match schedule.source() {
                Some(ScheduleSource::Workflow) => "workflow",
                _ => "api",
            }
            .to_string(),
            spec: schedule.spec().cloned(),
            status: if schedule.removed() {
                "REMOVED"
            } else if schedule.paused().is_some() {
                "PAUSED"
            } else {
                "ACTIVE"
            }
            .to_string(),
            paused: schedule
                .paused()
                .map(|p| format!("by {} at {}: {}", p.by, p.at.to_rfc3339(), p.reason)),
            next_due: next.map(|(due, _)| due),
            next_fires: next.map(|(_, fires)| fires),
            queued: schedule.queued().to_vec(),
            last_run: schedule.last_run().map(|r| r.as_uuid()),
            last_fired_at: schedule.last_fired_at(),
            fired: schedule.fired(),
            skipped: schedule.skipped(),
        }
    }
}

/// The declared schedules.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ScheduleList {
    pub schedules: Vec<ScheduleView>,
}

/// Declare a schedule (or change one declared over the API).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeclareSchedule {
    pub name: String,
    /// The workflow it starts (its latest runnable version at each time).
    pub workflow: String,
    /// When, and how: `cron` or `every`, `timezone`, `inputs`, the policies (as in
    /// a workflow file's `schedules:`).
    pub schedule: ScheduleSpec,
}
