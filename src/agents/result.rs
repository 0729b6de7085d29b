//! What a solve answers, as every interface returns it: the message, the plan (each
//! tool call in order, with how it ended), the tools used, the timings and the cost.

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::Value;

use crate::domain::ids::{RunId, SolveId, TaskId};
use crate::domain::run::StepError;
use crate::domain::solve::{Solve, Status, ToolOutcome};

#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct SolveResult {
    #[schemars(with = "String")]
    pub solve_id: SolveId,
    pub agent: String,
    pub status: &'static str,
    /// The answer, once finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Why it failed: `{class, message}`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    pub error: Option<StepError>,
    pub plan: Vec<PlanStep>,
    pub tools_used: Vec<String>,
    /// Model calls that chose tools, in ms (as far as it got, for a solve that did
    /// not finish; likewise below).
    pub plan_ms: u64,
    /// Tool calls: the longest of each iteration (they run side by side).
    pub execute_ms: u64,
    /// The model call that answered.
    pub solve_ms: u64,
    /// From the start to the end (or to the last event).
    pub total_ms: u64,
    pub model_calls: usize,
    pub tokens_in: u64,
    pub tokens_out: u64,
    pub cost_usd: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub task_id: Option<TaskId>,
    /// The workflow whose run queued the task it worked.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<String>")]
    pub run_id: Option<RunId>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<DateTime<Utc>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<DateTime<Utc>>,
}

/// One tool call of the plan.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct PlanStep {
    pub iteration: u32,
    pub tool: String,
    /// As the model wrote them (JSON when they parse, the text otherwise).
    pub arguments: Value,
    pub ok: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schemars(with = "Option<Value>")]
    pub error: Option<StepError>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
}

impl SolveResult {
    pub fn of(id: SolveId, solve: &Solve) -> Self {
        let (tokens_in, tokens_out) = solve.tokens();
        let timings = solve.timings.unwrap_or_else(|| {
            solve.timings_at(solve.ended_at.or(solve.started_at).unwrap_or_default())
        });
        Self {
            solve_id: id,
            agent: solve
                .setup
                .as_ref()
                .map(|s| s.agent.clone())
                .unwrap_or_default(),
            status: solve.status.as_str(),
            message: solve.message.clone(),
            error: solve.failure.clone(),
            plan: plan(solve),
            tools_used: solve.tools_used(),
            plan_ms: timings.plan_ms,
            execute_ms: timings.execute_ms,
            solve_ms: timings.solve_ms,
            total_ms: timings.total_ms,
            model_calls: solve.turns.len(),
            tokens_in,
            tokens_out,
            cost_usd: solve.spent_usd(),
            task_id: solve.origin.task_id,
            workflow: solve.origin.workflow.clone(),
            run_id: solve.origin.run_id,
            started_at: solve.started_at,
            ended_at: solve.ended_at,
        }
    }

    pub fn finished(&self) -> bool {
        self.status == Status::Finished.as_str()
    }
}

fn plan(solve: &Solve) -> Vec<PlanStep> {
    let mut steps = Vec::new();
    for turn in &solve.turns {
        for call in &turn.reply.tool_calls {
            let result = turn.results.iter().find(|r| r.call_id == call.id);
            let (ok, output, error) = match result.map(|r| &r.outcome) {
                Some(ToolOutcome::Output(v)) => (true, Some(v.clone()), None),
                Some(ToolOutcome::Error(e)) => (false, None, Some(e.clone())),
                None => (false, None, None),
            };
            steps.push(PlanStep {
                iteration: turn.reply.iteration,
                tool: call.tool.clone(),
                arguments: serde_json::from_str(&call.arguments)
                    .unwrap_or_else(|_| Value::String(call.arguments.clone())),
                ok,
                output,
                error,
                duration_ms: result.map(|r| r.duration_ms),
            });
        }
    }
    steps
}
