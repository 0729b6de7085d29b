//! Running projections: create their tables, apply the log in checkpointed batches,
//! follow it live, and rebuild one beside the live tables before swapping it in.
//!
//! Each batch is one transaction that locks the projection's `projection_state` row,
//! applies the events after its checkpoint and moves the checkpoint: several `awl
//! serve` processes can run the same projections, and each event is applied once
//! (servers take turns all the same, see [`super::lease`], to spare the reads). A
//! rebuild fills generation N+1 from position 0 without the lock, then, holding it,
//! applies the last events, points the views at N+1 and drops N, all in one commit.

use std::sync::Arc;
use std::time::Duration;

use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::{OnceCell, watch};

use crate::log::{EventFilter, RecordedEvent};
use crate::store::rows::Param;
use crate::store::{EventStore, FollowerLease, Following, StoreTx, until_held};

use super::{Projection, ProjectionError, Writer, all, name_tables};

/// Events applied per transaction while following the log.
pub const BATCH: i64 = 1_000;

/// How long the follower waits after a wake-up before reading the log, so that the
/// commits of a busy log are applied as one batch: a task's five events read back
/// and written once rather than once per commit. Views lag by up to this much more;
/// 25 ms rather than 5 raised the board's full lifecycles by 9 % on two cores
/// (BENCHMARKS.md, "The projections gather 25 ms").
const FOLLOW_GATHER: Duration = Duration::from_millis(25);

/// Events applied per transaction while rebuilding.
const REBUILD_PAGE: i64 = 10_000;

/// The state of one projection, for `awl projections status` and the API.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ProjectionStatus {
    pub name: String,
    /// The version its tables were built with.
    pub version: i64,
    /// The version of its code (a difference means a rebuild is due).
    pub code_version: i64,
    pub generation: i64,
    /// The last log position applied.
    pub position: i64,
    /// The log's head.
    pub head: i64,
    /// Events behind the head.
    pub lag: i64,
}

/// The projections of one store.
#[derive(Clone)]
pub struct Projections {
    store: EventStore,
    list: Vec<Arc<dyn Projection>>,
    /// On Postgres, the statement that sets up a transaction of projection writes
    /// (found once: it depends on what the server was built with).
    setup: Arc<OnceCell<&'static str>>,
}

/// Projection writes on Postgres, where the server can compress with lz4: rows such
/// as a run's folded state (kilobytes of JSON, rewritten with each batch of its
/// events) are compressed with lz4 rather than the default pglz: a quarter less time
/// in the `runs` view's upserts under the executor benchmark.
const SETUP_LZ4: &str = "SELECT set_config('synchronous_commit', 'off', true), \
                         set_config('default_toast_compression', 'lz4', true)";
/// The same where it cannot (built without lz4).
const SETUP_PGLZ: &str = "SELECT set_config('synchronous_commit', 'off', true)";

pub(super) struct State {
    version: i64,
    pub(super) generation: i64,
    pub(super) position: i64,
}

impl Projections {
    pub fn new(store: EventStore) -> Self {
        Self::with(store, all())
    }

    pub fn with(store: EventStore, list: Vec<Arc<dyn Projection>>) -> Self {
        Self {
            store,
            list,
            setup: Arc::new(OnceCell::new()),
        }
    }

    /// Only the projections called `names` (unknown names are left out).
    pub fn named(store: EventStore, names: &[&str]) -> Self {
        let list = all()
            .into_iter()
            .filter(|p| names.contains(&p.name()))
            .collect();
        Self::with(store, list)
    }

    /// Create, rebuild if outdated, and catch up the projections: what a one-off
    /// command does before reading them, with no server following the log.
    pub async fn bring_up_to_date(&self) -> Result<(), ProjectionError> {
        for name in self.prepare().await? {
            self.rebuild(name, &|_, _| {}).await?;
        }
        self.catch_up_all().await
    }

    /// A transaction for projection writes. On Postgres it commits without waiting for
    /// the WAL flush (`synchronous_commit = off`): a projection is a cache of the log,
    /// and a crash can only lose its last batches, checkpoint and rows together, which
    /// are applied again at the next start.
    pub(super) async fn begin(&self) -> Result<StoreTx, ProjectionError> {
        if self.store.backend_name() != "postgres" {
            return Ok(self.store.begin().await?);
        }
        let setup = self
            .setup
            .get_or_try_init(|| async {
                let lz4 = self
                    .store
                    .query_rows(
                        "SELECT 1 AS lz4 FROM pg_settings \
                         WHERE name = 'default_toast_compression' AND 'lz4' = ANY(enumvals)",
                        &[],
                    )
                    .await?;
                Ok::<_, ProjectionError>(if lz4.is_empty() {
                    SETUP_PGLZ
                } else {
                    SETUP_LZ4
                })
            })
            .await?;
        let mut tx = self.store.begin().await?;
        tx.execute(setup, &[]).await?;
        Ok(tx)
    }

    pub(super) fn store(&self) -> &EventStore {
        &self.store
    }

    pub fn names(&self) -> Vec<&'static str> {
        self.list.iter().map(|p| p.name()).collect()
    }

    /// The name of the projection called `name`, as a `'static` string (for metric
    /// labels, which must come from a fixed set).
    pub fn static_name(&self, name: &str) -> Option<&'static str> {
        self.list.iter().map(|p| p.name()).find(|n| *n == name)
    }

    pub(super) fn find(&self, name: &str) -> Result<Arc<dyn Projection>, ProjectionError> {
        self.list
            .iter()
            .find(|p| p.name() == name)
            .cloned()
            .ok_or_else(|| ProjectionError::Unknown(name.to_string(), self.names().join(", ")))
    }

    /// Create the tables of projections that have none; returns the names of those
    /// whose code version differs from their tables' (to rebuild).
    pub async fn prepare(&self) -> Result<Vec<&'static str>, ProjectionError> {
        let mut outdated = Vec::new();
        for p in &self.list {
            let mut tx = self.begin().await?;
            lock_all(&mut tx, self.store.backend_name()).await?;
            match read_state(&mut tx, p.name(), false, self.store.backend_name()).await? {
                Some(state) => {
                    tx.rollback().await?;
                    if state.version != i64::from(p.version()) {
                        outdated.push(p.name());
                    }
                }
                None => {
                    create_generation(&mut tx, p.as_ref(), 1).await?;
                    point_views(&mut tx, p.as_ref(), 1).await?;
                    tx.execute(
                        "INSERT INTO projection_state (name, version, generation, position) VALUES (?, ?, 1, 0)",
                        &[Param::from(p.name()), Param::from(i64::from(p.version()))],
                    )
                    .await?;
                    tx.commit().await?;
                }
            }
        }
        Ok(outdated)
    }

    /// Every projection, in name order: the order their checkpoints are locked in,
    /// the same everywhere, so two processes cannot deadlock.
    fn sorted(&self) -> Vec<Arc<dyn Projection>> {
        let mut list = self.list.clone();
        list.sort_by_key(|p| p.name());
        list
    }

    /// Catch every projection up, in pages that grow while they are behind.
    pub async fn catch_up_all(&self) -> Result<(), ProjectionError> {
        self.catch_up_following(&mut Following::default()).await
    }

    /// [`Self::catch_up_all`] for a follower that goes on: `following` remembers
    /// where it stands, so this process's own latest commits are taken from memory.
    async fn catch_up_following(&self, following: &mut Following) -> Result<(), ProjectionError> {
        let list = self.sorted();
        let mut limit = BATCH;
        let mut ahead = None;
        loop {
            let step = self
                .step(&list, limit, ahead.take(), true, following)
                .await?;
            // A page that ended at the head was the last: what commits next wakes
            // the follower again (reading once more would find nothing).
            if step.moved == 0 || step.reached_head {
                return Ok(());
            }
            limit = step.next_limit(limit);
            ahead = step.ahead;
        }
    }

    /// One batch for every projection. Returns how far the lowest checkpoint moved
    /// (0: all caught up).
    pub async fn step_all(&self) -> Result<i64, ProjectionError> {
        let mut following = Following::default();
        Ok(self
            .step(&self.sorted(), BATCH, None, false, &mut following)
            .await?
            .moved)
    }

    /// One batch for `list` (in name order) in one transaction: one read of the log
    /// (from the lowest checkpoint, at most `limit` events of the stream types they
    /// read), each projection given the events past its own checkpoint, every
    /// checkpoint moved. The page is read before the transaction locks the
    /// checkpoints, so it holds one connection at a time and the locks briefly.
    ///
    /// All projections step in one transaction rather than each on its own: measured
    /// on Postgres (`cargo bench --bench projections -- --events 200000 --only
    /// postgres`, 1,000 events/s), each on its own, side by side, lagged 104 ms at
    /// p50 and 180 ms at p99, against 9.8 ms and 20.2 ms for one transaction (seven
    /// reads of the log and seven commits per wake-up instead of one of each).
    ///
    /// With `read_ahead`, a full page has the next one read (and decoded) while it is
    /// applied, on another connection and thread: the log's reading and awl's
    /// decoding overlap the projections' writes instead of waiting for them. The page
    /// read ahead is used only if the checkpoints reach the position it starts at.
    async fn step(
        &self,
        list: &[Arc<dyn Projection>],
        limit: i64,
        ahead: Option<Ahead>,
        read_ahead: bool,
        following: &mut Following,
    ) -> Result<Step, ProjectionError> {
        let backend = self.store.backend_name();
        let filter = filter_of_all(list);
        let mut ahead = ahead;
        let (mut tx, states, events, scanned, from, reached_head) = loop {
            let from = self.lowest_checkpoint(list).await?;
            let (events, scanned, reached_head) = match ahead.take() {
                Some(page) if page.from == from => {
                    let (events, scanned) = page.events.await.map_err(|e| {
                        ProjectionError::Store(crate::store::StoreError::Unavailable(format!(
                            "reading the log ahead: {e}"
                        )))
                    })??;
                    let reached_head = crate::store::reached_head(
                        from,
                        page.limit,
                        &filter,
                        events.len(),
                        scanned,
                    );
                    (events, scanned, reached_head)
                }
                _ => {
                    let page = self
                        .store
                        .read_following(from, limit, &filter, following)
                        .await?;
                    (page.events, page.scanned, page.reached_head)
                }
            };
            if scanned <= from {
                return Ok(Step {
                    moved: 0,
                    full: false,
                    reached_head: true,
                    ahead: None,
                });
            }
            let mut tx = self.begin().await?;
            let names: Vec<&str> = list.iter().map(|p| p.name()).collect();
            let states = match read_states(&mut tx, &names, backend).await? {
                Ok(states) => states,
                Err(missing) => {
                    tx.rollback().await?;
                    return Err(unprepared(missing));
                }
            };
            // Checkpoints only move forward; if one is behind what was read (a
            // rebuild swapped in meanwhile), read again.
            if states.iter().all(|s| s.position >= from) {
                break (tx, states, events, scanned, from, reached_head);
            }
            tx.rollback().await?;
        };
        let full = events.len() as i64 >= limit;
        let ahead = (read_ahead && full).then(|| {
            let (store, filter) = (self.store.clone(), filter.clone());
            let next = (limit * 2).min(REBUILD_PAGE);
            Ahead {
                from: scanned,
                limit: next,
                events: tokio::spawn(async move { store.read_page(scanned, next, &filter).await }),
            }
        });
        let mut moved: Vec<&str> = Vec::with_capacity(list.len());
        for (p, state) in list.iter().zip(&states) {
            if state.position >= scanned {
                continue;
            }
            moved.push(p.name());
            let kinds = p.stream_types();
            let wanted = |e: &RecordedEvent| {
                e.position > state.position && (kinds.is_empty() || kinds.contains(&e.stream.kind))
            };
            let mine: std::borrow::Cow<'_, [RecordedEvent]> = if events.iter().all(wanted) {
                std::borrow::Cow::Borrowed(&events)
            } else {
                events.iter().filter(|e| wanted(e)).cloned().collect()
            };
            if !mine.is_empty() {
                let mut w = Writer {
                    tx: &mut tx,
                    tables: p.tables(),
                    generation: state.generation,
                };
                p.apply(&mut w, &hidden(&mine)).await?;
            }
        }
        // Every checkpoint that moved, in one statement.
        if !moved.is_empty() {
            let sql = format!(
                "UPDATE projection_state SET position = ? WHERE name IN ({})",
                vec!["?"; moved.len()].join(", ")
            );
            let mut params = vec![Param::from(scanned)];
            params.extend(moved.iter().map(|name| Param::from(*name)));
            tx.execute(&sql, &params).await?;
        }
        tx.commit().await?;
        Ok(Step {
            moved: scanned - from,
            full,
            reached_head,
            ahead,
        })
    }

    /// The lowest checkpoint of `list`, read without locking.
    async fn lowest_checkpoint(
        &self,
        list: &[Arc<dyn Projection>],
    ) -> Result<i64, ProjectionError> {
        let rows = self
            .store
            .query_rows("SELECT name, position FROM projection_state", &[])
            .await?;
        let mut lowest = None;
        for p in list {
            let position = rows
                .iter()
                .find(|r| r.get("name").and_then(|v| v.as_str()) == Some(p.name()))
                .and_then(|r| r.get("position").and_then(|v| v.as_i64()))
                .ok_or_else(|| unprepared(p.name()))?;
            lowest = Some(lowest.map_or(position, |l: i64| l.min(position)));
        }
        Ok(lowest.unwrap_or(0))
    }

    /// Prepare, rebuild what is outdated (in the background), then follow the log
    /// until `stop`.
    pub async fn run(&self, stop: watch::Receiver<bool>) -> Result<(), ProjectionError> {
        let outdated = self.prepare().await?;
        self.follow(outdated, stop).await
    }

    /// After [`Projections::prepare`]: rebuild the `outdated` projections it named (in
    /// the background), then follow the log until `stop`, whenever it grows (and
    /// every second). The one follower of its database (tests, one-off tools); servers
    /// take turns with [`Self::follow_leased`].
    pub async fn follow(
        &self,
        outdated: Vec<&'static str>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ProjectionError> {
        self.rebuild_in_background(outdated);
        let (_always, mut held) = watch::channel(true);
        self.follow_while_held(&mut held, &mut stop).await;
        Ok(())
    }

    /// [`Self::follow`] for one of many servers over a database: the log is followed
    /// only while this process holds `lease` (see [`super::lease`]); until `stop`, when
    /// the lease is given up.
    pub async fn follow_leased(
        &self,
        outdated: Vec<&'static str>,
        lease: FollowerLease,
        mut stop: watch::Receiver<bool>,
    ) -> Result<(), ProjectionError> {
        self.rebuild_in_background(outdated);
        let (mut held, keeper) = lease.spawn(self.store.clone(), 0, stop.clone());
        while until_held(&mut held, &mut stop).await {
            self.follow_while_held(&mut held, &mut stop).await;
        }
        // The keeper gives the lease up once it sees `stop`.
        let _ = keeper.await;
        Ok(())
    }

    fn rebuild_in_background(&self, outdated: Vec<&'static str>) {
        for name in outdated {
            let me = self.clone();
            tokio::spawn(async move {
                tracing::info!(projection = name, "rebuilding: its version changed");
                if let Err(e) = me.rebuild(name, &|_, _| {}).await {
                    tracing::error!(projection = name, error = %e, "rebuild failed");
                }
            });
        }
    }

    /// Follow the log while `held` says so, until `stop`: whenever it grows, and every
    /// second.
    async fn follow_while_held(
        &self,
        held: &mut watch::Receiver<bool>,
        stop: &mut watch::Receiver<bool>,
    ) {
        let mut wake = self.store.subscribe();
        let mut following = Following::default();
        loop {
            wake.borrow_and_update();
            if !*held.borrow_and_update() || *stop.borrow() {
                return;
            }
            if let Err(e) = self.catch_up_following(&mut following).await {
                tracing::error!(error = %e, "a projection failed; retrying in 1 s");
                following.force();
            }
            tokio::select! {
                _ = stop.changed() => return,
                // The lease lost (or its keeper gone): stop following.
                changed = held.changed() => if changed.is_err() { return },
                _ = wake.changed() => {
                    // Let a burst of appends gather into one batch (one commit for many
                    // events): lag grows by at most this much.
                    tokio::time::sleep(FOLLOW_GATHER).await;
                }
                // Woken by time: read the database (a commit may have gone
                // unannounced).
                _ = tokio::time::sleep(Duration::from_secs(1)) => following.force(),
            }
        }
    }

    /// Rebuild `name` from position 0 beside the live tables, then swap it in.
    /// `progress(position, head)` is called after each batch.
    pub async fn rebuild(
        &self,
        name: &str,
        progress: &(dyn Fn(i64, i64) + Sync),
    ) -> Result<(), ProjectionError> {
        let p = self.find(name)?;
        self.prepare().await?;
        let backend = self.store.backend_name();
        let next = {
            let mut tx = self.begin().await?;
            let state = read_state(&mut tx, p.name(), true, backend)
                .await?
                .ok_or_else(|| {
                    ProjectionError::Unknown(p.name().to_string(), "it has no state".into())
                })?;
            let next = state.generation + 1;
            drop_generation(&mut tx, p.as_ref(), next).await?;
            create_generation(&mut tx, p.as_ref(), next).await?;
            tx.commit().await?;
            next
        };
        let filter = filter_of(p.as_ref());
        let mut position = 0;
        // Most of the log, without holding the projection's lock, in bigger pages
        // (fewer states reloaded across pages).
        loop {
            let head = self.store.head().await?;
            if head - position <= BATCH {
                break;
            }
            position = self.apply_page(p.as_ref(), next, position, &filter).await?;
            progress(position, head);
        }
        // The rest, and the swap, under the lock.
        let mut tx = self.begin().await?;
        let state = read_state(&mut tx, p.name(), true, backend)
            .await?
            .ok_or_else(|| {
                ProjectionError::Unknown(p.name().to_string(), "it has no state".into())
            })?;
        loop {
            let (events, scanned) = self.store.read_page(position, BATCH, &filter).await?;
            if scanned <= position {
                break;
            }
            if !events.is_empty() {
                let mut w = Writer {
                    tx: &mut tx,
                    tables: p.tables(),
                    generation: next,
                };
                p.apply(&mut w, &hidden(&events)).await?;
            }
            position = scanned;
        }
        point_views(&mut tx, p.as_ref(), next).await?;
        drop_generation(&mut tx, p.as_ref(), state.generation).await?;
        tx.execute(
            "UPDATE projection_state SET version = ?, generation = ?, position = ? WHERE name = ?",
            &[
                Param::from(i64::from(p.version())),
                Param::from(next),
                Param::from(position),
                Param::from(p.name()),
            ],
        )
        .await?;
        tx.commit().await?;
        progress(position, position);
        Ok(())
    }

    /// Rebuild every projection in one pass over the log: new generations of all of
    /// them are filled page by page (the next page is read while the current one is
    /// applied), then, holding every projection's lock, the last events are applied
    /// and all views are swapped in one commit. `progress(position, head)`.
    pub async fn rebuild_all(
        &self,
        progress: &(dyn Fn(i64, i64) + Sync),
    ) -> Result<(), ProjectionError> {
        self.prepare().await?;
        let backend = self.store.backend_name();
        let mut list: Vec<Arc<dyn Projection>> = self.list.clone();
        list.sort_by_key(|p| p.name());
        // The next generation of each, created empty.
        let mut next = Vec::with_capacity(list.len());
        {
            let mut tx = self.begin().await?;
            for p in &list {
                let state = read_state(&mut tx, p.name(), true, backend)
                    .await?
                    .ok_or_else(|| {
                        ProjectionError::Unknown(p.name().to_string(), "it has no state".into())
                    })?;
                let generation = state.generation + 1;
                drop_generation(&mut tx, p.as_ref(), generation).await?;
                create_generation(&mut tx, p.as_ref(), generation).await?;
                next.push(generation);
            }
            tx.commit().await?;
        }
        let all = EventFilter::default();
        let mut position = 0;
        let mut page = self.store.read_page(0, REBUILD_PAGE, &all).await?;
        loop {
            let head = self.store.head().await?;
            let (events, scanned) = page;
            if scanned <= position || head - scanned <= BATCH {
                // Close to the head: finish under the locks.
                page = (events, scanned);
                break;
            }
            // Read ahead while this page is applied.
            let store = self.store.clone();
            let ahead = tokio::spawn(async move {
                store
                    .read_page(scanned, REBUILD_PAGE, &EventFilter::default())
                    .await
            });
            let mut tx = self.begin().await?;
            self.apply_to(&mut tx, &list, &next, &events).await?;
            tx.commit().await?;
            position = scanned;
            progress(position, head);
            page = ahead.await.map_err(|e| ProjectionError::Corrupt {
                projection: "rebuild",
                reason: e.to_string(),
            })??;
        }
        let mut tx = self.begin().await?;
        let mut old = Vec::with_capacity(list.len());
        for p in &list {
            let state = read_state(&mut tx, p.name(), true, backend)
                .await?
                .ok_or_else(|| {
                    ProjectionError::Unknown(p.name().to_string(), "it has no state".into())
                })?;
            old.push(state.generation);
        }
        let (mut events, mut scanned) = page;
        loop {
            if scanned > position {
                self.apply_to(&mut tx, &list, &next, &events).await?;
                position = scanned;
            }
            (events, scanned) = self.store.read_page(position, BATCH, &all).await?;
            if scanned <= position {
                break;
            }
        }
        for ((p, generation), previous) in list.iter().zip(&next).zip(&old) {
            point_views(&mut tx, p.as_ref(), *generation).await?;
            drop_generation(&mut tx, p.as_ref(), *previous).await?;
            tx.execute(
                "UPDATE projection_state SET version = ?, generation = ?, position = ? WHERE name = ?",
                &[
                    Param::from(i64::from(p.version())),
                    Param::from(*generation),
                    Param::from(position),
                    Param::from(p.name()),
                ],
            )
            .await?;
        }
        tx.commit().await?;
        progress(position, position);
        Ok(())
    }

    /// Give each projection its share of `events`, writing generation `next[i]`.
    async fn apply_to(
        &self,
        tx: &mut StoreTx,
        list: &[Arc<dyn Projection>],
        next: &[i64],
        events: &[crate::log::RecordedEvent],
    ) -> Result<(), ProjectionError> {
        for (p, generation) in list.iter().zip(next) {
            let kinds = p.stream_types();
            let mine: Vec<_> = if kinds.is_empty() {
                events.to_vec()
            } else {
                events
                    .iter()
                    .filter(|e| kinds.contains(&e.stream.kind))
                    .cloned()
                    .collect()
            };
            if mine.is_empty() {
                continue;
            }
            let mut w = Writer {
                tx,
                tables: p.tables(),
                generation: *generation,
            };
            p.apply(&mut w, &hidden(&mine)).await?;
        }
        Ok(())
    }

    /// One page applied to generation `generation` in its own transaction.
    async fn apply_page(
        &self,
        p: &dyn Projection,
        generation: i64,
        after: i64,
        filter: &EventFilter,
    ) -> Result<i64, ProjectionError> {
        let (events, scanned) = self.store.read_page(after, REBUILD_PAGE, filter).await?;
        if !events.is_empty() {
            let mut tx = self.begin().await?;
            let mut w = Writer {
                tx: &mut tx,
                tables: p.tables(),
                generation,
            };
            p.apply(&mut w, &hidden(&events)).await?;
            tx.commit().await?;
        }
        Ok(scanned.max(after))
    }

    /// Apply `events` to `name`'s live tables again, without moving its checkpoint:
    /// applying an event twice must change nothing (the tests check it).
    pub async fn apply_again(
        &self,
        name: &str,
        events: &[crate::log::RecordedEvent],
    ) -> Result<(), ProjectionError> {
        let p = self.find(name)?;
        let mut tx = self.begin().await?;
        let state = read_state(&mut tx, p.name(), true, self.store.backend_name())
            .await?
            .ok_or_else(|| {
                ProjectionError::Unknown(p.name().to_string(), "it has no state".into())
            })?;
        for chunk in events.chunks(BATCH as usize) {
            let mut w = Writer {
                tx: &mut tx,
                tables: p.tables(),
                generation: state.generation,
            };
            p.apply(&mut w, &hidden(chunk)).await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// Where each projection is.
    pub async fn status(&self) -> Result<Vec<ProjectionStatus>, ProjectionError> {
        let head = self.store.head().await?;
        let rows = self
            .store
            .query_rows(
                "SELECT name, version, generation, position FROM projection_state",
                &[],
            )
            .await?;
        let mut out = Vec::new();
        for p in &self.list {
            let row = rows
                .iter()
                .find(|r| r.get("name").and_then(|v| v.as_str()) == Some(p.name()));
            let get = |k: &str| {
                row.and_then(|r| r.get(k))
                    .and_then(|v| v.as_i64())
                    .unwrap_or(0)
            };
            out.push(ProjectionStatus {
                name: p.name().to_string(),
                version: get("version"),
                code_version: i64::from(p.version()),
                generation: get("generation"),
                position: get("position"),
                head,
                lag: (head - get("position")).max(0),
            });
        }
        Ok(out)
    }
}

fn unprepared(name: &str) -> ProjectionError {
    ProjectionError::Unknown(name.to_string(), "run prepare first".into())
}

/// What one batch did.
struct Step {
    /// How far the lowest checkpoint moved.
    moved: i64,
    /// Whether the page was full (more events are waiting).
    full: bool,
    /// Whether the page ended at the head (nothing more was committed when it was
    /// read).
    reached_head: bool,
    /// The next page, being read.
    ahead: Option<Ahead>,
}

/// A page of the log being read ahead, from position `from`.
struct Ahead {
    from: i64,
    limit: i64,
    events: tokio::task::JoinHandle<Result<(Vec<RecordedEvent>, i64), crate::store::StoreError>>,
}

impl Step {
    /// The page size after this step: doubled while pages come back full, up to
    /// [`REBUILD_PAGE`]; [`BATCH`] once the projections are close to the head.
    fn next_limit(&self, limit: i64) -> i64 {
        if self.full {
            (limit * 2).min(REBUILD_PAGE)
        } else {
            BATCH
        }
    }
}

/// The events `list` reads: the stream types of its projections, or all of them if
/// one reads every stream.
fn filter_of_all(list: &[Arc<dyn Projection>]) -> EventFilter {
    let mut kinds = Vec::new();
    for p in list {
        let mine = p.stream_types();
        if mine.is_empty() {
            return EventFilter::default();
        }
        for k in mine {
            if !kinds.contains(&k) {
                kinds.push(k);
            }
        }
    }
    EventFilter {
        stream_types: kinds,
        ..EventFilter::default()
    }
}

pub(super) fn filter_of(p: &dyn Projection) -> EventFilter {
    EventFilter {
        stream_types: p.stream_types(),
        ..EventFilter::default()
    }
}

/// Serialise projection set-up between processes (tables are created once).
async fn lock_all(tx: &mut StoreTx, backend: &str) -> Result<(), ProjectionError> {
    if backend == "postgres" {
        // SQLite transactions here are BEGIN IMMEDIATE: already one writer at a time.
        tx.query_rows(
            "SELECT pg_advisory_xact_lock(7042871503) IS NULL AS locked",
            &[],
        )
        .await?;
    }
    Ok(())
}

/// The states of `names` (in name order, as given), their rows locked in that order
/// on Postgres, in one query; `Err(name)` names one that has no row.
async fn read_states<'a>(
    tx: &mut StoreTx,
    names: &[&'a str],
    backend: &str,
) -> Result<Result<Vec<State>, &'a str>, ProjectionError> {
    // Byte order, as the list is sorted, whatever the database's collation.
    let order = if backend == "postgres" {
        " ORDER BY name COLLATE \"C\" FOR UPDATE"
    } else {
        " ORDER BY name"
    };
    let sql = format!(
        "SELECT name, version, generation, position FROM projection_state WHERE name IN ({}){order}",
        vec!["?"; names.len()].join(", ")
    );
    let params: Vec<Param> = names.iter().map(|n| Param::from(*n)).collect();
    let rows = tx.query_rows(&sql, &params).await?;
    let mut states = Vec::with_capacity(names.len());
    for name in names {
        let Some(r) = rows
            .iter()
            .find(|r| r.get("name").and_then(|v| v.as_str()) == Some(*name))
        else {
            return Ok(Err(name));
        };
        let get = |k: &str| r.get(k).and_then(|v| v.as_i64()).unwrap_or(0);
        states.push(State {
            version: get("version"),
            generation: get("generation"),
            position: get("position"),
        });
    }
    Ok(Ok(states))
}

pub(super) async fn read_state(
    tx: &mut StoreTx,
    name: &str,
    for_update: bool,
    backend: &str,
) -> Result<Option<State>, ProjectionError> {
    let lock = if for_update && backend == "postgres" {
        " FOR UPDATE"
    } else {
        ""
    };
    let sql =
        format!("SELECT version, generation, position FROM projection_state WHERE name = ?{lock}");
    let rows = tx.query_rows(&sql, &[Param::from(name)]).await?;
    Ok(rows.first().map(|r| {
        let get = |k: &str| r.get(k).and_then(|v| v.as_i64()).unwrap_or(0);
        State {
            version: get("version"),
            generation: get("generation"),
            position: get("position"),
        }
    }))
}

pub(super) async fn create_generation(
    tx: &mut StoreTx,
    p: &dyn Projection,
    generation: i64,
) -> Result<(), ProjectionError> {
    let ddl = name_tables(p.ddl(), p.tables(), generation)
        .replace("CREATE TABLE ", "CREATE TABLE IF NOT EXISTS ")
        .replace("CREATE INDEX ", "CREATE INDEX IF NOT EXISTS ");
    tx.execute_batch(&ddl).await?;
    if tx.is_postgres() {
        for t in p.updated_in_place() {
            tx.execute(
                &format!(
                    "ALTER TABLE {t}_g{generation} SET (fillfactor = {UPDATED_IN_PLACE_FILL})"
                ),
                &[],
            )
            .await?;
        }
    }
    Ok(())
}

/// How full (percent) Postgres fills the pages of a table updated in place: the rest
/// is room for the next versions of the rows on each page.
const UPDATED_IN_PLACE_FILL: u8 = 50;

pub(super) async fn drop_generation(
    tx: &mut StoreTx,
    p: &dyn Projection,
    generation: i64,
) -> Result<(), ProjectionError> {
    for t in p.tables() {
        tx.execute(&format!("DROP TABLE IF EXISTS {t}_g{generation}"), &[])
            .await?;
    }
    Ok(())
}

async fn point_views(
    tx: &mut StoreTx,
    p: &dyn Projection,
    generation: i64,
) -> Result<(), ProjectionError> {
    for t in p.tables() {
        tx.execute(&format!("DROP VIEW IF EXISTS {t}"), &[]).await?;
        tx.execute(
            &format!("CREATE VIEW {t} AS SELECT * FROM {t}_g{generation}"),
            &[],
        )
        .await?;
    }
    Ok(())
}

/// Events as read models may keep them: secrets redacted, personal data replaced by
/// a marker (never opened), so forgetting a subject leaves nothing to purge here.
pub(super) fn hidden(events: &[RecordedEvent]) -> std::borrow::Cow<'_, [RecordedEvent]> {
    let mut ids = std::collections::BTreeSet::new();
    for event in events {
        crate::vault::key_ids(&event.payload, &mut ids);
    }
    if ids.is_empty() {
        return std::borrow::Cow::Borrowed(events);
    }
    let keys = crate::vault::Keys::new();
    let mut owned = events.to_vec();
    for event in &mut owned {
        crate::vault::reveal(&mut event.payload, &keys, crate::vault::Reveal::Hidden);
    }
    std::borrow::Cow::Owned(owned)
}
