//! `awl replay`: rebuild a run from its events alone, check that this build's engine
//! still decides what they record, print it, and say what a worker picking it up now
//! would do next. `--export FILE` writes the run's history file; `--history FILE...`
//! replays history files (golden histories) without a store. A history that this
//! build would decide differently exits 1 with the event and step where it diverges.

use std::path::PathBuf;

use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};

use crate::clock::system_clock;
use crate::domain::ids::RunId;
use crate::runs::history::{HistoryError, HistoryFile};
use crate::runs::{Divergence, Runs, Verified};
use crate::store::EventStore;

use super::Invalid;
use super::common::{allowed_env, secrets};
use super::output::{print_timeline, timeline_json};

#[derive(Debug, Args)]
pub struct ReplayArgs {
    /// The run to replay.
    #[arg(required_unless_present = "history", conflicts_with = "history")]
    run: Option<RunId>,
    /// Replay these history files (from `--export`) instead of a stored run.
    #[arg(long, value_name = "FILE", num_args = 1..)]
    history: Vec<PathBuf>,
    /// Write the run's history file here (refused for a run with sealed values).
    #[arg(long, value_name = "FILE", conflicts_with = "history")]
    export: Option<PathBuf>,
    /// Environment variables the workflow's expressions read (`env.NAME`), as the
    /// worker allowed them; repeatable.
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
    /// Secret environment variables the worker masked (`--secret-env` of the worker).
    #[arg(long = "secret-env", value_name = "NAME")]
    secret_env: Vec<String>,
    #[arg(long)]
    json: bool,
}

impl ReplayArgs {
    /// History files need no store.
    pub fn needs_store(&self) -> bool {
        self.history.is_empty()
    }
}

/// `awl replay --history FILE...`.
pub fn replay_histories(args: &ReplayArgs) -> anyhow::Result<()> {
    let upcasters = crate::domain::upcasters::all();
    let mut diverged = 0;
    for path in &args.history {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let file: HistoryFile = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a history file", path.display()))?;
        let outcome = file.verify(&upcasters);
        if outcome.is_err() {
            diverged += 1;
        }
        let name = path.display().to_string();
        if args.json {
            let mut j = json!({"file": name, "run_id": file.run_id, "workflow": file.workflow,
                "version": file.version, "events": file.events.len()});
            match &outcome {
                Ok(v) => j["verified"] = verified_json(v),
                Err(e) => j["error"] = history_error_json(e),
            }
            println!("{j}");
        } else {
            match &outcome {
                Ok(v) => println!(
                    "{name}: {} {} ({} events): {}",
                    file.workflow,
                    file.version,
                    file.events.len(),
                    same(v)
                ),
                Err(e) => println!("{name}: {e}"),
            }
        }
    }
    if diverged == 0 {
        Ok(())
    } else {
        Err(Invalid.into())
    }
}

pub async fn replay(store: EventStore, args: ReplayArgs) -> anyhow::Result<()> {
    let Some(run_id) = args.run else {
        return replay_histories(&args);
    };
    let mut env = allowed_env(&args.env_allow);
    let (secret_env, mask) = secrets(&args.secret_env, &store);
    env.extend(secret_env);
    let runs = Runs::new(store, system_clock());
    if let Some(path) = &args.export {
        let file = runs.export_history(run_id, env).await?;
        let text = serde_json::to_string_pretty(&file)?;
        std::fs::write(path, text + "\n")
            .with_context(|| format!("cannot write {}", path.display()))?;
        eprintln!(
            "wrote the history of run {run_id} ({} events) to {}",
            file.events.len(),
            path.display()
        );
        return Ok(());
    }
    let replay = runs.replay(run_id, env, &mask).await?;
    let (read_ms, fold_ms) = (
        replay.read.as_secs_f64() * 1e3,
        replay.fold.as_secs_f64() * 1e3,
    );
    if args.json {
        let mut j = timeline_json(&replay.run);
        j["replay"] = json!({"events": replay.version, "read_ms": read_ms, "fold_ms": fold_ms, "next": replay.next});
        match &replay.verified {
            Ok(v) => j["replay"]["verified"] = verified_json(v),
            Err(d) => j["replay"]["divergence"] = divergence_json(d),
        }
        println!("{j}");
    } else {
        print_timeline(&replay.run);
        eprintln!(
            "replayed {} events (rules {}): read in {read_ms:.2} ms, folded in {fold_ms:.3} ms",
            replay.version,
            replay.run.rules()
        );
        match &replay.verified {
            Ok(v) => eprintln!("{}", same(v)),
            Err(d) => eprintln!("{d}"),
        }
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
    }
    match replay.verified {
        Ok(_) => Ok(()),
        Err(_) => Err(Invalid.into()),
    }
}

fn same(v: &Verified) -> String {
    format!(
        "the engine decides all {} of its decisions the same ({} events from outside)",
        v.decisions, v.outside
    )
}

fn verified_json(v: &Verified) -> Value {
    json!({"decisions": v.decisions, "outside": v.outside})
}

fn divergence_json(d: &Divergence) -> Value {
    json!({
        "version": d.version,
        "step": d.step,
        "recorded": d.recorded,
        "message": d.to_string(),
    })
}

fn history_error_json(e: &HistoryError) -> Value {
    match e {
        HistoryError::Divergence(d) => {
            json!({"code": "non_determinism", "divergence": divergence_json(d)})
        }
        other => json!({"code": "history_unreadable", "message": other.to_string()}),
    }
}
