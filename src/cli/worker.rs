//! `awl worker`: carry out due runs until stopped. Several workers can share one
//! database; Ctrl-C (or SIGTERM) finishes work in flight and gives runs back. The MCP
//! tools workflow steps call are called through the tools directory's registry
//! (`--tools-dir`), which each worker loads.

use std::time::Duration;

use anyhow::Context;
use clap::Args;
use tokio::sync::watch;

use crate::clock::system_clock;
use crate::executor::{Worker, WorkerConfig};
use crate::server;
use crate::store::EventStore;

use super::agents::Declarations;
use super::common::{
    allowed_env, chat_from_env, owner, runners_with_chat, secrets, shutdown_signal,
};
use super::registry::WorkflowTools;

#[derive(Debug, Args)]
pub struct WorkerArgs {
    /// Most runs held at once.
    #[arg(long, default_value_t = 512)]
    batch: usize,
    /// How long a claimed run stays this worker's without a renewal, in seconds.
    #[arg(long, default_value_t = 30)]
    lease_seconds: u64,
    /// Environment variables expressions may read (`env.NAME`); repeatable.
    #[arg(long = "env-allow", value_name = "NAME")]
    env_allow: Vec<String>,
    /// Environment variables expressions may read that are secret: masked as
    /// `[redacted]` in events, views and spans (repeatable; also `AWL_SECRET_ENV`).
    #[arg(long = "secret-env", value_name = "NAME")]
    secret_env: Vec<String>,
    /// Serve this worker's `/metrics` here, without a token (for a scrape network).
    #[arg(long, env = "AWL_METRICS_BIND")]
    metrics_bind: Option<std::net::SocketAddr>,
    /// A run continues as new (its state recorded, replay starts there) once its
    /// history since its start or last continuation reaches this many events.
    #[arg(long, env = "AWL_HISTORY_LIMIT", default_value_t = crate::executor::DEFAULT_HISTORY_LIMIT)]
    history_limit: u64,
    /// ... or once the events it recorded since then reach this many bytes (as JSON).
    #[arg(long, env = "AWL_HISTORY_BYTES", default_value_t = crate::executor::DEFAULT_HISTORY_BYTES)]
    history_bytes: u64,
}

pub async fn worker(
    store: EventStore,
    args: WorkerArgs,
    declarations: &Declarations,
) -> anyhow::Result<()> {
    let mut config = WorkerConfig::new(owner("worker"));
    // The MCP tools workflow steps call are performed through the tools directory's
    // registry (each server's session started at its first call).
    config.tools = Some(WorkflowTools::load(declarations)?.performer());
    config.batch = args.batch.max(1);
    config.lease = Duration::from_secs(args.lease_seconds.max(1));
    config.env = allowed_env(&args.env_allow);
    let (secret_env, mask) = secrets(&args.secret_env, &store);
    config.env.extend(secret_env);
    config.secrets = mask;
    config.history_limit = args.history_limit;
    config.history_bytes = args.history_bytes;
    eprintln!("awl worker {} on {}", config.owner, store.location());
    server::warn_about_durability(&store).await;
    let (stop_tx, stop_rx) = watch::channel(false);
    if let Some(addr) = args.metrics_bind {
        let bound = server::sampler::serve_metrics(addr, store.clone(), stop_rx.clone())
            .await
            .with_context(|| format!("cannot serve /metrics on {addr}"))?;
        eprintln!("awl worker: /metrics on http://{bound}/metrics");
    }
    let worker = Worker::new(
        store,
        runners_with_chat(chat_from_env()?)?,
        config,
        system_clock(),
    );
    tokio::spawn(async move {
        shutdown_signal().await;
        eprintln!("stopping: finishing work in flight, then giving runs back");
        let _ = stop_tx.send(true);
    });
    worker.run(stop_rx).await?;
    Ok(())
}
