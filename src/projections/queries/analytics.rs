//! Analytics of history from the counters the projections keep: per workflow (runs,
//! success rate, duration percentiles from a histogram, cost, by day), per step
//! (attempts, failures by class, retries, mean time) and per agent (tasks done, review
//! round trips, time in each column).

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::store::EventStore;
use crate::store::rows::Param;

use super::{QueryError, Where, int, text};

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct WorkflowStats {
    pub workflow: String,
    pub runs: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub cancelled: i64,
    pub active: i64,
    /// Succeeded over finished.
    pub success_rate: Option<f64>,
    pub p50_ms: Option<i64>,
    pub p95_ms: Option<i64>,
    pub max_ms: Option<i64>,
    pub cost_usd: f64,
    pub by_day: Vec<DayStats>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct DayStats {
    /// YYYY-MM-DD (UTC).
    pub day: String,
    pub runs: i64,
    pub succeeded: i64,
    pub failed: i64,
    pub p50_ms: Option<i64>,
    pub cost_usd: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct StepStats {
    pub workflow: String,
    pub step_id: String,
    pub attempts: i64,
    pub failures: i64,
    /// Attempts after the first.
    pub retries: i64,
    pub mean_ms: Option<f64>,
    pub failures_by_class: BTreeMap<String, i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct AgentStats {
    pub agent_id: String,
    pub tasks_done: i64,
    pub tasks_failed: i64,
    /// Times its submissions were sent back.
    pub review_round_trips: i64,
    /// Mean time from queued to finished of the tasks it completed.
    pub mean_task_ms: Option<f64>,
    /// Milliseconds spent in each column (ASSIGNED, PENDING_ACK, IN_PROGRESS, BLOCKED,
    /// IN_REVIEW, APPROVED) while holding a task.
    pub time_in_column_ms: BTreeMap<String, i64>,
}

/// Which workflows and days.
#[derive(Debug, Clone, Default)]
pub struct AnalyticsFilter {
    pub workflow: Option<String>,
    /// From this day (UTC) on.
    pub since: Option<DateTime<Utc>>,
    /// Up to this day (UTC), included.
    pub until: Option<DateTime<Utc>>,
}

/// Per workflow: runs, success rate, p50 / p95 / max duration, cost, and by day (the
/// durations from the runs projection's histogram: within a fifth).
pub async fn workflow_stats(
    store: &EventStore,
    f: &AnalyticsFilter,
) -> Result<Vec<WorkflowStats>, QueryError> {
    let mut w = Where::default();
    if let Some(workflow) = &f.workflow {
        w.add("workflow = ?", [Param::from(workflow.clone())]);
    }
    let day = |t: DateTime<Utc>| t.format("%Y-%m-%d").to_string();
    if let Some(since) = f.since {
        w.add("day >= ?", [Param::from(day(since))]);
    }
    if let Some(until) = f.until {
        w.add("day <= ?", [Param::from(day(until))]);
    }
    let days = store
        .query_rows(
            &format!(
                "SELECT * FROM workflow_days{} ORDER BY workflow, day",
                w.sql()
            ),
            &w.params,
        )
        .await?;
    let buckets = store
        .query_rows(
            &format!("SELECT * FROM workflow_durations{}", w.sql()),
            &w.params,
        )
        .await?;
    // workflow -> day -> bucket -> count
    let mut hist: BTreeMap<String, BTreeMap<String, BTreeMap<i64, i64>>> = BTreeMap::new();
    for b in &buckets {
        *hist
            .entry(text(b, "workflow"))
            .or_default()
            .entry(text(b, "day"))
            .or_default()
            .entry(int(b, "bucket"))
            .or_default() += int(b, "n");
    }
    let mut out: BTreeMap<String, WorkflowStats> = BTreeMap::new();
    for d in &days {
        let (workflow, day) = (text(d, "workflow"), text(d, "day"));
        let stats = out
            .entry(workflow.clone())
            .or_insert_with(|| WorkflowStats {
                workflow: workflow.clone(),
                runs: 0,
                succeeded: 0,
                failed: 0,
                cancelled: 0,
                active: 0,
                success_rate: None,
                p50_ms: None,
                p95_ms: None,
                max_ms: None,
                cost_usd: 0.0,
                by_day: Vec::new(),
            });
        let cost = d
            .get("cost_usd")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
        stats.runs += int(d, "runs");
        stats.succeeded += int(d, "succeeded");
        stats.failed += int(d, "failed");
        stats.cancelled += int(d, "cancelled");
        stats.cost_usd += cost;
        if int(d, "succeeded") + int(d, "failed") + int(d, "cancelled") > 0 {
            stats.max_ms = Some(stats.max_ms.unwrap_or(0).max(int(d, "max_ms")));
        }
        let day_hist = hist.get(&workflow).and_then(|h| h.get(&day));
        stats.by_day.push(DayStats {
            day,
            runs: int(d, "runs"),
            succeeded: int(d, "succeeded"),
            failed: int(d, "failed"),
            p50_ms: day_hist.and_then(|h| percentile_of(h, 0.5)),
            cost_usd: cost,
        });
    }
    for (workflow, stats) in &mut out {
        let finished = stats.succeeded + stats.failed + stats.cancelled;
        stats.active = stats.runs - finished;
        stats.success_rate = (finished > 0).then(|| stats.succeeded as f64 / finished as f64);
        let mut all: BTreeMap<i64, i64> = BTreeMap::new();
        for day in hist.get(workflow).map(|h| h.values()).into_iter().flatten() {
            for (bucket, n) in day {
                *all.entry(*bucket).or_default() += n;
            }
        }
        let capped = |p: i64| stats.max_ms.map_or(p, |m| p.min(m));
        stats.p50_ms = percentile_of(&all, 0.5).map(capped);
        stats.p95_ms = percentile_of(&all, 0.95).map(capped);
    }
    Ok(out.into_values().collect())
}

/// The `q` quantile of a duration histogram (bucket -> count), as the bucket's upper
/// bound in milliseconds.
pub(super) fn percentile_of(histogram: &BTreeMap<i64, i64>, q: f64) -> Option<i64> {
    let total: i64 = histogram.values().sum();
    if total == 0 {
        return None;
    }
    let rank = ((total as f64) * q).ceil().max(1.0) as i64;
    let mut seen = 0;
    for (bucket, n) in histogram {
        seen += n;
        if seen >= rank {
            return Some(crate::projections::bucket_upper_ms(*bucket));
        }
    }
    None
}

/// Per step: finished attempts, failures by class, retries, mean duration.
pub async fn step_stats(
    store: &EventStore,
    workflow: Option<&str>,
) -> Result<Vec<StepStats>, QueryError> {
    let mut w = Where::default();
    if let Some(workflow) = workflow {
        w.add("workflow = ?", [Param::from(workflow)]);
    }
    let stats = store
        .query_rows(
            &format!(
                "SELECT * FROM step_stats{} ORDER BY workflow, step_id",
                w.sql()
            ),
            &w.params,
        )
        .await?;
    let classes = store
        .query_rows(
            &format!("SELECT * FROM step_failures{}", w.sql()),
            &w.params,
        )
        .await?;
    Ok(stats
        .iter()
        .map(|r| {
            let (workflow, step_id) = (text(r, "workflow"), text(r, "step_id"));
            let timed = int(r, "timed");
            StepStats {
                attempts: int(r, "attempts"),
                failures: int(r, "failures"),
                retries: int(r, "retries"),
                mean_ms: (timed > 0).then(|| int(r, "total_ms") as f64 / timed as f64),
                failures_by_class: classes
                    .iter()
                    .filter(|c| text(c, "workflow") == workflow && text(c, "step_id") == step_id)
                    .map(|c| (text(c, "error_class"), int(c, "n")))
                    .collect(),
                workflow,
                step_id,
            }
        })
        .collect())
}

/// Per agent: tasks done and failed, review round trips, mean task time, and the time
/// spent in each column while holding a task.
pub async fn agent_stats(store: &EventStore) -> Result<Vec<AgentStats>, QueryError> {
    let stats = store
        .query_rows("SELECT * FROM agent_stats ORDER BY agent_id", &[])
        .await?;
    let columns = store.query_rows("SELECT * FROM agent_columns", &[]).await?;
    Ok(stats
        .iter()
        .map(|r| {
            let agent_id = text(r, "agent_id");
            let timed = int(r, "timed");
            AgentStats {
                tasks_done: int(r, "done"),
                tasks_failed: int(r, "failed"),
                review_round_trips: int(r, "round_trips"),
                mean_task_ms: (timed > 0).then(|| int(r, "total_task_ms") as f64 / timed as f64),
                time_in_column_ms: columns
                    .iter()
                    .filter(|c| text(c, "agent_id") == agent_id)
                    .map(|c| (text(c, "status"), int(c, "ms")))
                    .collect(),
                agent_id,
            }
        })
        .collect())
}
