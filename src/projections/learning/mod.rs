//! Learning: every tool call, as one normalized row (`tool_calls`): those an agent
//! reports (`task.tool_call_reported`) and those of workflow steps that reach outside
//! awl (a declared tool, shell, http, database or sub-workflow step: see [`runs`]),
//! and the tool sequences mined from them as they arrive (`tool_patterns`), with each
//! session's recent calls (`tool_tails`) so that mining is incremental: a batch reads
//! the tails of its sessions and the patterns it touches, never the log again. A
//! session's tail goes when its task or run ends, so that table holds the sessions in
//! progress.
//!
//! The mining itself is `domain::learning` (pure). The window and sequence lengths
//! shape these rows, so they are part of the projection's version: changing
//! `AWL_LEARN_WINDOW_SECONDS` rebuilds it from position 0 at the next start.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::Value;

use crate::domain::learning::{Call, MiningConfig, Occurrence, Pattern, Tail, signature};
use crate::log::{RecordedEvent, StreamType};
use crate::store::rows::Param;

use super::{Projection, ProjectionError, Writer, micros};

mod runs;

/// Bumped when the tables or the mining change.
const BASE_VERSION: i32 = 6;

pub struct Learning {
    config: MiningConfig,
    cache: DetailCache,
}

impl Learning {
    pub fn new(config: MiningConfig) -> Self {
        Self {
            config,
            cache: DetailCache::default(),
        }
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
    call: Arc<Call>,
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
    let call = Arc::new(Call::new(
        p.get("name").and_then(Value::as_str).unwrap_or_default(),
        p.get("parameters").cloned().unwrap_or(Value::Null),
        p.get("output").cloned(),
        p.get("success").and_then(Value::as_bool).unwrap_or(false),
        p.get("duration_ms").and_then(Value::as_u64).unwrap_or(0),
        at,
    ));
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
    fn updated_in_place(&self) -> &'static [&'static str] {
        // A pattern's counters change with each occurrence: at 5,000 calls a second
        // every pattern of a busy scope is rewritten several times a second.
        &["tool_patterns"]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        let ended: BTreeSet<String> = events.iter().filter_map(ended_session).collect();
        self.mine(w, events, &ended).await?;
        forget_sessions(w, &ended).await
    }
}

/// The session a task's or run's last event ends: no call can join it after that (a
/// finished task takes no more events, a finished run none but `run.derived`), so its
/// tail is of no more use.
fn ended_session(e: &RecordedEvent) -> Option<String> {
    let kind = e.event_type.as_str();
    let prefix = match e.stream.kind {
        StreamType::Task if crate::domain::task::FINISHED_EVENT_TYPES.contains(&kind) => "task",
        StreamType::Run if crate::domain::run::FINISHED_EVENT_TYPES.contains(&kind) => "run",
        _ => return None,
    };
    Some(format!("{prefix}:{}", e.stream.id))
}

/// Drop the stored tails of the sessions that ended in this batch (the batch itself
/// writes none of theirs): `tool_tails` holds the sessions still going, not one row
/// per task and run ever done.
async fn forget_sessions(
    w: &mut Writer<'_>,
    ended: &BTreeSet<String>,
) -> Result<(), ProjectionError> {
    let ended: Vec<&String> = ended.iter().collect();
    for chunk in ended.chunks(500) {
        let sql = format!(
            "DELETE FROM {{tool_tails}} WHERE session IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let params: Vec<Param> = chunk.iter().map(|s| Param::from((*s).clone())).collect();
        w.execute(&sql, &params).await?;
    }
    Ok(())
}

impl Learning {
    /// Record this batch's calls and the sequences they end; keep the tails of the
    /// sessions that go on past it (not those in `ended`).
    async fn mine(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
        ended: &BTreeSet<String>,
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
        // (pattern key, the call's index, the sequence it ends)
        let mut found: Vec<(String, usize, Occurrence)> = Vec::new();
        for (i, o) in calls.iter().enumerate() {
            let tail = tails.entry(o.session.clone()).or_default();
            for occurrence in tail.push(o.call.clone(), &self.config) {
                found.push((
                    pattern_key(&o.scope, &occurrence.signature()),
                    i,
                    occurrence,
                ));
            }
        }
        tails.retain(|session, _| !ended.contains(session));
        write_tails(w, &tails).await?;
        if found.is_empty() {
            return Ok(());
        }
        let mut patterns = load_patterns(w, &self.cache, &found).await?;
        for (key, i, occurrence) in found {
            let Observed {
                scope,
                session,
                position,
                ..
            } = &calls[i];
            match patterns.get_mut(&key) {
                Some(t) => {
                    if t.pattern.add(&occurrence, session) {
                        t.detailed = Some(*position);
                    }
                }
                None => {
                    let pattern = Pattern::first(&occurrence, session);
                    patterns.insert(
                        key,
                        Touched {
                            scope: scope.clone(),
                            pattern,
                            detailed: Some(*position),
                        },
                    );
                }
            }
        }
        let changed = events.last().map_or(0, |e| e.position);
        write_patterns(w, &self.cache, patterns, changed).await
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
                Param::from(serde_json::to_string(&o.call.args).unwrap_or_default()),
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
            let calls: Vec<Arc<Call>> = serde_json::from_str(text)
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

type Patterns = BTreeMap<String, Touched>;

/// A pattern of this batch: its scope, its state, and, when its row is new or its
/// details changed, the position of the call that last changed them (else only its
/// counters are written). The call's position, not the batch's: however the log is
/// cut into batches, the same details are written with the same position.
struct Touched {
    scope: String,
    pattern: Pattern,
    detailed: Option<i64>,
}

async fn load_patterns(
    w: &mut Writer<'_>,
    cache: &DetailCache,
    found: &[(String, usize, Occurrence)],
) -> Result<Patterns, ProjectionError> {
    let mut keys: Vec<&String> = found.iter().map(|(key, _, _)| key).collect();
    keys.sort_unstable();
    keys.dedup();
    let mut patterns = BTreeMap::new();
    let mut missing: Vec<String> = Vec::new();
    for chunk in keys.chunks(500) {
        let sql = format!(
            "SELECT {COUNTERS} FROM {{tool_patterns}} WHERE pattern_key IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let params: Vec<Param> = chunk.iter().map(|k| Param::from((*k).clone())).collect();
        for row in w.query(&sql, &params).await? {
            let key = row.get("pattern_key").and_then(Value::as_str).unwrap_or("");
            let executions = counter(&row, "executions");
            let detail = cache.take(w.generation, key, executions);
            if detail.is_none() {
                missing.push(key.to_string());
            }
            let scope = row.get("scope").and_then(Value::as_str).unwrap_or("");
            let pattern = from_counters(&row, detail.unwrap_or_default());
            patterns.insert(
                key.to_string(),
                Touched {
                    scope: scope.to_string(),
                    pattern,
                    detailed: None,
                },
            );
        }
    }
    for chunk in missing.chunks(500) {
        let sql = format!(
            "SELECT pattern_key, detail FROM {{tool_patterns}} WHERE pattern_key IN ({})",
            vec!["?"; chunk.len()].join(", ")
        );
        let params: Vec<Param> = chunk.iter().map(|k| Param::from(k.clone())).collect();
        for row in w.query(&sql, &params).await? {
            let key = row.get("pattern_key").and_then(Value::as_str).unwrap_or("");
            let detail = read_detail(key, &row)?;
            if let Some(touched) = patterns.get_mut(key) {
                set_detail(&mut touched.pattern, detail);
            }
        }
    }
    Ok(patterns)
}

/// `changed`: the log position of the batch, recorded on every row it writes (the
/// learner reads the scopes changed since its last round).
async fn write_patterns(
    w: &mut Writer<'_>,
    cache: &DetailCache,
    patterns: Patterns,
    changed: i64,
) -> Result<(), ProjectionError> {
    let (mut full, mut counters) = (Vec::new(), Vec::new());
    let mut settled = Vec::with_capacity(patterns.len());
    for (key, t) in patterns {
        let p = &t.pattern;
        let mut row = vec![
            Param::from(key.clone()),
            Param::from(t.scope),
            Param::from(signature(&p.tools)),
            Param::from(i64::try_from(p.tools.len()).unwrap_or(0)),
            Param::from(i64::try_from(p.executions).unwrap_or(i64::MAX)),
            Param::from(i64::try_from(p.successes).unwrap_or(i64::MAX)),
            Param::from(i64::try_from(p.sessions).unwrap_or(i64::MAX)),
            Param::from(p.last_session.clone()),
            Param::from(p.confidence()),
            Param::from(micros(p.first_at)),
            Param::from(micros(p.last_at)),
            Param::from(i64::try_from(p.span_ms_total).unwrap_or(i64::MAX)),
            Param::from(changed),
        ];
        if let Some(detailed) = t.detailed {
            let json = serde_json::to_string(&DetailRef::of(p))
                .map_err(|e| corrupt(format!("pattern {key:?}: {e}")))?;
            row.push(Param::from(json));
            row.push(Param::from(detailed));
            full.push(row);
        } else {
            counters.push(row);
        }
        settled.push((key, t.pattern));
    }
    let mut columns = WRITTEN.to_vec();
    w.upsert("{tool_patterns}", &columns, &["pattern_key"], counters)
        .await?;
    columns.extend(["detail", "detailed"]);
    w.upsert("{tool_patterns}", &columns, &["pattern_key"], full)
        .await?;
    cache.put(w.generation, settled);
    Ok(())
}

/// The columns a batch writes for every pattern it touched (`detail` only when it
/// changed).
const WRITTEN: [&str; 13] = [
    "pattern_key",
    "scope",
    "signature",
    "length",
    "executions",
    "successes",
    "sessions",
    "last_session",
    "confidence",
    "first_at",
    "last_at",
    "span_ms",
    "changed",
];

/// The columns of a pattern but its details.
const COUNTERS: &str =
    "pattern_key, scope, executions, successes, sessions, last_session, first_at, last_at, span_ms";

/// A pattern's details as stored (`detail`): what settles after a few executions.
#[derive(serde::Serialize)]
struct DetailRef<'a> {
    tools: &'a [String],
    args: &'a [BTreeMap<String, crate::domain::learning::ArgStat>],
    flows: &'a BTreeMap<String, crate::domain::learning::FlowStat>,
    evidence: &'a [String],
}

impl<'a> DetailRef<'a> {
    fn of(p: &'a Pattern) -> Self {
        Self {
            tools: &p.tools,
            args: &p.args,
            flows: &p.flows,
            evidence: &p.evidence,
        }
    }
}

#[derive(Debug, Default, serde::Deserialize)]
pub(crate) struct Detail {
    tools: Vec<String>,
    args: Vec<BTreeMap<String, crate::domain::learning::ArgStat>>,
    flows: BTreeMap<String, crate::domain::learning::FlowStat>,
    evidence: Vec<String>,
}

fn read_detail(key: &str, row: &serde_json::Map<String, Value>) -> Result<Detail, ProjectionError> {
    let text = row.get("detail").and_then(Value::as_str).unwrap_or("");
    serde_json::from_str(text).map_err(|e| corrupt(format!("pattern {key:?} cannot be read: {e}")))
}

fn set_detail(p: &mut Pattern, d: Detail) {
    p.tools = d.tools;
    p.args = d.args;
    p.flows = d.flows;
    p.evidence = d.evidence;
}

fn counter(row: &serde_json::Map<String, Value>, key: &str) -> u64 {
    row.get(key)
        .and_then(Value::as_i64)
        .and_then(|n| u64::try_from(n).ok())
        .unwrap_or(0)
}

fn time(row: &serde_json::Map<String, Value>, key: &str) -> chrono::DateTime<chrono::Utc> {
    row.get(key)
        .and_then(Value::as_i64)
        .and_then(chrono::DateTime::from_timestamp_micros)
        .unwrap_or_default()
}

fn from_counters(row: &serde_json::Map<String, Value>, d: Detail) -> Pattern {
    let mut p = Pattern {
        tools: Vec::new(),
        executions: counter(row, "executions"),
        successes: counter(row, "successes"),
        sessions: counter(row, "sessions"),
        last_session: row
            .get("last_session")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string(),
        first_at: time(row, "first_at"),
        last_at: time(row, "last_at"),
        span_ms_total: counter(row, "span_ms"),
        args: Vec::new(),
        flows: BTreeMap::new(),
        evidence: Vec::new(),
    };
    set_detail(&mut p, d);
    p
}

/// A stored pattern's scope, counters and tools, its details left out (a row of
/// `tool_patterns` without `detail`): enough to choose the patterns worth proposing.
/// `None` when its tools cannot be told from its signature (a tool name that holds the
/// separator splits into more parts than the pattern's length): read the whole row.
pub(crate) fn counted_pattern(row: &serde_json::Map<String, Value>) -> Option<(String, Pattern)> {
    let signature = row.get("signature").and_then(Value::as_str)?;
    let tools: Vec<String> = signature.split(" > ").map(str::to_string).collect();
    if u64::try_from(tools.len()).ok() != Some(counter(row, "length")) {
        return None;
    }
    let scope = row.get("scope").and_then(Value::as_str).unwrap_or("");
    let detail = Detail {
        tools,
        args: Vec::new(),
        flows: BTreeMap::new(),
        evidence: Vec::new(),
    };
    Some((scope.to_string(), from_counters(row, detail)))
}

/// A stored pattern (every column of its `tool_patterns` row): its scope and state.
pub(crate) fn stored_pattern(
    row: &serde_json::Map<String, Value>,
) -> Result<(String, Pattern), ProjectionError> {
    let key = row.get("pattern_key").and_then(Value::as_str).unwrap_or("");
    let detail = read_detail(key, row)?;
    let scope = row.get("scope").and_then(Value::as_str).unwrap_or("");
    Ok((scope.to_string(), from_counters(row, detail)))
}

/// Patterns' details as this process last wrote them, so a batch reads and parses
/// only the counters of the patterns it touches. An entry counts only while the
/// stored executions are the ones it was written with: a pattern another process
/// (or a batch that rolled back) changed since is read again. Executions grow by one
/// per occurrence in log order, so equal counts mean equal details.
#[derive(Default)]
pub(super) struct DetailCache {
    entries: Mutex<HashMap<(i64, String), (u64, Detail)>>,
}

/// Patterns kept at most (details of a few kilobytes each).
const CACHED_PATTERNS: usize = 16_384;

impl DetailCache {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<(i64, String), (u64, Detail)>> {
        // A panic while holding the lock leaves a map that is only ever read as hints.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The details of `key` in `generation` if they were written at `executions`.
    fn take(&self, generation: i64, key: &str, executions: u64) -> Option<Detail> {
        let mut entries = self.lock();
        let (at, detail) = entries.remove(&(generation, key.to_string()))?;
        (at == executions).then_some(detail)
    }

    fn put(&self, generation: i64, patterns: Vec<(String, Pattern)>) {
        let mut entries = self.lock();
        if entries.len() + patterns.len() > CACHED_PATTERNS {
            entries.clear();
        }
        for (key, p) in patterns.into_iter().take(CACHED_PATTERNS) {
            let detail = Detail {
                tools: p.tools,
                args: p.args,
                flows: p.flows,
                evidence: p.evidence,
            };
            entries.insert((generation, key), (p.executions, detail));
        }
    }
}
