//! The `awl` binary, driven as a user drives it: `awl migrate` and `awl events`
//! (filters, `--json`, `--follow`) against both stores.

use std::process::{Command, Stdio};
use std::time::Duration;

use awl::log::{ExpectedVersion, NewEvent, StreamType};
use awl::store::StoreLocation;
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};

use crate::support::{Backend, TestStore, append, stream, within};

/// The store URL the binary is given through `DATABASE_URL`.
fn url_of(location: &StoreLocation) -> String {
    match location {
        StoreLocation::Postgres(url) => url.clone(),
        StoreLocation::Sqlite(path) => format!("sqlite://{}", path.display()),
    }
}

fn awl(location: &StoreLocation, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_awl"))
        .args(args)
        .env("DATABASE_URL", url_of(location))
        .env_remove("AWL_LOG")
        .output()
        .expect("run the awl binary")
}

fn stdout_of(output: &std::process::Output) -> String {
    assert!(
        output.status.success(),
        "awl failed: {}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout.clone()).expect("utf-8 output")
}

fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect()
}

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

pub async fn migrate_is_idempotent_from_the_command_line(backend: Backend) {
    let t = TestStore::new(backend).await;
    for _ in 0..2 {
        let out = stdout_of(&awl(&t.location, &["migrate"]));
        assert!(out.starts_with("migrated "), "unexpected output: {out}");
    }
}

pub async fn events_prints_the_log_filtered(backend: Backend) {
    let t = TestStore::new(backend).await;
    fill(&t).await;

    let all = json_lines(&stdout_of(&awl(&t.location, &["events", "--json"])));
    let positions: Vec<i64> = all
        .iter()
        .map(|e| e["position"].as_i64().unwrap())
        .collect();
    assert_eq!(positions, vec![1, 2, 3, 4]);
    assert_eq!(all[2]["event_type"], "task.queued");
    assert_eq!(all[2]["metadata"]["actor"], "user:ada");
    assert_eq!(all[2]["payload"]["prompt"], "add a health check");

    let runs = json_lines(&stdout_of(&awl(
        &t.location,
        &["events", "--json", "--stream-type", "run"],
    )));
    let types: Vec<&str> = runs
        .iter()
        .map(|e| e["event_type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        vec!["run.started", "run.step_scheduled", "run.completed"]
    );

    let by_type = json_lines(&stdout_of(&awl(
        &t.location,
        &["events", "--json", "--type", "run.completed"],
    )));
    assert_eq!(by_type.len(), 1);
    assert_eq!(by_type[0]["position"], 4);

    let after = json_lines(&stdout_of(&awl(
        &t.location,
        &["events", "--json", "--after", "2", "--limit", "1"],
    )));
    assert_eq!(after.len(), 1);
    assert_eq!(after[0]["position"], 3);

    let future = stdout_of(&awl(
        &t.location,
        &["events", "--json", "--since", "2999-01-01"],
    ));
    assert!(future.is_empty(), "nothing was recorded in 2999: {future}");

    let text = stdout_of(&awl(&t.location, &["events", "--stream", "t-1"]));
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.contains("task.queued") && text.contains("by user:ada"),
        "{text}"
    );
}

pub async fn events_refuses_bad_arguments_with_a_reason(backend: Backend) {
    let t = TestStore::new(backend).await;
    let out = awl(&t.location, &["events", "--since", "yesterdayish"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("--since"), "the error names the flag: {err}");

    let out = awl(&t.location, &["events", "--stream-type", "rocket"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("rocket"), "the error names the value: {err}");

    let out = awl(&t.location, &["events", "--follow", "--limit", "3"]);
    assert!(!out.status.success());
}

pub async fn events_follow_prints_what_is_appended_later(backend: Backend) {
    let t = TestStore::new(backend).await;
    fill(&t).await;
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_awl"))
        .args(["events", "--json", "--follow", "--after", "3"])
        .env("DATABASE_URL", url_of(&t.location))
        .stdout(Stdio::piped())
        .kill_on_drop(true)
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
