//! `awl status RUN`: a run's timeline: each step and attempt with times, errors and
//! recoveries, gates, outcome.

use clap::Args;

use crate::clock::system_clock;
use crate::domain::ids::RunId;
use crate::runs::Runs;
use crate::store::EventStore;

use super::output::{print_timeline, timeline_json};

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// The run id.
    run: RunId,
    #[arg(long)]
    json: bool,
}

pub async fn status(store: EventStore, args: StatusArgs) -> anyhow::Result<()> {
    let (run, _) = Runs::new(store, system_clock()).get(args.run).await?;
    if args.json {
        println!("{}", timeline_json(&run));
        return Ok(());
    }
    print_timeline(&run);
    Ok(())
}
