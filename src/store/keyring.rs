//! The keys of sealed values (`vault`), rows of `subject_keys` beside the log.
//!
//! A key is created the first time a run needs it (a run with secret inputs, a
//! subject's first personal data) and deleted by `awl forget`, which erases every
//! value sealed under it. Keys are credentials, not history: they are never events.

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use sqlx::Row;

use super::backend::Backend;
use super::{EventStore, StoreError};
use crate::log::RecordedEvent;
use crate::vault::{self, KeyId, Keys, Reveal, SubjectKey};

impl EventStore {
    /// The keys with these ids that exist (a forgotten one is simply absent).
    pub async fn subject_keys(&self, ids: &BTreeSet<KeyId>) -> Result<Keys, StoreError> {
        let mut keys = Keys::new();
        for id in ids {
            let what = format!("reading key {id}");
            let bytes: Option<Vec<u8>> = match self.backend() {
                Backend::Postgres(b) => {
                    sqlx::query("SELECT key FROM subject_keys WHERE key_id = $1")
                        .bind(id.as_str())
                        .fetch_optional(b.pool())
                        .await
                        .and_then(|row| row.map(|r| r.try_get("key")).transpose())
                }
                Backend::Sqlite(b) => sqlx::query("SELECT key FROM subject_keys WHERE key_id = ?1")
                    .bind(id.as_str())
                    .fetch_optional(b.writer())
                    .await
                    .and_then(|row| row.map(|r| r.try_get("key")).transpose()),
            }
            .map_err(StoreError::db(what.clone()))?;
            if let Some(bytes) = bytes {
                let key = SubjectKey::from_bytes(&bytes).map_err(|e| StoreError::Corrupt {
                    event: what.clone(),
                    reason: e.to_string(),
                })?;
                keys.insert(id.clone(), key);
            }
        }
        Ok(keys)
    }

    /// The keys with these ids, created where missing (by whichever caller is first:
    /// two callers racing get the same key).
    pub async fn ensure_subject_keys(
        &self,
        ids: &[KeyId],
        at: DateTime<Utc>,
    ) -> Result<Keys, StoreError> {
        for id in ids {
            let key = SubjectKey::generate().map_err(|e| StoreError::Refused(e.to_string()))?;
            let what = format!("creating key {id}");
            match self.backend() {
                Backend::Postgres(b) => sqlx::query(
                    "INSERT INTO subject_keys (key_id, key, created_at) VALUES ($1, $2, $3) \
                     ON CONFLICT (key_id) DO NOTHING",
                )
                .bind(id.as_str())
                .bind(key.as_bytes())
                .bind(at)
                .execute(b.pool())
                .await
                .map(|_| ()),
                Backend::Sqlite(b) => sqlx::query(
                    "INSERT INTO subject_keys (key_id, key, created_at) VALUES (?1, ?2, ?3) \
                     ON CONFLICT (key_id) DO NOTHING",
                )
                .bind(id.as_str())
                .bind(key.as_bytes())
                .bind(at.timestamp_micros())
                .execute(b.writer())
                .await
                .map(|_| ()),
            }
            .map_err(StoreError::db(what))?;
        }
        self.subject_keys(&ids.iter().cloned().collect()).await
    }

    /// Delete a key and record who did (false: there was no such key).
    pub async fn forget_subject_key(
        &self,
        id: &KeyId,
        by: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let what = format!("forgetting key {id}");
        let deleted = match self.backend() {
            Backend::Postgres(b) => {
                let mut tx = b
                    .pool()
                    .begin()
                    .await
                    .map_err(StoreError::db(what.clone()))?;
                let deleted = sqlx::query("DELETE FROM subject_keys WHERE key_id = $1")
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db(what.clone()))?
                    .rows_affected();
                sqlx::query(
                    "INSERT INTO forgotten_subjects (key_id, forgotten_by, forgotten_at) \
                     VALUES ($1, $2, $3)",
                )
                .bind(id.as_str())
                .bind(by)
                .bind(at)
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(what.clone()))?;
                tx.commit().await.map_err(StoreError::db(what))?;
                deleted
            }
            Backend::Sqlite(b) => {
                let mut tx = b
                    .writer()
                    .begin()
                    .await
                    .map_err(StoreError::db(what.clone()))?;
                let deleted = sqlx::query("DELETE FROM subject_keys WHERE key_id = ?1")
                    .bind(id.as_str())
                    .execute(&mut *tx)
                    .await
                    .map_err(StoreError::db(what.clone()))?
                    .rows_affected();
                sqlx::query(
                    "INSERT INTO forgotten_subjects (key_id, forgotten_by, forgotten_at) \
                     VALUES (?1, ?2, ?3)",
                )
                .bind(id.as_str())
                .bind(by)
                .bind(at.timestamp_micros())
                .execute(&mut *tx)
                .await
                .map_err(StoreError::db(what.clone()))?;
                tx.commit().await.map_err(StoreError::db(what))?;
                deleted
            }
        };
        Ok(deleted > 0)
    }

    /// Replace the sealed values in `events` by what `how` may see of them, fetching
    /// the keys they name (in one pass; events without sealed values cost a scan).
    pub async fn reveal_events(
        &self,
        events: &mut [RecordedEvent],
        how: Reveal,
    ) -> Result<Keys, StoreError> {
        let mut ids = BTreeSet::new();
        for event in events.iter() {
            vault::key_ids(&event.payload, &mut ids);
        }
        if ids.is_empty() {
            return Ok(Keys::new());
        }
        let keys = if how == Reveal::Hidden {
            Keys::new()
        } else {
            self.subject_keys(&ids).await?
        };
        for event in events.iter_mut() {
            vault::reveal(&mut event.payload, &keys, how);
        }
        Ok(keys)
    }
}
