//! `awl projections status|rebuild`: where each read model is, and rebuilding one
//! from position 0 beside the live tables (a running server keeps serving the old
//! ones until the swap).

use std::io::Write;

use clap::Subcommand;

use crate::projections::Projections;
use crate::store::EventStore;

#[derive(Debug, Subcommand)]
pub enum ProjectionsCommand {
    /// Each projection's version, checkpoint and lag behind the log's head, and
    /// which server keeps them up to date.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Rebuild one projection (or all) from position 0, then swap it in.
    Rebuild {
        /// board, runs, agents, audit, learning or proposals; all of them without a
        /// name.
        name: Option<String>,
    },
}

pub async fn run(store: EventStore, command: ProjectionsCommand) -> anyhow::Result<()> {
    let projections = Projections::new(store.clone());
    projections.prepare().await?;
    match command {
        ProjectionsCommand::Status { json } => {
            let status = projections.status().await?;
            if json {
                println!("{}", serde_json::to_string(&status)?);
                return Ok(());
            }
            println!(
                "{:<10} {:>8} {:>11} {:>12} {:>10}",
                "NAME", "VERSION", "GENERATION", "POSITION", "LAG"
            );
            for s in status {
                let version = if s.version == s.code_version {
                    s.version.to_string()
                } else {
                    format!("{}->{}", s.version, s.code_version)
                };
                println!(
                    "{:<10} {:>8} {:>11} {:>12} {:>10}",
                    s.name, version, s.generation, s.position, s.lag
                );
            }
            println!(
                "{}",
                crate::projections::lease::follower(&store, None, chrono::Utc::now()).await?
            );
        }
        ProjectionsCommand::Rebuild { name: Some(name) } => {
            let started = std::time::Instant::now();
            let label = name.clone();
            projections
                .rebuild(&name, &move |at, head| progress_bar(&label, at, head))
                .await?;
            eprintln!();
            eprintln!("rebuilt {name} in {:.1} s", started.elapsed().as_secs_f64());
        }
        ProjectionsCommand::Rebuild { name: None } => {
            // All at once, in one pass over the log.
            let started = std::time::Instant::now();
            projections
                .rebuild_all(&|position, head| progress_bar("all", position, head))
                .await?;
            eprintln!();
            eprintln!(
                "rebuilt {} in {:.1} s",
                projections.names().join(", "),
                started.elapsed().as_secs_f64()
            );
        }
    }
    Ok(())
}

/// `board    [#########...........]  45%  450000/1000000` on one line of stderr.
fn progress_bar(name: &str, at: i64, head: i64) {
    let fraction = if head > 0 {
        (at as f64 / head as f64).clamp(0.0, 1.0)
    } else {
        1.0
    };
    let filled = (fraction * 30.0).round() as usize;
    let mut err = std::io::stderr();
    let _ = write!(
        err,
        "\r{name:<8} [{}{}] {:>3}%  {at}/{head}",
        "#".repeat(filled),
        ".".repeat(30 - filled),
        (fraction * 100.0).round()
    );
    let _ = err.flush();
}
