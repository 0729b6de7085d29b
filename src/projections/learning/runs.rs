//! The tool calls of workflow runs. A step that reaches outside awl records what it
//! calls as it starts (`run.step_started`'s `call`) and its outcome later, often in
//! another batch, so the calls in flight are kept per run (`tool_runs`) with whose run
//! it is: the scope its start was made for (a sub-workflow's run inherits its
//! parent's), else the starter's own `user:NAME`.
//!
//! Only the runs a batch touches are read and written back, once per batch.

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::learning::Call;
use crate::domain::run::{Run, RunEvent};
use crate::log::{RecordedEvent, StreamType};
use crate::store::domain_io;
use crate::store::rows::Param;

use super::{Observed, corrupt};
use crate::projections::{ProjectionError, Writer};

/// The run events that matter here (the others are not even decoded).
const READ: [&str; 7] = [
    "run.started",
    "run.step_started",
    "run.step_succeeded",
    "run.step_failed",
    "run.completed",
    "run.failed",
    "run.cancelled",
];

pub(super) fn reads(e: &RecordedEvent) -> bool {
    e.stream.kind == StreamType::Run && READ.contains(&e.event_type.as_str())
}

/// `step#attempt` of a step event's payload.
fn attempt_of(payload: &Value) -> Option<String> {
    let step = payload.get("step_id")?.as_str()?;
    let attempt = payload.get("attempt")?.as_u64()?;
    Some(format!("{step}#{attempt}"))
}

/// One run as learning keeps it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct RunRow {
    scope: String,
    actor: String,
    /// Started attempts that called something, by `step#attempt`.
    pending: BTreeMap<String, Pending>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Pending {
    tool: String,
    inputs: Value,
    at: DateTime<Utc>,
}

/// The runs of one batch.
#[derive(Default)]
pub(super) struct RunCalls {
    runs: BTreeMap<String, RunRow>,
    changed: BTreeSet<String>,
}

impl RunCalls {
    /// The rows of the runs `events` touch, and of the parents they start under.
    pub(super) async fn load(
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<Self, ProjectionError> {
        let mut ids: BTreeSet<String> = BTreeSet::new();
        for e in events.iter().filter(|e| reads(e)) {
            ids.insert(e.stream.id.clone());
            if e.event_type == "run.started"
                && let Some(parent) = e.payload.pointer("/parent/run_id").and_then(Value::as_str)
            {
                ids.insert(parent.to_string());
            }
        }
        let ids: Vec<String> = ids.into_iter().collect();
        let mut runs = BTreeMap::new();
        for chunk in ids.chunks(500) {
            let sql = format!(
                "SELECT run_id, state FROM {{tool_runs}} WHERE run_id IN ({})",
                vec!["?"; chunk.len()].join(", ")
            );
            let params: Vec<Param> = chunk.iter().map(|s| Param::from(s.clone())).collect();
            for row in w.query(&sql, &params).await? {
                let id = row.get("run_id").and_then(Value::as_str).unwrap_or("");
                let text = row.get("state").and_then(Value::as_str).unwrap_or("{}");
                let state: RunRow = serde_json::from_str(text)
                    .map_err(|e| corrupt(format!("the calls of run {id} cannot be read: {e}")))?;
                runs.insert(id.to_string(), state);
            }
        }
        Ok(Self {
            runs,
            changed: BTreeSet::new(),
        })
    }

    /// Fold one run event: the call it completes, if it does.
    pub(super) fn observe(
        &mut self,
        e: &RecordedEvent,
    ) -> Result<Option<Observed>, ProjectionError> {
        let id = e.stream.id.as_str();
        // Most steps call nothing outside awl: their events are passed over without
        // being decoded.
        let worth_decoding = match e.event_type.as_str() {
            "run.step_started" => e.payload.get("call").is_some_and(|c| !c.is_null()),
            "run.step_succeeded" | "run.step_failed" => attempt_of(&e.payload).is_some_and(|a| {
                self.runs
                    .get(id)
                    .is_some_and(|run| run.pending.contains_key(&a))
            }),
            _ => true,
        };
        if !worth_decoding {
            return Ok(None);
        }
        let event = domain_io::decode::<Run>(e)?;
        match event {
            RunEvent::Started { parent, .. } => {
                let actor = e.metadata.actor.clone().unwrap_or_else(|| "awl".into());
                let inherited = parent
                    .and_then(|p| self.runs.get(&p.run_id.to_string()))
                    .map(|p| p.scope.clone());
                let scope = e
                    .metadata
                    .scope
                    .clone()
                    .or(inherited)
                    .unwrap_or_else(|| format!("user:{actor}"));
                self.runs.insert(
                    id.to_string(),
                    RunRow {
                        scope,
                        actor,
                        pending: BTreeMap::new(),
                    },
                );
                self.changed.insert(id.to_string());
                Ok(None)
            }
            RunEvent::StepStarted {
                step_id,
                attempt,
                call: Some(call),
                at,
                ..
            } => {
                if let Some(run) = self.runs.get_mut(id) {
                    run.pending.insert(
                        format!("{step_id}#{attempt}"),
                        Pending {
                            tool: call.tool,
                            inputs: call.inputs,
                            at,
                        },
                    );
                    self.changed.insert(id.to_string());
                }
                Ok(None)
            }
            RunEvent::StepSucceeded {
                step_id,
                attempt,
                output,
                at,
                ..
            } => Ok(self.ended(
                e,
                &format!("{step_id}#{attempt}"),
                Some(std::sync::Arc::unwrap_or_clone(output)),
                true,
                at,
            )),
            RunEvent::StepFailed {
                step_id,
                attempt,
                at,
                ..
            } => Ok(self.ended(e, &format!("{step_id}#{attempt}"), None, false, at)),
            RunEvent::Completed { .. } | RunEvent::Failed { .. } | RunEvent::Cancelled { .. } => {
                if let Some(run) = self.runs.get_mut(id)
                    && !run.pending.is_empty()
                {
                    run.pending.clear();
                    self.changed.insert(id.to_string());
                }
                Ok(None)
            }
            _ => Ok(None),
        }
    }

    fn ended(
        &mut self,
        e: &RecordedEvent,
        attempt: &str,
        output: Option<Value>,
        success: bool,
        at: DateTime<Utc>,
    ) -> Option<Observed> {
        let id = e.stream.id.as_str();
        let run = self.runs.get_mut(id)?;
        let pending = run.pending.remove(attempt)?;
        self.changed.insert(id.to_string());
        let duration_ms = u64::try_from((at - pending.at).num_milliseconds()).unwrap_or(0);
        Some(Observed {
            position: e.position,
            scope: run.scope.clone(),
            session: format!("run:{id}"),
            actor: run.actor.clone(),
            call: std::sync::Arc::new(Call::from_step(
                &pending.tool,
                pending.inputs,
                output,
                success,
                duration_ms,
                at,
            )),
        })
    }

    /// Write back the runs this batch changed.
    pub(super) async fn save(&self, w: &mut Writer<'_>) -> Result<(), ProjectionError> {
        let mut rows = Vec::with_capacity(self.changed.len());
        for id in &self.changed {
            let Some(run) = self.runs.get(id) else {
                continue;
            };
            let state = serde_json::to_string(run)
                .map_err(|e| corrupt(format!("the calls of run {id}: {e}")))?;
            rows.push(vec![Param::from(id.clone()), Param::from(state)]);
        }
        if rows.is_empty() {
            return Ok(());
        }
        w.upsert("{tool_runs}", &["run_id", "state"], &["run_id"], rows)
            .await
    }
}
