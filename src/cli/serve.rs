//! `awl serve`: the API, the MCP endpoint, the board and (unless `--no-worker`) the
//! executor in one process.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use chrono::Utc;
use clap::Args;

use crate::clock::system_clock;
use crate::definitions;
use crate::executor::WorkerConfig;
use crate::server::{self, ServeConfig};
use crate::store::EventStore;

use super::common::{actor, allowed_env, owner, runners_with_chat, secrets, shutdown_signal};
use super::time_arg::parse_age;

#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on. Without API tokens auth is off and only loopback is allowed.
    #[arg(long, env = "AWL_BIND", default_value = "127.0.0.1:8080")]
    bind: SocketAddr,
    /// Seconds an agent has to ack a delivered task before it is requeued.
    #[arg(long, default_value_t = 30)]
    ack_timeout: u64,
    /// Seconds without a call from an agent after which its tasks are requeued.
    #[arg(long, default_value_t = 300)]
    lost_after: u64,
    /// The longest wait_for_prompt allowed, in seconds (keep it below your clients'
    /// request timeouts: the MCP TypeScript SDK gives up at 60).
    #[arg(long, default_value_t = 50)]
    max_wait: u64,
    /// The most wait_for_prompt calls one token may have open at once.
    #[arg(long, default_value_t = 4)]
    max_waits_per_token: usize,
    /// An origin (`https://host[:port]`) allowed to call /mcp from a browser, besides
    /// loopback ones; repeatable. A request with any other Origin gets 403.
    #[arg(
        long = "allowed-origin",
        value_name = "ORIGIN",
        env = "AWL_ALLOWED_ORIGINS",
        value_delimiter = ','
    )]
    allowed_origins: Vec<String>,
    /// The largest request body, in bytes.
    #[arg(long, default_value_t = 256 * 1024)]
    body_limit: usize,
    /// Do not run the executor here (leave runs to `awl worker` processes).
    #[arg(long)]
    no_worker: bool,
    /// Do not fire schedules here (any number of servers may: each time fires once).
    #[arg(long)]
    no_scheduler: bool,
    /// A run continues as new (its state recorded, replay starts there) once its
    /// history since its start or last continuation reaches this many events.
    #[arg(long, env = "AWL_HISTORY_LIMIT", default_value_t = crate::executor::DEFAULT_HISTORY_LIMIT)]
    history_limit: u64,
    /// ... or once the events it recorded since then reach this many bytes (as JSON).
    #[arg(long, env = "AWL_HISTORY_BYTES", default_value_t = crate::executor::DEFAULT_HISTORY_BYTES)]
    history_bytes: u64,
    /// Register every `*.awl.yaml` file in this directory at start-up (repeatable), so
    /// runs of them can be started over the API.
    #[arg(long = "workflows", value_name = "DIR")]
    workflows: Vec<PathBuf>,
    /// Environment variables expressions may read (`env.NAME`); repeatable.
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
    /// Environment variables expressions may read that are secret: masked as
    /// `[redacted]` in events, views and spans (repeatable; also `AWL_SECRET_ENV`).
    #[arg(long = "secret-env", value_name = "NAME")]
    secret_env: Vec<String>,
    /// Also serve `/metrics` here, without a token (for a scrape network).
    #[arg(long, env = "AWL_METRICS_BIND")]
    metrics_bind: Option<SocketAddr>,
    /// Archive runs that finished longer ago than this (`30d`, `12h`) on a schedule
    /// (see `awl archive`); off when not given.
    #[arg(long, env = "AWL_ARCHIVE_OLDER_THAN", value_name = "AGE")]
    archive_older_than: Option<String>,
    /// How often to look for runs to archive (an age: `1h`, `10m`).
    #[arg(
        long,
        env = "AWL_ARCHIVE_EVERY",
        value_name = "PERIOD",
        default_value = "1h"
    )]
    archive_every: String,
    /// `/ready` fails when a projection is more than this many events behind the log.
    #[arg(long, default_value_t = 10_000)]
    ready_max_lag: i64,
    /// Propose what mining found every this many seconds (0: only when asked, with
    /// `awl learn mine` or `POST /api/v1/learn/mine`).
    #[arg(long, env = "AWL_LEARN_EVERY", default_value_t = 5)]
    learn_every: u64,
    /// Carry on a solve asked directly (API, MCP, `awl ask`) once its last event is
    /// this many seconds old: its process died (0: each agent's own limit, twice the
    /// longest step it may take).
    #[arg(long, env = "AWL_SOLVE_ABANDONED_AFTER", default_value_t = 0)]
    solve_abandoned_after: u64,
    /// The chat file: Slack and Discord channels, which notices go where, the apps'
    /// credentials by environment variable (default: ./chat.yaml when it exists).
    #[arg(long, env = "AWL_CHAT_CONFIG")]
    chat_config: Option<std::path::PathBuf>,
    /// Successful executions a tool sequence needs before it is proposed.
    #[arg(long, env = "AWL_LEARN_MIN_SUCCESSES", default_value_t = 3)]
    learn_min_successes: u64,
    /// Successes over executions a tool sequence needs before it is proposed (0 to 1).
    #[arg(long, env = "AWL_LEARN_MIN_CONFIDENCE", default_value_t = 0.8)]
    learn_min_confidence: f64,
    /// Serve the views (board rows, runs, timelines, inbox, audit, analytics) from this
    /// streaming replica of the store's Postgres; commands, claims and checkpoints stay
    /// on the store. Refused unless it is the same cluster and database.
    #[arg(long, env = "AWL_READ_DATABASE_URL", hide_env_values = true)]
    read_database_url: Option<String>,
}

pub async fn run(
    store: EventStore,
    args: ServeArgs,
    declarations: &super::agents::Declarations,
) -> anyhow::Result<()> {
    let registry = declarations.registry_with_mcp().await?;
    let agents = declarations.definitions(&registry)?;
    for dir in &args.workflows {
        register_dir(&store, dir, &registry.known_tools()).await?;
    }
    let mut config = ServeConfig::new(args.bind);
    config.body_limit = args.body_limit;
    config.board.ack_timeout = chrono::Duration::seconds(args.ack_timeout.max(1) as i64);
    config.board.lost_after = chrono::Duration::seconds(args.lost_after.max(1) as i64);
    config.board.max_wait = Duration::from_secs(args.max_wait.max(1));
    config.board.default_wait = config.board.default_wait.min(config.board.max_wait);
    config.request_timeout = config.board.max_wait + Duration::from_secs(30);
    config.metrics_bind = args.metrics_bind;
    config.ready_max_lag = args.ready_max_lag.max(0);
    config.max_waits_per_token = args.max_waits_per_token.max(1);
    config.allowed_origins = server::origin::AllowedOrigins::new(&args.allowed_origins)?;
    config.retention = retention(&args)?;
    config.scheduler = !args.no_scheduler;
    if !(0.0..=1.0).contains(&args.learn_min_confidence) || args.learn_min_successes == 0 {
        anyhow::bail!(
            "--learn-min-confidence must be between 0 and 1 and --learn-min-successes at \
             least 1 (got {} and {})",
            args.learn_min_confidence,
            args.learn_min_successes
        );
    }
    config.learn.min_successes = args.learn_min_successes;
    config.learn.min_confidence = args.learn_min_confidence;
    config.learn_every = (args.learn_every > 0).then(|| Duration::from_secs(args.learn_every));
    config.tools = Some(registry);
    config.agents = agents;
    config.chat = super::chat::chat_file(args.chat_config.as_deref())?.map(std::sync::Arc::new);
    config.solve_abandoned_after =
        (args.solve_abandoned_after > 0).then(|| Duration::from_secs(args.solve_abandoned_after));
    if !args.no_worker {
        let mut worker = WorkerConfig::new(owner("serve"));
        worker.env = allowed_env(&args.env_allow);
        let (secret_env, mask) = secrets(&args.secret_env, &store);
        worker.env.extend(secret_env);
        worker.secrets = mask;
        worker.history_limit = args.history_limit;
        worker.history_bytes = args.history_bytes;
        config.worker = Some(worker);
    }
    if let Some(url) = args.read_database_url.as_deref() {
        let read = crate::store::StoreLocation::parse(url)?;
        config.read_store = Some(store.open_read_replica(&read, 16).await?);
        eprintln!(
            "awl serve: views are read from {}",
            crate::store::redact(url)
        );
    }
    let location = store.location().clone();
    let runners = runners_with_chat(config.chat.clone())?;
    let server = server::start(store, config, runners, system_clock()).await?;
    eprintln!(
        "awl serve: listening on http://{} (store: {location})",
        server.addr
    );
    if server.auth_on {
        eprintln!("awl serve: auth is on: every route but /health needs a bearer token");
    } else {
        eprintln!(
            "awl serve: auth is OFF (no API tokens exist), so only loopback may connect; \
             create one with `awl token create --name NAME --role admin`"
        );
    }
    let stop = server.stopper();
    tokio::spawn(async move {
        shutdown_signal().await;
        eprintln!("awl serve: stopping: finishing requests in flight and giving runs back");
        let _ = stop.send(true);
    });
    server.wait().await?;
    Ok(())
}

/// The archiving schedule `--archive-older-than` and `--archive-every` ask for.
fn retention(args: &ServeArgs) -> anyhow::Result<Option<crate::runs::Retention>> {
    let Some(age) = &args.archive_older_than else {
        return Ok(None);
    };
    let older_than = parse_age(age).map_err(|e| anyhow::anyhow!("--archive-older-than {e}"))?;
    let every = parse_age(&args.archive_every)
        .ok()
        .and_then(|d| d.to_std().ok())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "--archive-every {:?}: a period like 10m or 1h, more than zero",
                args.archive_every
            )
        })?;
    if older_than < chrono::Duration::zero() {
        anyhow::bail!("--archive-older-than {age:?}: an age cannot be negative");
    }
    Ok(Some(crate::runs::Retention { older_than, every }))
}

async fn register_dir(
    store: &EventStore,
    dir: &std::path::Path,
    known: &crate::workflow::KnownTools,
) -> anyhow::Result<()> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| anyhow::anyhow!("cannot read workflow directory {}: {e}", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.to_string_lossy().ends_with(".awl.yaml"))
        .collect();
    files.sort();
    for file in files {
        let registered =
            definitions::register_file_with(store, &file, &actor(&None), Utc::now(), known).await?;
        eprintln!(
            "awl serve: registered {} {} from {}",
            registered.name,
            registered.version,
            file.display()
        );
    }
    Ok(())
}
