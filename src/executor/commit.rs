//! Writing what was decided, for many runs in one transaction: first the fence (the
//! runs this worker still holds under the epoch it claimed them with; a stale
//! holder's decisions are dropped unwritten), then every run's events with its
//! expected version, then (for the runs whose append did not conflict) the side
//! writes their decisions planned (tasks, child runs, wake-ups), then the release of
//! every run with nothing in flight, with its next due time. A run whose events the
//! store refuses outright is set aside (tried again in a minute) rather than failing
//! everyone's commit. Nothing is decided here.

use std::collections::{BTreeSet, HashMap};

use chrono::{DateTime, Utc};
use tokio::sync::mpsc;

use crate::domain::Decide;
use crate::domain::run::RunCommand;
use crate::domain::run::{Run, RunEvent};
use crate::engine::Effect;
use crate::log::{AppendRequest, Metadata, StreamRef, StreamType};
use crate::store::{
    Lease, Release, SlotAnswer, SlotRequest, StoreError, StoreTx, Waiting, domain_io,
};
use crate::telemetry;
use cqrs_es::Aggregate;

use super::ExecError;
use super::decide::Decided;
use super::worker::{Held, Report, Worker, set_aside};

/// How long a queued run waits before it looks at its slots again if nobody woke
/// it: a safety net, since a slot given back wakes its scope's waiters at once.
const WAITING_RECHECK: chrono::TimeDelta = chrono::TimeDelta::seconds(60);

/// What the commit did about concurrency slots.
#[derive(Default)]
struct Admission {
    /// Runs that took their slots: decided again at once.
    admitted: BTreeSet<String>,
    /// Runs that found a scope full: given back waiting for it.
    waiting: HashMap<String, Waiting>,
}

impl Worker {
    /// Write every decision in one transaction, then start their effects.
    pub(super) async fn commit(
        &self,
        held: &mut HashMap<String, Held>,
        mut decided: Vec<Decided>,
        refused: Vec<Release>,
        done_tx: &mpsc::UnboundedSender<(String, Report)>,
        now: DateTime<Utc>,
    ) -> Result<(), ExecError> {
        let actor = Metadata::actor("awl");
        let mut tx = self.store.begin().await?;
        self.fence(&mut tx, held, &mut decided).await?;
        // Runs' own events first, one request each.
        let mut requests = Vec::new();
        let mut owners = Vec::new();
        for d in &decided {
            if d.events.is_empty() {
                continue;
            }
            let Some(h) = held.get(&d.run_id) else {
                continue;
            };
            let stream = StreamRef::new(StreamType::Run, d.run_id.clone());
            // The run's trace is in its first event; its steps' events need not repeat
            // it (they would make every event of every traced run larger).
            requests.push(domain_io::append_request(
                &stream, h.version, &d.events, &actor,
            )?);
            owners.push(d.run_id.clone());
        }
        let results = tx.append_each(&requests).await?;
        let mut conflicted = BTreeSet::new();
        let mut refused_runs = BTreeSet::new();
        let mut versions: HashMap<String, i64> = HashMap::new();
        let mut releases = refused;
        for (run_id, result) in owners.into_iter().zip(results) {
            match result {
                Ok(appended) => {
                    versions.insert(run_id, appended.stream_version);
                }
                Err(StoreError::Conflict { .. }) => {
                    conflicted.insert(run_id);
                }
                Err(e @ StoreError::InvalidAppend { .. }) => {
                    // Events the store refuses (nothing of them was written): this
                    // run is set aside and tried again later, the others committed.
                    tracing::error!(run = %run_id, error = %e, "the run's events cannot be stored; retrying in a minute");
                    if let Some(h) = held.get_mut(&run_id) {
                        set_aside(&run_id, h, now, &mut releases);
                    }
                    refused_runs.insert(run_id);
                }
                Err(e) => return Err(e.into()),
            }
        }
        // Refused runs are skipped below as conflicted ones are, but not read again.
        let skipped: BTreeSet<String> = conflicted.union(&refused_runs).cloned().collect();
        // What the committed decisions planned beside their events.
        let mut side = Vec::new();
        let mut wake = Vec::new();
        let mut enqueue = Vec::new();
        for d in decided.iter_mut().filter(|d| !skipped.contains(&d.run_id)) {
            side.append(&mut d.side.appends);
            wake.append(&mut d.side.wake);
            enqueue.append(&mut d.side.enqueue);
            if let Some(only) = &self.config.only
                && let Ok(mut set) = only.lock()
            {
                set.extend(d.side.children.drain(..));
            }
        }
        // A task or child run that already exists was started by an earlier attempt
        // of this decision (a crash between commit and release): nothing to do.
        let mut children_started = Vec::new();
        for (request, result) in side.iter().zip(tx.append_each(&side).await?) {
            match result {
                Ok(_) if request.stream.kind == StreamType::Run => {
                    children_started.push(started_workflow(request));
                }
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for run_id in &wake {
            tx.wake_run(run_id, now).await?;
        }
        for (run_id, priority) in &enqueue {
            tx.enqueue_run(run_id, now, *priority).await?;
        }
        let admission = self
            .admit(&mut tx, held, &mut decided, &skipped, &mut versions, now)
            .await?;
        // Give back every run with nothing in flight after this round (but those just
        // admitted: their first steps are decided in the next round).
        for d in &decided {
            if skipped.contains(&d.run_id) || admission.admitted.contains(&d.run_id) {
                continue;
            }
            let Some(h) = held.get(&d.run_id) else {
                continue;
            };
            if let Some(waiting) = admission.waiting.get(&d.run_id) {
                releases.push(Release {
                    run_id: d.run_id.clone(),
                    epoch: h.epoch,
                    due_at: Some(now + WAITING_RECHECK),
                    version: versions.get(&d.run_id).copied().unwrap_or(h.version),
                    finished: false,
                    waiting: Some(waiting.clone()),
                });
                continue;
            }
            let starts_work = d
                .effects
                .iter()
                .any(|e| matches!(e, Effect::Perform { .. } | Effect::Compensate { .. }));
            if h.in_flight.is_empty() && !starts_work && d.pending.is_empty() {
                releases.push(Release {
                    run_id: d.run_id.clone(),
                    epoch: h.epoch,
                    due_at: d.wake_at,
                    version: versions.get(&d.run_id).copied().unwrap_or(h.version),
                    finished: d.state.is_terminal(),
                    waiting: None,
                });
            }
        }
        tx.release_runs(&self.config.owner, &releases, now).await?;
        tx.commit().await?;
        for workflow in children_started {
            telemetry::run_started(&workflow);
        }
        for d in decided.iter().filter(|d| !skipped.contains(&d.run_id)) {
            if let Some(outcome) = d.events.iter().find_map(finished_as) {
                let workflow = d.state.workflow().map(|w| w.as_str()).unwrap_or_default();
                telemetry::run_finished(workflow, outcome);
            }
        }

        let released: BTreeSet<&str> = releases.iter().map(|r| r.run_id.as_str()).collect();
        for d in decided {
            if refused_runs.contains(&d.run_id) {
                if released.contains(d.run_id.as_str()) {
                    held.remove(&d.run_id);
                }
                continue;
            }
            if conflicted.contains(&d.run_id) {
                // Someone else wrote to the run: read it again and decide again, with
                // the reports this decision had taken in.
                if let Some(h) = held.get_mut(&d.run_id) {
                    let taken = d.taken;
                    h.outcomes.splice(0..0, taken.outcomes);
                    h.compensations.splice(0..0, taken.compensations);
                    h.throttles.splice(0..0, taken.throttles);
                    match self.reload(&d.run_id).await {
                        Ok((run, version)) => {
                            h.run = run;
                            h.version = version;
                            h.dirty = true;
                        }
                        Err(e) => {
                            tracing::warn!(run = %d.run_id, error = %e, "cannot reload run");
                            h.stale = true;
                            h.dirty = true;
                        }
                    }
                }
                continue;
            }
            if released.contains(d.run_id.as_str()) {
                held.remove(&d.run_id);
                continue;
            }
            let Some(h) = held.get_mut(&d.run_id) else {
                continue;
            };
            h.version = versions.get(&d.run_id).copied().unwrap_or(h.version);
            h.run = d.state;
            if admission.admitted.contains(&d.run_id) {
                // Admitted in this commit: decide its first steps next round.
                h.dirty = true;
            }
            if !d.pending.is_empty() {
                h.outcomes.extend(d.pending);
                h.dirty = true;
            }
            for effect in d.effects {
                self.spawn(&d.run_id, h, effect, done_tx);
            }
        }
        Ok(())
    }

    /// Admit the queued runs among `decided` that can take their concurrency slots,
    /// and give back the slots of those that finished, in the commit's transaction:
    /// `run.admitted` is appended for each run admitted, `run.queued` for each that
    /// starts waiting on a scope.
    async fn admit(
        &self,
        tx: &mut StoreTx,
        held: &HashMap<String, Held>,
        decided: &mut [Decided],
        conflicted: &BTreeSet<String>,
        versions: &mut HashMap<String, i64>,
        now: DateTime<Utc>,
    ) -> Result<Admission, ExecError> {
        let mut admission = Admission::default();
        let live =
            |d: &&mut Decided| !conflicted.contains(&d.run_id) && held.contains_key(&d.run_id);
        let finished: Vec<String> = decided
            .iter_mut()
            .filter(live)
            .filter(|d| d.state.is_terminal() && !d.state.flow().slots.is_empty())
            .map(|d| d.run_id.clone())
            .collect();
        let mut queued: Vec<&mut Decided> = decided
            .iter_mut()
            .filter(live)
            .filter(|d| d.state.awaiting_admission())
            .collect();
        if finished.is_empty() && queued.is_empty() {
            return Ok(admission);
        }
        // Higher priorities take a scope's free slots first.
        queued.sort_by_key(|d| std::cmp::Reverse(d.state.flow().priority));
        let requests: Vec<SlotRequest> = queued
            .iter()
            .map(|d| {
                let mut slots = d.state.flow().slots.clone();
                slots.sort();
                SlotRequest {
                    run_id: d.run_id.clone(),
                    slots,
                }
            })
            .collect();
        let answers = tx.settle_slots(&finished, &requests, now).await?;
        let actor = Metadata::actor("awl");
        let mut appends = Vec::new();
        let mut owners = Vec::new();
        for (d, answer) in queued.iter_mut().zip(answers) {
            let command = match &answer {
                SlotAnswer::Taken => RunCommand::Admit { at: now },
                SlotAnswer::Full { scope, limit } => RunCommand::Queue {
                    scope: scope.clone(),
                    limit: *limit,
                    at: now,
                },
            };
            let events = d
                .state
                .decide(command)
                .map_err(|e| ExecError::Refused(e.to_string()))?;
            match answer {
                SlotAnswer::Taken => {
                    admission.admitted.insert(d.run_id.clone());
                }
                SlotAnswer::Full { scope, .. } => {
                    let fair_key = crate::engine::flow::key_slot(&d.state.flow().slots)
                        .map(|s| s.scope.clone());
                    admission
                        .waiting
                        .insert(d.run_id.clone(), Waiting { scope, fair_key });
                }
            }
            if events.is_empty() {
                continue;
            }
            let Some(h) = held.get(&d.run_id) else {
                continue;
            };
            let version = versions.get(&d.run_id).copied().unwrap_or(h.version);
            let stream = StreamRef::new(StreamType::Run, d.run_id.clone());
            appends.push(domain_io::append_request(
                &stream, version, &events, &actor,
            )?);
            owners.push((d.run_id.clone(), events));
        }
        let results = tx.append_each(&appends).await?;
        let mut lost = Vec::new();
        for ((run_id, events), result) in owners.into_iter().zip(results) {
            match result {
                Ok(appended) => {
                    versions.insert(run_id.clone(), appended.stream_version);
                    if let Some(d) = queued.iter_mut().find(|d| d.run_id == run_id) {
                        for e in events {
                            d.state.apply(e.clone());
                            d.events.push(e);
                        }
                    }
                }
                // Someone wrote to the run since: its slots go back, and the run is
                // read again and decided again (it is due now).
                Err(StoreError::Conflict { .. }) => {
                    admission.admitted.remove(&run_id);
                    admission.waiting.remove(&run_id);
                    lost.push(run_id);
                }
                Err(e) => return Err(e.into()),
            }
        }
        if !lost.is_empty() {
            tx.settle_slots(&lost, &[], now).await?;
            for run_id in &lost {
                tx.wake_run(run_id, now).await?;
            }
        }
        Ok(admission)
    }

    /// Keep only the decisions for runs this worker still holds under its claim's
    /// epoch (their rows stay locked until the commit); drop the others, unwritten,
    /// with everything in flight for them.
    async fn fence(
        &self,
        tx: &mut StoreTx,
        held: &mut HashMap<String, Held>,
        decided: &mut Vec<Decided>,
    ) -> Result<(), ExecError> {
        let leases: Vec<Lease> = decided
            .iter()
            .filter_map(|d| {
                held.get(&d.run_id).map(|h| Lease {
                    run_id: d.run_id.clone(),
                    epoch: h.epoch,
                })
            })
            .collect();
        let kept: BTreeSet<String> = tx
            .fence(&self.config.owner, &leases)
            .await?
            .into_iter()
            .collect();
        decided.retain(|d| {
            if kept.contains(&d.run_id) {
                return true;
            }
            let epoch = held.remove(&d.run_id).map(|h| h.epoch);
            tracing::warn!(
                run = %d.run_id,
                epoch,
                events = d.events.len(),
                "refused to write for a run another worker claimed since (lease epoch \
                 superseded): its decision is dropped and the run left to the new holder"
            );
            telemetry::lease_lost(telemetry::LeaseLost::Commit);
            false
        });
        Ok(())
    }

    pub(super) async fn reload(&self, run_id: &str) -> Result<(Run, i64), ExecError> {
        let mut events = self
            .store
            .read_current(&StreamRef::new(StreamType::Run, run_id))
            .await?;
        self.store
            .reveal_events(&mut events, crate::vault::Reveal::Plain)
            .await?;
        Ok(domain_io::fold::<Run>(&events)?)
    }
}

/// How a run ended, if `event` ends it (as the finished-runs metric names it).
fn finished_as(event: &RunEvent) -> Option<&'static str> {
    match event {
        RunEvent::Completed { .. } => Some("succeeded"),
        RunEvent::Failed { .. } => Some("failed"),
        RunEvent::Cancelled { .. } => Some("cancelled"),
        _ => None,
    }
}

/// The workflow a run-start request starts (its first event names it). Only that
/// field is read: the payload also holds the run's inputs.
fn started_workflow(request: &AppendRequest) -> String {
    #[derive(serde::Deserialize)]
    struct Started {
        workflow: String,
    }
    request
        .events
        .first()
        .and_then(|e| serde_json::from_str::<Started>(e.payload.as_str()).ok())
        .map(|started| started.workflow)
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::domain::run::{Flow, Rules};
    use crate::store::domain_io;

    #[test]
    fn a_child_start_names_its_workflow() {
        let start = RunEvent::Started {
            run_id: crate::domain::ids::RunId::new(),
            workflow: "deploy".parse().expect("a workflow name"),
            workflow_version: "1.0.0".into(),
            inputs: json!({"workflow": "not this one", "big": [1, 2, 3]}),
            budget_usd: None,
            timeout_at: None,
            parent: None,
            origin: None,
            flow: Flow::default(),
            rules: Rules::CURRENT,
            at: Utc::now(),
        };
        let request = domain_io::append_request(
            &StreamRef::new(StreamType::Run, "child"),
            0,
            &[start],
            &Metadata::actor("awl"),
        )
        .expect("a start is encoded");
        assert_eq!(started_workflow(&request), "deploy");
    }
}
