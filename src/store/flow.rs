//! Concurrency slots (migration 0012): how many runs hold a slot of each scope
//! (`flow_scopes.held`), which runs hold which (`flow_holders`), and which queued runs
//! wait for a slot of which scope (`run_wakeups.waiting_for`).
//!
//! A worker admits the runs it holds in its commit ([`StoreTx::settle_slots`]): it
//! takes one slot of each scope a run needs, all or none, in the transaction that
//! appends the run's `run.admitted`; and it gives back the slots of the runs whose
//! end it appends. It first locks the rows of every scope involved (`FOR UPDATE`),
//! so two workers can never both take the last slot: the second waits for the
//! first's commit and then reads the count it left. The rows stay locked until the
//! commit, so a worker that found a scope full and marks its run waiting commits
//! before anyone can give a slot of it back and look for its waiters: none is missed.
//!
//! Deadlocks are avoided by order: every commit locks scope rows in ascending order
//! of name, after the rows of its own runs (the fence), and wakes waiters with
//! `SKIP LOCKED` (a waiter whose row someone holds is being looked at already).

use std::collections::{BTreeMap, BTreeSet};

use chrono::{DateTime, Utc};

use crate::domain::run::FlowSlot;

use super::StoreError;
use super::tx::{StoreTx, TxConnection};

/// A queued run asking for its slots.
#[derive(Debug, Clone, PartialEq)]
pub struct SlotRequest {
    pub run_id: String,
    /// In the order they are taken (ascending scope names).
    pub slots: Vec<FlowSlot>,
}

/// What a request got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlotAnswer {
    /// Every slot is the run's.
    Taken,
    /// This scope had no free slot: the run took none.
    Full { scope: String, limit: u32 },
}

fn micros(at: DateTime<Utc>) -> i64 {
    at.timestamp_micros()
}

impl StoreTx {
    /// Give back the slots of `finished` runs, then answer each of `requests` in
    /// order: a request takes every slot it needs if each of its scopes has one
    /// free at its turn, else none. The scopes' rows are locked in ascending order
    /// of name and their counts decided in memory, so a request never holds a slot
    /// for a moment only to give it back. Then, for every scope with slots given
    /// back, as many of its waiters are woken.
    pub async fn settle_slots(
        &mut self,
        finished: &[String],
        requests: &[SlotRequest],
        now: DateTime<Utc>,
    ) -> Result<Vec<SlotAnswer>, StoreError> {
        let mut given_back: BTreeMap<String, i64> = BTreeMap::new();
        for scope in self.drop_holders(finished).await? {
            *given_back.entry(scope).or_default() += 1;
        }
        let scopes: BTreeSet<String> = given_back
            .keys()
            .cloned()
            .chain(
                requests
                    .iter()
                    .flat_map(|r| r.slots.iter().map(|s| s.scope.clone())),
            )
            .collect();
        if scopes.is_empty() {
            return Ok(Vec::new());
        }
        let scopes: Vec<String> = scopes.into_iter().collect();
        let before = self.lock_scopes(&scopes).await?;
        let mut held = before.clone();
        for (scope, n) in &given_back {
            let count = held.entry(scope.clone()).or_default();
            *count = (*count - n).max(0);
        }
        let answers: Vec<SlotAnswer> = requests
            .iter()
            .map(|request| {
                let full = request
                    .slots
                    .iter()
                    .find(|s| held.get(&s.scope).copied().unwrap_or(0) >= i64::from(s.limit));
                match full {
                    Some(slot) => SlotAnswer::Full {
                        scope: slot.scope.clone(),
                        limit: slot.limit,
                    },
                    None => {
                        for slot in &request.slots {
                            *held.entry(slot.scope.clone()).or_default() += 1;
                        }
                        SlotAnswer::Taken
                    }
                }
            })
            .collect();
        let changed: Vec<(String, i64)> = held
            .into_iter()
            .filter(|(scope, n)| before.get(scope) != Some(n))
            .collect();
        self.store_held(&changed).await?;
        let holders: Vec<(String, String)> = requests
            .iter()
            .zip(&answers)
            .filter(|(_, a)| **a == SlotAnswer::Taken)
            .flat_map(|(r, _)| r.slots.iter().map(|s| (r.run_id.clone(), s.scope.clone())))
            .collect();
        self.add_holders(&holders).await?;
        for (scope, n) in given_back {
            self.wake_waiters(&scope, n, now).await?;
        }
        Ok(answers)
    }

    /// Lock the rows of `scopes` (sorted), creating the missing ones; their counts.
    async fn lock_scopes(
        &mut self,
        scopes: &[String],
    ) -> Result<BTreeMap<String, i64>, StoreError> {
        let what = "locking the concurrency scopes to count";
        let rows: Vec<(String, i32)> = match self.connection() {
            TxConnection::Postgres(c) => {
                sqlx::query(
                    "INSERT INTO flow_scopes (scope) SELECT unnest($1::text[]) \
                     ON CONFLICT (scope) DO NOTHING",
                )
                .bind(scopes)
                .execute(&mut *c)
                .await
                .map_err(StoreError::db(what))?;
                sqlx::query_as(
                    "SELECT scope, held FROM flow_scopes WHERE scope = ANY($1) \
                     ORDER BY scope FOR UPDATE",
                )
                .bind(scopes)
                .fetch_all(c)
                .await
            }
            // One writer at a time: nothing to lock.
            TxConnection::Sqlite(c) => {
                let list = serde_json::Value::from(scopes.to_vec()).to_string();
                sqlx::query(
                    "INSERT INTO flow_scopes (scope) SELECT value FROM json_each(?1) WHERE true \
                     ON CONFLICT (scope) DO NOTHING",
                )
                .bind(&list)
                .execute(&mut *c)
                .await
                .map_err(StoreError::db(what))?;
                sqlx::query_as(
                    "SELECT scope, held FROM flow_scopes \
                      WHERE scope IN (SELECT value FROM json_each(?1)) ORDER BY scope",
                )
                .bind(&list)
                .fetch_all(c)
                .await
            }
        }
        .map_err(StoreError::db(what))?;
        Ok(rows.into_iter().map(|(s, n)| (s, i64::from(n))).collect())
    }

    /// Store the new counts of held slots.
    async fn store_held(&mut self, counts: &[(String, i64)]) -> Result<(), StoreError> {
        if counts.is_empty() {
            return Ok(());
        }
        let what = "counting held concurrency slots";
        let scopes: Vec<&str> = counts.iter().map(|(s, _)| s.as_str()).collect();
        let held: Vec<i32> = counts
            .iter()
            .map(|(_, n)| i32::try_from(*n).unwrap_or(i32::MAX))
            .collect();
        match self.connection() {
            TxConnection::Postgres(c) => sqlx::query(
                "UPDATE flow_scopes f SET held = v.held \
                   FROM unnest($1::text[], $2::int4[]) AS v(scope, held) \
                  WHERE f.scope = v.scope",
            )
            .bind(&scopes)
            .bind(&held)
            .execute(c)
            .await
            .map(|_| ()),
            TxConnection::Sqlite(c) => {
                for (scope, n) in scopes.iter().zip(&held) {
                    sqlx::query("UPDATE flow_scopes SET held = ?2 WHERE scope = ?1")
                        .bind(scope)
                        .bind(n)
                        .execute(&mut *c)
                        .await
                        .map_err(StoreError::db(what))?;
                }
                Ok(())
            }
        }
        .map_err(StoreError::db(what))
    }

    /// Delete the holders rows of `runs`; the scope of each deleted row.
    async fn drop_holders(&mut self, runs: &[String]) -> Result<Vec<String>, StoreError> {
        if runs.is_empty() {
            return Ok(Vec::new());
        }
        let what = "giving back the concurrency slots of finished runs";
        match self.connection() {
            TxConnection::Postgres(c) => {
                sqlx::query_scalar(
                    "DELETE FROM flow_holders WHERE run_id = ANY($1) RETURNING scope",
                )
                .bind(runs)
                .fetch_all(c)
                .await
            }
            TxConnection::Sqlite(c) => {
                let ids = serde_json::Value::from(runs.to_vec()).to_string();
                sqlx::query_scalar(
                    "DELETE FROM flow_holders WHERE run_id IN (SELECT value FROM json_each(?1)) \
                     RETURNING scope",
                )
                .bind(ids)
                .fetch_all(c)
                .await
            }
        }
        .map_err(StoreError::db(what))
    }

    async fn add_holders(&mut self, holders: &[(String, String)]) -> Result<(), StoreError> {
        if holders.is_empty() {
            return Ok(());
        }
        let what = "recording the runs that hold concurrency slots";
        let runs: Vec<&str> = holders.iter().map(|(r, _)| r.as_str()).collect();
        let scopes: Vec<&str> = holders.iter().map(|(_, s)| s.as_str()).collect();
        match self.connection() {
            TxConnection::Postgres(c) => sqlx::query(
                "INSERT INTO flow_holders (run_id, scope) \
                 SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING",
            )
            .bind(&runs)
            .bind(&scopes)
            .execute(c)
            .await
            .map(|_| ()),
            TxConnection::Sqlite(c) => {
                let pairs = serde_json::Value::from(
                    holders
                        .iter()
                        .map(|(r, s)| serde_json::json!([r, s]))
                        .collect::<Vec<_>>(),
                )
                .to_string();
                sqlx::query(
                    "INSERT INTO flow_holders (run_id, scope) \
                     SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') \
                       FROM json_each(?1) WHERE true ON CONFLICT DO NOTHING",
                )
                .bind(pairs)
                .execute(c)
                .await
                .map(|_| ())
            }
        }
        .map_err(StoreError::db(what))
    }

    /// Make `n` of the runs waiting for a slot of `scope` due now: the highest
    /// priority first, then those whose key holds the fewest slots (a fair share
    /// between keys), then the longest waiting.
    async fn wake_waiters(
        &mut self,
        scope: &str,
        n: i64,
        now: DateTime<Utc>,
    ) -> Result<(), StoreError> {
        let what = format!("waking the runs waiting for a slot of {scope}");
        match self.connection() {
            TxConnection::Postgres(c) => sqlx::query(
                "UPDATE run_wakeups SET due_at = $3, woken = true, waiting_for = NULL \
                  WHERE run_id IN ( \
                    SELECT w.run_id FROM run_wakeups w \
                      LEFT JOIN flow_scopes k ON k.scope = w.fair_key \
                     WHERE w.waiting_for = $1 \
                     ORDER BY w.priority DESC, COALESCE(k.held, 0), w.waiting_since, w.run_id \
                     LIMIT $2 FOR UPDATE OF w SKIP LOCKED)",
            )
            .bind(scope)
            .bind(n)
            .bind(now)
            .execute(c)
            .await
            .map(|_| ()),
            TxConnection::Sqlite(c) => sqlx::query(
                "UPDATE run_wakeups SET due_at = ?3, woken = 1, waiting_for = NULL \
                  WHERE run_id IN ( \
                    SELECT w.run_id FROM run_wakeups w \
                      LEFT JOIN flow_scopes k ON k.scope = w.fair_key \
                     WHERE w.waiting_for = ?1 \
                     ORDER BY w.priority DESC, COALESCE(k.held, 0), w.waiting_since, w.run_id \
                     LIMIT ?2)",
            )
            .bind(scope)
            .bind(n)
            .bind(micros(now))
            .execute(c)
            .await
            .map(|_| ()),
        }
        .map_err(StoreError::db(what))
    }
}
