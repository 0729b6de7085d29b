//! The model_use projection: what awl's own agents asked of models, grouped per model,
//! agent or workflow (calls, tokens, cost, latency percentiles from the histogram, by
//! day), and the solves themselves, newest first.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::page::{Cursor, Page};
use crate::store::EventStore;
use crate::store::rows::Param;

use super::analytics::percentile_of;
use super::{QueryError, Where, int, micros, rows, text};

/// What model use is grouped by.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelGroup {
    #[default]
    Model,
    Agent,
    Workflow,
}

impl ModelGroup {
    fn column(self) -> &'static str {
        match self {
            Self::Model => "model",
            Self::Agent => "agent",
            Self::Workflow => "workflow",
        }
    }
}

/// Which model use, grouped how.
#[derive(Debug, Clone, Default)]
pub struct ModelUseFilter {
    pub by: ModelGroup,
    pub model: Option<String>,
    pub agent: Option<String>,
    /// `""`: questions asked directly, for no workflow.
    pub workflow: Option<String>,
    /// From this day (UTC) on.
    pub since: Option<DateTime<Utc>>,
    /// Up to this day (UTC), included.
    pub until: Option<DateTime<Utc>>,
}

/// Model use of one model, agent or workflow.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ModelUseStats {
    /// The model, agent or workflow (`""`: questions asked directly, for no workflow).
    pub key: String,
    pub solves: i64,
    pub finished: i64,
    pub failed: i64,
    /// Model calls.
    pub calls: i64,
    /// HTTP attempts beyond the first (429s, 5xx, network errors).
    pub retries: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cost_usd: f64,
    pub mean_latency_ms: Option<f64>,
    /// Latency percentiles, from a histogram: within a fifth.
    pub p50_latency_ms: Option<i64>,
    pub p95_latency_ms: Option<i64>,
    pub max_latency_ms: Option<i64>,
    pub by_day: Vec<ModelUseDay>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct ModelUseDay {
    /// YYYY-MM-DD (UTC).
    pub day: String,
    pub calls: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cost_usd: f64,
}

impl ModelUseFilter {
    fn clauses(&self) -> Where {
        let mut w = Where::default();
        for (column, value) in [
            ("model", &self.model),
            ("agent", &self.agent),
            ("workflow", &self.workflow),
        ] {
            if let Some(v) = value {
                w.add(&format!("{column} = ?"), [Param::from(v.clone())]);
            }
        }
        let day = |t: DateTime<Utc>| t.format("%Y-%m-%d").to_string();
        if let Some(since) = self.since {
            w.add("day >= ?", [Param::from(day(since))]);
        }
        if let Some(until) = self.until {
            w.add("day <= ?", [Param::from(day(until))]);
        }
        w
    }
}

/// Model use per model, agent or workflow, with its days, ordered by key.
pub async fn model_use(
    store: &EventStore,
    f: &ModelUseFilter,
) -> Result<Vec<ModelUseStats>, QueryError> {
    let w = f.clauses();
    let group = f.by.column();
    let counters = store
        .query_rows(
            &format!("SELECT * FROM model_use{} ORDER BY day", w.sql()),
            &w.params,
        )
        .await?;
    let buckets = store
        .query_rows(
            &format!("SELECT * FROM model_latency{}", w.sql()),
            &w.params,
        )
        .await?;
    let mut histograms: BTreeMap<String, BTreeMap<i64, i64>> = BTreeMap::new();
    for b in &buckets {
        *histograms
            .entry(text(b, group))
            .or_default()
            .entry(int(b, "bucket"))
            .or_default() += int(b, "n");
    }
    let mut out: BTreeMap<String, (ModelUseStats, i64)> = BTreeMap::new();
    for r in &counters {
        let key = text(r, group);
        let (stats, latency_total) = out.entry(key.clone()).or_insert_with(|| {
            (
                ModelUseStats {
                    key,
                    solves: 0,
                    finished: 0,
                    failed: 0,
                    calls: 0,
                    retries: 0,
                    tokens_in: 0,
                    tokens_out: 0,
                    cost_usd: 0.0,
                    mean_latency_ms: None,
                    p50_latency_ms: None,
                    p95_latency_ms: None,
                    max_latency_ms: None,
                    by_day: Vec::new(),
                },
                0,
            )
        });
        let cost = r
            .get("cost_usd")
            .and_then(serde_json::Value::as_f64)
            .unwrap_or(0.0);
        let (calls, tokens_in, tokens_out) =
            (int(r, "calls"), int(r, "tokens_in"), int(r, "tokens_out"));
        stats.solves += int(r, "solves");
        stats.finished += int(r, "finished");
        stats.failed += int(r, "failed");
        stats.calls += calls;
        stats.retries += int(r, "retries");
        stats.tokens_in += tokens_in;
        stats.tokens_out += tokens_out;
        stats.cost_usd += cost;
        *latency_total += int(r, "latency_ms");
        if calls > 0 {
            stats.max_latency_ms = Some(
                stats
                    .max_latency_ms
                    .unwrap_or(0)
                    .max(int(r, "max_latency_ms")),
            );
        }
        let day = text(r, "day");
        match stats.by_day.last_mut() {
            Some(d) if d.day == day => {
                d.calls += calls;
                d.tokens_in += tokens_in;
                d.tokens_out += tokens_out;
                d.cost_usd += cost;
            }
            _ => stats.by_day.push(ModelUseDay {
                day,
                calls,
                tokens_in,
                tokens_out,
                cost_usd: cost,
            }),
        }
    }
    Ok(out
        .into_values()
        .map(|(mut stats, latency_total)| {
            if stats.calls > 0 {
                stats.mean_latency_ms = Some(latency_total as f64 / stats.calls as f64);
            }
            let capped = |p: i64| stats.max_latency_ms.map_or(p, |m| p.min(m));
            if let Some(h) = histograms.get(&stats.key) {
                stats.p50_latency_ms = percentile_of(h, 0.5).map(capped);
                stats.p95_latency_ms = percentile_of(h, 0.95).map(capped);
            }
            stats
        })
        .collect())
}

/// One solve as the model_use projection keeps it.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct SolveRow {
    pub solve_id: String,
    pub agent: String,
    pub model: String,
    /// `""`: asked directly, for no workflow.
    pub workflow: String,
    pub run_id: Option<String>,
    pub task_id: Option<String>,
    pub started_by: String,
    /// running, finished or failed.
    pub status: String,
    pub started_at: Option<DateTime<Utc>>,
    /// When its last event was recorded.
    pub updated_at: Option<DateTime<Utc>>,
    pub ended_at: Option<DateTime<Utc>>,
    pub model_calls: i64,
    pub tool_calls: i64,
    pub tokens_in: i64,
    pub tokens_out: i64,
    pub cost_usd: f64,
    pub total_ms: Option<i64>,
    pub error_class: Option<String>,
}

/// Which solves, and which page of them.
#[derive(Debug, Clone, Default)]
pub struct SolveFilter {
    /// running, finished, failed; empty: all.
    pub statuses: Vec<String>,
    pub agent: Option<String>,
    pub model: Option<String>,
    pub workflow: Option<String>,
    /// Only solves that work no board task (asked over the API, MCP or the CLI).
    pub direct: bool,
    /// Only solves whose last event was recorded before this.
    pub idle_since: Option<DateTime<Utc>>,
    pub after: Option<Cursor>,
    pub limit: usize,
}

const SOLVE_COLUMNS: &str = "solve_id, agent, model, workflow, run_id, task_id, started_by, status, \
    started_at, updated_at, ended_at, model_calls, tool_calls, tokens_in, tokens_out, cost_usd, \
    total_ms, error_class";

/// Solves, newest first.
pub async fn solves(store: &EventStore, f: &SolveFilter) -> Result<Page<SolveRow>, QueryError> {
    let mut w = Where::default();
    w.any_of("status", &f.statuses);
    for (column, value) in [
        ("agent", &f.agent),
        ("model", &f.model),
        ("workflow", &f.workflow),
    ] {
        if let Some(v) = value {
            w.add(&format!("{column} = ?"), [Param::from(v.clone())]);
        }
    }
    if f.direct {
        w.add("task_id IS NULL", []);
    }
    if let Some(t) = f.idle_since {
        w.add("updated_at < ?", [Param::from(micros(t))]);
    }
    if let Some(c) = &f.after {
        w.add(
            "(started_at < ? OR (started_at = ? AND solve_id < ?))",
            [
                Param::from(c.key),
                Param::from(c.key),
                Param::from(c.id.clone()),
            ],
        );
    }
    let sql = format!(
        "SELECT {SOLVE_COLUMNS} FROM solves{} ORDER BY started_at DESC, solve_id DESC LIMIT {}",
        w.sql(),
        f.limit + 1
    );
    let found: Vec<SolveRow> = rows(store, "solves", &sql, &w.params).await?;
    Ok(Page::cut(found, f.limit, |r| {
        Cursor::new(r.started_at.map(micros).unwrap_or(0), r.solve_id.clone())
    }))
}
