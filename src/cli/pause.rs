//! `awl pause RUN`: hold a run (no step starts; steps in flight finish).

use clap::Args;

use crate::clock::system_clock;
use crate::domain::ids::RunId;
use crate::runs::Runs;
use crate::store::EventStore;

use super::common::actor;

#[derive(Debug, Args)]
pub struct PauseArgs {
    run: RunId,
    #[arg(long, default_value = "paused from the command line")]
    reason: String,
    #[arg(long)]
    by: Option<String>,
}

pub async fn pause(store: EventStore, args: PauseArgs) -> anyhow::Result<()> {
    Runs::new(store, system_clock())
        .pause(args.run, &actor(&args.by), &args.reason)
        .await?;
    println!("paused run {}", args.run);
    Ok(())
}
