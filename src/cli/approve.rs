//! `awl approve GATE`: approve a human approval gate; the run goes on.

use clap::Args;

use crate::clock::system_clock;
use crate::domain::ids::GateId;
use crate::runs::{GateDecision, Runs};
use crate::store::EventStore;

use super::common::actor;

#[derive(Debug, Args)]
pub struct ApproveArgs {
    gate: GateId,
    #[arg(long)]
    comment: Option<String>,
    /// Who decides (default: $USER); must be one of the gate's approvers if it names any.
    #[arg(long)]
    by: Option<String>,
}

pub async fn approve(store: EventStore, args: ApproveArgs) -> anyhow::Result<()> {
    let decision = GateDecision::Approve {
        comment: args.comment,
    };
    let (run, _) = Runs::new(store, system_clock())
        .decide_gate(args.gate, decision, &actor(&args.by))
        .await?;
    let run = run.id().unwrap_or_default();
    println!("approved gate {} of run {run}", args.gate);
    Ok(())
}
