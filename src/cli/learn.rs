//! `awl learn` and `awl suggest`: the learning loop from the terminal. Mining status,
//! proposing what history shows, the proposals with their generated files and
//! evidence, approving and rejecting them, the learned workflows' uses; and the
//! workflows that fit a context. The CLI works on the store itself (whoever reaches
//! the database is its admin), so it sees every scope unless `--scope` narrows it.

use chrono::Utc;
use clap::{Args, Subcommand};

use crate::domain::learning::Context;
use crate::learning::{LearnConfig, Learner, ProposalView, Viewer};
use crate::projections::Projections;
use crate::store::EventStore;

use super::common::actor;

#[derive(Debug, Subcommand)]
pub enum LearnCommand {
    /// How far mining got: tool calls, sessions, sequences, proposals by status.
    Status {
        #[arg(long)]
        json: bool,
    },
    /// Propose every sequence that history now supports (`awl serve` does this every
    /// few seconds).
    Mine {
        /// Successful executions a sequence needs.
        #[arg(long, default_value_t = 3)]
        min_successes: u64,
        /// Successes over executions a sequence needs.
        #[arg(long, default_value_t = 0.8)]
        min_confidence: f64,
        #[arg(long)]
        json: bool,
    },
    /// The proposals, newest first.
    List {
        /// OPEN, APPROVED, REJECTED or SUPERSEDED.
        #[arg(long)]
        status: Option<String>,
        /// Only one scope's (`team:NAME`, `user:NAME`).
        #[arg(long)]
        scope: Option<String>,
        #[arg(long)]
        json: bool,
    },
    /// One proposal: its evidence and its generated workflow file.
    Show {
        id: String,
        /// Print only the workflow file (to save it, or pipe it to `awl validate`).
        #[arg(long)]
        file: bool,
        #[arg(long)]
        json: bool,
    },
    /// Approve a proposal: its workflow becomes a runnable, learned version.
    Approve {
        id: String,
        /// Suggest it to every scope, not only the one it was learned from.
        #[arg(long)]
        shared: bool,
        /// Who approves (default: $USER).
        #[arg(long)]
        by: Option<String>,
    },
    /// Reject a proposal.
    Reject {
        id: String,
        #[arg(long)]
        reason: String,
        #[arg(long)]
        by: Option<String>,
    },
    /// Each learned workflow's runs, success rate and time against doing it by hand.
    Uses {
        #[arg(long)]
        json: bool,
    },
}

#[derive(Debug, Args)]
pub struct SuggestArgs {
    /// The session's latest tool calls, oldest first (comma-separated).
    #[arg(long, value_delimiter = ',')]
    tools: Vec<String>,
    /// A task's prompt.
    #[arg(long)]
    prompt: Option<String>,
    /// A task's required capabilities (repeat or comma-separate).
    #[arg(long = "capability", value_delimiter = ',')]
    capabilities: Vec<String>,
    /// Whose learned workflows to consider (default: every scope's).
    #[arg(long)]
    scope: Option<String>,
    /// The confidence a workflow needs.
    #[arg(long, default_value_t = 0.8)]
    threshold: f64,
    #[arg(long, default_value_t = 5)]
    limit: usize,
    #[arg(long)]
    json: bool,
}

async fn learner(store: EventStore, config: LearnConfig) -> anyhow::Result<Learner> {
    Projections::new(store.clone()).catch_up_all().await?;
    Ok(Learner::new(store, config))
}

fn viewer(scope: Option<String>) -> Viewer {
    scope.map_or(Viewer::All, Viewer::Scope)
}

pub async fn learn(store: EventStore, command: LearnCommand) -> anyhow::Result<()> {
    match command {
        LearnCommand::Status { json } => {
            let status = learner(store, LearnConfig::default())
                .await?
                .status()
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&status)?);
            } else {
                println!(
                    "{} tool calls in {} sessions; {} sequences seen",
                    status.tool_calls, status.sessions, status.patterns
                );
                let by_status: Vec<String> = status
                    .proposals
                    .iter()
                    .map(|(s, n)| format!("{n} {s}"))
                    .collect();
                println!(
                    "proposals: {}",
                    if by_status.is_empty() {
                        "none".to_string()
                    } else {
                        by_status.join(", ")
                    }
                );
            }
        }
        LearnCommand::Mine {
            min_successes,
            min_confidence,
            json,
        } => {
            if !(0.0..=1.0).contains(&min_confidence) {
                anyhow::bail!("--min-confidence {min_confidence} is not between 0 and 1");
            }
            let config = LearnConfig {
                min_successes,
                min_confidence,
                ..LearnConfig::default()
            };
            let report = learner(store, config)
                .await?
                .propose("awl", Utc::now())
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&report)?);
            } else {
                println!(
                    "{} sequences strong enough; {} new proposals; {} already done by a \
                     user-submitted workflow",
                    report.candidates,
                    report.proposed.len(),
                    report.covered
                );
                for id in report.proposed {
                    println!("  proposed {id}");
                }
            }
        }
        LearnCommand::List {
            status,
            scope,
            json,
        } => {
            let list = learner(store, LearnConfig::default())
                .await?
                .proposals(&viewer(scope), status.as_deref())
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&list)?);
            } else if list.is_empty() {
                println!("no proposals");
            } else {
                for p in list {
                    println!("{}", line(&p));
                }
            }
        }
        LearnCommand::Show { id, file, json } => {
            let p = learner(store, LearnConfig::default())
                .await?
                .proposal(&Viewer::All, &id)
                .await?;
            if file {
                print!("{}", p.file);
            } else if json {
                println!("{}", serde_json::to_string_pretty(&p)?);
            } else {
                println!("{}", line(&p));
                println!("scope: {}", p.scope);
                println!("evidence: {}", p.evidence);
                if let Some(by) = &p.decided_by {
                    println!(
                        "decided by {by}{}",
                        p.reason
                            .as_deref()
                            .map(|r| format!(": {r}"))
                            .unwrap_or_default()
                    );
                }
                println!("---");
                print!("{}", p.file);
            }
        }
        LearnCommand::Approve { id, shared, by } => {
            let by = actor(&by);
            let p = learner(store, LearnConfig::default())
                .await?
                .approve(&Viewer::All, &id, shared, &by, Utc::now())
                .await?;
            println!(
                "approved {id}: workflow {} version {} is runnable (`awl run {}`)",
                p.workflow,
                p.version.unwrap_or_default(),
                p.workflow
            );
        }
        LearnCommand::Reject { id, reason, by } => {
            let by = actor(&by);
            learner(store, LearnConfig::default())
                .await?
                .reject(&Viewer::All, &id, &reason, &by, Utc::now())
                .await?;
            println!("rejected {id}");
        }
        LearnCommand::Uses { json } => {
            let uses = learner(store, LearnConfig::default())
                .await?
                .uses(&Viewer::All)
                .await?;
            if json {
                println!("{}", serde_json::to_string_pretty(&uses)?);
            } else if uses.is_empty() {
                println!("no learned workflow is approved yet");
            } else {
                for u in uses {
                    let rate = u
                        .success_rate
                        .map_or("-".to_string(), |r| format!("{:.0} %", r * 100.0));
                    let ms = |v: Option<i64>| v.map_or("-".to_string(), |v| format!("{v} ms"));
                    println!(
                        "{}  runs {}  succeeded {rate}  mean {}  by hand {}",
                        u.workflow,
                        u.runs,
                        ms(u.mean_run_ms),
                        ms(u.manual_mean_ms)
                    );
                }
            }
        }
    }
    Ok(())
}

fn line(p: &ProposalView) -> String {
    format!(
        "{}  {:<10}  {}  confidence {:.2} ({}/{})  {}",
        p.proposal_id,
        p.status,
        p.workflow,
        p.confidence,
        p.successes,
        p.executions,
        p.tools.join(" > ")
    )
}

pub async fn suggest(store: EventStore, args: SuggestArgs) -> anyhow::Result<()> {
    let context = Context {
        tools: args.tools,
        prompt: args.prompt,
        capabilities: args.capabilities,
    };
    let found = learner(store, LearnConfig::default())
        .await?
        .suggest(
            &viewer(args.scope),
            &context,
            Some(args.threshold),
            args.limit,
        )
        .await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&found)?);
    } else if found.is_empty() {
        println!("nothing fits above confidence {}", args.threshold);
    } else {
        for s in found {
            println!(
                "{} {} ({}, confidence {:.2}, fit {:.2}): {}",
                s.workflow, s.version, s.source, s.confidence, s.score, s.why
            );
        }
    }
    Ok(())
}
