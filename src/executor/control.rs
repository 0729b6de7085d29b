//! What people (and the CLI) do to runs and tasks: start a run, approve or reject a
//! gate, cancel a run, finish an agent task by hand. Each is one decision of the
//! aggregate, appended with its expected version together with the wake-up of the run
//! it concerns, in one transaction; a concurrent write makes it decide again.

use chrono::{DateTime, Duration, Utc};
use cqrs_es::Aggregate;
use serde_json::{Map, Value};

use crate::domain::Decide;
use crate::domain::ids::{AgentId, GateId, RunId, TaskId};
use crate::domain::run::{Run, RunCommand};
use crate::domain::task::{CompletedBy, Task, TaskCommand, TaskStatus};
use crate::engine;
use crate::log::{EventFilter, Metadata, StreamRef, StreamType};
use crate::store::{EventStore, StoreError, domain_io};

use super::ExecError;
use super::definitions::Registered;

/// How many times a decision is retried when someone else wrote first.
const ATTEMPTS: usize = 5;

/// Load `stream` as `A`, decide with `decide`, append the events and wake `wake`
/// (computed from the state) in one transaction. Returns the state after.
async fn act<A, F, W>(
    store: &EventStore,
    stream: &StreamRef,
    by: &str,
    now: DateTime<Utc>,
    decide: F,
    wake: W,
) -> Result<A, ExecError>
where
    A: Aggregate,
    F: Fn(&A) -> Result<Vec<A::Event>, ExecError>,
    W: Fn(&A) -> Vec<String>,
{
    for _ in 0..ATTEMPTS {
        let (mut state, version) = domain_io::load::<A>(store, stream).await?;
        let events = decide(&state)?;
        for e in &events {
            state.apply(e.clone());
        }
        if events.is_empty() {
            return Ok(state);
        }
        let request = domain_io::append_request(stream, version, &events, &Metadata::actor(by))?;
        let mut tx = store.begin().await?;
        match tx.append(&[request]).await {
            Ok(_) => {}
            Err(StoreError::Conflict { .. }) => {
                tx.rollback().await?;
                continue;
            }
            Err(e) => return Err(e.into()),
        }
        for run_id in wake(&state) {
            tx.wake_run(&run_id, now).await?;
        }
        tx.commit().await?;
        return Ok(state);
    }
    Err(ExecError::Refused(format!(
        "{stream} kept changing while deciding; try again"
    )))
}

/// Start a run of a registered workflow version (inputs already checked).
pub async fn start_run(
    store: &EventStore,
    registered: &Registered,
    inputs: Map<String, Value>,
    run_id: RunId,
    by: &str,
    now: DateTime<Utc>,
) -> Result<RunId, ExecError> {
    let command = engine::start_command(
        &registered.workflow,
        &registered.version,
        run_id,
        inputs,
        None,
        now,
    )
    .map_err(|e| ExecError::Refused(e.to_string()))?;
    let stream = StreamRef::new(StreamType::Run, run_id.to_string());
    act::<Run, _, _>(
        store,
        &stream,
        by,
        now,
        |run| run.decide(command.clone()).map_err(refused),
        |_| vec![run_id.to_string()],
    )
    .await?;
    Ok(run_id)
}

fn refused(e: impl std::fmt::Display) -> ExecError {
    ExecError::Refused(e.to_string())
}

/// The run a gate belongs to: from the runs projection's gates when it has the gate,
/// else from the gate's `run.gate_opened` event in the log (a projection that is
/// behind, or not built, never hides a gate).
pub async fn find_gate(store: &EventStore, gate_id: GateId) -> Result<RunId, ExecError> {
    let known = store
        .query_rows(
            "SELECT run_id FROM run_gates WHERE gate_id = ?",
            &[crate::store::rows::Param::from(gate_id.to_string())],
        )
        .await
        .ok()
        .and_then(|rows| rows.into_iter().next())
        .and_then(|row| {
            row.get("run_id")
                .and_then(|v| v.as_str())
                .and_then(|id| id.parse().ok())
        });
    if let Some(run_id) = known {
        return Ok(run_id);
    }
    scan_for_gate(store, gate_id).await
}

/// [`find_gate`] by reading the log's `run.gate_opened` events.
async fn scan_for_gate(store: &EventStore, gate_id: GateId) -> Result<RunId, ExecError> {
    let filter = EventFilter {
        stream_types: vec![StreamType::Run],
        event_types: vec!["run.gate_opened".into()],
        ..EventFilter::default()
    };
    let wanted = gate_id.to_string();
    let mut after = 0;
    loop {
        let (events, scanned) = store.read_page(after, 1_000, &filter).await?;
        if let Some(e) = events
            .iter()
            .find(|e| e.payload["gate_id"] == wanted.as_str())
        {
            return e.stream.id.parse().map_err(|_| {
                ExecError::Refused(format!("gate {gate_id} belongs to a malformed run id"))
            });
        }
        if scanned == after {
            return Err(ExecError::Refused(format!("no gate {gate_id}")));
        }
        after = scanned;
    }
}

/// A person's decision on a gate.
#[derive(Debug, Clone)]
pub enum GateDecision {
    Approve { comment: Option<String> },
    Reject { comment: String },
}

/// Approve or reject `gate_id` as `by`; returns the gate's run.
pub async fn decide_gate(
    store: &EventStore,
    gate_id: GateId,
    decision: GateDecision,
    by: &str,
    now: DateTime<Utc>,
) -> Result<RunId, ExecError> {
    let run_id = find_gate(store, gate_id).await?;
    let stream = StreamRef::new(StreamType::Run, run_id.to_string());
    let command = match decision {
        GateDecision::Approve { comment } => RunCommand::ApproveGate {
            gate_id,
            by: by.to_string(),
            comment,
            at: now,
        },
        GateDecision::Reject { comment } => RunCommand::RejectGate {
            gate_id,
            by: by.to_string(),
            comment,
            at: now,
        },
    };
    act::<Run, _, _>(
        store,
        &stream,
        by,
        now,
        |run| run.decide(command.clone()).map_err(refused),
        |_| vec![run_id.to_string()],
    )
    .await?;
    Ok(run_id)
}

/// Cancel a run; its parent, if any, is woken to see it.
pub async fn cancel_run(
    store: &EventStore,
    run_id: RunId,
    by: &str,
    reason: &str,
    now: DateTime<Utc>,
) -> Result<Run, ExecError> {
    let stream = StreamRef::new(StreamType::Run, run_id.to_string());
    act::<Run, _, _>(
        store,
        &stream,
        by,
        now,
        |run| {
            run.decide(RunCommand::Cancel {
                by: by.to_string(),
                reason: reason.to_string(),
                at: now,
            })
            .map_err(refused)
        },
        |run| {
            let mut wake = vec![run_id.to_string()];
            if let Some(parent) = run.parent() {
                wake.push(parent.run_id.to_string());
            }
            wake
        },
    )
    .await
}

/// How a person ends an agent task by hand (before the board, or for a task no agent
/// will take).
#[derive(Debug, Clone)]
pub enum TaskFinish {
    /// Take the task as `agent` (assign, deliver, ack, as the board would) and
    /// complete it with `result`.
    Complete { agent: AgentId, result: Value },
    Fail {
        reason: String,
        error_class: Option<String>,
    },
}

/// End a task; the run waiting for it is woken.
pub async fn finish_task(
    store: &EventStore,
    task_id: TaskId,
    finish: TaskFinish,
    by: &str,
    now: DateTime<Utc>,
) -> Result<Task, ExecError> {
    let stream = StreamRef::new(StreamType::Task, task_id.to_string());
    act::<Task, _, _>(
        store,
        &stream,
        by,
        now,
        |task| {
            let mut scratch = task.clone();
            let mut events = Vec::new();
            let mut run = |cmd: TaskCommand, scratch: &mut Task| -> Result<(), ExecError> {
                for e in scratch.decide(cmd).map_err(refused)? {
                    scratch.apply(e.clone());
                    events.push(e);
                }
                Ok(())
            };
            match &finish {
                TaskFinish::Complete { agent, result } => {
                    if scratch.status() == Some(TaskStatus::Queued) {
                        run(
                            TaskCommand::Assign {
                                agent: agent.clone(),
                                at: now,
                            },
                            &mut scratch,
                        )?;
                    }
                    if scratch.status() == Some(TaskStatus::Assigned) {
                        run(
                            TaskCommand::Deliver {
                                agent: agent.clone(),
                                ack_deadline: now + Duration::seconds(30),
                                at: now,
                            },
                            &mut scratch,
                        )?;
                    }
                    if scratch.status() == Some(TaskStatus::PendingAck) {
                        run(
                            TaskCommand::Ack {
                                agent: agent.clone(),
                                at: now,
                            },
                            &mut scratch,
                        )?;
                    }
                    run(
                        TaskCommand::Complete {
                            by: CompletedBy::Agent(agent.clone()),
                            result: result.clone(),
                            at: now,
                        },
                        &mut scratch,
                    )?;
                }
                TaskFinish::Fail {
                    reason,
                    error_class,
                } => run(
                    TaskCommand::Fail {
                        by: by.to_string(),
                        reason: reason.clone(),
                        error_class: error_class.clone(),
                        at: now,
                    },
                    &mut scratch,
                )?,
            }
            Ok(events)
        },
        |task| {
            task.run_step()
                .map(|r| vec![r.run_id.to_string()])
                .unwrap_or_default()
        },
    )
    .await
}
