//! The worker loop: claim due runs, decide for all of them, commit once, perform.
//!
//! One round:
//!
//! 1. collect the outcomes of effects that finished;
//! 2. claim due runs (up to `batch` held at once) and fold their streams (one query);
//! 3. for every run with something new: read the tasks and child runs its waiting
//!    steps depend on (`waiting.rs`), then [`engine::tick`]; pure built-in tools
//!    (`noop`, `echo`, `fail`) are answered at once and the run decided again, so a
//!    chain of them is one commit; the tasks and child runs it starts are decided
//!    there too (`decide.rs`);
//! 4. one transaction (`commit.rs`, which only writes): every run's events (each with
//!    its expected version), the tasks and child runs they start, wake-ups for
//!    parents and children, and the release of every run with nothing in flight (with
//!    its next due time);
//! 5. spawn the remaining effects.
//!
//! A run with work in flight stays held: its lease is renewed every third of the lease
//! time. Its effects stop before the lease could run out unrenewed (`lease.rs`), so no
//! other worker can claim the run while they still run. If the lease is lost or runs
//! out, the run is dropped here, its effects stopped and its late outcomes ignored;
//! the new holder restarts the attempt with the same key.
//! A worker that stalled so long that another claimed the run meanwhile finds out at
//! its next commit at the latest: every claim carries an epoch, the commit fences on
//! it (`StoreTx::fence`), and the stale holder's writes for that run are refused.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tokio::sync::{mpsc, watch};

use crate::clock::Clock;
use crate::definitions::Definitions;
use crate::domain::ids::RunId;
use crate::domain::run::Run;
use crate::engine::{self, CompensationOutcome, Effect, StepOutcome};
use crate::log::StreamType;
use crate::runners::{ExternalTools, Runners};
use crate::store::{EventStore, Lease, Release, domain_io};
use crate::telemetry;
use crate::vault::{Protection, Reveal};
use crate::workflow::model::Workflow;

use super::ExecError;
use super::lease::{self, LocalLease};
use super::perform::{self, Call};
use super::rate::{self, Throttled, Token};

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
    /// Values masked in every run's events and spans: the env variables declared
    /// secret, awl's own connection strings.
    pub secrets: crate::vault::Mask,
    /// Claim only these runs (and the children they start): `awl run` executes its
    /// own run without taking others' work.
    pub only: Option<Arc<Mutex<BTreeSet<String>>>>,
    /// Stop once every run in `only` has finished.
    pub exit_when_done: bool,
    /// A run whose history since its start (or last continuation) reaches this many
    /// events continues as new (`run.continued`), so folding it stays short.
    pub history_limit: u64,
    /// A run whose history since its start (or last continuation) reaches this many
    /// bytes (its events' payloads as JSON text) continues as new too. Weighed every
    /// [`BYTES_CHECK_EVERY`] events of a run, in the database.
    pub history_bytes: u64,
    /// What performs the registry tools `tool` steps call (MCP servers' tools): the
    /// tool registry of whoever starts the worker. Without it such a step fails with
    /// class `dependency`.
    pub tools: Option<Arc<dyn ExternalTools>>,
}

/// The default history limit: a run continues as new every 10,000 events.
pub const DEFAULT_HISTORY_LIMIT: u64 = 10_000;

/// The default history limit in bytes: 32 MiB of events since the last continuation.
pub const DEFAULT_HISTORY_BYTES: u64 = 32 * 1024 * 1024;

/// How many events a run records between two weighings of its history.
pub const BYTES_CHECK_EVERY: u64 = 64;

impl WorkerConfig {
    pub fn new(owner: impl Into<String>) -> Self {
        Self {
            owner: owner.into(),
            batch: 512,
            lease: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            env: BTreeMap::new(),
            secrets: crate::vault::Mask::default(),
            only: None,
            exit_when_done: false,
            history_limit: DEFAULT_HISTORY_LIMIT,
            history_bytes: DEFAULT_HISTORY_BYTES,
            tools: None,
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

/// A run this worker holds.
pub(super) struct Held {
    /// The epoch of this worker's claim: its writes count only while the run's row
    /// still carries it.
    pub epoch: i64,
    /// How long this worker may still run the run's effects: moved by each renewal.
    pub lease: LocalLease,
    pub run: Run,
    pub version: i64,
    pub definition: Arc<Workflow>,
    pub in_flight: BTreeSet<String>,
    pub outcomes: Vec<StepOutcome>,
    pub compensations: Vec<CompensationOutcome>,
    /// Attempts held back by a rate limit, to record.
    pub throttles: Vec<Throttled>,
    /// Something new to decide on.
    pub dirty: bool,
    /// A commit for this run failed without saying whether it happened (the
    /// connection died): read the run again before deciding.
    pub stale: bool,
    /// The run's trace: the `traceparent` of its first event, as recorded and parsed.
    pub trace: Option<String>,
    pub parent: telemetry::Parent,
    /// What the engine masks and seals in this run's events (from its opened inputs
    /// and the keys its sealed values name).
    pub protection: Arc<Protection>,
}

/// What a finished effect reports.
pub(super) enum Report {
    Step(StepOutcome, String),
    Compensation(CompensationOutcome, String),
    Throttled(Throttled, String),
    /// The run's lease ran out before it was renewed: the effect was stopped.
    Lapsed(String),
}

/// A run that cannot be decided, read or recorded now: folded from the log again
/// before any next decision (a failed decision took its held state), not decided
/// again until a report arrives, and given back due in a minute once nothing of it is
/// in flight.
pub(super) fn set_aside(
    run_id: &str,
    h: &mut Held,
    now: DateTime<Utc>,
    refused: &mut Vec<Release>,
) {
    h.stale = true;
    h.dirty = false;
    if h.in_flight.is_empty() {
        refused.push(retry_later(run_id, h.epoch, h.version, now));
    }
}

/// Give a run back to be tried again in a minute.
fn retry_later(run_id: &str, epoch: i64, version: i64, now: DateTime<Utc>) -> Release {
    Release {
        run_id: run_id.to_string(),
        epoch,
        due_at: Some(now + chrono::Duration::minutes(1)),
        version,
        finished: false,
        waiting: None,
    }
}

/// A worker: cheap to clone, run with [`Worker::run`].
#[derive(Clone)]
pub struct Worker {
    pub(super) store: EventStore,
    pub(super) runners: Runners,
    pub(super) definitions: Definitions,
    pub(super) config: WorkerConfig,
    pub(super) clock: Clock,
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
        // Woken when runs may have become due (wake-ups written here, or any commit
        // of another process), not by every event committed: the board's traffic in
        // the same process does not make an idle worker claim.
        let mut wake = self.store.subscribe_runs();
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
        for (i, run_id) in dirty.iter().enumerate() {
            let Some(h) = held.get_mut(run_id) else {
                continue;
            };
            let external = match self.prepare(h, run_id).await {
                Ok(external) => external,
                Err(e) if e.is_unreadable() => {
                    // One run's unreadable history must not stop every other run.
                    tracing::error!(run = %run_id, error = %e, "cannot read what the run needs; retrying in a minute");
                    set_aside(run_id, h, now, &mut refused);
                    continue;
                }
                Err(e) => {
                    // The decisions made so far took their runs' states.
                    mark_stale(held, &dirty[..i]);
                    return Err(e);
                }
            };
            h.dirty = false;
            h.outcomes.extend(external);
            match self.decide(run_id, h, now).await {
                Ok(d) => decided.push(d),
                Err(e) => {
                    // A bug or a definition the run does not fit: give the run back
                    // to be tried again later rather than hold it forever.
                    tracing::error!(run = %run_id, error = %e, "cannot decide for run; retrying in a minute");
                    set_aside(run_id, h, now, &mut refused);
                }
            }
        }
        for r in &refused {
            held.remove(&r.run_id);
        }
        let limit = self.config.history_limit.max(2);
        let long: Vec<String> = decided
            .iter()
            .filter(|d| d.state.history_len() >= limit)
            .map(|d| d.run_id.clone())
            .collect();
        // Runs whose history crossed a multiple of BYTES_CHECK_EVERY: weighed after
        // the commit, against the limit in bytes.
        let weigh: Vec<(String, u64)> = decided
            .iter()
            .filter(|d| !d.state.is_terminal() && d.state.history_len() < limit)
            .filter(|d| {
                let len = d.state.history_len();
                let before = len.saturating_sub(d.events.len() as u64);
                before / BYTES_CHECK_EVERY != len / BYTES_CHECK_EVERY
            })
            .map(|d| (d.run_id.clone(), d.state.history_len()))
            .collect();
        let traces: Vec<Option<String>> = long
            .iter()
            .map(|id| held.get(id).and_then(|h| h.trace.clone()))
            .collect();
        if let Err(e) = self.commit(held, decided, refused, done_tx, now).await {
            // Written or not, nobody knows (the connection may have died during the
            // commit): read these runs again before deciding for them. Outcomes the
            // decision carried are in the log if it was written; if not, their
            // attempts are started again with the same key (at least once).
            mark_stale(held, &dirty);
            return Err(e);
        }
        let mut heavy = Vec::new();
        for (run_id, len) in weigh {
            if let Some(h) = held.get(&run_id)
                && self.history_too_heavy(&run_id, h.version, len).await?
            {
                heavy.push((run_id, h.trace.clone()));
            }
        }
        let continued = long
            .into_iter()
            .zip(traces)
            .map(|(run_id, trace)| (run_id, trace, limit))
            .chain(heavy.into_iter().map(|(run_id, trace)| (run_id, trace, 2)));
        for (run_id, trace, min_len) in continued {
            self.continue_as_new(&run_id, trace, min_len, now).await?;
            if let Some(h) = held.get_mut(&run_id) {
                // Fold it again from its continuation before the next decision.
                h.stale = true;
            }
        }
        Ok(true)
    }

    /// A held run made ready to decide: folded again if stale, and the outcomes of
    /// the tasks and child runs it waits on.
    async fn prepare(&self, h: &mut Held, run_id: &str) -> Result<Vec<StepOutcome>, ExecError> {
        if h.stale {
            let (run, version) = self.reload(run_id).await?;
            h.run = run;
            h.version = version;
            h.stale = false;
        }
        self.external_outcomes(h).await
    }

    /// Whether the events a run recorded after its start or last continuation (the
    /// `len` events of its history up to `version` but the first, whose state a
    /// continuation carries anyway) reach the limit in bytes.
    async fn history_too_heavy(
        &self,
        run_id: &str,
        version: i64,
        len: u64,
    ) -> Result<bool, ExecError> {
        let stream = crate::log::StreamRef::new(StreamType::Run, run_id);
        let from = version - i64::try_from(len).unwrap_or(i64::MAX) + 2;
        let bytes = self.store.stream_bytes(&stream, from.max(2)).await?;
        Ok(bytes >= self.config.history_bytes)
    }

    /// Record the run's state as it stands in the log (sealed values sealed) in a
    /// `run.continued` event carrying the run's trace: from now on it is folded from
    /// there (unless its history is shorter than `min_len` events by then: another
    /// worker continued it first). A command like a person's, decided on the stored stream, so it never
    /// sees opened values; a run that ended meanwhile is left as it is.
    async fn continue_as_new(
        &self,
        run_id: &str,
        trace: Option<String>,
        min_len: u64,
        now: DateTime<Utc>,
    ) -> Result<(), ExecError> {
        use crate::domain::Decide;
        use crate::domain::run::RunCommand;
        let stream = crate::log::StreamRef::new(StreamType::Run, run_id);
        let metadata = crate::log::Metadata::actor("awl").with_trace(trace);
        let result = crate::store::command::Command::new(&self.store, &stream, metadata)
            .run(|run: &Run| {
                if run.is_terminal() || run.history_len() < min_len {
                    return Ok(Vec::new());
                }
                run.decide(RunCommand::Continue { at: now })
            })
            .await;
        match result {
            Ok(done) => {
                tracing::info!(run = %run_id, appended = done.appended, "run continued as new");
                Ok(())
            }
            Err(crate::store::command::CommandError::Store(e)) => Err(e.into()),
            Err(e) => {
                tracing::warn!(run = %run_id, error = %e, "cannot continue the run as new; trying again after its next events");
                Ok(())
            }
        }
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
        // Taken together: the lease as written and its local deadline.
        let from = tokio::time::Instant::now();
        let lease_until =
            (self.clock)() + chrono::Duration::from_std(self.config.lease).unwrap_or_default();
        let claimed = self
            .store
            .claim_runs(&self.config.owner, now, lease_until, limit, only.as_deref())
            .await?;
        if claimed.is_empty() {
            return Ok(());
        }
        telemetry::runs_claimed(claimed.len());
        let claimed: Vec<Lease> = claimed
            .into_iter()
            .filter(|l| !held.contains_key(&l.run_id))
            .collect();
        let ids: Vec<String> = claimed.iter().map(|l| l.run_id.clone()).collect();
        let mut streams = self.store.read_streams(StreamType::Run, &ids).await?;
        for Lease { run_id, epoch } in claimed {
            let events = streams.entry(run_id.clone()).or_default();
            match self.load(events).await {
                Ok((run, version, definition, protection)) => {
                    held.insert(
                        run_id,
                        Held {
                            epoch,
                            lease: LocalLease::new(lease::deadline(from, self.config.lease)),
                            run,
                            version,
                            definition,
                            in_flight: BTreeSet::new(),
                            outcomes: Vec::new(),
                            compensations: Vec::new(),
                            throttles: Vec::new(),
                            dirty: true,
                            stale: false,
                            trace: events.first().and_then(|e| e.metadata.traceparent.clone()),
                            parent: telemetry::Parent::parse(
                                events
                                    .first()
                                    .and_then(|e| e.metadata.traceparent.as_deref()),
                            ),
                            protection,
                        },
                    );
                }
                Err(e) => {
                    tracing::error!(run = %run_id, error = %e, "cannot load run; retrying in a minute");
                    let version = events.last().map_or(0, |e| e.version);
                    let mut tx = self.store.begin().await?;
                    tx.release_runs(
                        &self.config.owner,
                        &[retry_later(&run_id, epoch, version, now)],
                        now,
                    )
                    .await?;
                    tx.commit().await?;
                }
            }
        }
        Ok(())
    }

    /// Fold a claimed run (its sealed values opened) and find its definition.
    async fn load(
        &self,
        events: &mut [crate::log::RecordedEvent],
    ) -> Result<(Run, i64, Arc<Workflow>, Arc<Protection>), ExecError> {
        // The inputs as the log keeps them (sealed): in the start event, or in the
        // state a continuation carries.
        let logged_inputs = events.first().map(|first| {
            if first.event_type == crate::log::CONTINUED_EVENT_TYPE {
                first.payload["state"]["inputs"].clone()
            } else {
                first.payload["inputs"].clone()
            }
        });
        let keys = self.store.reveal_events(events, Reveal::Plain).await?;
        let (run, version) = domain_io::fold::<Run>(events)?;
        let name = run
            .workflow()
            .ok_or_else(|| ExecError::Refused("the run has no start event".into()))?
            .to_string();
        let definition = self
            .definitions
            .get(&self.store, &name, run.workflow_version())
            .await?;
        let protection = Arc::new(engine::protect::protection(
            &definition,
            &run,
            &keys,
            &self.config.secrets,
            logged_inputs.as_ref(),
        ));
        Ok((run, version, definition, protection))
    }

    pub(super) fn spawn(
        &self,
        run_id: &str,
        h: &mut Held,
        effect: Effect,
        done_tx: &mpsc::UnboundedSender<(String, Report)>,
    ) {
        let runners = self.runners.clone();
        let tools = self.config.tools.clone();
        let done_tx = done_tx.clone();
        let run = run_id.to_string();
        let id = h.run.id().unwrap_or_default();
        let trace = h.parent.clone();
        let protection = h.protection.clone();
        let lease = h.lease.watch();
        match effect {
            Effect::Perform {
                key,
                step_id,
                attempt,
                work,
                before,
                timeout_ms,
                cost_usd,
                rate,
            } => {
                if !h.in_flight.insert(key.clone()) {
                    return;
                }
                let store = self.store.clone();
                let clock = self.clock.clone();
                tokio::spawn(async move {
                    if !rate.is_empty() {
                        // Boxed: most steps have no rate limit, and inline this
                        // store future would make every step's task as large as it.
                        let report = match Box::pin(rate::take(&store, &rate, clock())).await {
                            Token::Go => None,
                            Token::Later { limit, until } => Some(Report::Throttled(
                                Throttled {
                                    step_id: step_id.clone(),
                                    attempt,
                                    limit,
                                    until,
                                },
                                key.clone(),
                            )),
                            Token::Failed(failure) => Some(Report::Step(
                                StepOutcome {
                                    step_id: step_id.clone(),
                                    attempt,
                                    result: Err(failure),
                                },
                                key.clone(),
                            )),
                        };
                        if let Some(report) = report {
                            let _ = done_tx.send((run, report));
                            return;
                        }
                    }
                    let step_key = engine::step_idempotency_key(id, &step_id);
                    let call = Call {
                        run_id: id,
                        step_id: step_id.as_str(),
                        attempt,
                        key: &step_key,
                        timeout_ms,
                        trace: &trace,
                        mask: &protection.mask,
                        tools: tools.as_deref(),
                        cost_usd,
                    };
                    let performed = perform::perform(&runners, &call, &work, before.as_ref());
                    let report = match lease::within(lease, performed).await {
                        Some(result) => Report::Step(
                            StepOutcome {
                                step_id,
                                attempt,
                                result,
                            },
                            key,
                        ),
                        None => Report::Lapsed(key),
                    };
                    let _ = done_tx.send((run, report));
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
                        trace: &trace,
                        mask: &protection.mask,
                        tools: tools.as_deref(),
                        cost_usd: None,
                    };
                    let performed = perform::perform(&runners, &call, &work, None);
                    let report = match lease::within(lease, performed).await {
                        Some(result) => {
                            let outcome = CompensationOutcome {
                                step_id,
                                error: result.err().map(|f| f.message),
                            };
                            Report::Compensation(outcome, key)
                        }
                        None => Report::Lapsed(key),
                    };
                    let _ = done_tx.send((run, report));
                });
            }
            _ => {}
        }
    }

    async fn renew(&self, held: &mut HashMap<String, Held>) {
        if held.is_empty() {
            return;
        }
        let leases: Vec<Lease> = held
            .iter()
            .map(|(id, h)| Lease {
                run_id: id.clone(),
                epoch: h.epoch,
            })
            .collect();
        let from = tokio::time::Instant::now();
        let until =
            (self.clock)() + chrono::Duration::from_std(self.config.lease).unwrap_or_default();
        match self
            .store
            .renew_leases(&self.config.owner, &leases, until)
            .await
        {
            Ok(kept) => {
                let kept: BTreeSet<String> = kept.into_iter().collect();
                let deadline = lease::deadline(from, self.config.lease);
                held.retain(|id, h| {
                    let keep = kept.contains(id);
                    if keep {
                        h.lease.extend(deadline);
                    } else {
                        // Dropping the run drops its lease: its effects stop now.
                        tracing::warn!(
                            run = %id,
                            in_flight = h.in_flight.len(),
                            "lease lost; another worker took the run over, and its steps in \
                             flight were stopped"
                        );
                        telemetry::lease_lost(telemetry::LeaseLost::Renewal);
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
                epoch: h.epoch,
                due_at: Some(now),
                version: h.version,
                finished: h.run.is_terminal(),
                waiting: None,
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

/// Runs to fold from the log again before their next decision, which is due now: their
/// held state was taken by a decision that was not committed, or may not have been.
fn mark_stale<'a>(held: &mut HashMap<String, Held>, runs: impl IntoIterator<Item = &'a String>) {
    for run_id in runs {
        if let Some(h) = held.get_mut(run_id) {
            h.stale = true;
            h.dirty = true;
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
        Report::Throttled(throttled, key) => {
            h.in_flight.remove(&key);
            h.throttles.push(throttled);
        }
        Report::Lapsed(key) => {
            // Not renewed in time: another worker may claim the run as soon as the
            // lease runs out. Dropping it stops its other effects too; the next holder
            // (this worker, perhaps) reads it again and restarts the attempt.
            tracing::warn!(
                run = %run_id,
                attempt = %key,
                "lease lost: it ran out before it could be renewed, so the run's steps in \
                 flight were stopped and the run is left to its next holder"
            );
            telemetry::lease_lost(telemetry::LeaseLost::Lapsed);
            held.remove(&run_id);
            return;
        }
    }
    h.dirty = true;
}
