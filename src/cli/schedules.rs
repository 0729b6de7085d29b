//! `awl schedules list|show|add|remove|pause|resume|trigger`: the schedules that start
//! workflows by themselves. Those declared in a workflow file follow the file (`awl
//! serve` declares them); `add` and `remove` are for schedules of one's own.

use clap::{Args, Subcommand, ValueEnum};
use serde_json::Value;

use crate::clock::system_clock;
use crate::schedules::Schedules;
use crate::server::wire::ScheduleView;
use crate::store::EventStore;
use crate::workflow::schedule::{MissedPolicy, OverlapPolicy, ScheduleSpec};

use super::common::actor;

#[derive(Debug, Args)]
pub struct SchedulesArgs {
    #[command(subcommand)]
    command: SchedulesCommand,
}

#[derive(Debug, Subcommand)]
enum SchedulesCommand {
    /// Every declared schedule: its workflow, timing, next time and last run.
    List {
        #[arg(long)]
        json: bool,
    },
    /// One schedule, as JSON.
    Show { name: String },
    /// Declare a schedule (or change one added here before).
    Add(Add),
    /// Remove a schedule added with `add` (a file's schedules go with the file).
    Remove {
        name: String,
        #[arg(long)]
        by: Option<String>,
    },
    /// Fire nothing until resumed (times meanwhile are not caught up).
    Pause {
        name: String,
        #[arg(long, default_value = "paused from the command line")]
        reason: String,
        #[arg(long)]
        by: Option<String>,
    },
    Resume {
        name: String,
        #[arg(long)]
        by: Option<String>,
    },
    /// Start a run of the schedule now, whatever its times.
    Trigger {
        name: String,
        #[arg(long)]
        by: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Missed {
    Skip,
    CatchUp,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Overlap {
    Skip,
    Queue,
    Allow,
}

#[derive(Debug, Args)]
struct Add {
    name: String,
    #[arg(long)]
    workflow: String,
    /// A cron pattern (5 fields, or 6 with seconds first).
    #[arg(long, conflicts_with = "every", required_unless_present = "every")]
    cron: Option<String>,
    /// An interval: `30s`, `15m`, `1h`, `1d`.
    #[arg(long)]
    every: Option<String>,
    /// The IANA time zone the cron pattern is read in (default UTC).
    #[arg(long)]
    timezone: Option<String>,
    /// An input of each run: `--input region=eu` (read as JSON when it parses).
    #[arg(long = "input", value_name = "NAME=VALUE")]
    inputs: Vec<String>,
    #[arg(long, value_enum, default_value = "skip")]
    missed: Missed,
    #[arg(long, default_value_t = crate::workflow::schedule::DEFAULT_CATCH_UP_LIMIT)]
    catch_up_limit: u32,
    #[arg(long, default_value_t = crate::workflow::schedule::DEFAULT_GRACE_SECONDS)]
    grace_seconds: u64,
    #[arg(long, value_enum, default_value = "skip")]
    overlap: Overlap,
    #[arg(long, default_value_t = 0)]
    jitter_seconds: u64,
    #[arg(long)]
    by: Option<String>,
}

impl Add {
    fn spec(&self) -> anyhow::Result<ScheduleSpec> {
        let mut inputs = serde_json::Map::new();
        for pair in &self.inputs {
            let Some((name, value)) = pair.split_once('=') else {
                anyhow::bail!("--input {pair:?}: expected NAME=VALUE");
            };
            let value = serde_json::from_str(value).unwrap_or(Value::String(value.to_string()));
            inputs.insert(name.trim().to_string(), value);
        }
        Ok(ScheduleSpec {
            name: Some(self.name.clone()),
            cron: self.cron.clone(),
            every: self.every.clone(),
            timezone: self.timezone.clone(),
            inputs,
            missed: match self.missed {
                Missed::Skip => MissedPolicy::Skip,
                Missed::CatchUp => MissedPolicy::CatchUp,
            },
            catch_up_limit: self.catch_up_limit,
            grace_seconds: self.grace_seconds,
            overlap: match self.overlap {
                Overlap::Skip => OverlapPolicy::Skip,
                Overlap::Queue => OverlapPolicy::Queue,
                Overlap::Allow => OverlapPolicy::Allow,
            },
            jitter_seconds: self.jitter_seconds,
        })
    }
}

pub async fn schedules(store: EventStore, args: SchedulesArgs) -> anyhow::Result<()> {
    let service = Schedules::new(store, system_clock());
    match args.command {
        SchedulesCommand::List { json } => {
            let all = service.list().await?;
            if json {
                for schedule in &all {
                    println!("{}", serde_json::to_string(&ScheduleView::of(schedule))?);
                }
                return Ok(());
            }
            println!(
                "{:<24} {:<20} {:<28} {:<8} {:<26} {:>6} {:>7}",
                "SCHEDULE", "WORKFLOW", "WHEN", "STATUS", "NEXT", "FIRED", "SKIPPED"
            );
            for schedule in &all {
                let view = ScheduleView::of(schedule);
                println!(
                    "{:<24} {:<20} {:<28} {:<8} {:<26} {:>6} {:>7}",
                    view.name,
                    view.workflow,
                    view.spec.as_ref().map_or(String::new(), when),
                    view.status,
                    view.next_fires.map_or("-".to_string(), |t| t.to_rfc3339()),
                    view.fired,
                    view.skipped
                );
            }
            Ok(())
        }
        SchedulesCommand::Show { name } => {
            let schedule = service.get(&name).await?;
            println!(
                "{}",
                serde_json::to_string_pretty(&ScheduleView::of(&schedule))?
            );
            Ok(())
        }
        SchedulesCommand::Add(add) => {
            let spec = add.spec()?;
            let schedule = service
                .declare(&add.name, &add.workflow, spec, &actor(&add.by))
                .await?;
            let view = ScheduleView::of(&schedule);
            println!(
                "schedule {} starts {} {}; next at {}",
                view.name,
                view.workflow,
                view.spec.as_ref().map_or(String::new(), when),
                view.next_fires.map_or("-".to_string(), |t| t.to_rfc3339())
            );
            Ok(())
        }
        SchedulesCommand::Remove { name, by } => {
            service.remove(&name, &actor(&by)).await?;
            println!("removed schedule {name}");
            Ok(())
        }
        SchedulesCommand::Pause { name, reason, by } => {
            service.pause(&name, &actor(&by), &reason).await?;
            println!("paused schedule {name}");
            Ok(())
        }
        SchedulesCommand::Resume { name, by } => {
            service.resume(&name, &actor(&by)).await?;
            println!("resumed schedule {name}");
            Ok(())
        }
        SchedulesCommand::Trigger { name, by } => {
            let started = service.trigger(&name, &actor(&by)).await?;
            println!("schedule {name} started run {}", started.run_id);
            Ok(())
        }
    }
}

/// A schedule's timing in a few words: `cron 0 9 * * * Europe/Paris`, `every 15m`.
fn when(spec: &ScheduleSpec) -> String {
    match (&spec.cron, &spec.every) {
        (Some(cron), _) => format!("cron {cron} {}", spec.timezone.as_deref().unwrap_or("UTC")),
        (None, Some(every)) => format!("every {every}"),
        (None, None) => String::new(),
    }
}
