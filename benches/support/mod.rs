//! What the benchmarks share: the Postgres admin URL, a fresh store per measurement
//! (its database or file removed afterwards), and percentiles.

use awl::store::{EventStore, StoreLocation, StoreOptions};
use sqlx::Connection;

/// The admin URL the benchmarks create and drop their Postgres databases with:
/// `AWL_BENCH_DATABASE_URL`, else `DATABASE_URL` if it is a Postgres URL, else the
/// local server.
pub fn admin_url() -> String {
    std::env::var("AWL_BENCH_DATABASE_URL")
        .or_else(|_| std::env::var("DATABASE_URL"))
        .ok()
        .filter(|u| u.starts_with("postgres"))
        .unwrap_or_else(|| "postgres://postgres@127.0.0.1:5432/postgres".into())
}

/// A store on its own fresh database (`kind` "postgres") or SQLite file (any other
/// `kind`), removed when this is dropped.
pub struct Fresh {
    pub store: EventStore,
    #[allow(dead_code, reason = "the event_log benchmark needs only the store")]
    pub location: StoreLocation,
    /// Removes the database or file when dropped (after the store, declared first).
    _guard: Box<dyn std::any::Any>,
}

pub async fn fresh(kind: &str, admin_url: &str, options: StoreOptions) -> Fresh {
    let (location, guard): (_, Box<dyn std::any::Any>) = match kind {
        "postgres" => {
            let name = format!("awl_bench_{}", uuid::Uuid::new_v4().simple());
            let mut admin = sqlx::PgConnection::connect(admin_url)
                .await
                .expect("connect to Postgres");
            sqlx::query(sqlx::AssertSqlSafe(format!("CREATE DATABASE {name}")))
                .execute(&mut admin)
                .await
                .expect("create bench database");
            let base = admin_url.rsplit_once('/').map_or(admin_url, |(b, _)| b);
            let location = StoreLocation::Postgres(format!("{base}/{name}"));
            let guard = DropDb {
                admin: admin_url.to_string(),
                name,
            };
            (location, Box::new(guard))
        }
        _ => {
            let dir = tempfile::tempdir().expect("temp dir");
            let location = StoreLocation::sqlite(dir.path().join("bench.db"));
            (location, Box::new(dir))
        }
    };
    let store = EventStore::open(&location, options).await.expect("open");
    Fresh {
        store,
        location,
        _guard: guard,
    }
}

/// Drops a bench database when dropped.
struct DropDb {
    admin: String,
    name: String,
}

impl Drop for DropDb {
    fn drop(&mut self) {
        let (admin, name) = (self.admin.clone(), self.name.clone());
        // Drop may run inside the benchmark's runtime: use a thread with its own.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("rt");
            rt.block_on(async move {
                if let Ok(mut c) = sqlx::PgConnection::connect(&admin).await {
                    let _ = sqlx::query(sqlx::AssertSqlSafe(format!(
                        "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
                    )))
                    .execute(&mut c)
                    .await;
                }
            });
        })
        .join();
    }
}

/// The value at fraction `p` (0 to 1) of `sorted`.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}
