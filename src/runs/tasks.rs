//! Finishing an agent step's task by hand: for a task no agent will take, or before
//! any agent is connected. Completing takes the task as the named agent first (assign,
//! deliver, ack, as the board would), so the task's history reads like any other; the
//! run waiting for the task is woken in the same transaction.

use chrono::Duration;
use serde_json::Value;

use crate::domain::Decide;
use crate::domain::ids::{AgentId, TaskId};
use crate::domain::task::{CompletedBy, Task, TaskCommand, TaskError, TaskEvent, TaskStatus};
use crate::log::{Metadata, StreamRef, StreamType};
use crate::store::command::Command;

use super::{Runs, RunsError};

/// How a person ends an agent task by hand.
#[derive(Debug, Clone)]
pub enum TaskFinish {
    /// Take the task as `agent` and complete it with `result`.
    Complete { agent: AgentId, result: Value },
    Fail {
        reason: String,
        error_class: Option<String>,
    },
}

impl Runs {
    /// End a task as `by`; the run waiting for it is woken.
    pub async fn finish_task(
        &self,
        task_id: TaskId,
        finish: TaskFinish,
        by: &str,
    ) -> Result<Task, RunsError> {
        let stream = StreamRef::new(StreamType::Task, task_id.to_string());
        let now = self.now();
        let done = Command::new(&self.store, &stream, Metadata::actor(by))
            .wakes(now, |task: &Task| {
                task.run_step()
                    .map(|r| vec![r.run_id.to_string()])
                    .unwrap_or_default()
            })
            .run(|task| {
                if task.id().is_none() {
                    return Err(RunsError::TaskNotFound(task_id));
                }
                let commands = match &finish {
                    TaskFinish::Complete { agent, result } => {
                        let mut commands = Vec::new();
                        let status = task.status();
                        if status == Some(TaskStatus::Queued) {
                            commands.push(TaskCommand::Assign {
                                agent: agent.clone(),
                                at: now,
                            });
                        }
                        if matches!(status, Some(TaskStatus::Queued | TaskStatus::Assigned)) {
                            commands.push(TaskCommand::Deliver {
                                agent: agent.clone(),
                                ack_deadline: now + Duration::seconds(30),
                                at: now,
                            });
                        }
                        if matches!(
                            status,
                            Some(
                                TaskStatus::Queued | TaskStatus::Assigned | TaskStatus::PendingAck
                            )
                        ) {
                            commands.push(TaskCommand::Ack {
                                agent: agent.clone(),
                                at: now,
                            });
                        }
                        commands.push(TaskCommand::Complete {
                            by: CompletedBy::Agent(agent.clone()),
                            result: result.clone(),
                            at: now,
                        });
                        commands
                    }
                    TaskFinish::Fail {
                        reason,
                        error_class,
                    } => vec![TaskCommand::Fail {
                        by: by.to_string(),
                        reason: reason.clone(),
                        error_class: error_class.clone(),
                        at: now,
                    }],
                };
                Ok(decide_all(task, commands)?)
            })
            .await?;
        Ok(done.state)
    }
}

/// Decide `commands` one after another, each on the state the previous ones left.
fn decide_all(task: &Task, commands: Vec<TaskCommand>) -> Result<Vec<TaskEvent>, TaskError> {
    let mut scratch = task.clone();
    let mut events = Vec::new();
    for command in commands {
        for e in scratch.decide(command)? {
            cqrs_es::Aggregate::apply(&mut scratch, e.clone());
            events.push(e);
        }
    }
    Ok(events)
}
