//! Model use: what awl's own agents asked of language models, per model, agent and
//! workflow, from the `solve` streams.
//!
//! - `solves`: one row per solve (who asked, what for, where it stands, its calls,
//!   tokens, cost and time): the list the dashboard shows, and what a server reads to
//!   find solves whose process died.
//! - `model_use`: counters per day, model, agent and workflow (solves started,
//!   finished and failed; model calls, retries, tokens in and out, cost, latency).
//! - `model_latency`: a log-scale histogram of model-call latency per the same key,
//!   so percentiles are read without keeping every call.
//!
//! The model is the one the agent was configured with (the name sent to the server),
//! the workflow the one whose run queued the task the solve worked (`""` for a
//! question asked directly). Each event is counted on the day it was recorded. A row's
//! stream version makes an event already applied change nothing.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::{Map, Value};

use crate::domain::solve::{Solve, SolveEvent};
use crate::log::{RecordedEvent, StreamType};
use crate::store::domain_io;
use crate::store::rows::Param;

use super::{Projection, ProjectionError, Writer, duration_bucket, micros};

pub struct ModelUse;

const NAME: &str = "model_use";

const SOLVE_COLUMNS: &[&str] = &[
    "solve_id",
    "agent",
    "model",
    "workflow",
    "run_id",
    "task_id",
    "started_by",
    "status",
    "started_at",
    "updated_at",
    "ended_at",
    "model_calls",
    "tool_calls",
    "tokens_in",
    "tokens_out",
    "cost_usd",
    "total_ms",
    "error_class",
    "version",
];

#[async_trait]
impl Projection for ModelUse {
    fn name(&self) -> &'static str {
        NAME
    }
    fn version(&self) -> i32 {
        1
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../projections/model_use.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &["solves", "model_use", "model_latency"]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        vec![StreamType::Solve]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        let mut by_solve: BTreeMap<&str, Vec<&RecordedEvent>> = BTreeMap::new();
        for e in events.iter().filter(|e| e.stream.kind == StreamType::Solve) {
            by_solve.entry(e.stream.id.as_str()).or_default().push(e);
        }
        if by_solve.is_empty() {
            return Ok(());
        }
        let mut stored = load(w, by_solve.keys().copied()).await?;
        let mut counters = Counters::default();
        let mut changed = Vec::new();
        for (id, stream) in by_solve {
            let mut row = stored.remove(id);
            let before = row.as_ref().map_or(0, |r| r.version);
            for e in stream {
                let version = row.as_ref().map_or(0, |r| r.version);
                if e.version <= version {
                    continue;
                }
                if e.version != version + 1 {
                    return Err(corrupt(format!(
                        "{} skips from version {version} to {}",
                        e.describe(),
                        e.version
                    )));
                }
                let event = domain_io::decode::<Solve>(e)?;
                row = Some(step(row, id, &event, e, &mut counters)?);
            }
            if let Some(row) = row
                && row.version != before
            {
                changed.push(row.params());
            }
        }
        counters.write(w).await?;
        w.upsert("{solves}", SOLVE_COLUMNS, &["solve_id"], changed)
            .await
    }
}

/// A solve's row after `event`, and what it adds to the counters.
fn step(
    row: Option<SolveRow>,
    id: &str,
    event: &SolveEvent,
    recorded: &RecordedEvent,
    counters: &mut Counters,
) -> Result<SolveRow, ProjectionError> {
    let at = micros(event.at());
    let day = event.at().format("%Y-%m-%d").to_string();
    let mut row = match (row, event) {
        (
            None,
            SolveEvent::Started {
                setup, origin, by, ..
            },
        ) => {
            let row = SolveRow {
                solve_id: id.to_string(),
                agent: setup.agent.clone(),
                model: setup.model.clone(),
                workflow: origin.workflow.clone().unwrap_or_default(),
                run_id: origin.run_id.map(|r| r.to_string()),
                task_id: origin.task_id.map(|t| t.to_string()),
                started_by: by.clone(),
                status: "running".into(),
                started_at: at,
                updated_at: at,
                ended_at: None,
                model_calls: 0,
                tool_calls: 0,
                tokens_in: 0,
                tokens_out: 0,
                cost_usd: 0.0,
                total_ms: None,
                error_class: None,
                version: 0,
            };
            counters.at(&day, &row).solves += 1;
            row
        }
        (Some(_), SolveEvent::Started { .. }) => {
            return Err(corrupt(format!(
                "{} starts solve {id} again",
                recorded.describe()
            )));
        }
        (None, _) => {
            return Err(corrupt(format!(
                "{} comes before solve {id} started",
                recorded.describe()
            )));
        }
        (Some(row), _) => row,
    };
    match event {
        SolveEvent::Started { .. } => {}
        SolveEvent::ModelReplied { reply, .. } => {
            let (tokens_in, tokens_out) = (to_i64(reply.tokens_in), to_i64(reply.tokens_out));
            let latency = to_i64(reply.latency_ms);
            row.model_calls += 1;
            row.tokens_in += tokens_in;
            row.tokens_out += tokens_out;
            row.cost_usd += reply.cost_usd;
            let c = counters.at(&day, &row);
            c.calls += 1;
            c.retries += i64::from(reply.attempts.saturating_sub(1));
            c.tokens_in += tokens_in;
            c.tokens_out += tokens_out;
            c.cost_usd += reply.cost_usd;
            c.latency_ms += latency;
            c.max_latency_ms = c.max_latency_ms.max(latency);
            *counters
                .latency
                .entry((key(&day, &row), duration_bucket(latency)))
                .or_default() += 1;
        }
        SolveEvent::ToolFinished { result, .. } => {
            row.tool_calls += 1;
            row.cost_usd += result.cost_usd;
        }
        SolveEvent::Finished { timings, .. } => {
            row.status = "finished".into();
            row.ended_at = Some(at);
            row.total_ms = Some(to_i64(timings.total_ms));
            counters.at(&day, &row).finished += 1;
        }
        SolveEvent::Failed { class, .. } => {
            row.status = "failed".into();
            row.ended_at = Some(at);
            row.total_ms = Some((at - row.started_at) / 1_000);
            row.error_class = Some(class.as_str().to_string());
            counters.at(&day, &row).failed += 1;
        }
    }
    row.updated_at = at;
    row.version = recorded.version;
    Ok(row)
}

/// The stored rows of `ids`.
async fn load(
    w: &mut Writer<'_>,
    ids: impl Iterator<Item = &str>,
) -> Result<BTreeMap<String, SolveRow>, ProjectionError> {
    let ids: Vec<&str> = ids.collect();
    let mut out = BTreeMap::new();
    for chunk in ids.chunks(500) {
        let sql = format!(
            "SELECT * FROM {{solves}} WHERE solve_id IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let params: Vec<Param> = chunk.iter().map(|id| Param::from(*id)).collect();
        for r in w.query(&sql, &params).await? {
            let row = SolveRow::read(&r);
            out.insert(row.solve_id.clone(), row);
        }
    }
    Ok(out)
}

/// One row of `solves`.
#[derive(Debug, Clone)]
struct SolveRow {
    solve_id: String,
    agent: String,
    model: String,
    workflow: String,
    run_id: Option<String>,
    task_id: Option<String>,
    started_by: String,
    status: String,
    started_at: i64,
    updated_at: i64,
    ended_at: Option<i64>,
    model_calls: i64,
    tool_calls: i64,
    tokens_in: i64,
    tokens_out: i64,
    cost_usd: f64,
    total_ms: Option<i64>,
    error_class: Option<String>,
    version: i64,
}

impl SolveRow {
    fn read(r: &Map<String, Value>) -> Self {
        let text = |k: &str| r.get(k).and_then(Value::as_str).map(str::to_string);
        let int = |k: &str| r.get(k).and_then(Value::as_i64);
        Self {
            solve_id: text("solve_id").unwrap_or_default(),
            agent: text("agent").unwrap_or_default(),
            model: text("model").unwrap_or_default(),
            workflow: text("workflow").unwrap_or_default(),
            run_id: text("run_id"),
            task_id: text("task_id"),
            started_by: text("started_by").unwrap_or_default(),
            status: text("status").unwrap_or_default(),
            started_at: int("started_at").unwrap_or(0),
            updated_at: int("updated_at").unwrap_or(0),
            ended_at: int("ended_at"),
            model_calls: int("model_calls").unwrap_or(0),
            tool_calls: int("tool_calls").unwrap_or(0),
            tokens_in: int("tokens_in").unwrap_or(0),
            tokens_out: int("tokens_out").unwrap_or(0),
            cost_usd: r.get("cost_usd").and_then(Value::as_f64).unwrap_or(0.0),
            total_ms: int("total_ms"),
            error_class: text("error_class"),
            version: int("version").unwrap_or(0),
        }
    }

    fn params(self) -> Vec<Param> {
        vec![
            Param::from(self.solve_id),
            Param::from(self.agent),
            Param::from(self.model),
            Param::from(self.workflow),
            Param::from(self.run_id),
            Param::from(self.task_id),
            Param::from(self.started_by),
            Param::from(self.status),
            Param::from(self.started_at),
            Param::from(self.updated_at),
            Param::from(self.ended_at),
            Param::from(self.model_calls),
            Param::from(self.tool_calls),
            Param::from(self.tokens_in),
            Param::from(self.tokens_out),
            Param::from(self.cost_usd),
            Param::from(self.total_ms),
            Param::from(self.error_class),
            Param::from(self.version),
        ]
    }
}

/// (day, model, agent, workflow)
type Key = (String, String, String, String);

fn key(day: &str, row: &SolveRow) -> Key {
    (
        day.to_string(),
        row.model.clone(),
        row.agent.clone(),
        row.workflow.clone(),
    )
}

/// What a batch adds to `model_use` and `model_latency`.
#[derive(Default)]
struct Counters {
    use_: BTreeMap<Key, Use>,
    latency: BTreeMap<(Key, i64), i64>,
}

#[derive(Default)]
struct Use {
    solves: i64,
    finished: i64,
    failed: i64,
    calls: i64,
    retries: i64,
    tokens_in: i64,
    tokens_out: i64,
    cost_usd: f64,
    latency_ms: i64,
    max_latency_ms: i64,
}

impl Counters {
    fn at(&mut self, day: &str, row: &SolveRow) -> &mut Use {
        self.use_.entry(key(day, row)).or_default()
    }

    async fn write(self, w: &mut Writer<'_>) -> Result<(), ProjectionError> {
        let key_params = |(day, model, agent, workflow): Key| {
            vec![
                Param::from(day),
                Param::from(model),
                Param::from(agent),
                Param::from(workflow),
            ]
        };
        let rows = self
            .use_
            .into_iter()
            .map(|(k, u)| {
                let mut row = key_params(k);
                row.extend([
                    Param::from(u.solves),
                    Param::from(u.finished),
                    Param::from(u.failed),
                    Param::from(u.calls),
                    Param::from(u.retries),
                    Param::from(u.tokens_in),
                    Param::from(u.tokens_out),
                    Param::from(u.cost_usd),
                    Param::from(u.latency_ms),
                    Param::from(u.max_latency_ms),
                ]);
                row
            })
            .collect();
        const KEY: &[&str] = &["day", "model", "agent", "workflow"];
        w.add(
            "{model_use}",
            KEY,
            &[
                "solves",
                "finished",
                "failed",
                "calls",
                "retries",
                "tokens_in",
                "tokens_out",
                "cost_usd",
                "latency_ms",
            ],
            &["max_latency_ms"],
            rows,
        )
        .await?;
        let rows = self
            .latency
            .into_iter()
            .map(|((k, bucket), n)| {
                let mut row = key_params(k);
                row.extend([Param::from(bucket), Param::from(n)]);
                row
            })
            .collect();
        w.add(
            "{model_latency}",
            &["day", "model", "agent", "workflow", "bucket"],
            &["n"],
            &[],
            rows,
        )
        .await
    }
}

fn to_i64(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn corrupt(reason: String) -> ProjectionError {
    ProjectionError::Corrupt {
        projection: NAME,
        reason,
    }
}
