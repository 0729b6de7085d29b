//! `awl list`: runs, newest first, from the runs projection (brought up to date with
//! the log first).

use std::io::Write;
use std::time::Duration;

use anyhow::bail;
use chrono::SecondsFormat;
use clap::Args;
use serde_json::Value;

use crate::clock::system_clock;
use crate::domain::run::RunStatus;
use crate::projections::queries::RunFilter;
use crate::runs::Runs;
use crate::store::EventStore;

use super::common::human;
use super::output::run_json;

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

pub async fn list(store: EventStore, args: ListArgs) -> anyhow::Result<()> {
    let wanted = args.status.as_deref().map(str::to_ascii_uppercase);
    if let Some(s) = &wanted
        && !RunStatus::ALL.iter().any(|st| st.as_str() == s)
    {
        bail!(
            "--status {s}: expected one of running, waiting, compensating, succeeded, failed, cancelled"
        );
    }
    let filter = RunFilter {
        statuses: wanted.into_iter().collect(),
        workflow: args.workflow,
        limit: args.limit,
        ..RunFilter::default()
    };
    let runs = Runs::new(store, system_clock()).list(&filter).await?;
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
