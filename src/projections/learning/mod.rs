//! Learning: every tool call, as one normalized row (`tool_calls`): those an agent
//! reports (`task.tool_call_reported`) and those of workflow steps that reach outside
//! awl (a declared tool, shell, http, database or sub-workflow step: see [`runs`]),
//! and the tool sequences mined from them as they arrive (`tool_patterns`), with each
//! session's recent calls (`tool_tails`) so that mining is incremental: a batch reads
//! the tails of its sessions and the patterns it touches, never the log again.
//!
//! The mining itself is `domain::learning` (pure). The window and sequence lengths
//! shape these rows, so they are part of the projection's version: changing
//! `AWL_LEARN_WINDOW_SECONDS` rebuilds it from position 0 at the next start.

use std::collections::BTreeMap;

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::learning::{Call, MiningConfig, Occurrence, Pattern, Tail, signature};
use crate::log::{RecordedEvent, StreamType};
use crate::store::rows::Param;

use super::{Projection, ProjectionError, Writer, micros};

mod runs;

/// Bumped when the tables or the mining change.
const BASE_VERSION: i32 = 2;

pub struct Learning {
    config: MiningConfig,
}

impl Learning {
    pub fn new(config: MiningConfig) -> Self {
        Self { config }
    }

    /// The window from `AWL_LEARN_WINDOW_SECONDS` (default 300).
    pub fn from_env() -> Self {
        let mut config = MiningConfig::default();
        if let Some(seconds) = std::env::var("AWL_LEARN_WINDOW_SECONDS")
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .filter(|s| (1..=86_400).contains(s))
        {
            config.window = std::time::Duration::from_secs(seconds);
        }
        Self::new(config)
    }
}

/// The key of a pattern row.
pub(crate) fn pattern_key(scope: &str, signature: &str) -> String {
    format!("{scope}\n{signature}")
}

/// A call as the log recorded it, with where it belongs.
struct Observed {
    position: i64,
    scope: String,
    session: String,
    actor: String,
    call: Call,
}

fn observed(e: &RecordedEvent) -> Option<Observed> {
    if e.stream.kind != StreamType::Task || e.event_type != "task.tool_call_reported" {
        return None;
    }
    let p = &e.payload;
    let agent = p
        .get("agent_id")
        .and_then(Value::as_str)
        .unwrap_or("unknown");
    let at = p
        .get("at")
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or(e.recorded_at);
    let call = Call::new(
        p.get("name").and_then(Value::as_str).unwrap_or_default(),
        p.get("parameters").cloned().unwrap_or(Value::Null),
        p.get("output").cloned(),
        p.get("success").and_then(Value::as_bool).unwrap_or(false),
        p.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
        at,
    );
    Some(Observed {
        position: e.position,
        scope: p
            .get("scope")
            .and_then(Value::as_str)
            .map_or_else(|| format!("user:{agent}"), str::to_string),
        session: format!("task:{}", e.stream.id),
        actor: format!("agent:{agent}"),
        call,
    })
}

#[async_trait]
impl Projection for Learning {
    fn name(&self) -> &'static str {
        "learning"
    }
    fn version(&self) -> i32 {
        let window = i32::try_from(self.config.window.as_secs().min(99_999)).unwrap_or(0);
        BASE_VERSION * 100_000 + window
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../../projections/learning.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &["tool_calls", "tool_tails", "tool_patterns", "tool_runs"]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        vec![StreamType::Task, StreamType::Run]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        let mut calls: Vec<Observed> = Vec::new();
        if events.iter().any(runs::reads) {
            let mut in_flight = runs::RunCalls::load(w, events).await?;
            for e in events {
                if runs::reads(e) {
                    calls.extend(in_flight.observe(e)?);
                } else {
                    calls.extend(observed(e));
                }
            }
            in_flight.save(w).await?;
        } else {
            calls.extend(events.iter().filter_map(observed));
        }
        if calls.is_empty() {
            return Ok(());
        }
        write_calls(w, &calls).await?;
        let mut tails = load_tails(w, &calls).await?;
        let mut found: Vec<(String, String, Occurrence)> = Vec::new();
        for o in &calls {
            let tail = tails.entry(o.session.clone()).or_default();
            for occurrence in tail.push(o.call.clone(), &self.config) {
                found.push((o.scope.clone(), o.session.clone(), occurrence));
            }
        }
        write_tails(w, &tails).await?;
        if found.is_empty() {
            return Ok(());
        }
        let mut patterns = load_patterns(w, &found).await?;
        for (scope, session, occurrence) in &found {
            let key = pattern_key(scope, &signature(&occurrence.tools()));
            match patterns.get_mut(&key) {
                Some((_, p)) => p.add(occurrence, session),
                None => {
                    patterns.insert(key, (scope.clone(), Pattern::first(occurrence, session)));
                }
            }
        }
        write_patterns(w, patterns).await
    }
}

async fn write_calls(w: &mut Writer<'_>, calls: &[Observed]) -> Result<(), ProjectionError> {
    let rows = calls
        .iter()
        .map(|o| {
            vec![
                Param::from(o.position),
                Param::from(o.scope.clone()),
                Param::from(o.session.clone()),
                Param::from(o.actor.clone()),
                Param::from(o.call.tool.clone()),
                Param::from(o.call.shape().join(",")),
                Param::from(Value::Object(o.call.args.clone()).to_string()),
                Param::from(i64::from(o.call.output.is_some())),
                Param::from(i64::from(o.call.success)),
                Param::from(i64::try_from(o.call.duration_ms).unwrap_or(i64::MAX)),
                Param::from(micros(o.call.at)),
            ]
        })
        .collect();
    w.upsert(
        "{tool_calls}",
        &[
            "position",
            "scope",
            "session",
            "actor",
            "tool",
            "shape",
            "args",
            "has_output",
            "success",
            "duration_ms",
            "at",
        ],
        &["position"],
        rows,
    )
    .await
}

fn corrupt(reason: String) -> ProjectionError {
    ProjectionError::Corrupt {
        projection: "learning",
        reason,
    }
}

async fn load_tails(
    w: &mut Writer<'_>,
    calls: &[Observed],
) -> Result<BTreeMap<String, Tail>, ProjectionError> {
    let mut sessions: Vec<&str> = calls.iter().map(|o| o.session.as_str()).collect();
    sessions.sort_unstable();
    sessions.dedup();
    let mut tails = BTreeMap::new();
    for chunk in sessions.chunks(500) {
        let sql = format!(
            "SELECT session, calls FROM {{tool_tails}} WHERE session IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let params: Vec<Param> = chunk.iter().map(|s| Param::from(*s)).collect();
        for row in w.query(&sql, &params).await? {
            let session = row.get("session").and_then(Value::as_str).unwrap_or("");
            let text = row.get("calls").and_then(Value::as_str).unwrap_or("[]");
            let calls: Vec<Call> = serde_json::from_str(text)
                .map_err(|e| corrupt(format!("the tail of {session} cannot be read: {e}")))?;
            tails.insert(session.to_string(), Tail { calls });
        }
    }
    Ok(tails)
}

async fn write_tails(
    w: &mut Writer<'_>,
    tails: &BTreeMap<String, Tail>,
) -> Result<(), ProjectionError> {
    let mut rows = Vec::with_capacity(tails.len());
    for (session, tail) in tails {
        let calls = serde_json::to_string(&tail.calls)
            .map_err(|e| corrupt(format!("the tail of {session}: {e}")))?;
        rows.push(vec![Param::from(session.clone()), Param::from(calls)]);
    }
    w.upsert("{tool_tails}", &["session", "calls"], &["session"], rows)
        .await
}

type Patterns = BTreeMap<String, (String, Pattern)>;

async fn load_patterns(
    w: &mut Writer<'_>,
    found: &[(String, String, Occurrence)],
) -> Result<Patterns, ProjectionError> {
    let mut keys: Vec<String> = found
        .iter()
        .map(|(scope, _, o)| pattern_key(scope, &signature(&o.tools())))
        .collect();
    keys.sort_unstable();
    keys.dedup();
    let mut patterns = BTreeMap::new();
    for chunk in keys.chunks(500) {
        let sql = format!(
            "SELECT pattern_key, scope, pattern FROM {{tool_patterns}} WHERE pattern_key IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let params: Vec<Param> = chunk.iter().map(|k| Param::from(k.clone())).collect();
        for row in w.query(&sql, &params).await? {
            let key = row.get("pattern_key").and_then(Value::as_str).unwrap_or("");
            let scope = row.get("scope").and_then(Value::as_str).unwrap_or("");
            let text = row.get("pattern").and_then(Value::as_str).unwrap_or("");
            let pattern: Pattern = serde_json::from_str(text)
                .map_err(|e| corrupt(format!("pattern {key:?} cannot be read: {e}")))?;
            patterns.insert(key.to_string(), (scope.to_string(), pattern));
        }
    }
    Ok(patterns)
}

async fn write_patterns(w: &mut Writer<'_>, patterns: Patterns) -> Result<(), ProjectionError> {
    let mut rows = Vec::with_capacity(patterns.len());
    for (key, (scope, p)) in patterns {
        let json =
            serde_json::to_string(&p).map_err(|e| corrupt(format!("pattern {key:?}: {e}")))?;
        rows.push(vec![
            Param::from(key),
            Param::from(scope),
            Param::from(signature(&p.tools)),
            Param::from(i64::try_from(p.tools.len()).unwrap_or(0)),
            Param::from(i64::try_from(p.executions).unwrap_or(i64::MAX)),
            Param::from(i64::try_from(p.successes).unwrap_or(i64::MAX)),
            Param::from(i64::try_from(p.sessions).unwrap_or(i64::MAX)),
            Param::from(p.confidence()),
            Param::from(micros(p.first_at)),
            Param::from(micros(p.last_at)),
            Param::from(json),
        ]);
    }
    w.upsert(
        "{tool_patterns}",
        &[
            "pattern_key",
            "scope",
            "signature",
            "length",
            "executions",
            "successes",
            "sessions",
            "confidence",
            "first_at",
            "last_at",
            "pattern",
        ],
        &["pattern_key"],
        rows,
    )
    .await
}
