//! `awl bulk cancel|pause|resume|retry [filter] [--dry-run]` and `awl bulk rerun --from
//! STEP [filter]`: one action over every run a filter selects, carried out here in batches and recorded as a stream of its own;
//! `awl bulk continue ID` carries on one whose process stopped; `awl bulk show ID`.

use std::collections::BTreeMap;
use std::io::Write;

use clap::{Args, Subcommand};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::bulk::BulkActions;
use crate::clock::system_clock;
use crate::domain::bulk::{Bulk, BulkAction, BulkFilter};
use crate::store::EventStore;

use super::common::actor;
use super::time_arg::parse_time;

#[derive(Debug, Args)]
pub struct BulkArgs {
    #[command(subcommand)]
    command: BulkCommand,
}

#[derive(Debug, Subcommand)]
enum BulkCommand {
    /// Cancel every run the filter selects.
    Cancel(Selection),
    /// Pause every run the filter selects.
    Pause(Selection),
    /// Resume every paused run the filter selects.
    Resume(Selection),
    /// Rerun every failed run the filter selects from the step it stopped at.
    Retry(Selection),
    /// Rerun every finished run the filter selects from one step, keeping the outputs
    /// of the steps before it.
    Rerun {
        /// The top-level step each run starts again at.
        #[arg(long = "from", value_name = "STEP")]
        from_step: String,
        #[command(flatten)]
        selection: Selection,
    },
    /// Carry on a bulk action whose process stopped, from its last recorded batch.
    Continue {
        id: Uuid,
        #[arg(long, default_value_t = 200)]
        batch: usize,
        /// Who acts (default: who planned it).
        #[arg(long)]
        by: Option<String>,
    },
    /// Where a bulk action is.
    Show {
        id: Uuid,
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
struct Selection {
    #[arg(long)]
    workflow: Option<String>,
    /// A run status (repeatable): RUNNING, WAITING, PAUSED, FAILED...
    #[arg(long = "status")]
    statuses: Vec<String>,
    /// Started at or after (RFC 3339, YYYY-MM-DD, or an age: 2h, 7d).
    #[arg(long)]
    since: Option<String>,
    /// Started before.
    #[arg(long)]
    until: Option<String>,
    /// An input's value: `--input customer=acme` (repeatable; read as JSON when it
    /// parses, else as text).
    #[arg(long = "input", value_name = "NAME=VALUE")]
    inputs: Vec<String>,
    #[arg(long, default_value = "bulk action from the command line")]
    reason: String,
    /// Say how many runs it would touch, and touch none.
    #[arg(long)]
    dry_run: bool,
    /// Runs per recorded batch.
    #[arg(long, default_value_t = 200)]
    batch: usize,
    #[arg(long)]
    by: Option<String>,
}

impl Selection {
    fn filter(&self) -> anyhow::Result<BulkFilter> {
        let now = chrono::Utc::now();
        let time = |t: &Option<String>| -> anyhow::Result<_> {
            t.as_deref()
                .map(|t| parse_time(t, now))
                .transpose()
                .map_err(anyhow::Error::msg)
        };
        let mut inputs = BTreeMap::new();
        for pair in &self.inputs {
            let Some((name, value)) = pair.split_once('=') else {
                anyhow::bail!("--input {pair:?}: expected NAME=VALUE");
            };
            let value = serde_json::from_str(value).unwrap_or(Value::String(value.to_string()));
            inputs.insert(name.trim().to_string(), value);
        }
        Ok(BulkFilter {
            workflow: self.workflow.clone(),
            statuses: self.statuses.iter().map(|s| s.to_uppercase()).collect(),
            since: time(&self.since)?,
            until: time(&self.until)?,
            inputs,
            run_ids: Vec::new(),
        })
    }
}

pub async fn bulk(store: EventStore, args: BulkArgs) -> anyhow::Result<()> {
    let service = BulkActions::new(store, system_clock());
    let (action, from_step, selection) = match args.command {
        BulkCommand::Cancel(s) => (BulkAction::Cancel, None, s),
        BulkCommand::Pause(s) => (BulkAction::Pause, None, s),
        BulkCommand::Resume(s) => (BulkAction::Resume, None, s),
        BulkCommand::Retry(s) => (BulkAction::Retry, None, s),
        BulkCommand::Rerun {
            from_step,
            selection,
        } => (BulkAction::Rerun, Some(from_step), selection),
        BulkCommand::Continue { id, batch, by } => {
            let bulk = service.get(id).await?;
            eprintln!(
                "bulk {id}: carrying on at {} of {}",
                bulk.through(),
                bulk.total()
            );
            // On behalf of whoever planned it, unless someone else says so.
            let by = by.unwrap_or_else(|| bulk.by().to_string());
            let bulk = service.carry_out(id, batch, &by, &report).await?;
            return summary(&bulk);
        }
        BulkCommand::Show { id, json } => {
            let bulk = service.get(id).await?;
            if json {
                println!("{}", describe(&bulk));
            } else {
                summary(&bulk)?;
            }
            return Ok(());
        }
    };
    let filter = selection.filter()?;
    crate::domain::bulk::check_step(action, from_step.as_deref())?;
    if selection.dry_run {
        let selected = service.select(&filter).await?;
        println!(
            "would {} {} run{}",
            action.as_str(),
            selected.len(),
            if selected.len() == 1 { "" } else { "s" }
        );
        for run in selected.iter().take(10) {
            println!("  {run}");
        }
        return Ok(());
    }
    let by = actor(&selection.by);
    let bulk = service
        .plan(action, from_step, filter, &selection.reason, &by)
        .await?;
    let id = bulk.id().unwrap_or_default();
    eprintln!("bulk {id}: {} {} runs", action.as_str(), bulk.total());
    let _ = std::io::stderr().flush();
    let bulk = service.carry_out(id, selection.batch, &by, &report).await?;
    summary(&bulk)
}

fn report(bulk: &Bulk) {
    eprintln!("  {} of {} done", bulk.through(), bulk.total());
}

fn describe(bulk: &Bulk) -> Value {
    json!({
        "bulk_id": bulk.id(),
        "action": bulk.action().map(|a| a.as_str()),
        "from_step": bulk.from_step(),
        "filter": bulk.filter(),
        "status": bulk.status(),
        "total": bulk.total(),
        "through": bulk.through(),
        "acted": bulk.acted(),
        "skipped": bulk.skipped(),
        "by": bulk.by(),
        "planned_at": bulk.planned_at(),
    })
}

fn summary(bulk: &Bulk) -> anyhow::Result<()> {
    println!(
        "bulk {}: {} {} of {} runs ({} acted on, {} skipped): {}",
        bulk.id().unwrap_or_default(),
        bulk.action().map_or("?", |a| a.as_str()),
        bulk.through(),
        bulk.total(),
        bulk.acted(),
        bulk.skipped().len(),
        bulk.status()
            .map_or("?".to_string(), |s| format!("{s:?}").to_uppercase())
    );
    for s in bulk.skipped().iter().take(20) {
        println!("  skipped {}: {}", s.run_id, s.reason);
    }
    Ok(())
}
