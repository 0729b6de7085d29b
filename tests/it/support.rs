//! Test fixtures: a store on a fresh database of either backend, bounded waits, and
//! (in [`cli`]) the `awl` binary as a child process, (in [`server`]) a server in this
//! process with an API client and tokens, and (in [`events`]) readers of a run's
//! events.

pub mod chat;
pub mod cli;
pub mod cluster;
pub mod events;
pub mod openai;
pub mod otlp;
pub mod proxy;
pub mod server;

use std::time::Duration;

use awl::log::{AppendRequest, ExpectedVersion, NewEvent, StreamRef, StreamType};
use awl::store::{EventStore, StoreLocation, StoreOptions};
use serde_json::json;
use sqlx::Connection;

/// `postgres::NAME` and `sqlite::NAME` tokio tests on a multi-threaded runtime of
/// `worker_threads` threads, for each listed `async fn NAME(Backend)` of the calling
/// module: the same tests on both stores.
macro_rules! on_both_stores {
    (worker_threads = $threads:tt; $($name:ident),* $(,)?) => {
        mod postgres {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $name() {
                    super::$name(crate::support::Backend::Postgres).await;
                }
            )*
        }
        mod sqlite {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = $threads)]
                async fn $name() {
                    super::$name(crate::support::Backend::Sqlite).await;
                }
            )*
        }
    };
}
pub(crate) use on_both_stores;

/// Which backend a conformance test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Postgres,
    Sqlite,
}

/// The admin URL used to create per-test Postgres databases.
pub fn admin_url() -> String {
    std::env::var("AWL_TEST_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .ok()
        .filter(|u| u.starts_with("postgres"))
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// Replace the database name in a Postgres URL.
fn with_database(url: &str, db: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((b, q)) => (b, Some(q)),
        None => (url, None),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let base = match base[scheme_end..].find('/') {
        Some(i) => &base[..scheme_end + i],
        None => base,
    };
    match query {
        Some(q) => format!("{base}/{db}?{q}"),
        None => format!("{base}/{db}"),
    }
}

/// A store on its own fresh database; the database is dropped with it.
pub struct TestStore {
    pub store: EventStore,
    pub location: StoreLocation,
    _dir: Option<tempfile::TempDir>,
    pg_database: Option<String>,
}

impl TestStore {
    pub async fn new(backend: Backend) -> Self {
        Self::with_options(backend, StoreOptions::default()).await
    }

    pub async fn with_options(backend: Backend, options: StoreOptions) -> Self {
        let (location, dir, pg_database) = match backend {
            Backend::Postgres => {
                let name = format!("awl_test_{}", uuid::Uuid::new_v4().simple());
                let admin = admin_url();
                let mut conn = sqlx::PgConnection::connect(&admin)
                    .await
                    .unwrap_or_else(|e| panic!("cannot reach Postgres at {admin}: {e}. Run the tests with scripts/test, which provides one."));
                sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                    .execute(&mut conn)
                    .await
                    .expect("create test database");
                (
                    StoreLocation::Postgres(with_database(&admin, &name)),
                    None,
                    Some(name),
                )
            }
            Backend::Sqlite => {
                let dir = tempfile::tempdir().expect("temp dir");
                let path = dir.path().join("awl.db");
                (StoreLocation::sqlite(path), Some(dir), None)
            }
        };
        let store = EventStore::open(&location, options)
            .await
            .expect("open the store");
        Self {
            store,
            location,
            _dir: dir,
            pg_database,
        }
    }

    /// Run `sql` on the test's Postgres database, outside the store's API (a setting,
    /// or a step the store must refuse): the database's error as text.
    pub async fn pg_execute(&self, sql: &str) -> Result<(), String> {
        use awl::store::TxConnection;
        let mut tx = self.store.begin().await.expect("begin");
        let TxConnection::Postgres(c) = tx.connection() else {
            panic!("pg_execute needs a Postgres store")
        };
        let done = sqlx::raw_sql(sqlx::AssertSqlSafe(sql.to_string()))
            .execute(&mut *c)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        if done.is_ok() {
            tx.commit().await.expect("commit");
        } else {
            tx.rollback().await.expect("rollback");
        }
        done
    }

    /// A second, independent store on the same database (a new pool, as another
    /// process would have).
    pub async fn reopen(&self) -> EventStore {
        EventStore::open(&self.location, StoreOptions::default())
            .await
            .expect("reopen the store")
    }
}

impl Drop for TestStore {
    fn drop(&mut self) {
        let Some(name) = self.pg_database.take() else {
            return;
        };
        let admin = admin_url();
        // Drop runs inside the test's runtime: use a thread with its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            rt.block_on(async move {
                if let Ok(mut conn) = sqlx::PgConnection::connect(&admin).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut conn)
                    .await;
                }
            });
        })
        .join();
    }
}

/// A stream of the given type with a readable id.
pub fn stream(kind: StreamType, id: impl Into<String>) -> StreamRef {
    StreamRef::new(kind, id)
}

/// `n` test events numbered from `from`.
pub fn events(from: usize, n: usize) -> Vec<NewEvent> {
    (from..from + n)
        .map(|i| NewEvent::new("test.happened", 1, json!({ "n": i })))
        .collect()
}

pub fn append(
    stream: &StreamRef,
    expected: ExpectedVersion,
    events: Vec<NewEvent>,
) -> AppendRequest {
    AppendRequest::new(stream.clone(), expected, events)
}

/// Wait for `fut`, failing the test after `secs` seconds rather than hanging.
pub async fn within<T>(secs: u64, what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out after {secs}s waiting for {what}"))
}

/// Call `probe` every 100 ms until it gives a value; `None` if `secs` seconds pass
/// first (for a test that still wants to look around before it fails).
pub async fn poll<T>(secs: u64, mut probe: impl AsyncFnMut() -> Option<T>) -> Option<T> {
    tokio::time::timeout(Duration::from_secs(secs), async {
        loop {
            if let Some(found) = probe().await {
                return found;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .ok()
}

/// Call `probe` every 100 ms until it gives a value, failing the test after `secs`
/// seconds rather than hanging.
pub async fn wait_for<T>(secs: u64, what: &str, probe: impl AsyncFnMut() -> Option<T>) -> T {
    poll(secs, probe)
        .await
        .unwrap_or_else(|| panic!("timed out after {secs}s waiting for {what}"))
}

/// Every event of type `event_type` in the log, in log order (up to 100,000).
pub async fn logged(
    store: &awl::store::EventStore,
    event_type: &str,
) -> Vec<awl::log::RecordedEvent> {
    let filter = awl::log::EventFilter {
        event_types: vec![event_type.to_string()],
        ..awl::log::EventFilter::default()
    };
    let (events, _) = store.read_page(0, 100_000, &filter).await.expect("the log");
    events
}

/// The value of the sample `name{labels...}` in a Prometheus text page.
pub fn sample(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .find(|l| {
            labels
                .iter()
                .all(|(k, v)| l.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}
