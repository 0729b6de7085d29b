//! Transactions owned by the caller: events plus other rows, committed together.
//!
//! The executor writes wake-up rows in the same transaction as the events that cause
//! them, and so does every command that wakes a run (`store::command`). A [`StoreTx`] gives access to the raw connection for those rows and
//! appends events with [`StoreTx::append`], which takes the log's write lock: append
//! last, just before commit, because the lock holds every other writer until then.
//! Appends here are all-or-nothing: one conflict refuses the whole call.

use sqlx::{PgConnection, Postgres, Sqlite, SqliteConnection, Transaction};
use std::sync::Arc;

use crate::log::{AppendRequest, Appended};

use super::StoreError;
use super::plan::Atomicity;
use super::signals::Signals;

/// An open transaction on the store.
pub struct StoreTx {
    inner: Inner,
    signals: Arc<Signals>,
    /// The last position appended, once anything was.
    last_position: Option<i64>,
}

enum Inner {
    Postgres(Transaction<'static, Postgres>),
    Sqlite(Transaction<'static, Sqlite>),
}

/// The transaction's connection, for writing rows other than events.
pub enum TxConnection<'t> {
    Postgres(&'t mut PgConnection),
    Sqlite(&'t mut SqliteConnection),
}

impl StoreTx {
    pub(crate) fn postgres(tx: Transaction<'static, Postgres>, signals: Arc<Signals>) -> Self {
        Self {
            inner: Inner::Postgres(tx),
            signals,
            last_position: None,
        }
    }

    pub(crate) fn sqlite(tx: Transaction<'static, Sqlite>, signals: Arc<Signals>) -> Self {
        Self {
            inner: Inner::Sqlite(tx),
            signals,
            last_position: None,
        }
    }

    /// Whether this transaction is on Postgres (which takes arrays as parameters).
    pub fn is_postgres(&self) -> bool {
        matches!(self.inner, Inner::Postgres(_))
    }

    /// The connection, to write other tables in this transaction.
    pub fn connection(&mut self) -> TxConnection<'_> {
        match &mut self.inner {
            Inner::Postgres(tx) => TxConnection::Postgres(tx),
            Inner::Sqlite(tx) => TxConnection::Sqlite(tx),
        }
    }

    /// Append to one or more streams; all of them or, on any conflict, none.
    pub async fn append(
        &mut self,
        requests: &[AppendRequest],
    ) -> Result<Vec<Appended>, StoreError> {
        let refs: Vec<&AppendRequest> = requests.iter().collect();
        let started = std::time::Instant::now();
        let results = match &mut self.inner {
            Inner::Postgres(tx) => {
                super::postgres::append_in(tx, &refs, Atomicity::AllOrNothing).await?
            }
            Inner::Sqlite(tx) => {
                super::sqlite::append_in(tx, &refs, Atomicity::AllOrNothing).await?
            }
        };
        crate::telemetry::appended(refs.len(), started.elapsed().as_secs_f64());
        let appended = results.into_iter().collect::<Result<Vec<_>, _>>()?;
        self.wrote(appended.iter().map(|a| a.last_position).max());
        Ok(appended)
    }

    /// Append independent requests in this transaction: a conflict refuses only its
    /// own request (each result says), the others are written.
    pub async fn append_each(
        &mut self,
        requests: &[AppendRequest],
    ) -> Result<Vec<Result<Appended, StoreError>>, StoreError> {
        if requests.is_empty() {
            return Ok(Vec::new());
        }
        let refs: Vec<&AppendRequest> = requests.iter().collect();
        let started = std::time::Instant::now();
        let results = match &mut self.inner {
            Inner::Postgres(tx) => {
                super::postgres::append_in(tx, &refs, Atomicity::PerRequest).await?
            }
            Inner::Sqlite(tx) => super::sqlite::append_in(tx, &refs, Atomicity::PerRequest).await?,
        };
        crate::telemetry::appended(refs.len(), started.elapsed().as_secs_f64());
        self.wrote(
            results
                .iter()
                .filter_map(|r| r.as_ref().ok().map(|a| a.last_position))
                .max(),
        );
        Ok(results)
    }

    fn wrote(&mut self, last: Option<i64>) {
        self.last_position = self.last_position.max(last);
    }

    pub async fn commit(self) -> Result<(), StoreError> {
        match self.inner {
            Inner::Postgres(tx) => tx.commit().await,
            Inner::Sqlite(tx) => tx.commit().await,
        }
        .map_err(StoreError::db("committing a transaction"))?;
        // Recorded only now: a rolled-back transaction's positions go to the next
        // writer. Transactions are where run wake-ups are written.
        if self.last_position.is_some() {
            self.signals.committed_here(self.last_position, true);
        }
        Ok(())
    }

    pub async fn rollback(self) -> Result<(), StoreError> {
        match self.inner {
            Inner::Postgres(tx) => tx.rollback().await,
            Inner::Sqlite(tx) => tx.rollback().await,
        }
        .map_err(StoreError::db("rolling back a transaction"))
    }
}
