//! `awl serve`: the HTTP API, the MCP endpoint, the board's dispatcher and sweeper,
//! the projections and the executor, in one process.
//!
//! Two adapters sit over the same services ([`Board`], [`Runs`], the read-model
//! queries): `rest` (one file per resource) and `mcp`. Both read the caller the same
//! way (`caller`), take the same request shapes (`wire`) and answer errors the same
//! way (`error`: a service error's kind gives the status, its code the code).
//!
//! Requests pass, in order: a body size limit, a time limit (longer than the longest
//! long poll), and the auth middleware (`auth_layer`), which checks the bearer token
//! against the route table (`routes`) before a handler runs. The router, the auth
//! middleware and the OpenAPI document (`openapi`) are all built from that one table.
//! Shutdown stops accepting connections, ends long polls with no task, lets in-flight
//! requests finish, stops the worker (which gives its runs back) and closes the store.

mod abandoned_solves;
mod auth_layer;
pub mod builtin_agents;
pub mod caller;
mod dashboard;
pub mod error;
mod extract;
pub mod mcp;
mod observe;
pub mod openapi;
pub mod operate;
pub mod origin;
pub mod rest;
pub mod routes;
pub mod sampler;
pub mod waits;
pub mod wire;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request};
use axum::http::StatusCode;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::auth::TokenVerifier;
use crate::board::{Board, BoardConfig};
use crate::clock::Clock;
use crate::executor::{Worker, WorkerConfig};
use crate::runners::Runners;
use crate::runs::Runs;
use crate::store::EventStore;

pub use auth_layer::AuthMode;
use auth_layer::{AuthState, authenticate};
pub use error::ApiError;
use routes::{Handler, routes};

/// Everything the handlers share: the services, behind one `Arc`. axum clones the
/// state for every extractor and middleware of every request; a clone of the
/// services themselves was dozens of reference counts (about 1.3 % of the board
/// benchmark's CPU in a profile, clones and drops), this is one.
#[derive(Clone)]
pub struct AppState(Arc<Services>);

impl AppState {
    pub fn new(services: Services) -> Self {
        Self(Arc::new(services))
    }
}

impl std::ops::Deref for AppState {
    type Target = Services;
    fn deref(&self) -> &Services {
        &self.0
    }
}

/// The services of [`AppState`].
pub struct Services {
    pub board: Board,
    pub runs: Runs,
    pub bulk: crate::bulk::BulkActions,
    pub schedules: crate::schedules::Schedules,
    pub hooks: crate::hooks::Hooks,
    pub learner: crate::learning::Learner,
    /// awl's own agents and the tool registry.
    pub agents: crate::agents::Agents,
    /// The time decisions record.
    pub clock: Clock,
    pub auth_on: bool,
    /// The OpenAPI document of the route table.
    pub openapi: Arc<serde_json::Value>,
    /// `/ready` fails when a projection is more events behind the log than this.
    pub ready_max_lag: i64,
    /// Long polls open per token.
    pub waits: waits::WaitSlots,
    /// What Slack and Discord send (none without a chat file).
    pub chat: Option<crate::chat::incoming::Incoming>,
    /// A streaming replica the views are read from (`None`: the store itself).
    pub read_store: Option<EventStore>,
    /// This server's turn at following the log into the projections.
    pub projections_lease: crate::store::FollowerLease,
}

impl Services {
    /// Where view queries are served: the read database when there is one, else the
    /// store. Commands, claims, checkpoints and the board's own view stay on the store.
    pub fn views(&self) -> &EventStore {
        self.read_store
            .as_ref()
            .unwrap_or_else(|| self.board.store())
    }
}

/// How the server runs.
#[derive(Clone)]
pub struct ServeConfig {
    pub bind: SocketAddr,
    /// The largest request body accepted.
    pub body_limit: usize,
    /// The longest any request may take (long polls end well before).
    pub request_timeout: Duration,
    pub board: BoardConfig,
    /// How often overdue acks and lost agents are looked for.
    pub sweep_every: Duration,
    /// Run the executor in this process (`None`: leave runs to `awl worker`s).
    pub worker: Option<WorkerConfig>,
    /// Also serve `/metrics` (without auth) on this address.
    pub metrics_bind: Option<SocketAddr>,
    /// `/ready` fails when a projection is more events behind the log than this.
    pub ready_max_lag: i64,
    /// The most `wait_for_prompt` calls one token may have open at once.
    pub max_waits_per_token: usize,
    /// Browser origins allowed to call `/mcp` besides loopback ones.
    pub allowed_origins: origin::AllowedOrigins,
    /// Archive finished runs on a schedule (`None`: only when asked).
    pub retention: Option<crate::runs::Retention>,
    /// Fire the schedules in this process (every server may: each time fires once).
    pub scheduler: bool,
    /// Where webhook secrets come from (the process environment by default).
    pub hook_secrets: crate::hooks::SecretSource,
    /// The learner's thresholds.
    pub learn: crate::learning::LearnConfig,
    /// How often the learner proposes what mining found (`None`: only when asked,
    /// with `awl learn mine` or `POST /api/v1/learn/mine`).
    pub learn_every: Option<Duration>,
    /// The tool registry (`None`: the built-in tools): awl's own agents call it, and
    /// the executor here performs through it the MCP tools workflow steps call (unless
    /// its `WorkerConfig` was given a performer of its own).
    pub tools: Option<crate::tools::Registry>,
    /// awl's own agents (checked against `tools`).
    pub agents: Vec<crate::agents::AgentDefinition>,
    /// A direct solve (asked over the API, MCP or the CLI) whose last event is older
    /// than this lost its runner and is carried on here (`None`: each agent's own
    /// limit, twice the longest step it may take).
    pub solve_abandoned_after: Option<Duration>,
    /// Slack and Discord: the channels, routes and apps (none: no chat).
    pub chat: Option<Arc<crate::chat::ChatConfig>>,
    /// Serve view queries from this read database (a streaming replica of the store,
    /// opened with `EventStore::open_read_replica`); `None`: from the store.
    pub read_store: Option<EventStore>,
}

impl ServeConfig {
    pub fn new(bind: SocketAddr) -> Self {
        Self {
            bind,
            body_limit: 256 * 1024,
            request_timeout: Duration::from_secs(90),
            board: BoardConfig::default(),
            sweep_every: Duration::from_secs(1),
            worker: None,
            metrics_bind: None,
            ready_max_lag: 10_000,
            max_waits_per_token: 4,
            allowed_origins: origin::AllowedOrigins::default(),
            retention: None,
            scheduler: true,
            hook_secrets: crate::hooks::environment(),
            learn: crate::learning::LearnConfig::default(),
            learn_every: Some(Duration::from_secs(5)),
            tools: None,
            agents: Vec::new(),
            solve_abandoned_after: None,
            chat: None,
            read_store: None,
        }
    }
}

/// Why the server could not start or stopped.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(
        "no API tokens exist, so auth is off, and {0} is not a loopback address: create a token \
         first (`awl token create --name NAME --role admin`) or bind to 127.0.0.1"
    )]
    OpenWithoutAuth(SocketAddr),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
    #[error("the server failed: {0}")]
    Io(#[from] std::io::Error),
    #[error(transparent)]
    Store(#[from] crate::store::StoreError),
    #[error(transparent)]
    Board(#[from] crate::board::BoardError),
    #[error(transparent)]
    Exec(#[from] crate::executor::ExecError),
    #[error(transparent)]
    Projection(#[from] crate::projections::ProjectionError),
}

/// A started server: its address and the means to stop it.
pub struct Server {
    pub addr: SocketAddr,
    pub auth_on: bool,
    pub board: Board,
    stop: watch::Sender<bool>,
    done: tokio::task::JoinHandle<Result<(), ServeError>>,
}

impl Server {
    /// Stop gracefully and wait until everything has stopped.
    pub async fn shutdown(self) -> Result<(), ServeError> {
        let _ = self.stop.send(true);
        self.done
            .await
            .map_err(|e| ServeError::Io(std::io::Error::other(e)))?
    }

    /// Wait until the server stops (after `stop` from elsewhere, or a failure).
    pub async fn wait(self) -> Result<(), ServeError> {
        self.done
            .await
            .map_err(|e| ServeError::Io(std::io::Error::other(e)))?
    }

    /// A sender that stops the server when `true` is sent.
    pub fn stopper(&self) -> watch::Sender<bool> {
        self.stop.clone()
    }
}

/// Start serving on `config.bind`: returns once the socket listens.
pub async fn start(
    store: EventStore,
    config: ServeConfig,
    runners: Runners,
    clock: Clock,
) -> Result<Server, ServeError> {
    warn_about_durability(&store).await;
    let auth_on = store.active_tokens().await? > 0;
    if !auth_on && !config.bind.ip().is_loopback() {
        return Err(ServeError::OpenWithoutAuth(config.bind));
    }
    let listener = TcpListener::bind(config.bind)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.bind,
            source,
        })?;
    let addr = listener.local_addr()?;
    let chat_sender = match &config.chat {
        Some(chat) => Some(
            crate::chat::Sender::new(chat.clone())
                .map_err(|e| ServeError::Io(std::io::Error::other(e)))?,
        ),
        None => None,
    };
    // The read models' tables exist before the first request (a view asked for at once
    // is empty or behind, never missing); catching up and rebuilds go on in the
    // background. The board starts from its projection's live rows.
    let projections = crate::projections::Projections::new(store.clone());
    let outdated = projections.prepare().await?;
    if let Some(read) = &config.read_store {
        // The views' tables were just created here: have them on the replica too.
        store
            .wait_for_replica(read, Duration::from_secs(30))
            .await?;
    }
    let board = Board::open(store.clone(), clock.clone(), config.board.clone()).await?;
    let mode = if auth_on {
        AuthMode::Tokens(TokenVerifier::new(store.clone(), Duration::from_secs(2)))
    } else {
        AuthMode::Off
    };
    let state = AppState::new(Services {
        board: board.clone(),
        runs: Runs::new(store.clone(), clock.clone()),
        bulk: crate::bulk::BulkActions::new(store.clone(), clock.clone()),
        schedules: crate::schedules::Schedules::new(store.clone(), clock.clone()),
        hooks: crate::hooks::Hooks::new(store.clone(), clock.clone(), config.hook_secrets.clone()),
        learner: crate::learning::Learner::new(store.clone(), config.learn.clone()),
        agents: crate::agents::Agents::new(
            store.clone(),
            config.agents.clone(),
            config
                .tools
                .clone()
                .unwrap_or_else(|| crate::tools::Registry::builtins(runners.clone())),
            clock.clone(),
        )
        .map_err(|e| ServeError::Io(std::io::Error::other(e)))?,
        clock: clock.clone(),
        auth_on,
        openapi: Arc::new(openapi::document(&routes())),
        ready_max_lag: config.ready_max_lag,
        waits: waits::WaitSlots::new(config.max_waits_per_token),
        chat: chat_sender.clone().map(|sender| {
            crate::chat::incoming::Incoming::new(
                store.clone(),
                Runs::new(store.clone(), clock.clone()),
                board.clone(),
                sender,
                clock.clone(),
            )
        }),
        read_store: config.read_store.clone(),
        // Of the servers over one database, one follows at a time (see
        // `projections::lease`).
        projections_lease: crate::projections::lease::lease(clock.clone()),
    });
    let agents = state.agents.clone();
    let chat_incoming = state.chat.clone();
    let mcp_stop = CancellationToken::new();
    let projections_lease = state.projections_lease.clone();
    let app = router(state, mode, &config, mcp_stop.clone());
    let (stop, stop_rx) = watch::channel(false);

    let follower = {
        let board = board.clone();
        let stop = stop_rx.clone();
        tokio::spawn(async move { board.follow(stop).await })
    };
    let sampler = tokio::spawn(sampler::sample_server_every(board.clone(), stop_rx.clone()));
    if let Some(addr) = config.metrics_bind {
        let bound = sampler::serve_metrics(addr, store.clone(), stop_rx.clone())
            .await
            .map_err(|source| ServeError::Bind { addr, source })?;
        tracing::info!(%bound, "serving /metrics");
    }
    let sweeper = {
        let board = board.clone();
        let stop = stop_rx.clone();
        let every = config.sweep_every;
        tokio::spawn(async move { board.sweep_every(every, stop).await })
    };
    let projector = {
        let stop = stop_rx.clone();
        let lease = projections_lease;
        tokio::spawn(async move {
            if let Err(e) = projections.follow_leased(outdated, lease, stop).await {
                tracing::error!(error = %e, "the projections stopped");
            }
        })
    };
    // Bulk actions a stopped process left unfinished are carried on.
    {
        let bulk = crate::bulk::BulkActions::new(store.clone(), clock.clone());
        tokio::spawn(async move { bulk.carry_on_unfinished(200).await });
    }
    if let Some(retention) = config.retention {
        let runs = Runs::new(store.clone(), clock.clone());
        let stop = stop_rx.clone();
        tokio::spawn(async move { runs.archive_every(retention, stop).await });
    }
    if config.scheduler {
        let scheduler = crate::schedules::Scheduler::new(crate::schedules::Schedules::new(
            store.clone(),
            clock.clone(),
        ));
        let stop = stop_rx.clone();
        tokio::spawn(async move { scheduler.run(stop).await });
    }
    if let Some(every) = config.learn_every {
        let learner = crate::learning::Learner::new(store.clone(), config.learn.clone());
        let (clock, stop) = (clock.clone(), stop_rx.clone());
        tokio::spawn(async move { learner.propose_every(every, clock, stop).await });
    }
    // awl's own agents that take board tasks; a solve cut off by shutdown is carried
    // on when its task comes back.
    let builtin = builtin_agents::start(&board, &agents, &stop_rx).await;
    // Slack and Discord are told what the chat file's routes ask for.
    let chat_notifier = chat_sender.map(|sender| {
        let notifier = crate::chat::Notifier::new(store.clone(), sender, clock.clone());
        tokio::spawn(notifier.run(stop_rx.clone()))
    });
    // Replies to questions in Discord channels the bot posts to are read back.
    if let Some(incoming) = chat_incoming.filter(|i| {
        let config = i.sender().config();
        config.file.channels.values().any(|c| c.discord.is_some())
    }) {
        tokio::spawn(crate::chat::replies::read_every(
            incoming,
            crate::chat::replies::EVERY,
            stop_rx.clone(),
        ));
    }
    // Direct solves whose process died are carried on by any server with their agent.
    if agents.list().next().is_some() {
        tokio::spawn(abandoned_solves::carry_on_every(
            agents.clone(),
            store.clone(),
            clock.clone(),
            config.sweep_every,
            config.solve_abandoned_after,
            stop_rx.clone(),
        ));
    }
    let worker = config.worker.clone().map(|mut wc| {
        if wc.tools.is_none()
            && let Some(registry) = &config.tools
        {
            wc.tools = Some(Arc::new(registry.clone()));
        }
        let worker = Worker::new(store.clone(), runners, wc, clock.clone());
        let stop = stop_rx.clone();
        tokio::spawn(async move { worker.run(stop).await })
    });

    let done = {
        let board = board.clone();
        let mut stop_rx = stop_rx.clone();
        tokio::spawn(async move {
            let board_for_close = board.clone();
            let shutdown = async move {
                let _ = stop_rx.wait_for(|s| *s).await;
                // Long polls end now (with no task) and MCP sessions close (their
                // open streams would hold the drain up), so the graceful drain is quick.
                board_for_close.close();
                mcp_stop.cancel();
            };
            let served = axum::serve(listener, app.into_make_service())
                .with_graceful_shutdown(shutdown)
                .await;
            follower.abort();
            sampler.abort();
            for agent in builtin {
                agent.abort();
            }
            let _ = sweeper.await;
            let _ = projector.await;
            // The notifier gives its lease up (a delivery in flight may hold it a while).
            if let Some(notifier) = chat_notifier {
                let _ = tokio::time::timeout(Duration::from_secs(5), notifier).await;
            }
            if let Some(worker) = worker {
                match worker.await {
                    Ok(Err(e)) => tracing::error!(error = %e, "the worker stopped with an error"),
                    Err(e) => tracing::error!(error = %e, "the worker panicked"),
                    Ok(Ok(())) => {}
                }
            }
            served.map_err(ServeError::Io)
        })
    };
    Ok(Server {
        addr,
        auth_on,
        board,
        stop,
        done,
    })
}

/// The whole HTTP surface. Cancelling `mcp_stop` ends every MCP session.
pub fn router(
    state: AppState,
    mode: AuthMode,
    config: &ServeConfig,
    mcp_stop: CancellationToken,
) -> Router {
    let auth = Arc::new(AuthState::new(mode));
    let timeout = config.request_timeout;
    let mcp = mcp::service(
        state.clone(),
        mcp::McpConfig {
            bind: config.bind,
            auth_on: state.auth_on,
            body_limit: config.body_limit,
            stop: mcp_stop,
        },
    );
    let mut router = Router::new();
    let mut mcp = Some(mcp);
    for route in routes() {
        router = match route.handler {
            Handler::Rest(handler) => router.route(route.path, handler),
            // `route_service`, not `nest_service`: only `/mcp` itself reaches rmcp, so
            // the auth middleware's lookup of the exact path covers every request it
            // gets. One service serves all the endpoint's methods.
            Handler::Mcp => match mcp.take() {
                Some(service) => router.route_service(route.path, service),
                None => router,
            },
        };
    }
    router
        .fallback(not_found)
        .with_state(state)
        .layer(middleware::from_fn_with_state(auth, authenticate))
        // Before the token check: a page from another origin gets 403 whatever it sends.
        .layer(middleware::from_fn_with_state(
            Arc::new(config.allowed_origins.clone()),
            origin::check,
        ))
        .layer(middleware::from_fn(move |req: Request, next: Next| {
            limit_time(req, next, timeout)
        }))
        .layer(DefaultBodyLimit::max(config.body_limit))
        .layer(middleware::from_fn(observe::observe))
}

/// Say loudly, at start-up, when the database could lose acknowledged events.
pub async fn warn_about_durability(store: &EventStore) {
    match store.durability_warnings().await {
        Ok(warnings) => {
            for w in warnings {
                tracing::warn!("{w}");
                eprintln!("awl: WARNING: {w}");
            }
        }
        Err(e) => tracing::warn!(error = %e, "could not read the database's durability settings"),
    }
}

async fn limit_time(request: Request, next: Next, limit: Duration) -> Response {
    match tokio::time::timeout(limit, next.run(request)).await {
        Ok(response) => response,
        Err(_) => ApiError::new(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout",
            format!("the request took longer than {} s", limit.as_secs()),
        )
        .into_response(),
    }
}

async fn not_found(request: Request) -> Response {
    ApiError::not_found(
        "no_route",
        format!("no route {} {}", request.method(), request.uri().path()),
    )
    .into_response()
}
