//! Golden histories: recorded runs of the example workflows, kept in `tests/golden/`
//! and replayed through this build by the real binary (`awl replay --history`). A
//! change to the engine, or to how a registered definition or an event loads, that
//! makes awl decide differently for a run already in a log fails here, naming the
//! event and the step. `scripts/record-golden` records them again (the example tests
//! export each run they keep).

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::support::cli::{Awl, json_lines};
use crate::support::{Backend, TestStore};

fn golden_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden")
}

/// The histories of one set: `tests/golden/` holds runs recorded under the current
/// rules, `tests/golden/rules-1/` the same workflows' runs recorded before rules had
/// versions (every step scheduled before it starts), kept as they were.
fn golden_files_in(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("a golden directory")
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    files.sort();
    files
}

fn golden_files() -> Vec<PathBuf> {
    let mut files = golden_files_in(&golden_dir());
    files.extend(golden_files_in(&golden_dir().join("rules-1")));
    files
}

fn read(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("golden file")).expect("JSON")
}

/// `awl replay --history FILE... --json`: the exit status and one line per file. The
/// command needs no store; the sandbox's is only there to be ignored.
async fn replay(awl: &Awl, files: &[PathBuf]) -> (bool, Vec<Value>) {
    let mut args = vec!["replay", "--json", "--history"];
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    args.extend(names.iter().map(String::as_str));
    let output = awl.output(&args).await;
    (
        output.status.success(),
        json_lines(&String::from_utf8_lossy(&output.stdout)),
    )
}

async fn sandbox() -> (TestStore, Awl) {
    let t = TestStore::new(Backend::Sqlite).await;
    let awl = Awl::bounded(&t.location, 60);
    (t, awl)
}

#[tokio::test]
async fn every_golden_history_replays_to_the_same_decisions() {
    let files = golden_files();
    for (dir, rules) in [(golden_dir(), 2), (golden_dir().join("rules-1"), 1)] {
        let set = golden_files_in(&dir);
        let workflows: std::collections::BTreeSet<String> = set
            .iter()
            .map(|f| read(f)["workflow"].as_str().unwrap_or_default().to_string())
            .collect();
        for expected in [
            "hello",
            "retry-backoff",
            "order-saga",
            "error-handling",
            "mirror-race",
            "release",
        ] {
            assert!(
                workflows.contains(expected),
                "no golden history of {expected} in {}: {workflows:?}",
                dir.display()
            );
        }
        for file in &set {
            let start = &read(file)["events"][0]["payload"];
            assert_eq!(
                start.get("rules").and_then(Value::as_u64).unwrap_or(1),
                rules,
                "{} is recorded under other rules than its set's: {start}",
                file.display()
            );
        }
    }
    let (_t, awl) = sandbox().await;
    let (ok, lines) = replay(&awl, &files).await;
    assert_eq!(lines.len(), files.len(), "{lines:#?}");
    for line in &lines {
        let decisions = line["verified"]["decisions"].as_u64().unwrap_or(0);
        let events = line["events"].as_u64().unwrap_or(0);
        assert!(
            decisions > 0
                && decisions + line["verified"]["outside"].as_u64().unwrap_or(0) == events,
            "every event is decided again or applied as recorded: {line:#}"
        );
    }
    assert!(ok, "{lines:#?}");
}

/// A copy of a golden history with `change` made to it, in `dir`.
fn changed(dir: &Path, name: &str, change: impl FnOnce(&mut Value)) -> PathBuf {
    let mut history = read(&golden_dir().join(name));
    change(&mut history);
    let path = dir.join(name);
    std::fs::write(&path, history.to_string()).expect("write");
    path
}

#[tokio::test]
async fn a_history_the_engine_would_decide_differently_fails_naming_the_step() {
    let dir = tempfile::tempdir().expect("dir");
    // As if the engine now computed retry delays from another base: the recorded
    // back-off of `flaky` is no longer what it decides.
    let retry = changed(dir.path(), "retry-backoff-succeeds.json", |h| {
        let steps = h["definition"]["steps"].as_array_mut().expect("steps");
        let flaky = steps
            .iter_mut()
            .find(|s| s["id"] == "flaky")
            .expect("the flaky step");
        let base = flaky["retry"]["base_seconds"]
            .as_f64()
            .expect("a base delay");
        flaky["retry"]["base_seconds"] = (base * 4.0).into();
    });
    // As if the engine now skipped the compensations of a failed saga.
    let saga = changed(dir.path(), "order-saga-compensates.json", |h| {
        for step in h["definition"]["steps"].as_array_mut().expect("steps") {
            step.as_object_mut().expect("step").remove("compensate");
        }
    });
    let untouched = golden_dir().join("hello.json");
    let (_t, awl) = sandbox().await;
    let (ok, lines) = replay(&awl, &[retry, saga, untouched]).await;
    assert!(!ok, "a divergence exits non-zero: {lines:#?}");
    let divergence = |i: usize| &lines[i]["error"]["divergence"];
    assert_eq!(lines[0]["error"]["code"], "non_determinism", "{lines:#?}");
    assert_eq!(divergence(0)["step"], "flaky", "{lines:#?}");
    assert_eq!(
        divergence(0)["recorded"]["run.step_retried"]["step_id"],
        "flaky"
    );
    let message = divergence(0)["message"].as_str().unwrap_or_default();
    assert!(
        message.starts_with("non-determinism at event ") && message.contains("step `flaky`"),
        "{message}"
    );
    assert_eq!(lines[1]["error"]["code"], "non_determinism", "{lines:#?}");
    assert!(
        divergence(1)["recorded"]
            .get("run.compensation_started")
            .is_some()
            || divergence(1)["recorded"]
                .get("run.compensation_step_ran")
                .is_some()
            || divergence(1)["recorded"].get("run.failed").is_some(),
        "{lines:#?}"
    );
    assert!(
        lines[2]["verified"]["decisions"].as_u64() > Some(0),
        "{lines:#?}"
    );
}

#[tokio::test]
async fn a_history_that_cannot_be_read_says_what_and_where() {
    let dir = tempfile::tempdir().expect("dir");
    let renamed = changed(dir.path(), "hello.json", |h| {
        h["events"][2]["type"] = "run.step_begun".into();
    });
    let future = changed(dir.path(), "retry-backoff-fails.json", |h| {
        h["awl_history"] = 99.into();
    });
    let (_t, awl) = sandbox().await;
    let (ok, lines) = replay(&awl, &[renamed, future]).await;
    assert!(!ok);
    assert_eq!(lines[0]["error"]["code"], "history_unreadable");
    let message = lines[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("event 3") && message.contains("run.step_begun"),
        "{message}"
    );
    let message = lines[1]["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("format 99"), "{message}");
}

#[tokio::test]
async fn a_run_with_sealed_values_is_not_exported() {
    let (t, awl) = sandbox().await;
    let dir = tempfile::tempdir().expect("dir");
    let file = dir.path().join("secret.awl.yaml");
    std::fs::write(
        &file,
        "name: secret\nversion: \"1.0.0\"\ninputs:\n  token: {type: string, secret: true}\nsteps:\n  - id: use\n    tool: noop\n",
    )
    .expect("write");
    let output = awl
        .output(&[
            "run",
            &file.display().to_string(),
            "--var",
            "token=tok-123456",
        ])
        .await;
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let run_id = crate::support::cli::run_id_of(&String::from_utf8_lossy(&output.stderr));
    // It replays (the executor's keys open it)...
    awl.ok(&["replay", &run_id]).await;
    // ...but a file would need the key.
    let export = dir.path().join("out.json");
    let refused = awl
        .output(&["replay", &run_id, "--export", &export.display().to_string()])
        .await;
    assert!(!refused.status.success());
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("sealed values"), "{said}");
    assert!(!export.exists());
    drop(t);
}
