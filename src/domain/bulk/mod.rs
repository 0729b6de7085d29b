//! A bulk action: one operator action (cancel, pause, resume, retry, rerun from a step)
//! over every run a filter selected, carried out in batches, as a stream of its own.
//!
//! The selection is fixed when the action is planned (`bulk.planned`, then the run ids
//! in `bulk.selected` chunks, in the order they are acted on), so the set does not
//! drift while runs finish. Each batch done is `bulk.progressed` (how far, how many
//! acted on, which were skipped and why); a process that dies mid-way leaves the
//! stream where its last batch ended, and whoever carries it on starts there. The
//! rules here (chunks only before progress, progress only forward, completion only at
//! the end) are pure; the service in `crate::bulk` does the I/O.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use uuid::Uuid;

use crate::domain::Decide;
use crate::domain::ids::RunId;

#[cfg(test)]
mod tests;

/// What is done to each selected run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BulkAction {
    Cancel,
    Pause,
    Resume,
    /// Rerun a failed run from the top-level step it failed at.
    Retry,
    /// Rerun a finished run from a step chosen when the action is planned.
    Rerun,
    /// Pause for pausing the whole workflow: resuming the workflow lifts it. Planned
    /// by a workflow pause, never asked for by name.
    Hold,
}

impl std::str::FromStr for BulkAction {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "cancel" => Ok(Self::Cancel),
            "pause" => Ok(Self::Pause),
            "resume" => Ok(Self::Resume),
            "retry" => Ok(Self::Retry),
            "rerun" => Ok(Self::Rerun),
            other => Err(format!(
                "action {other:?}: expected cancel, pause, resume, retry or rerun"
            )),
        }
    }
}

impl BulkAction {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Cancel => "cancel",
            Self::Pause => "pause",
            Self::Resume => "resume",
            Self::Retry => "retry",
            Self::Rerun => "rerun",
            Self::Hold => "hold",
        }
    }
}

/// Which runs a bulk action selects (all conditions hold).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct BulkFilter {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    /// Upper-case run statuses; empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub statuses: Vec<String>,
    /// Started at or after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub since: Option<DateTime<Utc>>,
    /// Started before.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<DateTime<Utc>>,
    /// Inputs that must have these values (secret and personal inputs never match).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub inputs: BTreeMap<String, Value>,
    /// Only these runs (as picked by hand, on the dashboard); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub run_ids: Vec<RunId>,
}

/// A selected run that was not acted on, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub run_id: RunId,
    pub reason: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum BulkEvent {
    #[serde(rename = "bulk.planned")]
    Planned {
        bulk_id: Uuid,
        action: BulkAction,
        /// The step a rerun starts from (a rerun only).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from_step: Option<String>,
        filter: BulkFilter,
        reason: String,
        /// How many runs the filter selected.
        total: u64,
        by: String,
        at: DateTime<Utc>,
    },
    /// The next chunk of the selection, in the order the runs are acted on.
    #[serde(rename = "bulk.selected")]
    Selected { runs: Vec<RunId>, at: DateTime<Utc> },
    /// A batch was carried out: the runs up to `through` (a count) are done.
    #[serde(rename = "bulk.progressed")]
    Progressed {
        through: u64,
        acted: u64,
        skipped: Vec<Skipped>,
        at: DateTime<Utc>,
    },
    #[serde(rename = "bulk.completed")]
    Completed { at: DateTime<Utc> },
}

impl BulkEvent {
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::Planned { at, .. }
            | Self::Selected { at, .. }
            | Self::Progressed { at, .. }
            | Self::Completed { at } => *at,
        }
    }
}

impl cqrs_es::DomainEvent for BulkEvent {
    fn event_type(&self) -> String {
        match self {
            Self::Planned { .. } => "bulk.planned",
            Self::Selected { .. } => "bulk.selected",
            Self::Progressed { .. } => "bulk.progressed",
            Self::Completed { .. } => "bulk.completed",
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum BulkCommand {
    Plan {
        bulk_id: Uuid,
        action: BulkAction,
        from_step: Option<String>,
        filter: BulkFilter,
        reason: String,
        total: u64,
        by: String,
        at: DateTime<Utc>,
    },
    Select {
        runs: Vec<RunId>,
        at: DateTime<Utc>,
    },
    Progress {
        through: u64,
        acted: u64,
        skipped: Vec<Skipped>,
        at: DateTime<Utc>,
    },
    Complete {
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BulkError {
    #[error("no bulk action here: cannot {0}")]
    NotPlanned(&'static str),
    #[error("bulk action {0} is already planned")]
    AlreadyPlanned(Uuid),
    #[error("bulk action {bulk}: {message}")]
    Refused { bulk: Uuid, message: String },
    #[error("bulk {action}: {message}")]
    Invalid {
        action: &'static str,
        message: &'static str,
    },
}

/// Where a bulk action is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum BulkStatus {
    /// Planned; its selection is being recorded.
    Selecting,
    /// Selected; being carried out (or waiting to be carried on).
    Running,
    Completed,
}

/// A bulk action, folded from its stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Bulk {
    bulk_id: Option<Uuid>,
    action: Option<BulkAction>,
    from_step: Option<String>,
    filter: BulkFilter,
    reason: String,
    by: String,
    total: u64,
    runs: Vec<RunId>,
    through: u64,
    acted: u64,
    skipped: Vec<Skipped>,
    planned_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
    completed: bool,
}

impl Bulk {
    pub fn id(&self) -> Option<Uuid> {
        self.bulk_id
    }
    pub fn action(&self) -> Option<BulkAction> {
        self.action
    }
    /// The step a rerun starts from.
    pub fn from_step(&self) -> Option<&str> {
        self.from_step.as_deref()
    }
    pub fn filter(&self) -> &BulkFilter {
        &self.filter
    }
    pub fn reason(&self) -> &str {
        &self.reason
    }
    pub fn by(&self) -> &str {
        &self.by
    }
    pub fn total(&self) -> u64 {
        self.total
    }
    /// The selection, in order.
    pub fn runs(&self) -> &[RunId] {
        &self.runs
    }
    /// How many runs are done (acted on or skipped).
    pub fn through(&self) -> u64 {
        self.through
    }
    pub fn acted(&self) -> u64 {
        self.acted
    }
    pub fn skipped(&self) -> &[Skipped] {
        &self.skipped
    }
    pub fn planned_at(&self) -> Option<DateTime<Utc>> {
        self.planned_at
    }
    pub fn updated_at(&self) -> Option<DateTime<Utc>> {
        self.updated_at
    }
    pub fn status(&self) -> Option<BulkStatus> {
        self.bulk_id?;
        Some(if self.completed {
            BulkStatus::Completed
        } else if (self.runs.len() as u64) < self.total {
            BulkStatus::Selecting
        } else {
            BulkStatus::Running
        })
    }
    /// The runs still to do, in order.
    pub fn remaining(&self) -> &[RunId] {
        self.runs.get(self.through as usize..).unwrap_or_default()
    }

    fn apply_event(&mut self, event: BulkEvent) {
        self.updated_at = Some(event.at());
        match event {
            BulkEvent::Planned {
                bulk_id,
                action,
                from_step,
                filter,
                reason,
                total,
                by,
                at,
            } => {
                *self = Bulk {
                    bulk_id: Some(bulk_id),
                    action: Some(action),
                    from_step,
                    filter,
                    reason,
                    by,
                    total,
                    planned_at: Some(at),
                    updated_at: Some(at),
                    ..Bulk::default()
                };
            }
            BulkEvent::Selected { runs, .. } => self.runs.extend(runs),
            BulkEvent::Progressed {
                through,
                acted,
                skipped,
                ..
            } => {
                self.through = through;
                self.acted += acted;
                self.skipped.extend(skipped);
            }
            BulkEvent::Completed { .. } => self.completed = true,
        }
    }
}

impl Decide for Bulk {
    fn decide(&self, command: BulkCommand) -> Result<Vec<BulkEvent>, BulkError> {
        let Some(bulk) = self.bulk_id else {
            return match command {
                BulkCommand::Plan {
                    bulk_id,
                    action,
                    from_step,
                    filter,
                    reason,
                    total,
                    by,
                    at,
                } => {
                    check_step(action, from_step.as_deref())?;
                    Ok(vec![BulkEvent::Planned {
                        bulk_id,
                        action,
                        from_step,
                        filter,
                        reason,
                        total,
                        by,
                        at,
                    }])
                }
                BulkCommand::Select { .. } => Err(BulkError::NotPlanned("select runs")),
                BulkCommand::Progress { .. } => Err(BulkError::NotPlanned("record progress")),
                BulkCommand::Complete { .. } => Err(BulkError::NotPlanned("complete")),
            };
        };
        let refuse = |message: String| BulkError::Refused { bulk, message };
        let status = self.status().unwrap_or(BulkStatus::Selecting);
        match command {
            BulkCommand::Plan { .. } => Err(BulkError::AlreadyPlanned(bulk)),
            BulkCommand::Select { runs, at } => {
                if status != BulkStatus::Selecting {
                    return Err(refuse(format!("its selection is complete ({status:?})")));
                }
                if self.runs.len() as u64 + runs.len() as u64 > self.total {
                    return Err(refuse(format!(
                        "{} more runs would exceed the {} it selected",
                        runs.len(),
                        self.total
                    )));
                }
                Ok(vec![BulkEvent::Selected { runs, at }])
            }
            BulkCommand::Progress {
                through,
                acted,
                skipped,
                at,
            } => {
                if status != BulkStatus::Running {
                    return Err(refuse(format!(
                        "it is {status:?}: no progress can be recorded"
                    )));
                }
                if through <= self.through || through > self.total {
                    return Err(refuse(format!(
                        "progress to {through} must move forward from {} and stay within {}",
                        self.through, self.total
                    )));
                }
                if acted + skipped.len() as u64 != through - self.through {
                    return Err(refuse(format!(
                        "{acted} acted on and {} skipped do not add up to the {} runs done",
                        skipped.len(),
                        through - self.through
                    )));
                }
                Ok(vec![BulkEvent::Progressed {
                    through,
                    acted,
                    skipped,
                    at,
                }])
            }
            BulkCommand::Complete { at } => {
                if status != BulkStatus::Running || self.through != self.total {
                    return Err(refuse(format!(
                        "{} of {} runs are done: it completes when all are",
                        self.through, self.total
                    )));
                }
                Ok(vec![BulkEvent::Completed { at }])
            }
        }
    }
}

/// A rerun names the step it starts from; no other action takes one.
pub fn check_step(action: BulkAction, from_step: Option<&str>) -> Result<(), BulkError> {
    let invalid = |message| BulkError::Invalid {
        action: action.as_str(),
        message,
    };
    match (action, from_step.map(str::trim)) {
        (BulkAction::Rerun, None | Some("")) => {
            Err(invalid("a rerun needs the step it starts from (from_step)"))
        }
        (BulkAction::Rerun, Some(_)) | (_, None) => Ok(()),
        (_, Some(_)) => Err(invalid("only a rerun starts from a step (from_step)")),
    }
}

crate::domain::impl_aggregate!(Bulk, "bulk", BulkCommand, BulkEvent, BulkError);
