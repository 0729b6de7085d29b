//! Debounced starts: the starts of one workflow with one value of its `debounce`
//! key, as a stream of their own (`debounce`, id `WORKFLOW:KEY`).
//!
//! A start decides on the stream whether an earlier start less than the window ago
//! owns the key: then it joins that start's run; else it records the run it starts
//! (`debounce.started`). Two racing starts append at the same version, so one wins
//! and the other, deciding again, joins it. The run's id is recorded before the run
//! is started, so a start that died between the two is finished by the next one
//! that joins it (the run is started under that id, idempotently).

use chrono::{DateTime, Duration, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::Decide;
use crate::domain::ids::RunId;

#[cfg(test)]
mod tests;

/// The stream id of a workflow's key.
pub fn stream_id(workflow: &str, key: &str) -> String {
    format!("{workflow}:{key}")
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum DebounceEvent {
    /// A start owns the key from `at` for `window_seconds`: starts meanwhile join
    /// `run_id`.
    #[serde(rename = "debounce.started")]
    Started {
        run_id: RunId,
        window_seconds: u64,
        by: String,
        at: DateTime<Utc>,
    },
}

impl cqrs_es::DomainEvent for DebounceEvent {
    fn event_type(&self) -> String {
        match self {
            Self::Started { .. } => "debounce.started",
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum DebounceCommand {
    /// Start `run_id` unless an earlier start owns the key at `at`.
    Start {
        run_id: RunId,
        window_seconds: u64,
        by: String,
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DebounceError {
    /// Not a failure: the start joins this run.
    #[error("a start at {since} owns the key: this one joins run {run_id}")]
    Joins { run_id: RunId, since: DateTime<Utc> },
    #[error("a debounce window must be at least one second")]
    NoWindow,
}

/// The key's latest start.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Debounce {
    owner: Option<(RunId, DateTime<Utc>, u64)>,
}

impl Debounce {
    /// The run that owns the key at `at`, if a start less than its window ago does.
    pub fn owner_at(&self, at: DateTime<Utc>) -> Option<RunId> {
        let (run_id, since, window) = self.owner?;
        let window = Duration::seconds(i64::try_from(window).unwrap_or(i64::MAX / 1000));
        (at < since + window).then_some(run_id)
    }

    fn apply_event(&mut self, event: DebounceEvent) {
        match event {
            DebounceEvent::Started {
                run_id,
                window_seconds,
                at,
                ..
            } => self.owner = Some((run_id, at, window_seconds)),
        }
    }
}

impl Decide for Debounce {
    fn decide(&self, command: DebounceCommand) -> Result<Vec<DebounceEvent>, DebounceError> {
        match command {
            DebounceCommand::Start {
                run_id,
                window_seconds,
                by,
                at,
            } => {
                if window_seconds == 0 {
                    return Err(DebounceError::NoWindow);
                }
                if let Some(owner) = self.owner_at(at) {
                    let since = self.owner.map_or(at, |(_, since, _)| since);
                    return Err(DebounceError::Joins {
                        run_id: owner,
                        since,
                    });
                }
                Ok(vec![DebounceEvent::Started {
                    run_id,
                    window_seconds,
                    by,
                    at,
                }])
            }
        }
    }
}

crate::domain::impl_aggregate!(
    Debounce,
    "debounce",
    DebounceCommand,
    DebounceEvent,
    DebounceError
);
