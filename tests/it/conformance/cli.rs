//! The `awl` binary, driven as a user drives it: `awl migrate` and `awl events`
//! (filters, `--json`, `--follow`) against both stores.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use awl::log::{ExpectedVersion, NewEvent, StreamType};
use awl::store::{StoreLocation, StoreOptions};
use serde_json::{Value, json};
use sqlx::Connection;
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::cli::{Awl, json_lines};
use crate::support::{Backend, TestStore, append, stream, within};

/// Three streams of two types, with an actor on one event.
async fn fill(t: &TestStore) {
    let run = stream(StreamType::Run, "r-1");
    let task = stream(StreamType::Task, "t-1");
    t.store
        .append(append(
            &run,
            ExpectedVersion::NoStream,
            vec![
                NewEvent::new("run.started", 1, json!({"workflow": "deploy"})),
                NewEvent::new("run.step_scheduled", 1, json!({"step_id": "build"})),
            ],
        ))
        .await
        .expect("append run");
    let mut queued = NewEvent::new("task.queued", 1, json!({"prompt": "add a health check"}));
    queued.metadata.actor = Some("user:ada".into());
    t.store
        .append(append(&task, ExpectedVersion::NoStream, vec![queued]))
        .await
        .expect("append task");
    t.store
        .append(append(
            &run,
            ExpectedVersion::Exactly(2),
            vec![NewEvent::new("run.completed", 1, json!({}))],
        ))
        .await
        .expect("append run");
}

/// The migrations recorded in the store's database, in order: version, checksum and
/// when it was installed; `None` if nothing was ever migrated there.
async fn applied_migrations(location: &StoreLocation) -> Option<Vec<(i64, Vec<u8>, String)>> {
    match location {
        StoreLocation::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            let exists: bool =
                sqlx::query_scalar("SELECT to_regclass('_sqlx_migrations') IS NOT NULL")
                    .fetch_one(&mut conn)
                    .await
                    .expect("look for the migrations table");
            if !exists {
                return None;
            }
            let rows = sqlx::query_as(
                "SELECT version, checksum, installed_on::text FROM _sqlx_migrations \
                  WHERE success ORDER BY version",
            )
            .fetch_all(&mut conn)
            .await
            .expect("read the migrations table");
            Some(rows)
        }
        StoreLocation::Sqlite(path) => {
            let url = format!("sqlite://{}", path.display());
            let mut conn = sqlx::SqliteConnection::connect(&url).await.expect("open");
            let tables: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = '_sqlx_migrations'",
            )
            .fetch_one(&mut conn)
            .await
            .expect("look for the migrations table");
            if tables == 0 {
                return None;
            }
            let rows = sqlx::query_as(
                "SELECT version, checksum, CAST(installed_on AS TEXT) FROM _sqlx_migrations \
                  WHERE success ORDER BY version",
            )
            .fetch_all(&mut conn)
            .await
            .expect("read the migrations table");
            Some(rows)
        }
    }
}

pub async fn migrate_is_idempotent_from_the_command_line(backend: Backend) {
    // A database nothing has migrated yet, so the command itself does the work.
    let unmigrated = StoreOptions {
        migrate: false,
        ..StoreOptions::default()
    };
    let t = TestStore::with_options(backend, unmigrated).await;
    assert_eq!(
        applied_migrations(&t.location).await,
        None,
        "a fresh database"
    );
    let folder = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("migrations")
        .join(t.location.backend_name());
    let files = std::fs::read_dir(&folder)
        .expect("list the migrations")
        .filter(|e| {
            e.as_ref()
                .is_ok_and(|e| e.path().extension() == Some("sql".as_ref()))
        })
        .count();
    let every_version: Vec<i64> = (1..=files as i64).collect();

    let awl = Awl::unbounded(&t.location);
    let mut first_run = None;
    for _ in 0..2 {
        let out = awl.ok(&["migrate"]).await;
        assert!(out.starts_with("migrated "), "unexpected output: {out}");
        let applied = applied_migrations(&t.location)
            .await
            .expect("awl migrate recorded what it applied");
        let versions: Vec<i64> = applied.iter().map(|(v, _, _)| *v).collect();
        assert_eq!(versions, every_version, "every migration, once");
        // The second run applies nothing again.
        assert_eq!(first_run.get_or_insert_with(|| applied.clone()), &applied);
    }
}

pub async fn events_prints_the_log_filtered(backend: Backend) {
    let t = TestStore::new(backend).await;
    fill(&t).await;
    let awl = Awl::unbounded(&t.location);

    let all = json_lines(&awl.ok(&["events", "--json"]).await);
    let positions: Vec<i64> = all
        .iter()
        .map(|e| e["position"].as_i64().unwrap())
        .collect();
    assert_eq!(positions, vec![1, 2, 3, 4]);
    assert_eq!(all[2]["event_type"], "task.queued");
    assert_eq!(all[2]["metadata"]["actor"], "user:ada");
    assert_eq!(all[2]["payload"]["prompt"], "add a health check");

    let runs = json_lines(&awl.ok(&["events", "--json", "--stream-type", "run"]).await);
    let types: Vec<&str> = runs
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        vec!["run.started", "run.step_scheduled", "run.completed"]
    );

    let by_type = json_lines(
        &awl.ok(&["events", "--json", "--type", "run.completed"])
            .await,
    );
    assert_eq!(by_type.len(), 1);
    assert_eq!(by_type[0]["position"], 4);

    let after = json_lines(
        &awl.ok(&["events", "--json", "--after", "2", "--limit", "1"])
            .await,
    );
    assert_eq!(after.len(), 1);
    assert_eq!(after[0]["position"], 3);

    let future = awl.ok(&["events", "--json", "--since", "2999-01-01"]).await;
    assert!(future.is_empty(), "nothing was recorded in 2999: {future}");

    let text = awl.ok(&["events", "--stream", "t-1"]).await;
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("task.queued") && text.contains("by user:ada"),
        "{text}"
    );
}

pub async fn events_refuses_bad_arguments_with_a_reason(backend: Backend) {
    let t = TestStore::new(backend).await;
    let awl = Awl::unbounded(&t.location);
    let out = awl.output(&["events", "--since", "yesterdayish"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--since"), "the error names the flag: {err}");

    let out = awl.output(&["events", "--stream-type", "rocket"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rocket"), "the error names the value: {err}");

    let out = awl.output(&["events", "--follow", "--limit", "3"]).await;
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--limit") && err.contains("--follow"),
        "the error names the flags that do not go together: {err}"
    );
}

pub async fn events_follow_prints_what_is_appended_later(backend: Backend) {
    let t = TestStore::new(backend).await;
    fill(&t).await;
    let mut child = Awl::unbounded(&t.location)
        .command(&["events", "--json", "--follow", "--after", "3"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start awl events --follow");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first = within(10, "the backlog", lines.next_line()).await.unwrap();
    let first: Value = serde_json::from_str(&first.expect("a line")).unwrap();
    assert_eq!(first["position"], 4);

    // Give the follower time to reach its wait, then append from this process.
    tokio::time::sleep(Duration::from_millis(300)).await;
    t.store
        .append(append(
            &stream(StreamType::Agent, "coder"),
            ExpectedVersion::NoStream,
            vec![NewEvent::new("test.happened", 1, json!({"n": 5}))],
        ))
        .await
        .expect("append while following");
    let next = within(10, "the live event", lines.next_line())
        .await
        .unwrap();
    let next: Value = serde_json::from_str(&next.expect("a line")).unwrap();
    assert_eq!(next["position"], 5);
    assert_eq!(next["stream_type"], "agent");
    child.kill().await.expect("stop the follower");
}
