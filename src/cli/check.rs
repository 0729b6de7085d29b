//! `awl check`: verify the store's log (versions, step outcomes, gate decisions, task
//! transitions) and every projection against it, and print every problem with its
//! stream and position; exit 1 if there is one.

use clap::Args;

use crate::check::check_store;
use crate::store::EventStore;

use super::Invalid;

#[derive(Debug, Args)]
pub struct CheckArgs {
    /// One JSON object: the counts and every finding.
    #[arg(long)]
    json: bool,
    /// Check the log only, not the projections (comparing them folds the log once
    /// more per projection).
    #[arg(long)]
    log_only: bool,
}

pub async fn check(store: EventStore, args: CheckArgs) -> anyhow::Result<()> {
    let report = check_store(&store, args.log_only).await?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        for f in &report.findings {
            println!(
                "{} at position {}: {} ({})",
                f.stream, f.position, f.message, f.rule
            );
        }
        println!(
            "checked {} events in {} streams: {}",
            report.events,
            report.streams,
            match report.findings.len() {
                0 => "no problems".to_string(),
                1 => "1 problem".to_string(),
                n => format!("{n} problems"),
            }
        );
    }
    if report.findings.is_empty() {
        Ok(())
    } else {
        Err(Invalid.into())
    }
}
