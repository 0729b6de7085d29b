//! Every transition of a task after dispatch, and registering agents.
//!
//! Each operation is one [`Command`] on the task's (or agent's) stream: decided first on
//! the board's in-memory view, again on the stream as stored if the view refuses it
//! (the view may be behind another server's write), appended with the version decided
//! on. A stream read from the store refreshes the view as it is read, so a stale entry
//! does not outlive the command that found it stale. A task that ends wakes the run
//! whose agent step it is, in the same transaction.

use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::Instrument;

use crate::domain::Decide;
use crate::domain::agent::{Agent, AgentCommand};
use crate::domain::ids::{AgentId, QuestionId, TaskId};
use crate::domain::task::{CompletedBy, Task, TaskCommand, TaskEvent};
use crate::domain::workspace::{Capabilities, Workspace};
use crate::error::Classified;
use crate::log::Metadata;
use crate::store::command::Command;
use crate::telemetry;

use super::views::{AgentView, TaskView};
use super::{Board, BoardError, Caller, ToolCall, agent_stream, task_stream};

impl Board {
    /// Register an (external) agent or update its capabilities and workspace.
    pub async fn register(
        &self,
        agent_id: AgentId,
        capabilities: Capabilities,
        workspace: Option<Workspace>,
        by: &Caller,
    ) -> Result<AgentView, BoardError> {
        self.register_as(agent_id, capabilities, workspace, false, by)
            .await
    }

    /// Register one of awl's own agents (run by the built-in runner in this process).
    pub async fn register_builtin(
        &self,
        agent_id: AgentId,
        capabilities: Capabilities,
        by: &Caller,
    ) -> Result<AgentView, BoardError> {
        self.register_as(agent_id, capabilities, None, true, by)
            .await
    }

    async fn register_as(
        &self,
        agent_id: AgentId,
        capabilities: Capabilities,
        workspace: Option<Workspace>,
        builtin: bool,
        by: &Caller,
    ) -> Result<AgentView, BoardError> {
        if let Some(w) = &workspace
            && w.repository.trim().is_empty()
        {
            return Err(BoardError::Invalid(
                "workspace.repository must not be empty".into(),
            ));
        }
        self.touch(&agent_id);
        let stream = agent_stream(&agent_id);
        let done = Command::new(&self.inner.store, &stream, Metadata::actor(by.actor()))
            .run(|agent: &Agent| {
                agent
                    .decide(AgentCommand::Register {
                        agent_id: agent_id.clone(),
                        capabilities: capabilities.clone(),
                        workspace: workspace.clone(),
                        builtin,
                        at: self.now(),
                    })
                    .map_err(BoardError::from)
            })
            .await?;
        let mut st = self.state();
        st.view
            .put_agent(agent_id.clone(), done.state.clone(), done.version);
        let seen = st.last_seen.get(&agent_id).copied();
        Ok(AgentView::of(&done.state, done.version, seen))
    }

    /// The agent confirms it has the task and starts working.
    pub async fn ack(&self, task: TaskId, agent: &AgentId) -> Result<TaskView, BoardError> {
        self.touch(agent);
        self.command(task, &Caller::Agent(agent.clone()), "task ack", |now| {
            TaskCommand::Ack {
                agent: agent.clone(),
                at: now,
            }
        })
        .await
    }

    pub async fn progress(
        &self,
        task: TaskId,
        agent: &AgentId,
        message: String,
        percent: Option<u8>,
    ) -> Result<TaskView, BoardError> {
        self.touch(agent);
        self.command(
            task,
            &Caller::Agent(agent.clone()),
            "task progress",
            |now| TaskCommand::ReportProgress {
                agent: agent.clone(),
                message: message.clone(),
                percent,
                at: now,
            },
        )
        .await
    }

    pub async fn tool_call(
        &self,
        task: TaskId,
        agent: &AgentId,
        call: ToolCall,
    ) -> Result<TaskView, BoardError> {
        self.touch(agent);
        self.command(
            task,
            &Caller::Agent(agent.clone()),
            "task tool_call",
            |now| TaskCommand::ReportToolCall {
                agent: agent.clone(),
                name: call.name.clone(),
                parameters: call.parameters.clone(),
                output: call.output.clone(),
                duration_ms: call.duration_ms,
                success: call.success,
                scope: call.scope.clone(),
                at: now,
            },
        )
        .await
    }

    /// The agent blocks on a question; returns the task with its open question.
    pub async fn ask(
        &self,
        task: TaskId,
        agent: &AgentId,
        question: String,
    ) -> Result<TaskView, BoardError> {
        self.touch(agent);
        let question_id = QuestionId::new();
        self.command(task, &Caller::Agent(agent.clone()), "task ask", |now| {
            TaskCommand::AskQuestion {
                agent: agent.clone(),
                question_id,
                question: question.clone(),
                at: now,
            }
        })
        .await
    }

    /// Answer the task's open question (`question_id` defaults to it).
    pub async fn answer(
        &self,
        task: TaskId,
        question_id: Option<QuestionId>,
        answer: String,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        self.act(task, by, "task answer", |t, now| {
            let question_id = question_id
                .or_else(|| t.open_question().map(|q| q.question_id))
                .unwrap_or_default();
            Ok(t.decide(TaskCommand::Answer {
                question_id,
                answer: answer.clone(),
                by: by_name.clone(),
                at: now,
            })?)
        })
        .await
    }

    pub async fn submit(
        &self,
        task: TaskId,
        agent: &AgentId,
        branch: Option<String>,
        commit: Option<String>,
        summary: String,
    ) -> Result<TaskView, BoardError> {
        self.touch(agent);
        self.command(task, &Caller::Agent(agent.clone()), "task submit", |now| {
            TaskCommand::SubmitForReview {
                agent: agent.clone(),
                branch: branch.clone(),
                commit: commit.clone(),
                summary: summary.clone(),
                at: now,
            }
        })
        .await
    }

    pub async fn approve(&self, task: TaskId, by: &Caller) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        self.command(task, by, "task approve", |now| TaskCommand::Approve {
            by: by_name.clone(),
            at: now,
        })
        .await
    }

    /// Send the work back to the queue; the feedback goes to the next agent.
    pub async fn request_changes(
        &self,
        task: TaskId,
        feedback: String,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        self.command(task, by, "task request_changes", |now| {
            TaskCommand::RequestChanges {
                by: by_name.clone(),
                feedback: feedback.clone(),
                at: now,
            }
        })
        .await
    }

    /// Complete a task: by its agent, or by a person (`Caller::User`).
    pub async fn complete(
        &self,
        task: TaskId,
        result: Value,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let completed_by = match by {
            Caller::Agent(agent) => {
                self.touch(agent);
                CompletedBy::Agent(agent.clone())
            }
            Caller::User(user) => CompletedBy::User(user.clone()),
        };
        self.command(task, by, "task complete", |now| TaskCommand::Complete {
            by: completed_by.clone(),
            result: result.clone(),
            at: now,
        })
        .await
    }

    /// Fail a task for good. An agent may fail only a task it holds.
    pub async fn fail(
        &self,
        task: TaskId,
        reason: String,
        error_class: Option<String>,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        let agent = match by {
            Caller::Agent(agent) => {
                self.touch(agent);
                Some(agent.clone())
            }
            Caller::User(_) => None,
        };
        self.act(task, by, "task fail", |t, now| {
            if let Some(agent) = &agent
                && t.assignee() != Some(agent)
            {
                return Err(BoardError::Forbidden(format!(
                    "task {task} is not held by agent {agent}: an agent may fail only its own task"
                )));
            }
            Ok(t.decide(TaskCommand::Fail {
                by: by_name.clone(),
                reason: reason.clone(),
                error_class: error_class.clone(),
                at: now,
            })?)
        })
        .await
    }

    pub async fn cancel(
        &self,
        task: TaskId,
        reason: String,
        by: &Caller,
    ) -> Result<TaskView, BoardError> {
        let by_name = by.actor();
        self.command(task, by, "task cancel", |now| TaskCommand::Cancel {
            by: by_name.clone(),
            reason: reason.clone(),
            at: now,
        })
        .await
    }

    /// One command, decided on the task's state at `now`.
    async fn command<F>(
        &self,
        task: TaskId,
        by: &Caller,
        op: &'static str,
        make: F,
    ) -> Result<TaskView, BoardError>
    where
        F: Fn(DateTime<Utc>) -> TaskCommand,
    {
        self.act(task, by, op, |t, now| Ok(t.decide(make(now))?))
            .await
    }

    /// Decide on the task's state (the view's, or the store's if the view refuses),
    /// append with that version, and wake the run waiting for the task when it ends.
    pub(super) async fn act<F>(
        &self,
        id: TaskId,
        by: &Caller,
        // The operation as traced: `task ack`, `task complete`, ...
        op: &'static str,
        decide: F,
    ) -> Result<TaskView, BoardError>
    where
        F: Fn(&Task, DateTime<Utc>) -> Result<Vec<TaskEvent>, BoardError>,
    {
        let own = telemetry::task_span(op, &id.to_string());
        let acting = self.decide_and_append(id, by, decide);
        let result = match &own {
            Some(span) => acting.instrument(span.clone()).await,
            None => acting.await,
        };
        match (&result, &own) {
            (Err(e), Some(span)) => telemetry::span_failed(span, e.code()),
            (Ok(_), None) => telemetry::task_done(op, &id.to_string()),
            _ => {}
        }
        result
    }

    async fn decide_and_append<F>(
        &self,
        id: TaskId,
        by: &Caller,
        decide: F,
    ) -> Result<TaskView, BoardError>
    where
        F: Fn(&Task, DateTime<Utc>) -> Result<Vec<TaskEvent>, BoardError>,
    {
        let stream = task_stream(id);
        let cached = {
            let st = self.state();
            st.view.task(&id).map(|e| (e.state.clone(), e.version))
        };
        let known_version = cached.as_ref().map(|(_, version)| *version);
        let now = self.now();
        let done = Command::new(&self.inner.store, &stream, Metadata::actor(by.actor()))
            .cached(cached)
            // A cached task found stale (another server moved it) is refreshed from the
            // stream as read, even when the decision on it is then refused: a waiter
            // whose reservation lost must not pick the same task again from the view.
            .on_load(move |task: &Task, version| {
                if let Some(known) = known_version
                    && task.id().is_some()
                {
                    // Moved on since the view saw it: another writer got there first.
                    self.refresh(id, task.clone(), version, version > known);
                }
            })
            .wakes(now, |task: &Task| {
                task.is_terminal()
                    .then(|| task.run_step().map(|r| r.run_id.to_string()))
                    .flatten()
                    .into_iter()
                    .collect()
            })
            .run(|task| {
                if task.id().is_none() {
                    return Err(BoardError::TaskNotFound(id));
                }
                decide(task, now)
            })
            .await?;
        let recorded = done.state.prompt().to_string();
        let view = if done.appended == 0 {
            TaskView::of(&done.state, done.version)
        } else {
            self.observe(id, done.state, done.version)
        };
        self.opened(view, &recorded).await
    }
}
