//! `awl resume RUN`: let a paused run start steps again.

use clap::Args;

use crate::clock::system_clock;
use crate::domain::ids::RunId;
use crate::runs::Runs;
use crate::store::EventStore;

use super::common::actor;

#[derive(Debug, Args)]
pub struct ResumeArgs {
    run: RunId,
    #[arg(long)]
    by: Option<String>,
}

pub async fn resume(store: EventStore, args: ResumeArgs) -> anyhow::Result<()> {
    Runs::new(store, system_clock())
        .resume(args.run, &actor(&args.by))
        .await?;
    println!("resumed run {}", args.run);
    Ok(())
}
