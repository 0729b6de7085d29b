//! Plain rows for read models: statements written once for both backends with `?`
//! placeholders (rewritten to `$1, $2, ...` for Postgres), typed parameters, and rows
//! read back as JSON objects. Projections and their queries use this; the log itself
//! never does.

use serde_json::{Map, Value};
use sqlx::{Column as _, Row, TypeInfo};

use super::backend::Backend;
use super::{EventStore, StoreError, StoreTx, TxConnection};

/// One bound value. Nulls carry their type so Postgres can check them.
#[derive(Debug, Clone, PartialEq)]
pub enum Param {
    Int(Option<i64>),
    Float(Option<f64>),
    Text(Option<String>),
}

impl From<i64> for Param {
    fn from(v: i64) -> Self {
        Param::Int(Some(v))
    }
}
impl From<Option<i64>> for Param {
    fn from(v: Option<i64>) -> Self {
        Param::Int(v)
    }
}
impl From<f64> for Param {
    fn from(v: f64) -> Self {
        Param::Float(Some(v))
    }
}
impl From<Option<f64>> for Param {
    fn from(v: Option<f64>) -> Self {
        Param::Float(v)
    }
}
impl From<&str> for Param {
    fn from(v: &str) -> Self {
        Param::Text(Some(v.to_string()))
    }
}
impl From<String> for Param {
    fn from(v: String) -> Self {
        Param::Text(Some(v))
    }
}
impl From<Option<String>> for Param {
    fn from(v: Option<String>) -> Self {
        Param::Text(v)
    }
}
impl From<Option<&str>> for Param {
    fn from(v: Option<&str>) -> Self {
        Param::Text(v.map(str::to_string))
    }
}

/// `?` placeholders to `$1, $2, ...` (outside quoted strings), for Postgres.
pub fn numbered(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut n = 0;
    let mut quoted = false;
    for c in sql.chars() {
        match c {
            '\'' => {
                quoted = !quoted;
                out.push(c);
            }
            '?' if !quoted => {
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            _ => out.push(c),
        }
    }
    out
}

macro_rules! bind_all {
    ($query:expr, $params:expr) => {{
        let mut q = $query;
        for p in $params {
            q = match p {
                Param::Int(v) => q.bind(*v),
                Param::Float(v) => q.bind(*v),
                Param::Text(v) => q.bind(v.as_deref()),
            };
        }
        q
    }};
}

fn pg_value(row: &sqlx::postgres::PgRow, i: usize) -> Result<Value, sqlx::Error> {
    let kind = row.columns()[i].type_info().name().to_ascii_uppercase();
    Ok(match kind.as_str() {
        "INT2" | "INT4" | "INT8" => row
            .try_get::<Option<i64>, _>(i)
            .or_else(|_| row.try_get::<Option<i32>, _>(i).map(|v| v.map(i64::from)))?
            .map_or(Value::Null, Value::from),
        "FLOAT4" | "FLOAT8" | "NUMERIC" => row
            .try_get::<Option<f64>, _>(i)?
            .map_or(Value::Null, Value::from),
        "BOOL" => row
            .try_get::<Option<bool>, _>(i)?
            .map_or(Value::Null, Value::from),
        _ => row
            .try_get::<Option<String>, _>(i)?
            .map_or(Value::Null, Value::from),
    })
}

fn sqlite_value(row: &sqlx::sqlite::SqliteRow, i: usize) -> Result<Value, sqlx::Error> {
    if let Ok(v) = row.try_get::<Option<i64>, _>(i) {
        return Ok(v.map_or(Value::Null, Value::from));
    }
    if let Ok(v) = row.try_get::<Option<f64>, _>(i) {
        return Ok(v.map_or(Value::Null, Value::from));
    }
    Ok(row
        .try_get::<Option<String>, _>(i)?
        .map_or(Value::Null, Value::from))
}

fn pg_rows(rows: Vec<sqlx::postgres::PgRow>) -> Result<Vec<Map<String, Value>>, sqlx::Error> {
    rows.iter()
        .map(|r| {
            (0..r.columns().len())
                .map(|i| Ok((r.columns()[i].name().to_string(), pg_value(r, i)?)))
                .collect()
        })
        .collect()
}

fn sqlite_rows(rows: Vec<sqlx::sqlite::SqliteRow>) -> Result<Vec<Map<String, Value>>, sqlx::Error> {
    rows.iter()
        .map(|r| {
            (0..r.columns().len())
                .map(|i| Ok((r.columns()[i].name().to_string(), sqlite_value(r, i)?)))
                .collect()
        })
        .collect()
}

impl EventStore {
    /// Rows of a read-model query, as JSON objects.
    pub async fn query_rows(
        &self,
        sql: &str,
        params: &[Param],
    ) -> Result<Vec<Map<String, Value>>, StoreError> {
        let what = "querying a read model";
        match self.backend() {
            Backend::Postgres(b) => {
                let text = numbered(sql);
                let rows = bind_all!(sqlx::query(sqlx::AssertSqlSafe(text)), params)
                    .fetch_all(b.pool())
                    .await
                    .map_err(StoreError::db(what))?;
                pg_rows(rows).map_err(StoreError::db(what))
            }
            Backend::Sqlite(b) => {
                let rows = bind_all!(sqlx::query(sqlx::AssertSqlSafe(sql.to_string())), params)
                    .fetch_all(b.reader())
                    .await
                    .map_err(StoreError::db(what))?;
                sqlite_rows(rows).map_err(StoreError::db(what))
            }
        }
    }

    /// Run statements outside a transaction (DDL of read models).
    pub async fn execute_sql(&self, sql: &str) -> Result<(), StoreError> {
        let mut tx = self.begin().await?;
        tx.execute_batch(sql).await?;
        tx.commit().await
    }
}

impl StoreTx {
    /// Run one statement in this transaction; the number of rows it changed.
    pub async fn execute(&mut self, sql: &str, params: &[Param]) -> Result<u64, StoreError> {
        let what = "writing a read model";
        match self.connection() {
            TxConnection::Postgres(c) => {
                bind_all!(sqlx::query(sqlx::AssertSqlSafe(numbered(sql))), params)
                    .execute(c)
                    .await
                    .map(|r| r.rows_affected())
            }
            TxConnection::Sqlite(c) => {
                bind_all!(sqlx::query(sqlx::AssertSqlSafe(sql.to_string())), params)
                    .execute(c)
                    .await
                    .map(|r| r.rows_affected())
            }
        }
        .map_err(StoreError::db(what))
    }

    /// Several `;`-separated statements without parameters (DDL).
    pub async fn execute_batch(&mut self, sql: &str) -> Result<(), StoreError> {
        for statement in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            self.execute(statement, &[]).await?;
        }
        Ok(())
    }

    /// Rows of a query in this transaction, as JSON objects.
    pub async fn query_rows(
        &mut self,
        sql: &str,
        params: &[Param],
    ) -> Result<Vec<Map<String, Value>>, StoreError> {
        let what = "reading a read model";
        match self.connection() {
            TxConnection::Postgres(c) => {
                let rows = bind_all!(sqlx::query(sqlx::AssertSqlSafe(numbered(sql))), params)
                    .fetch_all(c)
                    .await
                    .map_err(StoreError::db(what))?;
                pg_rows(rows).map_err(StoreError::db(what))
            }
            TxConnection::Sqlite(c) => {
                let rows = bind_all!(sqlx::query(sqlx::AssertSqlSafe(sql.to_string())), params)
                    .fetch_all(c)
                    .await
                    .map_err(StoreError::db(what))?;
                sqlite_rows(rows).map_err(StoreError::db(what))
            }
        }
    }
}

/// One column of many rows, for [`StoreTx::insert_unnest`].
#[derive(Debug, Clone, PartialEq)]
pub enum Column {
    Int(Vec<Option<i64>>),
    Float(Vec<Option<f64>>),
    Text(Vec<Option<String>>),
}

impl Column {
    /// Whether `rows` can be written as columns: every row as wide as the first, each
    /// column of one type.
    pub fn fit(rows: &[Vec<Param>]) -> bool {
        let Some(first) = rows.first() else {
            return true;
        };
        rows.iter().all(|row| {
            row.len() == first.len()
                && row
                    .iter()
                    .zip(first)
                    .all(|(a, b)| std::mem::discriminant(a) == std::mem::discriminant(b))
        })
    }

    /// `rows` as columns (see [`Column::fit`]: a value of another type than its
    /// column's first is written as null).
    pub fn of_rows(rows: Vec<Vec<Param>>) -> Vec<Column> {
        let Some(first) = rows.first() else {
            return Vec::new();
        };
        let mut columns: Vec<Column> = first
            .iter()
            .map(|p| match p {
                Param::Int(_) => Column::Int(Vec::with_capacity(rows.len())),
                Param::Float(_) => Column::Float(Vec::with_capacity(rows.len())),
                Param::Text(_) => Column::Text(Vec::with_capacity(rows.len())),
            })
            .collect();
        for row in rows {
            for (column, p) in columns.iter_mut().zip(row) {
                match (column, p) {
                    (Column::Int(c), Param::Int(v)) => c.push(v),
                    (Column::Float(c), Param::Float(v)) => c.push(v),
                    (Column::Text(c), Param::Text(v)) => c.push(v),
                    (Column::Int(c), _) => c.push(None),
                    (Column::Float(c), _) => c.push(None),
                    (Column::Text(c), _) => c.push(None),
                }
            }
        }
        columns
    }

    fn array_type(&self) -> &'static str {
        match self {
            Column::Int(_) => "bigint[]",
            Column::Float(_) => "double precision[]",
            Column::Text(_) => "text[]",
        }
    }
}

impl StoreTx {
    /// Postgres: run `sql`, an `INSERT INTO t (...) {rows} ON CONFLICT ...`, with
    /// `{rows}` the rows given as one array per column (`SELECT * FROM unnest(...)`):
    /// a few parameters however many rows, where a `VALUES` list binds and parses one
    /// per value. `None` on SQLite, which has no arrays (write `VALUES` there).
    pub async fn insert_unnest(
        &mut self,
        sql: &str,
        columns: Vec<Column>,
    ) -> Result<Option<u64>, StoreError> {
        let TxConnection::Postgres(c) = self.connection() else {
            return Ok(None);
        };
        let arrays: Vec<String> = columns
            .iter()
            .enumerate()
            .map(|(i, column)| format!("${}::{}", i + 1, column.array_type()))
            .collect();
        let text = sql.replace(
            "{rows}",
            &format!("SELECT * FROM unnest({})", arrays.join(", ")),
        );
        let mut q = sqlx::query(sqlx::AssertSqlSafe(text));
        for column in columns {
            q = match column {
                Column::Int(v) => q.bind(v),
                Column::Float(v) => q.bind(v),
                Column::Text(v) => q.bind(v),
            };
        }
        q.execute(c)
            .await
            .map(|r| Some(r.rows_affected()))
            .map_err(StoreError::db("writing a read model"))
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn placeholders_are_numbered_outside_strings() {
        assert_eq!(
            super::numbered("SELECT ? , '?' FROM t WHERE a = ? AND b = 'x?y'"),
            "SELECT $1 , '?' FROM t WHERE a = $2 AND b = 'x?y'"
        );
    }
}
