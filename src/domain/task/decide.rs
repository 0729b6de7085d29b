//! The rules of a task: which command is allowed in which state, and by whom.
//!
//! Checks run in a fixed order, so the error names the most basic problem first: the
//! task must exist, must not be finished, must be in a state the command is allowed
//! in, the actor must be the assignee (for an agent's own reports), and finally the
//! command's data must make sense.

use crate::domain::Decide;
use crate::domain::ids::{AgentId, TaskId};

use super::TaskStatus::{self, *};
use super::{CompletedBy, RequeueReason, Task, TaskAction, TaskCommand, TaskError, TaskEvent};

impl Decide for Task {
    fn decide(&self, command: TaskCommand) -> Result<Vec<TaskEvent>, TaskError> {
        let action = command.action();
        let (Some(task), Some(status)) = (self.task_id, self.status) else {
            return match command {
                TaskCommand::Queue {
                    task_id,
                    prompt,
                    required_capabilities,
                    workspace,
                    agent_hint,
                    priority,
                    review_required,
                    runner,
                    run_step,
                    at,
                } => {
                    if prompt.trim().is_empty() {
                        return Err(TaskError::Empty {
                            task: task_id,
                            action,
                            field: "prompt",
                        });
                    }
                    Ok(vec![TaskEvent::Queued {
                        task_id,
                        prompt,
                        required_capabilities,
                        workspace,
                        agent_hint,
                        priority,
                        review_required,
                        runner,
                        run_step,
                        at,
                    }])
                }
                _ => Err(TaskError::NotQueued { action }),
            };
        };
        if let Some(ending) = &self.ending {
            return Err(TaskError::Finished {
                task,
                action,
                ending: ending.clone(),
            });
        }
        let check = Check {
            state: self,
            task,
            status,
            action,
        };

        let event = match command {
            TaskCommand::Queue { .. } => return Err(TaskError::AlreadyQueued { task, status }),

            TaskCommand::Assign { agent, at } => {
                check.status_in(&[Queued])?;
                TaskEvent::Assigned {
                    agent_id: agent,
                    at,
                }
            }

            TaskCommand::Deliver {
                agent,
                ack_deadline,
                at,
            } => {
                check.status_in(&[Assigned])?;
                check.by_assignee(&agent)?;
                if ack_deadline <= at {
                    return Err(TaskError::DeadlineNotAfterDelivery {
                        task,
                        ack_deadline,
                        at,
                    });
                }
                TaskEvent::Delivered {
                    agent_id: agent,
                    ack_deadline,
                    at,
                }
            }

            TaskCommand::Ack { agent, at } => {
                check.status_in(&[PendingAck])?;
                check.by_assignee(&agent)?;
                TaskEvent::Acknowledged {
                    agent_id: agent,
                    at,
                }
            }

            TaskCommand::Requeue { reason, at } => {
                check.status_in(requeue_allowed_from(reason))?;
                if reason == RequeueReason::AckTimeout
                    && let Some(deadline) = self.ack_deadline
                    && at < deadline
                {
                    return Err(TaskError::AckNotDue { task, deadline, at });
                }
                TaskEvent::Requeued {
                    reason,
                    previous_agent: self.assignee.clone(),
                    at,
                }
            }

            TaskCommand::ReportProgress {
                agent,
                message,
                percent,
                at,
            } => {
                check.status_in(&[InProgress])?;
                check.by_assignee(&agent)?;
                if let Some(percent) = percent
                    && percent > 100
                {
                    return Err(TaskError::PercentOutOfRange { task, percent });
                }
                TaskEvent::ProgressReported {
                    agent_id: agent,
                    message,
                    percent,
                    at,
                }
            }

            TaskCommand::ReportToolCall {
                agent,
                name,
                parameters,
                output,
                duration_ms,
                success,
                scope,
                at,
            } => {
                check.status_in(&[InProgress, Blocked])?;
                check.by_assignee(&agent)?;
                check.not_empty("tool name", &name)?;
                TaskEvent::ToolCallReported {
                    agent_id: agent,
                    name,
                    parameters,
                    output,
                    duration_ms,
                    success,
                    scope,
                    at,
                }
            }

            TaskCommand::AskQuestion {
                agent,
                question_id,
                question,
                at,
            } => {
                check.status_in(&[InProgress])?;
                check.by_assignee(&agent)?;
                check.not_empty("question", &question)?;
                TaskEvent::QuestionAsked {
                    agent_id: agent,
                    question_id,
                    question,
                    at,
                }
            }

            TaskCommand::Answer {
                question_id,
                answer,
                by,
                at,
            } => {
                check.status_in(&[Blocked])?;
                if let Some(open) = &self.open_question
                    && open.question_id != question_id
                {
                    return Err(TaskError::WrongQuestion {
                        task,
                        open: open.question_id,
                        given: question_id,
                    });
                }
                check.not_empty("answer", &answer)?;
                TaskEvent::QuestionAnswered {
                    question_id,
                    answer,
                    by,
                    at,
                }
            }

            TaskCommand::SubmitForReview {
                agent,
                branch,
                commit,
                summary,
                at,
            } => {
                check.status_in(&[InProgress])?;
                check.by_assignee(&agent)?;
                TaskEvent::SubmittedForReview {
                    agent_id: agent,
                    branch,
                    commit,
                    summary,
                    at,
                }
            }

            TaskCommand::Approve { by, at } => {
                check.status_in(&[InReview])?;
                TaskEvent::Approved { by, at }
            }

            TaskCommand::RequestChanges { by, feedback, at } => {
                check.status_in(&[InReview])?;
                check.not_empty("feedback", &feedback)?;
                TaskEvent::ChangesRequested { by, feedback, at }
            }

            TaskCommand::Complete { by, result, at } => {
                if status == InProgress && self.review_required {
                    return Err(TaskError::ReviewRequired { task });
                }
                check.status_in(complete_allowed_from(self.review_required))?;
                if let CompletedBy::Agent(agent) = &by {
                    check.by_assignee(agent)?;
                }
                TaskEvent::Completed { by, result, at }
            }

            TaskCommand::Fail {
                by,
                reason,
                error_class,
                at,
            } => {
                check.status_in(&TaskStatus::ACTIVE)?;
                TaskEvent::Failed {
                    by,
                    reason,
                    error_class,
                    at,
                }
            }

            TaskCommand::Cancel { by, reason, at } => {
                check.status_in(&TaskStatus::ACTIVE)?;
                TaskEvent::Cancelled { by, reason, at }
            }
        };
        Ok(vec![event])
    }
}

impl Task {
    /// The statuses `event` may follow, by the same rules `decide` applies to the
    /// command that records it (`None` for `task.queued`: only a task not yet on the
    /// board). `awl check` holds a recorded stream to this.
    pub fn allowed_before(&self, event: &TaskEvent) -> Option<&'static [TaskStatus]> {
        Some(match event {
            TaskEvent::Queued { .. } => return None,
            TaskEvent::Assigned { .. } => &[Queued],
            TaskEvent::Delivered { .. } => &[Assigned],
            TaskEvent::Acknowledged { .. } => &[PendingAck],
            TaskEvent::Requeued { reason, .. } => requeue_allowed_from(*reason),
            TaskEvent::ProgressReported { .. } => &[InProgress],
            TaskEvent::ToolCallReported { .. } => &[InProgress, Blocked],
            TaskEvent::QuestionAsked { .. } => &[InProgress],
            TaskEvent::QuestionAnswered { .. } => &[Blocked],
            TaskEvent::SubmittedForReview { .. } => &[InProgress],
            TaskEvent::Approved { .. } | TaskEvent::ChangesRequested { .. } => &[InReview],
            TaskEvent::Completed { .. } => complete_allowed_from(self.review_required),
            TaskEvent::Failed { .. } | TaskEvent::Cancelled { .. } => &TaskStatus::ACTIVE,
        })
    }

    /// Whether `event` may follow this state.
    pub fn permits(&self, event: &TaskEvent) -> bool {
        match (self.allowed_before(event), self.status) {
            (None, status) => status.is_none(),
            (Some(allowed), Some(status)) => allowed.contains(&status),
            (Some(_), None) => false,
        }
    }
}

/// Where a task may be requeued from, by reason: an ack timeout needs a delivered
/// prompt; a lost agent can be holding the task at any point of its work.
fn requeue_allowed_from(reason: RequeueReason) -> &'static [TaskStatus] {
    match reason {
        RequeueReason::AckTimeout => &[PendingAck],
        RequeueReason::DeliveryFailed => &[Assigned, PendingAck],
        RequeueReason::AgentLost => &[Assigned, PendingAck, InProgress, Blocked],
    }
}

/// Where a task may be completed from: after approval, or straight from the work when
/// no review is required.
fn complete_allowed_from(review_required: bool) -> &'static [TaskStatus] {
    if review_required {
        &[Approved]
    } else {
        &[InProgress, Approved]
    }
}

/// The checks shared by every command on an existing, unfinished task.
struct Check<'a> {
    state: &'a Task,
    task: TaskId,
    status: TaskStatus,
    action: TaskAction,
}

impl Check<'_> {
    fn status_in(&self, allowed: &'static [TaskStatus]) -> Result<(), TaskError> {
        if allowed.contains(&self.status) {
            Ok(())
        } else {
            Err(TaskError::InvalidTransition {
                task: self.task,
                status: self.status,
                action: self.action,
                allowed,
            })
        }
    }

    fn by_assignee(&self, agent: &AgentId) -> Result<(), TaskError> {
        if self.state.assignee.as_ref() == Some(agent) {
            Ok(())
        } else {
            Err(TaskError::NotAssignee {
                task: self.task,
                action: self.action,
                agent: agent.clone(),
                assignee: self.state.assignee.clone(),
            })
        }
    }

    fn not_empty(&self, field: &'static str, value: &str) -> Result<(), TaskError> {
        if value.trim().is_empty() {
            Err(TaskError::Empty {
                task: self.task,
                action: self.action,
                field,
            })
        } else {
            Ok(())
        }
    }
}
