//! How a run is printed: one JSON object per run (`awl list --json`), its timeline as
//! JSON (`awl status --json`, `awl replay --json`) and as text.

use std::io::Write;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use crate::domain::run::{AttemptOutcome, Run, RunOutcome, StepState};

use super::common::between;

/// A run in a listing.
pub fn run_json(run: &Run) -> Value {
    let current: Vec<String> = run
        .steps()
        .iter()
        .filter(|(_, s)| matches!(s, StepState::Running { .. } | StepState::Scheduled { .. }))
        .map(|(id, _)| id.to_string())
        .collect();
    json!({
        "run_id": run.id().map(|r| r.to_string()),
        "workflow": run.workflow().map(|w| w.to_string()),
        "version": run.workflow_version(),
        "status": run.status().map(|s| s.as_str()),
        "current_steps": current,
        "started_at": run.started_at(),
        "updated_at": run.updated_at(),
        "duration_ms": match (run.started_at(), run.updated_at()) {
            (Some(s), Some(e)) => Some((e - s).num_milliseconds()),
            _ => None,
        },
        "cost_usd": run.total_cost_usd(),
        "parent": run.parent().map(|p| json!({"run_id": p.run_id.to_string(), "step_id": p.step_id.to_string()})),
    })
}

/// A run with every step attempt and gate.
pub fn timeline_json(run: &Run) -> Value {
    let steps: Vec<Value> = run
        .steps()
        .iter()
        .map(|(id, state)| {
            let attempts: Vec<Value> = run
                .attempts(id)
                .iter()
                .map(|a| {
                    json!({
                        "attempt": a.attempt,
                        "scheduled_at": a.scheduled_at,
                        "due_at": a.due_at,
                        "started_at": a.started_at,
                        "restarted_at": a.restarted_at,
                        "ended_at": a.ended_at,
                        "outcome": a.outcome,
                        "error": a.error.as_ref().map(|e| json!({"class": e.class, "message": e.message})),
                        "recovery": a.recovery,
                        "cost_usd": a.cost_usd,
                    })
                })
                .collect();
            json!({"step_id": id.to_string(), "status": state.phase().as_str(), "attempts": attempts,
                   "output": run.succeeded_output(id),
                   "carried_from": run.carried_from(id).map(|r| r.to_string())})
        })
        .collect();
    let gates: Vec<Value> = run
        .gates()
        .iter()
        .map(|g| json!({"gate_id": g.gate_id.to_string(), "step_id": g.step_id.to_string(), "message": g.message,
                        "approvers": g.approvers, "opened_at": g.opened_at, "expires_at": g.expires_at,
                        "decision": g.decision}))
        .collect();
    let mut j = run_json(run);
    j["steps"] = Value::Array(steps);
    j["gates"] = Value::Array(gates);
    j["outcome"] = serde_json::to_value(run.outcome()).unwrap_or(Value::Null);
    j["origin"] = serde_json::to_value(run.origin()).unwrap_or(Value::Null);
    j["derived"] = serde_json::to_value(run.derived()).unwrap_or(Value::Null);
    j["paused"] = serde_json::to_value(run.paused()).unwrap_or(Value::Null);
    j["flow"] = serde_json::to_value(run.flow()).unwrap_or(Value::Null);
    j["queued"] = serde_json::to_value(run.queued_on()).unwrap_or(Value::Null);
    j["admitted_at"] = serde_json::to_value(run.admitted_at()).unwrap_or(Value::Null);
    j["waiting_for"] = run.waiting_reason().map_or(Value::Null, Value::String);
    j["rules"] = run.rules().0.into();
    j
}

/// A run's timeline as text: each attempt and gate at its offset from the start.
pub fn print_timeline(run: &Run) {
    let mut out = std::io::stdout().lock();
    let start = run.started_at();
    let _ = writeln!(
        out,
        "run {}  {}@{}  {}",
        run.id().map(|r| r.to_string()).unwrap_or_default(),
        run.workflow().map(|w| w.to_string()).unwrap_or_default(),
        run.workflow_version(),
        run.status().map_or("?", |s| s.as_str())
    );
    if run.flow().priority != 0 {
        let _ = writeln!(out, "    priority {}", run.flow().priority);
    }
    if let Some(why) = run.waiting_reason() {
        let _ = writeln!(out, "    {why}");
    }
    if let (Some(at), Some(s)) = (run.admitted_at(), start)
        && at > s
    {
        let _ = writeln!(out, "    admitted after {} queued", between(s, at));
    }
    if let Some(origin) = run.origin() {
        let _ = writeln!(
            out,
            "    {} of run {} from step `{}`",
            origin.kind.as_str(),
            origin.run_id,
            origin.from_step
        );
    }
    for d in run.derived() {
        let _ = writeln!(
            out,
            "    {} {} from step `{}` by {} at {}",
            d.kind.as_str(),
            d.run_id,
            d.from_step,
            d.by,
            d.at
        );
    }
    for id in run.steps().keys() {
        if let Some(from) = run.carried_from(id) {
            let _ = writeln!(out, "    {id:<24} carried from run {from}");
        }
    }
    let offset = |t: Option<DateTime<Utc>>| match (start, t) {
        (Some(s), Some(t)) => format!("+{}", between(s, t)),
        _ => "-".into(),
    };
    let mut rows: Vec<(Option<DateTime<Utc>>, String)> = Vec::new();
    for id in run.steps().keys() {
        for a in run.attempts(id) {
            let outcome = match a.outcome {
                Some(AttemptOutcome::Succeeded) => "succeeded".to_string(),
                Some(AttemptOutcome::Failed) => format!(
                    "failed: {}",
                    a.error.as_ref().map(|e| e.to_string()).unwrap_or_default()
                ),
                Some(AttemptOutcome::Skipped) => "skipped".into(),
                None if a.started_at.is_some() => "running".into(),
                None => format!("scheduled for {}", offset(Some(a.due_at))),
            };
            let took = match (a.started_at, a.ended_at) {
                (Some(s), Some(e)) => format!(" ({})", between(s, e)),
                _ => String::new(),
            };
            let recovery = a
                .recovery
                .as_ref()
                .map(|r| format!(" → {r}"))
                .unwrap_or_default();
            let restarts = if a.restarted_at.is_empty() {
                String::new()
            } else {
                format!(" [restarted {}×]", a.restarted_at.len())
            };
            rows.push((
                a.started_at.or(Some(a.scheduled_at)),
                format!(
                    "{:>10}  {:<24} #{}  {outcome}{took}{recovery}{restarts}",
                    offset(a.started_at.or(Some(a.scheduled_at))),
                    id.to_string(),
                    a.attempt
                ),
            ));
        }
    }
    for g in run.gates() {
        let decision = g
            .decision
            .as_ref()
            .map(|d| d.to_string())
            .unwrap_or_else(|| format!("open: awl approve {}", g.gate_id));
        rows.push((
            Some(g.opened_at),
            format!(
                "{:>10}  {:<24} gate  {} — {decision}",
                offset(Some(g.opened_at)),
                g.step_id.to_string(),
                g.message
            ),
        ));
    }
    rows.sort_by_key(|(t, _)| *t);
    for (_, row) in rows {
        let _ = writeln!(out, "{row}");
    }
    if run.total_cost_usd() > 0.0 {
        let _ = writeln!(
            out,
            "cost ${:.4}, {} tokens",
            run.total_cost_usd(),
            run.total_tokens()
        );
    }
    match run.outcome() {
        Some(RunOutcome::Succeeded { outputs, .. }) => {
            let _ = writeln!(out, "outputs {}", outputs);
        }
        Some(RunOutcome::Failed { reason, .. }) => {
            let _ = writeln!(out, "failed: {reason}");
        }
        Some(RunOutcome::Cancelled { by, reason, .. }) => {
            let _ = writeln!(out, "cancelled by {by}: {reason}");
        }
        None => {}
    }
}
