//! Schedules at work: declaring them (from workflow files and over the API), pausing,
//! resuming and triggering them, and the scheduler `awl serve` runs, which fires
//! each time once across any number of servers.
//!
//! The log decides: a tick is decided on the schedule's stream and appended at the
//! version it was decided on (`domain::schedule`), so of two servers ticking the
//! same schedule one appends and the other, deciding again, finds the time handled.
//! The winner then starts the run under an id derived from the schedule and the time
//! ([`Runs::start_as`]), so a start repeated finds the first. A server that died
//! between the two leaves a `schedule.fired` without its run: every scheduler checks
//! each fire it reads, a few seconds after, and starts the run if it is missing.
//!
//! Schedules declared in a workflow file follow the workflow's latest runnable
//! version: the scheduler reads new `workflow` events and declares, changes or
//! removes the schedules they imply.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration as StdDuration;

use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::definitions::{DefinitionError, Definitions};
use crate::domain::Decide;
use crate::domain::ids::{IdempotencyKey, RunId};
use crate::domain::run::Run;
use crate::domain::schedule::{
    Schedule, ScheduleCommand, ScheduleError, ScheduleEvent, ScheduleSource,
};
use crate::log::{EventFilter, Metadata, RecordedEvent, StreamRef, StreamType};
use crate::runs::{Runs, RunsError, StartRun, Started};
use crate::store::command::{Command, CommandError};
use crate::store::{EventStore, StoreError, domain_io};
use crate::workflow::schedule::{ScheduleSpec, valid_name};

/// How long the scheduler sleeps at most between looks at the log (new schedules,
/// changed workflows, queued times whose run may have ended).
const LOOK_EVERY: StdDuration = StdDuration::from_secs(1);

/// Schedules ticked at the same time in one round.
const TICKS_AT_ONCE: usize = 8;

/// How long after a fire its run is looked for (the firing server starts it at once).
const CONFIRM_AFTER: chrono::Duration = chrono::Duration::seconds(5);

#[derive(Debug, thiserror::Error)]
pub enum SchedulesError {
    #[error("no schedule {0:?}")]
    NotFound(String),
    #[error("{0}")]
    Invalid(String),
    #[error(transparent)]
    Refused(#[from] ScheduleError),
    #[error("{0} kept changing; try again")]
    Busy(StreamRef),
    #[error(transparent)]
    Runs(#[from] RunsError),
    #[error(transparent)]
    Definitions(#[from] DefinitionError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl crate::error::Classified for SchedulesError {
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            Self::NotFound(_) => ErrorKind::NotFound,
            Self::Invalid(_) | Self::Refused(ScheduleError::Invalid { .. }) => ErrorKind::Invalid,
            Self::Refused(ScheduleError::NotDeclared(_)) => ErrorKind::NotFound,
            Self::Refused(_) => ErrorKind::Conflict,
            Self::Busy(_) => ErrorKind::Unavailable,
            Self::Runs(e) => e.kind(),
            Self::Definitions(e) => e.kind(),
            Self::Store(e) => e.kind(),
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::NotFound(_) | Self::Refused(ScheduleError::NotDeclared(_)) => {
                "schedule_not_found"
            }
            Self::Invalid(_) | Self::Refused(ScheduleError::Invalid { .. }) => "invalid_request",
            Self::Refused(_) => "illegal_transition",
            Self::Busy(_) => "busy",
            Self::Runs(e) => e.code(),
            Self::Definitions(e) => e.code(),
            Self::Store(e) => e.code(),
        }
    }
}

impl From<CommandError<ScheduleError>> for SchedulesError {
    fn from(e: CommandError<ScheduleError>) -> Self {
        match e {
            CommandError::Rejected(e) => Self::Refused(e),
            CommandError::Store(e) => Self::Store(e),
            CommandError::Busy(stream) => Self::Busy(stream),
        }
    }
}

type Result<T> = std::result::Result<T, SchedulesError>;

fn stream(name: &str) -> StreamRef {
    StreamRef::new(StreamType::Schedule, name)
}

/// Who a schedule's runs are started by.
fn actor_of(name: &str) -> String {
    format!("schedule:{name}")
}

/// The schedules service. Cheap to clone.
#[derive(Clone)]
pub struct Schedules {
    store: EventStore,
    runs: Runs,
    definitions: Definitions,
    clock: Clock,
}

impl Schedules {
    pub fn new(store: EventStore, clock: Clock) -> Self {
        Self {
            runs: Runs::new(store.clone(), clock.clone()),
            definitions: Definitions::default(),
            store,
            clock,
        }
    }

    fn now(&self) -> DateTime<Utc> {
        (self.clock)()
    }

    /// A schedule as its stream stands (removed ones too).
    pub async fn get(&self, name: &str) -> Result<Schedule> {
        let (schedule, version) = domain_io::load::<Schedule>(&self.store, &stream(name)).await?;
        if version == 0 {
            return Err(SchedulesError::NotFound(name.to_string()));
        }
        Ok(schedule)
    }

    /// Every schedule declared now, by name.
    pub async fn list(&self) -> Result<Vec<Schedule>> {
        let mut out = Vec::new();
        for name in self.names().await? {
            let schedule = self.get(&name).await?;
            if schedule.is_declared() {
                out.push(schedule);
            }
        }
        Ok(out)
    }

    /// The names of every schedule stream in the log that was ever declared.
    async fn names(&self) -> Result<BTreeSet<String>> {
        let ids = self
            .store
            .stream_ids(StreamType::Schedule, Some("schedule.declared"))
            .await?;
        Ok(ids.into_iter().collect())
    }

    async fn command(
        &self,
        name: &str,
        by: &str,
        command: ScheduleCommand,
    ) -> Result<(Schedule, usize)> {
        let target = stream(name);
        let done = Command::new(&self.store, &target, Metadata::actor(by))
            .run(|state: &Schedule| state.decide(command.clone()))
            .await?;
        Ok((done.state, done.appended))
    }

    /// Declare (or change) a schedule over the API: `workflow` must have a runnable
    /// version whose inputs the spec's inputs satisfy.
    pub async fn declare(
        &self,
        name: &str,
        workflow: &str,
        spec: ScheduleSpec,
        by: &str,
    ) -> Result<Schedule> {
        if !valid_name(name) {
            return Err(SchedulesError::Invalid(format!(
                "schedule name {name:?}: letters, digits, `-`, `_` and `.`, 1 to 128, starting with a letter or digit"
            )));
        }
        let problems = spec.problems();
        if !problems.is_empty() {
            return Err(SchedulesError::Refused(ScheduleError::Invalid {
                name: name.to_string(),
                message: problems
                    .into_iter()
                    .map(|(field, message)| format!("{field}: {message}"))
                    .collect::<Vec<_>>()
                    .join("; "),
            }));
        }
        let (definition, _) = self.definitions.resolve(&self.store, workflow).await?;
        crate::workflow::inputs::resolve(
            &definition.inputs,
            spec.inputs.clone(),
            crate::workflow::inputs::Given::Json,
        )
        .map_err(|problems| {
            SchedulesError::Invalid(format!(
                "schedule {name}: {}",
                problems
                    .iter()
                    .map(|p| p.message.clone())
                    .collect::<Vec<_>>()
                    .join("; ")
            ))
        })?;
        let spec = ScheduleSpec {
            name: Some(name.to_string()),
            ..spec
        };
        let command = ScheduleCommand::Declare {
            name: name.to_string(),
            workflow: workflow.to_string(),
            spec,
            source: ScheduleSource::Api,
            by: by.to_string(),
            at: self.now(),
        };
        Ok(self.command(name, by, command).await?.0)
    }

    /// Remove a schedule declared over the API (one from a workflow file goes with the
    /// file).
    pub async fn remove(&self, name: &str, by: &str) -> Result<Schedule> {
        let found = self.get(name).await?;
        if found.source() == Some(&ScheduleSource::Workflow) && found.is_declared() {
            return Err(SchedulesError::Refused(ScheduleError::Owned {
                name: name.to_string(),
                owner: format!("in the file of workflow {}", found.workflow()),
                action: "remove",
            }));
        }
        let at = self.now();
        let command = ScheduleCommand::Remove {
            by: by.to_string(),
            at,
        };
        Ok(self.command(name, by, command).await?.0)
    }

    pub async fn pause(&self, name: &str, by: &str, reason: &str) -> Result<Schedule> {
        self.get(name).await?;
        let command = ScheduleCommand::Pause {
            by: by.to_string(),
            reason: reason.to_string(),
            at: self.now(),
        };
        Ok(self.command(name, by, command).await?.0)
    }

    pub async fn resume(&self, name: &str, by: &str) -> Result<Schedule> {
        self.get(name).await?;
        let command = ScheduleCommand::Resume {
            by: by.to_string(),
            at: self.now(),
        };
        Ok(self.command(name, by, command).await?.0)
    }

    /// Start a run of the schedule now, by hand, whatever its times and policies.
    pub async fn trigger(&self, name: &str, by: &str) -> Result<Started> {
        self.get(name).await?;
        let run_id = RunId::new();
        let command = ScheduleCommand::Trigger {
            run_id,
            by: by.to_string(),
            at: self.now(),
        };
        let (schedule, _) = self.command(name, by, command).await?;
        Ok(self.start(&schedule, run_id, None).await?)
    }

    /// Start the run a fire recorded (again: it finds the first start).
    async fn start(
        &self,
        schedule: &Schedule,
        run_id: RunId,
        due_at: Option<DateTime<Utc>>,
    ) -> std::result::Result<Started, RunsError> {
        let inputs = schedule
            .spec()
            .map(|s| s.inputs.clone())
            .unwrap_or_default();
        let key_text = match due_at {
            Some(due) => format!("schedule:{}@{}", schedule.name(), due.to_rfc3339()),
            None => format!("schedule:{}:{run_id}", schedule.name()),
        };
        let key = IdempotencyKey::try_from(key_text.as_str())
            .map_err(|e| RunsError::Invalid(e.to_string()))?;
        let started = self
            .runs
            .start_as(
                StartRun {
                    workflow: schedule.workflow().to_string(),
                    inputs,
                    priority: None,
                    scope: None,
                },
                run_id,
                &actor_of(schedule.name()),
                &key,
            )
            .await?;
        if started.created {
            tracing::info!(
                schedule = schedule.name(),
                run = %run_id,
                due = ?due_at,
                "a schedule started a run"
            );
        }
        Ok(started)
    }

    /// Whether the schedule's last run is still going (a run not started yet counts:
    /// it is about to be).
    async fn previous_active(&self, schedule: &Schedule) -> Result<bool> {
        let Some(run) = schedule.last_run() else {
            return Ok(false);
        };
        let events = self
            .store
            .read_current(&StreamRef::new(StreamType::Run, run.to_string()))
            .await?;
        let (state, version) = domain_io::fold::<Run>(&events)?;
        Ok(version == 0 || state.status().is_none_or(|s| !s.is_terminal()))
    }

    /// Handle every time of `name` due now: decide on its stream, append, then start
    /// the runs fired. Returns the runs started (none when another server won).
    pub async fn tick(&self, name: &str) -> Result<Vec<RunId>> {
        let schedule = self.get(name).await?;
        let previous_active = self.previous_active(&schedule).await?;
        let now = self.now();
        let command = ScheduleCommand::Tick {
            now,
            previous_active,
        };
        let target = stream(name);
        let done = Command::new(&self.store, &target, Metadata::actor(actor_of(name)))
            .run(|state: &Schedule| {
                // Another server's append changed what was decided on: the time it
                // handled is past the cursor now, and the previous run may differ.
                if state.last_run() != schedule.last_run() {
                    return Ok(Vec::new());
                }
                state.decide(command.clone())
            })
            .await?;
        if done.appended == 0 {
            return Ok(Vec::new());
        }
        let events = self
            .store
            .read_stream_after(&target, done.version - done.appended as i64)
            .await?;
        let mut started = Vec::new();
        for event in &events {
            if let ScheduleEvent::Fired { due_at, run_id, .. } =
                domain_io::decode::<Schedule>(event)?
            {
                match self.start(&done.state, run_id, due_at).await {
                    Ok(_) => started.push(run_id),
                    Err(e) => tracing::warn!(
                        schedule = name,
                        run = %run_id,
                        error = %e,
                        "a schedule fired but its run could not start"
                    ),
                }
            }
        }
        Ok(started)
    }

    /// Declare, change or remove the schedules workflow `name`'s latest runnable
    /// version implies. Returns how many schedule streams changed.
    pub async fn sync_workflow(&self, name: &str) -> Result<usize> {
        let existing = self.list().await?;
        self.sync_workflow_among(name, existing.iter()).await
    }

    /// [`Schedules::sync_workflow`], given the schedules in the log (the scheduler
    /// keeps them as it follows the log: listing them reads the whole log).
    async fn sync_workflow_among<'a>(
        &self,
        name: &str,
        existing: impl Iterator<Item = &'a Schedule>,
    ) -> Result<usize> {
        let wanted: Vec<ScheduleSpec> = match self.definitions.resolve(&self.store, name).await {
            Ok((definition, _)) => definition.schedules.clone(),
            // Every version retired (or none registered): no schedule.
            Err(DefinitionError::NoRunnable(_)) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let by = format!("workflow:{name}");
        let mut changed = 0;
        let mut kept = BTreeSet::new();
        for spec in wanted {
            let schedule = spec.name.clone().unwrap_or_else(|| name.to_string());
            kept.insert(schedule.clone());
            let command = ScheduleCommand::Declare {
                name: schedule.clone(),
                workflow: name.to_string(),
                spec,
                source: ScheduleSource::Workflow,
                by: by.clone(),
                at: self.now(),
            };
            match self.command(&schedule, &by, command).await {
                Ok((_, appended)) => changed += usize::from(appended > 0),
                // Declared over the API under the same name: that one stays.
                Err(SchedulesError::Refused(e)) => {
                    tracing::warn!(workflow = name, error = %e, "a schedule of the file is not declared")
                }
                Err(e) => return Err(e),
            }
        }
        for schedule in existing {
            if schedule.is_declared()
                && schedule.workflow() == name
                && schedule.source() == Some(&ScheduleSource::Workflow)
                && !kept.contains(schedule.name())
            {
                let command = ScheduleCommand::Remove {
                    by: by.clone(),
                    at: self.now(),
                };
                self.command(schedule.name(), &by, command).await?;
                changed += 1;
            }
        }
        Ok(changed)
    }

    /// Start the run of a fire if it is not there (its server stopped in between).
    async fn confirm(&self, name: &str, run_id: RunId, due_at: Option<DateTime<Utc>>) {
        let run = StreamRef::new(StreamType::Run, run_id.to_string());
        match self.store.read_current(&run).await {
            Ok(events) if !events.is_empty() => {}
            Ok(_) => {
                let Ok(schedule) = self.get(name).await else {
                    return;
                };
                tracing::warn!(schedule = name, run = %run_id, "a fire's run was missing: starting it");
                if let Err(e) = self.start(&schedule, run_id, due_at).await {
                    tracing::warn!(schedule = name, run = %run_id, error = %e, "a fire's run could not start");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot look for a fire's run"),
        }
    }
}

/// Every `kind` event after `*after`, in pages of `page`, handed to `each`; moves
/// `*after` to the position read up to.
async fn read_kind(
    store: &EventStore,
    kind: StreamType,
    page: i64,
    after: &mut i64,
    mut each: impl FnMut(&RecordedEvent),
) -> Result<()> {
    let filter = EventFilter {
        stream_types: vec![kind],
        ..EventFilter::default()
    };
    loop {
        let (events, next) = store.read_page(*after, page, &filter).await?;
        events.iter().for_each(&mut each);
        if next <= *after {
            return Ok(());
        }
        *after = next;
    }
}

/// The fire `event` records, if it is one, to be confirmed.
fn fire_of(event: &RecordedEvent) -> Option<Unconfirmed> {
    match domain_io::decode::<Schedule>(event) {
        Ok(ScheduleEvent::Fired {
            run_id, due_at, at, ..
        }) => Some(Unconfirmed {
            schedule: event.stream.id.clone(),
            run_id,
            due_at,
            fired_at: at,
        }),
        _ => None,
    }
}

/// A fire read from the log whose run is looked for once it is a few seconds old.
struct Unconfirmed {
    schedule: String,
    run_id: RunId,
    due_at: Option<DateTime<Utc>>,
    fired_at: DateTime<Utc>,
}

/// Where the schedulers' syncs of changed workflows have reached (a row of
/// `follower_checkpoints`): a sync loads the workflow, so a server starting over
/// thousands of workflows would load every one at each start; it syncs only those
/// changed since. Written after the syncs it covers succeeded, so a server that died
/// in between syncs them again (a sync is idempotent).
const WORKFLOWS_SYNCED: &str = "scheduler.workflows";

/// The loop `awl serve` runs: follows schedule and workflow events from the log,
/// keeps each schedule's state, and ticks those whose time has come.
pub struct Scheduler {
    schedules: Schedules,
    known: BTreeMap<String, Schedule>,
    /// The position schedule events were read up to.
    after: i64,
    /// Whether the first look (through the streams' index) was taken.
    looked: bool,
    /// The position workflow events were read up to.
    workflows_after: i64,
    /// Whether the workflows changed since the last sync were looked for (through
    /// the streams' index).
    workflows_looked: bool,
    /// [`WORKFLOWS_SYNCED`] as last read or written (`None`: not read yet).
    synced: Option<i64>,
    unconfirmed: Vec<Unconfirmed>,
}

impl Scheduler {
    pub fn new(schedules: Schedules) -> Self {
        Self {
            schedules,
            known: BTreeMap::new(),
            after: 0,
            looked: false,
            workflows_after: 0,
            workflows_looked: false,
            synced: None,
            unconfirmed: Vec::new(),
        }
    }

    /// Read what the log gained since the last look: schedules changed (reloaded),
    /// workflows changed (their schedules synced), fires (to confirm).
    pub async fn refresh(&mut self) -> Result<()> {
        let synced = match self.synced {
            Some(at) => at,
            None => {
                let at = self
                    .schedules
                    .store
                    .follower_checkpoint(WORKFLOWS_SYNCED)
                    .await?
                    .unwrap_or(0);
                self.synced = Some(at);
                at
            }
        };
        let schedules = if self.looked {
            self.changed_schedules().await?
        } else {
            self.first_look().await?
        };
        let (workflows, reached) = self.changed_workflows(synced).await?;
        for name in schedules {
            let schedule = self.schedules.get(&name).await?;
            self.known.insert(name, schedule);
        }
        // Against the schedules just read (what a sync changes is read next round).
        let mut all_synced = true;
        for workflow in &workflows {
            if let Err(e) = self
                .schedules
                .sync_workflow_among(workflow, self.known.values())
                .await
            {
                all_synced = false;
                tracing::warn!(workflow = %workflow, error = %e, "cannot sync a workflow's schedules");
            }
        }
        if !workflows.is_empty() && all_synced {
            self.schedules
                .store
                .set_follower_checkpoint(WORKFLOWS_SYNCED, reached)
                .await?;
            self.synced = Some(reached);
        }
        Ok(())
    }

    /// The first look: every schedule, found through the streams' index, with the
    /// fires its stream holds (kept to be confirmed), and the log's head to follow
    /// on from. Finding them by reading the log from its start made every server
    /// start page through all of it: 163 reads of 10,000 events over the learning
    /// benchmark's 1.6 million, most of them from disk, while the server began to
    /// answer requests.
    async fn first_look(&mut self) -> Result<BTreeSet<String>> {
        let store = self.schedules.store.clone();
        // Positions are given under the append lock and visible in order, so every
        // event at or below the head is in the streams read next, and every one
        // after it in the next look.
        let head = store.head().await?;
        let names = store.stream_ids(StreamType::Schedule, None).await?;
        for name in &names {
            for event in store.read_stream(&stream(name)).await? {
                if event.position <= head {
                    self.unconfirmed.extend(fire_of(&event));
                }
            }
        }
        self.after = head;
        self.looked = true;
        Ok(names.into_iter().collect())
    }

    /// The schedules whose streams gained events since the last look; their fires
    /// are kept to be confirmed.
    async fn changed_schedules(&mut self) -> Result<BTreeSet<String>> {
        let mut changed = BTreeSet::new();
        let mut fires = Vec::new();
        read_kind(
            &self.schedules.store,
            StreamType::Schedule,
            5_000,
            &mut self.after,
            |event| {
                changed.insert(event.stream.id.clone());
                fires.extend(fire_of(event));
            },
        )
        .await?;
        self.unconfirmed.extend(fires);
        Ok(changed)
    }

    /// The workflows registered or changed past `synced` (and past the last look),
    /// with the position read up to. Read from there rather than from the start of
    /// the log: a workflow's events carry its whole definition, and a server
    /// starting over thousands of learned workflows held all of them decoded at
    /// once (about 45 MB over 1,329 workflows) only to skip them. Small pages bound
    /// what a burst of registrations holds.
    ///
    /// The first look finds them through the streams' index and follows on from the
    /// head, as for schedules: the last sync can be far behind the head (it moves
    /// only when a workflow changed, and a server stopped mid-way records none), and
    /// paging the log from there for the few workflow events in it took a core of
    /// Postgres for seconds at each start (the learning benchmark's 1.6 million
    /// events, read in windows of 200 ms each, while the server answered its first
    /// requests).
    async fn changed_workflows(&mut self, synced: i64) -> Result<(BTreeSet<String>, i64)> {
        let store = &self.schedules.store;
        if !self.workflows_looked {
            // As in the first look: every event at or below the head is in the
            // streams listed next, every one after it in the next look.
            let head = store.head().await?;
            let changed = store.stream_ids_after(StreamType::Workflow, synced).await?;
            self.workflows_after = head.max(synced);
            self.workflows_looked = true;
            return Ok((changed.into_iter().collect(), self.workflows_after));
        }
        let mut changed = BTreeSet::new();
        self.workflows_after = self.workflows_after.max(synced);
        read_kind(
            &self.schedules.store,
            StreamType::Workflow,
            500,
            &mut self.workflows_after,
            |event| {
                changed.insert(event.stream.id.clone());
            },
        )
        .await?;
        Ok((changed, self.workflows_after))
    }

    /// One round: look at the log, tick every schedule whose time has come, confirm
    /// fires old enough. Returns when the next round is due.
    pub async fn step(&mut self) -> Result<DateTime<Utc>> {
        self.refresh().await?;
        let now = self.schedules.now();
        let mut due: Vec<String> = self
            .known
            .iter()
            .filter(|(_, s)| s.wake_at().is_some_and(|at| at <= now))
            .map(|(name, _)| name.clone())
            .collect();
        // Each server starts at a different place in the list, so servers ticking the
        // same due schedules mostly work on different ones instead of racing on each.
        if !due.is_empty() {
            let offset = (uuid::Uuid::new_v4().as_u128() % due.len() as u128) as usize;
            due.rotate_left(offset);
        }
        let schedules = &self.schedules;
        let ticked: Vec<(String, Option<Schedule>)> = futures_util::stream::iter(due)
            .map(|name| async move {
                match schedules.tick(&name).await {
                    Ok(_) | Err(SchedulesError::Busy(_)) => {}
                    Err(e) => {
                        tracing::warn!(schedule = %name, error = %e, "a schedule's tick failed")
                    }
                }
                let now = schedules.get(&name).await.ok();
                (name, now)
            })
            .buffer_unordered(TICKS_AT_ONCE)
            .collect()
            .await;
        for (name, schedule) in ticked {
            if let Some(schedule) = schedule {
                self.known.insert(name, schedule);
            }
        }
        let (old, young): (Vec<_>, Vec<_>) = std::mem::take(&mut self.unconfirmed)
            .into_iter()
            .partition(|u| now - u.fired_at >= CONFIRM_AFTER);
        self.unconfirmed = young;
        for u in old {
            self.schedules
                .confirm(&u.schedule, u.run_id, u.due_at)
                .await;
        }
        let next = self
            .known
            .values()
            .filter_map(Schedule::wake_at)
            .filter(|at| *at > now)
            .min();
        let look = now + chrono::Duration::from_std(LOOK_EVERY).unwrap_or_default();
        Ok(next.map_or(look, |at| at.min(look)))
    }

    /// Run rounds until `stop` turns true.
    pub async fn run(mut self, mut stop: watch::Receiver<bool>) {
        loop {
            let next = match self.step().await {
                Ok(next) => next,
                Err(e) => {
                    tracing::warn!(error = %e, "the scheduler's round failed; trying again");
                    self.schedules.now() + chrono::Duration::seconds(1)
                }
            };
            let wait = (next - self.schedules.now())
                .to_std()
                .unwrap_or_default()
                .min(LOOK_EVERY);
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = stop.wait_for(|stopped| *stopped) => return,
            }
        }
    }
}
