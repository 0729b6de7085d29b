//! `awl reject GATE --comment WHY`: reject a gate; its `on_reject` applies.

use clap::Args;

use crate::clock::system_clock;
use crate::domain::ids::GateId;
use crate::runs::{GateDecision, Runs};
use crate::store::EventStore;

use super::common::actor;

#[derive(Debug, Args)]
pub struct RejectArgs {
    gate: GateId,
    /// Why (required).
    #[arg(long)]
    comment: String,
    #[arg(long)]
    by: Option<String>,
}

pub async fn reject(store: EventStore, args: RejectArgs) -> anyhow::Result<()> {
    let decision = GateDecision::new(false, Some(args.comment))?;
    let (run, _) = Runs::new(store, system_clock())
        .decide_gate(args.gate, decision, &actor(&args.by))
        .await?;
    let run = run.id().unwrap_or_default();
    println!("rejected gate {} of run {run}", args.gate);
    Ok(())
}
