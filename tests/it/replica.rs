//! Views served from a streaming replica (`awl serve --read-database-url`): a cluster
//! of the test's own and a real standby of it (`pg_basebackup -R`), `awl serve` as a
//! child process. Replay paused on the standby shows that the views come from there
//! while runs, checkpoints and `/ready`'s own checks stay on the primary; a URL that is
//! not a replica of the store is refused at start, saying why. Postgres only: a
//! replica is a Postgres thing (the SQLite store refuses the option).

use std::process::Stdio;

use awl::store::StoreLocation;
use reqwest::{Method, StatusCode};
use serde_json::Value;
use sqlx::Connection;

use crate::support::cli::Awl;
use crate::support::cluster::Cluster;
use crate::support::server::{Api, free_port};
use crate::support::wait_for;

const LIMIT: u64 = 60;

const QUICK: &str = r#"
name: quick
version: "1.0.0"
steps:
  - {id: one, type: tool, tool: noop}
"#;

/// The run ids the runs view lists.
async fn listed(api: &Api) -> Vec<String> {
    let page = api.fetch(None, "/api/v1/views/runs?limit=100").await;
    page["rows"]
        .as_array()
        .map(|rows| {
            rows.iter()
                .filter(|r| r["status"] == "SUCCEEDED")
                .filter_map(|r| r["run_id"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

async fn on_replica(url: &str, sql: &'static str) {
    let mut conn = sqlx::PgConnection::connect(url)
        .await
        .expect("connect to the replica");
    sqlx::query(sql)
        .execute(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{sql} on the replica: {e}"));
}

fn check<'a>(readiness: &'a Value, name: &str) -> &'a Value {
    readiness["checks"]
        .as_array()
        .and_then(|checks| checks.iter().find(|c| c["name"] == name))
        .unwrap_or_else(|| panic!("no {name} check in {readiness}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn views_are_read_from_a_streaming_replica() {
    let primary = Cluster::start();
    let replica = primary.replica();
    let location = StoreLocation::Postgres(primary.url("postgres"));
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("quick.awl.yaml"), QUICK).expect("write the workflow");
    let awl = Awl::unbounded(&location);
    // The schema exists on the primary (and so, once replayed, on the replica)
    // before the server checks the replica's migrations.
    awl.ok(&["migrate"]).await;
    let port = free_port();
    let serve_log = std::fs::File::create(dir.path().join("serve.log")).expect("log file");
    let _serve = awl
        .command(&[
            "serve",
            "--bind",
            &format!("127.0.0.1:{port}"),
            "--workflows",
            &dir.path().to_string_lossy(),
            "--read-database-url",
            &replica.url("postgres"),
            "--ready-max-lag",
            "0",
        ])
        .stdout(Stdio::null())
        .stderr(serve_log)
        .spawn()
        .expect("start awl serve");
    let api = Api::at(format!("http://127.0.0.1:{port}"));
    api.wait_healthy(30).await;
    let serve_log = || std::fs::read_to_string(dir.path().join("serve.log")).unwrap_or_default();

    // A run's row reaches the view through the primary's projection and the replica.
    let first = api.start_run("quick").await;
    wait_for(
        LIMIT,
        "the first run in the replica's runs view",
        async || listed(&api).await.contains(&first).then_some(()),
    )
    .await;
    let ready = wait_for(LIMIT, "/ready with the replica caught up", async || {
        let (status, body) = api.call(None, Method::GET, "/ready", None).await;
        (status == StatusCode::OK).then_some(body)
    })
    .await;
    let read = check(&ready, "read_database");
    assert_eq!(read["ok"], true, "{ready}");
    assert!(
        read["detail"]
            .as_str()
            .unwrap_or_default()
            .starts_with("a standby 0 events behind"),
        "{ready}"
    );

    // Replay paused on the standby: the run finishes on the primary, its projection
    // applies it there, and the view (read from the standby) does not have it.
    on_replica(&replica.url("postgres"), "SELECT pg_wal_replay_pause()").await;
    let second = api.start_run("quick").await;
    wait_for(
        LIMIT,
        "the second run to succeed on the primary",
        async || {
            let run = api.fetch(None, &format!("/api/v1/runs/{second}")).await;
            (run["status"] == "SUCCEEDED").then_some(())
        },
    )
    .await;
    let head = awl::store::EventStore::open(&location, awl::store::StoreOptions::default())
        .await
        .expect("open the primary")
        .head()
        .await
        .expect("the head");
    wait_for(
        LIMIT,
        "the runs projection to apply the second run",
        async || {
            let all = api.fetch(None, "/api/v1/projections").await;
            let runs = all
                .as_array()?
                .iter()
                .find(|p| p["name"] == "runs")?
                .clone();
            (runs["position"].as_i64()? >= head).then_some(())
        },
    )
    .await;
    assert!(
        !listed(&api).await.contains(&second),
        "the view shows a run the paused replica has not replayed: it was not read from \
         the replica\n{}",
        serve_log()
    );
    let (status, not_ready) = api.call(None, Method::GET, "/ready", None).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "{not_ready}");
    let read = check(&not_ready, "read_database");
    assert_eq!(read["ok"], false, "{not_ready}");
    assert!(
        read["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("events behind the log"),
        "{not_ready}"
    );
    assert_eq!(check(&not_ready, "projections")["ok"], true, "{not_ready}");

    // Replay resumed: the view catches up, and so does readiness.
    on_replica(&replica.url("postgres"), "SELECT pg_wal_replay_resume()").await;
    wait_for(
        LIMIT,
        "the second run in the replica's runs view",
        async || listed(&api).await.contains(&second).then_some(()),
    )
    .await;
    wait_for(LIMIT, "/ready again", async || {
        let (status, _) = api.call(None, Method::GET, "/ready", None).await;
        (status == StatusCode::OK).then_some(())
    })
    .await;
    // The timeline is a view too.
    let timeline = api
        .fetch(None, &format!("/api/v1/views/runs/{second}/timeline"))
        .await;
    assert_eq!(timeline["run"]["run_id"], second.as_str(), "{timeline}");
    assert_eq!(timeline["steps"][0]["step_id"], "one", "{timeline}");
}

/// A read URL that is not a replica of the store (another database of the same
/// cluster), or given to the embedded store, stops `awl serve` at start with why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_database_that_is_not_a_replica_is_refused() {
    let primary = Cluster::start();
    let mut admin = sqlx::PgConnection::connect(&primary.url("postgres"))
        .await
        .expect("connect");
    sqlx::query("CREATE DATABASE other")
        .execute(&mut admin)
        .await
        .expect("create another database");
    let location = StoreLocation::Postgres(primary.url("postgres"));
    let awl = Awl::bounded(&location, 30);
    awl.ok(&["migrate"]).await;
    let port = free_port().to_string();
    let bind = format!("127.0.0.1:{port}");
    let other = primary.url("other");
    let out = awl
        .output(&["serve", "--bind", &bind, "--read-database-url", &other])
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "serve started with another database: {stderr}"
    );
    assert!(
        stderr.contains("not a replica of the store")
            && stderr.contains("\"postgres\"")
            && stderr.contains("\"other\""),
        "{stderr}"
    );

    let dir = tempfile::tempdir().expect("temp dir");
    let lite = Awl::bounded(&StoreLocation::sqlite(dir.path().join("awl.db")), 30);
    let out = lite
        .output(&[
            "serve",
            "--bind",
            &bind,
            "--read-database-url",
            &primary.url("postgres"),
        ])
        .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success(),
        "serve started on SQLite with a replica: {stderr}"
    );
    assert!(stderr.contains("must be postgres:// URLs"), "{stderr}");
}
