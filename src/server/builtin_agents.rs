//! awl's own agents at work on the board: each agent definition with `board: true` is
//! registered as a built-in agent (with its capabilities) and pulls the tasks it may
//! take (`runner: builtin` or `any`, capabilities covered), like any agent: wait,
//! ack, then a solve, its tool calls reported, and complete (the answer, the solve's
//! id, what it used) or fail (the solve's error and class). The task's lifecycle
//! events are the same as an external agent's.
//!
//! A task's solve has an id derived from the task's, so a server that died while
//! working one finds the solve when the task comes back (after its ack deadline or
//! when the agent is found lost) and carries it on instead of starting over.

use std::time::Duration;

use serde_json::json;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use uuid::Uuid;

use crate::agents::{AgentError, Agents, SolveResult, Unobserved};
use crate::board::views::TaskView;
use crate::board::{Board, Caller, ToolCall};
use crate::domain::ids::{AgentId, RunId, SolveId, TaskId};
use crate::domain::solve::Origin;
use crate::domain::workspace::Capabilities;

/// Names the solves of board tasks.
const TASK_SOLVE_NAMESPACE: Uuid = Uuid::from_u128(0x3f0c_5d2e_8a41_4b7c_9e16_2d7a_b0c4_e915);

/// The solve that works `task`: the same on every server and every attempt.
pub fn task_solve_id(task: TaskId) -> SolveId {
    SolveId::from_uuid(Uuid::new_v5(
        &TASK_SOLVE_NAMESPACE,
        task.as_uuid().as_bytes(),
    ))
}

/// How long one wait for a task lasts before it is asked again.
const WAIT: Duration = Duration::from_secs(30);

/// Register every board agent and start its workers; they stop when `stop` turns true.
pub async fn start(
    board: &Board,
    agents: &Agents,
    stop: &watch::Receiver<bool>,
) -> Vec<JoinHandle<()>> {
    let mut workers = Vec::new();
    for definition in agents.list().filter(|d| d.file.board) {
        let Ok(agent_id) = AgentId::try_from(definition.name()) else {
            tracing::warn!(
                agent = definition.name(),
                "not a valid board agent name; not registered"
            );
            continue;
        };
        let capabilities = Capabilities::new(&definition.file.capabilities);
        let by = Caller::User("awl".into());
        if let Err(e) = board
            .register_builtin(agent_id.clone(), capabilities, &by)
            .await
        {
            tracing::error!(agent = %agent_id, error = %e, "cannot register the built-in agent on the board");
            continue;
        }
        for _ in 0..definition.concurrency() {
            let worker = Worker {
                board: board.clone(),
                agents: agents.clone(),
                agent_id: agent_id.clone(),
            };
            let stop = stop.clone();
            workers.push(tokio::spawn(async move { worker.run(stop).await }));
        }
    }
    workers
}

struct Worker {
    board: Board,
    agents: Agents,
    agent_id: AgentId,
}

impl Worker {
    async fn run(self, mut stop: watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                return;
            }
            let waited = tokio::select! {
                waited = self.board.wait_for_prompt(&self.agent_id, Some(WAIT)) => waited,
                _ = stop.changed() => return,
            };
            match waited {
                Ok(Some(task)) => self.work(task).await,
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(agent = %self.agent_id, error = %e, "waiting for a task failed");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }

    async fn work(&self, task: TaskView) {
        let task_id = TaskId::from_uuid(task.task_id);
        if let Err(e) = self.board.ack(task_id, &self.agent_id).await {
            tracing::warn!(agent = %self.agent_id, task = %task_id, error = %e, "cannot ack the task");
            return;
        }
        let by = Caller::Agent(self.agent_id.clone());
        let outcome = match self.solve(task_id, &task).await {
            Ok(result) => {
                self.report_tools(task_id, &result).await;
                if result.finished() {
                    self.board
                        .complete(task_id, answer(&result), &by)
                        .await
                        .map(|_| ())
                } else {
                    let (reason, class) = result
                        .error
                        .as_ref()
                        .map(|e| (e.message.clone(), e.class.as_str().to_string()))
                        .unwrap_or_else(|| ("the solve did not finish".into(), "unknown".into()));
                    self.board
                        .fail(task_id, reason, Some(class), &by)
                        .await
                        .map(|_| ())
                }
            }
            // A fault of awl or its store: the task is left to its ack deadline and
            // sweeps (it comes back, and its solve is carried on).
            Err(e) => {
                tracing::error!(agent = %self.agent_id, task = %task_id, error = %e, "the solve could not be recorded");
                return;
            }
        };
        if let Err(e) = outcome {
            tracing::warn!(agent = %self.agent_id, task = %task_id, error = %e, "cannot end the task");
        }
    }

    /// The task's solve: carried on if an earlier attempt started it, else asked.
    async fn solve(&self, task_id: TaskId, task: &TaskView) -> Result<SolveResult, AgentError> {
        let id = task_solve_id(task_id);
        let by = format!("agent:{}", self.agent_id);
        match self.agents.solve(id).await {
            Ok(existing) if existing.status == "running" || existing.status == "new" => {
                self.agents.resume(id, &by, &mut Unobserved).await
            }
            Ok(ended) => Ok(ended),
            Err(AgentError::NotFound(_)) => {
                self.agents
                    .ask(
                        id,
                        self.agent_id.as_str(),
                        &task.prompt,
                        Origin {
                            task_id: Some(task_id),
                            run_id: task.run_id.map(RunId::from_uuid),
                            workflow: task.workflow.clone(),
                        },
                        &by,
                        &mut Unobserved,
                    )
                    .await
            }
            Err(e) => Err(e),
        }
    }

    /// Each tool call of the solve, reported on the task (so learning sees built-in
    /// agents' calls as it sees external ones').
    async fn report_tools(&self, task_id: TaskId, result: &SolveResult) {
        for step in result.plan.iter().filter(|s| s.duration_ms.is_some()) {
            let call = ToolCall {
                name: step.tool.clone(),
                parameters: step.arguments.clone(),
                output: step.output.clone(),
                duration_ms: step.duration_ms.unwrap_or(0),
                success: step.ok,
                scope: None,
            };
            if let Err(e) = self.board.tool_call(task_id, &self.agent_id, call).await {
                tracing::warn!(task = %task_id, error = %e, "cannot report a tool call");
                return;
            }
        }
    }
}

/// A task's result: the answer, and where it came from.
fn answer(result: &SolveResult) -> serde_json::Value {
    json!({
        "message": result.message,
        "solve_id": result.solve_id.to_string(),
        "agent": result.agent,
        "tools_used": result.tools_used,
        "model_calls": result.model_calls,
        "tokens_in": result.tokens_in,
        "tokens_out": result.tokens_out,
        "cost_usd": result.cost_usd,
        "total_ms": result.total_ms,
    })
}
