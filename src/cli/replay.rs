//! `awl replay RUN`: rebuild a run from its events alone, print it, and say what a
//! worker picking it up now would do next.

use clap::Args;
use serde_json::json;

use crate::clock::system_clock;
use crate::domain::ids::RunId;
use crate::runs::Runs;
use crate::store::EventStore;

use super::output::{print_timeline, timeline_json};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    run: RunId,
    #[arg(long)]
    json: bool,
}

pub async fn replay(store: EventStore, args: ReplayArgs) -> anyhow::Result<()> {
    let replay = Runs::new(store, system_clock()).replay(args.run).await?;
    let (read_ms, fold_ms) = (
        replay.read.as_secs_f64() * 1e3,
        replay.fold.as_secs_f64() * 1e3,
    );
    if args.json {
        let mut j = timeline_json(&replay.run);
        j["replay"] = json!({"events": replay.version, "read_ms": read_ms, "fold_ms": fold_ms, "next": replay.next});
        println!("{j}");
        return Ok(());
    }
    print_timeline(&replay.run);
    eprintln!(
        "replayed {} events: read in {read_ms:.2} ms, folded in {fold_ms:.3} ms",
        replay.version
    );
    if !replay.run.is_terminal() {
        eprintln!(
            "next, if a worker picked it up now: {}",
            if replay.next.is_empty() {
                "wait".into()
            } else {
                replay.next.join(", ")
            }
        );
    }
    Ok(())
}
