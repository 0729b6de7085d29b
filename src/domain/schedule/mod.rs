//! A schedule: a workflow started by itself at set times, as a stream of its own.
//!
//! The stream decides which times fire, so any number of servers can watch the same
//! schedules: each decides a tick on the stream as it stands and appends at that
//! version; one wins, the others find the time already handled when they look again.
//! Every time is accounted for in the stream: fired (with the run it starts, whose id
//! is derived from the schedule and the time, so a start repeated after a crash finds
//! the run), queued behind a run still going, or skipped with the reason (missed
//! while no server ran, or overlapping the previous run).
//!
//! The tick is pure: it takes the time and whether the previous run is still active
//! (read by the service) and says what happens to each time since the last one
//! handled, by the schedule's policies (`workflow::schedule`).

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::domain::Decide;
use crate::domain::ids::RunId;
use crate::workflow::schedule::{MissedPolicy, OverlapPolicy, ScheduleSpec, Timing, jitter};

#[cfg(test)]
mod tests;

/// Times queued behind a run still going, at most; more are skipped.
pub const QUEUE_LIMIT: usize = 100;

/// Times one tick looks at, at most (a schedule every second left alone for a day
/// has 86,400): the rest are counted as missed by the next tick.
const TIMES_PER_TICK: usize = 10_000;

/// Names the runs schedules start.
const SCHEDULED_RUN_NAMESPACE: Uuid = Uuid::from_u128(0x6c1e_93a0_4d2b_4f7e_9b85_0a3d_7e61_c2f4);

/// The run a schedule starts for one of its times: the same on every server and on
/// every attempt.
pub fn scheduled_run_id(schedule: &str, due_at: DateTime<Utc>) -> RunId {
    RunId::from_uuid(Uuid::new_v5(
        &SCHEDULED_RUN_NAMESPACE,
        format!("{schedule}\n{}", due_at.timestamp_millis()).as_bytes(),
    ))
}

/// Who declared a schedule: a workflow file (its schedules follow the workflow's
/// latest runnable version) or someone over the API.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ScheduleSource {
    Workflow,
    Api,
}

/// Why times were not fired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SkipReason {
    /// Later than the grace period: no server was running at the time.
    Missed,
    /// The previous run was still going (overlap `skip`).
    Overlap,
    /// The previous run was still going and the queue was full.
    QueueFull,
}

impl SkipReason {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missed => "missed",
            Self::Overlap => "overlap",
            Self::QueueFull => "queue_full",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ScheduleEvent {
    /// Declared, or declared again with a changed spec.
    #[serde(rename = "schedule.declared")]
    Declared {
        name: String,
        workflow: String,
        spec: ScheduleSpec,
        source: ScheduleSource,
        by: String,
        at: DateTime<Utc>,
    },
    #[serde(rename = "schedule.removed")]
    Removed { by: String, at: DateTime<Utc> },
    #[serde(rename = "schedule.paused")]
    Paused {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// Resumed: times while it was paused are not caught up.
    #[serde(rename = "schedule.resumed")]
    Resumed { by: String, at: DateTime<Utc> },
    /// A run was started for a time (`due_at`), or by hand (`due_at` absent).
    #[serde(rename = "schedule.fired")]
    Fired {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        due_at: Option<DateTime<Utc>>,
        run_id: RunId,
        by: String,
        at: DateTime<Utc>,
    },
    /// A time waits for the previous run to end.
    #[serde(rename = "schedule.queued")]
    Queued {
        due_at: DateTime<Utc>,
        at: DateTime<Utc>,
    },
    /// Times from `first` to `last` (`count` of them) were not fired.
    #[serde(rename = "schedule.skipped")]
    Skipped {
        first: DateTime<Utc>,
        last: DateTime<Utc>,
        count: u64,
        reason: SkipReason,
        at: DateTime<Utc>,
    },
}

impl ScheduleEvent {
    pub fn at(&self) -> DateTime<Utc> {
        match self {
            Self::Declared { at, .. }
            | Self::Removed { at, .. }
            | Self::Paused { at, .. }
            | Self::Resumed { at, .. }
            | Self::Fired { at, .. }
            | Self::Queued { at, .. }
            | Self::Skipped { at, .. } => *at,
        }
    }
}

impl cqrs_es::DomainEvent for ScheduleEvent {
    fn event_type(&self) -> String {
        match self {
            Self::Declared { .. } => "schedule.declared",
            Self::Removed { .. } => "schedule.removed",
            Self::Paused { .. } => "schedule.paused",
            Self::Resumed { .. } => "schedule.resumed",
            Self::Fired { .. } => "schedule.fired",
            Self::Queued { .. } => "schedule.queued",
            Self::Skipped { .. } => "schedule.skipped",
        }
        .to_string()
    }

    fn event_version(&self) -> String {
        "1".to_string()
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum ScheduleCommand {
    Declare {
        name: String,
        workflow: String,
        spec: ScheduleSpec,
        source: ScheduleSource,
        by: String,
        at: DateTime<Utc>,
    },
    Remove {
        by: String,
        at: DateTime<Utc>,
    },
    Pause {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    Resume {
        by: String,
        at: DateTime<Utc>,
    },
    /// Handle every time due by `now`; `previous_active`: whether the last run it
    /// started is still going.
    Tick {
        now: DateTime<Utc>,
        previous_active: bool,
    },
    /// Start a run now, by hand (`awl schedules trigger`), whatever the policies.
    Trigger {
        run_id: RunId,
        by: String,
        at: DateTime<Utc>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("no schedule {0:?}")]
    NotDeclared(String),
    #[error("schedule {name}: {message}")]
    Invalid { name: String, message: String },
    #[error("schedule {name} is declared {owner}: {action} it there")]
    Owned {
        name: String,
        owner: String,
        action: &'static str,
    },
    #[error("schedule {name} is {state}: cannot {action}")]
    State {
        name: String,
        state: &'static str,
        action: &'static str,
    },
}

/// A pause in force.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SchedulePause {
    pub by: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

/// A schedule, folded from its stream.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    name: String,
    workflow: String,
    spec: Option<ScheduleSpec>,
    source: Option<ScheduleSource>,
    declared_at: Option<DateTime<Utc>>,
    removed: bool,
    paused: Option<SchedulePause>,
    /// The latest time handled (fired, queued or skipped), or when it was declared or
    /// resumed: the next time is after it.
    cursor: Option<DateTime<Utc>>,
    queued: Vec<DateTime<Utc>>,
    last_run: Option<RunId>,
    last_fired_at: Option<DateTime<Utc>>,
    fired: u64,
    skipped: u64,
}

impl Schedule {
    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn workflow(&self) -> &str {
        &self.workflow
    }
    pub fn spec(&self) -> Option<&ScheduleSpec> {
        self.spec.as_ref()
    }
    pub fn source(&self) -> Option<&ScheduleSource> {
        self.source.as_ref()
    }
    pub fn is_declared(&self) -> bool {
        self.spec.is_some() && !self.removed
    }
    pub fn removed(&self) -> bool {
        self.removed
    }
    pub fn paused(&self) -> Option<&SchedulePause> {
        self.paused.as_ref()
    }
    /// Times waiting for the previous run to end, oldest first.
    pub fn queued(&self) -> &[DateTime<Utc>] {
        &self.queued
    }
    /// The last run it started.
    pub fn last_run(&self) -> Option<RunId> {
        self.last_run
    }
    pub fn last_fired_at(&self) -> Option<DateTime<Utc>> {
        self.last_fired_at
    }
    /// Runs started, and times skipped, over its life.
    pub fn fired(&self) -> u64 {
        self.fired
    }
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    fn timing(&self) -> Option<Timing> {
        self.spec.as_ref()?.timing().ok()
    }

    /// Its next time after the last one handled, and when that time fires (the time
    /// plus its jitter); `None` while paused or removed, or when no time comes.
    pub fn next(&self) -> Option<(DateTime<Utc>, DateTime<Utc>)> {
        if !self.is_declared() || self.paused.is_some() {
            return None;
        }
        let spec = self.spec.as_ref()?;
        let due = self.timing()?.next_after(self.cursor?)?;
        Some((due, due + jitter(&self.name, due, spec.jitter_seconds)))
    }

    /// When a tick has something to do: the next time's firing, or at once when a
    /// queued time waits (for the previous run to end).
    pub fn wake_at(&self) -> Option<DateTime<Utc>> {
        if !self.is_declared() || self.paused.is_some() {
            return None;
        }
        if let Some(first) = self.queued.first() {
            return Some(*first);
        }
        self.next().map(|(_, fires)| fires)
    }

    fn apply_event(&mut self, event: ScheduleEvent) {
        match event {
            ScheduleEvent::Declared {
                name,
                workflow,
                spec,
                source,
                at,
                ..
            } => {
                let fresh = !self.is_declared();
                self.name = name;
                self.workflow = workflow;
                self.spec = Some(spec);
                self.source = Some(source);
                if fresh {
                    // Declared (again): only times from now on.
                    self.declared_at = Some(at);
                    self.cursor = Some(self.cursor.map_or(at, |c| c.max(at)));
                    self.removed = false;
                    self.paused = None;
                    self.queued.clear();
                }
            }
            ScheduleEvent::Removed { .. } => {
                self.removed = true;
                self.queued.clear();
            }
            ScheduleEvent::Paused { by, reason, at } => {
                self.paused = Some(SchedulePause { by, reason, at });
            }
            ScheduleEvent::Resumed { at, .. } => {
                self.paused = None;
                self.queued.clear();
                self.cursor = Some(self.cursor.map_or(at, |c| c.max(at)));
            }
            ScheduleEvent::Fired {
                due_at, run_id, at, ..
            } => {
                if let Some(due) = due_at {
                    self.queued.retain(|q| *q != due);
                    self.advance(due);
                }
                self.last_run = Some(run_id);
                self.last_fired_at = Some(at);
                self.fired += 1;
            }
            ScheduleEvent::Queued { due_at, .. } => {
                self.queued.push(due_at);
                self.advance(due_at);
            }
            ScheduleEvent::Skipped { last, count, .. } => {
                self.advance(last);
                self.skipped += count;
            }
        }
    }

    fn advance(&mut self, to: DateTime<Utc>) {
        self.cursor = Some(self.cursor.map_or(to, |c| c.max(to)));
    }

    fn state(&self) -> &'static str {
        if self.removed {
            "removed"
        } else if self.paused.is_some() {
            "paused"
        } else {
            "active"
        }
    }

    fn refuse(&self, action: &'static str) -> ScheduleError {
        ScheduleError::State {
            name: self.name.clone(),
            state: self.state(),
            action,
        }
    }

    /// What a tick at `now` does to the times due since the last one handled.
    fn tick(&self, now: DateTime<Utc>, previous_active: bool) -> Vec<ScheduleEvent> {
        let (Some(spec), Some(timing), Some(cursor)) = (&self.spec, self.timing(), self.cursor)
        else {
            return Vec::new();
        };
        let mut events = Vec::new();
        let mut active = previous_active;
        let fire = |due: DateTime<Utc>| ScheduleEvent::Fired {
            due_at: Some(due),
            run_id: scheduled_run_id(&self.name, due),
            by: format!("schedule:{}", self.name),
            at: now,
        };
        // A queued time goes first, once the run it waited for has ended.
        let mut queued = self.queued.len();
        if !active && let Some(first) = self.queued.first() {
            events.push(fire(*first));
            queued -= 1;
            active = true;
        }
        // The times due by now (each fires at its time plus its jitter).
        let mut due = Vec::new();
        let mut t = cursor;
        while due.len() < TIMES_PER_TICK {
            let Some(next) = timing.next_after(t) else {
                break;
            };
            if next + jitter(&self.name, next, spec.jitter_seconds) > now {
                break;
            }
            due.push(next);
            t = next;
        }
        let grace =
            chrono::Duration::seconds(i64::try_from(spec.grace_seconds).unwrap_or(i64::MAX));
        let late = due
            .iter()
            .take_while(|d| now - (**d + jitter(&self.name, **d, spec.jitter_seconds)) > grace)
            .count();
        let caught_up = match spec.missed {
            MissedPolicy::Skip => 0,
            MissedPolicy::CatchUp => late.min(spec.catch_up_limit as usize),
        };
        let mut skips = Skips::default();
        for d in &due[..late - caught_up] {
            skips.add(&mut events, now, *d, SkipReason::Missed);
        }
        for d in &due[late - caught_up..] {
            match spec.overlap {
                OverlapPolicy::Allow => {
                    skips.flush(&mut events, now);
                    events.push(fire(*d));
                }
                _ if !active => {
                    skips.flush(&mut events, now);
                    events.push(fire(*d));
                    active = true;
                }
                OverlapPolicy::Skip => skips.add(&mut events, now, *d, SkipReason::Overlap),
                OverlapPolicy::Queue if queued >= QUEUE_LIMIT => {
                    skips.add(&mut events, now, *d, SkipReason::QueueFull);
                }
                OverlapPolicy::Queue => {
                    skips.flush(&mut events, now);
                    events.push(ScheduleEvent::Queued {
                        due_at: *d,
                        at: now,
                    });
                    queued += 1;
                }
            }
        }
        skips.flush(&mut events, now);
        events
    }
}

/// Consecutive skipped times with the same reason, recorded as one event.
#[derive(Default)]
struct Skips {
    run: Option<(DateTime<Utc>, DateTime<Utc>, u64, SkipReason)>,
}

impl Skips {
    /// Count `due` as skipped for `reason`; a different reason than the run so far
    /// records that run first.
    fn add(
        &mut self,
        events: &mut Vec<ScheduleEvent>,
        at: DateTime<Utc>,
        due: DateTime<Utc>,
        reason: SkipReason,
    ) {
        if let Some((_, last, count, r)) = &mut self.run
            && *r == reason
        {
            *last = due;
            *count += 1;
            return;
        }
        self.flush(events, at);
        self.run = Some((due, due, 1, reason));
    }

    fn flush(&mut self, events: &mut Vec<ScheduleEvent>, at: DateTime<Utc>) {
        if let Some((first, last, count, reason)) = self.run.take() {
            events.push(ScheduleEvent::Skipped {
                first,
                last,
                count,
                reason,
                at,
            });
        }
    }
}

impl Decide for Schedule {
    fn decide(&self, command: ScheduleCommand) -> Result<Vec<ScheduleEvent>, ScheduleError> {
        match command {
            ScheduleCommand::Declare {
                name,
                workflow,
                spec,
                source,
                by,
                at,
            } => {
                let problems = spec.problems();
                if !problems.is_empty() {
                    return Err(ScheduleError::Invalid {
                        name,
                        message: problems
                            .into_iter()
                            .map(|(field, message)| format!("{field}: {message}"))
                            .collect::<Vec<_>>()
                            .join("; "),
                    });
                }
                if self.is_declared() {
                    if self.source.as_ref() != Some(&source) {
                        return Err(ScheduleError::Owned {
                            name,
                            owner: owner(self.source.as_ref(), &self.workflow),
                            action: "change",
                        });
                    }
                    if self.spec.as_ref() == Some(&spec) && self.workflow == workflow {
                        return Ok(Vec::new());
                    }
                }
                Ok(vec![ScheduleEvent::Declared {
                    name,
                    workflow,
                    spec,
                    source,
                    by,
                    at,
                }])
            }
            ScheduleCommand::Remove { by, at } => {
                if !self.is_declared() {
                    return Err(self.not_declared());
                }
                Ok(vec![ScheduleEvent::Removed { by, at }])
            }
            ScheduleCommand::Pause { by, reason, at } => {
                if !self.is_declared() {
                    return Err(self.not_declared());
                }
                if self.paused.is_some() {
                    return Err(self.refuse("pause"));
                }
                Ok(vec![ScheduleEvent::Paused { by, reason, at }])
            }
            ScheduleCommand::Resume { by, at } => {
                if !self.is_declared() {
                    return Err(self.not_declared());
                }
                if self.paused.is_none() {
                    return Err(self.refuse("resume"));
                }
                Ok(vec![ScheduleEvent::Resumed { by, at }])
            }
            ScheduleCommand::Tick {
                now,
                previous_active,
            } => {
                if !self.is_declared() || self.paused.is_some() {
                    return Ok(Vec::new());
                }
                Ok(self.tick(now, previous_active))
            }
            ScheduleCommand::Trigger { run_id, by, at } => {
                if !self.is_declared() {
                    return Err(self.not_declared());
                }
                Ok(vec![ScheduleEvent::Fired {
                    due_at: None,
                    run_id,
                    by,
                    at,
                }])
            }
        }
    }
}

impl Schedule {
    fn not_declared(&self) -> ScheduleError {
        ScheduleError::NotDeclared(self.name.clone())
    }
}

/// Who owns a schedule, for a refusal.
fn owner(source: Option<&ScheduleSource>, workflow: &str) -> String {
    match source {
        Some(ScheduleSource::Workflow) => format!("in the file of workflow {workflow}"),
        _ => "over the API".to_string(),
    }
}

crate::domain::impl_aggregate!(
    Schedule,
    "schedule",
    ScheduleCommand,
    ScheduleEvent,
    ScheduleError
);
