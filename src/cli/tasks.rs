//! `awl tasks`: the board in the terminal, one section per column, oldest first.

use chrono::Utc;
use clap::Args;
use reqwest::Method;

use crate::board::TaskQuery;
use crate::board::views::{TaskPage, TaskView};
use crate::domain::task::TaskStatus;
use crate::server::caller::parse_status;
use crate::store::EventStore;

use super::client::{Client, Target};

impl TasksArgs {
    pub fn target_is_remote(&self) -> bool {
        self.target.is_remote()
    }
}

#[derive(Debug, Args)]
pub struct TasksArgs {
    /// Only these statuses (comma-separated: QUEUED,IN_PROGRESS,...).
    #[arg(long)]
    status: Option<String>,
    /// Only tasks held by this agent.
    #[arg(long)]
    agent: Option<String>,
    /// Include finished tasks (COMPLETED, FAILED, CANCELLED).
    #[arg(long)]
    all: bool,
    #[arg(long, default_value_t = 200)]
    limit: usize,
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    target: Target,
}

pub async fn tasks(store: Option<EventStore>, args: TasksArgs) -> anyhow::Result<()> {
    let statuses: Vec<TaskStatus> = match &args.status {
        Some(list) => list
            .split(',')
            .map(|s| parse_status(s.trim()).map_err(|e| anyhow::anyhow!(e.message)))
            .collect::<anyhow::Result<_>>()?,
        None if args.all => Vec::new(),
        None => TaskStatus::ACTIVE.to_vec(),
    };
    let page: TaskPage = match Client::open(&args.target, store).await? {
        Client::Direct { board, .. } => {
            board
                .tasks(&TaskQuery {
                    statuses,
                    assignee: args
                        .agent
                        .as_deref()
                        .map(crate::domain::ids::AgentId::try_from)
                        .transpose()?,
                    run_id: None,
                    after: None,
                    limit: args.limit,
                })
                .await?
        }
        remote => {
            let mut query = format!("/api/v1/tasks?limit={}", args.limit);
            if !statuses.is_empty() {
                query.push_str("&status=");
                query.push_str(
                    &statuses
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(","),
                );
            }
            if let Some(agent) = &args.agent {
                query.push_str(&format!("&agent={}", urlencode(agent)));
            }
            remote.call(Method::GET, &query, None).await?
        }
    };
    if args.json {
        println!("{}", serde_json::to_string(&page.tasks)?);
        return Ok(());
    }
    print_board(&page.tasks);
    Ok(())
}

fn urlencode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// The board in the terminal: one section per column, oldest first.
fn print_board(tasks: &[TaskView]) {
    if tasks.is_empty() {
        println!("no tasks");
        return;
    }
    let now = Utc::now();
    for status in TaskStatus::ALL {
        let column: Vec<&TaskView> = tasks
            .iter()
            .filter(|t| t.status == status.as_str())
            .collect();
        if column.is_empty() {
            continue;
        }
        println!("{} ({})", status, column.len());
        for t in column {
            let age = t.queued_at.map(|q| human(now - q)).unwrap_or_default();
            let mut line = format!("  {}  {:>6}  {}", t.task_id, age, one_line(&t.prompt, 60));
            if let Some(agent) = &t.assignee {
                line.push_str(&format!("  @{agent}"));
            }
            if !t.capabilities.is_empty() {
                line.push_str(&format!("  [{}]", t.capabilities.join(",")));
            }
            if let Some(w) = &t.workspace {
                line.push_str(&format!(
                    "  {}{}",
                    w.repository,
                    w.branch
                        .as_deref()
                        .map(|b| format!("#{b}"))
                        .unwrap_or_default()
                ));
            }
            if let Some(q) = &t.open_question {
                line.push_str(&format!("\n      asks: {}", one_line(&q.question, 70)));
            }
            println!("{line}");
        }
    }
}

fn one_line(s: &str, max: usize) -> String {
    let flat: String = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max {
        format!("{}…", flat.chars().take(max - 1).collect::<String>())
    } else {
        flat
    }
}

fn human(d: chrono::Duration) -> String {
    let s = d.num_seconds().max(0);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}
