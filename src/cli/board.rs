//! The board from the terminal: `awl send`, `awl tasks`, `awl task ID`, `awl answer`,
//! `awl review`, talking to a server (`--server URL`, with `--token`) or, without one,
//! straight to the store through the same [`Board`] service the server uses.

use anyhow::{Context, bail};
use chrono::Utc;
use clap::{Args, Subcommand};
use reqwest::Method;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use crate::board::wire::*;
use crate::board::{Board, BoardConfig, Caller, TaskQuery};
use crate::clock::system_clock;
use crate::domain::ids::{QuestionId, TaskId};
use crate::domain::task::TaskStatus;
use crate::store::EventStore;

use super::runs::actor;

/// Where board commands go.
#[derive(Debug, Args, Clone)]
pub struct Target {
    /// An awl server's URL (`http://127.0.0.1:8080`); without it, the store directly.
    #[arg(long, env = "AWL_SERVER", global = true)]
    server: Option<String>,
    /// The bearer token for `--server`.
    #[arg(long, env = "AWL_TOKEN", global = true, hide_env_values = true)]
    token: Option<String>,
    /// Who is acting (recorded in the log) when talking to the store directly.
    #[arg(long, global = true)]
    by: Option<String>,
}

impl Target {
    pub fn is_remote(&self) -> bool {
        self.server.is_some()
    }
}

impl SendArgs {
    pub fn target_is_remote(&self) -> bool {
        self.target.is_remote()
    }
}

impl TasksArgs {
    pub fn target_is_remote(&self) -> bool {
        self.target.is_remote()
    }
}

impl AnswerArgs {
    pub fn target_is_remote(&self) -> bool {
        self.target.is_remote()
    }
}

impl ReviewCommand {
    pub fn target_is_remote(&self) -> bool {
        match self {
            Self::Approve { target, .. } | Self::Changes { target, .. } => target.is_remote(),
        }
    }
}

enum Client {
    Direct {
        board: Board,
        by: Caller,
    },
    Remote {
        base: String,
        token: Option<String>,
        http: reqwest::Client,
    },
}

impl Client {
    async fn open(target: &Target, store: Option<EventStore>) -> anyhow::Result<Self> {
        if let Some(server) = &target.server {
            return Ok(Client::Remote {
                base: server.trim_end_matches('/').to_string(),
                token: target.token.clone(),
                http: reqwest::Client::new(),
            });
        }
        let store = store.context("no store to talk to")?;
        let board = Board::open(store, system_clock(), BoardConfig::default()).await?;
        Ok(Client::Direct {
            board,
            by: Caller::User(actor(&target.by)),
        })
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> anyhow::Result<T> {
        let Client::Remote { base, token, http } = self else {
            bail!("not a remote client");
        };
        let mut request = http.request(method.clone(), format!("{base}{path}"));
        if let Some(token) = token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            request = request.json(&body);
        }
        let response = request
            .send()
            .await
            .with_context(|| format!("calling {method} {base}{path}"))?;
        let status = response.status();
        let text = response
            .text()
            .await
            .context("reading the server's answer")?;
        if !status.is_success() {
            let detail: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            let code = detail["error"]["code"].as_str().unwrap_or("error");
            let message = detail["error"]["message"].as_str().unwrap_or(&text);
            bail!("the server answered {status} ({code}): {message}");
        }
        serde_json::from_str(&text)
            .with_context(|| format!("reading the answer of {method} {path}"))
    }
}

// ---- awl send ---------------------------------------------------------------------------

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
    };
    let task: TaskView = match Client::open(&args.target, store).await? {
        Client::Direct { board, by } => board.send(request, &by, None).await?.0,
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

// ---- awl tasks ----------------------------------------------------------------------------

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
            .map(|s| crate::server::parse_status(s.trim()).map_err(|e| anyhow::anyhow!(e.message)))
            .collect::<anyhow::Result<_>>()?,
        None if args.all => Vec::new(),
        None => TaskStatus::ACTIVE.to_vec(),
    };
    let page: TaskPage = match Client::open(&args.target, store).await? {
        Client::Direct { board, .. } => board.tasks(&TaskQuery {
            statuses,
            assignee: args
                .agent
                .as_deref()
                .map(crate::domain::ids::AgentId::try_from)
                .transpose()?,
            run_id: None,
            after: None,
            limit: args.limit,
        })?,
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

// ---- awl task ID ----------------------------------------------------------------------------

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

// ---- awl answer / review ----------------------------------------------------------------------

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
