//! Gauges that are states, not events, sampled every few seconds: due wake-ups and the
//! age of the oldest, database pool use, projection lag, tasks by board column. Also
//! the metrics recorder's upkeep, and `/metrics` on an address of its own (for `awl
//! worker`, which serves nothing else, and for a scrape network without tokens).

use std::net::SocketAddr;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use chrono::Utc;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::board::Board;
use crate::projections::Projections;
use crate::store::EventStore;
use crate::telemetry;

/// How often the gauges are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(5);

/// The store's gauges: due wake-ups and pool use.
pub async fn sample_store(store: &EventStore) {
    let now = Utc::now();
    match store.due_wakeups(now).await {
        Ok(due) => {
            let age = due
                .oldest
                .map(|t| (now - t).num_milliseconds().max(0) as f64 / 1e3)
                .unwrap_or(0.0);
            telemetry::wakeups(due.count, age);
        }
        Err(e) => tracing::debug!(error = %e, "cannot sample the wake-ups"),
    }
    let (size, idle) = store.pool_use();
    telemetry::db_pool(size, idle);
    telemetry::upkeep();
}

/// The server's gauges: the store's, projection lag and the board's columns.
async fn sample_server(board: &Board, projections: &Projections) {
    sample_store(board.store()).await;
    match projections.status().await {
        Ok(all) => {
            for p in all {
                if let Some(name) = projections.static_name(&p.name) {
                    telemetry::projection_lag(name, p.lag);
                }
            }
        }
        Err(e) => tracing::debug!(error = %e, "cannot sample the projections' lag"),
    }
    match board.column_counts().await {
        Ok(counts) => {
            for (status, count) in counts {
                telemetry::tasks_in_column(status.as_str(), count);
            }
        }
        Err(e) => tracing::debug!(error = %e, "cannot count the board's columns"),
    }
}

/// Sample the server's gauges until `stop`.
pub async fn sample_server_every(board: Board, mut stop: watch::Receiver<bool>) {
    let projections = Projections::new(board.store().clone());
    loop {
        sample_server(&board, &projections).await;
        tokio::select! {
            _ = stop.changed() => return,
            _ = tokio::time::sleep(SAMPLE_EVERY) => {}
        }
    }
}

/// Serve `/metrics` alone on `addr` until `stop`, sampling the store's gauges. No
/// token is asked: bind it where only the scraper reaches.
pub async fn serve_metrics(
    addr: SocketAddr,
    store: EventStore,
    mut stop: watch::Receiver<bool>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    let app = Router::new().route("/metrics", get(super::rest::meta::metrics));
    let mut server_stop = stop.clone();
    tokio::spawn(async move {
        let shutdown = async move {
            let _ = server_stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "the metrics listener stopped");
        }
    });
    tokio::spawn(async move {
        loop {
            sample_store(&store).await;
            tokio::select! {
                _ = stop.changed() => return,
                _ = tokio::time::sleep(SAMPLE_EVERY) => {}
            }
        }
    });
    Ok(bound)
}
