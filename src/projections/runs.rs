//! Runs, their timelines and their gates: one row per run, one per step attempt, one
//! per gate (the approval inbox is the gates without a decision).

use async_trait::async_trait;

use crate::domain::run::{AttemptOutcome, GateDecision, Run, RunOutcome};
use crate::log::{RecordedEvent, StreamType};
use crate::store::rows::Param;

use std::collections::BTreeMap;

use super::fold::{Folded, fold, state_json};
use super::{Projection, ProjectionError, Writer, micros};

pub struct Runs;

const RUN_COLUMNS: &[&str] = &[
    "run_id",
    "workflow",
    "workflow_version",
    "status",
    "current_step",
    "parent_run_id",
    "started_at",
    "finished_at",
    "duration_ms",
    "cost_usd",
    "tokens",
    "error",
    "error_class",
    "updated_at",
    "waiting",
    "state",
    "version",
];
const STEP_COLUMNS: &[&str] = &[
    "run_id",
    "step_id",
    "attempt",
    "workflow",
    "scheduled_at",
    "started_at",
    "ended_at",
    "duration_ms",
    "outcome",
    "error_class",
    "error",
    "recovery",
    "backoff_ms",
    "cost_usd",
    "output_summary",
];
const GATE_COLUMNS: &[&str] = &[
    "gate_id",
    "run_id",
    "step_id",
    "workflow",
    "message",
    "approvers",
    "opened_at",
    "expires_at",
    "decision",
    "decided_by",
    "decided_at",
    "comment",
];

/// The longest output kept in a timeline row.
const SUMMARY_CHARS: usize = 200;

#[async_trait]
impl Projection for Runs {
    fn name(&self) -> &'static str {
        "runs"
    }
    fn version(&self) -> i32 {
        // 2: indexes that end in the pagination key (started_at, run_id).
        // 3: counters for analytics (workflow_days, workflow_durations, step_stats,
        //    step_failures).
        // 4: why a run on its way waits (paused, queued for a concurrency slot).
        4
    }
    fn ddl(&self) -> &'static str {
        include_str!("../../projections/runs.sql")
    }
    fn tables(&self) -> &'static [&'static str] {
        &[
            "runs",
            "run_steps",
            "run_gates",
            "workflow_days",
            "workflow_durations",
            "step_stats",
            "step_failures",
        ]
    }
    fn stream_types(&self) -> Vec<StreamType> {
        vec![StreamType::Run]
    }
    fn updated_in_place(&self) -> &'static [&'static str] {
        // A live run's row is rewritten with each batch that holds its events (four
        // or five times a run under the executor benchmark); its indexed columns
        // rarely change, so with room on the page the new version is written beside
        // the old (HOT) instead of into every index. `run_steps` is not: a timeline
        // row is written once or twice, and room in its pages would double the
        // largest of these tables for that.
        &["runs"]
    }

    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError> {
        let folded = fold::<Run>(w, "runs", "{runs}", "run_id", StreamType::Run, events).await?;
        let (mut runs, mut steps, mut gates) = (Vec::new(), Vec::new(), Vec::new());
        for f in &folded {
            runs.push(run_row(&f.id, &f.state, f.version)?);
            let workflow = f
                .state
                .workflow()
                .map(|w| w.to_string())
                .unwrap_or_default();
            for step_id in f.state.steps().keys() {
                let before = f.before.attempts(step_id);
                for a in f.state.attempts(step_id) {
                    // An attempt as it was before the batch has its row already (a
                    // run's rows are written with the state they were folded from).
                    if before.iter().any(|b| b == a) {
                        continue;
                    }
                    let output = (a.outcome == Some(AttemptOutcome::Succeeded))
                        .then(|| f.state.succeeded_output(step_id))
                        .flatten()
                        .map(|o| summary(&o.to_string()));
                    steps.push(vec![
                        Param::from(f.id.clone()),
                        Param::from(step_id.to_string()),
                        Param::from(i64::from(a.attempt)),
                        Param::from(workflow.clone()),
                        Param::from(micros(a.scheduled_at)),
                        Param::from(a.started_at.map(micros)),
                        Param::from(a.ended_at.map(micros)),
                        Param::from(
                            a.started_at
                                .zip(a.ended_at)
                                .map(|(s, e)| (e - s).num_milliseconds()),
                        ),
                        Param::from(a.outcome.map(|o| format!("{o:?}").to_uppercase())),
                        Param::from(a.error.as_ref().map(|e| e.class.as_str().to_string())),
                        Param::from(a.error.as_ref().map(|e| e.message.clone())),
                        Param::from(a.recovery.as_ref().map(ToString::to_string)),
                        Param::from(a.backoff_ms.map(|b| b as i64)),
                        Param::from(a.cost_usd),
                        Param::from(output),
                    ]);
                }
            }
            for g in f.state.gates() {
                let (decision, by, at, comment) = match &g.decision {
                    None => (None, None, None, None),
                    Some(GateDecision::Approved { by, comment, at }) => (
                        Some("APPROVED"),
                        Some(by.clone()),
                        Some(micros(*at)),
                        comment.clone(),
                    ),
                    Some(GateDecision::Rejected { by, comment, at }) => (
                        Some("REJECTED"),
                        Some(by.clone()),
                        Some(micros(*at)),
                        Some(comment.clone()),
                    ),
                    Some(GateDecision::Expired { at, .. }) => {
                        (Some("EXPIRED"), None, Some(micros(*at)), None)
                    }
                };
                gates.push(vec![
                    Param::from(g.gate_id.to_string()),
                    Param::from(f.id.clone()),
                    Param::from(g.step_id.to_string()),
                    Param::from(workflow.clone()),
                    Param::from(g.message.clone()),
                    Param::from(serde_json::to_string(&g.approvers).unwrap_or_default()),
                    Param::from(micros(g.opened_at)),
                    Param::from(g.expires_at.map(micros)),
                    Param::from(decision),
                    Param::from(by),
                    Param::from(at),
                    Param::from(comment),
                ]);
            }
        }
        aggregates(w, &folded).await?;
        w.upsert("{runs}", RUN_COLUMNS, &["run_id"], runs).await?;
        w.upsert(
            "{run_steps}",
            STEP_COLUMNS,
            &["run_id", "step_id", "attempt"],
            steps,
        )
        .await?;
        w.upsert("{run_gates}", GATE_COLUMNS, &["gate_id"], gates)
            .await
    }
}

/// Counters for analytics, from the transitions of this batch: a run started, a run
/// ended (by outcome, with its cost and duration), a step attempt ended. The fold
/// skips events already applied, so nothing is counted twice.
async fn aggregates(w: &mut Writer<'_>, folded: &[Folded<Run>]) -> Result<(), ProjectionError> {
    // (workflow, day) -> [runs, succeeded, failed, cancelled], cost, max_ms
    let mut days: BTreeMap<(String, String), ([i64; 4], f64, i64)> = BTreeMap::new();
    let mut durations: BTreeMap<(String, String, i64), i64> = BTreeMap::new();
    // (workflow, step) -> [attempts, failures, retries, total_ms, timed]
    let mut steps: BTreeMap<(String, String), [i64; 5]> = BTreeMap::new();
    let mut failures: BTreeMap<(String, String, String), i64> = BTreeMap::new();
    for f in folded {
        let run = &f.state;
        let workflow = run.workflow().map(|w| w.to_string()).unwrap_or_default();
        let day = run
            .started_at()
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        let entry = days
            .entry((workflow.clone(), day.clone()))
            .or_insert(([0; 4], 0.0, 0));
        if f.before.id().is_none() && run.id().is_some() {
            entry.0[0] += 1;
        }
        if !f.before.is_terminal() && run.is_terminal() {
            let (slot, at) = match run.outcome() {
                Some(RunOutcome::Succeeded { at, .. }) => (1, Some(*at)),
                Some(RunOutcome::Failed { at, .. }) => (2, Some(*at)),
                Some(RunOutcome::Cancelled { at, .. }) => (3, Some(*at)),
                None => (0, None),
            };
            if slot > 0 {
                entry.0[slot] += 1;
            }
            entry.1 += run.total_cost_usd();
            if let Some(ms) = run
                .started_at()
                .zip(at)
                .map(|(s, e)| (e - s).num_milliseconds())
            {
                entry.2 = entry.2.max(ms);
                *durations
                    .entry((workflow.clone(), day.clone(), super::duration_bucket(ms)))
                    .or_default() += 1;
            }
        }
        for step_id in run.steps().keys() {
            let before = f.before.attempts(step_id);
            for a in run.attempts(step_id) {
                let was_ended = before
                    .iter()
                    .any(|b| b.attempt == a.attempt && b.ended_at.is_some());
                if a.ended_at.is_none() || was_ended {
                    continue;
                }
                let s = steps
                    .entry((workflow.clone(), step_id.to_string()))
                    .or_insert([0; 5]);
                s[0] += 1;
                if a.outcome == Some(AttemptOutcome::Failed) {
                    s[1] += 1;
                    let class = a
                        .error
                        .as_ref()
                        .map(|e| e.class.as_str().to_string())
                        .unwrap_or_else(|| "unknown".into());
                    *failures
                        .entry((workflow.clone(), step_id.to_string(), class))
                        .or_default() += 1;
                }
                if a.attempt > 1 {
                    s[2] += 1;
                }
                if let Some(ms) = a
                    .started_at
                    .zip(a.ended_at)
                    .map(|(s, e)| (e - s).num_milliseconds())
                {
                    s[3] += ms;
                    s[4] += 1;
                }
            }
        }
    }
    let rows = days
        .into_iter()
        .filter(|(_, (counts, cost, max))| counts.iter().any(|c| *c > 0) || *cost > 0.0 || *max > 0)
        .map(|((workflow, day), (c, cost, max))| {
            vec![
                Param::from(workflow),
                Param::from(day),
                Param::from(c[0]),
                Param::from(c[1]),
                Param::from(c[2]),
                Param::from(c[3]),
                Param::from(cost),
                Param::from(max),
            ]
        })
        .collect();
    w.add(
        "{workflow_days}",
        &["workflow", "day"],
        &["runs", "succeeded", "failed", "cancelled", "cost_usd"],
        &["max_ms"],
        rows,
    )
    .await?;
    let rows = durations
        .into_iter()
        .map(|((workflow, day, bucket), n)| {
            vec![
                Param::from(workflow),
                Param::from(day),
                Param::from(bucket),
                Param::from(n),
            ]
        })
        .collect();
    w.add(
        "{workflow_durations}",
        &["workflow", "day", "bucket"],
        &["n"],
        &[],
        rows,
    )
    .await?;
    let rows = steps
        .into_iter()
        .map(|((workflow, step), s)| {
            vec![
                Param::from(workflow),
                Param::from(step),
                Param::from(s[0]),
                Param::from(s[1]),
                Param::from(s[2]),
                Param::from(s[3]),
                Param::from(s[4]),
            ]
        })
        .collect();
    w.add(
        "{step_stats}",
        &["workflow", "step_id"],
        &["attempts", "failures", "retries", "total_ms", "timed"],
        &[],
        rows,
    )
    .await?;
    let rows = failures
        .into_iter()
        .map(|((workflow, step, class), n)| {
            vec![
                Param::from(workflow),
                Param::from(step),
                Param::from(class),
                Param::from(n),
            ]
        })
        .collect();
    w.add(
        "{step_failures}",
        &["workflow", "step_id", "error_class"],
        &["n"],
        &[],
        rows,
    )
    .await
}

fn run_row(id: &str, run: &Run, version: i64) -> Result<Vec<Param>, ProjectionError> {
    let (finished, error, class) = match run.outcome() {
        Some(RunOutcome::Succeeded { at, .. }) => (Some(*at), None, None),
        Some(RunOutcome::Failed {
            reason,
            error_class,
            at,
        }) => (
            Some(*at),
            Some(reason.clone()),
            error_class.map(|c| c.as_str().to_string()),
        ),
        Some(RunOutcome::Cancelled { by, reason, at }) => (
            Some(*at),
            Some(format!("cancelled by {by}: {reason}")),
            None,
        ),
        None => (None, None, None),
    };
    let current = run
        .running_steps()
        .next()
        .or_else(|| run.scheduled_steps().next())
        .map(|(id, _)| id.to_string())
        .or_else(|| run.open_gates().next().map(|g| g.step_id.to_string()));
    let duration = run
        .started_at()
        .zip(finished)
        .map(|(s, e)| (e - s).num_milliseconds());
    Ok(vec![
        Param::from(id),
        Param::from(run.workflow().map(|w| w.to_string()).unwrap_or_default()),
        Param::from(run.workflow_version()),
        Param::from(run.status().map(|s| s.as_str()).unwrap_or("NONE")),
        Param::from(current),
        Param::from(run.parent().map(|p| p.run_id.to_string())),
        Param::from(run.started_at().map(micros)),
        Param::from(finished.map(micros)),
        Param::from(duration),
        Param::from(run.total_cost_usd()),
        Param::from(i64::try_from(run.total_tokens()).unwrap_or(i64::MAX)),
        Param::from(error),
        Param::from(class),
        Param::from(run.updated_at().map(micros)),
        Param::from(run.waiting_reason()),
        Param::from(state_json("runs", run)?),
        Param::from(version),
    ])
}

fn summary(text: &str) -> String {
    if text.chars().count() <= SUMMARY_CHARS {
        text.to_string()
    } else {
        let cut: String = text.chars().take(SUMMARY_CHARS - 1).collect();
        format!("{cut}…")
    }
}
