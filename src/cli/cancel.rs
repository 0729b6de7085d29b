//! `awl cancel RUN`: cancel a run (its parent, if any, is woken to see it).

use clap::Args;

use crate::clock::system_clock;
use crate::domain::ids::RunId;
use crate::runs::Runs;
use crate::store::EventStore;

use super::common::actor;

#[derive(Debug, Args)]
pub struct CancelArgs {
    run: RunId,
    #[arg(long, default_value = "cancelled from the command line")]
    reason: String,
    #[arg(long)]
    by: Option<String>,
}

pub async fn cancel(store: EventStore, args: CancelArgs) -> anyhow::Result<()> {
    Runs::new(store, system_clock())
        .cancel(args.run, &actor(&args.by), &args.reason)
        .await?;
    println!("cancelled run {}", args.run);
    Ok(())
}
