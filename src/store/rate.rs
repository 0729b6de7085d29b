//! Rate-limit tokens (migration 0013): each bucket's theoretical arrival time in a
//! row of `rate_buckets`, reserved in a short transaction of its own.
//!
//! The arithmetic is the domain's (`domain::rate`); here the rows are locked so that
//! two workers reserving from one bucket at once are served one after the other: the
//! second reads the TAT the first left. Rows are locked in ascending order of name
//! (a step's buckets come sorted), so two reservations over the same buckets never
//! deadlock, and nothing else locks these rows.

use chrono::{DateTime, Utc};

use crate::domain::rate::{self, RateBucket, Reservation};

use super::tx::TxConnection;
use super::{EventStore, StoreError};

impl EventStore {
    /// Reserve one token of each of `buckets` (sorted by scope, each once): the time
    /// the call may go, at `now` or later, and the bucket that set it.
    pub async fn reserve_rate(
        &self,
        buckets: &[RateBucket],
        now: DateTime<Utc>,
    ) -> Result<Reservation, StoreError> {
        if buckets.is_empty() {
            return Ok(rate::reserve(&[], now));
        }
        let what = "reserving rate-limit tokens";
        let scopes: Vec<String> = buckets.iter().map(|b| b.scope.clone()).collect();
        let mut tx = self.begin().await?;
        // Rows missing (a bucket's first call) are made first, as never used, so that
        // the lock below always has a row to hold: two first calls at once queue on
        // it like any others.
        let never = DateTime::<Utc>::UNIX_EPOCH;
        let tats: Vec<Option<DateTime<Utc>>> = match tx.connection() {
            TxConnection::Postgres(c) => {
                sqlx::query(
                    "INSERT INTO rate_buckets (bucket, tat) SELECT unnest($1::text[]), $2 \
                     ON CONFLICT (bucket) DO NOTHING",
                )
                .bind(&scopes)
                .bind(never)
                .execute(&mut *c)
                .await
                .map_err(StoreError::db(what))?;
                let rows: Vec<(String, DateTime<Utc>)> = sqlx::query_as(
                    "SELECT bucket, tat FROM rate_buckets WHERE bucket = ANY($1) \
                     ORDER BY bucket FOR UPDATE",
                )
                .bind(&scopes)
                .fetch_all(c)
                .await
                .map_err(StoreError::db(what))?;
                in_order(&scopes, rows)
            }
            // One writer at a time: nothing to lock.
            TxConnection::Sqlite(c) => {
                let list = serde_json::Value::from(scopes.clone()).to_string();
                sqlx::query(
                    "INSERT INTO rate_buckets (bucket, tat) \
                     SELECT value, ?2 FROM json_each(?1) WHERE true ON CONFLICT (bucket) DO NOTHING",
                )
                .bind(&list)
                .bind(never.timestamp_micros())
                .execute(&mut *c)
                .await
                .map_err(StoreError::db(what))?;
                let rows: Vec<(String, i64)> = sqlx::query_as(
                    "SELECT bucket, tat FROM rate_buckets \
                      WHERE bucket IN (SELECT value FROM json_each(?1)) ORDER BY bucket",
                )
                .bind(&list)
                .fetch_all(c)
                .await
                .map_err(StoreError::db(what))?;
                let rows = rows
                    .into_iter()
                    .filter_map(|(b, t)| DateTime::from_timestamp_micros(t).map(|t| (b, t)))
                    .collect();
                in_order(&scopes, rows)
            }
        };
        let given: Vec<(&RateBucket, Option<DateTime<Utc>>)> = buckets.iter().zip(tats).collect();
        let reservation = rate::reserve(&given, now);
        match tx.connection() {
            TxConnection::Postgres(c) => sqlx::query(
                "UPDATE rate_buckets r SET tat = v.tat \
                   FROM unnest($1::text[], $2::timestamptz[]) AS v(bucket, tat) \
                  WHERE r.bucket = v.bucket",
            )
            .bind(&scopes)
            .bind(&reservation.tats)
            .execute(c)
            .await
            .map(|_| ()),
            TxConnection::Sqlite(c) => {
                let mut result = Ok(());
                for (scope, tat) in scopes.iter().zip(&reservation.tats) {
                    result = sqlx::query("UPDATE rate_buckets SET tat = ?2 WHERE bucket = ?1")
                        .bind(scope)
                        .bind(tat.timestamp_micros())
                        .execute(&mut *c)
                        .await
                        .map(|_| ());
                    if result.is_err() {
                        break;
                    }
                }
                result
            }
        }
        .map_err(StoreError::db(what))?;
        tx.commit().await?;
        Ok(reservation)
    }
}

/// Each scope's TAT as read (every one has a row by now).
fn in_order(scopes: &[String], rows: Vec<(String, DateTime<Utc>)>) -> Vec<Option<DateTime<Utc>>> {
    scopes
        .iter()
        .map(|s| rows.iter().find(|(b, _)| b == s).map(|(_, t)| *t))
        .collect()
}
