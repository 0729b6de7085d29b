//! Replaying a recorded history through the current engine and checking that it
//! decides what was recorded: the guard against non-determinism.
//!
//! Workers rebuild a run by folding its events and asking [`tick`] what comes next,
//! so a change to the engine (or to how an old definition loads) that makes it decide
//! differently for a history already in the log breaks every run in flight. This
//! module finds such a change before it ships: golden histories kept in the tests, and
//! any stored run (`awl replay`), are walked event by event.
//!
//! What is recorded falls in two kinds. Events appended from outside the engine (a
//! person's gate decision, a pause or resume, a cancellation) are applied as they are. Every other event
//! was decided by a tick, so the walk ticks the run as it stood just before it, at the
//! time the event carries (every event of a tick carries its `now`), with the outcome
//! the event reports when it reports one (a step's success or failure, a
//! compensation's result; the worker's report is not in the log, but the event that
//! turned it into history holds all of it), and with every attempt that is running
//! counted as in flight (its worker was alive, unless the history starts the same
//! attempt again: then it had died, and the walk says so too). The tick's events must
//! begin with the recorded ones; the first that differs is a [`Divergence`] naming the
//! event and its step.
//!
//! Outcomes that arrived together were decided in one tick; the walk feeds them one at
//! a time, which decides the same events in the same order because a tick walks the
//! steps in the definition's order and each outcome only touches its own step until
//! the walk reaches it. So a tick whose events match the history only at their head is
//! taken that far; if the next recorded event then cannot be decided either, the
//! divergence shows what that tick had decided in its place.

use std::collections::BTreeSet;
use std::fmt;
use std::sync::Arc;

use cqrs_es::{Aggregate, DomainEvent};

use crate::domain::ids::StepId;
use crate::domain::run::{Run, RunEvent};
use crate::vault::Protection;
use crate::workflow::model::Workflow;

use super::{
    CompensationOutcome, Done, EngineError, Failure, StepOutcome, TickInput, idempotency_key,
    keys::compensation_key, tick,
};

/// One recorded event in the two forms a replay needs: as the log keeps it (what a
/// tick's decision must equal) and opened (what the run's state folds: sealed
/// personal data readable again). Without sealed values the two are the same.
#[derive(Debug, Clone, PartialEq)]
pub struct Recorded {
    pub logged: RunEvent,
    pub opened: RunEvent,
}

impl Recorded {
    /// An event with nothing sealed in it.
    pub fn plain(event: RunEvent) -> Self {
        Self {
            logged: event.clone(),
            opened: event,
        }
    }
}

/// The engine decides something else than the history records.
#[derive(Debug, Clone, PartialEq)]
pub struct Divergence {
    /// The event's place in the run's stream (its version: 1 is `run.started`).
    pub version: usize,
    /// The step the recorded event is about, if any.
    pub step: Option<StepId>,
    pub recorded: RunEvent,
    /// What the current code decides in its place: an event, nothing, or an error.
    pub decided: Decided,
}

/// What the engine decided where the history has a different event.
#[derive(Debug, Clone, PartialEq)]
pub enum Decided {
    Event(Box<RunEvent>),
    Nothing,
    Error(EngineError),
}

impl fmt::Display for Divergence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "non-determinism at event {}", self.version)?;
        if let Some(step) = &self.step {
            write!(f, " (step `{step}`)")?;
        }
        write!(
            f,
            ": the history records {}, the current code decides ",
            describe(&self.recorded)
        )?;
        match &self.decided {
            Decided::Event(event) => write!(f, "{}", describe(event)),
            Decided::Nothing => f.write_str("nothing"),
            Decided::Error(e) => write!(f, "an error: {e}"),
        }
    }
}

impl std::error::Error for Divergence {}

fn describe(event: &RunEvent) -> String {
    let body = serde_json::to_value(event)
        .ok()
        .and_then(|v| v.as_object().and_then(|o| o.values().next().cloned()))
        .map(|v| v.to_string())
        .unwrap_or_default();
    format!("{} {body}", event.event_type())
}

/// What a clean replay went through.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Verified {
    /// Events the engine decided again and matched.
    pub decisions: usize,
    /// Events applied as recorded (from outside the engine, and the start).
    pub outside: usize,
}

/// The environment a replay ticks with (as the worker had it).
#[derive(Debug, Clone, Default)]
pub struct ReplayContext {
    pub env: std::collections::BTreeMap<String, String>,
    pub protection: Arc<Protection>,
}

/// Walk `history` (a run's events in stream order) through the engine for
/// `definition`; see the module doc.
pub fn verify_history(
    definition: &Workflow,
    history: &[Recorded],
    context: &ReplayContext,
) -> Result<Verified, Box<Divergence>> {
    let mut walk = Walk {
        definition,
        context,
        state: Run::default(),
        in_flight: BTreeSet::new(),
        verified: Verified::default(),
        cut_short: None,
    };
    let mut at = 0;
    while at < history.len() {
        at += walk.next(&history[at..], at + 1)?;
    }
    Ok(walk.verified)
}

struct Walk<'a> {
    definition: &'a Workflow,
    context: &'a ReplayContext,
    state: Run,
    /// Keys of the attempts and compensations running, as the worker held them.
    in_flight: BTreeSet<String>,
    verified: Verified,
    /// The last tick matched only the head of its events: the one it decided next
    /// instead of the recorded event (at that version). Outcomes that arrived together
    /// make this legitimate (the walk feeds them one at a time), so it is only a
    /// divergence if the recorded event cannot be decided on its own either; then this
    /// is what the code decided in its place.
    cut_short: Option<(usize, RunEvent)>,
}

impl Walk<'_> {
    /// Account for the events at the head of `rest` (the first is event `version`):
    /// how many were matched or applied.
    fn next(&mut self, rest: &[Recorded], version: usize) -> Result<usize, Box<Divergence>> {
        let head = &rest[0];
        if let RunEvent::Continued { state, at } = &head.opened {
            // A continuation must carry the state its history folds to.
            let folded = self.state.compacted();
            if **state != folded {
                return Err(Box::new(Divergence {
                    version,
                    step: None,
                    recorded: head.logged.clone(),
                    decided: Decided::Event(Box::new(RunEvent::Continued {
                        state: Box::new(folded),
                        at: *at,
                    })),
                }));
            }
        }
        if from_outside(&head.logged) || self.state.status().is_none() {
            self.cut_short = None;
            self.apply(head);
            self.verified.outside += 1;
            return Ok(1);
        }
        if let RunEvent::StepStarted {
            idempotency_key, ..
        } = &head.opened
        {
            // The same attempt started again: its first worker had died.
            self.in_flight.remove(idempotency_key);
        }
        let mut first_refusal = None;
        for input in self.inputs_for(&head.opened) {
            match tick(self.definition, &self.state, &input) {
                Ok(t) => {
                    let matched = t
                        .events
                        .iter()
                        .zip(rest)
                        .take_while(|(decided, recorded)| same(decided, &recorded.logged))
                        .count();
                    if matched > 0 {
                        for recorded in &rest[..matched] {
                            self.apply(recorded);
                        }
                        self.verified.decisions += matched;
                        self.cut_short = t
                            .events
                            .into_iter()
                            .nth(matched)
                            .filter(|_| matched < rest.len())
                            .map(|event| (version + matched, event));
                        return Ok(matched);
                    }
                    first_refusal.get_or_insert(match t.events.into_iter().next() {
                        Some(event) => Decided::Event(Box::new(event)),
                        None => Decided::Nothing,
                    });
                }
                Err(e) => {
                    first_refusal.get_or_insert(Decided::Error(e));
                }
            }
        }
        let decided = match self.cut_short.take() {
            Some((at, event)) if at == version => Decided::Event(Box::new(event)),
            _ => first_refusal.unwrap_or(Decided::Nothing),
        };
        Err(Box::new(Divergence {
            version,
            step: self.step_of(&head.opened),
            recorded: head.logged.clone(),
            decided,
        }))
    }

    /// The ticks that may have decided `event`: without any report first (a gate's
    /// step succeeds by itself), then with the report the event carries.
    fn inputs_for(&self, event: &RunEvent) -> Vec<TickInput> {
        let bare = TickInput {
            now: event.at(),
            in_flight: self.in_flight.clone(),
            env: self.context.env.clone(),
            protection: self.context.protection.clone(),
            ..TickInput::default()
        };
        let mut inputs = vec![bare.clone()];
        match event {
            RunEvent::StepSucceeded {
                step_id,
                attempt,
                output,
                cost_usd,
                tokens,
                ..
            } => inputs.push(TickInput {
                outcomes: vec![StepOutcome {
                    step_id: step_id.clone(),
                    attempt: *attempt,
                    result: Ok(Done {
                        output: output.clone(),
                        cost_usd: *cost_usd,
                        tokens: *tokens,
                    }),
                }],
                ..bare
            }),
            RunEvent::StepFailed {
                step_id,
                attempt,
                error,
                ..
            } => inputs.push(TickInput {
                outcomes: vec![StepOutcome {
                    step_id: step_id.clone(),
                    attempt: *attempt,
                    result: Err(Failure {
                        class: error.class,
                        message: error.message.clone(),
                    }),
                }],
                ..bare
            }),
            RunEvent::CompensationStepRan { step_id, error, .. } => inputs.push(TickInput {
                compensations: vec![CompensationOutcome {
                    step_id: step_id.clone(),
                    error: error.clone(),
                }],
                ..bare
            }),
            _ => {}
        }
        inputs
    }

    /// Fold one recorded event and keep the work in flight as the worker saw it.
    fn apply(&mut self, recorded: &Recorded) {
        let run_id = self.state.id();
        match &recorded.opened {
            RunEvent::StepStarted {
                idempotency_key, ..
            } => {
                self.in_flight.insert(idempotency_key.clone());
            }
            RunEvent::StepSucceeded {
                step_id, attempt, ..
            }
            | RunEvent::StepFailed {
                step_id, attempt, ..
            }
            | RunEvent::StepThrottled {
                step_id, attempt, ..
            } => {
                if let Some(run) = run_id {
                    self.in_flight
                        .remove(&idempotency_key(run, step_id, *attempt));
                }
            }
            RunEvent::CompensationStarted { steps, .. } => {
                if let Some(run) = run_id {
                    for step in steps {
                        self.in_flight.insert(compensation_key(run, step));
                    }
                }
            }
            RunEvent::CompensationStepRan { step_id, .. } => {
                if let Some(run) = run_id {
                    self.in_flight.remove(&compensation_key(run, step_id));
                }
            }
            _ => {}
        }
        self.state.apply(recorded.opened.clone());
    }

    fn step_of(&self, event: &RunEvent) -> Option<StepId> {
        match event {
            RunEvent::StepScheduled { step_id, .. }
            | RunEvent::StepStarted { step_id, .. }
            | RunEvent::StepSucceeded { step_id, .. }
            | RunEvent::StepFailed { step_id, .. }
            | RunEvent::StepRetried { step_id, .. }
            | RunEvent::StepSkipped { step_id, .. }
            | RunEvent::RecoveryApplied { step_id, .. }
            | RunEvent::GateOpened { step_id, .. }
            | RunEvent::CompensationStepRan { step_id, .. } => Some(step_id.clone()),
            RunEvent::CostCharged { step_id, .. } => step_id.clone(),
            RunEvent::GateExpired { gate_id, .. } => {
                self.state.gate(gate_id).map(|g| g.step_id.clone())
            }
            _ => None,
        }
    }
}

/// Events appended by a command from outside the engine (a person or an operator;
/// the executor's admission for concurrency slots and its throttles for rate limits,
/// decided against the database).
fn from_outside(event: &RunEvent) -> bool {
    matches!(
        event,
        RunEvent::Started { .. }
            | RunEvent::Queued { .. }
            | RunEvent::Admitted { .. }
            | RunEvent::StepThrottled { .. }
            | RunEvent::GateApproved { .. }
            | RunEvent::GateRejected { .. }
            | RunEvent::Paused { .. }
            | RunEvent::Resumed { .. }
            | RunEvent::StepCarried { .. }
            | RunEvent::Derived { .. }
            | RunEvent::Cancelled { .. }
            | RunEvent::Continued { .. }
    )
}

/// Whether `decided` is the event the history recorded. A step's start recorded
/// before starts carried their call (no `call`) is the same start with one.
fn same(decided: &RunEvent, recorded: &RunEvent) -> bool {
    if decided == recorded {
        return true;
    }
    match (decided, recorded) {
        (
            RunEvent::StepStarted {
                call: Some(_),
                step_id,
                attempt,
                idempotency_key,
                timeout_at,
                at,
            },
            RunEvent::StepStarted { call: None, .. },
        ) => {
            let without = RunEvent::StepStarted {
                step_id: step_id.clone(),
                attempt: *attempt,
                idempotency_key: idempotency_key.clone(),
                timeout_at: *timeout_at,
                call: None,
                at: *at,
            };
            &without == recorded
        }
        _ => false,
    }
}
