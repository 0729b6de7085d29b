//! Deciding for one held run: tick the engine until nothing pure is left to answer at
//! once, then decide everything the commit will write beside the run's own events
//! (the tasks its agent steps queue, the child runs its workflow steps start, the runs
//! to wake), so the commit only writes.

use std::sync::Arc;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::domain::Decide;
use crate::domain::ids::AgentId;
use crate::domain::run::{ErrorClass, ParentRef, Run};
use crate::domain::task::{RunStepRef, Task, TaskCommand};
use crate::domain::workspace::{Capabilities, Workspace};
use crate::engine::{self, Effect, Failure, StepOutcome, TickInput};
use crate::log::{AppendRequest, Metadata, StreamRef, StreamType};
use crate::store::domain_io;
use crate::vault::Protection;
use crate::workflow::inputs::{self, Given};
use crate::workflow::model::Workflow;

use super::ExecError;
use super::perform::{self, Call};
use super::rate;
use super::worker::{Held, Worker};

/// How many times one run is decided again in one round after pure tools answered
/// at once; a longer chain goes on in the next round, so one run cannot hold up the
/// others' commit.
const MAX_TICKS_PER_ROUND: usize = 64;

/// A `workflow` step's child run, ready to start.
struct ChildStart {
    run_id: crate::domain::ids::RunId,
    step_id: crate::domain::ids::StepId,
    definition: Arc<Workflow>,
    version: String,
    inputs: serde_json::Map<String, Value>,
}

/// One decision about one run, waiting to be committed.
pub(super) struct Decided {
    pub run_id: String,
    pub events: Vec<crate::domain::run::RunEvent>,
    pub effects: Vec<Effect>,
    /// What the commit writes beside the run's events.
    pub side: SideWrites,
    pub wake_at: Option<DateTime<Utc>>,
    pub state: Run,
    /// Outcomes of pure tools not yet decided on (the round's cap was reached): the
    /// run stays held and is decided again next round.
    pub pending: Vec<StepOutcome>,
    /// The reports of work done that this decision took in: if its commit loses to a
    /// write from outside (a pause, a cancel), they are handed back, so the decision
    /// made again on the reloaded run records them.
    pub taken: Taken,
}

/// The reports a decision took in.
pub(super) struct Taken {
    pub outcomes: Vec<StepOutcome>,
    pub compensations: Vec<engine::CompensationOutcome>,
    pub throttles: Vec<super::rate::Throttled>,
}

/// What a decision writes beside the run's own events.
#[derive(Default)]
pub(super) struct SideWrites {
    /// `task.queued` of each agent step's task, the start of each child run.
    pub appends: Vec<AppendRequest>,
    /// Runs to wake in the same transaction: parents of finished children, new
    /// children.
    pub wake: Vec<String>,
    /// Child runs new to the wake-up queue, with their priority.
    pub enqueue: Vec<(String, i32)>,
    /// The child runs started (a worker following only some runs follows these too).
    pub children: Vec<String>,
}

impl Worker {
    /// Tick a run until nothing pure is left to answer at once.
    pub(super) async fn decide(
        &self,
        run_id: &str,
        h: &mut Held,
        now: DateTime<Utc>,
    ) -> Result<Decided, ExecError> {
        // Taken, not copied: a run's state holds every step's output, so a copy per
        // decision grew with the run (a tenth of a worker's CPU on ten-step `http`
        // runs). The commit puts the decided state back; a decision or commit that
        // fails marks the run stale, and it is folded from the log again.
        let mut state = std::mem::take(&mut h.run);
        let throttles = std::mem::take(&mut h.throttles);
        // Attempts held back by a rate limit first: the tick then sees them
        // scheduled for their token's time.
        let mut events = rate::record(&mut state, &throttles, now);
        let mut outcomes = std::mem::take(&mut h.outcomes);
        let mut compensations = std::mem::take(&mut h.compensations);
        let taken = Taken {
            outcomes: outcomes.clone(),
            compensations: compensations.clone(),
            throttles,
        };
        let mut kept = Vec::new();
        let mut children = Vec::new();
        // Work decided by an earlier tick of this round is as good as in flight: a later
        // tick must not take its attempt for one a dead worker left behind.
        let mut in_flight = h.in_flight.clone();
        let mut wake_at = None;
        for _ in 0..MAX_TICKS_PER_ROUND {
            let input = TickInput {
                now,
                outcomes: std::mem::take(&mut outcomes),
                compensations: std::mem::take(&mut compensations),
                in_flight: in_flight.clone(),
                env: self.config.env.clone(),
                protection: h.protection.clone(),
            };
            let tick = engine::tick_owned(&h.definition, std::mem::take(&mut state), &input)?;
            events.extend(tick.events);
            state = tick.state;
            wake_at = tick.wake_at;
            let mut again = false;
            for effect in tick.effects {
                match effect {
                    Effect::Perform {
                        ref work,
                        ref step_id,
                        attempt,
                        before: None,
                        ref rate,
                        cost_usd,
                        ..
                    } if perform::is_pure(work) && rate.is_empty() => {
                        let run_id = state.id().unwrap_or_default();
                        let key = engine::step_idempotency_key(run_id, step_id);
                        let call = Call {
                            run_id,
                            step_id: step_id.as_str(),
                            attempt,
                            key: &key,
                            timeout_ms: None,
                            trace: &h.parent,
                            mask: &h.protection.mask,
                            tools: None,
                            cost_usd,
                        };
                        let result = perform::perform(&self.runners, &call, work, None).await;
                        outcomes.push(StepOutcome {
                            step_id: step_id.clone(),
                            attempt,
                            result,
                        });
                        again = true;
                    }
                    Effect::StartChild {
                        ref step_id,
                        attempt,
                        ref workflow,
                        ref inputs,
                        run_id: child,
                    } => match self
                        .child_start(workflow, inputs, child, &h.protection, now)
                        .await
                    {
                        Ok((definition, version, inputs)) => children.push(ChildStart {
                            run_id: child,
                            step_id: step_id.clone(),
                            definition,
                            version,
                            inputs,
                        }),
                        Err(message) => {
                            outcomes.push(StepOutcome {
                                step_id: step_id.clone(),
                                attempt,
                                result: Err(Failure {
                                    class: ErrorClass::Validation,
                                    message,
                                }),
                            });
                            again = true;
                        }
                    },
                    other => {
                        if let Effect::Perform { key, .. } | Effect::Compensate { key, .. } = &other
                        {
                            in_flight.insert(key.clone());
                        }
                        kept.push(other)
                    }
                }
            }
            if !again {
                break;
            }
        }
        let side = side_writes(
            &state,
            &kept,
            &children,
            now,
            h.trace.clone(),
            &h.protection,
        )?;
        Ok(Decided {
            run_id: run_id.to_string(),
            events,
            effects: kept,
            side,
            wake_at,
            state,
            pending: outcomes,
            taken,
        })
    }

    /// A child run's definition and inputs: its own secret and personal inputs sealed
    /// with its keys, every other input protected as the parent's values are.
    async fn child_start(
        &self,
        reference: &str,
        given: &serde_json::Map<String, Value>,
        run_id: crate::domain::ids::RunId,
        parent: &Protection,
        now: DateTime<Utc>,
    ) -> Result<(Arc<Workflow>, String, serde_json::Map<String, Value>), String> {
        let (definition, version, mut inputs) = self.child_definition(reference, given).await?;
        let id = run_id.to_string();
        let needed = engine::protect::start_keys(&definition, &id, &inputs)
            .map_err(|e| format!("sub-workflow `{reference}`: {e}"))?;
        let keys = if needed.is_empty() {
            Default::default()
        } else {
            self.store
                .ensure_subject_keys(&needed, now)
                .await
                .map_err(|e| format!("sub-workflow `{reference}`: {e}"))?
        };
        engine::protect::seal_inputs(&definition, &id, &mut inputs, &keys)
            .map_err(|e| format!("sub-workflow `{reference}`: {e}"))?;
        for (name, value) in inputs.iter_mut() {
            let own = definition
                .inputs
                .get(name)
                .is_some_and(|spec| spec.secret || spec.personal);
            if !own {
                parent.protect_value(value);
            }
        }
        Ok((definition, version, inputs))
    }

    async fn child_definition(
        &self,
        reference: &str,
        given: &serde_json::Map<String, Value>,
    ) -> Result<(Arc<Workflow>, String, serde_json::Map<String, Value>), String> {
        let (definition, version) = self
            .definitions
            .resolve(&self.store, reference)
            .await
            .map_err(|e| format!("sub-workflow `{reference}`: {e}"))?;
        let inputs = inputs::resolve(&definition.inputs, given.clone(), Given::Json).map_err(
            |problems| {
                let list: Vec<String> = problems.into_iter().map(|p| p.message).collect();
                format!("sub-workflow `{reference}`: {}", list.join("; "))
            },
        )?;
        Ok((definition, version, inputs))
    }
}

/// Decide what the run's effects start in the log: its agent steps' tasks, its child
/// runs, and the wake-ups of parents and children. Pure: the events come from the task
/// and run aggregates' `decide`.
fn side_writes(
    run: &Run,
    effects: &[Effect],
    children: &[ChildStart],
    now: DateTime<Utc>,
    trace: Option<String>,
    protection: &Protection,
) -> Result<SideWrites, ExecError> {
    // Tasks and child runs join the run's trace.
    let actor = Metadata::actor("awl").with_trace(trace);
    let mut side = SideWrites::default();
    for effect in effects {
        match effect {
            Effect::QueueTask { .. } => {
                if let Some(request) = queue_task(run, effect, now, &actor, protection)? {
                    side.appends.push(request);
                }
            }
            Effect::WakeParent(parent) => side.wake.push(parent.run_id.to_string()),
            _ => {}
        }
    }
    for child in children {
        let parent = ParentRef {
            run_id: run.id().unwrap_or_default(),
            step_id: child.step_id.clone(),
        };
        let mut command = engine::start_command(
            &child.definition,
            &child.version,
            child.run_id,
            child.inputs.clone(),
            Some(parent),
            now,
        )
        .map_err(|e| ExecError::Refused(e.to_string()))?;
        // A child runs at its workflow's priority, else its parent's; under its
        // workflow's concurrency limits like any run.
        let priority = child.definition.priority.unwrap_or(run.flow().priority);
        let flow = engine::flow::flow(&child.definition, &child.inputs, Some(priority))
            .map_err(ExecError::Refused)?;
        if let crate::domain::run::RunCommand::Start { flow: f, .. } = &mut command {
            *f = flow;
        }
        let events = Run::default()
            .decide(command)
            .map_err(|e| ExecError::Refused(e.to_string()))?;
        let stream = StreamRef::new(StreamType::Run, child.run_id.to_string());
        side.appends
            .push(domain_io::append_request(&stream, 0, &events, &actor)?);
        side.enqueue.push((child.run_id.to_string(), priority));
        side.children.push(child.run_id.to_string());
    }
    Ok(side)
}

/// The `task.queued` request of an agent step's task.
fn queue_task(
    run: &Run,
    effect: &Effect,
    now: DateTime<Utc>,
    actor: &Metadata,
    protection: &Protection,
) -> Result<Option<AppendRequest>, ExecError> {
    let Effect::QueueTask {
        task_id,
        step_id,
        attempt,
        prompt,
        capabilities,
        repository,
        branch,
        agent_hint,
        priority,
        review_required,
        runner,
    } = effect
    else {
        return Ok(None);
    };
    // The prompt is recorded in the task's stream with secrets masked and personal
    // data sealed under the subject's key: the board opens it for the agent that
    // takes the task and for people who look, and reads `[erased]` once forgotten.
    let mut prompt = prompt.clone();
    protection.protect_text(&mut prompt);
    let command = TaskCommand::Queue {
        task_id: *task_id,
        prompt,
        required_capabilities: Capabilities::new(capabilities.iter().cloned()),
        workspace: repository.clone().map(|repository| Workspace {
            repository,
            branch: branch.clone(),
        }),
        agent_hint: agent_hint
            .as_deref()
            .and_then(|a| AgentId::try_from(a).ok()),
        priority: *priority,
        review_required: *review_required,
        runner: *runner,
        run_step: Some(RunStepRef {
            run_id: run.id().unwrap_or_default(),
            step_id: step_id.clone(),
            attempt: *attempt,
            workflow: run.workflow().map(ToString::to_string),
        }),
        at: now,
    };
    let events = Task::default()
        .decide(command)
        .map_err(|e| ExecError::Refused(e.to_string()))?;
    let stream = StreamRef::new(StreamType::Task, task_id.to_string());
    Ok(Some(domain_io::append_request(&stream, 0, &events, actor)?))
}
