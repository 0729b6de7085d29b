//! The executor's guarantees, checked against the real `awl` binary (workers are child
//! processes that can be SIGKILLed) on a fresh Postgres database or SQLite file per
//! test:
//!
//! - a worker killed mid-step loses nothing: another worker restarts the attempt with
//!   the same idempotency key, completed steps are not run again, every run succeeds
//!   and every step succeeds exactly once in the log;
//! - two workers sharing one database never run the same attempt at the same time;
//! - values from inputs reach processes and SQL as data, never as code;
//! - a retry's back-off is a due time in `run_wakeups`, not a sleep in a worker;
//! - a cancelled run stops and leaves the wake-up queue;
//! - no wake-up is lost when a worker gives back a run someone woke while it held it
//!   (an approval, a task or child run ending): the store-level race, and a fan-out of
//!   child workflows whose endings wake their parent;
//! - an idle worker is woken by a run started in its process or (Postgres) another,
//!   not by its fallback poll;
//! - a run whose task cannot be read back is set aside; the worker's other runs go on.
//!
//! Every wait is bounded ([`LIMIT`]) and fails instead of hanging; assertions are on
//! what the log and the queue recorded, not on how fast things happened.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use awl::clock::system_clock as wall_clock;
use awl::definitions;
use awl::domain::ids::{RunId, StepId};
use awl::executor::{Worker, WorkerConfig};
use awl::log::{AppendRequest, ExpectedVersion, NewEvent, RecordedEvent, StreamRef, StreamType};
use awl::runners::{Runners, RunnersConfig};
use awl::runs::Runs;
use awl::store::{EventStore, Lease, Release, StoreLocation};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::Connection;

use crate::support::cli::{Awl, WorkerProcess, json_lines, run_id_of, step};
use crate::support::events::{for_step, of_type};
use crate::support::{Backend, TestStore, poll, wait_for, within};

/// The longest any wait in these tests may take, in seconds.
const LIMIT: u64 = 90;

/// The lease most tests give their workers: short, so a killed worker's runs are
/// taken over soon.
const SHORT_LEASE: &[&str] = &["--lease-seconds", "2"];

// ---------------------------------------------------------------- fixtures

/// The `awl` binary on the test's store, every command bounded by [`LIMIT`].
fn awl(t: &TestStore) -> Awl {
    Awl::bounded(&t.location, LIMIT)
}

/// An `awl worker ARGS` child process logging to `dir/NAME.log`.
fn worker(t: &TestStore, dir: &Path, name: &str, args: &[&str]) -> WorkerProcess {
    awl(t).worker(dir.join(format!("{name}.log")), args)
}

/// Write `yaml` to `dir/name` and register it.
async fn register(
    store: &EventStore,
    dir: &Path,
    name: &str,
    yaml: &str,
) -> (PathBuf, definitions::Registered) {
    let path = dir.join(name);
    std::fs::write(&path, yaml).expect("write the workflow file");
    let registered = definitions::register_file(store, &path, "test", Utc::now())
        .await
        .unwrap_or_else(|e| panic!("register {name}: {e}"));
    (path, registered)
}

/// Start a run with string inputs (through the library, as `awl run --detach` does).
async fn start(
    store: &EventStore,
    registered: &definitions::Registered,
    inputs: &[(&str, &str)],
) -> String {
    let inputs: Map<String, Value> = inputs
        .iter()
        .map(|(k, v)| (k.to_string(), Value::String(v.to_string())))
        .collect();
    Runs::new(store.clone(), wall_clock())
        .start_version(registered, inputs, "test")
        .await
        .expect("start a run")
        .run_id
        .to_string()
}

async fn events_of(store: &EventStore, run_id: &str) -> Vec<RecordedEvent> {
    store
        .read_stream(&StreamRef::new(StreamType::Run, run_id))
        .await
        .expect("read a run's events")
}

async fn events_of_all(store: &EventStore, ids: &[String]) -> HashMap<String, Vec<RecordedEvent>> {
    store
        .read_streams(StreamType::Run, ids)
        .await
        .expect("read the runs' events")
}

fn is_finished(events: &[RecordedEvent]) -> bool {
    events.iter().any(|e| {
        matches!(
            e.event_type.as_str(),
            "run.completed" | "run.failed" | "run.cancelled"
        )
    })
}

fn time(v: &Value) -> DateTime<Utc> {
    serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("not a time: {v}: {e}"))
}

/// Every run in `ids`, once all have ended; `None` if some are still going after
/// [`LIMIT`] seconds.
async fn all_finished(
    store: &EventStore,
    ids: &[String],
) -> Option<HashMap<String, Vec<RecordedEvent>>> {
    poll(LIMIT, async || {
        let all = events_of_all(store, ids).await;
        all.values().all(|e| is_finished(e)).then_some(all)
    })
    .await
}

/// Wait until every run in `ids` has ended.
async fn wait_until_finished(
    store: &EventStore,
    ids: &[String],
) -> HashMap<String, Vec<RecordedEvent>> {
    all_finished(store, ids)
        .await
        .unwrap_or_else(|| panic!("timed out after {LIMIT}s waiting for every run to finish"))
}

/// Per run: every step's `run.step_started` payloads and `run.step_succeeded` count,
/// and that no attempt ran under two idempotency keys (or one that is not its own).
fn check_keys(run_id: &str, events: &[RecordedEvent]) {
    let mut keys: BTreeMap<(String, u64), BTreeSet<String>> = BTreeMap::new();
    for p in of_type(events, "run.step_started") {
        let step = p["step_id"].as_str().expect("step_id").to_string();
        let attempt = p["attempt"].as_u64().expect("attempt");
        let key = p["idempotency_key"].as_str().expect("key").to_string();
        keys.entry((step, attempt)).or_default().insert(key);
    }
    for ((step, attempt), keys) in &keys {
        let expected = format!("{run_id}/{step}/{attempt}");
        assert_eq!(
            keys,
            &BTreeSet::from([expected]),
            "run {run_id}: step {step} attempt {attempt} ran under these keys"
        );
    }
}

// ---------------------------------------------------------------- 1. crash recovery

const CRASH_WORKFLOW: &str = r#"
name: crash-recovery
version: "1.0.0"
inputs:
  kind: {type: string, required: true}
  record: {type: string, required: true}
steps:
  - id: prepare
    type: tool
    tool: echo
    inputs: {message: "${{ inputs.kind }}"}
  - id: approval
    if: "inputs.kind == 'gate'"
    type: gate
    message: "ship it?"
  - id: slow
    if: "inputs.kind == 'slow'"
    type: shell
    script: |
      echo "start $AWL_IDEMPOTENCY_KEY/$AWL_ATTEMPT" >> "$1"
      sleep 3
      echo "done $AWL_IDEMPOTENCY_KEY/$AWL_ATTEMPT" >> "$1"
      printf '%s' "$AWL_IDEMPOTENCY_KEY/$AWL_ATTEMPT"
    args: ["${{ inputs.record }}"]
  - id: after
    type: shell
    command: ["echo", "finished"]
"#;

/// 50 runs (half waiting at a gate, half inside a 3-second shell step) on a worker
/// that is SIGKILLed; a second worker finishes them all.
pub async fn a_killed_worker_loses_nothing(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, registered) = register(&t.store, dir.path(), "crash.yaml", CRASH_WORKFLOW).await;

    let mut gate_runs = Vec::new();
    let mut slow_runs = Vec::new();
    for i in 0..50 {
        let record = dir.path().join(format!("record-{i}.txt"));
        let kind = if i % 2 == 0 { "gate" } else { "slow" };
        let run = start(
            &t.store,
            &registered,
            &[("kind", kind), ("record", record.to_str().unwrap())],
        )
        .await;
        if kind == "gate" {
            gate_runs.push(run);
        } else {
            slow_runs.push((run, record));
        }
    }
    let all: Vec<String> = gate_runs
        .iter()
        .cloned()
        .chain(slow_runs.iter().map(|(r, _)| r.clone()))
        .collect();
    let slow_ids: Vec<String> = slow_runs.iter().map(|(r, _)| r.clone()).collect();

    let mut first = worker(&t, dir.path(), "worker-1", SHORT_LEASE);
    // Every gate open and every slow step's process running (it wrote its first line).
    wait_for(LIMIT, "gates open and slow steps running", async || {
        let gates = events_of_all(&t.store, &gate_runs).await;
        let ready = gates
            .values()
            .all(|e| of_type(e, "run.gate_opened").count() == 1)
            && slow_runs.iter().all(|(_, record)| {
                std::fs::read_to_string(record).is_ok_and(|t| t.starts_with("start "))
            });
        ready.then_some(())
    })
    .await;
    first.kill(LIMIT).await;

    // What was in flight when it died: started, no outcome.
    let at_kill = events_of_all(&t.store, &slow_ids).await;
    let killed: BTreeSet<String> = at_kill
        .iter()
        .filter(|(_, e)| {
            for_step(e, "run.step_started", "slow").count() > 0
                && for_step(e, "run.step_succeeded", "slow").count() == 0
                && for_step(e, "run.step_failed", "slow").count() == 0
        })
        .map(|(id, _)| id.clone())
        .collect();
    assert!(
        !killed.is_empty(),
        "no slow step was in flight when the worker was killed: the test proves nothing"
    );
    eprintln!(
        "{} of {} slow steps were in flight at SIGKILL",
        killed.len(),
        slow_ids.len()
    );

    let _second = worker(&t, dir.path(), "worker-2", SHORT_LEASE);
    let gates = events_of_all(&t.store, &gate_runs).await;
    for run in &gate_runs {
        let gate = of_type(&gates[run], "run.gate_opened")
            .next()
            .expect("an open gate")["gate_id"]
            .as_str()
            .expect("gate_id")
            .to_string();
        awl(&t).ok(&["approve", &gate, "--by", "tester"]).await;
    }
    let finished = wait_until_finished(&t.store, &all).await;

    // Every run succeeded, as `awl list` reports it too.
    let listed = awl(&t).ok(&["list", "--json", "--limit", "100"]).await;
    let statuses: HashMap<String, String> = json_lines(&listed)
        .iter()
        .map(|v| {
            (
                v["run_id"].as_str().unwrap().to_string(),
                v["status"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(statuses.len(), 50, "awl list shows every run");
    for run in &all {
        assert_eq!(statuses[run], "SUCCEEDED", "run {run}");
    }

    for (run, events) in &finished {
        assert!(
            of_type(events, "run.completed").count() == 1,
            "run {run} completed"
        );
        check_keys(run, events);
        let is_gate = gate_runs.contains(run);
        let steps: &[&str] = if is_gate {
            &["prepare", "approval", "after"]
        } else {
            &["prepare", "slow", "after"]
        };
        for step in steps {
            assert_eq!(
                for_step(events, "run.step_succeeded", step).count(),
                1,
                "run {run}: step {step} succeeded exactly once"
            );
        }
        assert_eq!(
            of_type(events, "run.step_succeeded").count(),
            3,
            "run {run}: only the steps of its kind ran"
        );
        assert_eq!(of_type(events, "run.step_failed").count(), 0, "run {run}");
        for step in ["prepare", "approval", "slow", "after"] {
            let starts: Vec<&Value> = for_step(events, "run.step_started", step).collect();
            assert!(
                starts.iter().all(|p| p["attempt"] == 1),
                "run {run}: {step} needed one attempt"
            );
            let expected = if step == "slow" && killed.contains(run) {
                2 // the start that died with the worker, and the restart
            } else if steps.contains(&step) {
                1
            } else {
                0
            };
            assert_eq!(
                starts.len(),
                expected,
                "run {run}: starts of {step} (killed mid-step: {})",
                killed.contains(run)
            );
        }
    }

    // The processes saw the same key: the killed attempt's process (orphaned, it
    // carries on) and its restart both wrote it.
    for (run, record) in &slow_runs {
        let key = format!("{run}/slow/1");
        let text = std::fs::read_to_string(record).expect("the step's record");
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.iter().all(|l| l.ends_with(&format!(" {key}"))),
            "run {run}: every execution used key {key}: {text}"
        );
        let starts = lines.iter().filter(|l| l.starts_with("start ")).count();
        if killed.contains(run) {
            assert!(starts >= 2, "run {run} was restarted: {text}");
        } else {
            assert_eq!(starts, 1, "run {run} ran once: {text}");
        }
        let output = for_step(&finished[run], "run.step_succeeded", "slow")
            .next()
            .unwrap()["output"]["stdout"]
            .clone();
        assert_eq!(output, Value::String(key), "run {run}: the recorded output");
    }
}

// ---------------------------------------------------------------- 2. no overlap

/// Journals each execution's start and end, holding a lock per attempt while it runs:
/// an execution that finds the lock taken (another execution of the attempt is alive)
/// says so. The lock goes with the last process holding it, so an execution stopped
/// with SIGKILL (its worker's lease ran out) is seen as over at once.
fn journal_script() -> &'static str {
    r#"attempt="$AWL_IDEMPOTENCY_KEY/$AWL_ATTEMPT"
exec 9>>"$1.$(printf '%s' "$attempt" | tr -c 'A-Za-z0-9-' _).lock"
if ! flock -n 9; then
  echo "overlap $attempt $$ $PPID $(date +%s%N)" >> "$1"
  exit 1
fi
echo "start $attempt $$ $PPID $(date +%s%N)" >> "$1"
sleep "$2"
echo "end $attempt $$ $PPID $(date +%s%N)" >> "$1"
"#
}

/// Two worker processes, 100 runs, every execution of every shell step journaled
/// with its key, its process and the time. An execution may have been stopped (its
/// worker's lease ran out before a renewal, under load): it has no end, but it held
/// its attempt's lock until it died.
pub async fn two_workers_never_run_one_attempt_at_once(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = dir.path().join("journal.txt");
    let script = serde_json::to_string(journal_script()).unwrap();
    let yaml = format!(
        r#"
name: no-overlap
version: "1.0.0"
inputs:
  journal: {{type: string, required: true}}
  pause: {{type: string, required: true}}
steps:
  - id: first
    type: shell
    script: {script}
    args: ["${{{{ inputs.journal }}}}", "0.1"]
  - id: middle
    type: tool
    tool: noop
  - id: second
    type: shell
    script: {script}
    args: ["${{{{ inputs.journal }}}}", "${{{{ inputs.pause }}}}"]
"#
    );
    let (_, registered) = register(&t.store, dir.path(), "overlap.yaml", &yaml).await;

    // Small batches, so each worker holds a few runs at a time and both get work.
    let args = ["--lease-seconds", "1", "--batch", "8"];
    let a = worker(&t, dir.path(), "worker-a", &args);
    let b = worker(&t, dir.path(), "worker-b", &args);
    let mut runs = Vec::new();
    for i in 0..100 {
        // One run in ten has a step that outlives the lease: it must be renewed, not
        // taken over.
        let pause = if i % 10 == 0 { "2.5" } else { "0.1" };
        let inputs = [("journal", journal.to_str().unwrap()), ("pause", pause)];
        runs.push(start(&t.store, &registered, &inputs).await);
    }
    // Overlaps are looked for even if the runs never finish (a stolen run can keep
    // two workers busy forever), so a failure names them.
    let finished = all_finished(&t.store, &runs).await;

    // Executions by key: (pid, worker pid) -> (start, end).
    type Span = (Option<u128>, Option<u128>);
    let text = std::fs::read_to_string(&journal).expect("the journal");
    let mut executions: BTreeMap<String, BTreeMap<(u32, u32), Span>> = BTreeMap::new();
    let overlaps: Vec<&str> = text.lines().filter(|l| l.starts_with("overlap ")).collect();
    assert!(
        overlaps.is_empty(),
        "attempts started while another execution of theirs was alive: {overlaps:#?}"
    );
    for line in text.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        assert_eq!(parts.len(), 5, "a journal line: {line:?}");
        let pid: u32 = parts[2].parse().unwrap();
        let worker: u32 = parts[3].parse().unwrap();
        let at: u128 = parts[4].parse().unwrap();
        let span = executions
            .entry(parts[1].to_string())
            .or_default()
            .entry((pid, worker))
            .or_default();
        match parts[0] {
            "start" => span.0 = Some(at),
            "end" => span.1 = Some(at),
            other => panic!("a journal line: {other}"),
        }
    }
    let mut by_worker: BTreeMap<u32, usize> = BTreeMap::new();
    let mut repeated = 0;
    let mut stopped = 0;
    for (key, execs) in &executions {
        // Stopped executions (no end) are checked by their lock above.
        let mut spans: Vec<(u128, Option<u128>)> = execs
            .values()
            .map(|(s, e)| {
                (
                    s.unwrap_or_else(|| panic!("{key}: an end without a start")),
                    *e,
                )
            })
            .collect();
        spans.sort();
        for pair in spans.windows(2) {
            if let (Some(end), next) = (pair[0].1, pair[1].0) {
                assert!(
                    next > end,
                    "{key} ran twice at once: {:?} and {:?}",
                    pair[0],
                    pair[1]
                );
            }
        }
        stopped += spans.iter().filter(|(_, end)| end.is_none()).count();
        repeated += usize::from(spans.len() > 1);
        for (_, worker) in execs.keys() {
            *by_worker.entry(*worker).or_default() += 1;
        }
    }
    eprintln!(
        "executions by worker pid: {by_worker:?}; attempts run more than once: {repeated}; \
         executions stopped: {stopped}"
    );

    let finished =
        finished.unwrap_or_else(|| panic!("timed out after {LIMIT}s waiting for every run"));
    for (run, events) in &finished {
        assert_eq!(
            of_type(events, "run.completed").count(),
            1,
            "run {run} succeeded"
        );
        check_keys(run, events);
        for step in ["first", "middle", "second"] {
            assert_eq!(
                for_step(events, "run.step_succeeded", step).count(),
                1,
                "run {run}: {step} succeeded once"
            );
        }
    }
    let expected: BTreeSet<String> = runs
        .iter()
        .flat_map(|r| [format!("{r}/first/1"), format!("{r}/second/1")])
        .collect();
    assert_eq!(
        executions.keys().cloned().collect::<BTreeSet<_>>(),
        expected,
        "every attempt ran, and nothing else"
    );
    // Nothing still runs: every attempt's lock is free, and each attempt's last
    // execution (the one recorded) ended.
    for key in executions.keys() {
        let lock = PathBuf::from(format!(
            "{}.{}.lock",
            journal.display(),
            key.replace(|c: char| !c.is_ascii_alphanumeric() && c != '-', "_")
        ));
        let file = std::fs::File::open(&lock).unwrap_or_else(|e| panic!("{}: {e}", lock.display()));
        assert!(
            file.try_lock().is_ok(),
            "{key}: an execution is still running (it holds {})",
            lock.display()
        );
    }
    for (key, execs) in &executions {
        let last = execs.values().max_by_key(|(start, _)| *start);
        assert!(
            last.is_some_and(|(_, end)| end.is_some()),
            "{key}: its last execution ended: {execs:?}"
        );
    }
    assert_eq!(
        by_worker.keys().copied().collect::<BTreeSet<_>>(),
        BTreeSet::from([a.pid(), b.pid()]),
        "both workers ran steps"
    );
}

// ---------------------------------------------------------------- 3. injection

const PAYLOADS: [&str; 4] = [
    r#""; rm -rf ~; echo ""#,
    "$(touch MARKER)",
    "`touch MARKER`",
    "' OR 1=1 --",
];

const INERT_WORKFLOW: &str = r#"
name: inert
version: "1.0.0"
inputs:
  payload: {type: string, required: true}
steps:
  - id: argv
    type: shell
    command: ["printf", "%s", "${{ inputs.payload }}"]
  - id: args
    type: shell
    script: 'printf "%s" "$1"'
    args: ["${{ inputs.payload }}"]
  - id: env
    type: shell
    script: 'printf "%s" "$PAYLOAD"'
    env: {PAYLOAD: "${{ inputs.payload }}"}
  - id: stdin
    type: shell
    command: ["cat"]
    stdin: "${{ inputs.payload }}"
  - id: insert
    type: database
    connection: main
    query: "INSERT INTO items (name, secret) VALUES (?1, 'inserted')"
    params: ["${{ inputs.payload }}"]
  - id: lookup
    type: database
    connection: main
    query: "SELECT name, secret FROM items WHERE name = ?1"
    params: ["${{ inputs.payload }}"]
"#;

/// Hostile input values through `awl run` into argv, args, env, stdin and SQL
/// parameters: they come out as the same bytes and run nothing.
pub async fn hostile_inputs_stay_inert(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path().join("work");
    let home = dir.path().join("home");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::create_dir_all(&home).unwrap();
    // If `rm -rf ~` ever ran, it would be in this HOME, and this file would go.
    std::fs::write(home.join("canary"), "still here").unwrap();
    let file = work.join("inert.yaml");
    std::fs::write(&file, INERT_WORKFLOW).unwrap();

    let db = dir.path().join("db.sqlite");
    let db_url = format!("sqlite://{}?mode=rwc", db.display());
    let mut conn = sqlx::SqliteConnection::connect(&db_url)
        .await
        .expect("open db");
    sqlx::query("CREATE TABLE items (name TEXT NOT NULL, secret TEXT NOT NULL)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("INSERT INTO items VALUES ('alice', 'alice-secret'), ('bob', 'bob-secret')")
        .execute(&mut conn)
        .await
        .unwrap();

    // The check can fail: spliced into shell or SQL text, the payloads are live.
    let control = dir.path().join("control");
    std::fs::create_dir_all(&control).unwrap();
    let spliced = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("echo \"{}\"", PAYLOADS[1]))
        .current_dir(&control)
        .output()
        .unwrap();
    assert!(spliced.status.success());
    assert!(
        control.join("MARKER").exists(),
        "the payload is live in shell text"
    );
    let matched: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT count(*) FROM items WHERE name = '{}'",
        PAYLOADS[3]
    )))
    .fetch_one(&mut conn)
    .await
    .unwrap();
    assert_eq!(matched, 2, "the payload is live in SQL text");

    let awl = awl(&t);
    for payload in PAYLOADS {
        let var = format!("payload={payload}");
        let mut run = awl.command(&["run", file.to_str().unwrap(), "--var", &var]);
        run.env("AWL_CONNECTION_MAIN", &db_url)
            .env("HOME", &home)
            .current_dir(&work);
        let out = awl.output_of("awl run", &mut run).await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            out.status.success(),
            "awl run with {payload:?} failed:\n{stderr}"
        );
        let run_id = run_id_of(&stderr);

        let status = awl.status(&run_id).await;
        assert_eq!(status["status"], "SUCCEEDED", "{status}");
        for id in ["argv", "args", "env", "stdin"] {
            assert_eq!(
                step(&status, id)["output"]["stdout"],
                Value::String(payload.to_string()),
                "step {id} with {payload:?}"
            );
        }
        assert_eq!(
            step(&status, "insert")["output"]["rows_affected"],
            1,
            "{payload:?}"
        );
        assert_eq!(
            step(&status, "lookup")["output"]["rows"],
            serde_json::json!([{"name": payload, "secret": "inserted"}]),
            "only the payload's own row matches {payload:?}"
        );
    }

    for place in [&work, &home, dir.path()] {
        assert!(
            !place.join("MARKER").exists(),
            "no MARKER in {}",
            place.display()
        );
    }
    assert!(home.join("canary").exists(), "HOME is untouched");
    let names: Vec<String> = sqlx::query_scalar("SELECT name FROM items ORDER BY rowid")
        .fetch_all(&mut conn)
        .await
        .unwrap();
    let mut expected = vec!["alice".to_string(), "bob".to_string()];
    expected.extend(PAYLOADS.iter().map(|p| p.to_string()));
    assert_eq!(names, expected, "the table holds the payloads as data");
}

// ---------------------------------------------------------------- 4. back-off

const BACKOFF_WORKFLOW: &str = r#"
name: backoff
version: "1.0.0"
steps:
  - id: flaky
    type: shell
    script: 'echo "attempt $AWL_ATTEMPT"; test "$AWL_ATTEMPT" -ge 3'
    retry: {max_attempts: 3, backoff: constant, base_seconds: 2}
  - id: after
    type: tool
    tool: noop
"#;

/// A step that fails twice: each retry is due 2 s after the failure, as a due time in
/// `run_wakeups` with nobody holding the run; a worker killed during the back-off
/// loses nothing.
pub async fn backoff_is_a_due_time_in_the_database(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, registered) = register(&t.store, dir.path(), "backoff.yaml", BACKOFF_WORKFLOW).await;
    let run = start(&t.store, &registered, &[]).await;

    let mut first = worker(&t, dir.path(), "worker-1", SHORT_LEASE);
    let mut second = None;
    let mut observed = Vec::new();
    for retry in 1..=2usize {
        let due = wait_for(LIMIT, "a retry", async || {
            let events = events_of(&t.store, &run).await;
            of_type(&events, "run.step_retried")
                .nth(retry - 1)
                .map(|p| time(&p["due_at"]))
        })
        .await;
        let rows = t.store.wakeups().await.expect("read run_wakeups");
        let read_at = Utc::now();
        let row = rows
            .iter()
            .find(|(id, _, _)| *id == run)
            .unwrap_or_else(|| panic!("the waiting run has a wake-up row: {rows:?}"));
        // Read before the due time: the row is the whole state of the wait.
        if read_at < due {
            assert_eq!(
                row.1.map(|d| d.timestamp_micros()),
                Some(due.timestamp_micros()),
                "the row is due when the retry is"
            );
            assert_eq!(row.2, None, "nobody holds the run while it waits");
            observed.push(retry);
        }
        if retry == 1 {
            // Nothing in the worker remembers the wait: kill it, start another.
            first.kill(LIMIT).await;
            second = Some(worker(&t, dir.path(), "worker-2", SHORT_LEASE));
        }
    }
    assert!(
        !observed.is_empty(),
        "the wake-up queue was never read during a back-off"
    );
    let finished = wait_until_finished(&t.store, std::slice::from_ref(&run)).await;
    let events = &finished[&run];
    assert_eq!(
        of_type(events, "run.completed").count(),
        1,
        "the run succeeded"
    );
    check_keys(&run, events);

    let failed: Vec<&Value> = for_step(events, "run.step_failed", "flaky").collect();
    let retried: Vec<&Value> = for_step(events, "run.step_retried", "flaky").collect();
    assert_eq!(failed.len(), 2);
    assert_eq!(retried.len(), 2);
    for (i, (f, r)) in failed.iter().zip(&retried).enumerate() {
        let attempt = i as u64 + 1;
        assert_eq!(f["attempt"], attempt);
        assert_eq!(r["next_attempt"], attempt + 1);
        assert_eq!(r["backoff_ms"], 2000);
        assert_eq!(
            time(&r["due_at"]) - time(&f["at"]),
            chrono::Duration::seconds(2),
            "retry {attempt} is due 2 s after the failure"
        );
        let next_start = for_step(events, "run.step_started", "flaky")
            .filter(|p| p["attempt"] == attempt + 1)
            .map(|p| time(&p["at"]))
            .min()
            .expect("the next attempt started");
        assert!(
            next_start >= time(&r["due_at"]),
            "attempt {} started at {next_start}, not before its due time {}",
            attempt + 1,
            r["due_at"]
        );
    }
    assert_eq!(
        for_step(events, "run.step_succeeded", "flaky")
            .next()
            .expect("flaky succeeded")["attempt"],
        3
    );
    let rows = t.store.wakeups().await.unwrap();
    assert!(
        rows.iter().all(|(id, _, _)| *id != run),
        "a finished run leaves the queue: {rows:?}"
    );
    drop(second);
}

// ---------------------------------------------------------------- 5. cancel

const CANCEL_WORKFLOW: &str = r#"
name: cancellable
version: "1.0.0"
inputs:
  marker: {type: string, required: true}
  wait: {type: string, required: true}
steps:
  - id: before
    type: tool
    tool: noop
  - id: approval
    if: "inputs.wait == 'gate'"
    type: gate
    message: "go on?"
  - id: slow
    if: "inputs.wait == 'slow'"
    type: shell
    command: ["sleep", "2"]
  - id: after
    type: shell
    command: ["touch", "${{ inputs.marker }}"]
"#;

/// Cancel one run at an open gate and one inside a running step: both end CANCELLED,
/// nothing after the cancellation runs, and their wake-up rows go.
pub async fn a_cancelled_run_stops(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, registered) = register(&t.store, dir.path(), "cancel.yaml", CANCEL_WORKFLOW).await;
    let _worker = worker(&t, dir.path(), "worker", SHORT_LEASE);

    for wait in ["gate", "slow"] {
        let marker = dir.path().join(format!("after-{wait}"));
        let run = start(
            &t.store,
            &registered,
            &[("marker", marker.to_str().unwrap()), ("wait", wait)],
        )
        .await;
        let waiting = if wait == "gate" {
            "run.gate_opened"
        } else {
            "run.step_started"
        };
        wait_for(LIMIT, "the run to wait", async || {
            let events = events_of(&t.store, &run).await;
            (of_type(&events, waiting).count() > 0
                && (wait == "gate" || for_step(&events, waiting, "slow").count() > 0))
                .then_some(())
        })
        .await;
        let rows = t.store.wakeups().await.unwrap();
        assert!(
            rows.iter().any(|(id, _, _)| *id == run),
            "a waiting run is in the queue: {rows:?}"
        );

        awl(&t).ok(&["cancel", &run, "--reason", "not today"]).await;
        wait_for(
            LIMIT,
            "the worker to drop the run from the queue",
            async || {
                let rows = t.store.wakeups().await.unwrap();
                rows.iter().all(|(id, _, _)| *id != run).then_some(())
            },
        )
        .await;

        let status = awl(&t).status(&run).await;
        assert_eq!(status["status"], "CANCELLED", "{status}");
        let events = events_of(&t.store, &run).await;
        assert_eq!(
            events.last().map(|e| e.event_type.as_str()),
            Some("run.cancelled"),
            "nothing was appended after the cancellation"
        );
        assert_eq!(for_step(&events, "run.step_started", "after").count(), 0);
        if wait == "gate" {
            let gate = of_type(&events, "run.gate_opened").next().unwrap()["gate_id"]
                .as_str()
                .unwrap()
                .to_string();
            let out = awl(&t).output(&["approve", &gate]).await;
            assert!(
                !out.status.success(),
                "a cancelled run's gate cannot be approved"
            );
            assert_eq!(events_of(&t.store, &run).await.len(), events.len());
        }
        assert!(
            !marker.exists(),
            "the step after the cancellation never ran"
        );
    }
}

// ---------------------------------------------------------------- 6. lost wake-ups

/// A worker gives a run back with nothing new to append (it decided on version 1)
/// while someone else wakes the run: an approval (appended to the run and committed
/// while the release waits for the wake-up row), and a task ending (another stream,
/// committed before the release). Both wake-ups must survive the release, or the run
/// waits forever.
pub async fn a_release_keeps_a_concurrent_wake_up(backend: Backend) {
    let t = TestStore::new(backend).await;
    let event = || vec![NewEvent::new("test.happened", 1, serde_json::json!({}))];
    // A run at version 1 with a wake-up row, as a worker finds it.
    let due_run = async |id: &str, at: DateTime<Utc>| {
        t.store
            .append(AppendRequest::new(
                StreamRef::new(StreamType::Run, id),
                ExpectedVersion::NoStream,
                event(),
            ))
            .await
            .expect("append");
        let mut tx = t.store.begin().await.unwrap();
        tx.wake_run(id, at).await.unwrap();
        tx.commit().await.unwrap();
    };
    // What a worker that decided on version 1 and appended nothing gives back.
    let unchanged = |id: &str| Release {
        run_id: id.into(),
        epoch: 1,
        due_at: None,
        version: 1,
        finished: false,
        waiting: None,
    };
    let now = Utc::now();
    assert!(
        !t.store.has_wakeups().await.unwrap(),
        "a new store's queue is empty"
    );
    due_run("r-1", now).await;
    assert!(
        t.store.has_wakeups().await.unwrap(),
        "a due run is in the queue"
    );
    let later = now + chrono::Duration::seconds(30);
    let claimed = t
        .store
        .claim_runs("worker", now, later, 10, None)
        .await
        .unwrap();
    assert_eq!(claimed, vec![lease("r-1", 1)]);

    // The approval: append and wake, not yet committed.
    let mut outside = t.store.begin().await.unwrap();
    outside
        .append(&[AppendRequest::new(
            StreamRef::new(StreamType::Run, "r-1"),
            ExpectedVersion::Exactly(1),
            event(),
        )])
        .await
        .expect("append in the outside transaction");
    outside.wake_run("r-1", now).await.unwrap();

    // The worker's release, from another pool (as another process would).
    let worker_store = t.reopen().await;
    let given_back = unchanged("r-1");
    let release = tokio::spawn(async move {
        let mut tx = worker_store.begin().await?;
        tx.release_runs("worker", &[given_back], now).await?;
        tx.commit().await
    });
    // Let the release reach the lock it waits for.
    match &t.location {
        StoreLocation::Postgres(url) => {
            let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
            wait_for(LIMIT, "the release to wait for a lock", async || {
                let waiting: i64 = sqlx::query_scalar(
                    "SELECT count(*) FROM pg_stat_activity \
                      WHERE datname = current_database() AND wait_event_type = 'Lock'",
                )
                .fetch_one(&mut conn)
                .await
                .unwrap();
                (waiting > 0 || release.is_finished()).then_some(())
            })
            .await;
        }
        StoreLocation::Sqlite(_) => tokio::time::sleep(Duration::from_millis(300)).await,
    }
    assert!(
        !release.is_finished(),
        "the release did not wait for the approval's transaction: the race was not run"
    );
    outside.commit().await.expect("commit the approval");
    within(LIMIT, "the release", release)
        .await
        .unwrap()
        .expect("release");

    let rows = t.store.wakeups().await.unwrap();
    let row = rows.iter().find(|(id, _, _)| id == "r-1").expect("the row");
    assert_eq!(row.2, None, "the run was given back");
    assert!(
        row.1.is_some(),
        "the approval's wake-up was lost: the run is due never ({rows:?})"
    );

    // A wake-up that does not touch the run's stream (its agent task or child run
    // ended), committed while a worker holds the run, then the worker's release.
    due_run("r-2", now).await;
    let only = ["r-2".to_string()];
    let claimed = t
        .store
        .claim_runs("worker", now, later, 10, Some(&only))
        .await
        .unwrap();
    assert_eq!(claimed, vec![lease("r-2", 1)]);
    let mut task_ended = t.store.begin().await.unwrap();
    task_ended
        .append(&[AppendRequest::new(
            StreamRef::new(StreamType::Task, "t-2"),
            ExpectedVersion::NoStream,
            event(),
        )])
        .await
        .unwrap();
    task_ended.wake_run("r-2", Utc::now()).await.unwrap();
    task_ended.commit().await.unwrap();
    let mut tx = t.store.begin().await.unwrap();
    tx.release_runs("worker", &[unchanged("r-2")], Utc::now())
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let rows = t.store.wakeups().await.unwrap();
    let row = rows.iter().find(|(id, _, _)| id == "r-2").expect("the row");
    assert!(
        row.1.is_some(),
        "the task's wake-up was lost: the run is due never ({rows:?})"
    );
}

// ---------------------------------------------------------------- 7. fan-out wake-ups

const CHILD_WORKFLOW: &str = r#"
name: fan-child
version: "1.0.0"
inputs:
  pause: {type: string, required: true}
steps:
  - id: work
    type: shell
    command: ["sleep", "${{ inputs.pause }}"]
"#;

/// Ten parents whose eight parallel branches each run a child workflow: the children
/// end close together (10 ms apart) and each wakes its parent, often while the worker
/// holds that parent, in the very round that decides it. Every wake-up must reach it:
/// before `run_wakeups.woken`, a release stored "due never" over such wake-ups and
/// parents waited forever.
pub async fn every_child_wakes_its_parent(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::write(dir.path().join("child.yaml"), CHILD_WORKFLOW).unwrap();
    let branches: String = (0..8)
        .map(|i| {
            format!(
                "      - name: b{i}\n        steps:\n          - id: child{i}\n            type: workflow\n            workflow: ./child.yaml\n            inputs: {{pause: \"0.0{i}\"}}\n"
            )
        })
        .collect();
    let yaml = format!(
        "name: fan-out\nversion: \"1.0.0\"\nsteps:\n  - id: fan\n    type: parallel\n    branches:\n{branches}  - id: after\n    type: tool\n    tool: noop\n"
    );
    let (_, registered) = register(&t.store, dir.path(), "parent.yaml", &yaml).await;
    let _worker = worker(&t, dir.path(), "worker", SHORT_LEASE);
    let mut parents = Vec::new();
    for _ in 0..10 {
        parents.push(start(&t.store, &registered, &[]).await);
    }
    let finished = all_finished(&t.store, &parents).await;
    // A parent still waiting: are its children all done (it was never told)?
    let all = events_of_all(&t.store, &parents).await;
    let mut stuck = Vec::new();
    for (parent, events) in &all {
        if is_finished(events) {
            continue;
        }
        let id: RunId = parent.parse().unwrap();
        let children: Vec<String> = (0..8)
            .map(|i| {
                let step = StepId::try_from(format!("child{i}").as_str()).unwrap();
                awl::engine::child_run_id(id, &step, 1).to_string()
            })
            .collect();
        let ended = events_of_all(&t.store, &children)
            .await
            .values()
            .filter(|e| is_finished(e))
            .count();
        stuck.push(format!("{parent}: {ended} of 8 children ended"));
    }
    let rows = t.store.wakeups().await.unwrap();
    assert!(
        finished.is_some(),
        "parents left waiting: {stuck:?}; wake-up queue: {rows:?}"
    );
    for (run, events) in &all {
        assert_eq!(of_type(events, "run.completed").count(), 1, "run {run}");
        for i in 0..8 {
            let step = format!("child{i}");
            assert_eq!(
                for_step(events, "run.step_succeeded", &step).count(),
                1,
                "run {run}: {step}"
            );
        }
    }
    assert!(
        !t.store.has_wakeups().await.unwrap(),
        "every run ended, parents and children: none is left in the queue"
    );
}

// ---------------------------------------------------------------- budgets

/// Steps report their cost in their output; a run that goes over its budget stops
/// before its next step and fails with class `budget`.
pub async fn a_run_over_budget_stops(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("budget.awl.yaml");
    std::fs::write(
        &path,
        r#"
name: thrifty
version: "1.0.0"
cost_budget_usd: 1.0
steps:
  - id: think
    type: shell
    command: [echo, '{"cost_usd": 0.6, "tokens": 1200}']
  - id: think_again
    type: shell
    command: [echo, '{"cost_usd": 0.6, "tokens": 1300}']
  - id: never
    tool: noop
"#,
    )
    .expect("write");
    let out = awl(&t).output(&["run", path.to_str().unwrap()]).await;
    assert!(!out.status.success(), "a run over budget fails");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("(budget)") && err.contains("over its budget"),
        "{err}"
    );
    let listed = json_lines(&awl(&t).ok(&["list", "--json"]).await);
    assert_eq!(listed.len(), 1, "one run: {listed:?}");
    let run = &listed[0];
    let run_id = run["run_id"].as_str().unwrap().to_string();
    assert_eq!(run["cost_usd"], 1.2);
    let events = events_of(&t.store, &run_id).await;
    let charged: Vec<f64> = of_type(&events, "run.cost_charged")
        .map(|p| p["usd"].as_f64().unwrap())
        .collect();
    assert_eq!(charged, vec![0.6, 0.6]);
    assert_eq!(of_type(&events, "run.budget_exceeded").count(), 1);
    assert_eq!(
        for_step(&events, "run.step_started", "never").count(),
        0,
        "nothing ran past the budget"
    );
    let failed = of_type(&events, "run.failed").next().expect("run.failed");
    assert_eq!(failed["error_class"], "budget");
}

// ---------------------------------------------------------------- http and notify

/// `http` and `notify` steps through a run: a local server answers the request and
/// records the webhook; the outputs flow into later steps.
pub async fn http_and_notify_steps_run_against_a_server(backend: Backend) {
    use axum::Json;
    use axum::routing::{get, post};
    use std::sync::{Arc, Mutex};

    let received: Arc<Mutex<Vec<Value>>> = Arc::default();
    let recorder = received.clone();
    let app = axum::Router::new()
        .route(
            "/version",
            get(|| async { Json(serde_json::json!({"version": "2.4.0", "cost_usd": 0.01})) }),
        )
        .route(
            "/hook",
            post(move |Json(body): Json<Value>| {
                let recorder = recorder.clone();
                async move {
                    recorder.lock().unwrap().push(body);
                    "ok"
                }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("web.awl.yaml");
    std::fs::write(
        &path,
        r#"
name: web
version: "1.0.0"
inputs:
  base: {type: string, required: true}
steps:
  - id: ask
    type: http
    url: "${{ inputs.base }}/version"
  - id: tell
    type: notify
    url: "${{ inputs.base }}/hook"
    message: "deployed ${{ steps.ask.outputs.body.version }}"
    mentions: [ops]
outputs:
  version: "${{ steps.ask.outputs.body.version }}"
  status: "${{ steps.ask.outputs.status }}"
"#,
    )
    .expect("write");
    let var = format!("base={base}");
    let out = awl(&t)
        .output(&["run", path.to_str().unwrap(), "--var", &var])
        .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let outputs: Value = serde_json::from_slice(&out.stdout).expect("outputs as JSON");
    assert_eq!(
        outputs,
        serde_json::json!({"version": "2.4.0", "status": 200})
    );
    let hooks = received.lock().unwrap().clone();
    assert_eq!(hooks.len(), 1, "the webhook was called once");
    let text = hooks[0]["text"].as_str().unwrap_or_default();
    assert!(
        text.contains("deployed 2.4.0") && text.contains("@ops"),
        "{}",
        hooks[0]
    );
    assert_eq!(
        hooks[0]["text"], hooks[0]["content"],
        "Slack and Discord shapes"
    );
}

// ---------------------------------------------------------------- shutdown and hooks

/// A worker told to stop waits at most its lease for work in flight, then gives the
/// run back (due at once) rather than wait for a step that runs far longer.
pub async fn a_stopping_worker_gives_runs_back_within_its_lease(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, registered) = register(
        &t.store,
        dir.path(),
        "slow.awl.yaml",
        "name: slow\nversion: \"1.0.0\"\nsteps:\n  - {id: nap, type: shell, command: [sleep, \"60\"]}\n",
    )
    .await;
    let run = start(&t.store, &registered, &[]).await;
    let mut w = worker(&t, dir.path(), "worker", SHORT_LEASE);
    wait_for(LIMIT, "the step to start", async || {
        let events = events_of(&t.store, &run).await;
        (for_step(&events, "run.step_started", "nap").count() == 1).then_some(())
    })
    .await;
    let stopped = std::process::Command::new("kill")
        .args(["-TERM", &w.pid().to_string()])
        .status()
        .expect("send SIGTERM");
    assert!(stopped.success());
    // Far sooner than the 60 s step: the lease (2 s) plus a round.
    let exited = poll(20, async || w.try_exited().then_some(())).await;
    assert!(
        exited.is_some(),
        "the worker did not stop within 20 s of SIGTERM"
    );
    let events = events_of(&t.store, &run).await;
    assert_eq!(
        for_step(&events, "run.step_succeeded", "nap").count(),
        0,
        "the step had not ended"
    );
    let rows = t.store.wakeups().await.expect("the wake-up queue");
    assert_eq!(rows.len(), 1, "{rows:?}");
    let (id, due, owner) = &rows[0];
    assert_eq!(id, &run);
    assert!(
        due.is_some() && owner.is_none(),
        "given back, due: {rows:?}"
    );
}

/// A `refresh_auth` hook runs before the retry even when the step's own tool is a
/// pure built-in that a worker would otherwise answer on the spot.
pub async fn a_refresh_auth_hook_runs_before_the_retry(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("refreshed.txt");
    let yaml = format!(
        r#"
name: hooked
version: "1.0.0"
tools:
  - name: login
    type: shell
    command: [sh, -c, 'echo refreshed >> "$0"', "{}"]
steps:
  - id: call
    tool: fail
    inputs: {{class: authentication, message: "token expired"}}
    error_handlers:
      - {{class: authentication, action: refresh_auth, hook: login, max_attempts: 2}}
"#,
        marker.display()
    );
    let path = dir.path().join("hooked.awl.yaml");
    std::fs::write(&path, yaml).expect("write");
    let out = awl(&t)
        .output(&["run", path.to_str().expect("utf-8 path")])
        .await;
    assert!(!out.status.success(), "the second attempt fails too");
    let text = std::fs::read_to_string(&marker).expect("the hook ran");
    assert_eq!(text, "refreshed\n", "the hook ran once, before attempt 2");
}

// ---------------------------------------------------------------- 12. fencing

fn lease(run_id: &str, epoch: i64) -> Lease {
    Lease {
        run_id: run_id.into(),
        epoch,
    }
}

/// A worker whose lease ran out and whose run another worker claimed: its fence,
/// renewal and release all do nothing, even after it claims the run again under a
/// later epoch with the same name.
pub async fn a_stale_holder_is_fenced(backend: Backend) {
    let t = TestStore::new(backend).await;
    t.store
        .append(AppendRequest::new(
            StreamRef::new(StreamType::Run, "r-1"),
            ExpectedVersion::NoStream,
            vec![NewEvent::new("test.happened", 1, serde_json::json!({}))],
        ))
        .await
        .expect("append");
    let now = Utc::now();
    let mut tx = t.store.begin().await.unwrap();
    tx.wake_run("r-1", now).await.unwrap();
    tx.commit().await.unwrap();
    let second = chrono::Duration::seconds(1);

    let a = t
        .store
        .claim_runs("worker-a", now, now + second, 10, None)
        .await
        .unwrap();
    assert_eq!(a, vec![lease("r-1", 1)], "the first claim");
    let mut tx = t.store.begin().await.unwrap();
    assert_eq!(
        tx.fence("worker-a", &a).await.unwrap(),
        vec!["r-1".to_string()],
        "the holder passes its own fence"
    );
    tx.commit().await.unwrap();

    // A pauses past its lease; B claims the run.
    let later = now + second * 2;
    let b = t
        .store
        .claim_runs("worker-b", later, later + second * 30, 10, None)
        .await
        .unwrap();
    assert_eq!(
        b,
        vec![lease("r-1", 2)],
        "the takeover takes the next epoch"
    );

    // A comes back.
    let mut tx = t.store.begin().await.unwrap();
    assert!(
        tx.fence("worker-a", &a).await.unwrap().is_empty(),
        "the stale holder is fenced off"
    );
    let stale_release = Release {
        run_id: "r-1".into(),
        epoch: 1,
        due_at: None,
        version: 1,
        finished: true,
        waiting: None,
    };
    tx.release_runs("worker-a", std::slice::from_ref(&stale_release), later)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert!(
        t.store
            .renew_leases("worker-a", &a, later + second * 30)
            .await
            .unwrap()
            .is_empty(),
        "the stale holder cannot renew"
    );
    let rows = t.store.wakeups().await.unwrap();
    assert_eq!(
        rows.iter().find(|r| r.0 == "r-1").and_then(|r| r.2.clone()),
        Some("worker-b".to_string()),
        "the stale release left B's claim alone: {rows:?}"
    );

    // B gives the run back; A claims it again under the same name: only the new epoch
    // counts.
    let mut tx = t.store.begin().await.unwrap();
    tx.release_runs(
        "worker-b",
        &[Release {
            epoch: 2,
            finished: false,
            waiting: None,
            due_at: Some(later),
            ..stale_release.clone()
        }],
        later,
    )
    .await
    .unwrap();
    tx.commit().await.unwrap();
    let again = t
        .store
        .claim_runs("worker-a", later, later + second * 30, 10, None)
        .await
        .unwrap();
    assert_eq!(again, vec![lease("r-1", 3)]);
    let mut tx = t.store.begin().await.unwrap();
    assert!(
        tx.fence("worker-a", &a).await.unwrap().is_empty(),
        "epoch 1 stays stale"
    );
    assert_eq!(tx.fence("worker-a", &again).await.unwrap().len(), 1);
    // Postgres: while the fence holds the row, a claim passes it by.
    if matches!(t.location, StoreLocation::Postgres(_)) {
        let much_later = later + second * 60;
        let stolen = t
            .store
            .claim_runs("worker-c", much_later, much_later + second, 10, None)
            .await
            .unwrap();
        assert!(
            stolen.is_empty(),
            "a fenced row cannot be claimed: {stolen:?}"
        );
    }
    tx.commit().await.unwrap();
}

/// A worker process stopped (SIGSTOP) while its shell step runs, past its lease;
/// another worker takes the run over and runs the attempt again; the first worker is
/// then continued with its step's outcome in hand. Its outcome must not be recorded,
/// and it must not start the attempt a third time. End to end, this holds by several
/// means at once (the takeover's own append makes the stale commit conflict, and the
/// stale worker's next renewal drops the run); the fence itself, which also covers
/// the window before the new holder has written anything, is pinned down by
/// `a_stale_holder_is_fenced` and `a_worker_cannot_record_for_a_run_claimed_away`.
pub async fn a_paused_worker_cannot_record_after_a_takeover(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = dir.path().join("journal.txt");
    let yaml = format!(
        r#"
name: fenced
version: "1.0.0"
inputs:
  journal: {{type: string, required: true}}
steps:
  - id: slow
    type: shell
    script: |
      echo "start $PPID" >> "$1"
      sleep 2
      echo "end $PPID" >> "$1"
      printf '%s' "$PPID"
    args: ["{journal}"]
  - id: after
    type: tool
    tool: noop
"#,
        journal = journal.display()
    );
    let (_, registered) = register(&t.store, dir.path(), "fenced.yaml", &yaml).await;
    let run = start(&t.store, &registered, &[]).await;
    let lines = || std::fs::read_to_string(&journal).unwrap_or_default();

    let args = ["--lease-seconds", "1"];
    let first = worker(&t, dir.path(), "worker-a", &args);
    let a = first.pid();
    wait_for(LIMIT, "worker A to start the step", async || {
        lines().contains(&format!("start {a}")).then_some(())
    })
    .await;
    signal(a, "-STOP");
    let second = worker(&t, dir.path(), "worker-b", &args);
    let b = second.pid();
    wait_for(LIMIT, "worker B to take the run over", async || {
        lines().contains(&format!("start {b}")).then_some(())
    })
    .await;
    // A's step ends while A is stopped; A is continued with the outcome to report
    // while B's attempt still runs.
    wait_for(LIMIT, "worker A's step to end", async || {
        lines().contains(&format!("end {a}")).then_some(())
    })
    .await;
    signal(a, "-CONT");

    let events = wait_until_finished(&t.store, std::slice::from_ref(&run))
        .await
        .remove(&run)
        .expect("the run's events");
    // Give A time to do whatever it would do wrong.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let succeeded: Vec<&Value> = for_step(&events, "run.step_succeeded", "slow").collect();
    assert_eq!(succeeded.len(), 1, "one outcome recorded: {events:#?}");
    assert_eq!(
        succeeded[0]["output"]["stdout"],
        Value::String(b.to_string()),
        "the outcome recorded is the new holder's (A is {a}, B is {b})"
    );
    let starts = lines().lines().filter(|l| l.starts_with("start ")).count();
    assert_eq!(starts, 2, "A did not start the attempt again:\n{}", lines());
    let log = std::fs::read_to_string(dir.path().join("worker-a.log")).unwrap_or_default();
    assert!(
        log.contains("refused to write for a run another worker claimed")
            || log.contains("lease lost"),
        "worker A says it lost the run:\n{log}"
    );
    let check = awl(&t).ok(&["check"]).await;
    assert!(check.contains("no problems"), "awl check: {check}");
}

/// A worker that cannot renew its lease stops its steps before the lease runs out, so
/// no other worker can claim the run while they still run. The test holds the lock
/// the renewal needs (the run's row on Postgres, the database's write lock on SQLite)
/// while the worker's shell step runs: once the lease, as written, has run out, no
/// process of the step may be alive. Let go, the run is claimed again and the attempt
/// run again under the same key, and recorded once.
pub async fn a_worker_that_cannot_renew_stops_its_steps_before_the_lease_ends(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = dir.path().join("journal.txt");
    let yaml = r#"
name: lapsed
version: "1.0.0"
inputs:
  journal: {type: string, required: true}
steps:
  - id: slow
    type: shell
    script: |
      echo "start $$ $AWL_IDEMPOTENCY_KEY/$AWL_ATTEMPT" >> "$1"
      if [ ! -e "$1.again" ]; then touch "$1.again"; sleep 30; fi
      echo "end $$ $AWL_IDEMPOTENCY_KEY/$AWL_ATTEMPT" >> "$1"
    args: ["${{ inputs.journal }}"]
"#;
    let (_, registered) = register(&t.store, dir.path(), "lapsed.yaml", yaml).await;
    let run = start(
        &t.store,
        &registered,
        &[("journal", journal.to_str().expect("utf-8 path"))],
    )
    .await;
    let lines = || std::fs::read_to_string(&journal).unwrap_or_default();
    let _worker = worker(&t, dir.path(), "worker", &["--lease-seconds", "2"]);
    let pid: u32 = wait_for(LIMIT, "the step to start", async || {
        lines()
            .lines()
            .next()
            .and_then(|l| l.split(' ').nth(1))
            .and_then(|pid| pid.parse().ok())
    })
    .await;

    // Hold what the renewal needs, and read the lease as it stands.
    let held = LeaseHold::take(&t.location, &run).await;
    let ends = held.lease_until;
    assert!(
        !live_in_group(pid).is_empty(),
        "the step was still running when its renewals were stopped"
    );
    let left = (ends - Utc::now()).to_std().unwrap_or_default();
    tokio::time::sleep(left).await;
    let live = live_in_group(pid);
    held.release().await;
    assert!(
        live.is_empty(),
        "processes {live:?} of the step were still running when the lease ran out at {ends}"
    );

    let events = wait_until_finished(&t.store, std::slice::from_ref(&run))
        .await
        .remove(&run)
        .expect("the run's events");
    assert_eq!(of_type(&events, "run.completed").count(), 1, "{events:#?}");
    assert_eq!(for_step(&events, "run.step_succeeded", "slow").count(), 1);
    check_keys(&run, &events);
    let text = lines();
    let key = format!("{run}/slow/1");
    let starts = text.lines().filter(|l| l.starts_with("start ")).count();
    let ended = text.lines().filter(|l| l.starts_with("end ")).count();
    assert_eq!((starts, ended), (2, 1), "stopped once, run again:\n{text}");
    assert!(
        text.lines().all(|l| l.ends_with(&format!(" {key}"))),
        "both executions used key {key}:\n{text}"
    );
    let log = std::fs::read_to_string(dir.path().join("worker.log")).unwrap_or_default();
    assert!(
        log.contains(
            "it ran out before it could be renewed, so the run's steps in flight were stopped"
        ),
        "the worker says why it stopped the step:\n{log}"
    );
}

/// The lock a lease renewal waits for, held by the test.
struct LeaseHold {
    lease_until: DateTime<Utc>,
    conn: HoldConn,
}

enum HoldConn {
    Postgres(sqlx::PgConnection),
    Sqlite(sqlx::SqliteConnection),
}

impl LeaseHold {
    async fn take(location: &StoreLocation, run: &str) -> Self {
        match location {
            StoreLocation::Postgres(url) => {
                let mut conn = sqlx::PgConnection::connect(url).await.expect("connect");
                sqlx::query("BEGIN")
                    .execute(&mut conn)
                    .await
                    .expect("begin");
                let lease_until: DateTime<Utc> = sqlx::query_scalar(
                    "SELECT lease_until FROM run_wakeups WHERE run_id = $1 FOR UPDATE",
                )
                .bind(run)
                .fetch_one(&mut conn)
                .await
                .expect("the run's lease");
                Self {
                    lease_until,
                    conn: HoldConn::Postgres(conn),
                }
            }
            StoreLocation::Sqlite(path) => {
                let url = format!("sqlite://{}", path.display());
                let mut conn = sqlx::SqliteConnection::connect(&url)
                    .await
                    .expect("connect");
                sqlx::query("BEGIN IMMEDIATE")
                    .execute(&mut conn)
                    .await
                    .expect("the write lock");
                let micros: i64 =
                    sqlx::query_scalar("SELECT lease_until FROM run_wakeups WHERE run_id = ?1")
                        .bind(run)
                        .fetch_one(&mut conn)
                        .await
                        .expect("the run's lease");
                Self {
                    lease_until: DateTime::from_timestamp_micros(micros).expect("a time"),
                    conn: HoldConn::Sqlite(conn),
                }
            }
        }
    }

    async fn release(self) {
        match self.conn {
            HoldConn::Postgres(mut c) => {
                sqlx::query("ROLLBACK")
                    .execute(&mut c)
                    .await
                    .expect("rollback");
            }
            HoldConn::Sqlite(mut c) => {
                sqlx::query("ROLLBACK")
                    .execute(&mut c)
                    .await
                    .expect("rollback");
            }
        }
    }
}

/// The live (not zombie) processes of group `pgid`.
fn live_in_group(pgid: u32) -> Vec<u32> {
    let mut live = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // After the command's closing parenthesis: state, ppid, pgrp.
        let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.len() > 2 && fields[0] != "Z" && fields[2] == pgid.to_string() {
            live.push(pid);
        }
    }
    live
}

/// The fence itself, deterministically: while worker A runs a step, another claimant
/// takes the run over (a claim made as if A's lease had run out; A's next renewal is
/// seconds away) and writes nothing. A's commit of the step's outcome must be refused
/// and leave the log untouched; once the claimant gives the run back, the attempt is
/// run again under the same key and recorded once.
pub async fn a_worker_cannot_record_for_a_run_claimed_away(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let journal = dir.path().join("journal.txt");
    let yaml = format!(
        r#"
name: claimed-away
version: "1.0.0"
steps:
  - id: slow
    type: shell
    script: |
      echo "start $AWL_IDEMPOTENCY_KEY" >> "$1"
      sleep 1.5
      echo "end $AWL_IDEMPOTENCY_KEY" >> "$1"
    args: ["{journal}"]
  - id: after
    type: tool
    tool: noop
"#,
        journal = journal.display()
    );
    let (_, registered) = register(&t.store, dir.path(), "claimed.yaml", &yaml).await;
    let run = start(&t.store, &registered, &[]).await;
    let lines = || std::fs::read_to_string(&journal).unwrap_or_default();
    let _worker = worker(&t, dir.path(), "worker-a", &["--lease-seconds", "30"]);
    wait_for(LIMIT, "worker A to start the step", async || {
        lines().contains("start ").then_some(())
    })
    .await;

    let later = Utc::now() + chrono::Duration::hours(1);
    let only = [run.clone()];
    let stolen = t
        .store
        .claim_runs(
            "claimant",
            later,
            later + chrono::Duration::minutes(1),
            10,
            Some(&only),
        )
        .await
        .expect("claim");
    assert_eq!(
        stolen,
        vec![lease(&run, 2)],
        "the run is claimed away under epoch 2"
    );
    let log = || std::fs::read_to_string(dir.path().join("worker-a.log")).unwrap_or_default();
    wait_for(
        LIMIT,
        "worker A to refuse its own stale write",
        async || {
            log()
                .contains("refused to write for a run another worker claimed")
                .then_some(())
        },
    )
    .await;
    let events = events_of(&t.store, &run).await;
    assert_eq!(
        of_type(&events, "run.step_succeeded").count(),
        0,
        "nothing recorded by the stale holder: {events:#?}"
    );

    let version = events.last().map_or(0, |e| e.version);
    let mut tx = t.store.begin().await.expect("begin");
    tx.release_runs(
        "claimant",
        &[Release {
            run_id: run.clone(),
            epoch: 2,
            due_at: Some(Utc::now()),
            version,
            finished: false,
            waiting: None,
        }],
        Utc::now(),
    )
    .await
    .expect("give the run back");
    tx.commit().await.expect("commit");
    let events = wait_until_finished(&t.store, std::slice::from_ref(&run))
        .await
        .remove(&run)
        .expect("the run's events");
    assert_eq!(for_step(&events, "run.step_succeeded", "slow").count(), 1);
    let starts = lines().lines().filter(|l| l.starts_with("start ")).count();
    assert_eq!(starts, 2, "run again once, under one key:\n{}", lines());
    let check = awl(&t).ok(&["check"]).await;
    assert!(check.contains("no problems"), "awl check: {check}");
}

fn signal(pid: u32, which: &str) {
    let status = std::process::Command::new("kill")
        .args([which, &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(status.success(), "kill {which} {pid}");
}

// ---------------------------------------------------------------- registration

// `executor::postgres::NAME` and `executor::sqlite::NAME`.
// ---------------------------------------------------------------- wake-ups of an idle worker

const ONE_STEP: &str = r#"
name: one-step
version: "1.0.0"
steps:
  - id: say
    type: tool
    tool: echo
    inputs: {message: "hi"}
"#;

/// A worker in this process with the default runners and the given fallback poll:
/// the sender that stops it, and its task.
fn in_process_worker(
    store: &EventStore,
    owner: &str,
    poll: Duration,
) -> (
    tokio::sync::watch::Sender<bool>,
    tokio::task::JoinHandle<Result<(), awl::executor::ExecError>>,
) {
    let config = WorkerConfig {
        poll,
        ..WorkerConfig::new(owner)
    };
    let (stop, stop_rx) = tokio::sync::watch::channel(false);
    let worker = Worker::new(
        store.clone(),
        Runners::new(RunnersConfig::default()),
        config,
        wall_clock(),
    );
    (stop, tokio::spawn(worker.run(stop_rx)))
}

/// With its fallback poll set to a minute, an idle worker still takes a new run at
/// once. A run started in this process wakes it: the start is a transaction that
/// writes the run's wake-up. On Postgres, so does a run started by another process,
/// through its notification. (Workers are not woken by every event committed, so
/// these are the signals they have.)
pub async fn an_idle_worker_is_woken_by_a_run_start_not_by_its_poll(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, registered) = register(&t.store, dir.path(), "one.yaml", ONE_STEP).await;
    let (stop, worker) = in_process_worker(&t.store, "idle", Duration::from_secs(60));
    let other = match backend {
        Backend::Postgres => Some(EventStore::open_default(&t.location).await.unwrap()),
        Backend::Sqlite => None,
    };
    let starters: Vec<(&str, &EventStore)> = std::iter::once(("this process", &t.store))
        .chain(other.iter().map(|o| ("another process", o)))
        .collect();
    for (who, store) in starters {
        // Let the worker go idle: nothing is due, so it sleeps for its poll.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let run = start(store, &registered, &[]).await;
        let done = poll(10, async || {
            is_finished(&events_of(&t.store, &run).await).then_some(())
        })
        .await;
        assert!(done.is_some(), "a run started by {who} waited for the poll");
    }
    stop.send(true).expect("stop the worker");
    worker.await.expect("join").expect("the worker ran");
}

const WAITS_ON_AN_AGENT: &str = r#"
name: waits-on-an-agent
version: "1.0.0"
steps:
  - id: implement
    type: agent
    prompt: "Implement it"
    capabilities: [rust]
"#;

/// A run whose task cannot be read back (an event in the task's stream that is not a
/// task event) is set aside for a minute; the worker goes on with every other run
/// instead of failing each round on it.
pub async fn an_unreadable_run_does_not_stop_the_others(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, waiting) = register(&t.store, dir.path(), "agent.yaml", WAITS_ON_AN_AGENT).await;
    let (_, one) = register(&t.store, dir.path(), "one.yaml", ONE_STEP).await;
    let (stop, worker) = in_process_worker(&t.store, "busy", Duration::from_millis(100));

    let poisoned = start(&t.store, &waiting, &[]).await;
    let step = StepId::try_from("implement").unwrap();
    let task = awl::engine::task_id(poisoned.parse().unwrap(), &step, 1).to_string();
    let task_stream = StreamRef::new(StreamType::Task, task.as_str());
    let queued = poll(LIMIT, async || {
        let events = t.store.read_stream(&task_stream).await.unwrap();
        (!events.is_empty()).then_some(())
    })
    .await;
    assert!(queued.is_some(), "the agent step's task was never queued");
    t.store
        .append(AppendRequest::new(
            task_stream,
            ExpectedVersion::Any,
            vec![NewEvent::new(
                "task.garbled",
                1,
                serde_json::json!({"x": 1}),
            )],
        ))
        .await
        .expect("append an event the task cannot read");
    let mut tx = t.store.begin().await.unwrap();
    tx.wake_run(&poisoned, Utc::now()).await.unwrap();
    tx.commit().await.unwrap();
    // The worker has taken the poisoned run (it holds it, or has set it aside) before
    // another run is started.
    let taken = poll(LIMIT, async || {
        let rows = t.store.wakeups().await.unwrap();
        rows.iter()
            .any(|(id, due, owner)| {
                *id == poisoned
                    && (owner.is_some()
                        || due.is_some_and(|d| d > Utc::now() + chrono::TimeDelta::seconds(30)))
            })
            .then_some(())
    })
    .await;
    assert!(taken.is_some(), "the woken run was never claimed");
    let other = start(&t.store, &one, &[]).await;
    let done = poll(30, async || {
        is_finished(&events_of(&t.store, &other).await).then_some(())
    })
    .await;
    assert!(
        done.is_some(),
        "a run whose task cannot be read stopped the worker's other runs"
    );
    let rows = t.store.wakeups().await.unwrap();
    let (_, due, owner) = rows
        .iter()
        .find(|(id, _, _)| *id == poisoned)
        .unwrap_or_else(|| panic!("the poisoned run left the queue: {rows:?}"));
    assert!(
        owner.is_none(),
        "the poisoned run is given back, not held: {rows:?}"
    );
    let due = due.expect("a due time");
    assert!(
        due > Utc::now() + chrono::TimeDelta::seconds(30),
        "the poisoned run is set aside for a minute, not retried at once: due {due}"
    );
    assert!(!is_finished(&events_of(&t.store, &poisoned).await));
    stop.send(true).expect("stop the worker");
    worker.await.expect("join").expect("the worker ran");
}

const PRINTS_NUL: &str = r#"
name: prints-nul
version: "1.0.0"
inputs:
  text: {type: string}
steps:
  - id: emit
    type: shell
    script: 'printf "a\\000b"'
  - id: complain
    type: shell
    script: 'printf "bad\\000news" >&2; exit 3'
    on_error: continue
  - id: after
    type: tool
    tool: echo
    inputs: {message: "${{ steps.emit.output.stdout }}"}
"#;

/// A process that prints a NUL character (which Postgres's JSONB cannot hold) neither
/// stops its run nor the worker: the step's output and its failure's message are
/// recorded with the replacement character, later steps read them, and the worker's
/// other runs go on. A run started with a NUL in its inputs is refused, saying where.
pub async fn a_nul_from_a_process_is_recorded_as_a_replacement(backend: Backend) {
    let t = TestStore::new(backend).await;
    let dir = tempfile::tempdir().expect("temp dir");
    let (_, nul) = register(&t.store, dir.path(), "nul.yaml", PRINTS_NUL).await;
    let (_, one) = register(&t.store, dir.path(), "one.yaml", ONE_STEP).await;
    let (stop, worker) = in_process_worker(&t.store, "nul", Duration::from_millis(100));
    let run = start(&t.store, &nul, &[("text", "plain")]).await;
    // The other run starts once the NUL has been printed and its recording tried.
    let printed = poll(LIMIT, async || {
        let events = events_of(&t.store, &run).await;
        for_step(&events, "run.step_started", "emit")
            .next()
            .map(|_| ())
    })
    .await;
    assert!(
        printed.is_some(),
        "the step that prints a NUL never started"
    );
    tokio::time::sleep(Duration::from_millis(500)).await;
    let other = start(&t.store, &one, &[]).await;
    let finished = all_finished(&t.store, std::slice::from_ref(&other)).await;
    assert!(
        finished.is_some(),
        "a NUL in a step's output stopped the worker"
    );
    let finished = all_finished(&t.store, std::slice::from_ref(&run)).await;
    assert!(
        finished.is_some(),
        "a NUL in a step's output stopped its run"
    );
    let events = events_of(&t.store, &run).await;
    assert_eq!(of_type(&events, "run.completed").count(), 1, "{events:#?}");
    let emitted: Vec<_> = for_step(&events, "run.step_succeeded", "emit").collect();
    assert_eq!(emitted[0]["output"]["stdout"], "a\u{FFFD}b");
    let failed: Vec<_> = for_step(&events, "run.step_failed", "complain").collect();
    let message = failed[0]["error"]["message"].as_str().unwrap();
    assert!(message.contains("bad\u{FFFD}news"), "{message}");
    let after: Vec<_> = for_step(&events, "run.step_succeeded", "after").collect();
    assert_eq!(after[0]["output"]["message"], "a\u{FFFD}b");

    let refused = Runs::new(t.store.clone(), wall_clock())
        .start_version(
            &nul,
            Map::from_iter([("text".to_string(), Value::from("x\u{0}y"))]),
            "test",
        )
        .await
        .expect_err("a NUL in an input is refused");
    let said = refused.to_string();
    assert!(
        said.contains("NUL") && said.contains("/inputs/text"),
        "{said}"
    );
    stop.send(true).expect("stop the worker");
    worker.await.expect("join").expect("the worker ran");
}

crate::support::on_both_stores!(
    worker_threads = 4;
    a_killed_worker_loses_nothing,
    a_nul_from_a_process_is_recorded_as_a_replacement,
    an_unreadable_run_does_not_stop_the_others,
    an_idle_worker_is_woken_by_a_run_start_not_by_its_poll,
    two_workers_never_run_one_attempt_at_once,
    hostile_inputs_stay_inert,
    backoff_is_a_due_time_in_the_database,
    a_cancelled_run_stops,
    a_release_keeps_a_concurrent_wake_up,
    every_child_wakes_its_parent,
    a_run_over_budget_stops,
    http_and_notify_steps_run_against_a_server,
    a_stopping_worker_gives_runs_back_within_its_lease,
    a_refresh_auth_hook_runs_before_the_retry,
    a_stale_holder_is_fenced,
    a_paused_worker_cannot_record_after_a_takeover,
    a_worker_that_cannot_renew_stops_its_steps_before_the_lease_ends,
    a_worker_cannot_record_for_a_run_claimed_away,
);
