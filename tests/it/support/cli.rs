//! The `awl` binary as a child process on a test's store: commands and their output,
//! the run id `awl run` names, `awl status --json`, and background `awl worker`s.

use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};

use awl::store::StoreLocation;
use serde_json::Value;

use super::within;

/// The store URL the binary is given through `DATABASE_URL`.
pub fn url_of(location: &StoreLocation) -> String {
    match location {
        StoreLocation::Postgres(url) => url.clone(),
        StoreLocation::Sqlite(path) => format!("sqlite://{}", path.display()),
    }
}

/// The `awl` binary on one test store.
///
/// Every command gets `DATABASE_URL` pointing at the store and no `AWL_LOG` (a
/// developer's log level must not reach the output under test), has its stdin
/// closed, runs in the chosen folder if there is one, and is killed if the test
/// drops it. A bounded `Awl` fails the test when a command outlives the bound.
pub struct Awl {
    url: String,
    limit: Option<u64>,
    dir: Option<PathBuf>,
}

impl Awl {
    /// Commands that may take `secs` seconds each, after which the test fails.
    pub fn bounded(location: &StoreLocation, secs: u64) -> Self {
        Self {
            url: url_of(location),
            limit: Some(secs),
            dir: None,
        }
    }

    /// Commands waited for however long they take.
    pub fn unbounded(location: &StoreLocation) -> Self {
        Self {
            url: url_of(location),
            limit: None,
            dir: None,
        }
    }

    /// Run every command in `dir`.
    pub fn in_dir(mut self, dir: &Path) -> Self {
        self.dir = Some(dir.to_path_buf());
        self
    }

    /// `awl ARGS`, not yet started: add environment before running it with
    /// [`Awl::output_of`] or spawning it.
    pub fn command(&self, args: &[&str]) -> tokio::process::Command {
        let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_awl"));
        cmd.args(args)
            .env("DATABASE_URL", &self.url)
            .env_remove("AWL_LOG")
            .stdin(Stdio::null())
            .kill_on_drop(true);
        if let Some(dir) = &self.dir {
            cmd.current_dir(dir);
        }
        cmd
    }

    /// Run `cmd` to its end (within the bound, if any); `what` names it in a failure.
    pub async fn output_of(&self, what: &str, cmd: &mut tokio::process::Command) -> Output {
        let output = match self.limit {
            Some(secs) => within(secs, what, cmd.output()).await,
            None => cmd.output().await,
        };
        output.unwrap_or_else(|e| panic!("cannot run {what}: {e}"))
    }

    /// Run `awl ARGS` to its end, whatever its exit status.
    pub async fn output(&self, args: &[&str]) -> Output {
        let what = format!("awl {}", args.join(" "));
        self.output_of(&what, &mut self.command(args)).await
    }

    /// Run `awl ARGS`, which must succeed: its stdout.
    pub async fn ok(&self, args: &[&str]) -> String {
        let what = format!("awl {}", args.join(" "));
        stdout_of(&what, self.output_of(&what, &mut self.command(args)).await)
    }

    /// `awl status RUN --json`.
    pub async fn status(&self, run_id: &str) -> Value {
        let text = self.ok(&["status", run_id, "--json"]).await;
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("status is not JSON ({e}): {text}"))
    }

    /// A background `awl worker ARGS` logging at `info` into the file `log`.
    pub fn worker(&self, log: PathBuf, args: &[&str]) -> WorkerProcess {
        let stderr = std::fs::File::create(&log).expect("worker log file");
        let child = self
            .command(&["worker"])
            .args(args)
            .env("AWL_LOG", "info")
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .expect("start awl worker");
        WorkerProcess { child, log }
    }
}

/// The stdout of `what`, which must have succeeded (else its status and output fail
/// the test).
pub fn stdout_of(what: &str, output: Output) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}): {}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).expect("utf-8 output")
}

/// The values of JSON-lines output (`--json`), one per line.
pub fn json_lines(text: &str) -> Vec<Value> {
    text.lines()
        .map(|l| {
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not one JSON value ({e}): {l}"))
        })
        .collect()
}

/// The id of the run `awl run` started, from its stderr, whose first line says
/// `run ID: NAME VERSION on STORE`.
pub fn run_id_of(stderr: &str) -> String {
    stderr
        .lines()
        .find_map(|l| l.strip_prefix("run ")?.split(':').next())
        .unwrap_or_else(|| panic!("awl run did not say which run it started: {stderr}"))
        .to_string()
}

/// The step `id` of `awl status --json`.
pub fn step<'a>(status: &'a Value, id: &str) -> &'a Value {
    status["steps"]
        .as_array()
        .and_then(|steps| steps.iter().find(|s| s["step_id"] == id))
        .unwrap_or_else(|| panic!("no step `{id}` in the run: {status:#}"))
}

/// An `awl worker` child process ([`Awl::worker`]). Its log is printed if the test
/// panics while it is alive; dropping it SIGKILLs it.
pub struct WorkerProcess {
    child: tokio::process::Child,
    log: PathBuf,
}

impl WorkerProcess {
    pub fn pid(&self) -> u32 {
        self.child.id().expect("the worker is running")
    }

    /// SIGKILL it (what `Child::kill` sends on Unix) and reap it, failing the test if
    /// that takes more than `secs` seconds.
    /// Whether the worker has exited (without waiting).
    pub fn try_exited(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(Some(_)))
    }

    pub async fn kill(&mut self, secs: u64) {
        within(secs, "the worker to die", self.child.kill())
            .await
            .expect("SIGKILL the worker");
    }
}

impl Drop for WorkerProcess {
    fn drop(&mut self) {
        let _ = self.child.start_kill();
        if std::thread::panicking() {
            eprintln!(
                "---- {} ----\n{}",
                self.log.display(),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
        }
    }
}
