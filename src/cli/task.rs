//! `awl task TASK`: one task and its history (from a server or the store); `awl task
//! complete|fail TASK`: finish an agent step's task by hand.

use clap::Subcommand;
use reqwest::Method;
use serde_json::{Value, json};

use crate::board::views::{HistoryEntry, TaskView};
use crate::clock::system_clock;
use crate::domain::ids::{AgentId, TaskId};
use crate::runs::{Runs, TaskFinish};
use crate::store::EventStore;

use super::client::{Client, Target};
use super::common::actor;

/// `awl task ID` shows a task; `awl task complete|fail` finishes one by hand.
#[derive(Debug, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct TaskArgs {
    #[command(subcommand)]
    pub action: Option<TaskCommand>,
    /// The task to show.
    pub task: Option<TaskId>,
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub target: Target,
}

#[derive(Debug)]
pub struct ShowTaskArgs {
    pub task: TaskId,
    pub json: bool,
    pub target: Target,
}

pub async fn show(store: Option<EventStore>, args: ShowTaskArgs) -> anyhow::Result<()> {
    let (task, history): (TaskView, Vec<HistoryEntry>) =
        match Client::open(&args.target, store).await? {
            Client::Direct { board, .. } => (
                board.task(args.task).await?,
                board.history(args.task).await?,
            ),
            remote => (
                remote
                    .call(Method::GET, &format!("/api/v1/tasks/{}", args.task), None)
                    .await?,
                remote
                    .call(
                        Method::GET,
                        &format!("/api/v1/tasks/{}/events", args.task),
                        None,
                    )
                    .await?,
            ),
        };
    if args.json {
        println!("{}", json!({"task": task, "history": history}));
        return Ok(());
    }
    println!("task {}  {}", task.task_id, task.status);
    println!("  prompt: {}", task.prompt);
    if !task.capabilities.is_empty() {
        println!("  needs: {}", task.capabilities.join(", "));
    }
    if let Some(w) = &task.workspace {
        println!(
            "  workspace: {}{}",
            w.repository,
            w.branch
                .as_deref()
                .map(|b| format!(" ({b})"))
                .unwrap_or_default()
        );
    }
    if let Some(agent) = &task.assignee {
        println!("  agent: {agent}");
    }
    if let Some(q) = &task.open_question {
        println!("  open question {}: {}", q.question_id, q.question);
    }
    for f in &task.feedback {
        println!(
            "  changes requested (round {}) by {}: {}",
            f.round, f.by, f.feedback
        );
    }
    if let Some(ending) = &task.ending {
        println!("  ended: {ending}");
    }
    if let Some(result) = &task.result {
        println!("  result: {result}");
    }
    println!("history:");
    for e in history {
        println!(
            "  {:>3}  {}  {:<26} {}",
            e.version,
            e.recorded_at.format("%Y-%m-%d %H:%M:%S%.3f"),
            e.event_type,
            e.actor.unwrap_or_default()
        );
    }
    Ok(())
}

#[derive(Debug, Subcommand)]
pub enum TaskCommand {
    /// Complete an agent step's task by hand, acting as AGENT.
    Complete {
        task: TaskId,
        /// The task's result (JSON; plain text is taken as a string).
        #[arg(long, default_value = "{}")]
        result: String,
        #[arg(long, default_value = "cli")]
        agent: String,
        #[arg(long)]
        by: Option<String>,
    },
    /// Fail an agent step's task.
    Fail {
        task: TaskId,
        #[arg(long)]
        reason: String,
        /// An error class (network, rate_limit, ..., unknown).
        #[arg(long)]
        class: Option<String>,
        #[arg(long)]
        by: Option<String>,
    },
}

pub async fn finish(store: EventStore, command: TaskCommand) -> anyhow::Result<()> {
    match command {
        TaskCommand::Complete {
            task,
            result,
            agent,
            by,
        } => {
            let result = serde_json::from_str(&result).unwrap_or(Value::String(result));
            let agent = AgentId::try_from(agent.as_str())?;
            Runs::new(store, system_clock())
                .finish_task(task, TaskFinish::Complete { agent, result }, &actor(&by))
                .await?;
            println!("completed task {task}");
        }
        TaskCommand::Fail {
            task,
            reason,
            class,
            by,
        } => {
            if let Some(c) = &class {
                c.parse::<crate::domain::run::ErrorClass>()?;
            }
            let finish = TaskFinish::Fail {
                reason,
                error_class: class,
            };
            Runs::new(store, system_clock())
                .finish_task(task, finish, &actor(&by))
                .await?;
            println!("failed task {task}");
        }
    }
    Ok(())
}
