//! Projections: read models folded from the log, each a set of tables plus a
//! checkpoint, rebuildable from position 0 at any time with the same result.
//!
//! A [`Projection`] names its tables (their DDL is in `projections/NAME.sql`), the
//! streams it reads, and how a batch of events changes its rows. The [`runner`] does
//! the rest: it applies batches in transactions that also move the checkpoint (so an
//! event is applied once, and a crash between batches loses nothing), follows the log
//! live, and rebuilds a projection beside the live one before swapping it in.
//!
//! The aggregate-shaped projections (board, runs, agents) keep each stream's folded
//! domain state in their row and fold new events with the domain's own `apply`, so a
//! view can never disagree with the rules: the status of a run on the dashboard is the
//! status the executor sees. Events at or below a row's stream version are skipped,
//! so applying an event twice changes nothing.

mod agents;
mod audit;
mod board;
mod chat;
mod fold;
mod learning;
pub mod lease;
mod model_use;
mod proposals;
pub mod queries;
pub mod runner;
mod runs;
mod verify;

use std::sync::Arc;

use async_trait::async_trait;

use crate::log::{RecordedEvent, StreamType};
use crate::store::rows::{Column, Param};
use crate::store::{StoreError, StoreTx};

pub use runner::{ProjectionStatus, Projections};
pub use verify::TableDifference;

pub(crate) use learning::{counted_pattern, pattern_key, stored_pattern};

/// What can go wrong while projecting.
#[derive(Debug, thiserror::Error)]
pub enum ProjectionError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("projection {projection}: {reason}")]
    Corrupt {
        projection: &'static str,
        reason: String,
    },
    #[error("no projection named {0:?} (known: {1})")]
    Unknown(String, String),
}

impl crate::error::Classified for ProjectionError {
    fn kind(&self) -> crate::error::ErrorKind {
        use crate::error::ErrorKind;
        match self {
            Self::Store(e) => e.kind(),
            Self::Corrupt { .. } => ErrorKind::Internal,
            Self::Unknown(..) => ErrorKind::NotFound,
        }
    }

    fn code(&self) -> &'static str {
        match self {
            Self::Store(e) => e.code(),
            Self::Corrupt { .. } => "projection_error",
            Self::Unknown(..) => "projection_not_found",
        }
    }
}

/// One read model.
#[async_trait]
pub trait Projection: Send + Sync {
    /// Its name (the key of its checkpoint).
    fn name(&self) -> &'static str;
    /// Bumped whenever its tables or handler change: a new version is rebuilt at start.
    fn version(&self) -> i32;
    /// The DDL of its tables, with `{table}` placeholders.
    fn ddl(&self) -> &'static str;
    /// The base names of its tables (each is also a view of the current generation).
    fn tables(&self) -> &'static [&'static str];
    /// The stream types it reads (empty: every event).
    fn stream_types(&self) -> Vec<StreamType>;
    /// Its tables whose rows are rewritten in place over and over (counters no index
    /// covers). On Postgres each is created with room left in its pages, so an update
    /// that changes no indexed column stays on its page (a HOT update) and the page's
    /// old versions are pruned as it fills, instead of the heap growing by a row
    /// version per update until vacuum comes by.
    fn updated_in_place(&self) -> &'static [&'static str] {
        &[]
    }
    /// Apply a batch of events, in log order.
    async fn apply(
        &self,
        w: &mut Writer<'_>,
        events: &[RecordedEvent],
    ) -> Result<(), ProjectionError>;
}

/// Every projection awl keeps.
pub fn all() -> Vec<Arc<dyn Projection>> {
    vec![
        Arc::new(board::Board),
        Arc::new(runs::Runs),
        Arc::new(agents::Agents),
        Arc::new(audit::Audit),
        Arc::new(learning::Learning::from_env()),
        Arc::new(proposals::Proposals),
        Arc::new(model_use::ModelUse),
        Arc::new(chat::Chat),
    ]
}

/// Writes of one batch: the transaction and the generation of the tables written.
pub struct Writer<'a> {
    pub(crate) tx: &'a mut StoreTx,
    pub(crate) tables: &'static [&'static str],
    pub(crate) generation: i64,
}

impl Writer<'_> {
    /// `sql` with each `{table}` replaced by the table of this generation.
    pub fn sql(&self, sql: &str) -> String {
        name_tables(sql, self.tables, self.generation)
    }

    pub async fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, ProjectionError> {
        let sql = self.sql(sql);
        Ok(self.tx.execute(&sql, params).await?)
    }

    pub async fn query(
        &mut self,
        sql: &str,
        params: &[Param],
    ) -> Result<Vec<serde_json::Map<String, serde_json::Value>>, ProjectionError> {
        let sql = self.sql(sql);
        Ok(self.tx.query_rows(&sql, params).await?)
    }

    /// Insert `rows` into `table` (a `{table}` name), replacing the row with the same
    /// `key` columns: one statement on Postgres, multi-row statements of at most 2,000
    /// rows elsewhere. Keys must be unique within `rows` (Postgres refuses to update a
    /// row twice in one statement).
    pub async fn upsert(
        &mut self,
        table: &str,
        columns: &[&str],
        key: &[&str],
        rows: Vec<Vec<Param>>,
    ) -> Result<(), ProjectionError> {
        let per_statement = (60_000 / columns.len().max(1)).clamp(1, 2_000);
        let updates: Vec<String> = columns
            .iter()
            .filter(|c| !key.contains(c))
            .map(|c| format!("{c} = excluded.{c}"))
            .collect();
        let conflict = if updates.is_empty() {
            "DO NOTHING".to_string()
        } else {
            format!("DO UPDATE SET {}", updates.join(", "))
        };
        let head = format!("INSERT INTO {table} ({})", columns.join(", "));
        let tail = format!("ON CONFLICT ({}) {conflict}", key.join(", "));
        self.insert(&head, &tail, columns.len(), per_statement, rows)
            .await
    }
}

impl Writer<'_> {
    /// `head {rows} tail` for `rows`: on Postgres one statement with an array per
    /// column; elsewhere `VALUES` lists of at most `per_statement` rows.
    async fn insert(
        &mut self,
        head: &str,
        tail: &str,
        width: usize,
        per_statement: usize,
        rows: Vec<Vec<Param>>,
    ) -> Result<(), ProjectionError> {
        if rows.is_empty() {
            return Ok(());
        }
        if self.tx.is_postgres() && Column::fit(&rows) {
            let sql = self.sql(&format!("{head} {{rows}} {tail}"));
            self.tx.insert_unnest(&sql, Column::of_rows(rows)).await?;
            return Ok(());
        }
        let one = format!("({})", vec!["?"; width].join(", "));
        for (n, params) in statements(rows, per_statement) {
            let sql = format!("{head} VALUES {} {tail}", vec![one.as_str(); n].join(", "));
            self.execute(&sql, &params).await?;
        }
        Ok(())
    }

    /// Add to counters: insert each row of `key`, `sums` and `maxes` columns, or, for a
    /// key already there, add each `sums` column to the stored value and keep the
    /// larger of each `maxes` column. Keys must be unique within `rows`.
    pub async fn add(
        &mut self,
        table: &str,
        key: &[&str],
        sums: &[&str],
        maxes: &[&str],
        rows: Vec<Vec<Param>>,
    ) -> Result<(), ProjectionError> {
        let columns: Vec<&str> = key.iter().chain(sums).chain(maxes).copied().collect();
        let mut set: Vec<String> = sums
            .iter()
            .map(|c| format!("{c} = {table}.{c} + excluded.{c}"))
            .collect();
        set.extend(maxes.iter().map(|c| {
            format!(
                "{c} = CASE WHEN excluded.{c} > {table}.{c} THEN excluded.{c} ELSE {table}.{c} END"
            )
        }));
        let head = format!("INSERT INTO {table} ({})", columns.join(", "));
        let tail = format!(
            "ON CONFLICT ({}) DO UPDATE SET {}",
            key.join(", "),
            set.join(", ")
        );
        self.insert(&head, &tail, columns.len(), 500, rows).await
    }
}

/// `rows` in statements of at most `per_statement` rows: each statement's row count
/// and its parameters, moved rather than copied.
fn statements(rows: Vec<Vec<Param>>, per_statement: usize) -> Vec<(usize, Vec<Param>)> {
    let mut out = Vec::new();
    let mut rows = rows.into_iter().peekable();
    while rows.peek().is_some() {
        let chunk: Vec<Vec<Param>> = rows.by_ref().take(per_statement.max(1)).collect();
        out.push((chunk.len(), chunk.into_iter().flatten().collect()));
    }
    out
}

/// The histogram bucket of a duration: 0 for 0 ms, then four buckets per doubling
/// (each about 19 % wider than the last), so percentiles read from it are within a
/// fifth of the true value.
pub fn duration_bucket(ms: i64) -> i64 {
    if ms <= 0 {
        0
    } else {
        ((ms as f64).log2() * 4.0).floor() as i64 + 1
    }
}

/// The upper bound, in milliseconds, of a [`duration_bucket`].
pub fn bucket_upper_ms(bucket: i64) -> i64 {
    if bucket <= 0 {
        0
    } else {
        2f64.powf(bucket as f64 / 4.0).ceil() as i64
    }
}

/// Replace each `{table}` of `tables` in `sql` by `table_gN`.
pub(crate) fn name_tables(sql: &str, tables: &[&str], generation: i64) -> String {
    let mut out = sql.to_string();
    for t in tables {
        out = out.replace(&format!("{{{t}}}"), &format!("{t}_g{generation}"));
    }
    out
}

/// Microseconds since the epoch, the projections' time format.
pub(crate) fn micros(at: chrono::DateTime<chrono::Utc>) -> i64 {
    at.timestamp_micros()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_bounds_its_durations_within_a_fifth() {
        assert_eq!(duration_bucket(0), 0);
        assert_eq!(bucket_upper_ms(0), 0);
        let mut last = 0;
        for ms in [1, 2, 3, 10, 99, 100, 101, 1_000, 12_345, 3_600_000] {
            let b = duration_bucket(ms);
            assert!(b >= last, "buckets grow with durations");
            last = b;
            let upper = bucket_upper_ms(b);
            assert!(upper >= ms, "{ms} ms is above its bucket's bound {upper}");
            assert!(
                (upper as f64) <= (ms as f64) * 1.2 + 1.0,
                "{ms} ms: bound {upper} is too loose"
            );
        }
    }

    #[test]
    fn tables_are_named_by_generation() {
        assert_eq!(
            name_tables(
                "SELECT * FROM {runs} JOIN {run_steps}",
                &["runs", "run_steps"],
                3
            ),
            "SELECT * FROM runs_g3 JOIN run_steps_g3"
        );
    }
}
