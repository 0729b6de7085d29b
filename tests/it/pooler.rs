//! awl through PgBouncer in transaction mode (issue 18): a real PgBouncer (1.21 or
//! later, `max_prepared_statements` on; `scripts/test` builds Debian's 1.24 when the
//! machine has none and names it in AWL_TEST_PGBOUNCER) in front of the test's
//! database. Two `awl worker`s and the runs' starts go through it; what needs a session
//! of its own (the LISTEN connection, the migrations' lock) goes to the database's own
//! address given as `--session-database-url`. Every run finishes with each step
//! recorded once, the LISTEN connection is the session one, and no advisory lock is
//! left behind. Postgres only: a pooler is a Postgres thing.

use std::process::Stdio;

use awl::log::{StreamRef, StreamType};
use awl::store::StoreLocation;
use sqlx::Connection;

use crate::support::cli::Awl;
use crate::support::server::free_port;
use crate::support::{Backend, TestStore, poll};

const LIMIT: u64 = 90;

const THREE_STEPS: &str = r#"
name: pooled
version: "1.0.0"
steps:
  - {id: one, type: tool, tool: noop}
  - {id: two, type: tool, tool: sleep, inputs: {seconds: 0}}
  - {id: three, type: tool, tool: echo, inputs: {message: "done"}}
"#;

fn pgbouncer() -> String {
    std::env::var("AWL_TEST_PGBOUNCER").unwrap_or_else(|_| {
        panic!(
            "AWL_TEST_PGBOUNCER is not set: the pooler test runs a PgBouncer 1.21 or later, \
             which scripts/test provides (Debian's, or built from Debian's source). Run the \
             tests with scripts/test."
        )
    })
}

/// A PgBouncer in transaction mode in front of `database`'s server, on a free port;
/// killed when dropped.
struct Bouncer {
    child: tokio::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Bouncer {
    async fn start(database: &reqwest::Url) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let port = free_port();
        let host = database.host_str().expect("a host");
        let db_port = database.port().unwrap_or(5432);
        let user = database.username();
        std::fs::write(dir.path().join("users.txt"), format!("\"{user}\" \"\"\n"))
            .expect("write users");
        // PgBouncer refuses to run as root: started as root, it becomes `postgres`.
        let as_user = if is_root() { "user = postgres\n" } else { "" };
        let ini = format!(
            "[databases]\n* = host={host} port={db_port}\n\n[pgbouncer]\n\
             listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n\
             auth_type = trust\nauth_file = {users}\npool_mode = transaction\n\
             max_prepared_statements = 200\nmax_client_conn = 200\ndefault_pool_size = 10\n\
             ignore_startup_parameters = extra_float_digits,options\n{as_user}",
            users = dir.path().join("users.txt").display(),
        );
        let config = dir.path().join("pgbouncer.ini");
        std::fs::write(&config, ini).expect("write pgbouncer.ini");
        // Readable by `postgres` after PgBouncer changes to it.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
            .expect("open the config's folder");
        let child = tokio::process::Command::new(pgbouncer())
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start pgbouncer");
        let answers = poll(20, async || {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        assert!(answers.is_some(), "PgBouncer never listened on {port}");
        Bouncer {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for Bouncer {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
    }
}

fn is_root() -> bool {
    std::process::Command::new("id")
        .arg("-u")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
        .unwrap_or(false)
}

/// `url` with `application_name` set, so that pg_stat_activity tells the connections
/// apart.
fn named(url: &reqwest::Url, name: &str) -> String {
    let mut url = url.clone();
    url.query_pairs_mut().append_pair("application_name", name);
    url.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_run_through_pgbouncer_in_transaction_mode() {
    let t = TestStore::new(Backend::Postgres).await;
    let StoreLocation::Postgres(direct) = &t.location else {
        unreachable!("a Postgres store")
    };
    let direct_url = reqwest::Url::parse(direct).expect("the store's URL");
    let bouncer = Bouncer::start(&direct_url).await;
    let mut pooled_url = direct_url.clone();
    pooled_url.set_port(Some(bouncer.port)).expect("a port");
    let pooled = named(&pooled_url, "awl-pooled");
    let session = named(&direct_url, "awl-session");
    let awl = Awl::bounded(&StoreLocation::Postgres(pooled.clone()), LIMIT);
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("pooled.yaml");
    std::fs::write(&file, THREE_STEPS).expect("write the workflow");
    let file = file.to_str().expect("utf-8 path");

    let with_session = |args: &[&str]| -> Vec<String> {
        ["--session-database-url", session.as_str()]
            .iter()
            .chain(args)
            .map(|s| s.to_string())
            .collect()
    };
    let args = with_session(&["migrate"]);
    awl.ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
        .await;
    let args = with_session(&["--db-pool", "4"]);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _workers = [
        awl.worker(dir.path().join("w1.log"), &args),
        awl.worker(dir.path().join("w2.log"), &args),
    ];
    let mut runs = Vec::new();
    for _ in 0..12 {
        let args = with_session(&["run", "--detach", file]);
        let started = awl
            .ok(&args.iter().map(String::as_str).collect::<Vec<_>>())
            .await;
        runs.push(started.trim().to_string());
    }
    for run in &runs {
        let stream = StreamRef::new(StreamType::Run, run.as_str());
        let finished = poll(LIMIT, async || {
            let events = t.store.read_stream(&stream).await.ok()?;
            events
                .iter()
                .any(|e| e.event_type == "run.completed")
                .then_some(events)
        })
        .await;
        let events = finished.unwrap_or_else(|| {
            let logs: String = ["w1.log", "w2.log"]
                .iter()
                .map(|f| std::fs::read_to_string(dir.path().join(f)).unwrap_or_default())
                .collect();
            panic!("run {run} did not complete through PgBouncer: {logs}")
        });
        for step in ["one", "two", "three"] {
            let succeeded = events
                .iter()
                .filter(|e| e.event_type == "run.step_succeeded" && e.payload["step_id"] == step)
                .count();
            assert_eq!(succeeded, 1, "run {run} step {step}");
        }
    }

    let mut conn = sqlx::PgConnection::connect(direct)
        .await
        .expect("connect directly");
    let database = direct_url.path().trim_start_matches('/').to_string();
    let listeners: Vec<String> = sqlx::query_scalar(
        "SELECT application_name FROM pg_stat_activity \
         WHERE datname = $1 AND query ILIKE 'LISTEN%'",
    )
    .bind(&database)
    .fetch_all(&mut conn)
    .await
    .expect("read pg_stat_activity");
    assert!(
        !listeners.is_empty() && listeners.iter().all(|n| n == "awl-session"),
        "the workers listen on their session connection, not through the pooler: {listeners:?}"
    );
    let locks: i64 = sqlx::query_scalar(
        "SELECT count(*) FROM pg_locks l JOIN pg_database d ON d.oid = l.database \
         WHERE l.locktype = 'advisory' AND d.datname = $1",
    )
    .bind(&database)
    .fetch_one(&mut conn)
    .await
    .expect("read pg_locks");
    assert_eq!(locks, 0, "no advisory lock is left behind");
}
