//! The worker loop: claim due runs, decide for all of them, commit once, perform.
//!
//! One round:
//!
//! 1. collect the outcomes of effects that finished;
//! 2. claim due runs (up to `batch` held at once) and fold their streams (one query);
//! 3. for every run with something new: read the tasks and child runs its waiting
//!    steps depend on, then [`engine::tick`]; pure built-in tools (`noop`, `echo`,
//!    `fail`) are answered at once and the run decided again, so a chain of them is
//!    one commit;
//! 4. one transaction: every run's events (each with its expected version), the tasks
//!    and child runs they start, wake-ups for parents and children, and the release of
//!    every run with nothing in flight (with its next due time);
//! 5. spawn the remaining effects.
//!
//! A run with work in flight stays held: its lease is renewed every third of the lease
//! time. If the lease is lost (the worker stalled), the run is dropped here and its
//! late outcomes are ignored; the new holder restarts the attempt with the same key.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::domain::Decide;
use crate::domain::ids::{AgentId, RunId};
use crate::domain::run::{ErrorClass, ParentRef, Run, RunOutcome, StepState};
use crate::domain::task::{RunStepRef, Task, TaskCommand, TaskEnding};
use crate::domain::workspace::{Capabilities, Workspace};
use crate::engine::{self, CompensationOutcome, Done, Effect, Failure, StepOutcome, TickInput};
use crate::log::{AppendRequest, Metadata, StreamRef, StreamType};
use crate::runners::Runners;
use crate::store::{EventStore, Release, StoreError, domain_io};
use crate::workflow::inputs::{self, Given};
use crate::workflow::model::{StepKind, Workflow};

use super::ExecError;
use super::perform::{self, Call};
use crate::definitions::Definitions;

/// How a worker behaves.
#[derive(Clone)]
pub struct WorkerConfig {
    /// Unique per worker: who holds a lease.
    pub owner: String,
    /// Most runs held at once.
    pub batch: usize,
    pub lease: Duration,
    /// How long an idle worker sleeps without a signal.
    pub poll: Duration,
    /// The environment variables expressions may read.
    pub env: BTreeMap<String, String>,
    /// Claim only these runs (and the children they start): `awl run` executes its
    /// own run without taking others' work.
    pub only: Option<Arc<Mutex<BTreeSet<String>>>>,
    /// Stop once every run in `only` has finished.
    pub exit_when_done: bool,
}

impl WorkerConfig {
    pub fn new(owner: impl Into<String>) -> Self {
        Self {
            owner: owner.into(),
            batch: 512,
            lease: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            env: BTreeMap::new(),
            only: None,
            exit_when_done: false,
        }
    }

    /// A worker that carries out only `runs` (and the child runs they start), and
    /// stops once they have all finished: `awl run` executing its own run here.
    pub fn for_runs(owner: impl Into<String>, runs: impl IntoIterator<Item = RunId>) -> Self {
        let only: BTreeSet<String> = runs.into_iter().map(|r| r.to_string()).collect();
        Self {
            only: Some(Arc::new(Mutex::new(only))),
            exit_when_done: true,
            poll: Duration::from_millis(250),
            ..Self::new(owner)
        }
    }
}

/// How many times one run is decided again in one round after pure tools answered
/// at once; a longer chain goes on in the next round, so one run cannot hold up the
/// others' commit.
const MAX_TICKS_PER_ROUND: usize = 64;

/// A run this worker holds.
struct Held {
    run: Run,
    version: i64,
    definition: Arc<Workflow>,
    in_flight: BTreeSet<String>,
    outcomes: Vec<StepOutcome>,
    compensations: Vec<CompensationOutcome>,
    /// Something new to decide on.
    dirty: bool,
}

/// What a finished effect reports.
enum Report {
    Step(StepOutcome, String),
    Compensation(CompensationOutcome, String),
}

/// A `workflow` step's child run, ready to start.
struct ChildStart {
    run_id: crate::domain::ids::RunId,
    step_id: crate::domain::ids::StepId,
    definition: Arc<Workflow>,
    version: String,
    inputs: serde_json::Map<String, Value>,
}

/// Give a run back to be tried again in a minute (it could not be loaded or decided).
fn retry_later(run_id: &str, version: i64, now: DateTime<Utc>) -> Release {
    Release {
        run_id: run_id.to_string(),
        due_at: Some(now + chrono::Duration::minutes(1)),
        version,
        finished: false,
    }
}

/// A worker: cheap to clone, run with [`Worker::run`].
#[derive(Clone)]
pub struct Worker {
    store: EventStore,
    runners: Runners,
    definitions: Definitions,
    config: WorkerConfig,
    clock: Clock,
}

/// One decision about one run, waiting to be committed.
struct Decided {
    run_id: String,
    events: Vec<crate::domain::run::RunEvent>,
    effects: Vec<Effect>,
    /// Child runs to start, their definitions and inputs already resolved.
    children: Vec<ChildStart>,
    wake_at: Option<DateTime<Utc>>,
    state: Run,
    /// Outcomes of pure tools not yet decided on (the round's cap was reached): the
    /// run stays held and is decided again next round.
    pending: Vec<StepOutcome>,
}

impl Worker {
    pub fn new(store: EventStore, runners: Runners, config: WorkerConfig, clock: Clock) -> Self {
        Self {
            store,
            runners,
            definitions: Definitions::default(),
            config,
            clock,
        }
    }

    /// Run until `shutdown` turns true (or, with `exit_when_done`, until the runs in
    /// `only` are finished). On shutdown, in-flight effects are awaited for up to the
    /// lease time, their outcomes recorded, and every lease given back.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> Result<(), ExecError> {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, Report)>();
        let mut held: HashMap<String, Held> = HashMap::new();
        let mut wake = self.store.subscribe();
        let mut last_renew = tokio::time::Instant::now();
        let mut stopping = false;
        let mut stopping_since = None;
        let mut failures = 0u32;
        loop {
            while let Ok((run_id, report)) = done_rx.try_recv() {
                accept(&mut held, run_id, report);
            }
            if *shutdown.borrow() {
                stopping = true;
            }
            let round = self.round(&mut held, &done_tx, stopping).await;
            let worked = match round {
                Ok(worked) => {
                    failures = 0;
                    worked
                }
                Err(e) => {
                    failures += 1;
                    tracing::warn!(error = %e, "worker round failed; retrying");
                    tokio::time::sleep(Duration::from_millis(100 * u64::from(failures.min(50))))
                        .await;
                    continue;
                }
            };
            if last_renew.elapsed() >= self.config.lease / 3 {
                self.renew(&mut held).await;
                last_renew = tokio::time::Instant::now();
            }
            if stopping {
                let since = *stopping_since.get_or_insert_with(tokio::time::Instant::now);
                // Work in flight gets up to a lease's time to finish and be recorded;
                // what is still running then is given back and started again by the
                // next holder (at least once).
                if held.values().all(|h| h.in_flight.is_empty())
                    || since.elapsed() >= self.config.lease
                {
                    self.release_all(&mut held).await?;
                    return Ok(());
                }
            }
            if self.config.exit_when_done && self.only_runs_finished(&held).await? {
                return Ok(());
            }
            if worked {
                continue;
            }
            let sleep = self.idle_sleep(&held).await;
            tokio::select! {
                Some((run_id, report)) = done_rx.recv() => accept(&mut held, run_id, report),
                _ = wake.changed() => {}
                _ = tokio::time::sleep(sleep) => {}
                _ = shutdown.changed() => {}
            }
        }
    }

    /// One round; returns whether anything was decided.
    async fn round(
        &self,
        held: &mut HashMap<String, Held>,
        done_tx: &mpsc::UnboundedSender<(String, Report)>,
        stopping: bool,
    ) -> Result<bool, ExecError> {
        let now = (self.clock)();
        if !stopping && held.len() < self.config.batch {
            self.claim(held, now).await?;
        }
        let dirty: Vec<String> = held
            .iter()
            .filter(|(_, h)| h.dirty)
            .map(|(id, _)| id.clone())
            .collect();
        if dirty.is_empty() {
            return Ok(false);
        }
        let mut decided = Vec::with_capacity(dirty.len());
        let mut refused = Vec::new();
        for run_id in &dirty {
            let Some(h) = held.get_mut(run_id) else {
                continue;
            };
            h.dirty = false;
            let external = self.external_outcomes(h).await?;
            h.outcomes.extend(external);
            match self.decide(run_id, h, now).await {
                Ok(d) => decided.push(d),
                Err(e) => {
                    // A bug or a definition the run does not fit: give the run back
                    // to be tried again later rather than hold it forever.
                    tracing::error!(run = %run_id, error = %e, "cannot decide for run; retrying in a minute");
                    if h.in_flight.is_empty() {
                        refused.push(retry_later(run_id, h.version, now));
                    }
                }
            }
        }
        for r in &refused {
            held.remove(&r.run_id);
        }
        self.commit(held, decided, refused, done_tx, now).await?;
        Ok(true)
    }

    /// Claim due runs and fold them.
    async fn claim(
        &self,
        held: &mut HashMap<String, Held>,
        now: DateTime<Utc>,
    ) -> Result<(), ExecError> {
        let only: Option<Vec<String>> = self
            .config
            .only
            .as_ref()
            .and_then(|o| o.lock().ok().map(|s| s.iter().cloned().collect()));
        let limit = (self.config.batch - held.len()) as i64;
        let lease_until = now + chrono::Duration::from_std(self.config.lease).unwrap_or_default();
        let claimed = self
            .store
            .claim_runs(&self.config.owner, now, lease_until, limit, only.as_deref())
            .await?;
        if claimed.is_empty() {
            return Ok(());
        }
        let claimed: Vec<String> = claimed
            .into_iter()
            .filter(|id| !held.contains_key(id))
            .collect();
        let streams = self.store.read_streams(StreamType::Run, &claimed).await?;
        for run_id in claimed {
            let events = streams.get(&run_id).map(Vec::as_slice).unwrap_or_default();
            match self.load(events).await {
                Ok((run, version, definition)) => {
                    held.insert(
                        run_id,
                        Held {
                            run,
                            version,
                            definition,
                            in_flight: BTreeSet::new(),
                            outcomes: Vec::new(),
                            compensations: Vec::new(),
                            dirty: true,
                        },
                    );
                }
                Err(e) => {
                    tracing::error!(run = %run_id, error = %e, "cannot load run; retrying in a minute");
                    let version = events.last().map_or(0, |e| e.version);
                    let mut tx = self.store.begin().await?;
                    tx.release_runs(
                        &self.config.owner,
                        &[retry_later(&run_id, version, now)],
                        now,
                    )
                    .await?;
                    tx.commit().await?;
                }
            }
        }
        Ok(())
    }

    async fn load(
        &self,
        events: &[crate::log::RecordedEvent],
    ) -> Result<(Run, i64, Arc<Workflow>), ExecError> {
        let (run, version) = domain_io::fold::<Run>(events)?;
        let name = run
            .workflow()
            .ok_or_else(|| ExecError::Refused("the run has no start event".into()))?
            .to_string();
        let definition = self
            .definitions
            .get(&self.store, &name, run.workflow_version())
            .await?;
        Ok((run, version, definition))
    }

    /// Outcomes of waiting `agent` and `workflow` steps whose task or child run ended
    /// (the tasks and the child runs each read in one query).
    async fn external_outcomes(&self, h: &Held) -> Result<Vec<StepOutcome>, ExecError> {
        let Some(id) = h.run.id() else {
            return Ok(Vec::new());
        };
        let mut tasks = Vec::new();
        let mut children = Vec::new();
        for (step_id, state) in h.run.running_steps() {
            let StepState::Running { attempt, .. } = state else {
                continue;
            };
            match engine::find_step(&h.definition, step_id.as_str()).map(|s| &s.kind) {
                Some(StepKind::Agent(_)) => tasks.push((
                    step_id.clone(),
                    *attempt,
                    engine::task_id(id, step_id, *attempt).to_string(),
                )),
                Some(StepKind::Workflow(_)) => children.push((
                    step_id.clone(),
                    *attempt,
                    engine::child_run_id(id, step_id, *attempt).to_string(),
                )),
                _ => {}
            }
        }
        let mut found = Vec::new();
        if !tasks.is_empty() {
            let ids: Vec<String> = tasks.iter().map(|(_, _, t)| t.clone()).collect();
            let streams = self.store.read_streams(StreamType::Task, &ids).await?;
            for (step_id, attempt, task_id) in tasks {
                let events = streams.get(&task_id).map(Vec::as_slice).unwrap_or_default();
                let (task, _) = domain_io::fold::<Task>(events)?;
                if let Some(result) = task_result(&task) {
                    found.push(StepOutcome {
                        step_id,
                        attempt,
                        result,
                    });
                }
            }
        }
        if !children.is_empty() {
            let ids: Vec<String> = children.iter().map(|(_, _, c)| c.clone()).collect();
            let streams = self.store.read_streams(StreamType::Run, &ids).await?;
            for (step_id, attempt, child_id) in children {
                let events = streams
                    .get(&child_id)
                    .map(Vec::as_slice)
                    .unwrap_or_default();
                let (child, _) = domain_io::fold::<Run>(events)?;
                if let Some(result) = child_result(&child) {
                    found.push(StepOutcome {
                        step_id,
                        attempt,
                        result,
                    });
                }
            }
        }
        Ok(found)
    }

    /// Tick a run until nothing pure is left to answer at once.
    async fn decide(
        &self,
        run_id: &str,
        h: &mut Held,
        now: DateTime<Utc>,
    ) -> Result<Decided, ExecError> {
        let mut state = h.run.clone();
        let mut events = Vec::new();
        let mut outcomes = std::mem::take(&mut h.outcomes);
        let mut compensations = std::mem::take(&mut h.compensations);
        let mut kept = Vec::new();
        let mut children = Vec::new();
        // Work decided by an earlier tick of this round is as good as in flight: a later
        // tick must not take its attempt for one a dead worker left behind.
        let mut in_flight = h.in_flight.clone();
        let mut wake_at = None;
        for _ in 0..MAX_TICKS_PER_ROUND {
            let input = TickInput {
                now,
                outcomes: std::mem::take(&mut outcomes),
                compensations: std::mem::take(&mut compensations),
                in_flight: in_flight.clone(),
                env: self.config.env.clone(),
            };
            let tick = engine::tick(&h.definition, &state, &input)?;
            events.extend(tick.events);
            state = tick.state;
            wake_at = tick.wake_at;
            let mut again = false;
            for effect in tick.effects {
                match effect {
                    Effect::Perform {
                        ref work,
                        ref step_id,
                        attempt,
                        before: None,
                        ..
                    } if perform::is_pure(work) => {
                        let run_id = state.id().unwrap_or_default();
                        let key = engine::step_idempotency_key(run_id, step_id);
                        let call = Call {
                            run_id,
                            step_id: step_id.as_str(),
                            attempt,
                            key: &key,
                            timeout_ms: None,
                        };
                        let result = perform::perform(&self.runners, &call, work, None).await;
                        outcomes.push(StepOutcome {
                            step_id: step_id.clone(),
                            attempt,
                            result,
                        });
                        again = true;
                    }
                    Effect::StartChild {
                        ref step_id,
                        attempt,
                        ref workflow,
                        ref inputs,
                        run_id: child,
                    } => match self.child_definition(workflow, inputs).await {
                        Ok((definition, version, inputs)) => children.push(ChildStart {
                            run_id: child,
                            step_id: step_id.clone(),
                            definition,
                            version,
                            inputs,
                        }),
                        Err(message) => {
                            outcomes.push(StepOutcome {
                                step_id: step_id.clone(),
                                attempt,
                                result: Err(Failure {
                                    class: ErrorClass::Validation,
                                    message,
                                }),
                            });
                            again = true;
                        }
                    },
                    other => {
                        if let Effect::Perform { key, .. } | Effect::Compensate { key, .. } = &other
                        {
                            in_flight.insert(key.clone());
                        }
                        kept.push(other)
                    }
                }
            }
            if !again {
                break;
            }
        }
        Ok(Decided {
            run_id: run_id.to_string(),
            events,
            effects: kept,
            children,
            wake_at,
            state,
            pending: outcomes,
        })
    }

    async fn child_definition(
        &self,
        reference: &str,
        given: &serde_json::Map<String, Value>,
    ) -> Result<(Arc<Workflow>, String, serde_json::Map<String, Value>), String> {
        let (definition, version) = self
            .definitions
            .resolve(&self.store, reference)
            .await
            .map_err(|e| format!("sub-workflow `{reference}`: {e}"))?;
        let inputs = inputs::resolve(&definition.inputs, given.clone(), Given::Json).map_err(
            |problems| {
                let list: Vec<String> = problems.into_iter().map(|p| p.message).collect();
                format!("sub-workflow `{reference}`: {}", list.join("; "))
            },
        )?;
        Ok((definition, version, inputs))
    }

    /// Write every decision in one transaction, then start their effects.
    async fn commit(
        &self,
        held: &mut HashMap<String, Held>,
        decided: Vec<Decided>,
        refused: Vec<Release>,
        done_tx: &mpsc::UnboundedSender<(String, Report)>,
        now: DateTime<Utc>,
    ) -> Result<(), ExecError> {
        let actor = Metadata::actor("awl");
        let mut tx = self.store.begin().await?;
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
            requests.push(domain_io::append_request(
                &stream, h.version, &d.events, &actor,
            )?);
            owners.push(d.run_id.clone());
        }
        let results = tx.append_each(&requests).await?;
        let mut conflicted = BTreeSet::new();
        let mut versions: HashMap<String, i64> = HashMap::new();
        for (run_id, result) in owners.into_iter().zip(results) {
            match result {
                Ok(appended) => {
                    versions.insert(run_id, appended.stream_version);
                }
                Err(StoreError::Conflict { .. }) => {
                    conflicted.insert(run_id);
                }
                Err(e) => return Err(e.into()),
            }
        }
        // What the committed decisions start in the log: tasks, child runs, wake-ups.
        let mut side = Vec::new();
        let mut wake = Vec::new();
        for d in decided.iter().filter(|d| !conflicted.contains(&d.run_id)) {
            for effect in &d.effects {
                match effect {
                    Effect::QueueTask { .. } => {
                        if let Some(request) = queue_task(&d.state, effect, now, &actor)? {
                            side.push(request);
                        }
                    }
                    Effect::WakeParent(parent) => wake.push(parent.run_id.to_string()),
                    _ => {}
                }
            }
        }
        for d in decided.iter().filter(|d| !conflicted.contains(&d.run_id)) {
            for child in &d.children {
                let parent = ParentRef {
                    run_id: d.state.id().unwrap_or_default(),
                    step_id: child.step_id.clone(),
                };
                let command = engine::start_command(
                    &child.definition,
                    &child.version,
                    child.run_id,
                    child.inputs.clone(),
                    Some(parent),
                    now,
                )
                .map_err(|e| ExecError::Refused(e.to_string()))?;
                let events = Run::default()
                    .decide(command)
                    .map_err(|e| ExecError::Refused(e.to_string()))?;
                let stream = StreamRef::new(StreamType::Run, child.run_id.to_string());
                side.push(domain_io::append_request(&stream, 0, &events, &actor)?);
                wake.push(child.run_id.to_string());
                if let Some(only) = &self.config.only
                    && let Ok(mut set) = only.lock()
                {
                    set.insert(child.run_id.to_string());
                }
            }
        }
        // A task or child run that already exists was started by an earlier attempt
        // of this decision (a crash between commit and release): nothing to do.
        for result in tx.append_each(&side).await? {
            match result {
                Ok(_) | Err(StoreError::Conflict { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        for run_id in &wake {
            tx.wake_run(run_id, now).await?;
        }
        // Give back every run with nothing in flight after this round.
        let mut releases = refused;
        for d in &decided {
            if conflicted.contains(&d.run_id) {
                continue;
            }
            let Some(h) = held.get(&d.run_id) else {
                continue;
            };
            let starts_work = d
                .effects
                .iter()
                .any(|e| matches!(e, Effect::Perform { .. } | Effect::Compensate { .. }));
            if h.in_flight.is_empty() && !starts_work && d.pending.is_empty() {
                releases.push(Release {
                    run_id: d.run_id.clone(),
                    due_at: d.wake_at,
                    version: versions.get(&d.run_id).copied().unwrap_or(h.version),
                    finished: d.state.is_terminal(),
                });
            }
        }
        tx.release_runs(&self.config.owner, &releases, now).await?;
        tx.commit().await?;

        let released: BTreeSet<&str> = releases.iter().map(|r| r.run_id.as_str()).collect();
        for d in decided {
            if conflicted.contains(&d.run_id) {
                // Someone else wrote to the run: read it again and decide again.
                if let Some(h) = held.get_mut(&d.run_id) {
                    match self.reload(&d.run_id).await {
                        Ok((run, version)) => {
                            h.run = run;
                            h.version = version;
                            h.dirty = true;
                        }
                        Err(e) => tracing::warn!(run = %d.run_id, error = %e, "cannot reload run"),
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

    async fn reload(&self, run_id: &str) -> Result<(Run, i64), ExecError> {
        let events = self
            .store
            .read_stream(&StreamRef::new(StreamType::Run, run_id))
            .await?;
        Ok(domain_io::fold::<Run>(&events)?)
    }

    fn spawn(
        &self,
        run_id: &str,
        h: &mut Held,
        effect: Effect,
        done_tx: &mpsc::UnboundedSender<(String, Report)>,
    ) {
        let runners = self.runners.clone();
        let done_tx = done_tx.clone();
        let run = run_id.to_string();
        let id = h.run.id().unwrap_or_default();
        match effect {
            Effect::Perform {
                key,
                step_id,
                attempt,
                work,
                before,
                timeout_ms,
            } => {
                if !h.in_flight.insert(key.clone()) {
                    return;
                }
                tokio::spawn(async move {
                    let step_key = engine::step_idempotency_key(id, &step_id);
                    let call = Call {
                        run_id: id,
                        step_id: step_id.as_str(),
                        attempt,
                        key: &step_key,
                        timeout_ms,
                    };
                    let result = perform::perform(&runners, &call, &work, before.as_ref()).await;
                    let _ = done_tx.send((
                        run,
                        Report::Step(
                            StepOutcome {
                                step_id,
                                attempt,
                                result,
                            },
                            key,
                        ),
                    ));
                });
            }
            Effect::Compensate {
                key,
                step_id,
                work,
                timeout_ms,
            } => {
                if !h.in_flight.insert(key.clone()) {
                    return;
                }
                tokio::spawn(async move {
                    let call = Call {
                        run_id: id,
                        step_id: step_id.as_str(),
                        attempt: 1,
                        key: &key,
                        timeout_ms,
                    };
                    let result = perform::perform(&runners, &call, &work, None).await;
                    let outcome = CompensationOutcome {
                        step_id,
                        error: result.err().map(|f| f.message),
                    };
                    let _ = done_tx.send((run, Report::Compensation(outcome, key)));
                });
            }
            _ => {}
        }
    }

    async fn renew(&self, held: &mut HashMap<String, Held>) {
        if held.is_empty() {
            return;
        }
        let ids: Vec<String> = held.keys().cloned().collect();
        let until =
            (self.clock)() + chrono::Duration::from_std(self.config.lease).unwrap_or_default();
        match self
            .store
            .renew_leases(&self.config.owner, &ids, until)
            .await
        {
            Ok(kept) => {
                let kept: BTreeSet<String> = kept.into_iter().collect();
                held.retain(|id, _| {
                    let keep = kept.contains(id);
                    if !keep {
                        tracing::warn!(run = %id, "lease lost; another worker took the run over");
                    }
                    keep
                });
            }
            Err(e) => tracing::warn!(error = %e, "cannot renew leases"),
        }
    }

    async fn release_all(&self, held: &mut HashMap<String, Held>) -> Result<(), ExecError> {
        if held.is_empty() {
            return Ok(());
        }
        let now = (self.clock)();
        let releases: Vec<Release> = held
            .iter()
            .map(|(id, h)| Release {
                run_id: id.clone(),
                due_at: Some(now),
                version: h.version,
                finished: h.run.is_terminal(),
            })
            .collect();
        let mut tx = self.store.begin().await?;
        tx.release_runs(&self.config.owner, &releases, now).await?;
        tx.commit().await?;
        held.clear();
        Ok(())
    }

    async fn only_runs_finished(&self, held: &HashMap<String, Held>) -> Result<bool, ExecError> {
        let Some(only) = &self.config.only else {
            return Ok(false);
        };
        let ids: Vec<String> = only
            .lock()
            .map(|s| s.iter().cloned().collect())
            .unwrap_or_default();
        if ids.is_empty() || ids.iter().any(|id| held.contains_key(id)) {
            return Ok(false);
        }
        let streams = self.store.read_streams(StreamType::Run, &ids).await?;
        for id in &ids {
            let events = streams.get(id).map(Vec::as_slice).unwrap_or_default();
            let (run, _) = domain_io::fold::<Run>(events)?;
            if !run.is_terminal() {
                return Ok(false);
            }
        }
        Ok(true)
    }

    async fn idle_sleep(&self, held: &HashMap<String, Held>) -> Duration {
        let poll = self.config.poll;
        if held.values().any(|h| !h.in_flight.is_empty()) {
            return poll.min(self.config.lease / 3);
        }
        let now = (self.clock)();
        match self.store.next_wakeup(now).await {
            Ok(Some(due)) if due > now => (due - now).to_std().unwrap_or(poll).min(poll),
            Ok(Some(_)) => Duration::from_millis(1),
            _ => poll,
        }
    }
}

fn accept(held: &mut HashMap<String, Held>, run_id: String, report: Report) {
    let Some(h) = held.get_mut(&run_id) else {
        return;
    };
    match report {
        Report::Step(outcome, key) => {
            h.in_flight.remove(&key);
            h.outcomes.push(outcome);
        }
        Report::Compensation(outcome, key) => {
            h.in_flight.remove(&key);
            h.compensations.push(outcome);
        }
    }
    h.dirty = true;
}

/// The `task.queued` request of an agent step's task.
fn queue_task(
    run: &Run,
    effect: &Effect,
    now: DateTime<Utc>,
    actor: &Metadata,
) -> Result<Option<AppendRequest>, ExecError> {
    let Effect::QueueTask {
        task_id,
        step_id,
        attempt,
        prompt,
        capabilities,
        repository,
        branch,
        agent_hint,
        priority,
        review_required,
    } = effect
    else {
        return Ok(None);
    };
    let command = TaskCommand::Queue {
        task_id: *task_id,
        prompt: prompt.clone(),
        required_capabilities: Capabilities::new(capabilities.iter().cloned()),
        workspace: repository.clone().map(|repository| Workspace {
            repository,
            branch: branch.clone(),
        }),
        agent_hint: agent_hint
            .as_deref()
            .and_then(|a| AgentId::try_from(a).ok()),
        priority: *priority,
        review_required: *review_required,
        run_step: Some(RunStepRef {
            run_id: run.id().unwrap_or_default(),
            step_id: step_id.clone(),
            attempt: *attempt,
        }),
        at: now,
    };
    let events = Task::default()
        .decide(command)
        .map_err(|e| ExecError::Refused(e.to_string()))?;
    let stream = StreamRef::new(StreamType::Task, task_id.to_string());
    Ok(Some(domain_io::append_request(&stream, 0, &events, actor)?))
}

/// How an agent step's task ended, if it did.
fn task_result(task: &Task) -> Option<Result<Done, Failure>> {
    match task.ending()? {
        TaskEnding::Completed { .. } => {
            let output = task.result().cloned().unwrap_or(Value::Null);
            let (cost_usd, tokens) = perform::reported_cost(&output);
            Some(Ok(Done {
                output,
                cost_usd,
                tokens,
            }))
        }
        TaskEnding::Failed {
            reason,
            error_class,
            by,
            ..
        } => Some(Err(Failure {
            class: error_class
                .as_deref()
                .and_then(|c| c.parse().ok())
                .unwrap_or(ErrorClass::Unknown),
            message: format!("the task failed ({by}): {reason}"),
        })),
        TaskEnding::Cancelled { by, reason, .. } => Some(Err(Failure {
            class: ErrorClass::Validation,
            message: format!("the task was cancelled by {by}: {reason}"),
        })),
    }
}

/// How a child run ended, if it did.
fn child_result(child: &Run) -> Option<Result<Done, Failure>> {
    match child.outcome()? {
        RunOutcome::Succeeded { outputs, .. } => Some(Ok(Done {
            output: outputs.clone(),
            cost_usd: (child.total_cost_usd() > 0.0).then(|| child.total_cost_usd()),
            tokens: (child.total_tokens() > 0).then(|| child.total_tokens()),
        })),
        RunOutcome::Failed {
            reason,
            error_class,
            ..
        } => Some(Err(Failure {
            class: error_class.unwrap_or(ErrorClass::Dependency),
            message: format!(
                "the sub-workflow run {} failed: {reason}",
                child.id().unwrap_or_default()
            ),
        })),
        RunOutcome::Cancelled { by, reason, .. } => Some(Err(Failure {
            class: ErrorClass::Validation,
            message: format!("the sub-workflow run was cancelled by {by}: {reason}"),
        })),
    }
}
