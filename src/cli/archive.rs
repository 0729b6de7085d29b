//! `awl archive --older-than AGE`: move finished runs out of the hot log into the
//! archive table. Their views stay as they were, `awl status` and `awl events` still
//! read them, and a projection rebuild reads the archive too.

use clap::Args;

use crate::clock::system_clock;
use crate::runs::Runs;
use crate::store::EventStore;

use super::time_arg::parse_time;

#[derive(Debug, Args)]
pub struct ArchiveArgs {
    /// Runs that finished before this: an age (`30d`, `12h`), a date or RFC 3339.
    #[arg(long, value_name = "WHEN")]
    older_than: String,
    /// Only say how many runs would move.
    #[arg(long)]
    dry_run: bool,
}

pub async fn archive(store: EventStore, args: ArchiveArgs) -> anyhow::Result<()> {
    let cutoff = parse_time(&args.older_than, chrono::Utc::now())
        .map_err(|e| anyhow::anyhow!("--older-than {e}"))?;
    let runs = Runs::new(store, system_clock());
    let pass = runs.archive_finished(cutoff, args.dry_run).await?;
    if args.dry_run {
        println!(
            "would archive {} finished runs (ended before {cutoff})",
            pass.selected.len()
        );
        return Ok(());
    }
    println!(
        "archived {} runs and {} of their tasks ({} events) that ended before {cutoff}",
        pass.runs, pass.tasks, pass.events
    );
    if !pass.partitions.is_empty() {
        println!(
            "moved {} run partitions of the log whole: {}",
            pass.partitions.len(),
            pass.partitions.join(", ")
        );
    }
    Ok(())
}
