//! `awl review approve TASK` / `awl review changes TASK --feedback TEXT`: review
//! submitted work; changes send it back to the queue, the feedback shown to the next
//! agent.

use clap::Subcommand;
use reqwest::Method;
use serde_json::json;

use crate::board::views::TaskView;
use crate::domain::ids::TaskId;
use crate::store::EventStore;

use super::client::{Client, Target};

impl ReviewCommand {
    pub fn target_is_remote(&self) -> bool {
        match self {
            Self::Approve { target, .. } | Self::Changes { target, .. } => target.is_remote(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum ReviewCommand {
    /// Approve the work under review.
    Approve {
        task: TaskId,
        #[command(flatten)]
        target: Target,
    },
    /// Send the work back to the queue with feedback for the next agent.
    Changes {
        task: TaskId,
        #[arg(long)]
        feedback: String,
        #[command(flatten)]
        target: Target,
    },
}

pub async fn review(store: Option<EventStore>, command: ReviewCommand) -> anyhow::Result<()> {
    let task: TaskView = match command {
        ReviewCommand::Approve { task, target } => match Client::open(&target, store).await? {
            Client::Direct { board, by } => board.approve(task, &by).await?,
            remote => {
                remote
                    .call(
                        Method::POST,
                        &format!("/api/v1/tasks/{task}/approve"),
                        Some(json!({})),
                    )
                    .await?
            }
        },
        ReviewCommand::Changes {
            task,
            feedback,
            target,
        } => match Client::open(&target, store).await? {
            Client::Direct { board, by } => board.request_changes(task, feedback, &by).await?,
            remote => {
                remote
                    .call(
                        Method::POST,
                        &format!("/api/v1/tasks/{task}/request-changes"),
                        Some(json!({"feedback": feedback})),
                    )
                    .await?
            }
        },
    };
    println!("task {} is {}", task.task_id, task.status);
    Ok(())
}
