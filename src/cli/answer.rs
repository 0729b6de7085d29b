//! `awl answer TASK "ANSWER"`: answer the question a BLOCKED task asks.

use clap::Args;
use reqwest::Method;
use serde_json::json;

use crate::board::views::TaskView;
use crate::domain::ids::{QuestionId, TaskId};
use crate::store::EventStore;

use super::client::{Client, Target};

impl AnswerArgs {
    pub fn target_is_remote(&self) -> bool {
        self.target.is_remote()
    }
}

#[derive(Debug, Args)]
pub struct AnswerArgs {
    task: TaskId,
    /// The answer for the agent.
    answer: String,
    /// The question answered (default: the task's open question).
    #[arg(long)]
    question: Option<QuestionId>,
    #[command(flatten)]
    target: Target,
}

pub async fn answer(store: Option<EventStore>, args: AnswerArgs) -> anyhow::Result<()> {
    let task: TaskView = match Client::open(&args.target, store).await? {
        Client::Direct { board, by } => {
            board
                .answer(args.task, args.question, args.answer, &by)
                .await?
        }
        remote => {
            let body =
                json!({"answer": args.answer, "question_id": args.question.map(|q| q.as_uuid())});
            remote
                .call(
                    Method::POST,
                    &format!("/api/v1/tasks/{}/answer", args.task),
                    Some(body),
                )
                .await?
        }
    };
    println!("answered: task {} is {}", task.task_id, task.status);
    Ok(())
}
