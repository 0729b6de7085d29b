//! The example workflows in `workflows/`, run as a user runs them: through the real
//! `awl` binary, on a fresh SQLite file and on a fresh Postgres database.
//!
//! Each test checks what its example is for (final status, outputs, step statuses and
//! attempts from `awl status --json`, the order of events from `awl events --json`,
//! the exit code), not only that it ran. Examples with a gate are started with
//! `awl run --detach` and carried by a background `awl worker`, and approved with
//! `awl approve` like a person would. Every wait is bounded: a stuck run fails the
//! test instead of hanging it.
//!
//! `every_example_is_run_by_a_test` lists `workflows/` so a new example cannot be
//! added without a test here.

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{Value, json};

use crate::support::cli::{Awl, WorkerProcess, json_lines, run_id_of, stdout_of, step};
use crate::support::events::{first_position, for_step, of_type, position_of, types_of};
use crate::support::{Backend, TestStore, poll};

/// How long one `awl` command or one wait for a run may take.
const TIMEOUT_SECS: u64 = 60;

// `examples::postgres::NAME` and `examples::sqlite::NAME`.
crate::support::on_both_stores!(
    worker_threads = 2;
    hello_greets_with_its_input,
    retry_backoff_retries_until_the_flaky_step_succeeds,
    retry_backoff_fails_when_the_retries_run_out,
    order_saga_completes_without_compensating,
    order_saga_compensates_in_reverse_order_when_shipping_fails,
    error_handling_falls_back_continues_and_skips,
    mirror_race_takes_the_first_mirror_to_answer,
    rate_limited_spaces_its_calls_by_the_limit,
    release_waits_for_approval_then_deploys_through_the_sub_workflow,
    release_rejected_at_the_gate_fails_and_says_why,
    deploy_service_runs_on_its_own,
    a_shell_branch_beside_a_builtin_tool_starts_once,
    every_attempt_of_a_step_sees_the_same_idempotency_key,
);

// ---------------------------------------------------------------- fixtures

fn workflows_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows")
}

/// The path of an example file (`Sandbox::run` and `Sandbox::start` take the file
/// name; `every_example_is_run_by_a_test` looks for those calls in this file).
fn example(file: &str) -> String {
    let path = workflows_dir().join(file);
    assert!(path.is_file(), "no example {}", path.display());
    path.display().to_string()
}

/// A fresh store and a scratch folder (the working directory of every `awl` process,
/// and where examples write their files).
struct Sandbox {
    _t: TestStore,
    backend: Backend,
    scratch: tempfile::TempDir,
    awl: Awl,
}

/// A finished `awl run`: its exit status and output, and the run's id.
struct Ran {
    output: Output,
    run_id: String,
}

impl Ran {
    fn succeeded(&self) -> bool {
        self.output.status.success()
    }

    /// The run's outputs, as `awl run` prints them on stdout.
    fn outputs(&self) -> Value {
        serde_json::from_slice(&self.output.stdout).unwrap_or_else(|e| {
            panic!(
                "awl run printed no JSON outputs ({e}): {}\n{}",
                String::from_utf8_lossy(&self.output.stdout),
                String::from_utf8_lossy(&self.output.stderr)
            )
        })
    }

    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }
}

impl Sandbox {
    async fn new(backend: Backend) -> Self {
        let t = TestStore::new(backend).await;
        let scratch = tempfile::tempdir().expect("scratch dir");
        let awl = Awl::bounded(&t.location, TIMEOUT_SECS).in_dir(scratch.path());
        Self {
            _t: t,
            backend,
            scratch,
            awl,
        }
    }

    /// A path in the scratch folder.
    fn file(&self, name: &str) -> String {
        self.scratch.path().join(name).display().to_string()
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.file(name))
            .unwrap_or_else(|e| panic!("cannot read {name}: {e}"))
    }

    /// `awl run FILE --var k=v...` of an example in the foreground, to the run's end.
    async fn run(&self, file: &str, vars: &[(&str, &str)]) -> Ran {
        self.run_path(&example(file), vars).await
    }

    /// Write `yaml` to the scratch folder as `name` and run it in the foreground.
    async fn run_yaml(&self, name: &str, yaml: &str, vars: &[(&str, &str)]) -> Ran {
        let path = self.file(name);
        std::fs::write(&path, yaml).expect("write the workflow");
        self.run_path(&path, vars).await
    }

    async fn run_path(&self, path: &str, vars: &[(&str, &str)]) -> Ran {
        let output = self.awl_run(false, path, vars).await;
        let run_id = run_id_of(&String::from_utf8_lossy(&output.stderr));
        self.replays_the_same(&run_id).await;
        Ran { output, run_id }
    }

    /// `awl replay RUN`: this build's engine decides again every event it decided in
    /// the run (`engine::verify`), so every example run is also a replay test.
    async fn replays_the_same(&self, run_id: &str) {
        let output = self.awl.output(&["replay", run_id, "--json"]).await;
        let replay: Value = serde_json::from_slice(&output.stdout).unwrap_or_else(|e| {
            panic!(
                "awl replay printed no JSON ({e}): {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
        assert!(
            output.status.success() && replay["replay"]["verified"]["decisions"].as_u64() > Some(0),
            "run {run_id} does not replay to the same decisions: {:#}",
            replay["replay"]
        );
        assert_eq!(
            replay["rules"], 2,
            "a run started by this build records the current rules"
        );
    }

    /// Keep a finished run as a golden history: export it, replay the file (as CI
    /// replays `tests/golden/`), and with `AWL_UPDATE_GOLDEN=1`, on SQLite, write it to
    /// `tests/golden/NAME.json` (`scripts/record-golden`).
    async fn golden(&self, name: &str, run_id: &str) {
        let file = self.file(&format!("{name}.history.json"));
        self.awl.ok(&["replay", run_id, "--export", &file]).await;
        self.awl.ok(&["replay", "--history", &file]).await;
        if std::env::var_os("AWL_UPDATE_GOLDEN").is_some() && self.backend == Backend::Sqlite {
            let kept = Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/golden")
                .join(format!("{name}.json"));
            std::fs::copy(&file, &kept)
                .unwrap_or_else(|e| panic!("cannot write {}: {e}", kept.display()));
        }
    }

    /// `awl run --detach FILE ...` of an example: the run's id.
    async fn start(&self, file: &str, vars: &[(&str, &str)]) -> String {
        let output = self.awl_run(true, &example(file), vars).await;
        stdout_of("awl run --detach", output).trim().to_string()
    }

    /// `awl run [--detach] PATH --var k=v...`, to its end.
    async fn awl_run(&self, detach: bool, path: &str, vars: &[(&str, &str)]) -> Output {
        let vars: Vec<String> = vars.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let mut args = vec!["run"];
        if detach {
            args.push("--detach");
        }
        args.push(path);
        for var in &vars {
            args.extend(["--var", var.as_str()]);
        }
        self.awl.output(&args).await
    }

    /// A background `awl worker`, logging to `worker.log` in the scratch folder.
    fn worker(&self) -> WorkerProcess {
        self.awl.worker(self.file("worker.log").into(), &[])
    }

    /// `awl status RUN --json`.
    async fn status(&self, run_id: &str) -> Value {
        self.awl.status(run_id).await
    }

    /// Poll `awl status` until `ready` holds (or fail after the timeout).
    async fn wait_for(&self, run_id: &str, what: &str, ready: impl Fn(&Value) -> bool) -> Value {
        let polled = poll(TIMEOUT_SECS, async || {
            let status = self.status(run_id).await;
            ready(&status).then_some(status)
        })
        .await;
        match polled {
            Some(status) => status,
            None => panic!(
                "timed out after {TIMEOUT_SECS}s waiting for {what} of run {run_id}: {:#}",
                self.status(run_id).await
            ),
        }
    }

    /// Wait until the run has ended (and check that it replays).
    async fn finished(&self, run_id: &str) -> Value {
        let status = self
            .wait_for(run_id, "the end", |s| {
                matches!(
                    s["status"].as_str(),
                    Some("SUCCEEDED" | "FAILED" | "CANCELLED")
                )
            })
            .await;
        self.replays_the_same(run_id).await;
        status
    }

    /// `awl events --json --stream RUN`: the run's events in log order.
    async fn events(&self, run_id: &str) -> Vec<Value> {
        json_lines(&self.awl.ok(&["events", "--json", "--stream", run_id]).await)
    }

    /// `awl list --json --workflow NAME`.
    async fn runs_of(&self, workflow: &str) -> Vec<Value> {
        let listed = self
            .awl
            .ok(&["list", "--json", "--workflow", workflow])
            .await;
        json_lines(&listed)
    }
}

// ---------------------------------------------------------------- reading a status

fn has_step(status: &Value, id: &str) -> bool {
    status["steps"]
        .as_array()
        .is_some_and(|steps| steps.iter().any(|s| s["step_id"] == id))
}

fn step_status<'a>(status: &'a Value, id: &str) -> &'a str {
    step(status, id)["status"].as_str().unwrap_or("?")
}

fn attempts<'a>(status: &'a Value, id: &str) -> &'a Vec<Value> {
    step(status, id)["attempts"]
        .as_array()
        .unwrap_or_else(|| panic!("step `{id}` has no attempts: {status:#}"))
}

/// The outcome of each attempt of step `id`, in order (`SUCCEEDED`, `FAILED`...).
fn outcomes(status: &Value, id: &str) -> Vec<String> {
    attempts(status, id)
        .iter()
        .map(|a| a["outcome"].as_str().unwrap_or("none").to_string())
        .collect()
}

/// Nothing in these examples kills a worker, so no attempt may have been started
/// twice.
fn assert_no_restarts(status: &Value) {
    let steps = status["steps"]
        .as_array()
        .filter(|steps| !steps.is_empty())
        .unwrap_or_else(|| panic!("a run without steps: {status:#}"));
    for s in steps {
        let attempts = s["attempts"]
            .as_array()
            .unwrap_or_else(|| panic!("step {} without attempts: {status:#}", s["step_id"]));
        for a in attempts {
            assert_eq!(
                a["restarted_at"],
                json!([]),
                "step `{}` attempt {} was restarted though no worker died: {status:#}",
                s["step_id"],
                a["attempt"]
            );
        }
    }
}

// ---------------------------------------------------------------- hello

async fn hello_greets_with_its_input(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let ran = s.run("hello.awl.yaml", &[("name", "Ada")]).await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(ran.outputs(), json!({"greeting": "hello, Ada"}));
    let status = s.status(&ran.run_id).await;
    assert_eq!(status["status"], "SUCCEEDED");
    assert_eq!(status["workflow"], "hello");
    assert_eq!(outcomes(&status, "greet"), vec!["SUCCEEDED"]);
    assert_eq!(status["outcome"]["outputs"]["greeting"], "hello, Ada");
    s.golden("hello", &ran.run_id).await;

    // The default input.
    let ran = s.run("hello.awl.yaml", &[]).await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(ran.outputs(), json!({"greeting": "hello, world"}));

    // The input reaches the script as an argument: shell syntax in it is just text.
    let hostile = "$(touch pwned); touch pwned2";
    let ran = s.run("hello.awl.yaml", &[("name", hostile)]).await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(ran.outputs()["greeting"], format!("hello, {hostile}"));
    let workflows = workflows_dir();
    for dir in [s.scratch.path(), workflows.as_path()] {
        for file in ["pwned", "pwned2"] {
            assert!(!dir.join(file).exists(), "the input ran as shell code");
        }
    }
}

// ---------------------------------------------------------------- retry-backoff

async fn retry_backoff_retries_until_the_flaky_step_succeeds(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let state = s.file("");
    let ran = s
        .run(
            "retry-backoff.awl.yaml",
            &[("state_dir", &state), ("succeed_on", "3")],
        )
        .await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(
        ran.outputs(),
        json!({"flaky_attempts": 3, "slow_once": "done on attempt 2"})
    );

    let status = s.status(&ran.run_id).await;
    s.golden("retry-backoff-succeeds", &ran.run_id).await;
    assert_eq!(status["status"], "SUCCEEDED");
    assert_eq!(
        outcomes(&status, "flaky"),
        vec!["FAILED", "FAILED", "SUCCEEDED"]
    );
    for a in &attempts(&status, "flaky")[..2] {
        assert_eq!(a["recovery"]["kind"], "retry_with_backoff", "{a:#}");
        assert_eq!(a["error"]["class"], "unknown", "{a:#}");
    }
    // The timeout handler grew the timeout once; the second attempt succeeded.
    assert_eq!(outcomes(&status, "slow_once"), vec!["FAILED", "SUCCEEDED"]);
    let first = &attempts(&status, "slow_once")[0];
    assert_eq!(first["error"]["class"], "timeout", "{first:#}");
    assert_eq!(
        first["recovery"],
        json!({"kind": "increase_timeout", "new_timeout_seconds": 2})
    );
    assert_no_restarts(&status);

    // The back-off, as recorded: 0.2 s then 0.4 s, each within its 10 % jitter.
    let events = s.events(&ran.run_id).await;
    let backoffs: Vec<u64> = for_step(&events, "run.step_retried", "flaky")
        .map(|p| p["backoff_ms"].as_u64().expect("backoff_ms"))
        .collect();
    assert_eq!(backoffs.len(), 2, "{backoffs:?}");
    assert!((180..=220).contains(&backoffs[0]), "{backoffs:?}");
    assert!((360..=440).contains(&backoffs[1]), "{backoffs:?}");

    // One counter for the three attempts: they shared one idempotency key.
    let counters: Vec<String> = std::fs::read_dir(s.scratch.path())
        .expect("scratch dir")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| n.starts_with("attempts-"))
        .collect();
    assert_eq!(counters.len(), 1, "{counters:?}");
    assert_eq!(s.read(&counters[0]).trim(), "3");
}

async fn retry_backoff_fails_when_the_retries_run_out(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let state = s.file("");
    let ran = s
        .run(
            "retry-backoff.awl.yaml",
            &[("state_dir", &state), ("succeed_on", "9")],
        )
        .await;
    assert!(!ran.succeeded(), "the run must fail: {}", ran.stderr());
    assert!(ran.stderr().contains("failed"), "{}", ran.stderr());

    let status = s.status(&ran.run_id).await;
    s.golden("retry-backoff-fails", &ran.run_id).await;
    assert_eq!(status["status"], "FAILED");
    assert_eq!(outcomes(&status, "flaky"), vec!["FAILED"; 4]);
    assert_eq!(attempts(&status, "flaky")[3]["recovery"]["kind"], "abort");
    assert!(
        !has_step(&status, "slow_once"),
        "nothing runs after the failure"
    );
    let reason = status["outcome"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("step `flaky` failed"), "{reason}");
    assert_no_restarts(&status);
}

// ---------------------------------------------------------------- order-saga

async fn order_saga_completes_without_compensating(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let ledger = s.file("ledger.txt");
    let ran = s.run("order-saga.awl.yaml", &[("ledger", &ledger)]).await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(
        ran.outputs(),
        json!({"reservation": "R-order-42", "charge": "C-order-42"})
    );
    assert_eq!(
        s.read("ledger.txt"),
        "reserve order-42\ncharge order-42\nship order-42\n"
    );
    let status = s.status(&ran.run_id).await;
    assert_eq!(status["status"], "SUCCEEDED");
    assert_eq!(
        step(&status, "confirm")["output"]["message"],
        "order order-42 shipped"
    );
    assert!(!has_step(&status, "tell_support"));
    let events = s.events(&ran.run_id).await;
    assert_eq!(
        types_of(&events, &["run.compensation_started", "run.completed"]),
        vec!["run.completed"],
        "a successful run compensates nothing"
    );
    assert_no_restarts(&status);
}

async fn order_saga_compensates_in_reverse_order_when_shipping_fails(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let ledger = s.file("ledger.txt");
    let ran = s
        .run(
            "order-saga.awl.yaml",
            &[
                ("ledger", &ledger),
                ("order_id", "order-7"),
                ("fail_at", "ship"),
            ],
        )
        .await;
    assert!(!ran.succeeded(), "the run must fail: {}", ran.stderr());

    // Undone in reverse order, with the outputs of the steps they undo.
    assert_eq!(
        s.read("ledger.txt"),
        "reserve order-7\ncharge order-7\nrefund C-order-7\nrelease R-order-7\n"
    );

    let status = s.status(&ran.run_id).await;
    s.golden("order-saga-compensates", &ran.run_id).await;
    assert_eq!(status["status"], "FAILED");
    assert_eq!(status["outcome"]["error_class"], "unknown");
    let reason = status["outcome"]["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("step `ship` failed") && reason.contains("carrier refused"),
        "{reason}"
    );
    assert_eq!(step_status(&status, "ship"), "failed");
    let hook = &step(&status, "tell_support")["output"];
    assert_eq!(hook["mentions"], json!(["support"]));
    assert_eq!(hook["delivered"], false);
    assert!(
        hook["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("order order-7 failed at shipping")),
        "{hook}"
    );

    let events = s.events(&ran.run_id).await;
    let started: Vec<&Value> = of_type(&events, "run.compensation_started").collect();
    assert_eq!(started.len(), 1);
    assert_eq!(
        started[0]["steps"],
        json!(["charge_card", "reserve_stock"]),
        "most recent first; record_sale has nothing to undo"
    );
    let ran_in_order: Vec<(&str, bool)> = of_type(&events, "run.compensation_step_ran")
        .map(|p| (p["step_id"].as_str().unwrap_or("?"), p["succeeded"] == true))
        .collect();
    assert_eq!(
        ran_in_order,
        vec![("charge_card", true), ("reserve_stock", true)]
    );
    // The hook runs before the compensations; the run fails after them.
    let kinds = types_of(
        &events,
        &[
            "run.step_failed",
            "run.compensation_started",
            "run.compensation_step_ran",
            "run.failed",
        ],
    );
    assert_eq!(
        kinds,
        vec![
            "run.step_failed",
            "run.compensation_started",
            "run.compensation_step_ran",
            "run.compensation_step_ran",
            "run.failed"
        ]
    );
    assert!(
        position_of(&events, "run.step_succeeded", "tell_support")
            < first_position(&events, "run.compensation_started")
    );
    assert_no_restarts(&status);
}

// ---------------------------------------------------------------- error-handling

async fn error_handling_falls_back_continues_and_skips(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let ran = s
        .run("error-handling.awl.yaml", &[("package", "left-pad")])
        .await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(
        ran.outputs(),
        json!({
            "fetched_via": "portable",
            "lint": "failed",
            "cache": "skipped",
            "ticket": "ticket: lint failed, cache skipped",
        })
    );

    let status = s.status(&ran.run_id).await;
    s.golden("error-handling", &ran.run_id).await;
    assert_eq!(status["status"], "SUCCEEDED");
    // Fallback: the first attempt's tool is missing; the second uses the other tool.
    assert_eq!(outcomes(&status, "fetch"), vec!["FAILED", "SUCCEEDED"]);
    let first = &attempts(&status, "fetch")[0];
    assert_eq!(first["error"]["class"], "dependency", "{first:#}");
    assert_eq!(
        first["recovery"],
        json!({"kind": "fallback", "tool": "fetch_portable"})
    );
    assert_eq!(
        step(&status, "fetch")["output"]["json"],
        json!({"package": "left-pad", "via": "portable"})
    );
    // on_error: continue leaves the step failed and goes on.
    assert_eq!(step_status(&status, "lint"), "failed");
    assert_eq!(attempts(&status, "lint")[0]["recovery"]["kind"], "continue");
    assert_eq!(step_status(&status, "report_lint"), "succeeded");
    let message = step(&status, "report_lint")["output"]["message"]
        .as_str()
        .unwrap_or_default();
    assert!(message.contains("3 style warnings"), "{message}");
    // on_error: skip.
    assert_eq!(step_status(&status, "optional_cache"), "skipped");
    assert_eq!(outcomes(&status, "optional_cache"), vec!["FAILED"]);
    // The conditional took if_true; the `if` of `celebrate` was false.
    assert_eq!(step(&status, "triage")["output"]["branch"], "if_true");
    assert_eq!(step_status(&status, "open_ticket"), "succeeded");
    assert_eq!(step_status(&status, "all_clear"), "skipped");
    assert_eq!(step_status(&status, "celebrate"), "skipped");
    assert_no_restarts(&status);
}

// ---------------------------------------------------------------- mirror-race

async fn mirror_race_takes_the_first_mirror_to_answer(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let ran = s.run("mirror-race.awl.yaml", &[]).await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(ran.outputs(), json!({"winner": "fast_mirror"}));

    let status = s.status(&ran.run_id).await;
    s.golden("mirror-race", &ran.run_id).await;
    assert_eq!(status["status"], "SUCCEEDED");
    assert_eq!(
        step(&status, "race")["output"]["branches"]["fast_mirror"],
        "succeeded"
    );
    assert_eq!(step_status(&status, "fast_download"), "succeeded");
    assert_eq!(step_status(&status, "verify"), "succeeded");
    // The losing branch stopped where it was: its second step never started.
    assert!(
        !has_step(&status, "slow_download"),
        "the loser went on: {status:#}"
    );
    // `verify` did not wait for the loser.
    let events = s.events(&ran.run_id).await;
    assert!(
        position_of(&events, "run.step_started", "verify")
            < position_of(&events, "run.step_succeeded", "slow_wait")
    );
    assert_no_restarts(&status);
}

// ---------------------------------------------------------------- rate-limited

async fn rate_limited_spaces_its_calls_by_the_limit(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let ran = s.run("rate-limited.awl.yaml", &[]).await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(ran.outputs(), json!({"regions": 4}));
    let events = s.events(&ran.run_id).await;
    // When each region's call was done: one a second (the rate, burst 1), though all
    // four asked at once. A little less allows for when each outcome was recorded.
    let mut done: Vec<chrono::DateTime<chrono::Utc>> = ["emea", "amer", "apac", "latam"]
        .iter()
        .map(|region| {
            let step = format!("sync_{region}");
            let succeeded: Vec<&Value> = for_step(&events, "run.step_succeeded", &step).collect();
            assert_eq!(succeeded.len(), 1, "{step}: {succeeded:?}");
            serde_json::from_value(succeeded[0]["at"].clone()).expect("a time")
        })
        .collect();
    done.sort();
    for pair in done.windows(2) {
        let gap = (pair[1] - pair[0]).num_milliseconds();
        assert!(gap >= 750, "two calls {gap} ms apart: {done:?}");
    }
    // The calls whose token was more than a second away were held back, and said so;
    // a throttle is no failure: every step succeeded at its first attempt.
    let throttled: Vec<&Value> = of_type(&events, "run.step_throttled").collect();
    assert!(!throttled.is_empty(), "{events:?}");
    assert!(
        throttled
            .iter()
            .all(|t| t["limit"] == "rate:crm" && t["attempt"] == 1)
    );
    assert_eq!(of_type(&events, "run.step_failed").count(), 0);
    let status = s.status(&ran.run_id).await;
    for region in ["emea", "amer", "apac", "latam"] {
        assert_eq!(
            outcomes(&status, &format!("sync_{region}")),
            vec!["SUCCEEDED"]
        );
    }
}

// ---------------------------------------------------------------- release

/// The open gate of a waiting run: (gate id, step id).
fn open_gate(status: &Value) -> Option<(String, String)> {
    status["gates"].as_array()?.iter().find_map(|g| {
        g["decision"].is_null().then(|| {
            (
                g["gate_id"].as_str().unwrap_or_default().to_string(),
                g["step_id"].as_str().unwrap_or_default().to_string(),
            )
        })
    })
}

async fn release_waits_for_approval_then_deploys_through_the_sub_workflow(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let record = s.file("deploys.txt");
    let run_id = s
        .start(
            "release.awl.yaml",
            &[
                ("version", "2.4.0"),
                ("environment", "production"),
                ("record", &record),
            ],
        )
        .await;
    let mut worker = s.worker();

    let waiting = s
        .wait_for(&run_id, "the approval gate", |st| open_gate(st).is_some())
        .await;
    let (gate, gate_step) = open_gate(&waiting).expect("an open gate");
    assert_eq!(gate_step, "approve");
    assert_eq!(waiting["status"], "WAITING");
    let g = &waiting["gates"][0];
    assert_eq!(g["message"], "Release 2.4.0 to production?");
    assert_eq!(g["approvers"], json!(["release-manager"]));
    // Every check passed before the gate opened; nothing was deployed yet.
    for check in ["checks", "unit_tests", "lint", "audit"] {
        assert_eq!(step_status(&waiting, check), "succeeded", "{check}");
    }
    assert!(!has_step(&waiting, "where"));
    assert!(!Path::new(&record).exists(), "deployed before approval");

    // Only a named approver may decide.
    let refused = s
        .awl
        .output(&["approve", &gate, "--by", "mallory", "--comment", "lgtm"])
        .await;
    assert!(!refused.status.success(), "mallory may not approve");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(said.contains("release-manager"), "{said}");

    let approved = s
        .awl
        .ok(&[
            "approve",
            &gate,
            "--by",
            "release-manager",
            "--comment",
            "ship it",
        ])
        .await;
    assert!(approved.contains(&run_id), "{approved}");

    let status = s.finished(&run_id).await;
    s.golden("release-approved", &run_id).await;
    worker.kill(TIMEOUT_SECS).await;
    assert_eq!(status["status"], "SUCCEEDED", "{status:#}");
    assert_eq!(
        status["outcome"]["outputs"],
        json!({
            "artifact": "app-2.4.0.tar.gz",
            "approved_by": "release-manager",
            "branch": "if_true",
            "url": "https://app.production.example.internal",
        })
    );
    let approval = &step(&status, "approve")["output"];
    assert_eq!(approval["approved"], true);
    assert_eq!(approval["comment"], "ship it");
    // Production: canary then everyone, each a child run of the sub-workflow.
    assert_eq!(step_status(&status, "canary"), "succeeded");
    assert_eq!(step_status(&status, "deploy_all"), "succeeded");
    assert_eq!(step_status(&status, "deploy_one"), "skipped");
    assert_eq!(
        step(&status, "canary")["output"],
        json!({"url": "https://app-canary.production.example.internal", "environment": "production"})
    );
    assert_eq!(
        std::fs::read_to_string(&record).expect("deploy record"),
        "deployed app-canary to production\ndeployed app to production\n"
    );
    let children = s.runs_of("deploy-service").await;
    assert_eq!(children.len(), 2, "{children:?}");
    for child in &children {
        assert_eq!(child["status"], "SUCCEEDED");
        assert_eq!(child["parent"]["run_id"], run_id.as_str());
    }
    assert_eq!(step_status(&status, "announce"), "succeeded");
    assert_eq!(
        step(&status, "released")["output"]["message"],
        "release 2.4.0 done"
    );
    assert!(!has_step(&status, "release_failed"));
    assert_no_restarts(&status);

    // max_concurrency: 2: the third check started only after one of the first two
    // had finished.
    let events = s.events(&run_id).await;
    let third = position_of(&events, "run.step_started", "audit");
    let first_done = position_of(&events, "run.step_succeeded", "unit_tests").min(position_of(
        &events,
        "run.step_succeeded",
        "lint",
    ));
    assert!(
        first_done < third,
        "three checks ran at once: {first_done} >= {third}"
    );
    // The gate opened after every check had finished (wait_for: all).
    assert!(
        position_of(&events, "run.step_succeeded", "checks")
            < position_of(&events, "run.gate_opened", "approve")
    );
}

async fn release_rejected_at_the_gate_fails_and_says_why(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let record = s.file("deploys.txt");
    let run_id = s
        .start(
            "release.awl.yaml",
            &[("version", "2.5.0-rc1"), ("record", &record)],
        )
        .await;
    let mut worker = s.worker();
    let waiting = s
        .wait_for(&run_id, "the approval gate", |st| open_gate(st).is_some())
        .await;
    let (gate, _) = open_gate(&waiting).expect("an open gate");
    assert_eq!(
        waiting["gates"][0]["message"],
        "Release 2.5.0-rc1 to staging?"
    );
    s.awl
        .ok(&[
            "reject",
            &gate,
            "--by",
            "release-manager",
            "--comment",
            "not on a Friday",
        ])
        .await;

    let status = s.finished(&run_id).await;
    s.golden("release-rejected", &run_id).await;
    worker.kill(TIMEOUT_SECS).await;
    assert_eq!(status["status"], "FAILED", "{status:#}");
    assert_eq!(step_status(&status, "approve"), "failed");
    let reason = status["outcome"]["reason"].as_str().unwrap_or_default();
    assert!(reason.contains("not on a Friday"), "{reason}");
    let hook = &step(&status, "release_failed")["output"];
    assert_eq!(
        hook["message"],
        "release 2.5.0-rc1 stopped: approval failed"
    );
    assert_eq!(hook["mentions"], json!(["release-manager"]));
    for never in ["where", "deploy_one", "announce", "released"] {
        assert!(!has_step(&status, never), "`{never}` ran after a rejection");
    }
    assert!(!Path::new(&record).exists(), "deployed after a rejection");
    assert!(s.runs_of("deploy-service").await.is_empty());
    assert_no_restarts(&status);
}

// ---------------------------------------------------------------- deploy-service

async fn deploy_service_runs_on_its_own(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let record = s.file("deploys.txt");
    let ran = s
        .run(
            "deploy-service.awl.yaml",
            &[("service", "api"), ("record", &record)],
        )
        .await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(
        ran.outputs(),
        json!({"url": "https://api.staging.example.internal", "environment": "staging"})
    );
    let status = s.status(&ran.run_id).await;
    assert_eq!(status["status"], "SUCCEEDED");
    assert!(status["parent"].is_null());
    let smoke = step(&status, "smoke_test")["output"]["stdout"]
        .as_str()
        .unwrap_or_default();
    assert!(
        smoke.contains("https://api.staging.example.internal"),
        "{smoke}"
    );
    assert_eq!(s.read("deploys.txt"), "deployed api to staging\n");
    assert_no_restarts(&status);
}

// ---------------------------------------------------------------- every example

#[test]
fn validate_accepts_every_example() {
    let mut files: Vec<PathBuf> = example_files()
        .into_iter()
        .map(|f| workflows_dir().join(f))
        .collect();
    files.sort();
    let out = validate(&files);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "awl validate refused an example:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for file in &files {
        assert!(
            stdout.contains(&format!("{}: ok", file.display())),
            "{}: {stdout}",
            file.display()
        );
    }

    // And the check can fail: a broken copy is refused, naming the problem.
    let dir = tempfile::tempdir().expect("temp dir");
    let broken = dir.path().join("broken.awl.yaml");
    let hello = std::fs::read_to_string(workflows_dir().join("hello.awl.yaml")).expect("hello");
    std::fs::write(&broken, hello.replace("inputs.name", "inputs.nmae")).expect("write");
    let out = validate(std::slice::from_ref(&broken));
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("unknown input `nmae`"), "{said}");
}

/// `awl validate FILES` (no store involved).
fn validate(files: &[PathBuf]) -> Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_awl"))
        .arg("validate")
        .args(files)
        .env_remove("AWL_LOG")
        .output()
        .expect("run awl validate")
}

/// The `*.awl.yaml` files in `workflows/`.
fn example_files() -> Vec<String> {
    let mut files: Vec<String> = std::fs::read_dir(workflows_dir())
        .expect("list workflows/")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|name| name.ends_with(".awl.yaml"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_example_is_run_by_a_test() {
    let files = example_files();
    assert!(files.len() >= 5, "too few examples: {files:?}");
    // Tests run the examples through `Sandbox::run` and `Sandbox::start`, which take
    // the file name first: look for those calls (outside comments, whitespace aside,
    // as rustfmt may break a call over lines). Any other mention does not count.
    let source: String = include_str!("examples.rs")
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .flat_map(str::chars)
        .filter(|c| !c.is_whitespace())
        .collect();
    let missing: Vec<&String> = files
        .iter()
        .filter(|f| {
            let run = format!(".run(\"{f}\"");
            let start = format!(".start(\"{f}\"");
            !source.contains(&run) && !source.contains(&start)
        })
        .collect();
    assert!(
        missing.is_empty(),
        "examples no test runs: {missing:?} (add a test to tests/it/examples.rs)"
    );
    for f in &files {
        let text = std::fs::read_to_string(workflows_dir().join(f)).expect("read example");
        assert!(
            text.starts_with("# yaml-language-server: $schema=./awl-workflow.schema.json\n"),
            "{f} does not start with the schema comment"
        );
    }
    assert!(
        files.iter().any(|f| f == "hello.awl.yaml"),
        "the README's hello example is missing"
    );
}

// ---------------------------------------------------------------- regressions

/// A worker answers a built-in tool at once and decides again in the same round; that
/// second decision took the shell step started by the first for one a dead worker had
/// left behind, and recorded a second `run.step_started` for it.
async fn a_shell_branch_beside_a_builtin_tool_starts_once(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let yaml = r#"
name: mixed-branches
version: "1.0.0"
inputs:
  log: {type: string, required: true}
steps:
  - id: both
    type: parallel
    branches:
      - name: pure
        steps:
          - id: say
            tool: echo
            inputs: {message: hi}
      - name: process
        steps:
          - id: work
            type: shell
            script: 'echo ran >> "$1"'
            args: ["${{ inputs.log }}"]
"#;
    let log = s.file("work.log");
    let ran = s.run_yaml("mixed.awl.yaml", yaml, &[("log", &log)]).await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    assert_eq!(s.read("work.log"), "ran\n");
    let events = s.events(&ran.run_id).await;
    let starts = for_step(&events, "run.step_started", "work").count();
    assert_eq!(starts, 1, "`work` was started {starts} times");
    assert_no_restarts(&s.status(&ran.run_id).await);
}

/// `AWL_IDEMPOTENCY_KEY` is documented as the same for every attempt of one step of
/// one run (so a retry can recognise work already done); it changed with the attempt.
async fn every_attempt_of_a_step_sees_the_same_idempotency_key(backend: Backend) {
    let s = Sandbox::new(backend).await;
    let yaml = r#"
name: keys
version: "1.0.0"
inputs:
  log: {type: string, required: true}
steps:
  - id: twice
    type: shell
    script: 'echo "$AWL_ATTEMPT $AWL_IDEMPOTENCY_KEY" >> "$1"; [ "$AWL_ATTEMPT" -ge 2 ]'
    args: ["${{ inputs.log }}"]
    retry: {max_attempts: 2, backoff: constant, base_seconds: 0}
"#;
    let log = s.file("keys.log");
    let ran = s.run_yaml("keys.awl.yaml", yaml, &[("log", &log)]).await;
    assert!(ran.succeeded(), "{}", ran.stderr());
    let key = format!("{}/twice", ran.run_id);
    assert_eq!(s.read("keys.log"), format!("1 {key}\n2 {key}\n"));
}
