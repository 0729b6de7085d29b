//! `awl run FILE`: register a workflow file, start a run and carry it out here with
//! live progress (or, with `--detach`, only start it for `awl worker`s).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use chrono::{DateTime, Utc};
use clap::Args;
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::clock::system_clock;
use crate::definitions::DefinitionError;
use crate::domain::ids::RunId;
use crate::domain::run::{Run, RunEvent, RunOutcome, RunStatus};
use crate::executor::{Worker, WorkerConfig};
use crate::log::{EventFilter, StreamType};
use crate::runners::ExternalTools;
use crate::runs::{Runs, RunsError};
use crate::store::{EventStore, domain_io};

use super::Invalid;
use super::agents::Declarations;
use super::common::{
    actor, allowed_env, between, chat_from_env, human, owner, runners_with_chat, secrets,
};
use super::registry::WorkflowTools;

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The workflow file.
    file: PathBuf,
    /// An input: `--var name=value` (repeatable; read as the input's declared type).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    #[command(flatten)]
    how: Execution,
    /// Who starts the run (default: $USER).
    #[arg(long)]
    by: Option<String>,
}

/// How a started run is carried out: here in the foreground, or left to workers
/// (`awl run` and `awl rerun` alike).
#[derive(Debug, Args)]
pub(super) struct Execution {
    /// Start the run and print its id; a worker (`awl worker`) carries it out.
    #[arg(long)]
    pub detach: bool,
    /// Print the run's events as JSON lines instead of progress.
    #[arg(long)]
    pub json: bool,
    /// Environment variables expressions may read (`env.NAME`); repeatable.
    #[arg(long = "env-allow", value_name = "NAME")]
    pub env_allow: Vec<String>,
    /// Environment variables expressions may read that are secret: masked as
    /// `[redacted]` in events, views and spans (repeatable; also `AWL_SECRET_ENV`).
    #[arg(long = "secret-env", value_name = "NAME")]
    pub secret_env: Vec<String>,
    /// A run continues as new (its state recorded, replay starts there) once its
    /// history since its start or last continuation reaches this many events.
    #[arg(long, env = "AWL_HISTORY_LIMIT", default_value_t = crate::executor::DEFAULT_HISTORY_LIMIT)]
    pub history_limit: u64,
    /// ... or once the events it recorded since then reach this many bytes (as JSON).
    #[arg(long, env = "AWL_HISTORY_BYTES", default_value_t = crate::executor::DEFAULT_HISTORY_BYTES)]
    pub history_bytes: u64,
}

impl Execution {
    /// Print progress lines (not JSON, not detached).
    pub fn shows_progress(&self) -> bool {
        !self.detach && !self.json
    }
}

pub(super) fn parse_vars(vars: &[String]) -> anyhow::Result<Map<String, Value>> {
    let mut map = Map::new();
    for var in vars {
        let Some((name, value)) = var.split_once('=') else {
            bail!("--var {var:?}: expected NAME=VALUE");
        };
        map.insert(name.trim().to_string(), Value::String(value.to_string()));
    }
    Ok(map)
}

/// Problems with the file are printed one per line (file:line:col: field: message).
fn invalid(e: RunsError) -> anyhow::Error {
    match e {
        RunsError::Definition(DefinitionError::Invalid(d)) => {
            eprintln!("{d}");
            eprintln!(
                "{} problem{} found",
                d.len(),
                if d.len() == 1 { "" } else { "s" }
            );
            Invalid.into()
        }
        other => other.into(),
    }
}

pub async fn run(
    store: EventStore,
    args: RunArgs,
    declarations: &Declarations,
) -> anyhow::Result<()> {
    let by = actor(&args.by);
    let runs = Runs::new(store.clone(), system_clock());
    // The run's events all come after the head now: follow from there, not from the
    // start of a log that may hold millions of events.
    let head = store.head().await?;
    let vars = parse_vars(&args.vars)?;
    // The file may name the registry's tools: its directory tools are copied into the
    // registered version, its MCP tools performed here through the registry.
    let mut tools = WorkflowTools::load(declarations)?;
    let (started, registered) = tools
        .check(
            |e| matches!(e, RunsError::Definition(DefinitionError::Invalid(_))),
            async |known| {
                runs.start_file_with(&args.file, vars.clone(), &by, known)
                    .await
            },
        )
        .await
        .map_err(invalid)?;
    if args.how.shows_progress() {
        eprintln!(
            "run {}: {} {} on {}",
            started.run_id,
            registered.name,
            registered.version,
            store.location()
        );
    }
    let performer = (!args.how.detach).then(|| tools.performer());
    execute(&store, &runs, started.run_id, head, &args.how, performer).await
}

/// Carry `run_id` out as `how` says: with `--detach`, print its id and leave it to
/// workers; else here with a worker of its own, printing its events from `head` on,
/// exiting non-zero unless it succeeds (an interrupt leaves it to `awl worker`).
/// `tools` performs the registry tools (MCP tools) its steps call.
pub(super) async fn execute(
    store: &EventStore,
    runs: &Runs,
    run_id: RunId,
    head: i64,
    how: &Execution,
    tools: Option<Arc<dyn ExternalTools>>,
) -> anyhow::Result<()> {
    if how.detach {
        if how.json {
            println!("{}", json!({"run_id": run_id.to_string()}));
        } else {
            println!("{run_id}");
        }
        return Ok(());
    }
    let mut config = WorkerConfig::for_runs(owner("run"), [run_id]);
    config.env = allowed_env(&how.env_allow);
    let (secret_env, mask) = secrets(&how.secret_env, store);
    config.env.extend(secret_env);
    config.secrets = mask;
    config.history_limit = how.history_limit;
    config.history_bytes = how.history_bytes;
    config.tools = tools;
    let worker = Worker::new(
        store.clone(),
        runners_with_chat(chat_from_env()?)?,
        config,
        system_clock(),
    );
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut work = tokio::spawn(worker.run(stop_rx));
    let progress = tokio::spawn(follow(store.clone(), run_id, head, how.json));
    let interrupted = tokio::select! {
        result = &mut work => { result.context("the worker stopped")??; false }
        _ = tokio::signal::ctrl_c() => true,
    };
    if interrupted {
        eprintln!("interrupted: the run stays where it is; `awl worker` carries it on");
        let _ = stop_tx.send(true);
        work.await.context("the worker stopped")??;
        progress.abort();
    } else {
        // The printer stops at the run's last event; wait for it to get there.
        match tokio::time::timeout(Duration::from_secs(10), progress).await {
            Ok(joined) => joined.context("the progress printer stopped")??,
            Err(_) => eprintln!("(progress output stopped early)"),
        }
    }
    let (run, _) = runs.get(run_id).await?;
    if !how.json {
        summary(&run);
    }
    match run.status() {
        Some(RunStatus::Succeeded) => Ok(()),
        _ if interrupted => Ok(()),
        _ => Err(Invalid.into()),
    }
}

/// Print a run's events as they are appended.
async fn follow(store: EventStore, run_id: RunId, after: i64, json: bool) -> anyhow::Result<()> {
    let filter = EventFilter {
        stream_types: vec![StreamType::Run],
        stream_id: Some(run_id.to_string()),
        ..EventFilter::default()
    };
    let mut tail = std::pin::pin!(store.tail(after, filter));
    let mut started: BTreeMap<String, DateTime<Utc>> = BTreeMap::new();
    while let Some(event) = tail.next().await {
        let event = event?;
        let last = matches!(
            event.event_type.as_str(),
            "run.completed" | "run.failed" | "run.cancelled"
        );
        if json {
            println!("{}", serde_json::to_string(&event)?);
        } else if let Ok(e) = domain_io::decode::<Run>(&event)
            && let Some(line) = progress_line(&e, &mut started)
        {
            eprintln!("{line}");
            let _ = std::io::stderr().flush();
        }
        if last {
            break;
        }
    }
    Ok(())
}

fn progress_line(e: &RunEvent, started: &mut BTreeMap<String, DateTime<Utc>>) -> Option<String> {
    let took = |id: &str, at: &DateTime<Utc>, started: &BTreeMap<String, DateTime<Utc>>| {
        started
            .get(id)
            .map(|s| format!(" in {}", between(*s, *at)))
            .unwrap_or_default()
    };
    Some(match e {
        RunEvent::StepStarted {
            step_id,
            attempt,
            at,
            ..
        } => {
            started.insert(step_id.to_string(), *at);
            let again = if *attempt > 1 {
                format!(" (attempt {attempt})")
            } else {
                String::new()
            };
            format!("  ▸ {step_id}{again}")
        }
        RunEvent::StepSucceeded { step_id, at, .. } => {
            format!("  ✓ {step_id}{}", took(step_id.as_str(), at, started))
        }
        RunEvent::StepFailed {
            step_id,
            attempt,
            error,
            at,
        } => {
            format!(
                "  ✗ {step_id} attempt {attempt}{}: {error}",
                took(step_id.as_str(), at, started)
            )
        }
        RunEvent::StepRetried {
            step_id,
            next_attempt,
            backoff_ms,
            ..
        } => {
            format!(
                "  ↻ {step_id}: attempt {next_attempt} in {}",
                human(Duration::from_millis(*backoff_ms))
            )
        }
        RunEvent::StepThrottled {
            step_id,
            limit,
            until,
            at,
            ..
        } => format!(
            "  ⏸ {step_id}: throttled by {limit} for {}",
            human((*until - *at).to_std().unwrap_or_default())
        ),
        RunEvent::StepSkipped {
            step_id, reason, ..
        } => format!("  – {step_id} skipped: {reason}"),
        RunEvent::RecoveryApplied {
            step_id, action, ..
        } => format!("  ⚕ {step_id}: {action}"),
        RunEvent::GateOpened {
            gate_id,
            message,
            approvers,
            ..
        } => {
            let who = if approvers.is_empty() {
                String::new()
            } else {
                format!(" ({})", approvers.join(", "))
            };
            format!(
                "  ⏸ waiting for approval{who}: {message}\n    awl approve {gate_id}   |   awl reject {gate_id} --comment WHY"
            )
        }
        RunEvent::GateApproved { by, .. } => format!("  ✓ approved by {by}"),
        RunEvent::GateRejected { by, comment, .. } => format!("  ✗ rejected by {by}: {comment}"),
        RunEvent::GateExpired { .. } => "  ✗ the gate expired".into(),
        RunEvent::BudgetExceeded {
            budget_usd,
            total_usd,
            ..
        } => {
            format!("  $ over budget: ${total_usd:.4} of ${budget_usd:.4}")
        }
        RunEvent::CompensationStarted { steps, .. } if !steps.is_empty() => {
            format!(
                "  ↶ compensating {}",
                steps
                    .iter()
                    .map(|s| s.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        }
        RunEvent::CompensationStepRan {
            step_id,
            succeeded,
            error,
            ..
        } => {
            if *succeeded {
                format!("  ↶ compensated {step_id}")
            } else {
                format!(
                    "  ↶ compensation of {step_id} failed: {}",
                    error.as_deref().unwrap_or("")
                )
            }
        }
        _ => return None,
    })
}

fn summary(run: &Run) {
    let took = match (run.started_at(), run.updated_at()) {
        (Some(s), Some(e)) => between(s, e),
        _ => "?".into(),
    };
    match run.outcome() {
        Some(RunOutcome::Succeeded { outputs, .. }) => {
            eprintln!("succeeded in {took}");
            if outputs.as_object().is_some_and(|o| !o.is_empty()) {
                println!(
                    "{}",
                    serde_json::to_string_pretty(outputs).unwrap_or_default()
                );
            }
        }
        Some(RunOutcome::Failed {
            reason,
            error_class,
            ..
        }) => {
            let class = error_class.map(|c| format!(" ({c})")).unwrap_or_default();
            eprintln!("failed in {took}{class}: {reason}");
        }
        Some(RunOutcome::Cancelled { by, reason, .. }) => eprintln!("cancelled by {by}: {reason}"),
        None => eprintln!(
            "{} after {took}",
            run.status().map_or("not started", |s| s.as_str())
        ),
    }
}
