//! The tools: each checks its caller, then calls the board or the runs service as the
//! REST handler of the same operation does.

use std::time::Instant;

use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::model::ProgressNotificationParam;
use rmcp::service::RequestContext;
use rmcp::{RoleServer, tool, tool_router};
use tokio::task::JoinHandle;

use crate::auth::{Permission, Principal};
use crate::board::views::{AgentView, TaskPage, TaskView};
use crate::board::{BoardError, Caller, NewTask};
use crate::domain::ids::{QuestionId, TaskId};
use crate::domain::workspace::{Capabilities, Workspace};
use crate::runs::{GateDecision, StartRun};
use crate::server::caller::{
    acting_agent, caller, gate_id, idempotency_key, run_id, task_query, viewer, wait_timeout,
};
use crate::server::error::ApiError;
use crate::server::operate;
use crate::server::wire::*;

use super::params::*;
use super::{AwlMcp, PROGRESS_EVERY, ToolError, require};

/// (The return types are spelt out: the `tool` macro finds a structured result
/// only in a literal `Result<Json<T>, E>`, not behind an alias.)
type Ctx = RequestContext<RoleServer>;

#[tool_router(vis = "pub(super)")]
impl AwlMcp {
    // ---- agents ---------------------------------------------------------------------

    #[tool(
        description = "Register this agent (or update its capabilities and workspace); call it once before waiting for work. With an agent token the agent is the token's."
    )]
    async fn register(
        &self,
        Parameters(p): Parameters<RegisterRequest>,
        ctx: Ctx,
    ) -> Result<Json<AgentView>, ToolError> {
        let who = require(&ctx, Permission::Work, "register")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        let view = self
            .app
            .board
            .register(
                agent,
                Capabilities::new(&p.capabilities),
                p.workspace.map(Workspace::from),
                &caller(&who),
            )
            .await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Wait for the next task (long poll, up to timeout_seconds, capped by the server). Returns the task reserved for this agent (PENDING_ACK: call ack_task before its ack_deadline, and read its feedback), or task null when the time ran out: then call again. Sends progress notifications while waiting if the call has a progress token."
    )]
    async fn wait_for_prompt(
        &self,
        Parameters(p): Parameters<WaitRequest>,
        ctx: Ctx,
    ) -> Result<Json<WaitResult>, ToolError> {
        let who = require(&ctx, Permission::Work, "wait_for_prompt")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        let timeout = wait_timeout(p.timeout_seconds)?;
        let slot = self.app.waits.take(&who, &agent, self.app.auth_on)?;
        let started = Instant::now();
        let board = self.app.board.clone();
        // Its own task: dropping this call (the client left) must not cut a
        // reservation in half. The slot goes with the wait, not with the call.
        let waiting = tokio::spawn(async move {
            let _slot = slot;
            board.wait_for_prompt(&agent, timeout).await
        });
        let task = wait_reporting_progress(waiting, &ctx, started).await?;
        Ok(Json(WaitResult {
            task,
            waited_seconds: started.elapsed().as_secs_f64(),
        }))
    }

    #[tool(
        description = "Acknowledge a task wait_for_prompt gave you: PENDING_ACK -> IN_PROGRESS."
    )]
    async fn ack_task(
        &self,
        Parameters(p): Parameters<TaskCall>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Work, "ack_task")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        Ok(Json(
            self.app
                .board
                .ack(TaskId::from_uuid(p.task_id), &agent)
                .await?,
        ))
    }

    #[tool(
        description = "Report progress on a task you hold (a message, optionally a percentage)."
    )]
    async fn report_progress(
        &self,
        Parameters(p): Parameters<ProgressParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Work, "report_progress")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        let view = self
            .app
            .board
            .progress(TaskId::from_uuid(p.task_id), &agent, p.message, p.percent)
            .await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Record one tool call you made on a task (name, parameters, duration, success)."
    )]
    async fn report_tool_call(
        &self,
        Parameters(p): Parameters<ToolCallParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Work, "report_tool_call")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        let task = TaskId::from_uuid(p.task_id);
        Ok(Json(
            self.app
                .board
                .tool_call(task, &agent, p.into_request().into_call(who.scope()))
                .await?,
        ))
    }

    #[tool(
        description = "Ask a person a question about a task you hold: the task is BLOCKED until it is answered; the answer shows in the task (list it or wait)."
    )]
    async fn ask_question(
        &self,
        Parameters(p): Parameters<QuestionParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Work, "ask_question")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        let view = self
            .app
            .board
            .ask(TaskId::from_uuid(p.task_id), &agent, p.question)
            .await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Submit your work on a task for review (branch, commit, summary): IN_PROGRESS -> IN_REVIEW. A reviewer approves it (then complete_task) or sends it back with feedback."
    )]
    async fn submit_for_review(
        &self,
        Parameters(p): Parameters<SubmitParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Work, "submit_for_review")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        let view = self
            .app
            .board
            .submit(
                TaskId::from_uuid(p.task_id),
                &agent,
                p.branch,
                p.commit,
                p.summary,
            )
            .await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Complete a task you hold, with its result (after approval if it needs review)."
    )]
    async fn complete_task(
        &self,
        Parameters(p): Parameters<CompleteParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Work, "complete_task")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        let view = self
            .app
            .board
            .complete(
                TaskId::from_uuid(p.task_id),
                p.result,
                &Caller::Agent(agent),
            )
            .await?;
        Ok(Json(view))
    }

    #[tool(description = "Fail a task you hold, for good, saying why.")]
    async fn fail_task(
        &self,
        Parameters(p): Parameters<FailParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Work, "fail_task")?;
        let agent = acting_agent(&who, p.agent_id.as_deref())?;
        let view = self
            .app
            .board
            .fail(
                TaskId::from_uuid(p.task_id),
                p.reason,
                p.error_class,
                &Caller::Agent(agent),
            )
            .await?;
        Ok(Json(view))
    }

    // ---- operators ------------------------------------------------------------------

    #[tool(
        description = "Put a task on the board for an agent: a prompt, required capabilities, a workspace, an agent hint, a priority, whether it needs review."
    )]
    async fn send_task(
        &self,
        Parameters(p): Parameters<SendTaskRequest>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Operate, "send_task")?;
        let new = NewTask::try_from(p)?;
        let (view, _created) = self.app.board.send(new, &caller(&who), None).await?;
        Ok(Json(view))
    }

    #[tool(
        description = "The board: tasks oldest first, filtered by status (comma-separated), agent or run, paged with after/limit."
    )]
    async fn list_tasks(
        &self,
        Parameters(p): Parameters<TaskListParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskPage>, ToolError> {
        require(&ctx, Permission::Read, "list_tasks")?;
        Ok(Json(self.app.board.tasks(&task_query(p)?).await?))
    }

    #[tool(description = "Answer a task's open question: BLOCKED -> IN_PROGRESS.")]
    async fn answer_question(
        &self,
        Parameters(p): Parameters<AnswerParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Operate, "answer_question")?;
        let view = self
            .app
            .board
            .answer(
                TaskId::from_uuid(p.task_id),
                p.question_id.map(QuestionId::from_uuid),
                p.answer,
                &caller(&who),
            )
            .await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Approve the work under review: IN_REVIEW -> APPROVED (the agent then completes it)."
    )]
    async fn approve_task(
        &self,
        Parameters(p): Parameters<ApproveTaskParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Operate, "approve_task")?;
        Ok(Json(
            self.app
                .board
                .approve(TaskId::from_uuid(p.task_id), &caller(&who))
                .await?,
        ))
    }

    #[tool(
        description = "Send the work under review back with feedback: IN_REVIEW -> QUEUED; the next agent to take it sees the feedback."
    )]
    async fn request_changes(
        &self,
        Parameters(p): Parameters<ChangesParams>,
        ctx: Ctx,
    ) -> Result<Json<TaskView>, ToolError> {
        let who = require(&ctx, Permission::Operate, "request_changes")?;
        let view = self
            .app
            .board
            .request_changes(TaskId::from_uuid(p.task_id), p.feedback, &caller(&who))
            .await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Start a run of a registered workflow (name or name@version) with its inputs; an idempotency_key makes retries safe. Operators start any workflow; an agent may start a learned workflow suggest_workflow gives it (its team's, or shared)."
    )]
    async fn start_run(
        &self,
        Parameters(p): Parameters<StartRunParams>,
        ctx: Ctx,
    ) -> Result<Json<StartedRun>, ToolError> {
        let who = require(&ctx, Permission::Connect, "start_run")?;
        if !who.may(Permission::Operate) {
            self.may_start_learned(&who, &p.workflow).await?;
        }
        let key = idempotency_key(p.idempotency_key.as_deref())?;
        let request = StartRun {
            workflow: p.workflow,
            inputs: p.inputs,
            priority: p.priority,
            scope: Some(who.scope()),
        };
        let started = self
            .app
            .runs
            .start(request, &who.name, key.as_ref())
            .await?;
        Ok(Json(StartedRun::from(&started)))
    }

    #[tool(description = "A run's status: its steps, open gates, cost and outcome.")]
    async fn run_status(
        &self,
        Parameters(p): Parameters<RunParams>,
        ctx: Ctx,
    ) -> Result<Json<RunView>, ToolError> {
        require(&ctx, Permission::Read, "run_status")?;
        let (run, version) = self.app.runs.get(run_id(&p.run_id)?).await?;
        Ok(Json(RunView::of(&run, version)))
    }

    #[tool(
        description = "Pause, resume or cancel a run: paused, no step starts until it is resumed (steps in flight finish). Returns the run."
    )]
    async fn control_run(
        &self,
        Parameters(p): Parameters<ControlRunParams>,
        ctx: Ctx,
    ) -> Result<Json<RunView>, ToolError> {
        let who = require(&ctx, Permission::Operate, "control_run")?;
        let run = run_id(&p.run_id)?;
        let view = operate::control(&self.app, &who.name, run, p.action, p.reason).await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Pause or resume a whole workflow: paused, its active runs start no new step (steps in flight finish) and new runs start paused; resumed, the runs the pause held go on. Returns the bulk action over its runs."
    )]
    async fn control_workflow(
        &self,
        Parameters(p): Parameters<ControlWorkflowParams>,
        ctx: Ctx,
    ) -> Result<Json<WorkflowControlView>, ToolError> {
        let who = require(&ctx, Permission::Operate, "control_workflow")?;
        let view = operate::control_workflow(&self.app, &who.name, &p.workflow, p.action, p.reason)
            .await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Was this done before? Given what you are doing (the tools you called so far, oldest first; or the task's prompt and capabilities), the workflows that do it, best first, each with why: ones people submitted first, then ones learned from your team's own history (or shared) above the confidence threshold (0.8 unless you say). An operator starts one with start_run."
    )]
    async fn suggest_workflow(
        &self,
        Parameters(p): Parameters<SuggestRequest>,
        ctx: Ctx,
    ) -> Result<Json<SuggestionList>, ToolError> {
        let who = require(&ctx, Permission::Connect, "suggest_workflow")?;
        let suggestions = self
            .app
            .learner
            .suggest(&viewer(&who), &p.context(), p.threshold, p.limit()?)
            .await?;
        Ok(Json(SuggestionList { suggestions }))
    }

    #[tool(
        description = "The registered workflows: their versions (oldest first), the one start_run starts when no version is named, retired ones, and whether the workflow is paused."
    )]
    async fn list_workflows(&self, ctx: Ctx) -> Result<Json<WorkflowList>, ToolError> {
        require(&ctx, Permission::Read, "list_workflows")?;
        Ok(Json(WorkflowList::of(self.app.runs.workflows().await?)))
    }

    #[tool(
        description = "Retire a version of a workflow: it takes no new runs (runs on it finish on it); start_run then starts the newest version not retired. Returns the workflow's versions."
    )]
    async fn retire_version(
        &self,
        Parameters(p): Parameters<RetireVersionParams>,
        ctx: Ctx,
    ) -> Result<Json<WorkflowSummary>, ToolError> {
        let who = require(&ctx, Permission::Operate, "retire_version")?;
        let entry = self
            .app
            .runs
            .retire_version(&p.workflow, &p.version, &who.name, &p.reason)
            .await?;
        Ok(Json(WorkflowSummary::of(entry)))
    }

    #[tool(
        description = "Move runs that finished more than older_than_seconds ago out of the hot log into the archive (their views, status and history stay readable); dry_run counts them. Admins only."
    )]
    async fn archive_runs(
        &self,
        Parameters(p): Parameters<ArchiveRequest>,
        ctx: Ctx,
    ) -> Result<Json<ArchiveView>, ToolError> {
        require(&ctx, Permission::Admin, "archive_runs")?;
        Ok(Json(operate::archive(&self.app, p).await?))
    }

    #[tool(
        description = "Start a finished run again from one of its top-level steps: the steps before it keep their outputs. With inputs, a fork with those inputs changed. Returns the new run."
    )]
    async fn rerun_run(
        &self,
        Parameters(p): Parameters<RerunParams>,
        ctx: Ctx,
    ) -> Result<Json<StartedRun>, ToolError> {
        let who = require(&ctx, Permission::Operate, "rerun_run")?;
        let started = self
            .app
            .runs
            .rerun(run_id(&p.run_id)?, &p.from_step, p.inputs, &who.name)
            .await?;
        Ok(Json(StartedRun::from(&started)))
    }

    #[tool(
        description = "One action (cancel, pause, resume, retry, or rerun from the step named in from_step, keeping the outputs of the steps before it) over every run a filter selects. dry_run says how many it would touch; otherwise it is carried out in the background: returns its id and size."
    )]
    async fn bulk_action(
        &self,
        Parameters(p): Parameters<BulkRequest>,
        ctx: Ctx,
    ) -> Result<Json<BulkView>, ToolError> {
        let who = require(&ctx, Permission::Operate, "bulk_action")?;
        let (_, view) = operate::bulk(&self.app, &who.name, p).await?;
        Ok(Json(view))
    }

    #[tool(
        description = "Ask one of awl's own agents (see its definitions in GET /api/v1/agent-definitions): it plans tool calls with its model, runs them and answers (plan, execute, solve), every step recorded. Sends a progress notification for each phase and the reply's text as it streams, if the call has a progress token. Returns the answer, the plan, the tools used, timings and cost."
    )]
    async fn ask_agent(
        &self,
        Parameters(p): Parameters<AskAgentParams>,
        ctx: Ctx,
    ) -> Result<Json<crate::agents::SolveResult>, ToolError> {
        let who = require(&ctx, Permission::Operate, "ask_agent")?;
        let rx = operate::ask_agent(&self.app, &p.agent, &p.prompt, &who.name)?;
        Ok(Json(self.solve_reporting_progress(rx, &ctx).await?))
    }

    #[tool(
        description = "Decide a gate of a run: approve (the run goes on) or reject with a comment saying why (its on_reject applies). Returns the run."
    )]
    async fn approve_gate(
        &self,
        Parameters(p): Parameters<GateParams>,
        ctx: Ctx,
    ) -> Result<Json<RunView>, ToolError> {
        let who = require(&ctx, Permission::Operate, "approve_gate")?;
        let approve = p.decision == GateVerdict::Approve;
        let decision = GateDecision::new(approve, p.comment)?;
        let (run, version) = self
            .app
            .runs
            .decide_gate(gate_id(&p.gate_id)?, decision, &who.name)
            .await?;
        Ok(Json(RunView::of(&run, version)))
    }
}

impl AwlMcp {
    /// The solve's updates until its result, each phase (and the reply's text as it
    /// streams) sent as a progress notification when the call carries a progress
    /// token. A cancelled call returns at once; the solve runs on to its end.
    async fn solve_reporting_progress(
        &self,
        mut rx: tokio::sync::mpsc::UnboundedReceiver<operate::SolveUpdate>,
        ctx: &Ctx,
    ) -> Result<crate::agents::SolveResult, ToolError> {
        use crate::domain::solve::SolveEvent;
        let token = ctx.meta.get_progress_token();
        let mut sent = 0u32;
        loop {
            let update = tokio::select! {
                update = rx.recv() => update,
                _ = ctx.ct.cancelled() => {
                    return Err(ApiError::new(
                        axum::http::StatusCode::CONFLICT,
                        "cancelled",
                        "the client cancelled the call (the solve goes on: read it with its id)",
                    )
                    .into());
                }
            };
            let message = match update {
                None => {
                    return Err(ApiError::from(crate::agents::AgentError::Internal(
                        "the solve's task ended without an answer".into(),
                    ))
                    .into());
                }
                Some(operate::SolveUpdate::Done(result)) => {
                    return Ok(result.map_err(ApiError::from)?);
                }
                Some(operate::SolveUpdate::Token(text)) => text,
                Some(operate::SolveUpdate::Event(event)) => match event {
                    SolveEvent::Started { setup, .. } => {
                        format!("started: {} on {}", setup.agent, setup.model)
                    }
                    SolveEvent::ModelReplied { reply, .. } => format!(
                        "{} {}: {}",
                        reply.phase.as_str(),
                        reply.iteration,
                        if reply.tool_calls.is_empty() {
                            "answered".to_string()
                        } else {
                            reply
                                .tool_calls
                                .iter()
                                .map(|c| c.tool.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        }
                    ),
                    SolveEvent::ToolFinished { result, .. } => format!(
                        "execute: {} {} in {} ms",
                        result.tool,
                        if result.outcome.is_ok() {
                            "ok"
                        } else {
                            "failed"
                        },
                        result.duration_ms
                    ),
                    SolveEvent::Finished { .. } => "finished".into(),
                    SolveEvent::Failed { reason, .. } => format!("failed: {reason}"),
                },
            };
            if let Some(token) = token.clone() {
                sent += 1;
                let note =
                    ProgressNotificationParam::new(token, f64::from(sent)).with_message(message);
                if let Err(e) = ctx.peer.notify_progress(note).await {
                    tracing::debug!(error = %e, "could not send a progress notification");
                }
            }
        }
    }

    /// A token without Operate may start a run only of a learned workflow suggested to
    /// it (its scope's or shared), and only if it is an agent's: what an agent asked
    /// `suggest_workflow` for, it may then start.
    async fn may_start_learned(&self, who: &Principal, workflow: &str) -> Result<(), ToolError> {
        let name = workflow.split('@').next().unwrap_or_default();
        let learned =
            who.may(Permission::Work) && self.app.learner.suggestable(&viewer(who), name).await?;
        if learned {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "{} token may not call start_run for {name} (it needs Operate; an agent may start \
             only a learned workflow of its own scope or shared)",
            who.role.with_article()
        ))
        .into())
    }
}

/// Wait for the board's answer, sending a progress notification at once and then
/// every [`PROGRESS_EVERY`] if the call carries a progress token. A cancelled call
/// returns at once (the wait itself runs on; see [`super`]).
async fn wait_reporting_progress(
    mut waiting: JoinHandle<Result<Option<TaskView>, BoardError>>,
    ctx: &Ctx,
    started: Instant,
) -> Result<Option<TaskView>, ToolError> {
    let token = ctx.meta.get_progress_token();
    let mut ticks = tokio::time::interval(PROGRESS_EVERY);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut sent = 0u32;
    loop {
        tokio::select! {
            joined = &mut waiting => {
                return match joined {
                    Ok(found) => found.map_err(ToolError::from),
                    Err(e) => Err(ApiError::new(
                        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
                        "internal",
                        format!("the wait failed: {e}"),
                    )
                    .into()),
                };
            }
            _ = ctx.ct.cancelled() => {
                return Err(ApiError::new(
                    axum::http::StatusCode::CONFLICT,
                    "cancelled",
                    "the client cancelled the wait",
                )
                .into());
            }
            _ = ticks.tick(), if token.is_some() => {
                let Some(token) = token.clone() else { continue };
                sent += 1;
                let note = ProgressNotificationParam::new(token, f64::from(sent)).with_message(
                    format!("waiting for a task ({:.0} s)", started.elapsed().as_secs_f64()),
                );
                if let Err(e) = ctx.peer.notify_progress(note).await {
                    tracing::debug!(error = %e, "could not send a progress notification");
                }
            }
        }
    }
}
