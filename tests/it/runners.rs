//! The runners against real processes, a real HTTP server (axum on 127.0.0.1:0) and
//! real databases (a fresh Postgres database and a fresh SQLite file).
//!
//! The security properties are tested with payloads that *would* do something if
//! they were spliced into shell or SQL text; `splicing_the_payload_would_run_it`
//! checks that the payload is live, so the inertness tests can fail.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use awl::clock::ManualMonotonic;
use awl::domain::ids::RunId;
use awl::domain::run::ErrorClass;
use awl::runners::breaker::BreakerState;
use awl::runners::{Attempt, BreakerConfig, Runners, RunnersConfig, StepFailure, StepSuccess};
use awl::store::StoreLocation;
use awl::workflow::model::{DatabaseStep, HttpStep, NotifyStep, ShellStep};
use axum::Router;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::Redirect;
use axum::routing::{any, get, post};
use base64::Engine as _;
use serde_json::{Value, json};
use sqlx::Connection;

use crate::support::{Backend, TestStore, within};

// ---------------------------------------------------------------- fixtures

fn attempt(base: &Path, timeout: Option<Duration>) -> Attempt<'_> {
    Attempt {
        run_id: RunId::new(),
        step_id: "step-1",
        attempt: 3,
        idempotency_key: "idem-42",
        timeout,
        base_dir: base,
        mask: &awl::vault::mask::NO_SECRETS,
    }
}

fn shell(v: Value) -> ShellStep {
    serde_json::from_value(v).expect("a shell step")
}

fn http_step(v: Value) -> HttpStep {
    serde_json::from_value(v).expect("an http step")
}

fn notify_step(v: Value) -> NotifyStep {
    serde_json::from_value(v).expect("a notify step")
}

fn db_step(connection: &str, query: &str, params: Value) -> DatabaseStep {
    serde_json::from_value(json!({"connection": connection, "query": query, "params": params}))
        .expect("a database step")
}

fn ok(result: Result<StepSuccess, StepFailure>) -> Value {
    match result {
        Ok(success) => success.output,
        Err(f) => panic!("expected success, got {f} (output: {:?})", f.output),
    }
}

fn failed(result: Result<StepSuccess, StepFailure>) -> StepFailure {
    match result {
        Ok(success) => panic!("expected a failure, got {}", success.output),
        Err(f) => f,
    }
}

fn tmp() -> tempfile::TempDir {
    tempfile::tempdir().expect("temp dir")
}

/// `step` ends within `secs`, failing with `class`; the failure.
async fn fails_within(
    secs: u64,
    what: &str,
    class: ErrorClass,
    step: impl std::future::Future<Output = Result<StepSuccess, StepFailure>>,
) -> StepFailure {
    let f = failed(within(secs, what, step).await);
    assert_eq!(f.class, class, "{what}: {}", f.message);
    f
}

/// A local port nothing listens on.
fn refused_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    listener.local_addr().expect("addr").port()
}

/// Runners whose breakers open after 2 failures for 30 s of `clock`'s time.
fn breaking_runners(clock: &Arc<ManualMonotonic>) -> Runners {
    Runners::new(RunnersConfig {
        circuit_breaker: BreakerConfig {
            failures: 2,
            open_for: Duration::from_secs(30),
        },
        clock: clock.clone(),
        ..RunnersConfig::default()
    })
}

// ---------------------------------------------------------------- shell

#[tokio::test]
async fn runners_shell_command_is_argv_with_args_appended() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let out = ok(r
        .shell(
            &attempt(dir.path(), None),
            &shell(json!({"command": ["printf", "[%s]"], "args": ["a b", "", "c"]})),
        )
        .await);
    assert_eq!(out["stdout"], "[a b][][c]");
    assert_eq!(out["stderr"], "");
    assert_eq!(out["exit_code"], 0);
    assert!(out.get("stdout_truncated").is_none());
}

#[tokio::test]
async fn runners_shell_script_reads_args_env_stdin_and_attempt_variables() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let a = attempt(dir.path(), None);
    let out = ok(r
        .shell(
            &a,
            &shell(json!({
                "script": "printf '%s\\n' \"$1\" \"$2\" \"$GREETING\"; cat; printf '%s\\n' \"$AWL_RUN_ID\" \"$AWL_STEP_ID\" \"$AWL_ATTEMPT\" \"$AWL_IDEMPOTENCY_KEY\"",
                "args": ["first arg", "second"],
                "env": {"GREETING": "hello there"},
                "stdin": "from stdin\n",
            })),
        )
        .await);
    let expected = format!(
        "first arg\nsecond\nhello there\nfrom stdin\n{}\nstep-1\n3\nidem-42\n",
        a.run_id
    );
    assert_eq!(out["stdout"], expected);
}

#[tokio::test]
async fn runners_shell_environment_is_minimal() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let out = ok(r
        .shell(
            &attempt(dir.path(), None),
            &shell(json!({"command": ["env"], "env": {"MINE": "1"}})),
        )
        .await);
    let stdout = out["stdout"].as_str().expect("stdout");
    let mut names: Vec<&str> = stdout
        .lines()
        .filter_map(|line| line.split_once('=').map(|(k, _)| k))
        .collect();
    names.sort_unstable();
    // Exactly: what awl passes on from its own environment (PATH always, a default
    // if it has none), the step's env, and awl's variables. `env` is run directly,
    // so no shell adds PWD, SHLVL or `_`.
    let mut expected: Vec<&str> = ["HOME", "LANG", "TMPDIR"]
        .into_iter()
        .filter(|name| std::env::var_os(name).is_some())
        .chain([
            "PATH",
            "MINE",
            "AWL_RUN_ID",
            "AWL_STEP_ID",
            "AWL_ATTEMPT",
            "AWL_IDEMPOTENCY_KEY",
        ])
        .collect();
    expected.sort_unstable();
    assert_eq!(names, expected, "{stdout}");
    assert!(stdout.lines().any(|line| line == "MINE=1"), "{stdout}");
}

#[tokio::test]
async fn runners_shell_working_dir_is_relative_to_the_base_dir() {
    let dir = tmp();
    std::fs::create_dir(dir.path().join("sub")).expect("mkdir");
    let r = Runners::new(RunnersConfig::default());
    let out = ok(r
        .shell(
            &attempt(dir.path(), None),
            &shell(json!({"command": ["pwd", "-P"], "working_dir": "sub"})),
        )
        .await);
    let expected = dir.path().join("sub").canonicalize().expect("canonical");
    assert_eq!(out["stdout"], format!("{}\n", expected.display()));

    // Without working_dir: the base directory.
    let out = ok(r
        .shell(
            &attempt(dir.path(), None),
            &shell(json!({"command": ["pwd", "-P"]})),
        )
        .await);
    let expected = dir.path().canonicalize().expect("canonical");
    assert_eq!(out["stdout"], format!("{}\n", expected.display()));

    let f = failed(
        r.shell(
            &attempt(dir.path(), None),
            &shell(json!({"command": ["pwd"], "working_dir": "missing"})),
        )
        .await,
    );
    assert_eq!(f.class, ErrorClass::Validation);
    assert!(f.message.contains("missing"), "{}", f.message);
}

#[tokio::test]
async fn runners_shell_exit_codes_are_classified() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let a = attempt(dir.path(), None);

    let f = failed(
        r.shell(
            &a,
            &shell(json!({"script": "echo out; echo err >&2; exit 3"})),
        )
        .await,
    );
    assert_eq!(f.class, ErrorClass::Unknown);
    assert!(f.message.contains("code 3"), "{}", f.message);
    assert!(f.message.contains("err"), "{}", f.message);
    let output = f.output.expect("output attached");
    assert_eq!(output["stdout"], "out\n");
    assert_eq!(output["stderr"], "err\n");
    assert_eq!(output["exit_code"], 3);

    let out = ok(r
        .shell(
            &a,
            &shell(json!({"script": "exit 3", "success_exit_codes": [0, 3]})),
        )
        .await);
    assert_eq!(out["exit_code"], 3);

    let f = failed(
        r.shell(&a, &shell(json!({"script": "no-such-command-awl-test"})))
            .await,
    );
    assert_eq!(f.class, ErrorClass::Dependency, "{}", f.message);
    assert!(f.message.contains("127"), "{}", f.message);

    let f = failed(
        r.shell(
            &a,
            &shell(json!({"command": ["no-such-program-awl-test", "x"]})),
        )
        .await,
    );
    assert_eq!(f.class, ErrorClass::Dependency);
    assert!(f.message.contains("not found"), "{}", f.message);

    let f = failed(r.shell(&a, &shell(json!({"script": "kill -9 $$"}))).await);
    assert_eq!(f.class, ErrorClass::Unknown);
    assert!(f.message.contains("SIGKILL"), "{}", f.message);
    assert_eq!(f.output.expect("output")["exit_code"], Value::Null);
}

#[tokio::test]
async fn runners_shell_json_stdout_is_parsed() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let out = ok(r
        .shell(
            &attempt(dir.path(), None),
            &shell(json!({"command": ["printf", "{\"a\": [1, 2], \"b\": null}\n"]})),
        )
        .await);
    assert_eq!(out["json"], json!({"a": [1, 2], "b": null}));
    let out = ok(r
        .shell(
            &attempt(dir.path(), None),
            &shell(json!({"command": ["echo", "not json"]})),
        )
        .await);
    assert!(out.get("json").is_none());
}

/// A program named without a `/` is found in the `PATH` the step's process gets,
/// as `execvp` finds it: the first directory holding an executable file of that
/// name (a file that is not executable, or a directory, is passed over), an empty
/// entry meaning the working directory, and the step's own `PATH` over awl's.
#[tokio::test]
async fn runners_shell_finds_programs_in_the_steps_path() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tmp();
    let script = |path: &Path, text: &str, mode: u32| {
        std::fs::write(path, format!("#!/bin/sh\necho {text}\n")).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    let first = dir.path().join("first");
    let second = dir.path().join("second");
    std::fs::create_dir_all(first.join("awl-greet-d")).unwrap();
    std::fs::create_dir_all(&second).unwrap();
    script(&first.join("awl-greet"), "not-executable", 0o644);
    script(&second.join("awl-greet"), "from-second", 0o755);
    script(&dir.path().join("awl-here"), "from-working-dir", 0o755);
    let path = format!("{}:{}:", first.display(), second.display());
    let r = Runners::new(RunnersConfig::default());
    let a = attempt(dir.path(), None);
    let run = |program: &str| shell(json!({"command": [program], "env": {"PATH": path}}));
    let out = ok(r.shell(&a, &run("awl-greet")).await);
    assert_eq!(out["stdout"], "from-second\n");
    let out = ok(r.shell(&a, &run("awl-here")).await);
    assert_eq!(out["stdout"], "from-working-dir\n");
    let f = failed(r.shell(&a, &run("awl-greet-d")).await);
    assert_eq!(f.class, ErrorClass::Dependency, "{}", f.message);
    assert!(f.message.contains("not found"), "{}", f.message);
    // awl's own PATH (no `PATH` in the step): `awl-greet` is on neither.
    let f = failed(r.shell(&a, &shell(json!({"command": ["awl-greet"]}))).await);
    assert_eq!(f.class, ErrorClass::Dependency, "{}", f.message);
    // A path with a `/` is used as it is, relative to the working directory.
    let out = ok(r
        .shell(&a, &shell(json!({"command": ["./awl-here"]})))
        .await);
    assert_eq!(out["stdout"], "from-working-dir\n");
}

/// Whether process `pid` has ended (gone, or a zombie nobody reaped yet).
fn ended(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
    }
}

/// The pid a step printed on stdout.
fn pid_in(output: &Value) -> u32 {
    output["stdout"]
        .as_str()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or_else(|| panic!("a pid on stdout in {output}"))
}

/// Process `pid` ends within 5 s.
async fn ends(pid: u32, what: &str) {
    let mut waited = 0;
    while !ended(pid) {
        assert!(waited < 50, "{what} {pid} still runs");
        tokio::time::sleep(Duration::from_millis(100)).await;
        waited += 1;
    }
}

#[tokio::test]
async fn runners_shell_timeout_kills_the_whole_process_group() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());

    fails_within(
        15,
        "a timed-out sleep",
        ErrorClass::Timeout,
        r.shell(
            &attempt(dir.path(), Some(Duration::from_millis(300))),
            &shell(json!({"command": ["sleep", "30"]})),
        ),
    )
    .await;

    // A grandchild: the shell backgrounds `sleep` and waits for it.
    let f = fails_within(
        15,
        "a timed-out process group",
        ErrorClass::Timeout,
        r.shell(
            &attempt(dir.path(), Some(Duration::from_millis(500))),
            &shell(json!({"command": ["sh", "-c", "sleep 30 & echo $!; wait"]})),
        ),
    )
    .await;
    let output = f.output.expect("partial output attached");
    ends(pid_in(&output), "the grandchild").await;
}

#[tokio::test]
async fn runners_shell_leftover_background_processes_do_not_outlive_the_step() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let out = within(
        15,
        "a step that leaves a background process",
        r.shell(
            &attempt(dir.path(), None),
            &shell(json!({"script": "sleep 30 & echo $!"})),
        ),
    )
    .await
    .expect("the script itself succeeds");
    ends(pid_in(&out.output), "the background sleep").await;
}

#[tokio::test]
async fn runners_shell_a_cancelled_attempt_kills_its_process_group() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let pid_file = dir.path().join("pid");
    // No timeout of its own: the caller gives up on it (drops the future).
    let step = shell(json!({
        "script": "sleep 30 & echo $! > \"$1\"; wait",
        "args": [pid_file.display().to_string()],
    }));
    let a = attempt(dir.path(), None);
    let cancelled = tokio::time::timeout(Duration::from_millis(500), r.shell(&a, &step)).await;
    assert!(
        cancelled.is_err(),
        "the step ended by itself: {cancelled:?}"
    );
    let pid: u32 = std::fs::read_to_string(&pid_file)
        .expect("the script wrote its pid file")
        .trim()
        .parse()
        .expect("a pid");
    ends(pid, "the background sleep").await;
}

#[tokio::test]
async fn runners_shell_a_process_that_left_the_group_delays_the_step_by_the_grace_only() {
    // `setsid` takes the sleep out of the step's process group (so it is not
    // killed), still holding stdout and stderr: the step waits for the pipes for
    // the grace period (2 s), once for both, and then ends with what it read.
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let started = std::time::Instant::now();
    let out = ok(within(
        15,
        "a step whose pipes stay open",
        r.shell(
            &attempt(dir.path(), None),
            &shell(json!({
                // The step ends only once the sleep has left its group.
                "script": "setsid sh -c 'echo $$; : > \"$1\"; exec sleep 10' awl \"$1\" & \
                           while [ ! -e \"$1\" ]; do sleep 0.01; done; echo err >&2",
                "args": [dir.path().join("escaped").display().to_string()],
            })),
        ),
    )
    .await);
    let elapsed = started.elapsed();
    let pid = out["stdout"]
        .as_str()
        .and_then(|s| s.trim().parse::<u32>().ok());
    if let Some(pid) = pid {
        let _ = std::process::Command::new("kill")
            .arg(pid.to_string())
            .status();
    }
    assert!(pid.is_some(), "{out}");
    assert_eq!(out["stderr"], "err\n");
    assert!(elapsed >= Duration::from_millis(1900), "{elapsed:?}");
    assert!(elapsed < Duration::from_millis(3500), "{elapsed:?}");
}

#[tokio::test]
async fn runners_shell_output_is_capped_and_the_child_never_blocks() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    // 5 MB on each stream, far past both the cap and a pipe's buffer.
    let out = within(
        60,
        "a chatty process",
        r.shell(
            &attempt(dir.path(), Some(Duration::from_secs(50))),
            &shell(json!({
                "script": "head -c 5000000 /dev/zero | tr '\\0' 'a'; head -c 5000000 /dev/zero | tr '\\0' 'b' >&2; echo done >&2",
                "max_output_bytes": 1000,
            })),
        ),
    )
    .await
    .expect("exits 0");
    let output = out.output;
    assert_eq!(output["stdout"].as_str().map(str::len), Some(1000));
    assert_eq!(output["stdout_truncated"], true);
    assert_eq!(output["stderr"].as_str().map(str::len), Some(1000));
    assert_eq!(output["stderr_truncated"], true);
    assert_eq!(output["exit_code"], 0);
    assert!(output.get("json").is_none());

    // The default cap comes from the configuration.
    let r = Runners::new(RunnersConfig {
        max_output_bytes_default: 10,
        ..RunnersConfig::default()
    });
    let out = ok(r
        .shell(
            &attempt(dir.path(), None),
            &shell(json!({"command": ["echo", "0123456789abcdef"]})),
        )
        .await);
    assert_eq!(out["stdout"], "0123456789");
    assert_eq!(out["stdout_truncated"], true);
}

/// Payloads that do something when spliced into shell or SQL text.
fn payloads(marker: &Path) -> Vec<String> {
    vec![
        r#""; rm -rf ~; echo ""#.to_string(),
        format!("$(touch {})", marker.display()),
        format!("`touch {}-bt`", marker.display()),
        "`id`".to_string(),
        "' OR 1=1 --".to_string(),
        "$HOME ${PATH} \\n \n\t * ? [a] ~ | & ; < > ( ) { } ! #".to_string(),
    ]
}

fn marker() -> PathBuf {
    std::env::temp_dir().join(format!("pwned-{}", uuid::Uuid::new_v4().simple()))
}

fn no_marker(marker: &Path) {
    let backtick = PathBuf::from(format!("{}-bt", marker.display()));
    assert!(!marker.exists(), "{} was created", marker.display());
    assert!(!backtick.exists(), "{} was created", backtick.display());
}

#[test]
fn splicing_the_payload_would_run_it() {
    // The control for the inertness tests: the same payload pasted into script text
    // does create the file, so "no file" below means "not executed".
    let marker = marker();
    let payload = format!("$(touch {})", marker.display());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("echo {payload} >/dev/null"))
        .status()
        .expect("sh");
    assert!(status.success());
    assert!(marker.exists(), "the control payload did not run");
    let _ = std::fs::remove_file(&marker);
}

#[tokio::test]
async fn runners_shell_values_are_inert_in_args_env_and_stdin() {
    let dir = tmp();
    let r = Runners::new(RunnersConfig::default());
    let a = attempt(dir.path(), None);
    let marker = marker();
    for value in payloads(&marker) {
        // argv of a program
        let out = ok(r
            .shell(&a, &shell(json!({"command": ["printf", "%s", value]})))
            .await);
        assert_eq!(out["stdout"], value.as_str(), "command argv");
        // `args` appended to a command
        let out = ok(r
            .shell(
                &a,
                &shell(json!({"command": ["printf", "%s"], "args": [value]})),
            )
            .await);
        assert_eq!(out["stdout"], value.as_str(), "args");
        // a script's $1
        let out = ok(r
            .shell(
                &a,
                &shell(json!({"script": "printf '%s' \"$1\"", "args": [value]})),
            )
            .await);
        assert_eq!(out["stdout"], value.as_str(), "script $1");
        // an environment variable
        let out = ok(r
            .shell(
                &a,
                &shell(json!({"script": "printf '%s' \"$V\"", "env": {"V": value}})),
            )
            .await);
        assert_eq!(out["stdout"], value.as_str(), "env");
        // stdin
        let out = ok(r
            .shell(&a, &shell(json!({"command": ["cat"], "stdin": value})))
            .await);
        assert_eq!(out["stdout"], value.as_str(), "stdin");
    }
    no_marker(&marker);
    // `rm -rf ~` did not run either: the workflow's folder and HOME still exist.
    assert!(dir.path().exists());
    if let Some(home) = std::env::var_os("HOME") {
        assert!(Path::new(&home).exists(), "{}", Path::new(&home).display());
    }
}

// ---------------------------------------------------------------- database

/// A fresh database of `backend` and its URL. The guard drops the database.
async fn fresh_database(backend: Backend) -> (String, Box<dyn std::any::Any>) {
    match backend {
        Backend::Postgres => {
            let store = TestStore::new(Backend::Postgres).await;
            let StoreLocation::Postgres(url) = store.location.clone() else {
                unreachable!("a Postgres store has a Postgres location")
            };
            (url, Box::new(store))
        }
        Backend::Sqlite => {
            let dir = tmp();
            let url = format!(
                "sqlite://{}?mode=rwc",
                dir.path().join("steps.db").display()
            );
            (url, Box::new(dir))
        }
    }
}

fn runners_with(connections: &[(&str, &str)], tweak: impl FnOnce(&mut RunnersConfig)) -> Runners {
    let mut config = RunnersConfig::default();
    for (name, url) in connections {
        config
            .connections
            .insert((*name).to_string(), (*url).to_string());
    }
    tweak(&mut config);
    Runners::new(config)
}

async fn database_roundtrip(backend: Backend) {
    let (url, _guard) = fresh_database(backend).await;
    let r = runners_with(&[("main", &url)], |_| {});
    let dir = tmp();
    let a = attempt(dir.path(), Some(Duration::from_secs(20)));
    let pg = backend == Backend::Postgres;

    let create = if pg {
        "CREATE TABLE items (id BIGSERIAL PRIMARY KEY, name TEXT NOT NULL, qty INT, \
         price DOUBLE PRECISION, active BOOLEAN, meta JSONB, at TIMESTAMPTZ, amount NUMERIC(10,3))"
    } else {
        "CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT NOT NULL, qty INTEGER, \
         price REAL, active BOOLEAN, meta TEXT)"
    };
    let out = ok(r.database(&a, &db_step("main", create, json!([]))).await);
    assert_eq!(out["rows"], json!([]));
    assert_eq!(out["row_count"], 0);

    let insert = if pg {
        "INSERT INTO items (name, qty, price, active, meta, at, amount) \
         VALUES ($1, $2, $3, $4, $5, $6::timestamptz, $7)"
    } else {
        "INSERT INTO items (name, qty, price, active, meta) VALUES (?1, ?2, ?3, ?4, ?5)"
    };
    let rows = [
        json!(["widget", 3, 2.5, true, {"color": "red"}, "2024-05-06T07:08:09.5Z", 12.34]),
        json!(["' OR 1=1 --", null, null, false, [1, 2], null, null]),
        json!(["gadget", 7, 0.25, true, null, null, 1000]),
    ];
    for params in rows {
        let mut params = params.as_array().cloned().expect("array");
        if !pg {
            params.truncate(5);
        }
        let out = ok(r
            .database(&a, &db_step("main", insert, Value::Array(params)))
            .await);
        assert_eq!(out["rows_affected"], 1, "{out}");
        assert_eq!(out["row_count"], 0);
    }

    // The injection payload, as a parameter, matches only the row that holds it.
    let by_name = if pg {
        "SELECT id, name, qty, price, active FROM items WHERE name = $1 ORDER BY id"
    } else {
        "SELECT id, name, qty, price, active FROM items WHERE name = ?1 ORDER BY id"
    };
    let out = ok(r
        .database(&a, &db_step("main", by_name, json!(["' OR 1=1 --"])))
        .await);
    assert_eq!(
        out["rows"],
        json!([{"id": 2, "name": "' OR 1=1 --", "qty": null, "price": null, "active": false}])
    );
    assert_eq!(out["row_count"], 1);
    let out = ok(r
        .database(&a, &db_step("main", by_name, json!(["x' OR '1'='1"])))
        .await);
    assert_eq!(out["rows"], json!([]), "an injected condition matched rows");

    // A trailing semicolon and comment are fine; the same statement with a
    // parameter of another type (an integer, then a float) is prepared again rather
    // than fed bytes of the wrong type.
    let count = if pg {
        "SELECT count(*) AS n FROM items WHERE qty = $1; -- by quantity"
    } else {
        "SELECT count(*) AS n FROM items WHERE qty = ?1; -- by quantity"
    };
    let out = ok(r.database(&a, &db_step("main", count, json!([3]))).await);
    assert_eq!(out["rows"], json!([{"n": 1}]));
    let out = ok(r.database(&a, &db_step("main", count, json!([7.0]))).await);
    assert_eq!(out["rows"], json!([{"n": 1}]));

    // Typed JSON back.
    let all = if pg {
        "SELECT id, name, qty, price, active, meta, at, amount FROM items ORDER BY id"
    } else {
        "SELECT id, name, qty, price, active, meta FROM items ORDER BY id"
    };
    let out = ok(r.database(&a, &db_step("main", all, json!([]))).await);
    let expected = if pg {
        json!([
            {"id": 1, "name": "widget", "qty": 3, "price": 2.5, "active": true,
             "meta": {"color": "red"}, "at": "2024-05-06T07:08:09.500Z", "amount": "12.340"},
            {"id": 2, "name": "' OR 1=1 --", "qty": null, "price": null, "active": false,
             "meta": [1, 2], "at": null, "amount": null},
            {"id": 3, "name": "gadget", "qty": 7, "price": 0.25, "active": true,
             "meta": null, "at": null, "amount": "1000.000"},
        ])
    } else {
        json!([
            {"id": 1, "name": "widget", "qty": 3, "price": 2.5, "active": true,
             "meta": "{\"color\":\"red\"}"},
            {"id": 2, "name": "' OR 1=1 --", "qty": null, "price": null, "active": false,
             "meta": "[1,2]"},
            {"id": 3, "name": "gadget", "qty": 7, "price": 0.25, "active": true, "meta": null},
        ])
    };
    assert_eq!(out["rows"], expected);
    assert_eq!(out["row_count"], 3);

    // UPDATE reports rows affected; the table still holds the payload verbatim.
    let update = if pg {
        "UPDATE items SET qty = $1 WHERE name <> $2"
    } else {
        "UPDATE items SET qty = ?1 WHERE name <> ?2"
    };
    let out = ok(r
        .database(&a, &db_step("main", update, json!([9, "' OR 1=1 --"])))
        .await);
    assert_eq!(out["rows_affected"], 2);
    // A statement that changes nothing reports no change, whatever ran before it on
    // the connection (Postgres counts the rows a SELECT returned).
    let out = ok(r
        .database(
            &a,
            &db_step("main", "SELECT count(*) AS n FROM items", json!([])),
        )
        .await);
    assert_eq!(out["rows"], json!([{"n": 3}]));
    assert_eq!(out["rows_affected"], if pg { 1 } else { 0 });
    let out = ok(r
        .database(
            &a,
            &db_step("main", "CREATE TABLE other (x INTEGER)", json!([])),
        )
        .await);
    assert_eq!(out["rows_affected"], 0);

    // An SQL error: validation, with the database's message.
    let f = failed(
        r.database(&a, &db_step("main", "SELEC nonsense", json!([])))
            .await,
    );
    assert_eq!(f.class, ErrorClass::Validation);
    assert!(f.message.contains("syntax error"), "{}", f.message);

    // An unknown connection: validation naming the known ones.
    let f = failed(
        r.database(&a, &db_step("other", "SELECT 1", json!([])))
            .await,
    );
    assert_eq!(f.class, ErrorClass::Validation);
    assert!(
        f.message.contains("`other`") && f.message.contains("`main`"),
        "{}",
        f.message
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_roundtrip_postgres() {
    database_roundtrip(Backend::Postgres).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_roundtrip_sqlite() {
    database_roundtrip(Backend::Sqlite).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_postgres_types_become_typed_json() {
    let (url, _guard) = fresh_database(Backend::Postgres).await;
    let r = runners_with(&[("pg", &url)], |_| {});
    let dir = tmp();
    let a = attempt(dir.path(), None);
    ok(r.database(
        &a,
        &db_step("pg", "CREATE TYPE mood AS ENUM ('sad', 'happy')", json!([])),
    )
    .await);
    let out = ok(r
        .database(
            &a,
            &db_step(
                "pg",
                "SELECT 1::int2 AS i2, 2::int4 AS i4, 9007199254740993::int8 AS i8, \
                 1.5::float4 AS f4, 'NaN'::float8 AS nan, -0.0001::numeric AS small, \
                 123456789.5::numeric AS big, 'x'::varchar AS v, 'ab'::char(3) AS c, \
                 '{\"k\": [1]}'::json AS j, 'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'::uuid AS u, \
                 '2024-01-02 03:04:05'::timestamp AS ts, '2024-01-02'::date AS d, \
                 '03:04:05'::time AS t, '\\x0102ff'::bytea AS b, ARRAY['a', NULL]::text[] AS ta, \
                 ARRAY[1, 2]::int4[] AS ia, 'happy'::mood AS m, $1::text AS p, pg_sleep(0) AS void",
                json!(["param"]),
            ),
        )
        .await);
    assert_eq!(
        out["rows"][0],
        json!({
            "i2": 1, "i4": 2, "i8": 9007199254740993_i64, "f4": 1.5, "nan": "NaN",
            "small": "-0.0001", "big": "123456789.5", "v": "x", "c": "ab ",
            "j": {"k": [1]}, "u": "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11",
            "ts": "2024-01-02T03:04:05", "d": "2024-01-02", "t": "03:04:05", "b": "AQL/",
            "ta": ["a", null], "ia": [1, 2], "m": "happy", "p": "param", "void": null,
        })
    );

    // A type without a JSON mapping: an error naming the column.
    let f = failed(
        r.database(
            &a,
            &db_step("pg", "SELECT '10.0.0.1'::inet AS addr", json!([])),
        )
        .await,
    );
    assert_eq!(f.class, ErrorClass::Validation);
    assert!(
        f.message.contains("`addr`") && f.message.contains("INET"),
        "{}",
        f.message
    );
    // ... which the suggested cast fixes.
    let out = ok(r
        .database(
            &a,
            &db_step("pg", "SELECT '10.0.0.1'::inet::text AS addr", json!([])),
        )
        .await);
    assert_eq!(out["rows"][0]["addr"], "10.0.0.1/32");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_rows_are_capped() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (url, _guard) = fresh_database(backend).await;
        let r = runners_with(&[("db", &url)], |c| c.max_rows = 3);
        let dir = tmp();
        let query = match backend {
            Backend::Postgres => "SELECT n FROM generate_series(1, 10) AS n",
            Backend::Sqlite => {
                "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c WHERE n < 10) \
                 SELECT n FROM c"
            }
        };
        let out = ok(r
            .database(&attempt(dir.path(), None), &db_step("db", query, json!([])))
            .await);
        assert_eq!(
            out["rows"],
            json!([{"n": 1}, {"n": 2}, {"n": 3}]),
            "{backend:?}"
        );
        assert_eq!(out["row_count"], 10, "{backend:?}");
        assert_eq!(out["truncated"], true, "{backend:?}");
    }
}

/// A statement without a timeout on connection `db` runs to its end: no earlier
/// step's timeout was left on the connection. It takes half a second on Postgres;
/// on SQLite it is far more than the 1,000 steps after which the progress handler
/// of an earlier, expired, timeout would interrupt it.
async fn no_leftover_timeout(r: &Runners, dir: &Path, backend: Backend) {
    let (statement, rows) = match backend {
        Backend::Postgres => ("SELECT pg_sleep(0.5) AS slept", json!([{"slept": null}])),
        Backend::Sqlite => (
            "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c \
             WHERE n < 200000) SELECT count(*) AS n FROM c",
            json!([{"n": 200000}]),
        ),
    };
    let out = ok(r
        .database(&attempt(dir, None), &db_step("db", statement, json!([])))
        .await);
    assert_eq!(out["rows"], rows, "{backend:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_statement_timeout() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (url, _guard) = fresh_database(backend).await;
        // One connection, so the follow-up statements reuse the timed-out one.
        let r = runners_with(&[("db", &url)], |c| c.database_max_connections = 1);
        let dir = tmp();
        let slow = match backend {
            Backend::Postgres => "SELECT pg_sleep(30)",
            Backend::Sqlite => {
                "WITH RECURSIVE c(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM c \
                 WHERE n < 10000000000) SELECT count(*) FROM c"
            }
        };
        fails_within(
            20,
            &format!("a slow statement on {backend:?}"),
            ErrorClass::Timeout,
            r.database(
                &attempt(dir.path(), Some(Duration::from_millis(300))),
                &db_step("db", slow, json!([])),
            ),
        )
        .await;

        // The connection is usable and carries no leftover timeout.
        no_leftover_timeout(&r, dir.path(), backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_connection_failures_are_network() {
    let dir = tmp();
    let refused = refused_port();
    let pg_url = format!("postgres://postgres@127.0.0.1:{refused}/nothing");
    let sqlite_url = format!(
        "sqlite://{}",
        dir.path().join("no/such/folder/x.db").display()
    );
    let r = runners_with(&[("pg", &pg_url), ("lite", &sqlite_url)], |c| {
        c.connect_timeout = Duration::from_secs(2);
    });
    for name in ["pg", "lite"] {
        let f = fails_within(
            20,
            &format!("a refused connection to {name}"),
            ErrorClass::Network,
            r.database(
                &attempt(dir.path(), None),
                &db_step(name, "SELECT 1", json!([])),
            ),
        )
        .await;
        assert!(f.message.contains(&format!("`{name}`")), "{}", f.message);
    }
}

/// Wait (on a connection of our own) until a statement starting with `prefix` runs
/// on the Postgres database at `url`.
async fn running(url: &str, prefix: &str) {
    let mut watcher = sqlx::PgConnection::connect(url).await.expect("connect");
    loop {
        let running: i64 = sqlx::query_scalar(
            "SELECT count(*) FROM pg_stat_activity \
             WHERE state = 'active' AND starts_with(query, $1)",
        )
        .bind(prefix)
        .fetch_one(&mut watcher)
        .await
        .expect("pg_stat_activity");
        if running > 0 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_waiting_for_a_connection_counts_against_the_timeout() {
    let (url, _guard) = fresh_database(Backend::Postgres).await;
    let r = runners_with(&[("db", &url)], |c| c.database_max_connections = 1);
    let dir = tmp();
    let hold_attempt = attempt(dir.path(), None);
    let hold_step = db_step("db", "SELECT pg_sleep(1.5)", json!([]));
    let timed_attempt = attempt(dir.path(), Some(Duration::from_secs(2)));
    let timed_step = db_step("db", "SELECT pg_sleep(30)", json!([]));
    let (held, (timed, elapsed)) = within(20, "a step waiting for the only connection", async {
        let hold = r.database(&hold_attempt, &hold_step);
        let timed = async {
            running(&url, "SELECT pg_sleep(1.5)").await;
            let started = std::time::Instant::now();
            let result = r.database(&timed_attempt, &timed_step).await;
            (result, started.elapsed())
        };
        tokio::join!(hold, timed)
    })
    .await;
    ok(held);
    // About 1.5 s of the 2 s went on waiting: the database is told to stop the
    // statement after what is left, rather than after another 2 s (when the
    // deadline around it would have cut it off first).
    let f = failed(timed);
    assert_eq!(f.class, ErrorClass::Timeout, "{}", f.message);
    assert!(
        f.message.contains("cancelled by its timeout"),
        "{}",
        f.message
    );
    assert!(elapsed < Duration::from_millis(2800), "{elapsed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_a_refused_role_is_authentication() {
    let (url, _guard) = fresh_database(Backend::Postgres).await;
    let mut url = reqwest::Url::parse(&url).expect("url");
    url.set_username("no_such_role_awl").expect("user");
    let r = runners_with(&[("db", url.as_str())], |c| {
        c.connect_timeout = Duration::from_secs(5);
    });
    let dir = tmp();
    let f = fails_within(
        20,
        "a refused role",
        ErrorClass::Authentication,
        r.database(
            &attempt(dir.path(), None),
            &db_step("db", "SELECT 1", json!([])),
        ),
    )
    .await;
    assert!(f.message.contains("`db`"), "{}", f.message);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_busy_pool_is_dependency() {
    let (url, _guard) = fresh_database(Backend::Postgres).await;
    let r = runners_with(&[("db", &url)], |c| {
        c.database_max_connections = 1;
        c.connect_timeout = Duration::from_millis(300);
    });
    let dir = tmp();
    // Open the one connection first, so the busy step below is the only waiter.
    ok(r.database(
        &attempt(dir.path(), None),
        &db_step("db", "SELECT 1 AS one", json!([])),
    )
    .await);
    let slow_attempt = attempt(dir.path(), None);
    let slow_step = db_step("db", "SELECT pg_sleep(2)", json!([]));
    let busy_attempt = attempt(dir.path(), None);
    let busy_step = db_step("db", "SELECT 1 AS one", json!([]));
    let (slow, busy) = within(20, "two statements on one connection", async {
        let slow = r.database(&slow_attempt, &slow_step);
        let busy = async {
            running(&url, "SELECT pg_sleep(2)").await;
            r.database(&busy_attempt, &busy_step).await
        };
        tokio::join!(slow, busy)
    })
    .await;
    ok(slow);
    let f = failed(busy);
    assert_eq!(f.class, ErrorClass::Dependency, "{}", f.message);
    assert!(f.message.contains("busy"), "{}", f.message);
}

// ---------------------------------------------------------------- http + notify

#[derive(Clone, Default)]
struct Server {
    hooks: Arc<Mutex<Vec<Value>>>,
    hits: Arc<AtomicUsize>,
}

/// An axum server on 127.0.0.1:0; its base URL.
async fn serve() -> (String, Server) {
    let state = Server::default();
    let app = Router::new()
        .route(
            "/json",
            get(|State(s): State<Server>| async move {
                s.hits.fetch_add(1, Ordering::SeqCst);
                (
                    [("x-custom", "yes")],
                    axum::Json(json!({"ok": true, "n": 1})),
                )
            }),
        )
        .route(
            "/echo",
            post(|headers: HeaderMap, body: String| async move {
                axum::Json(json!({
                    "body": serde_json::from_str::<Value>(&body).unwrap_or(Value::Null),
                    "content_type": headers.get("content-type").and_then(|v| v.to_str().ok()),
                    "x_token": headers.get("x-token").and_then(|v| v.to_str().ok()),
                }))
            }),
        )
        .route("/text", get(|| async { "plain text" }))
        .route(
            "/limited",
            get(|| async {
                (
                    StatusCode::TOO_MANY_REQUESTS,
                    [("retry-after", "7")],
                    "slow down",
                )
            }),
        )
        .route(
            "/auth",
            get(|| async { (StatusCode::UNAUTHORIZED, "who are you") }),
        )
        .route("/forbidden", get(|| async { StatusCode::FORBIDDEN }))
        .route(
            "/boom",
            get(|State(s): State<Server>| async move {
                s.hits.fetch_add(1, Ordering::SeqCst);
                (StatusCode::INTERNAL_SERVER_ERROR, "internal kaboom")
            }),
        )
        .route(
            "/slow",
            get(|| async {
                tokio::time::sleep(Duration::from_secs(30)).await;
                "too late"
            }),
        )
        .route("/big", get(|| async { "a".repeat(5 * 1024 * 1024) }))
        .route(
            "/loop",
            get(|| async { axum::response::Redirect::temporary("/loop") }),
        )
        .route(
            "/hook",
            post(|State(s): State<Server>, body: String| async move {
                let body = serde_json::from_str(&body).unwrap_or(Value::String(body));
                s.hooks.lock().expect("lock").push(body);
                "ok"
            }),
        )
        .route(
            "/to-json",
            get(|| async { (StatusCode::FOUND, [("location", "/json")]) }),
        )
        .route("/see-other", post(|| async { Redirect::to("/method") }))
        .route(
            "/found",
            post(|| async { (StatusCode::FOUND, [("location", "/method")]) }),
        )
        .route(
            "/temporary",
            post(|| async { Redirect::temporary("/method") }),
        )
        .route(
            "/away",
            get(|Query(q): Query<HashMap<String, String>>| async move {
                let to = q.get("to").cloned().unwrap_or_default();
                (StatusCode::FOUND, [("location", to)])
            }),
        )
        .route(
            "/method",
            any(
                |method: Method, headers: HeaderMap, body: String| async move {
                    axum::Json(json!({
                        "method": method.as_str(),
                        "body": body,
                        "authorization": headers.get("authorization").and_then(|v| v.to_str().ok()),
                    }))
                },
            ),
        )
        .route(
            "/hook-down",
            post(|| async { (StatusCode::SERVICE_UNAVAILABLE, "maintenance") }),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app.into_make_service()).await;
    });
    (format!("http://{addr}"), state)
}

#[tokio::test]
async fn runners_http_json_text_headers_and_body() {
    let (base, _server) = serve().await;
    let r = Runners::new(RunnersConfig::default());
    let dir = tmp();
    let a = attempt(dir.path(), Some(Duration::from_secs(10)));

    let out = ok(r
        .http(&a, &http_step(json!({"url": format!("{base}/json")})))
        .await);
    assert_eq!(out["status"], 200);
    assert_eq!(out["body"], json!({"ok": true, "n": 1}));
    assert_eq!(out["headers"]["x-custom"], "yes");
    assert_eq!(out["headers"]["content-type"], "application/json");
    assert!(out.get("truncated").is_none());

    let out = ok(r
        .http(&a, &http_step(json!({"url": format!("{base}/text")})))
        .await);
    assert_eq!(out["body"], "plain text");

    let out = ok(r
        .http(
            &a,
            &http_step(json!({
                "method": "POST",
                "url": format!("{base}/echo"),
                "headers": {"X-Token": "' OR 1=1 --"},
                "body": {"a": [1, "two"], "b": null},
            })),
        )
        .await);
    assert_eq!(
        out["body"],
        json!({"body": {"a": [1, "two"], "b": null}, "content_type": "application/json", "x_token": "' OR 1=1 --"})
    );

    // expect_status: a 404 can be what is wanted.
    let out = ok(r
        .http(
            &a,
            &http_step(json!({"url": format!("{base}/nothing-here"), "expect_status": [404]})),
        )
        .await);
    assert_eq!(out["status"], 404);
}

#[tokio::test]
async fn runners_http_failures_are_classified() {
    let (base, _server) = serve().await;
    let r = Runners::new(RunnersConfig {
        // Breakers would turn the later failures into fast `dependency` ones.
        circuit_breaker: BreakerConfig {
            failures: 0,
            ..BreakerConfig::default()
        },
        ..RunnersConfig::default()
    });
    let dir = tmp();
    let a = attempt(dir.path(), Some(Duration::from_secs(10)));
    let get = |path: &str| http_step(json!({"url": format!("{base}{path}?token=sekrit")}));

    let f = failed(r.http(&a, &get("/limited")).await);
    assert_eq!(f.class, ErrorClass::RateLimit);
    assert!(f.message.contains("Retry-After: 7"), "{}", f.message);
    assert!(
        !f.message.contains("sekrit"),
        "the query string leaked: {}",
        f.message
    );
    assert_eq!(f.output.as_ref().expect("output")["status"], 429);
    assert_eq!(
        f.output.as_ref().expect("output")["headers"]["retry-after"],
        "7"
    );

    let f = failed(r.http(&a, &get("/auth")).await);
    assert_eq!(f.class, ErrorClass::Authentication);
    let f = failed(r.http(&a, &get("/forbidden")).await);
    assert_eq!(f.class, ErrorClass::Authentication);

    let f = failed(r.http(&a, &get("/boom")).await);
    assert_eq!(f.class, ErrorClass::Dependency);
    assert!(
        f.message.contains("500") && f.message.contains("internal kaboom"),
        "{}",
        f.message
    );
    assert_eq!(f.output.expect("output")["body"], "internal kaboom");

    let f = failed(r.http(&a, &get("/nothing-here")).await);
    assert_eq!(f.class, ErrorClass::Validation);
    assert!(f.message.contains("404"), "{}", f.message);

    let f = failed(
        r.http(
            &a,
            &http_step(json!({"url": format!("{base}/json"), "expect_status": [201]})),
        )
        .await,
    );
    assert_eq!(f.class, ErrorClass::Validation);

    let f = failed(r.http(&a, &get("/loop")).await);
    assert_eq!(f.class, ErrorClass::Dependency, "{}", f.message);
    assert!(f.message.contains("redirect"), "{}", f.message);
    assert!(!f.message.contains("sekrit"), "{}", f.message);

    let f = failed(
        r.http(&a, &http_step(json!({"url": "file:///etc/passwd"})))
            .await,
    );
    assert_eq!(f.class, ErrorClass::Validation);
    assert!(f.message.contains("scheme"), "{}", f.message);
}

#[tokio::test]
async fn runners_http_redirects_are_followed_as_http_says() {
    let (base, _server) = serve().await;
    let (other, _other) = serve().await;
    let r = Runners::new(RunnersConfig::default());
    let dir = tmp();
    let a = attempt(dir.path(), Some(Duration::from_secs(10)));

    // A 302 on a GET is followed to its answer.
    let out = ok(r
        .http(&a, &http_step(json!({"url": format!("{base}/to-json")})))
        .await);
    assert_eq!(out["body"], json!({"ok": true, "n": 1}));

    // 303, and 302 on a POST: a GET without the body.
    let post = |path: &str| {
        http_step(json!({"method": "POST", "url": format!("{base}{path}"), "body": {"x": 1}}))
    };
    for path in ["/see-other", "/found"] {
        let out = ok(r.http(&a, &post(path)).await);
        assert_eq!(
            out["body"],
            json!({"method": "GET", "body": "", "authorization": null}),
            "{path}"
        );
    }
    // 307: the same POST again, body and all.
    let out = ok(r.http(&a, &post("/temporary")).await);
    assert_eq!(
        out["body"],
        json!({"method": "POST", "body": "{\"x\":1}", "authorization": null})
    );

    // Credentials go on to the same origin, not to another one.
    let away = |to: String| {
        http_step(json!({
            "url": format!("{base}/away?to={to}"),
            "headers": {"Authorization": "Bearer t0ken"},
        }))
    };
    let out = ok(r.http(&a, &away(format!("{base}/method"))).await);
    assert_eq!(out["body"]["authorization"], "Bearer t0ken");
    let out = ok(r.http(&a, &away(format!("{other}/method"))).await);
    assert_eq!(out["body"]["method"], "GET");
    assert_eq!(out["body"]["authorization"], Value::Null);

    // Credentials in the URL become a Basic header, decoded; the URL shown loses them.
    let with_user = base.replacen("http://", "http://us%40er:p%3Ass@", 1);
    let out = ok(r
        .http(
            &a,
            &http_step(json!({"url": format!("{with_user}/method")})),
        )
        .await);
    assert_eq!(
        out["body"]["authorization"],
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode("us@er:p:ss")
        )
    );

    // A redirect out of http and https is not followed.
    let f = failed(r.http(&a, &away("file:///etc/passwd".into())).await);
    assert_eq!(f.class, ErrorClass::Dependency, "{}", f.message);
    assert!(
        f.message.contains("redirect") && f.message.contains("file"),
        "{}",
        f.message
    );
}

/// A stand-in HTTP proxy: it answers every request itself with the target it was
/// asked for, which a client speaking to a proxy sends in absolute form.
async fn stand_in_proxy() -> String {
    let app = Router::new().fallback(
        |uri: axum::http::Uri, headers: axum::http::HeaderMap| async move {
            let authorization = headers
                .get(axum::http::header::AUTHORIZATION)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string);
            axum::Json(json!({"proxied": uri.to_string(), "authorization": authorization}))
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

#[tokio::test]
async fn runners_http_goes_through_the_proxy_the_environment_sets() {
    let proxy = stand_in_proxy().await;
    let (base, _server) = serve().await;
    let t = TestStore::new(Backend::Sqlite).await;
    let dir = tmp();
    std::fs::write(
        dir.path().join("proxied.awl.yaml"),
        format!(
            r#"name: proxied
version: "1.0.0"
steps:
  - id: far
    type: http
    url: "http://alice:s3cret@awl-proxy-check.invalid/asked?x=1"
  - id: near
    type: http
    url: "{base}/json"
outputs:
  far: "${{{{ steps.far.outputs.body }}}}"
  near: "${{{{ steps.near.outputs.body }}}}"
"#
        ),
    )
    .expect("write the workflow");
    let awl = crate::support::cli::Awl::bounded(&t.location, 60).in_dir(dir.path());
    let mut run = awl.command(&["run", "proxied.awl.yaml"]);
    run.env("HTTP_PROXY", &proxy)
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("http_proxy")
        .env_remove("no_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy");
    let out = crate::support::cli::stdout_of("awl run", awl.output_of("awl run", &mut run).await);
    let outputs: Value = serde_json::from_str(&out).expect("outputs as JSON");
    // A host that does not resolve, reached through the proxy, the URL's credentials
    // sent as `Authorization: Basic` (base64 of `alice:s3cret`) and not in the URL;
    // the one NO_PROXY names, directly.
    assert_eq!(
        outputs["far"],
        json!({
            "proxied": "http://awl-proxy-check.invalid/asked?x=1",
            "authorization": "Basic YWxpY2U6czNjcmV0",
        }),
        "{out}"
    );
    assert_eq!(outputs["near"], json!({"ok": true, "n": 1}), "{out}");
}

#[tokio::test]
async fn runners_http_slow_responses_time_out() {
    let (base, _server) = serve().await;
    let r = Runners::new(RunnersConfig::default());
    let dir = tmp();
    let f = fails_within(
        15,
        "a slow response",
        ErrorClass::Timeout,
        r.http(
            &attempt(dir.path(), Some(Duration::from_millis(300))),
            &http_step(json!({"url": format!("{base}/slow")})),
        ),
    )
    .await;
    assert!(
        f.message
            .starts_with(&format!("GET {base}/slow timed out after 300ms")),
        "{}",
        f.message
    );
}

#[tokio::test]
async fn runners_http_large_bodies_are_capped() {
    let (base, _server) = serve().await;
    let r = Runners::new(RunnersConfig::default());
    let dir = tmp();
    let a = attempt(dir.path(), Some(Duration::from_secs(20)));
    let out = ok(r
        .http(
            &a,
            &http_step(json!({"url": format!("{base}/big"), "max_response_bytes": 1000})),
        )
        .await);
    assert_eq!(out["body"].as_str().map(str::len), Some(1000));
    assert_eq!(out["truncated"], true);

    // The configured default (1 MiB) applies without max_response_bytes.
    let out = ok(r
        .http(&a, &http_step(json!({"url": format!("{base}/big")})))
        .await);
    assert_eq!(out["body"].as_str().map(str::len), Some(1024 * 1024));
    assert_eq!(out["truncated"], true);
}

#[tokio::test]
async fn runners_http_connection_refused_is_network() {
    let refused = refused_port();
    let r = Runners::new(RunnersConfig::default());
    let dir = tmp();
    let f = failed(
        r.http(
            &attempt(dir.path(), Some(Duration::from_secs(10))),
            &http_step(json!({"url": format!("http://127.0.0.1:{refused}/x")})),
        )
        .await,
    );
    assert_eq!(f.class, ErrorClass::Network, "{}", f.message);
}

#[tokio::test]
async fn runners_http_a_tls_handshake_never_answered_is_network() {
    // A server that accepts and then says nothing: connecting includes the TLS
    // handshake, so it cannot connect within the connect timeout.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    cannot_connect_within_300ms(
        format!("https://{addr}/x"),
        "a TLS handshake never answered",
    )
    .await;
}

#[tokio::test]
async fn runners_http_a_connect_timeout_is_network() {
    // A listener that never accepts, with its accept queue full: the kernel drops
    // further SYNs, so connecting hangs until the connect timeout.
    let socket = tokio::net::TcpSocket::new_v4().expect("socket");
    socket
        .bind(std::net::SocketAddr::from(([127, 0, 0, 1], 0)))
        .expect("bind");
    let listener = socket.listen(0).expect("listen");
    let addr = listener.local_addr().expect("addr");
    let mut queued = Vec::new();
    for _ in 0..4 {
        if let Ok(Ok(stream)) = tokio::time::timeout(
            Duration::from_millis(200),
            tokio::net::TcpStream::connect(addr),
        )
        .await
        {
            queued.push(stream);
        }
    }
    cannot_connect_within_300ms(format!("http://{addr}/x"), "a connection never accepted").await;
}

/// A GET of `url` with a connect timeout of 300 ms fails as `network`, saying it
/// could not connect, well before the attempt's 10 s.
async fn cannot_connect_within_300ms(url: String, what: &str) {
    let r = Runners::new(RunnersConfig {
        connect_timeout: Duration::from_millis(300),
        ..RunnersConfig::default()
    });
    let dir = tmp();
    let f = fails_within(
        15,
        what,
        ErrorClass::Network,
        r.http(
            &attempt(dir.path(), Some(Duration::from_secs(10))),
            &http_step(json!({"url": url})),
        ),
    )
    .await;
    assert!(f.message.contains("could not connect"), "{}", f.message);
}

#[tokio::test]
async fn runners_notify_posts_a_slack_and_discord_compatible_body() {
    let (base, server) = serve().await;
    let r = Runners::new(RunnersConfig::default());
    let dir = tmp();
    let a = attempt(dir.path(), Some(Duration::from_secs(10)));

    // Without a URL: recorded, not delivered.
    let out = ok(r
        .notify(
            &a,
            &notify_step(json!({"message": "hi", "mentions": ["ops"]})),
        )
        .await);
    assert_eq!(
        out,
        json!({"message": "hi", "mentions": ["ops"], "delivered": false})
    );

    let out = ok(r
        .notify(
            &a,
            &notify_step(json!({
                "message": "deployed v1 `id` $(x)",
                "url": format!("{base}/hook"),
                "mentions": ["alice", "@bob"],
            })),
        )
        .await);
    assert_eq!(
        out,
        json!({"message": "deployed v1 `id` $(x)", "mentions": ["alice", "@bob"], "delivered": true, "status": 200})
    );
    let hooks = server.hooks.lock().expect("lock").clone();
    let text = "@alice @bob deployed v1 `id` $(x)";
    assert_eq!(hooks, vec![json!({"text": text, "content": text})]);

    let f = failed(
        r.notify(
            &a,
            &notify_step(json!({"message": "x", "url": format!("{base}/hook-down")})),
        )
        .await,
    );
    assert_eq!(f.class, ErrorClass::Dependency);
    assert_eq!(
        f.output.expect("output"),
        json!({"message": "x", "mentions": [], "delivered": false, "status": 503})
    );
}

// ---------------------------------------------------------------- breakers

#[tokio::test]
async fn runners_circuit_breaker_opens_fails_fast_and_closes_after_a_good_trial() {
    let (base, server) = serve().await;
    let clock = Arc::new(ManualMonotonic::new());
    let r = breaking_runners(&clock);
    let dir = tmp();
    let a = attempt(dir.path(), Some(Duration::from_secs(10)));
    let boom = http_step(json!({"url": format!("{base}/boom")}));
    let good = http_step(json!({"url": format!("{base}/json")}));

    for _ in 0..2 {
        assert_eq!(
            failed(r.http(&a, &boom).await).class,
            ErrorClass::Dependency
        );
    }
    let hits = server.hits.load(Ordering::SeqCst);
    assert_eq!(hits, 2);
    // Open: fails fast, the server is not called, whatever the path on that host.
    let f = failed(r.http(&a, &good).await);
    assert_eq!(f.class, ErrorClass::Dependency);
    assert!(
        f.message.contains("circuit breaker") && f.message.contains("open"),
        "{}",
        f.message
    );
    assert!(f.message.contains("until"), "{}", f.message);
    assert_eq!(
        server.hits.load(Ordering::SeqCst),
        hits,
        "an open breaker let a call through"
    );

    // Half-open after open_for: a failed trial opens it again.
    clock.advance(Duration::from_secs(30));
    assert_eq!(
        failed(r.http(&a, &boom).await).class,
        ErrorClass::Dependency
    );
    assert_eq!(server.hits.load(Ordering::SeqCst), hits + 1);
    assert!(
        failed(r.http(&a, &good).await)
            .message
            .contains("circuit breaker")
    );

    // A good trial closes it.
    clock.advance(Duration::from_secs(30));
    ok(r.http(&a, &good).await);
    let key = format!("http:{}", base.trim_start_matches("http://"));
    assert_eq!(
        r.breaker_state(&key),
        BreakerState::Closed {
            consecutive_failures: 0
        }
    );
    ok(r.http(&a, &good).await);

    // Built-in tools have no breaker.
    let inputs = json!({"class": "network"});
    let inputs = inputs.as_object().expect("object");
    for _ in 0..5 {
        let f = failed(r.builtin_tool(&a, "fail", inputs).await);
        assert_eq!(f.class, ErrorClass::Network);
    }
    ok(r.builtin_tool(
        &a,
        "echo",
        json!({"message": "still here"})
            .as_object()
            .expect("object"),
    )
    .await);
}

#[tokio::test]
async fn runners_circuit_breaker_keys_shell_steps_by_program() {
    let clock = Arc::new(ManualMonotonic::new());
    let r = breaking_runners(&clock);
    let dir = tmp();
    let a = attempt(dir.path(), None);
    let flag = dir.path().join("ready");
    let check = shell(json!({"command": ["test", "-e", flag.display().to_string()]}));
    for _ in 0..2 {
        assert_eq!(failed(r.shell(&a, &check).await).class, ErrorClass::Unknown);
    }
    let f = failed(r.shell(&a, &check).await);
    assert_eq!(f.class, ErrorClass::Dependency);
    assert!(f.message.contains("shell:test"), "{}", f.message);
    // Another program is not affected.
    ok(r.shell(&a, &shell(json!({"command": ["true"]}))).await);

    std::fs::write(&flag, b"").expect("flag");
    clock.advance(Duration::from_secs(30));
    ok(r.shell(&a, &check).await);
    assert_eq!(
        r.breaker_state("shell:test"),
        BreakerState::Closed {
            consecutive_failures: 0
        }
    );
    ok(r.shell(&a, &check).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_a_refused_param_leaves_no_timeout_behind() {
    for backend in [Backend::Postgres, Backend::Sqlite] {
        let (url, _guard) = fresh_database(backend).await;
        let r = runners_with(&[("db", &url)], |c| c.database_max_connections = 1);
        let dir = tmp();
        let select = match backend {
            Backend::Postgres => "SELECT $1::text AS v",
            Backend::Sqlite => "SELECT ?1 AS v",
        };
        let f = failed(
            r.database(
                &attempt(dir.path(), Some(Duration::from_millis(300))),
                &db_step("db", select, json!([u64::MAX])),
            )
            .await,
        );
        assert_eq!(
            f.class,
            ErrorClass::Validation,
            "{backend:?}: {}",
            f.message
        );
        assert!(f.message.contains("params[0]"), "{}", f.message);
        // Long after that attempt's deadline, a step without a timeout on the same
        // (only) connection is not cut short by it.
        tokio::time::sleep(Duration::from_millis(400)).await;
        no_leftover_timeout(&r, dir.path(), backend).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runners_database_a_statement_cut_off_by_the_deadline_leaves_no_timeout_behind() {
    // SQLite waits for a lock in its busy handler, where the progress handler never
    // runs: only the deadline around the statement ends the attempt, dropping it
    // mid-statement.
    let (url, _guard) = fresh_database(Backend::Sqlite).await;
    let r = runners_with(&[("db", &url)], |c| c.database_max_connections = 1);
    let dir = tmp();
    ok(r.database(
        &attempt(dir.path(), None),
        &db_step("db", "CREATE TABLE t (x INTEGER)", json!([])),
    )
    .await);
    let mut locker = sqlx::SqliteConnection::connect(&url)
        .await
        .expect("connect");
    sqlx::query("BEGIN IMMEDIATE")
        .execute(&mut locker)
        .await
        .expect("lock");
    fails_within(
        20,
        "a statement waiting for a lock",
        ErrorClass::Timeout,
        r.database(
            &attempt(dir.path(), Some(Duration::from_millis(300))),
            &db_step("db", "INSERT INTO t VALUES (?1)", json!([1])),
        ),
    )
    .await;
    sqlx::query("COMMIT")
        .execute(&mut locker)
        .await
        .expect("unlock");

    // The next step gets a connection without the cut-off attempt's progress
    // handler (whose deadline has passed, so it would interrupt anything).
    no_leftover_timeout(&r, dir.path(), Backend::Sqlite).await;
}
