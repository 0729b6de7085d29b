//! `awl send "PROMPT"`: put a task on the board.

use clap::Args;
use reqwest::Method;

use crate::board::NewTask;
use crate::board::views::{TaskView, WorkspaceBody};
use crate::domain::ids::AgentId;
use crate::domain::workspace::{Capabilities, Workspace};
use crate::server::wire::SendTaskRequest;
use crate::store::EventStore;

use super::client::{Client, Target};

impl SendArgs {
    pub fn target_is_remote(&self) -> bool {
        self.target.is_remote()
    }
}

#[derive(Debug, Args)]
pub struct SendArgs {
    /// What the agent is asked to do.
    prompt: String,
    /// A capability the agent needs (repeatable, or comma-separated).
    #[arg(long = "cap", value_name = "CAP")]
    caps: Vec<String>,
    /// The repository the work is in (`org/app`).
    #[arg(long)]
    repo: Option<String>,
    #[arg(long, requires = "repo")]
    branch: Option<String>,
    /// An agent the task is kept for first.
    #[arg(long)]
    agent_hint: Option<String>,
    #[arg(long, default_value_t = 0, allow_negative_numbers = true)]
    priority: i32,
    /// Require a reviewer's approval before the task completes.
    #[arg(long)]
    review: bool,
    /// Who may take it: any agent, only awl's own (builtin), or only external ones.
    #[arg(long, value_enum, default_value = "any")]
    runner: RunnerArg,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

pub async fn send(store: Option<EventStore>, args: SendArgs) -> anyhow::Result<()> {
    let request = SendTaskRequest {
        prompt: args.prompt,
        capabilities: args
            .caps
            .iter()
            .flat_map(|c| c.split(','))
            .map(|c| c.trim().to_string())
            .collect(),
        workspace: args.repo.map(|repository| WorkspaceBody {
            repository,
            branch: args.branch,
        }),
        agent_hint: args.agent_hint,
        priority: args.priority,
        review_required: args.review,
        runner: args.runner.into(),
    };
    let task: TaskView = match Client::open(&args.target, store).await? {
        Client::Direct { board, by } => {
            let new = NewTask {
                prompt: request.prompt,
                capabilities: Capabilities::new(&request.capabilities),
                workspace: request.workspace.map(Workspace::from),
                agent_hint: request
                    .agent_hint
                    .as_deref()
                    .map(AgentId::try_from)
                    .transpose()?,
                priority: request.priority,
                review_required: request.review_required,
                runner: request.runner,
            };
            board.send(new, &by, None).await?.0
        }
        remote => {
            remote
                .call(
                    Method::POST,
                    "/api/v1/tasks",
                    Some(serde_json::to_value(&request)?),
                )
                .await?
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&task)?);
    } else {
        println!("{}", task.task_id);
    }
    Ok(())
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum RunnerArg {
    Any,
    Builtin,
    External,
}

impl From<RunnerArg> for crate::workflow::model::Runner {
    fn from(r: RunnerArg) -> Self {
        match r {
            RunnerArg::Any => Self::Any,
            RunnerArg::Builtin => Self::Builtin,
            RunnerArg::External => Self::External,
        }
    }
}
