//! `database` steps: one parameterised statement on a named connection.
//!
//! Connections are named in awl's configuration (`postgres://...` or `sqlite://...`),
//! never in workflow files, so a workflow can only reach the databases an operator
//! gave it. Pools are created on first use and kept.
//!
//! **The query text is used as written and values are bind parameters** (`$1`, `$2`
//! on Postgres, `?1` or `?` on SQLite), bound in order from `params`: strings as
//! text, integers as 64-bit integers (one beyond the signed range is refused: pass it
//! as a string), other numbers as doubles, booleans, `null`, and objects or arrays
//! as JSON (`jsonb` on Postgres, text on SQLite). A value such as
//! `' OR 1=1 --` is stored and compared as that string. A string bound where
//! Postgres wants another type needs a cast in the query (`$1::timestamptz`); `null`
//! is sent untyped so it fits any column. (On Postgres, a comment naming the
//! parameter types, `/* awl params: s,i */`, is appended on a line of its own so a
//! cached prepared statement is never reused for other types; see
//! `postgres_statement_text`.)
//!
//! Output: `{rows: [{column: value}], row_count, rows_affected, truncated?}`. At most
//! `max_rows` rows are kept (the rest are counted, not decoded). `rows_affected` is
//! the rows the statement inserted, updated or deleted (on SQLite including those
//! its triggers changed; Postgres also counts the rows a `SELECT` returned). Column values become
//! JSON by type: text, integers, floats (NaN and infinities as strings), booleans,
//! json / jsonb as JSON, timestamps as RFC 3339 (without an offset for `timestamp`),
//! dates and times as ISO 8601, uuid, numeric as a string (exact), bytea and BLOB as
//! base64, enums as their label, common arrays as arrays; another type is an error
//! naming the column and suggesting a cast to text. On SQLite a column declared
//! `BOOLEAN` gives booleans.
//!
//! The attempt's timeout, counted from before a connection is taken, becomes a
//! statement timeout for what is left of it: `statement_timeout` on Postgres, an
//! interrupt (progress handler) on SQLite, and a deadline around both (SQLite
//! waiting for a lock is ended only by the deadline). A connection goes back to the
//! pool only once its timeout is removed again; one cut off mid-statement is closed
//! instead.
//!
//! | outcome | class |
//! |---|---|
//! | unknown connection name (the known ones are listed), bad URL, integer param beyond 64 bits | `validation` |
//! | cannot connect (refused, DNS, missing database or file) | `network` |
//! | every pooled connection stayed busy for `connect_timeout` | `dependency` |
//! | password or role refused (SQLSTATE 28xxx) | `authentication` |
//! | SQL error (syntax, constraint, type...) | `validation`, with the database's message |
//! | statement timeout / interrupted | `timeout` |
//! | serialization failure, deadlock, lock not available, busy / locked, server shutting down or out of resources | `dependency` |
//! | connection lost mid-statement | `network` |
//! | a column that cannot be turned into JSON | `validation` |

use std::collections::BTreeMap;
use std::str::FromStr;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use serde_json::{Map, Number, Value, json};
use sqlx::error::DatabaseError;
use sqlx::pool::PoolConnection;
use sqlx::postgres::{
    PgPool, PgPoolOptions, PgRow, PgTypeInfo, PgTypeKind, PgValueFormat, PgValueRef,
};
use sqlx::sqlite::{
    SqliteConnectOptions, SqlitePool, SqlitePoolOptions, SqliteRow, SqliteValueRef,
};
use sqlx::{Column, Decode, Either, Executor, Postgres, Row, Sqlite, TypeInfo, ValueRef};

use crate::domain::run::ErrorClass;
use crate::workflow::model::DatabaseStep;

use super::{Attempt, RunnersConfig, StepFailure, StepSuccess, base64, clip};

/// How long after the statement timeout the deadline around it fires (the
/// database's own timeout should have answered by then).
const DEADLINE_GRACE: Duration = Duration::from_secs(1);

/// The named connections and their pools.
pub(super) struct Databases {
    entries: BTreeMap<String, Entry>,
}

pub(super) struct Entry {
    name: String,
    url: String,
    max_connections: u32,
    connect_timeout: Duration,
    pool: Mutex<Option<Db>>,
}

#[derive(Clone)]
enum Db {
    Postgres(PgPool),
    Sqlite(SqlitePool),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Postgres,
    Sqlite,
}

impl Databases {
    pub(super) fn new(config: &RunnersConfig) -> Self {
        let entries = config
            .connections
            .iter()
            .map(|(name, url)| {
                (
                    name.clone(),
                    Entry {
                        name: name.clone(),
                        url: url.clone(),
                        max_connections: config.database_max_connections.max(1),
                        connect_timeout: config.connect_timeout,
                        pool: Mutex::new(None),
                    },
                )
            })
            .collect();
        Self { entries }
    }

    pub(super) fn get(&self, name: &str) -> Result<&Entry, StepFailure> {
        self.entries.get(name).ok_or_else(|| {
            let known: Vec<String> = self.entries.keys().map(|k| format!("`{k}`")).collect();
            StepFailure::validation(if known.is_empty() {
                format!("unknown database connection `{name}`: no connections are configured")
            } else {
                format!(
                    "unknown database connection `{name}` (configured: {})",
                    known.join(", ")
                )
            })
        })
    }
}

impl Entry {
    /// The pool, created (without connecting) on first use.
    fn pool(&self) -> Result<Db, StepFailure> {
        let mut slot = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(db) = &*slot {
            return Ok(db.clone());
        }
        // The URL may hold a password: messages never quote it.
        let bad_url = |e: sqlx::Error| {
            StepFailure::validation(format!(
                "database connection `{}` has an unusable URL: {e}",
                self.name
            ))
        };
        let db = if self.url.starts_with("postgres://") || self.url.starts_with("postgresql://") {
            Db::Postgres(
                PgPoolOptions::new()
                    .max_connections(self.max_connections)
                    .acquire_timeout(self.connect_timeout)
                    .connect_lazy(&self.url)
                    .map_err(bad_url)?,
            )
        } else if self.url.starts_with("sqlite:") {
            let options = SqliteConnectOptions::from_str(&self.url).map_err(bad_url)?;
            Db::Sqlite(
                SqlitePoolOptions::new()
                    .max_connections(self.max_connections)
                    .acquire_timeout(self.connect_timeout)
                    .connect_lazy_with(options),
            )
        } else {
            return Err(StepFailure::validation(format!(
                "database connection `{}` is neither postgres:// nor sqlite://",
                self.name
            )));
        };
        *slot = Some(db.clone());
        Ok(db)
    }
}

/// Run the step's statement under the attempt's timeout.
pub(super) async fn run(
    entry: &Entry,
    config: &RunnersConfig,
    a: &Attempt<'_>,
    step: &DatabaseStep,
) -> Result<StepSuccess, StepFailure> {
    // Checked before a connection is taken, so a refused value never leaves a
    // connection half set up.
    let params = Param::all(&step.params)?;
    let db = entry.pool()?;
    let name = entry.name.as_str();
    // Waiting for a connection counts against the timeout too.
    let deadline = a.timeout.map(|limit| Instant::now() + limit);
    let work = async {
        match db {
            Db::Postgres(pool) => {
                run_postgres(&pool, name, config.max_rows, deadline, step, &params).await
            }
            Db::Sqlite(pool) => {
                run_sqlite(&pool, name, config.max_rows, deadline, step, &params).await
            }
        }
    };
    let output = match (a.timeout, deadline) {
        (Some(limit), Some(deadline)) => {
            tokio::time::timeout_at((deadline + DEADLINE_GRACE).into(), work)
                .await
                .map_err(|_| {
                    StepFailure::new(
                        ErrorClass::Timeout,
                        format!("the statement on `{name}` timed out after {limit:?}"),
                    )
                })??
        }
        _ => work.await?,
    };
    Ok(StepSuccess::output(output))
}

async fn run_postgres(
    pool: &PgPool,
    name: &str,
    max_rows: usize,
    deadline: Option<Instant>,
    step: &DatabaseStep,
    params: &[Param<'_>],
) -> Result<Value, StepFailure> {
    let conn = pool
        .acquire()
        .await
        .map_err(|e| acquire_failure(pool, name, e, Backend::Postgres))?;
    let mut session = Session::new(conn);
    if let Some(deadline) = deadline {
        let left = deadline.saturating_duration_since(Instant::now());
        let ms = left.as_millis().max(1).to_string();
        session.altered = true;
        sqlx::query("SELECT set_config('statement_timeout', $1, false)")
            .bind(ms)
            .execute(&mut *session.conn)
            .await
            .map_err(|e| query_failure(name, e, Backend::Postgres))?;
    }
    let text = postgres_statement_text(&step.query, params);
    let query = bind(sqlx::query(sqlx::AssertSqlSafe(text)), params, |q| {
        q.bind(UntypedNull)
    });
    let result = collect(
        session.conn.fetch_many(query),
        max_rows,
        pg_row,
        |r: &sqlx::postgres::PgQueryResult| r.rows_affected(),
    )
    .await
    .map(Collected::into_json)
    .map_err(|e| e.into_failure(name, Backend::Postgres));
    if session.altered
        && sqlx::query("RESET statement_timeout")
            .execute(&mut *session.conn)
            .await
            .is_ok()
    {
        session.altered = false;
    }
    result
}

async fn run_sqlite(
    pool: &SqlitePool,
    name: &str,
    max_rows: usize,
    deadline: Option<Instant>,
    step: &DatabaseStep,
    params: &[Param<'_>],
) -> Result<Value, StepFailure> {
    let conn = pool
        .acquire()
        .await
        .map_err(|e| acquire_failure(pool, name, e, Backend::Sqlite))?;
    let mut session = Session::new(conn);
    let changes_before = total_changes(&mut session.conn)
        .await
        .map_err(|e| query_failure(name, e, Backend::Sqlite))?;
    if let Some(deadline) = deadline {
        session.altered = true;
        session
            .conn
            .lock_handle()
            .await
            .map_err(|e| connect_failure(name, e, Backend::Sqlite))?
            // Returning false interrupts the statement (SQLITE_INTERRUPT).
            .set_progress_handler(1_000, move || Instant::now() < deadline);
    }
    let query = bind(
        sqlx::query(sqlx::AssertSqlSafe(step.query.as_str())),
        params,
        |q| q.bind(None::<i64>),
    );
    let result = collect(
        session.conn.fetch_many(query),
        max_rows,
        sqlite_row,
        |r: &sqlx::sqlite::SqliteQueryResult| r.rows_affected(),
    )
    .await
    .map_err(|e| e.into_failure(name, Backend::Sqlite));
    if session.altered
        && let Ok(mut handle) = session.conn.lock_handle().await
    {
        handle.remove_progress_handler();
        drop(handle);
        session.altered = false;
    }
    let mut collected = result?;
    // What sqlx reports is `sqlite3_changes()`: the count of the last INSERT, UPDATE
    // or DELETE that completed on the connection, whichever statement (or step) that
    // was. The difference of the running total is this statement's own.
    if let Ok(changes_after) = total_changes(&mut session.conn).await {
        collected.rows_affected = u64::try_from(changes_after - changes_before).unwrap_or(0);
    }
    Ok(collected.into_json())
}

/// Rows inserted, updated or deleted on an SQLite connection since it was opened.
async fn total_changes(conn: &mut sqlx::SqliteConnection) -> Result<i64, sqlx::Error> {
    sqlx::query_scalar("SELECT total_changes()")
        .fetch_one(conn)
        .await
}

/// A pooled connection whose session an attempt may alter (Postgres's
/// `statement_timeout`, SQLite's progress handler). While `altered`, dropping it
/// closes the connection instead of handing it back to the pool, so no later step
/// inherits another's deadline: also when the attempt is dropped mid-statement (its
/// deadline fired, or it was cancelled), where the code restoring the session never
/// runs.
struct Session<DB: sqlx::Database> {
    conn: PoolConnection<DB>,
    altered: bool,
}

impl<DB: sqlx::Database> Session<DB> {
    fn new(conn: PoolConnection<DB>) -> Self {
        Self {
            conn,
            altered: false,
        }
    }
}

impl<DB: sqlx::Database> Drop for Session<DB> {
    fn drop(&mut self) {
        // Runs before `conn` is dropped, which then closes it.
        if self.altered {
            self.conn.close_on_drop();
        }
    }
}

/// One value of `params`, checked, as it is bound.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Param<'a> {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(&'a str),
    /// Arrays and objects.
    Json(&'a Value),
}

impl<'a> Param<'a> {
    /// Every value of `params`; an integer beyond the 64-bit signed range is refused.
    fn all(params: &'a [Value]) -> Result<Vec<Self>, StepFailure> {
        params
            .iter()
            .enumerate()
            .map(|(i, value)| {
                Ok(match value {
                    Value::Null => Self::Null,
                    Value::Bool(b) => Self::Bool(*b),
                    Value::Number(n) => match (n.as_i64(), n.as_f64()) {
                        (Some(int), _) => Self::Int(int),
                        (None, Some(float)) if !n.is_u64() => Self::Float(float),
                        _ => {
                            return Err(StepFailure::validation(format!(
                                "params[{i}] is an integer beyond the 64-bit signed range; \
                                 pass it as a string"
                            )));
                        }
                    },
                    Value::String(s) => Self::Text(s),
                    Value::Array(_) | Value::Object(_) => Self::Json(value),
                })
            })
            .collect()
    }

    /// The letter naming its type in [`postgres_statement_text`].
    fn letter(self) -> &'static str {
        match self {
            Self::Null => "n",
            Self::Bool(_) => "b",
            Self::Int(_) => "i",
            Self::Float(_) => "f",
            Self::Text(_) => "s",
            Self::Json(_) => "j",
        }
    }
}

type ArgsQuery<'q, DB> = sqlx::query::Query<'q, DB, <DB as sqlx::Database>::Arguments>;

/// Bind `params` in order; `null` binds a null the way the backend wants it.
fn bind<'q, DB>(
    mut query: ArgsQuery<'q, DB>,
    params: &[Param<'_>],
    null: fn(ArgsQuery<'q, DB>) -> ArgsQuery<'q, DB>,
) -> ArgsQuery<'q, DB>
where
    DB: sqlx::Database,
    bool: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    i64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    f64: for<'t> sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> &'t str: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
    for<'t> sqlx::types::Json<&'t Value>: sqlx::Encode<'t, DB> + sqlx::Type<DB>,
{
    for param in params {
        query = match *param {
            Param::Null => null(query),
            Param::Bool(b) => query.bind(b),
            Param::Int(i) => query.bind(i),
            Param::Float(f) => query.bind(f),
            Param::Text(s) => query.bind(s),
            Param::Json(v) => query.bind(sqlx::types::Json(v)),
        };
    }
    query
}

/// The statement text sent to Postgres: the query as written, plus, when it has
/// parameters, a comment naming their types (`/* awl params: s,i,n */`).
///
/// sqlx caches prepared statements by their text, and the parameter types come from
/// the JSON values, which may differ from one execution to the next (an integer now,
/// a float later). A statement prepared for the first types would read the bytes of
/// the second as the first (the integer 1000 read as a float8 is 4.9e-321), so the
/// types are made part of the text. The comment holds only letters from a fixed
/// set, never a value. (Unprepared statements are no way out: sqlx runs its own
/// queries between parsing and binding one when a result has a custom type, such
/// as an enum, and the unnamed statement is lost.)
fn postgres_statement_text(query: &str, params: &[Param<'_>]) -> String {
    if params.is_empty() {
        return query.to_string();
    }
    let kinds: Vec<&str> = params.iter().map(|p| p.letter()).collect();
    // On a line of its own, so a trailing `--` comment in the query cannot swallow it.
    format!("{query}\n/* awl params: {} */", kinds.join(","))
}

/// Null with no type: Postgres infers it from where it is used, so it fits a
/// column of any type (a typed null, e.g. text, would not go into an integer).
struct UntypedNull;

impl sqlx::Type<Postgres> for UntypedNull {
    fn type_info() -> PgTypeInfo {
        // OID 0: "unspecified", the server infers the parameter's type.
        PgTypeInfo::with_oid(sqlx::postgres::types::Oid(0))
    }
}

impl sqlx::Encode<'_, Postgres> for UntypedNull {
    fn encode_by_ref(
        &self,
        _buf: &mut sqlx::postgres::PgArgumentBuffer,
    ) -> Result<sqlx::encode::IsNull, sqlx::error::BoxDynError> {
        Ok(sqlx::encode::IsNull::Yes)
    }
}

/// Why collecting the rows stopped.
enum CollectError {
    Sql(sqlx::Error),
    Decode(StepFailure),
}

impl CollectError {
    fn into_failure(self, name: &str, backend: Backend) -> StepFailure {
        match self {
            Self::Sql(e) => query_failure(name, e, backend),
            Self::Decode(f) => f,
        }
    }
}

/// What a statement gave back.
struct Collected {
    rows: Vec<Value>,
    row_count: u64,
    rows_affected: u64,
}

impl Collected {
    /// `{rows, row_count, rows_affected, truncated?}`
    fn into_json(self) -> Value {
        let mut o = Map::new();
        let truncated = self.row_count > self.rows.len() as u64;
        o.insert("rows".into(), Value::Array(self.rows));
        o.insert("row_count".into(), json!(self.row_count));
        o.insert("rows_affected".into(), json!(self.rows_affected));
        if truncated {
            o.insert("truncated".into(), Value::Bool(true));
        }
        Value::Object(o)
    }
}

/// Read the statement's results: rows (decoded up to `max_rows`, counted after),
/// then the rows affected.
async fn collect<R, Q>(
    mut stream: BoxStream<'_, Result<Either<Q, R>, sqlx::Error>>,
    max_rows: usize,
    decode: fn(&R) -> Result<Map<String, Value>, StepFailure>,
    affected: fn(&Q) -> u64,
) -> Result<Collected, CollectError> {
    let mut rows = Vec::new();
    let mut row_count: u64 = 0;
    let mut rows_affected: u64 = 0;
    while let Some(item) = stream.next().await {
        match item.map_err(CollectError::Sql)? {
            Either::Left(done) => rows_affected += affected(&done),
            Either::Right(row) => {
                row_count += 1;
                if rows.len() < max_rows {
                    rows.push(Value::Object(decode(&row).map_err(CollectError::Decode)?));
                }
            }
        }
    }
    Ok(Collected {
        rows,
        row_count,
        rows_affected,
    })
}

/// A failure to get a connection from `pool`.
fn acquire_failure<DB: sqlx::Database>(
    pool: &sqlx::Pool<DB>,
    name: &str,
    e: sqlx::Error,
    backend: Backend,
) -> StepFailure {
    if matches!(e, sqlx::Error::PoolTimedOut) {
        let max = pool.options().get_max_connections();
        let waited = pool.options().get_acquire_timeout();
        // sqlx retries refused connections until the deadline, so a timeout is either
        // every connection being in use or the database not answering.
        return if pool.size() >= max {
            StepFailure::new(
                ErrorClass::Dependency,
                format!("all {max} connections to database `{name}` stayed busy for {waited:?}"),
            )
        } else {
            StepFailure::new(
                ErrorClass::Network,
                format!(
                    "cannot connect to database `{name}`: no connection within {waited:?} \
                     (refused or unreachable)"
                ),
            )
        };
    }
    connect_failure(name, e, backend)
}

/// A failure to open a connection.
fn connect_failure(name: &str, e: sqlx::Error, backend: Backend) -> StepFailure {
    let class = match e.as_database_error().and_then(|d| d.code()) {
        Some(code) if backend == Backend::Postgres && code.starts_with("28") => {
            ErrorClass::Authentication
        }
        _ => match &e {
            sqlx::Error::Configuration(_) => ErrorClass::Validation,
            _ => ErrorClass::Network,
        },
    };
    StepFailure::new(class, format!("cannot connect to database `{name}`: {e}"))
}

/// A failure of the statement.
fn query_failure(name: &str, e: sqlx::Error, backend: Backend) -> StepFailure {
    if let Some(db) = e.as_database_error() {
        let class = database_error_class(backend, db);
        let code = db.code().map(|c| format!(" [{c}]")).unwrap_or_default();
        let message = if class == ErrorClass::Timeout {
            format!(
                "the statement on `{name}` was cancelled by its timeout: {}",
                db.message()
            )
        } else {
            format!("database `{name}`: {}{code}", clip(db.message(), 2000))
        };
        return StepFailure::new(class, message);
    }
    let class = match &e {
        sqlx::Error::Io(_)
        | sqlx::Error::Tls(_)
        | sqlx::Error::Protocol(_)
        | sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed => ErrorClass::Network,
        sqlx::Error::Configuration(_)
        | sqlx::Error::ColumnDecode { .. }
        | sqlx::Error::ColumnIndexOutOfBounds { .. }
        | sqlx::Error::ColumnNotFound(_)
        | sqlx::Error::Decode(_)
        | sqlx::Error::Encode(_)
        | sqlx::Error::TypeNotFound { .. } => ErrorClass::Validation,
        _ => ErrorClass::Unknown,
    };
    StepFailure::new(class, format!("database `{name}`: {e}"))
}

fn database_error_class(backend: Backend, db: &dyn DatabaseError) -> ErrorClass {
    let Some(code) = db.code() else {
        return ErrorClass::Validation;
    };
    match backend {
        Backend::Postgres => postgres_class(&code),
        Backend::Sqlite => code
            .parse::<i64>()
            .map(sqlite_class)
            .unwrap_or(ErrorClass::Validation),
    }
}

/// The class of a Postgres SQLSTATE.
fn postgres_class(sqlstate: &str) -> ErrorClass {
    match sqlstate {
        "57014" => ErrorClass::Timeout,
        "40001" | "40P01" | "55P03" | "57P01" | "57P02" | "57P03" => ErrorClass::Dependency,
        s if s.starts_with("53") => ErrorClass::Dependency,
        s if s.starts_with("08") => ErrorClass::Network,
        s if s.starts_with("28") => ErrorClass::Authentication,
        _ => ErrorClass::Validation,
    }
}

/// The class of an SQLite (extended) result code.
fn sqlite_class(code: i64) -> ErrorClass {
    match code & 0xff {
        9 => ErrorClass::Timeout,          // SQLITE_INTERRUPT
        5 | 6 => ErrorClass::Dependency,   // SQLITE_BUSY, SQLITE_LOCKED
        10 | 13 => ErrorClass::Dependency, // SQLITE_IOERR, SQLITE_FULL
        14 => ErrorClass::Network,         // SQLITE_CANTOPEN
        _ => ErrorClass::Validation,
    }
}

fn f64_json(x: f64) -> Value {
    match Number::from_f64(x) {
        Some(n) => Value::Number(n),
        None if x.is_nan() => Value::String("NaN".into()),
        None if x > 0.0 => Value::String("Infinity".into()),
        None => Value::String("-Infinity".into()),
    }
}

fn column_failure(column: &str, type_name: &str, why: impl std::fmt::Display) -> StepFailure {
    StepFailure::validation(format!("column `{column}` ({type_name}): {why}"))
}

fn pg_row(row: &PgRow) -> Result<Map<String, Value>, StepFailure> {
    let mut out = Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        let type_info = column.type_info();
        let value = row
            .try_get_raw(i)
            .map_err(|e| e.to_string())
            .and_then(|raw| pg_value(raw, type_info))
            .map_err(|e| column_failure(column.name(), type_info.name(), e))?;
        out.insert(column.name().to_string(), value);
    }
    Ok(out)
}

fn pg_decode<'r, T: Decode<'r, Postgres>>(raw: PgValueRef<'r>) -> Result<T, String> {
    T::decode(raw).map_err(|e| e.to_string())
}

fn pg_array<'r, T>(raw: PgValueRef<'r>, each: fn(T) -> Value) -> Result<Value, String>
where
    Vec<Option<T>>: Decode<'r, Postgres>,
{
    let items: Vec<Option<T>> = pg_decode(raw)?;
    Ok(Value::Array(
        items
            .into_iter()
            .map(|item| item.map_or(Value::Null, each))
            .collect(),
    ))
}

fn rfc3339(at: chrono::DateTime<chrono::Utc>) -> String {
    at.to_rfc3339_opts(chrono::SecondsFormat::AutoSi, true)
}

/// One Postgres value as JSON, by its type (its column's).
fn pg_value(raw: PgValueRef<'_>, type_info: &PgTypeInfo) -> Result<Value, String> {
    use chrono::{DateTime, NaiveDate, NaiveDateTime, NaiveTime, Utc};
    if raw.is_null() {
        return Ok(Value::Null);
    }
    Ok(match type_info.name() {
        "BOOL" => Value::Bool(pg_decode(raw)?),
        "INT2" => json!(pg_decode::<i16>(raw)?),
        "INT4" => json!(pg_decode::<i32>(raw)?),
        "INT8" => json!(pg_decode::<i64>(raw)?),
        "OID" => json!(pg_decode::<sqlx::postgres::types::Oid>(raw)?.0),
        "FLOAT4" => f64_json(f64::from(pg_decode::<f32>(raw)?)),
        "FLOAT8" => f64_json(pg_decode::<f64>(raw)?),
        "NUMERIC" => Value::String(match raw.format() {
            PgValueFormat::Binary => numeric_text(raw.as_bytes().map_err(|e| e.to_string())?)?,
            PgValueFormat::Text => raw.as_str().map_err(|e| e.to_string())?.to_string(),
        }),
        // `CHAR` is bpchar, `char(n)`; `"CHAR"` is the one-byte internal type.
        "TEXT" | "VARCHAR" | "CHAR" | "NAME" | "UNKNOWN" => {
            Value::String(raw.as_str().map_err(|e| e.to_string())?.to_string())
        }
        "\"CHAR\"" => {
            let c = pg_decode::<i8>(raw)?;
            Value::String(char::from(c.to_ne_bytes()[0]).to_string())
        }
        "JSON" | "JSONB" => pg_decode::<Value>(raw)?,
        "UUID" => Value::String(pg_decode::<uuid::Uuid>(raw)?.to_string()),
        "TIMESTAMPTZ" => Value::String(rfc3339(pg_decode::<DateTime<Utc>>(raw)?)),
        "TIMESTAMP" => Value::String(
            pg_decode::<NaiveDateTime>(raw)?
                .format("%Y-%m-%dT%H:%M:%S%.f")
                .to_string(),
        ),
        "DATE" => Value::String(pg_decode::<NaiveDate>(raw)?.to_string()),
        "TIME" => Value::String(pg_decode::<NaiveTime>(raw)?.to_string()),
        "BYTEA" => Value::String(base64(&pg_decode::<Vec<u8>>(raw)?)),
        "VOID" => Value::Null,
        "BOOL[]" => pg_array::<bool>(raw, Value::Bool)?,
        "INT2[]" => pg_array::<i16>(raw, |v| json!(v))?,
        "INT4[]" => pg_array::<i32>(raw, |v| json!(v))?,
        "INT8[]" => pg_array::<i64>(raw, |v| json!(v))?,
        "FLOAT4[]" => pg_array::<f32>(raw, |v| f64_json(f64::from(v)))?,
        "FLOAT8[]" => pg_array::<f64>(raw, f64_json)?,
        "TEXT[]" | "VARCHAR[]" | "CHAR[]" | "NAME[]" => pg_array::<String>(raw, Value::String)?,
        "UUID[]" => pg_array::<uuid::Uuid>(raw, |v| Value::String(v.to_string()))?,
        "JSON[]" | "JSONB[]" => pg_array::<Value>(raw, |v| v)?,
        "TIMESTAMPTZ[]" => pg_array::<DateTime<Utc>>(raw, |v| Value::String(rfc3339(v)))?,
        other => {
            // Enums, and extension types whose binary form is their text.
            let textual = matches!(type_info.kind(), PgTypeKind::Enum(_))
                || raw.format() == PgValueFormat::Text
                || ["citext", "xml"].contains(&other.to_ascii_lowercase().as_str());
            if textual {
                Value::String(raw.as_str().map_err(|e| e.to_string())?.to_string())
            } else {
                return Err(format!(
                    "type {other} has no JSON mapping in awl; cast the column to text in the query \
                     (`column::text`)"
                ));
            }
        }
    })
}

/// A `numeric` in Postgres's binary format, as exact decimal text.
///
/// The format: digit count, weight (of the first base-10000 digit), sign, display
/// scale, then the base-10000 digits, all big-endian 16-bit.
pub(super) fn numeric_text(bytes: &[u8]) -> Result<String, String> {
    let word = |i: usize| -> Result<u16, String> {
        bytes
            .get(i * 2..i * 2 + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
            .ok_or_else(|| "a numeric value is shorter than its header says".to_string())
    };
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(1)? as i16);
    let sign = word(2)?;
    let dscale = usize::from(word(3)?);
    let digits = (0..ndigits)
        .map(|i| word(4 + i))
        .collect::<Result<Vec<u16>, String>>()?;
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => return Ok("NaN".into()),
        0xD000 => return Ok("Infinity".into()),
        0xF000 => return Ok("-Infinity".into()),
        other => return Err(format!("a numeric value has an unknown sign {other:#x}")),
    }
    let digit = |i: i64| -> u16 {
        usize::try_from(i)
            .ok()
            .and_then(|i| digits.get(i).copied())
            .unwrap_or(0)
    };
    let mut text = String::new();
    if sign == 0x4000 {
        text.push('-');
    }
    if weight < 0 {
        text.push('0');
    } else {
        for i in 0..=weight {
            if i == 0 {
                text.push_str(&digit(i).to_string());
            } else {
                text.push_str(&format!("{:04}", digit(i)));
            }
        }
    }
    if dscale > 0 {
        let mut fraction = String::with_capacity(dscale + 4);
        let mut i = weight + 1;
        while fraction.len() < dscale {
            fraction.push_str(&format!("{:04}", digit(i)));
            i += 1;
        }
        fraction.truncate(dscale);
        text.push('.');
        text.push_str(&fraction);
    }
    Ok(text)
}

fn sqlite_row(row: &SqliteRow) -> Result<Map<String, Value>, StepFailure> {
    let mut out = Map::new();
    for (i, column) in row.columns().iter().enumerate() {
        let declared = column.type_info().name();
        let value = row
            .try_get_raw(i)
            .map_err(|e| e.to_string())
            .and_then(|raw| sqlite_value(raw, declared))
            .map_err(|e| column_failure(column.name(), declared, e))?;
        out.insert(column.name().to_string(), value);
    }
    Ok(out)
}

/// One SQLite value as JSON, by its storage class (and `BOOLEAN` columns as
/// booleans).
fn sqlite_value(raw: SqliteValueRef<'_>, declared: &str) -> Result<Value, String> {
    if raw.is_null() {
        return Ok(Value::Null);
    }
    let storage = raw.type_info().into_owned();
    let decode_err = |e: sqlx::error::BoxDynError| e.to_string();
    Ok(match storage.name() {
        "INTEGER" | "BOOLEAN" => {
            let n = <i64 as Decode<Sqlite>>::decode(raw).map_err(decode_err)?;
            if declared.eq_ignore_ascii_case("BOOLEAN") {
                Value::Bool(n != 0)
            } else {
                json!(n)
            }
        }
        "REAL" => f64_json(<f64 as Decode<Sqlite>>::decode(raw).map_err(decode_err)?),
        "BLOB" => Value::String(base64(
            &<Vec<u8> as Decode<Sqlite>>::decode(raw).map_err(decode_err)?,
        )),
        _ => Value::String(<String as Decode<Sqlite>>::decode(raw).map_err(decode_err)?),
    })
}

#[cfg(test)]
mod tests;
