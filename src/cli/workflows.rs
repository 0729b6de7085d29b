//! `awl workflows list|show|diff|retire|pause|resume`: the registered workflows and
//! their versions. A run stays on the version it started with; retiring a version
//! stops new runs of it while the runs on it finish. Pausing a workflow holds its runs
//! (no new step starts) and makes new runs start paused, until it is resumed.

use clap::{Args, Subcommand};
use serde_json::Value;

use crate::bulk::BulkActions;
use crate::clock::system_clock;
use crate::definitions::catalog;
use crate::store::EventStore;

use super::common::actor;

#[derive(Debug, Args)]
pub struct WorkflowsArgs {
    #[command(subcommand)]
    command: WorkflowsCommand,
}

#[derive(Debug, Subcommand)]
enum WorkflowsCommand {
    /// Every workflow, its versions, which one new runs start, and what is retired.
    List {
        #[arg(long)]
        json: bool,
    },
    /// A version's definition as registered (`NAME` alone: the one new runs start).
    Show {
        /// `NAME` or `NAME@VERSION`.
        workflow: String,
    },
    /// What changed between two versions of a workflow, line by line.
    Diff {
        name: String,
        from: String,
        to: String,
    },
    /// Stop new runs of a version; the runs on it finish on it.
    Retire {
        /// `NAME@VERSION`.
        workflow: String,
        #[arg(long, default_value = "retired from the command line")]
        reason: String,
        #[arg(long)]
        by: Option<String>,
    },
    /// Pause a whole workflow: its active runs start no new step (steps in flight
    /// finish) and new runs start paused, until `awl workflows resume`.
    Pause {
        name: String,
        #[arg(long, default_value = "paused from the command line")]
        reason: String,
        #[arg(long)]
        by: Option<String>,
    },
    /// Resume a paused workflow: the runs its pause held (and the runs that queued)
    /// go on; runs paused one by one stay paused.
    Resume {
        name: String,
        #[arg(long)]
        by: Option<String>,
    },
}

pub async fn workflows(store: EventStore, args: WorkflowsArgs) -> anyhow::Result<()> {
    match args.command {
        WorkflowsCommand::List { json } => list(&store, json).await,
        WorkflowsCommand::Show { workflow } => {
            let (name, version) = split(&workflow);
            let (version, definition) = catalog::definition(&store, name, version).await?;
            eprintln!("{name} {version}");
            println!("{}", serde_json::to_string_pretty(&definition)?);
            Ok(())
        }
        WorkflowsCommand::Diff { name, from, to } => {
            let (_, a) = catalog::definition(&store, &name, Some(&from)).await?;
            let (_, b) = catalog::definition(&store, &name, Some(&to)).await?;
            println!("--- {name}@{from}\n+++ {name}@{to}");
            for line in line_diff(&pretty(&a), &pretty(&b)) {
                println!("{line}");
            }
            Ok(())
        }
        WorkflowsCommand::Retire {
            workflow,
            reason,
            by,
        } => {
            let (name, Some(version)) = split(&workflow) else {
                anyhow::bail!("name the version to retire: `awl workflows retire NAME@VERSION`");
            };
            catalog::retire_version(
                &store,
                name,
                version,
                &actor(&by),
                &reason,
                chrono::Utc::now(),
            )
            .await?;
            println!("retired {name}@{version}: it takes no new runs; runs on it finish on it");
            Ok(())
        }
        WorkflowsCommand::Pause { name, reason, by } => {
            let by = actor(&by);
            let service = BulkActions::new(store, system_clock());
            let planned = service.pause_workflow(&name, &reason, &by).await?;
            let bulk = carry_out(&service, &planned, &by).await?;
            println!(
                "paused {name}: {} active runs held, new runs start paused (bulk {})",
                bulk.acted(),
                bulk.id().unwrap_or_default()
            );
            Ok(())
        }
        WorkflowsCommand::Resume { name, by } => {
            let by = actor(&by);
            let service = BulkActions::new(store, system_clock());
            let resumed = match service.resume_workflow(&name, &by).await? {
                Some(planned) => carry_out(&service, &planned, &by).await?.acted(),
                None => 0,
            };
            println!("resumed {name}: {resumed} held runs go on");
            Ok(())
        }
    }
}

async fn carry_out(
    service: &BulkActions,
    planned: &crate::domain::bulk::Bulk,
    by: &str,
) -> anyhow::Result<crate::domain::bulk::Bulk> {
    let id = planned.id().unwrap_or_default();
    Ok(service.carry_out(id, 200, by, &|_| {}).await?)
}

async fn list(store: &EventStore, json: bool) -> anyhow::Result<()> {
    let entries = catalog::list(store).await?;
    if json {
        for e in &entries {
            println!("{}", serde_json::to_string(e)?);
        }
        return Ok(());
    }
    for e in &entries {
        let latest = e.latest.as_deref().unwrap_or("none runnable");
        let retired = e
            .retired
            .as_ref()
            .map(|r| format!("  RETIRED {r}"))
            .unwrap_or_default();
        let paused = e
            .paused
            .as_ref()
            .map(|r| format!("  PAUSED {r}"))
            .unwrap_or_default();
        println!("{}  (new runs: {latest}){retired}{paused}", e.workflow);
        for v in &e.versions {
            let retired = v
                .retired
                .as_ref()
                .map(|r| format!("  retired {r}"))
                .unwrap_or_default();
            println!(
                "  {:<12} {:<9} by {} at {}{retired}",
                v.version, v.source, v.registered_by, v.registered_at
            );
        }
    }
    Ok(())
}

fn split(reference: &str) -> (&str, Option<&str>) {
    match reference.split_once('@') {
        Some((name, version)) => (name, Some(version)),
        None => (reference, None),
    }
}

fn pretty(definition: &Value) -> String {
    serde_json::to_string_pretty(definition).unwrap_or_default()
}

/// The lines of `a` and `b` marked as kept (` `), removed (`-`) or added (`+`), by
/// their longest common subsequence. Definitions are a few hundred lines: the
/// quadratic table is small.
pub fn line_diff(a: &str, b: &str) -> Vec<String> {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let mut lcs = vec![vec![0usize; b.len() + 1]; a.len() + 1];
    for i in (0..a.len()).rev() {
        for j in (0..b.len()).rev() {
            lcs[i][j] = if a[i] == b[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() || j < b.len() {
        if i < a.len() && j < b.len() && a[i] == b[j] {
            out.push(format!(" {}", a[i]));
            i += 1;
            j += 1;
        } else if j < b.len() && (i == a.len() || lcs[i][j + 1] >= lcs[i + 1][j]) {
            out.push(format!("+{}", b[j]));
            j += 1;
        } else {
            out.push(format!("-{}", a[i]));
            i += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests;
