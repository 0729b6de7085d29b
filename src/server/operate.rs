//! Operators' actions on runs, done the same way by REST and MCP: pausing, resuming and
//! cancelling one run (with the reason recorded, a default one when none is given),
//! and bulk actions (a dry run's count, or a planned action carried out in the
//! background), and pausing or resuming a whole workflow; asking one of awl's own
//! agents (the solve runs in a task of its own, so a client that leaves does not cut
//! it off). Both adapters call these, so the two cannot drift apart.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::domain::bulk::{BulkAction, BulkFilter};
use crate::domain::ids::RunId;
use crate::domain::solve::Origin;

use super::AppState;
use super::error::ApiError;
use super::wire::{
    ArchiveRequest, ArchiveView, BulkRequest, BulkView, RunView, WorkflowControlView,
};

type Api<T> = Result<T, ApiError>;

/// What an operator does to one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunControl {
    /// No step starts until it is resumed; steps in flight finish.
    Pause,
    Resume,
    Cancel,
}

/// Act on `run` as `by`; the answer is the run after it, as people see it.
pub async fn control(
    app: &AppState,
    by: &str,
    run: RunId,
    action: RunControl,
    reason: Option<String>,
) -> Api<RunView> {
    match action {
        RunControl::Pause => {
            let reason = reason.unwrap_or_else(|| format!("paused by {by}"));
            app.runs.pause(run, by, &reason).await?;
        }
        RunControl::Resume => {
            app.runs.resume(run, by).await?;
        }
        RunControl::Cancel => {
            let reason = reason.unwrap_or_else(|| format!("cancelled by {by}"));
            app.runs.cancel(run, by, &reason).await?;
        }
    }
    let (run, version) = app.runs.get(run).await?;
    Ok(RunView::of(&run, version))
}

/// A bulk action as `by` asked for it: with `dry_run`, how many runs it would touch
/// (and the first of them); otherwise planned, carried out in the background, and
/// answered at once with its id and size. The flag says which it was.
pub async fn bulk(app: &AppState, by: &str, req: BulkRequest) -> Api<(bool, BulkView)> {
    let action: BulkAction = req.action.parse().map_err(ApiError::invalid)?;
    crate::domain::bulk::check_step(action, req.from_step.as_deref())
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let filter = BulkFilter {
        workflow: req.workflow,
        statuses: req.statuses.iter().map(|s| s.to_uppercase()).collect(),
        since: req.since,
        until: req.until,
        inputs: req.inputs.into_iter().collect(),
        run_ids: req.run_ids.into_iter().map(RunId::from_uuid).collect(),
    };
    if req.dry_run {
        let selected = app.bulk.select(&filter).await?;
        return Ok((true, BulkView::dry_run(action, req.from_step, &selected)));
    }
    let reason = req
        .reason
        .unwrap_or_else(|| format!("bulk {} by {by}", action.as_str()));
    let planned = app
        .bulk
        .start(action, req.from_step, filter, &reason, by)
        .await?;
    Ok((false, BulkView::of(&planned)))
}

/// What an operator does to a whole workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum WorkflowControl {
    /// Hold its active runs (no new step starts) and start new runs paused.
    Pause,
    /// Let the runs the pause held, and the runs that queued, go on.
    Resume,
}

/// Pause or resume `workflow` as `by`: recorded on the workflow's stream, then a bulk
/// action over its runs carried out in the background (its id in the answer).
pub async fn control_workflow(
    app: &AppState,
    by: &str,
    workflow: &str,
    action: WorkflowControl,
    reason: Option<String>,
) -> Api<WorkflowControlView> {
    let planned = match action {
        WorkflowControl::Pause => {
            let reason = reason.unwrap_or_else(|| format!("paused by {by}"));
            Some(app.bulk.pause_workflow(workflow, &reason, by).await?)
        }
        WorkflowControl::Resume => app.bulk.resume_workflow(workflow, by).await?,
    };
    if let Some(planned) = &planned {
        app.bulk.carry_out_in_background(planned, by);
    }
    Ok(WorkflowControlView {
        workflow: workflow.to_string(),
        paused: action == WorkflowControl::Pause,
        bulk: planned.as_ref().map(BulkView::of),
    })
}

/// Archive the runs that finished more than the request's age ago (or, for a dry run,
/// count them).
pub async fn archive(app: &AppState, req: ArchiveRequest) -> Api<ArchiveView> {
    let seconds = i64::try_from(req.older_than_seconds)
        .ok()
        .and_then(chrono::Duration::try_seconds)
        .ok_or_else(|| ApiError::invalid("older_than_seconds is too large"))?;
    let (cutoff, pass) = app.runs.archive_older_than(seconds, req.dry_run).await?;
    Ok(ArchiveView {
        finished_before: cutoff,
        selected: pass.selected.len(),
        archived: pass.runs,
        tasks: pass.tasks,
        events: pass.events,
        partitions: pass.partitions,
        dry_run: req.dry_run,
    })
}

/// What a solve started for a request tells it as it goes.
pub enum SolveUpdate {
    Event(crate::domain::solve::SolveEvent),
    Token(String),
    Done(Result<crate::agents::SolveResult, crate::agents::AgentError>),
}

struct Forward(tokio::sync::mpsc::UnboundedSender<SolveUpdate>);

impl crate::agents::Observer for Forward {
    fn event(&mut self, event: &crate::domain::solve::SolveEvent) {
        let _ = self.0.send(SolveUpdate::Event(event.clone()));
    }
    fn token(&mut self, text: &str) {
        let _ = self.0.send(SolveUpdate::Token(text.to_string()));
    }
}

/// Ask `agent` in the background, as `by`: the updates come on the receiver, the
/// last one `Done`. An unknown agent or an empty prompt is refused before anything
/// is recorded.
pub fn ask_agent(
    app: &AppState,
    agent: &str,
    prompt: &str,
    by: &str,
) -> Api<tokio::sync::mpsc::UnboundedReceiver<SolveUpdate>> {
    app.agents.get(agent)?;
    if prompt.trim().is_empty() {
        return Err(ApiError::invalid("`prompt` is empty"));
    }
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    let agents = app.agents.clone();
    let (agent, prompt, by) = (agent.to_string(), prompt.to_string(), by.to_string());
    tokio::spawn(async move {
        let mut forward = Forward(tx.clone());
        let id = crate::domain::ids::SolveId::new();
        let result = agents
            .ask(id, &agent, &prompt, Origin::default(), &by, &mut forward)
            .await;
        let _ = tx.send(SolveUpdate::Done(result));
    });
    Ok(rx)
}

/// The end of a solve's updates: its result.
pub async fn solve_result(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<SolveUpdate>,
) -> Api<crate::agents::SolveResult> {
    while let Some(update) = rx.recv().await {
        if let SolveUpdate::Done(result) = update {
            return Ok(result?);
        }
    }
    Err(ApiError::from(crate::agents::AgentError::Internal(
        "the solve's task ended without an answer".into(),
    )))
}
