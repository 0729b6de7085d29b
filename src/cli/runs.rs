//! `awl run`, `awl worker`, `awl list`, `awl status`, `awl approve`, `awl reject`,
//! `awl cancel`, `awl replay`, `awl task`: running workflows and acting on runs from
//! the terminal, on the embedded store or on Postgres.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use chrono::{DateTime, SecondsFormat, Utc};
use clap::{Args, Subcommand};
use futures_util::StreamExt;
use serde_json::{Map, Value, json};
use tokio::sync::watch;

use crate::clock::system_clock;
use crate::domain::ids::{AgentId, GateId, RunId, TaskId};
use crate::domain::run::{AttemptOutcome, Run, RunEvent, RunOutcome, RunStatus, StepState};
use crate::engine::{self, TickInput};
use crate::executor::control::{self, GateDecision, TaskFinish};
use crate::executor::definitions::{self, Definitions};
use crate::executor::{ExecError, Worker, WorkerConfig};
use crate::log::{EventFilter, StreamRef, StreamType};
use crate::runners::{Runners, RunnersConfig};
use crate::store::rows::Param;
use crate::store::{EventStore, domain_io};
use crate::workflow::inputs::{self, Given};

use super::Invalid;

pub(super) fn actor(by: &Option<String>) -> String {
    by.clone()
        .or_else(|| std::env::var("USER").ok())
        .filter(|s| !s.trim().is_empty())
        .unwrap_or_else(|| "cli".into())
}

fn invalid(e: ExecError) -> anyhow::Error {
    match e {
        ExecError::Invalid(d) => {
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

/// A worker owner name: unique per process.
pub(super) fn owner(kind: &str) -> String {
    let host = std::env::var("HOSTNAME").unwrap_or_else(|_| "localhost".into());
    format!(
        "{kind}:{host}:{}:{}",
        std::process::id(),
        uuid::Uuid::new_v4().simple()
    )
}

/// Variables expressions may read: `AWL_ENV_ALLOW=HOME,CI` names them.
pub(super) fn allowed_env(names: &[String]) -> BTreeMap<String, String> {
    let mut all: BTreeSet<String> = names.iter().cloned().collect();
    if let Ok(list) = std::env::var("AWL_ENV_ALLOW") {
        all.extend(
            list.split(',')
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty()),
        );
    }
    all.into_iter()
        .filter_map(|name| std::env::var(&name).ok().map(|v| (name, v)))
        .collect()
}

/// Database connections for `database` steps: `AWL_CONNECTION_<NAME>=url`.
fn connections() -> BTreeMap<String, String> {
    std::env::vars()
        .filter_map(|(k, v)| {
            k.strip_prefix("AWL_CONNECTION_")
                .map(|name| (name.to_ascii_lowercase(), v))
        })
        .collect()
}

pub(super) fn runners() -> Runners {
    Runners::new(RunnersConfig {
        connections: connections(),
        ..RunnersConfig::default()
    })
}

// ---- awl run ----------------------------------------------------------------------------

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The workflow file.
    file: PathBuf,
    /// An input: `--var name=value` (repeatable; read as the input's declared type).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    /// Start the run and print its id; a worker (`awl worker`) carries it out.
    #[arg(long)]
    detach: bool,
    /// Print the run's events as JSON lines instead of progress.
    #[arg(long)]
    json: bool,
    /// Environment variables expressions may read (`env.NAME`); repeatable.
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
    /// Who starts the run (default: $USER).
    #[arg(long)]
    by: Option<String>,
}

fn parse_vars(vars: &[String]) -> anyhow::Result<Map<String, Value>> {
    let mut map = Map::new();
    for var in vars {
        let Some((name, value)) = var.split_once('=') else {
            bail!("--var {var:?}: expected NAME=VALUE");
        };
        map.insert(name.trim().to_string(), Value::String(value.to_string()));
    }
    Ok(map)
}

pub async fn run(store: EventStore, args: RunArgs) -> anyhow::Result<()> {
    let by = actor(&args.by);
    let loaded = crate::workflow::load(&args.file).map_err(|d| invalid(ExecError::Invalid(d)))?;
    let inputs = inputs::resolve_for(
        &loaded.checked,
        &args.file,
        parse_vars(&args.vars)?,
        Given::Text,
    )
    .map_err(|d| invalid(ExecError::Invalid(d)))?;
    let now = Utc::now();
    let registered = definitions::register_file(&store, &args.file, &by, now)
        .await
        .map_err(invalid)?;
    // The run's events all come after the head now: follow from there, not from the
    // start of a log that may hold millions of events.
    let head = store.head().await?;
    let run_id = control::start_run(&store, &registered, inputs, RunId::new(), &by, now).await?;
    if args.detach {
        if args.json {
            println!("{}", json!({"run_id": run_id.to_string()}));
        } else {
            println!("{run_id}");
        }
        return Ok(());
    }
    if !args.json {
        eprintln!(
            "run {run_id}: {} {} on {}",
            registered.name,
            registered.version,
            store.location()
        );
    }
    let only = Arc::new(Mutex::new(BTreeSet::from([run_id.to_string()])));
    let mut config = WorkerConfig::new(owner("run"));
    config.only = Some(only);
    config.exit_when_done = true;
    config.poll = Duration::from_millis(250);
    config.env = allowed_env(&args.env_allow);
    let worker = Worker::new(store.clone(), runners(), config, system_clock());
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut work = tokio::spawn(worker.run(stop_rx));
    let progress = tokio::spawn(follow(store.clone(), run_id, head, args.json));
    let interrupted = tokio::select! {
        result = &mut work => { result.context("the worker stopped")??; false }
        _ = tokio::signal::ctrl_c() => true,
    };
    if interrupted {
        eprintln!("interrupted: the run stays where it is; `awl worker` carries it on");
        let _ = stop_tx.send(true);
        work.await.context("the worker stopped")??;
    }
    if interrupted {
        progress.abort();
    } else {
        // The printer stops at the run's last event; wait for it to get there.
        match tokio::time::timeout(Duration::from_secs(10), progress).await {
            Ok(joined) => joined.context("the progress printer stopped")??,
            Err(_) => eprintln!("(progress output stopped early)"),
        }
    }
    let (run, _) =
        domain_io::load::<Run>(&store, &StreamRef::new(StreamType::Run, run_id.to_string()))
            .await?;
    if !args.json {
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
            .map(|s| format!(" in {}", human((*at - *s).to_std().unwrap_or_default())))
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

fn human(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1_000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{}m{:02}s", ms / 60_000, (ms / 1_000) % 60)
    }
}

fn summary(run: &Run) {
    let took = match (run.started_at(), run.updated_at()) {
        (Some(s), Some(e)) => human((e - s).to_std().unwrap_or_default()),
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

// ---- awl worker -------------------------------------------------------------------------

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Most runs held at once.
    #[arg(long, default_value_t = 512)]
    batch: usize,
    /// How long a claimed run stays this worker's without a renewal, in seconds.
    #[arg(long, default_value_t = 30)]
    lease_seconds: u64,
    /// Environment variables expressions may read (`env.NAME`); repeatable.
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
}

pub async fn worker(store: EventStore, args: WorkerArgs) -> anyhow::Result<()> {
    let mut config = WorkerConfig::new(owner("worker"));
    config.batch = args.batch.max(1);
    config.lease = Duration::from_secs(args.lease_seconds.max(1));
    config.env = allowed_env(&args.env_allow);
    eprintln!("awl worker {} on {}", config.owner, store.location());
    let worker = Worker::new(store, runners(), config, system_clock());
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown_signal().await;
        eprintln!("stopping: finishing work in flight, then giving runs back");
        let _ = stop_tx.send(true);
    });
    worker.run(stop_rx).await?;
    Ok(())
}

pub(super) async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

// ---- awl list / status / replay -------------------------------------------------------------

#[derive(Debug, Args)]
pub struct ListArgs {
    /// Only runs in this status (running, waiting, compensating, succeeded, failed,
    /// cancelled).
    #[arg(long)]
    status: Option<String>,
    /// Only runs of this workflow.
    #[arg(long)]
    workflow: Option<String>,
    /// At most this many, newest first.
    #[arg(long, default_value_t = 50)]
    limit: usize,
    #[arg(long)]
    json: bool,
}

/// Every run, folded from the log (newest first). The runs projection replaces this
/// scan once projections exist.
async fn all_runs(
    store: &EventStore,
    workflow: Option<&str>,
    status: Option<&str>,
    limit: usize,
) -> anyhow::Result<Vec<Run>> {
    // The runs projection keeps every run's folded state: bring it up to date with the
    // log (nothing to do when a server keeps it live), then read it, newest first.
    let projections = crate::projections::Projections::new(store.clone());
    projections.prepare().await?;
    projections.catch_up_all().await?;
    let mut clauses = Vec::new();
    let mut params = Vec::new();
    if let Some(w) = workflow {
        clauses.push("workflow = ?");
        params.push(Param::from(w));
    }
    if let Some(s) = status {
        clauses.push("status = ?");
        params.push(Param::from(s));
    }
    let filter = if clauses.is_empty() {
        String::new()
    } else {
        format!(" WHERE {}", clauses.join(" AND "))
    };
    let sql = format!(
        "SELECT run_id, state FROM runs{filter} ORDER BY started_at DESC, run_id DESC LIMIT {}",
        limit.clamp(1, 100_000)
    );
    store
        .query_rows(&sql, &params)
        .await?
        .into_iter()
        .map(|row| {
            let state = row.get("state").and_then(Value::as_str).unwrap_or_default();
            serde_json::from_str::<Run>(state).map_err(|e| {
                anyhow::anyhow!(
                    "the runs view's state of run {} cannot be read ({e}); \
                     `awl projections rebuild runs` rebuilds it from the log",
                    row.get("run_id").and_then(Value::as_str).unwrap_or("?")
                )
            })
        })
        .collect()
}

fn run_json(run: &Run) -> Value {
    let current: Vec<String> = run
        .steps()
        .iter()
        .filter(|(_, s)| matches!(s, StepState::Running { .. } | StepState::Scheduled { .. }))
        .map(|(id, _)| id.to_string())
        .collect();
    json!({
        "run_id": run.id().map(|r| r.to_string()),
        "workflow": run.workflow().map(|w| w.to_string()),
        "version": run.workflow_version(),
        "status": run.status().map(|s| s.as_str()),
        "current_steps": current,
        "started_at": run.started_at(),
        "updated_at": run.updated_at(),
        "duration_ms": match (run.started_at(), run.updated_at()) {
            (Some(s), Some(e)) => Some((e - s).num_milliseconds()),
            _ => None,
        },
        "cost_usd": run.total_cost_usd(),
        "parent": run.parent().map(|p| json!({"run_id": p.run_id.to_string(), "step_id": p.step_id.to_string()})),
    })
}

pub async fn list(store: EventStore, args: ListArgs) -> anyhow::Result<()> {
    let wanted = args.status.as_deref().map(str::to_ascii_uppercase);
    if let Some(s) = &wanted
        && !RunStatus::ALL.iter().any(|st| st.as_str() == s)
    {
        bail!(
            "--status {s}: expected one of running, waiting, compensating, succeeded, failed, cancelled"
        );
    }
    let runs = all_runs(
        &store,
        args.workflow.as_deref(),
        wanted.as_deref(),
        args.limit,
    )
    .await?;
    let mut out = std::io::stdout().lock();
    if args.json {
        for run in &runs {
            writeln!(out, "{}", run_json(run))?;
        }
        return Ok(());
    }
    if runs.is_empty() {
        eprintln!("no runs");
        return Ok(());
    }
    writeln!(
        out,
        "{:<36}  {:<24}  {:<12}  {:<20}  {:>9}  CURRENT",
        "RUN", "WORKFLOW", "STATUS", "STARTED", "DURATION"
    )?;
    for run in &runs {
        let j = run_json(run);
        writeln!(
            out,
            "{:<36}  {:<24}  {:<12}  {:<20}  {:>9}  {}",
            j["run_id"].as_str().unwrap_or("?"),
            format!(
                "{}@{}",
                j["workflow"].as_str().unwrap_or("?"),
                run.workflow_version()
            ),
            j["status"].as_str().unwrap_or("?"),
            run.started_at()
                .map(|t| t.to_rfc3339_opts(SecondsFormat::Secs, true))
                .unwrap_or_default(),
            j["duration_ms"]
                .as_i64()
                .map(|ms| human(Duration::from_millis(ms.max(0) as u64)))
                .unwrap_or_default(),
            j["current_steps"]
                .as_array()
                .map(|a| a
                    .iter()
                    .filter_map(Value::as_str)
                    .collect::<Vec<_>>()
                    .join(","))
                .unwrap_or_default(),
        )?;
    }
    Ok(())
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run id.
    run: RunId,
    #[arg(long)]
    json: bool,
}

async fn load_run(store: &EventStore, run_id: RunId) -> anyhow::Result<Run> {
    let (run, version) =
        domain_io::load::<Run>(store, &StreamRef::new(StreamType::Run, run_id.to_string())).await?;
    if version == 0 {
        bail!("no run {run_id}");
    }
    Ok(run)
}

fn timeline_json(run: &Run) -> Value {
    let steps: Vec<Value> = run
        .steps()
        .iter()
        .map(|(id, state)| {
            let attempts: Vec<Value> = run
                .attempts(id)
                .iter()
                .map(|a| {
                    json!({
                        "attempt": a.attempt,
                        "scheduled_at": a.scheduled_at,
                        "due_at": a.due_at,
                        "started_at": a.started_at,
                        "restarted_at": a.restarted_at,
                        "ended_at": a.ended_at,
                        "outcome": a.outcome,
                        "error": a.error.as_ref().map(|e| json!({"class": e.class, "message": e.message})),
                        "recovery": a.recovery,
                        "cost_usd": a.cost_usd,
                    })
                })
                .collect();
            json!({"step_id": id.to_string(), "status": state.phase().as_str(), "attempts": attempts,
                   "output": run.succeeded_output(id)})
        })
        .collect();
    let gates: Vec<Value> = run
        .gates()
        .iter()
        .map(|g| json!({"gate_id": g.gate_id.to_string(), "step_id": g.step_id.to_string(), "message": g.message,
                        "approvers": g.approvers, "opened_at": g.opened_at, "expires_at": g.expires_at,
                        "decision": g.decision}))
        .collect();
    let mut j = run_json(run);
    j["steps"] = Value::Array(steps);
    j["gates"] = Value::Array(gates);
    j["outcome"] = serde_json::to_value(run.outcome()).unwrap_or(Value::Null);
    j
}

pub async fn status(store: EventStore, args: StatusArgs) -> anyhow::Result<()> {
    let run = load_run(&store, args.run).await?;
    if args.json {
        println!("{}", timeline_json(&run));
        return Ok(());
    }
    print_timeline(&run);
    Ok(())
}

fn print_timeline(run: &Run) {
    let mut out = std::io::stdout().lock();
    let start = run.started_at();
    let _ = writeln!(
        out,
        "run {}  {}@{}  {}",
        run.id().map(|r| r.to_string()).unwrap_or_default(),
        run.workflow().map(|w| w.to_string()).unwrap_or_default(),
        run.workflow_version(),
        run.status().map_or("?", |s| s.as_str())
    );
    let offset = |t: Option<DateTime<Utc>>| match (start, t) {
        (Some(s), Some(t)) => format!("+{}", human((t - s).to_std().unwrap_or_default())),
        _ => "-".into(),
    };
    let mut rows: Vec<(Option<DateTime<Utc>>, String)> = Vec::new();
    for id in run.steps().keys() {
        for a in run.attempts(id) {
            let outcome = match a.outcome {
                Some(AttemptOutcome::Succeeded) => "succeeded".to_string(),
                Some(AttemptOutcome::Failed) => format!(
                    "failed: {}",
                    a.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
                ),
                Some(AttemptOutcome::Skipped) => "skipped".into(),
                None if a.started_at.is_some() => "running".into(),
                None => format!("scheduled for {}", offset(Some(a.due_at))),
            };
            let took = match (a.started_at, a.ended_at) {
                (Some(s), Some(e)) => format!(" ({})", human((e - s).to_std().unwrap_or_default())),
                _ => String::new(),
            };
            let recovery = a
                .recovery
                .as_ref()
                .map(|r| format!(" → {r}"))
                .unwrap_or_default();
            let restarts = if a.restarted_at.is_empty() {
                String::new()
            } else {
                format!(" [restarted {}×]", a.restarted_at.len())
            };
            rows.push((
                a.started_at.or(Some(a.scheduled_at)),
                format!(
                    "{:>10}  {:<24} #{}  {outcome}{took}{recovery}{restarts}",
                    offset(a.started_at.or(Some(a.scheduled_at))),
                    id.to_string(),
                    a.attempt
                ),
            ));
        }
    }
    for g in run.gates() {
        let decision = g
            .decision
            .as_ref()
            .map(|d| d.to_string())
            .unwrap_or_else(|| format!("open: awl approve {}", g.gate_id));
        rows.push((
            Some(g.opened_at),
            format!(
                "{:>10}  {:<24} gate  {} — {decision}",
                offset(Some(g.opened_at)),
                g.step_id.to_string(),
                g.message
            ),
        ));
    }
    rows.sort_by_key(|(t, _)| *t);
    for (_, row) in rows {
        let _ = writeln!(out, "{row}");
    }
    if run.total_cost_usd() > 0.0 {
        let _ = writeln!(
            out,
            "cost ${:.4}, {} tokens",
            run.total_cost_usd(),
            run.total_tokens()
        );
    }
    match run.outcome() {
        Some(RunOutcome::Succeeded { outputs, .. }) => {
            let _ = writeln!(out, "outputs {}", outputs);
        }
        Some(RunOutcome::Failed { reason, .. }) => {
            let _ = writeln!(out, "failed: {reason}");
        }
        Some(RunOutcome::Cancelled { by, reason, .. }) => {
            let _ = writeln!(out, "cancelled by {by}: {reason}");
        }
        None => {}
    }
}

#[derive(Debug, Args)]
pub struct ReplayArgs {
    run: RunId,
    #[arg(long)]
    json: bool,
}

/// Rebuild a run from its events alone, show it, and what the engine would do next.
pub async fn replay(store: EventStore, args: ReplayArgs) -> anyhow::Result<()> {
    let started = Instant::now();
    let events = store
        .read_stream(&StreamRef::new(StreamType::Run, args.run.to_string()))
        .await?;
    if events.is_empty() {
        bail!("no run {}", args.run);
    }
    let read = started.elapsed();
    let folding = Instant::now();
    let (run, version) = domain_io::fold::<Run>(&events)?;
    let folded = folding.elapsed();
    let definitions = Definitions::default();
    let name = run.workflow().map(|w| w.to_string()).unwrap_or_default();
    let definition = definitions
        .get(&store, &name, run.workflow_version())
        .await?;
    let tick = engine::tick(
        &definition,
        &run,
        &TickInput {
            now: Utc::now(),
            ..TickInput::default()
        },
    )?;
    let next: Vec<String> = tick
        .events
        .iter()
        .map(cqrs_es::DomainEvent::event_type)
        .chain(tick.effects.iter().map(|e| {
            format!("{e:?}")
                .split([' ', '{', '('])
                .next()
                .unwrap_or("")
                .to_string()
        }))
        .collect();
    if args.json {
        let mut j = timeline_json(&run);
        j["replay"] = json!({"events": version, "read_ms": read.as_secs_f64() * 1e3, "fold_ms": folded.as_secs_f64() * 1e3, "next": next});
        println!("{j}");
        return Ok(());
    }
    print_timeline(&run);
    eprintln!(
        "replayed {version} events: read in {:.2} ms, folded in {:.3} ms",
        read.as_secs_f64() * 1e3,
        folded.as_secs_f64() * 1e3
    );
    if !run.is_terminal() {
        eprintln!(
            "next, if a worker picked it up now: {}",
            if next.is_empty() {
                "wait".into()
            } else {
                next.join(", ")
            }
        );
    }
    Ok(())
}

// ---- awl approve / reject / cancel / task ---------------------------------------------------

#[derive(Debug, Args)]
pub struct ApproveArgs {
    gate: GateId,
    #[arg(long)]
    comment: Option<String>,
    /// Who decides (default: $USER); must be one of the gate's approvers if it names any.
    #[arg(long)]
    by: Option<String>,
}

#[derive(Debug, Args)]
pub struct RejectArgs {
    gate: GateId,
    /// Why (required).
    #[arg(long)]
    comment: String,
    #[arg(long)]
    by: Option<String>,
}

pub async fn approve(store: EventStore, args: ApproveArgs) -> anyhow::Result<()> {
    let run = control::decide_gate(
        &store,
        args.gate,
        GateDecision::Approve {
            comment: args.comment,
        },
        &actor(&args.by),
        Utc::now(),
    )
    .await?;
    println!("approved gate {} of run {run}", args.gate);
    Ok(())
}

pub async fn reject(store: EventStore, args: RejectArgs) -> anyhow::Result<()> {
    let run = control::decide_gate(
        &store,
        args.gate,
        GateDecision::Reject {
            comment: args.comment,
        },
        &actor(&args.by),
        Utc::now(),
    )
    .await?;
    println!("rejected gate {} of run {run}", args.gate);
    Ok(())
}

#[derive(Debug, Args)]
pub struct CancelArgs {
    run: RunId,
    #[arg(long, default_value = "cancelled from the command line")]
    reason: String,
    #[arg(long)]
    by: Option<String>,
}

pub async fn cancel(store: EventStore, args: CancelArgs) -> anyhow::Result<()> {
    control::cancel_run(&store, args.run, &actor(&args.by), &args.reason, Utc::now()).await?;
    println!("cancelled run {}", args.run);
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

pub async fn task(store: EventStore, command: TaskCommand) -> anyhow::Result<()> {
    match command {
        TaskCommand::Complete {
            task,
            result,
            agent,
            by,
        } => {
            let result = serde_json::from_str(&result).unwrap_or(Value::String(result));
            let agent = AgentId::try_from(agent.as_str())?;
            control::finish_task(
                &store,
                task,
                TaskFinish::Complete { agent, result },
                &actor(&by),
                Utc::now(),
            )
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
            control::finish_task(
                &store,
                task,
                TaskFinish::Fail {
                    reason,
                    error_class: class,
                },
                &actor(&by),
                Utc::now(),
            )
            .await?;
            println!("failed task {task}");
        }
    }
    Ok(())
}
