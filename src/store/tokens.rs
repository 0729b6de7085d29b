//! The API's bearer tokens: rows of `api_tokens`, which hold only each token's hash.
//!
//! Tokens are credentials, not history: they live beside the log, not in it.

use chrono::{DateTime, Utc};
use sqlx::Row;
use uuid::Uuid;

use super::backend::Backend;
use super::{EventStore, StoreError};

/// One token as stored (never the token itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    pub id: Uuid,
    pub name: String,
    pub role: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
    pub revoked_at: Option<DateTime<Utc>>,
    /// The team it acts for (learning's scope), if any.
    pub team: Option<String>,
}

const COLUMNS: &str = "id, name, role, created_by, created_at, revoked_at, team";

impl EventStore {
    /// Store a new token's record and hash. Fails with a conflict if an active token
    /// already has the name.
    pub async fn insert_token(&self, record: &TokenRecord, hash: &str) -> Result<(), StoreError> {
        let what = format!("storing token {:?}", record.name);
        let result = match self.backend() {
            Backend::Postgres(b) => sqlx::query(
                "INSERT INTO api_tokens (id, name, role, hash, created_by, created_at, team) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
            )
            .bind(record.id)
            .bind(&record.name)
            .bind(&record.role)
            .bind(hash)
            .bind(&record.created_by)
            .bind(record.created_at)
            .bind(&record.team)
            .execute(b.pool())
            .await
            .map(|_| ()),
            Backend::Sqlite(b) => sqlx::query(
                "INSERT INTO api_tokens (id, name, role, hash, created_by, created_at, team) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .bind(record.id.to_string())
            .bind(&record.name)
            .bind(&record.role)
            .bind(hash)
            .bind(&record.created_by)
            .bind(record.created_at.timestamp_micros())
            .bind(&record.team)
            .execute(b.writer())
            .await
            .map(|_| ()),
        };
        match result {
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {
                Err(StoreError::Refused(format!(
                    "an active token is already named {:?}: revoke it first or choose another name",
                    record.name
                )))
            }
            other => other.map_err(StoreError::db(what)),
        }
    }

    /// Every token, newest first (revoked ones included).
    pub async fn tokens(&self) -> Result<Vec<TokenRecord>, StoreError> {
        let sql = format!("SELECT {COLUMNS} FROM api_tokens ORDER BY created_at DESC, name");
        self.token_rows(&sql, None).await
    }

    /// The active token with this hash.
    pub async fn token_by_hash(&self, hash: &str) -> Result<Option<TokenRecord>, StoreError> {
        let sql = match self.backend() {
            Backend::Postgres(_) => {
                format!("SELECT {COLUMNS} FROM api_tokens WHERE hash = $1 AND revoked_at IS NULL")
            }
            Backend::Sqlite(_) => {
                format!("SELECT {COLUMNS} FROM api_tokens WHERE hash = ?1 AND revoked_at IS NULL")
            }
        };
        Ok(self.token_rows(&sql, Some(hash)).await?.into_iter().next())
    }

    /// How many tokens are active (none: the API runs without auth, on loopback only).
    pub async fn active_tokens(&self) -> Result<i64, StoreError> {
        let sql = "SELECT count(*) FROM api_tokens WHERE revoked_at IS NULL";
        let what = "counting tokens";
        match self.backend() {
            Backend::Postgres(b) => sqlx::query_scalar(sql).fetch_one(b.pool()).await,
            Backend::Sqlite(b) => sqlx::query_scalar(sql).fetch_one(b.writer()).await,
        }
        .map_err(StoreError::db(what))
    }

    /// Revoke the active token named `name_or_id`; false if there is none.
    pub async fn revoke_token(
        &self,
        name_or_id: &str,
        at: DateTime<Utc>,
    ) -> Result<bool, StoreError> {
        let what = format!("revoking token {name_or_id:?}");
        let id = name_or_id.parse::<Uuid>().ok();
        let done = match self.backend() {
            Backend::Postgres(b) => sqlx::query(
                "UPDATE api_tokens SET revoked_at = $3 \
                 WHERE revoked_at IS NULL AND (name = $1 OR id = $2)",
            )
            .bind(name_or_id)
            .bind(id)
            .bind(at)
            .execute(b.pool())
            .await
            .map(|r| r.rows_affected()),
            Backend::Sqlite(b) => sqlx::query(
                "UPDATE api_tokens SET revoked_at = ?3 \
                 WHERE revoked_at IS NULL AND (name = ?1 OR id = ?2)",
            )
            .bind(name_or_id)
            .bind(id.map(|i| i.to_string()))
            .bind(at.timestamp_micros())
            .execute(b.writer())
            .await
            .map(|r| r.rows_affected()),
        }
        .map_err(StoreError::db(what))?;
        Ok(done > 0)
    }

    /// Token rows of a fixed query (`sql` is one of this module's own strings).
    async fn token_rows(
        &self,
        sql: &str,
        arg: Option<&str>,
    ) -> Result<Vec<TokenRecord>, StoreError> {
        let what = "reading tokens";
        match self.backend() {
            Backend::Postgres(b) => {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
                if let Some(a) = arg {
                    q = q.bind(a);
                }
                let rows = q.fetch_all(b.pool()).await.map_err(StoreError::db(what))?;
                rows.iter()
                    .map(|r| {
                        Ok(TokenRecord {
                            id: r.try_get("id")?,
                            name: r.try_get("name")?,
                            role: r.try_get("role")?,
                            created_by: r.try_get("created_by")?,
                            created_at: r.try_get("created_at")?,
                            revoked_at: r.try_get("revoked_at")?,
                            team: r.try_get("team")?,
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::db(what))
            }
            Backend::Sqlite(b) => {
                let mut q = sqlx::query(sqlx::AssertSqlSafe(sql.to_string()));
                if let Some(a) = arg {
                    q = q.bind(a);
                }
                let rows = q
                    .fetch_all(b.writer())
                    .await
                    .map_err(StoreError::db(what))?;
                rows.iter()
                    .map(|r| {
                        let id: String = r.try_get("id")?;
                        let created: i64 = r.try_get("created_at")?;
                        let revoked: Option<i64> = r.try_get("revoked_at")?;
                        Ok(TokenRecord {
                            id: id
                                .parse()
                                .map_err(|e: uuid::Error| sqlx::Error::Decode(e.into()))?,
                            name: r.try_get("name")?,
                            role: r.try_get("role")?,
                            created_by: r.try_get("created_by")?,
                            created_at: DateTime::from_timestamp_micros(created)
                                .unwrap_or_default(),
                            revoked_at: revoked.and_then(DateTime::from_timestamp_micros),
                            team: r.try_get("team")?,
                        })
                    })
                    .collect::<Result<_, sqlx::Error>>()
                    .map_err(StoreError::db(what))
            }
        }
    }
}
