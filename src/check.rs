//! `awl check`: verify a store's log and say what is wrong and where.
//!
//! The log is the truth, so it is the log that is checked, in one pass in position
//! order (the same order every reader sees). What is checked:
//!
//! - every event decodes (through the upcasters) into its aggregate's events;
//! - every stream's versions run 1, 2, 3, ... without a gap or a repeat;
//! - every step attempt of a run has at most one outcome (`run.step_succeeded` or
//!   `run.step_failed`), and only after it started;
//! - every gate is decided (approved, rejected or expired) at most once, and only
//!   after it opened;
//! - every task event is a legal transition from the state its stream had folded to
//!   (`Task::permits`, the rules `decide` applies to the command behind it);
//! - every solve event is the step its solve could take next (a model reply of the
//!   expected iteration and phase, the result of a call the model asked for and not
//!   yet recorded, one end), decided again from the solve folded so far;
//! - every projection's tables equal a fold of the log up to its checkpoint
//!   (`Projections::verify`, a scratch generation beside the live one; skipped with
//!   `--log-only`).
//!
//! The log checks are pure over recorded events ([`Checker`]); [`check_store`] reads
//! the log page by page and feeds them, then compares the projections. Used by
//! operators after an incident and by the fault tests after every fault.

use std::collections::{HashMap, HashSet};

use serde::Serialize;

use cqrs_es::{Aggregate, DomainEvent};

use crate::domain::Decide;
use crate::domain::chat::{ChatEvent, ChatMessage};
use crate::domain::ids::GateId;
use crate::domain::run::{Run, RunEvent};
use crate::domain::solve::{Solve, SolveEvent};
use crate::domain::task::{Task, TaskEvent};
use crate::log::{EventFilter, RecordedEvent, StreamType};
use crate::projections::{ProjectionError, Projections};
use crate::store::{EventStore, StoreError, domain_io};

/// One thing wrong in the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// `stream_type/stream_id`.
    pub stream: String,
    /// The global position of the event where it was found (for an event the store
    /// cannot read back at all, the first position of the page it is in; the message
    /// names the event and its own position).
    pub position: i64,
    /// Which rule: `undecodable`, `version_gap`, `outcome_twice`,
    /// `outcome_without_start`, `gate_decided_twice`, `gate_decided_unopened`,
    /// `task_transition_illegal`, `projection_differs`.
    pub rule: &'static str,
    pub message: String,
}

/// What a check looked at and found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Report {
    pub events: u64,
    pub streams: u64,
    pub findings: Vec<Finding>,
}

/// The checks, fed one event at a time in position order.
#[derive(Default)]
pub struct Checker {
    events: u64,
    versions: HashMap<(StreamType, String), i64>,
    /// Per run: attempts started, attempts with an outcome, gates opened, gates
    /// decided.
    runs: HashMap<String, RunSeen>,
    /// Per task: its state folded so far.
    tasks: HashMap<String, Task>,
    /// Per solve: its state folded so far.
    solves: HashMap<String, Solve>,
    /// Per chat message: its state folded so far.
    chats: HashMap<String, ChatMessage>,
    findings: Vec<Finding>,
}

#[derive(Default)]
struct RunSeen {
    started: HashSet<(String, u32)>,
    ended: HashSet<(String, u32)>,
    opened: HashSet<GateId>,
    decided: HashSet<GateId>,
}

impl Checker {
    pub fn observe(&mut self, event: &RecordedEvent) {
        self.events += 1;
        self.check_version(event);
        match event.stream.kind {
            StreamType::Run => match domain_io::decode::<Run>(event) {
                Ok(run_event) => self.check_run(event, &run_event),
                Err(e) => self.found(event, "undecodable", e.to_string()),
            },
            StreamType::Task => match domain_io::decode::<Task>(event) {
                Ok(task_event) => self.check_task(event, task_event),
                Err(e) => self.found(event, "undecodable", e.to_string()),
            },
            StreamType::Solve => match domain_io::decode::<Solve>(event) {
                Ok(solve_event) => self.check_solve(event, solve_event),
                Err(e) => self.found(event, "undecodable", e.to_string()),
            },
            StreamType::Chat => match domain_io::decode::<ChatMessage>(event) {
                Ok(chat_event) => self.check_chat(event, chat_event),
                Err(e) => self.found(event, "undecodable", e.to_string()),
            },
            _ => {}
        }
    }

    /// The command behind a chat event, decided again on the message as folded.
    fn check_chat(&mut self, event: &RecordedEvent, chat_event: ChatEvent) {
        let chat = self.chats.entry(event.stream.id.clone()).or_default();
        let refused = chat.decide(chat_event.clone().command()).err();
        chat.apply(chat_event.clone());
        if let Some(e) = refused {
            let message = format!("{}: {e}", chat_event.event_type());
            self.found(event, "chat_step_illegal", message);
        }
    }

    /// The command behind a solve event, decided again on the solve as folded.
    fn check_solve(&mut self, event: &RecordedEvent, solve_event: SolveEvent) {
        let solve = self.solves.entry(event.stream.id.clone()).or_default();
        let command = solve_event.clone().command();
        let refused = solve.decide(command).err();
        solve.apply(solve_event.clone());
        if let Some(e) = refused {
            let message = format!("{}: {e}", solve_event.event_type());
            self.found(event, "solve_step_illegal", message);
        }
    }

    fn check_task(&mut self, event: &RecordedEvent, task_event: TaskEvent) {
        let task = self.tasks.entry(event.stream.id.clone()).or_default();
        if !task.permits(&task_event) {
            let now = task
                .status()
                .map_or("not queued".to_string(), |s| s.to_string());
            let allowed = match task.allowed_before(&task_event) {
                None => "only a task not yet queued".to_string(),
                Some(list) => list
                    .iter()
                    .map(|s| s.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            };
            let message = format!(
                "{} while the task is {now} (allowed from: {allowed})",
                task_event.event_type()
            );
            task.apply(task_event);
            self.found(event, "task_transition_illegal", message);
        } else {
            task.apply(task_event);
        }
    }

    pub fn finish(self) -> Report {
        Report {
            events: self.events,
            streams: self.versions.len() as u64,
            findings: self.findings,
        }
    }

    fn found(&mut self, event: &RecordedEvent, rule: &'static str, message: String) {
        self.findings.push(Finding {
            stream: event.stream.to_string(),
            position: event.position,
            rule,
            message,
        });
    }

    fn check_version(&mut self, event: &RecordedEvent) {
        let key = (event.stream.kind, event.stream.id.clone());
        let last = self.versions.get(&key).copied().unwrap_or(0);
        if event.version != last + 1 {
            self.found(
                event,
                "version_gap",
                format!(
                    "version {} follows version {last}: expected {}",
                    event.version,
                    last + 1
                ),
            );
        }
        self.versions.insert(key, event.version.max(last));
    }

    fn check_run(&mut self, event: &RecordedEvent, run_event: &RunEvent) {
        let seen = self.runs.entry(event.stream.id.clone()).or_default();
        let problem: Option<(&'static str, String)> = match run_event {
            RunEvent::StepStarted {
                step_id, attempt, ..
            } => {
                seen.started.insert((step_id.to_string(), *attempt));
                None
            }
            RunEvent::StepSucceeded {
                step_id, attempt, ..
            }
            | RunEvent::StepFailed {
                step_id, attempt, ..
            } => {
                let key = (step_id.to_string(), *attempt);
                if !seen.started.contains(&key) {
                    Some((
                        "outcome_without_start",
                        format!(
                            "step {step_id} attempt {attempt} has an outcome but never started"
                        ),
                    ))
                } else if !seen.ended.insert(key) {
                    Some((
                        "outcome_twice",
                        format!(
                            "step {step_id} attempt {attempt} has a second outcome ({})",
                            event.event_type
                        ),
                    ))
                } else {
                    None
                }
            }
            RunEvent::GateOpened { gate_id, .. } => {
                seen.opened.insert(*gate_id);
                None
            }
            RunEvent::GateApproved { gate_id, .. }
            | RunEvent::GateRejected { gate_id, .. }
            | RunEvent::GateExpired { gate_id, .. } => {
                if !seen.opened.contains(gate_id) {
                    Some((
                        "gate_decided_unopened",
                        format!(
                            "gate {gate_id} is decided ({}) but was never opened",
                            event.event_type
                        ),
                    ))
                } else if !seen.decided.insert(*gate_id) {
                    Some((
                        "gate_decided_twice",
                        format!(
                            "gate {gate_id} is decided a second time ({})",
                            event.event_type
                        ),
                    ))
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some((rule, message)) = problem {
            self.found(event, rule, message);
        }
    }
}

/// How many events are read per page.
const PAGE: i64 = 5_000;

/// Why a check could not be completed (a finding is not an error).
#[derive(Debug, thiserror::Error)]
pub enum CheckError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("comparing the projections: {0}")]
    Projection(#[from] ProjectionError),
}

/// Check the whole log of `store`, and unless `log_only`, every projection against
/// it.
pub async fn check_store(store: &EventStore, log_only: bool) -> Result<Report, CheckError> {
    let mut report = check_log(store).await?;
    if !log_only {
        let projections = Projections::new(store.clone());
        for name in projections.names() {
            for d in projections.verify(name).await? {
                report.findings.push(Finding {
                    stream: format!("projection/{}", d.projection),
                    position: d.position,
                    rule: "projection_differs",
                    message: format!(
                        "table {} differs from a fold of the log up to position {}: {} rows only live, {} only folded ({})",
                        d.table, d.position, d.only_live, d.only_folded, d.example
                    ),
                });
            }
        }
    }
    Ok(report)
}

/// Check the log alone.
async fn check_log(store: &EventStore) -> Result<Report, StoreError> {
    let mut checker = Checker::default();
    let filter = EventFilter::default();
    let mut after = 0;
    loop {
        let (events, next) = match store.read_page(after, PAGE, &filter).await {
            Ok(page) => page,
            Err(StoreError::Corrupt { event, reason }) => {
                // One event the store cannot read back at all: say where and stop
                // (what follows is read after it only by skipping it, which a check
                // must not do silently).
                checker.findings.push(Finding {
                    stream: event.clone(),
                    position: after + 1,
                    rule: "undecodable",
                    message: format!("{event}: {reason}"),
                });
                return Ok(checker.finish());
            }
            Err(e) => return Err(e),
        };
        for event in &events {
            checker.observe(event);
        }
        if next <= after {
            break;
        }
        after = next;
    }
    Ok(checker.finish())
}

#[cfg(test)]
mod tests;
