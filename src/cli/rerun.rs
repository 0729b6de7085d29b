//! `awl rerun RUN --from STEP [--var k=v]`: a new run of a finished run's workflow
//! version that keeps the outputs of the steps before STEP and carries on from it,
//! here in the foreground (or, with `--detach`, for `awl worker`s). With `--var` it is
//! a fork: those inputs changed, the others as the origin had them.

use clap::Args;
use serde_json::json;

use crate::clock::system_clock;
use crate::domain::ids::RunId;
use crate::runs::Runs;
use crate::store::EventStore;

use super::common::actor;
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
    /// Start it and print its id; a worker carries it out.
    #[arg(long)]
    detach: bool,
    #[arg(long)]
    json: bool,
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
    #[arg(long = "secret-env", value_name = "NAME")]
    secret_env: Vec<String>,
    #[arg(long)]
    by: Option<String>,
}

pub async fn rerun(store: EventStore, args: RerunArgs) -> anyhow::Result<()> {
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
    if args.detach {
        if args.json {
            println!("{}", json!({"run_id": run_id.to_string()}));
        } else {
            println!("{run_id}");
        }
        return Ok(());
    }
    if !args.json {
        eprintln!(
            "run {run_id}: {} of {} from step `{}` ({} {})",
            if fork { "fork" } else { "rerun" },
            args.run,
            args.from,
            started.workflow,
            started.version
        );
    }
    let how = Execution {
        json: args.json,
        env_allow: &args.env_allow,
        secret_env: &args.secret_env,
    };
    execute(&store, &runs, run_id, head, how).await
}
