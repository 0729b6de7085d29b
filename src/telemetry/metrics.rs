//! Every metric awl keeps, named as Prometheus conventions say (`awl_` prefix, base
//! units, `_total` counters), with bounded label values: step types, outcomes,
//! statuses, route templates and projection names are fixed sets; workflow names are
//! the registered workflows.
//!
//! Modules report through these functions, never through the `metrics` macros
//! directly, so this file is the list of what `/metrics` can show.

use std::sync::OnceLock;

use metrics::{counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

pub const RUNS_STARTED: &str = "awl_runs_started_total";
pub const RUNS_FINISHED: &str = "awl_runs_finished_total";
pub const STEP_DURATION: &str = "awl_step_duration_seconds";
pub const WAKEUPS_DUE: &str = "awl_wakeups_due";
pub const WAKEUP_OLDEST_AGE: &str = "awl_wakeup_oldest_due_age_seconds";
pub const CLAIMS: &str = "awl_run_claims_total";
pub const LEASES_LOST: &str = "awl_run_leases_lost_total";
pub const TASKS: &str = "awl_tasks";
pub const DISPATCH_LATENCY: &str = "awl_task_dispatch_latency_seconds";
pub const PROJECTION_LAG: &str = "awl_projection_lag_events";
pub const APPEND_DURATION: &str = "awl_append_duration_seconds";
pub const APPEND_BATCH: &str = "awl_append_batch_requests";
pub const HTTP_REQUESTS: &str = "awl_http_requests_total";
pub const HTTP_DURATION: &str = "awl_http_request_duration_seconds";
pub const DB_POOL: &str = "awl_db_pool_connections";
pub const LOG_PAGES: &str = "awl_log_pages_total";
pub const COMMAND_CONFLICTS: &str = "awl_command_conflicts_total";
pub const FOLLOWER_LEASES: &str = "awl_follower_lease_held";

/// Every metric above: what `/metrics` can show (a test holds the Grafana dashboard to
/// it).
pub const ALL_METRICS: &[&str] = &[
    RUNS_STARTED,
    RUNS_FINISHED,
    STEP_DURATION,
    WAKEUPS_DUE,
    WAKEUP_OLDEST_AGE,
    CLAIMS,
    LEASES_LOST,
    TASKS,
    DISPATCH_LATENCY,
    PROJECTION_LAG,
    APPEND_DURATION,
    APPEND_BATCH,
    HTTP_REQUESTS,
    HTTP_DURATION,
    DB_POOL,
    LOG_PAGES,
    COMMAND_CONFLICTS,
    FOLLOWER_LEASES,
];

/// Bucket bounds of the duration histograms, in seconds (half a millisecond to ten
/// minutes).
const SECONDS: &[f64] = &[
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
    60.0, 300.0, 600.0,
];

/// Bucket bounds of the append batch sizes (requests per database call).
const BATCH: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0,
];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// Install the Prometheus recorder as this process's metrics recorder (once; before
/// the first metric is recorded, or early values are lost).
pub(super) fn install() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let builder = PrometheusBuilder::new()
            .set_buckets(SECONDS)
            .and_then(|b| {
                b.set_buckets_for_metric(
                    metrics_exporter_prometheus::Matcher::Full(APPEND_BATCH.into()),
                    BATCH,
                )
            })
            .unwrap_or_else(|_| PrometheusBuilder::new());
        let recorder = builder.build_recorder();
        let handle = recorder.handle();
        // Another recorder already installed (a test harness's): keep ours unregistered
        // so rendering still works.
        let _ = metrics::set_global_recorder(recorder);
        describe();
        handle
    })
}

/// The metrics in the Prometheus text format (installing the recorder if needed).
pub fn render() -> String {
    install().render()
}

/// Housekeeping of the recorder; call it now and then (the server does, every few
/// seconds).
pub fn upkeep() {
    install().run_upkeep();
}

fn describe() {
    describe_counter!(RUNS_STARTED, "Runs started, by workflow.");
    describe_counter!(
        RUNS_FINISHED,
        "Runs finished, by workflow and outcome (succeeded, failed, cancelled)."
    );
    describe_histogram!(
        STEP_DURATION,
        metrics::Unit::Seconds,
        "Duration of one step attempt, by step type and outcome (ok, error)."
    );
    describe_gauge!(
        WAKEUPS_DUE,
        "Run wake-ups that are due and not held by any worker."
    );
    describe_gauge!(
        WAKEUP_OLDEST_AGE,
        metrics::Unit::Seconds,
        "How long the oldest due wake-up has been waiting for a worker."
    );
    describe_counter!(CLAIMS, "Runs claimed by this process's workers.");
    describe_counter!(
        LEASES_LOST,
        "Runs this process's workers lost to another worker (lease not renewed in time), \
         by where the loss was found: `renewal`, or `commit` (a stale holder's writes \
         refused by the lease epoch)."
    );
    describe_gauge!(TASKS, "Tasks on the board, by column (status).");
    describe_histogram!(
        DISPATCH_LATENCY,
        metrics::Unit::Seconds,
        "Time from a task becoming QUEUED to its reservation for an agent."
    );
    describe_gauge!(
        PROJECTION_LAG,
        "Events in the log that a projection has not applied yet."
    );
    describe_histogram!(
        APPEND_DURATION,
        metrics::Unit::Seconds,
        "Duration of one append statement (a group commit, or a transaction's append)."
    );
    describe_histogram!(
        APPEND_BATCH,
        "Append requests (streams) written together in one append statement."
    );
    describe_counter!(
        HTTP_REQUESTS,
        "HTTP requests, by method, route template and status."
    );
    describe_histogram!(
        HTTP_DURATION,
        metrics::Unit::Seconds,
        "HTTP request duration, by method, route template and status."
    );
    describe_gauge!(
        DB_POOL,
        "Database connections of this process's pool, by state (idle, used)."
    );
    describe_counter!(
        LOG_PAGES,
        "Pages of the log this process's followers (projections, tails) read, by source: \
         `memory` (this process's own latest commits) or `database`."
    );
    describe_counter!(
        COMMAND_CONFLICTS,
        "Commands of this process whose append was refused because another writer had \
         changed the stream since it was read (each then decided again), by stream type: \
         contention, such as servers reserving the same task."
    );
    describe_gauge!(
        FOLLOWER_LEASES,
        "1 where this process holds a log follower's lease (of the servers over one \
         database, the one following the log into the projections, or telling chat), \
         else 0; by follower."
    );
}

pub fn run_started(workflow: &str) {
    counter!(RUNS_STARTED, "workflow" => workflow.to_string()).increment(1);
}

/// `outcome`: `succeeded`, `failed` or `cancelled`.
pub fn run_finished(workflow: &str, outcome: &'static str) {
    counter!(RUNS_FINISHED, "workflow" => workflow.to_string(), "outcome" => outcome).increment(1);
}

/// One step attempt of type `kind` (`shell`, `http`, ...) took `seconds`.
pub fn step_finished(kind: &'static str, ok: bool, seconds: f64) {
    let outcome = if ok { "ok" } else { "error" };
    histogram!(STEP_DURATION, "type" => kind, "outcome" => outcome).record(seconds);
}

pub fn runs_claimed(n: usize) {
    counter!(CLAIMS).increment(n as u64);
}

/// Where a worker found that it no longer held a run.
#[derive(Debug, Clone, Copy)]
pub enum LeaseLost {
    /// Renewing its leases.
    Renewal,
    /// Committing: its writes for the run were refused (fenced).
    Commit,
    /// Running its effects: the lease ran out before a renewal, so they were stopped.
    Lapsed,
}

pub fn lease_lost(at: LeaseLost) {
    let at = match at {
        LeaseLost::Renewal => "renewal",
        LeaseLost::Commit => "commit",
        LeaseLost::Lapsed => "lapsed",
    };
    counter!(LEASES_LOST, "at" => at).increment(1);
}

/// A command's append on a stream of type `stream` (`task`, `run`, ...) met another
/// writer's.
pub fn command_conflict(stream: &'static str) {
    counter!(COMMAND_CONFLICTS, "stream" => stream).increment(1);
}

/// Whether this process holds follower `follower`'s lease (`projections`, `chat`).
pub fn follower_lease_held(follower: &'static str, held: bool) {
    gauge!(FOLLOWER_LEASES, "follower" => follower).set(if held { 1.0 } else { 0.0 });
}

/// Due, unheld wake-ups, and the age of the oldest.
pub fn wakeups(due: u64, oldest_age_seconds: f64) {
    gauge!(WAKEUPS_DUE).set(due as f64);
    gauge!(WAKEUP_OLDEST_AGE).set(oldest_age_seconds);
}

/// Tasks in one board column.
pub fn tasks_in_column(status: &'static str, count: usize) {
    gauge!(TASKS, "status" => status).set(count as f64);
}

pub fn task_dispatched(latency_seconds: f64) {
    histogram!(DISPATCH_LATENCY).record(latency_seconds.max(0.0));
}

pub fn projection_lag(projection: &'static str, events: i64) {
    gauge!(PROJECTION_LAG, "projection" => projection).set(events.max(0) as f64);
}

/// One append statement of `requests` append requests (streams), taking `seconds`.
pub fn appended(requests: usize, seconds: f64) {
    histogram!(APPEND_DURATION).record(seconds);
    histogram!(APPEND_BATCH).record(requests as f64);
}

/// One HTTP request; `route` is the matched route template (`/api/v1/tasks/{task_id}`),
/// never the raw path.
pub fn http_request(method: &str, route: &str, status: u16, seconds: f64) {
    let method = method.to_string();
    let route = route.to_string();
    let status = status.to_string();
    counter!(HTTP_REQUESTS, "method" => method.clone(), "route" => route.clone(), "status" => status.clone())
        .increment(1);
    histogram!(HTTP_DURATION, "method" => method, "route" => route, "status" => status)
        .record(seconds);
}

/// A follower of the log read a page: from this process's own latest commits in
/// memory, or from the database.
pub fn log_page(from_memory: bool) {
    let source = if from_memory { "memory" } else { "database" };
    counter!(LOG_PAGES, "source" => source).increment(1);
}

/// The pool's connections: `size` open, `idle` of them idle.
pub fn db_pool(size: u32, idle: u32) {
    gauge!(DB_POOL, "state" => "idle").set(f64::from(idle));
    gauge!(DB_POOL, "state" => "used").set(f64::from(size.saturating_sub(idle)));
}
