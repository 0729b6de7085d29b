//! The command line: one module per command, each a thin shell over the library.
//!
//! Commands talk to the store named by `--database-url` / `DATABASE_URL`, or to the
//! embedded SQLite file (`.awl/awl.db`) when none is given. Errors are printed with
//! their whole cause chain and exit with status 1; usage errors exit with 2 (clap).

mod agents;
mod answer;
mod approve;
mod archive;
mod bulk;
mod cancel;
mod chat;
mod check;
mod client;
mod common;
mod events;
mod forget;
mod learn;
mod list;
mod output;
mod pause;
mod projections;
mod registry;
mod reject;
mod replay;
mod rerun;
mod resume;
mod review;
mod run;
mod schedules;
mod send;
mod serve;
mod status;
mod task;
mod tasks;
mod time_arg;
mod tokens;
mod validate;
mod worker;
mod workflows;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use crate::store::{EventStore, StoreLocation, StoreOptions};
use crate::telemetry;

/// awl: event-sourced orchestration for AI-agent workflows.
#[derive(Debug, Parser)]
#[command(name = "awl", version, about, long_about = None)]
pub struct Cli {
    /// Where the event log lives: postgres://... or sqlite://FILE. Without it, awl
    /// uses the embedded store in .awl/awl.db under the current directory.
    #[arg(long, env = "DATABASE_URL", global = true, hide_env_values = true)]
    database_url: Option<String>,

    /// Connections in the pool of a command that does work (`serve`, `worker`, `run`,
    /// `rerun`, `schedules`). Many processes over one Postgres share its
    /// `max_connections` (each server also holds one more for LISTEN).
    #[arg(long, env = "AWL_DB_POOL", global = true, default_value_t = 16,
          value_parser = clap::value_parser!(u32).range(2..=1024))]
    db_pool: u32,

    /// With a Postgres store reached through a pooler in transaction mode (PgBouncer
    /// 1.21 or later with `max_prepared_statements`): the database's own address, for
    /// the two things that need a session of their own, the LISTEN connection (run
    /// wake-ups, live views) and the migrations' lock.
    #[arg(
        long,
        env = "AWL_SESSION_DATABASE_URL",
        global = true,
        hide_env_values = true
    )]
    session_database_url: Option<String>,

    #[command(flatten)]
    declarations: agents::Declarations,

    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Apply the store's schema migrations (also done at every start-up).
    Migrate,
    /// Print the event log: the audit trail of everything awl has done.
    Events(events::EventsArgs),
    /// Run a workflow file and show its progress (exits non-zero if the run fails).
    Run(run::RunArgs),
    /// Carry out due runs until stopped; several workers can share one database.
    Worker(worker::WorkerArgs),
    /// List runs.
    List(list::ListArgs),
    /// One run's timeline: steps, attempts, gates, outcome.
    Status(status::StatusArgs),
    /// Approve a gate (the run goes on).
    Approve(approve::ApproveArgs),
    /// Reject a gate (its `on_reject` applies).
    Reject(reject::RejectArgs),
    /// Cancel a run.
    Cancel(cancel::CancelArgs),
    /// The registered workflows and their versions: list, show, diff, retire.
    Workflows(workflows::WorkflowsArgs),
    /// Start a finished run again from a step (keeping the steps before it), or fork it
    /// there with changed inputs (`--var`).
    Rerun(rerun::RerunArgs),
    /// One action over every run a filter selects (cancel, pause, resume, retry), in
    /// recorded batches; `--dry-run` says how many it would touch.
    Bulk(bulk::BulkArgs),
    /// Schedules that start workflows by themselves: list, show, add, remove, pause,
    /// resume, trigger.
    Schedules(schedules::SchedulesArgs),
    /// Pause a run: no step starts until it is resumed (steps in flight finish).
    Pause(pause::PauseArgs),
    /// Resume a paused run.
    Resume(resume::ResumeArgs),
    /// Rebuild a run from its events and print it.
    Replay(replay::ReplayArgs),
    /// Serve the HTTP API, the MCP endpoint and the agent board (and run workflows).
    Serve(serve::ServeArgs),
    /// Put a task on the agent board.
    Send(send::SendArgs),
    /// The agent board in the terminal: tasks by column.
    Tasks(tasks::TasksArgs),
    /// One task and its history (`awl task ID`), or finish one by hand.
    Task(task::TaskArgs),
    /// Answer the question a blocked task asks.
    Answer(answer::AnswerArgs),
    /// Review a task's submitted work: approve it or request changes.
    #[command(subcommand)]
    Review(review::ReviewCommand),
    /// Read models: their status, and rebuilding them from the log.
    #[command(subcommand)]
    Projections(projections::ProjectionsCommand),
    /// Manage API tokens (admin, operator, agent, viewer).
    #[command(subcommand)]
    Token(tokens::TokenCommand),
    /// Slack and Discord: the chat users allowed to act, and a test message.
    #[command(subcommand)]
    Chat(chat::ChatCommand),
    /// Check workflow files: every problem, with file, line, column and field.
    Validate(validate::ValidateArgs),
    /// Verify the store's log: stream versions, one outcome per step attempt, gate
    /// decisions; every problem with its stream and position.
    Check(check::CheckArgs),
    /// Erase a data subject's personal data: delete its key (the log stays as written;
    /// readers see `[erased]`).
    Forget(forget::ForgetArgs),
    /// Move runs that finished before a cutoff out of the hot log into the archive
    /// table (their views, status and history stay readable).
    Archive(archive::ArchiveArgs),
    /// Learning from history: mining status, proposals (show, approve, reject) and
    /// the learned workflows' uses.
    #[command(subcommand)]
    Learn(learn::LearnCommand),
    /// The workflows that fit a context (recent tool calls, a prompt, capabilities).
    Suggest(learn::SuggestArgs),
    /// The tool registry: built-in tools and those declared in the tools directory
    /// (list, show, call).
    #[command(subcommand)]
    Tools(agents::ToolsCommand),
    /// awl's own agents, as defined in the agents directory (list, show).
    #[command(subcommand)]
    Agents(agents::AgentsCommand),
    /// Ask one of awl's own agents: it plans tool calls with its model, runs them and
    /// answers; every step recorded (exits non-zero if the solve fails).
    Ask(agents::AskArgs),
    /// Print the JSON Schema of workflow files (for editors).
    Schema,
}

/// Parse arguments, run the command, and turn the outcome into an exit code.
pub async fn main() -> ExitCode {
    let cli = Cli::parse();
    // One TLS provider for every client (sqlx and reqwest both use rustls with ring).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let telemetry = match telemetry::init(&common::owner("awl")) {
        Ok(t) => Some(t),
        Err(e) => {
            eprintln!("awl: {e}; going on without traces");
            None
        }
    };
    let code = match run(cli).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Invalid>() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("awl: {e}");
            for cause in e.chain().skip(1) {
                eprintln!("  caused by: {cause}");
            }
            ExitCode::FAILURE
        }
    };
    // Export the spans not sent yet (on a blocking thread: the exporter blocks).
    if let Some(t) = telemetry {
        let _ = tokio::task::spawn_blocking(move || t.shutdown()).await;
    }
    code
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    // Commands that need no store.
    match cli.command {
        Command::Validate(args) => {
            return if validate::run(args, &cli.declarations).await? {
                Ok(())
            } else {
                Err(Invalid.into())
            };
        }
        Command::Schema => return validate::print_schema(),
        Command::Tools(command) => return agents::tools(&cli.declarations, command).await,
        Command::Agents(command) => return agents::agents(&cli.declarations, command).await,
        Command::Replay(args) if !args.needs_store() => return replay::replay_histories(&args),
        _ => {}
    }
    let location = StoreLocation::from_url_or_default(cli.database_url.as_deref())?;
    let session = cli.session_database_url.as_deref();
    match cli.command {
        Command::Migrate => {
            let store = open(&location, session, false).await?;
            store.migrate().await?;
            println!("migrated {location}");
            Ok(())
        }
        Command::Events(args) => events::run(&open(&location, session, true).await?, args).await,
        Command::Run(args) => {
            run::run(
                open_for_work(&location, session, cli.db_pool).await?,
                args,
                &cli.declarations,
            )
            .await
        }
        Command::Worker(args) => {
            worker::worker(
                open_for_work(&location, session, cli.db_pool).await?,
                args,
                &cli.declarations,
            )
            .await
        }
        Command::List(args) => list::list(open(&location, session, true).await?, args).await,
        Command::Status(args) => status::status(open(&location, session, true).await?, args).await,
        Command::Approve(args) => {
            approve::approve(open(&location, session, true).await?, args).await
        }
        Command::Reject(args) => reject::reject(open(&location, session, true).await?, args).await,
        Command::Cancel(args) => cancel::cancel(open(&location, session, true).await?, args).await,
        Command::Pause(args) => pause::pause(open(&location, session, true).await?, args).await,
        Command::Bulk(args) => bulk::bulk(open(&location, session, true).await?, args).await,
        Command::Schedules(args) => {
            schedules::schedules(open_for_work(&location, session, cli.db_pool).await?, args).await
        }
        Command::Rerun(args) => {
            rerun::rerun(
                open_for_work(&location, session, cli.db_pool).await?,
                args,
                &cli.declarations,
            )
            .await
        }
        Command::Workflows(args) => {
            workflows::workflows(open(&location, session, true).await?, args).await
        }
        Command::Resume(args) => resume::resume(open(&location, session, true).await?, args).await,
        Command::Replay(args) => replay::replay(open(&location, session, true).await?, args).await,
        Command::Serve(args) => {
            serve::run(
                open_for_work(&location, session, cli.db_pool).await?,
                args,
                &cli.declarations,
            )
            .await
        }
        Command::Send(args) => {
            let store = store_unless(args.target_is_remote(), &location, session).await?;
            send::send(store, args).await
        }
        Command::Tasks(args) => {
            let store = store_unless(args.target_is_remote(), &location, session).await?;
            tasks::tasks(store, args).await
        }
        Command::Task(task::TaskArgs {
            action: Some(command),
            ..
        }) => task::finish(open(&location, session, true).await?, command).await,
        Command::Task(task::TaskArgs {
            task: Some(id),
            json,
            target,
            ..
        }) => {
            let store = store_unless(target.is_remote(), &location, session).await?;
            task::show(
                store,
                task::ShowTaskArgs {
                    task: id,
                    json,
                    target,
                },
            )
            .await
        }
        Command::Task(_) => Err(anyhow::anyhow!(
            "name a task (`awl task ID`) or an action (`awl task complete|fail`)"
        )),
        Command::Answer(args) => {
            let store = store_unless(args.target_is_remote(), &location, session).await?;
            answer::answer(store, args).await
        }
        Command::Review(command) => {
            let store = store_unless(command.target_is_remote(), &location, session).await?;
            review::review(store, command).await
        }
        Command::Token(command) => {
            tokens::run(open(&location, session, true).await?, command).await
        }
        Command::Chat(command) => {
            let store = match &command {
                chat::ChatCommand::Test { .. } => None,
                chat::ChatCommand::Users(_) => Some(open(&location, session, true).await?),
            };
            chat::run(store, command).await
        }
        Command::Check(args) => check::check(open(&location, session, false).await?, args).await,
        Command::Forget(args) => forget::forget(open(&location, session, true).await?, args).await,
        Command::Archive(args) => {
            archive::archive(open(&location, session, true).await?, args).await
        }
        Command::Learn(command) => {
            learn::learn(open(&location, session, true).await?, command).await
        }
        Command::Suggest(args) => learn::suggest(open(&location, session, true).await?, args).await,
        Command::Projections(command) => {
            projections::run(open(&location, session, true).await?, command).await
        }
        Command::Ask(args) => {
            agents::ask(
                open(&location, session, true).await?,
                &cli.declarations,
                args,
            )
            .await
        }
        Command::Validate(_) | Command::Schema | Command::Tools(_) | Command::Agents(_) => Ok(()),
    }
}

async fn open(
    location: &StoreLocation,
    session: Option<&str>,
    migrate: bool,
) -> anyhow::Result<EventStore> {
    let options = StoreOptions {
        migrate,
        max_connections: 4,
        session_url: session.map(str::to_string),
        ..StoreOptions::default()
    };
    Ok(EventStore::open(location, options).await?)
}

/// The store, unless the command talks to a server instead.
async fn store_unless(
    remote: bool,
    location: &StoreLocation,
    session: Option<&str>,
) -> anyhow::Result<Option<EventStore>> {
    if remote {
        Ok(None)
    } else {
        open(location, session, true).await.map(Some)
    }
}

/// A store for executing runs: a bigger pool (`--db-pool`).
async fn open_for_work(
    location: &StoreLocation,
    session: Option<&str>,
    pool: u32,
) -> anyhow::Result<EventStore> {
    let options = StoreOptions {
        migrate: true,
        max_connections: pool,
        session_url: session.map(str::to_string),
        ..StoreOptions::default()
    };
    Ok(EventStore::open(location, options).await?)
}

/// A failure whose details were already printed (for example validation problems).
#[derive(Debug, thiserror::Error)]
#[error("invalid")]
pub(crate) struct Invalid;
