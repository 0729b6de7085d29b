//! `awl rerun RUN --from STEP [--var k=v]`: a new run of a finished run's workflow
//! version that keeps the outputs of the steps before STEP and carries on from it,
//! here in the foreground (or, with `--detach`, for `awl worker`s). With `--var` it is
//! a fork: those inputs changed, the others as the origin had them.

use clap::Args;

use crate::clock::system_clock;
use crate::domain::ids::RunId;
use crate::runs::Runs;
use crate::store::EventStore;

use super::agents::Declarations;
use super::common::actor;
use super::registry::WorkflowTools;
use super::run::{Execution, execute, parse_vars};

#[derive(Debug, Args)]
pub struct RerunArgs {
    /// The finished run to start again from a step.
    run: RunId,
    /// The top-level step to start again at; the steps before it keep their outputs.
    #[arg(long = "from", value_name = "STEP")]
    from: String,
    /// A changed input (a fork): `--var name=value`, repeatable, read as JSON when it
    /// parses as JSON, else as text.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    vars: Vec<String>,
    #[command(flatten)]
    how: Execution,
    #[arg(long)]
    by: Option<String>,
}

pub async fn rerun(
    store: EventStore,
    args: RerunArgs,
    declarations: &Declarations,
) -> anyhow::Result<()> {
    // The registry performs the MCP tools its steps call, when it runs here.
    let tools = if args.how.detach {
        None
    } else {
        Some(WorkflowTools::load(declarations)?.performer())
    };
    let runs = Runs::new(store.clone(), system_clock());
    let head = store.head().await?;
    let changes = if args.vars.is_empty() {
        None
    } else {
        let mut map = parse_vars(&args.vars)?;
        for value in map.values_mut() {
            if let Some(text) = value.as_str()
                && let Ok(parsed) = serde_json::from_str(text)
            {
                *value = parsed;
            }
        }
        Some(map)
    };
    let fork = changes.is_some();
    let started = runs
        .rerun(args.run, &args.from, changes, &actor(&args.by))
        .await?;
    let run_id = started.run_id;
    if args.how.shows_progress() {
        eprintln!(
            "run {run_id}: {} of {} from step `{}` ({} {})",
            if fork { "fork" } else { "rerun" },
            args.run,
            args.from,
            started.workflow,
            started.version
        );
    }
    execute(&store, &runs, run_id, head, &args.how, tools).await
}
