//! `shell` steps: run a program, or a script, as a child process.
//!
//! **No value is ever pasted into shell text.** `command` is an argv (program, then
//! arguments) executed directly, with `args` appended; a `script` runs as
//! `<shell> -c SCRIPT awl ARGS...`, so the script reads its values as `"$1"`, `"$2"`
//! (or from `env`, or stdin) and the text of the script is exactly what the workflow
//! file says. Whatever a value contains (`"; rm -rf ~; echo "`, `$(...)`, backticks)
//! it reaches the process as one argv element, one environment value or stdin bytes.
//!
//! The process gets a minimal environment: `PATH`, `HOME`, `LANG` and `TMPDIR` from
//! awl's own (server secrets in awl's environment do not leak into steps), then the
//! step's `env`, then `AWL_RUN_ID`, `AWL_STEP_ID`, `AWL_ATTEMPT` and
//! `AWL_IDEMPOTENCY_KEY` (which a step may not override) so a script can recognise a
//! retry of work it already did.
//!
//! A program named without a `/` is found in that `PATH` as `execvp` would find it,
//! by awl before the spawn (`find_program`), so the spawn is a `posix_spawn`.
//!
//! The child runs in a process group of its own. On timeout the whole group is
//! killed (a `sh -c 'sleep 30 & wait'` does not leave its `sleep` behind), and when
//! the main process exits whatever it left running in its group is killed too: a
//! step does not outlive itself. stdout and stderr are each kept up to the cap and
//! read (and dropped) past it, so a chatty child never blocks on a full pipe; a
//! character the cap cuts in two is left out of the text.
//!
//! | outcome | class |
//! |---|---|
//! | exit code in `success_exit_codes` (default `[0]`) | success |
//! | exit code 127 (the shell's "command not found") | `dependency` |
//! | program not found / not executable (spawn error) | `dependency` |
//! | any other exit code | `unknown` (output attached) |
//! | killed by a signal | `unknown`, the signal named |
//! | attempt timeout | `timeout` (partial output attached) |
//! | `command` and `script` both or neither, missing `working_dir`, NUL bytes, bad or reserved env names | `validation` |

use std::borrow::Cow;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Map, Value, json};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};

use crate::domain::run::ErrorClass;
use crate::workflow::model::ShellStep;

use super::{Attempt, StepFailure, StepSuccess};

/// Environment variables passed through from awl's own environment.
const INHERITED_ENV: [&str; 4] = ["PATH", "HOME", "LANG", "TMPDIR"];
/// Set by awl for every process; a step's `env` may not set them.
const RESERVED_ENV: [&str; 4] = [
    "AWL_RUN_ID",
    "AWL_STEP_ID",
    "AWL_ATTEMPT",
    "AWL_IDEMPOTENCY_KEY",
];
/// `PATH` when awl itself has none.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";
/// How long the pipes may stay open after the process group was killed (something
/// that left the group, e.g. with `setsid`, may still hold them).
const PIPE_GRACE: Duration = Duration::from_secs(2);
/// How much of stderr a failure message quotes.
const MESSAGE_STDERR_BYTES: usize = 500;

/// A `shell` step checked and ready to spawn.
#[derive(Debug)]
pub(super) struct Prepared {
    program: String,
    args: Vec<String>,
    env: Vec<(String, String)>,
    dir: PathBuf,
    stdin: Option<String>,
    cap: u64,
    success_codes: Vec<i32>,
    /// How messages name what ran: the program, or `script (sh)`.
    label: String,
    breaker_key: String,
}

impl Prepared {
    /// The program for a `command`, or the interpreter and a fingerprint of the
    /// script for a `script` (so unrelated scripts do not share a breaker).
    pub(super) fn breaker_key(&self) -> &str {
        &self.breaker_key
    }
}

/// Check the step and build the argv, environment and working directory.
pub(super) fn prepare(
    a: &Attempt<'_>,
    step: &ShellStep,
    default_cap: u64,
) -> Result<Prepared, StepFailure> {
    let (program, mut args, label, breaker_key) = match (&step.command, &step.script) {
        (Some(_), Some(_)) => {
            return Err(StepFailure::validation(
                "a shell step takes either `command` or `script`, not both",
            ));
        }
        (None, None) => {
            return Err(StepFailure::validation(
                "a shell step needs `command` (a program and its arguments) or `script`",
            ));
        }
        (Some(command), None) => {
            let Some((program, rest)) = command.split_first() else {
                return Err(StepFailure::validation("`command` is empty"));
            };
            if program.is_empty() {
                return Err(StepFailure::validation(
                    "`command`'s first item (the program) is empty",
                ));
            }
            (
                program.clone(),
                rest.to_vec(),
                format!("`{program}`"),
                program.clone(),
            )
        }
        (None, Some(script)) => {
            let shell = step.shell.clone().unwrap_or_else(|| "sh".to_string());
            if shell.is_empty() {
                return Err(StepFailure::validation("`shell` is empty"));
            }
            let label = format!("script ({shell})");
            let key = format!("{shell} script {:016x}", fnv1a(script.as_bytes()));
            (
                shell,
                vec!["-c".to_string(), script.clone(), "awl".to_string()],
                label,
                key,
            )
        }
    };
    args.extend(step.args.iter().cloned());

    if program.contains('\0') {
        return Err(StepFailure::validation(
            "the program name contains a NUL byte",
        ));
    }
    if let Some(i) = args.iter().position(|arg| arg.contains('\0')) {
        return Err(StepFailure::validation(format!(
            "argument {i} contains a NUL byte, which no process argument can hold"
        )));
    }

    let mut env = Vec::with_capacity(INHERITED_ENV.len() + step.env.len() + RESERVED_ENV.len());
    for name in INHERITED_ENV {
        if let Some(value) = std::env::var_os(name) {
            env.push((name.to_string(), value.to_string_lossy().into_owned()));
        } else if name == "PATH" {
            env.push((name.to_string(), DEFAULT_PATH.to_string()));
        }
    }
    for (name, value) in &step.env {
        if name.is_empty() || name.contains('=') || name.contains('\0') {
            return Err(StepFailure::validation(format!(
                "env name {name:?} is not a valid environment variable name"
            )));
        }
        if RESERVED_ENV.contains(&name.as_str()) {
            return Err(StepFailure::validation(format!(
                "env `{name}` is set by awl and cannot be overridden"
            )));
        }
        if value.contains('\0') {
            return Err(StepFailure::validation(format!(
                "env `{name}` contains a NUL byte"
            )));
        }
        env.push((name.clone(), value.clone()));
    }
    env.push(("AWL_RUN_ID".into(), a.run_id.to_string()));
    env.push(("AWL_STEP_ID".into(), a.step_id.to_string()));
    env.push(("AWL_ATTEMPT".into(), a.attempt.to_string()));
    env.push(("AWL_IDEMPOTENCY_KEY".into(), a.idempotency_key.to_string()));

    let dir = match &step.working_dir {
        Some(wd) => a.base_dir.join(wd),
        None => a.base_dir.to_path_buf(),
    };
    match std::fs::metadata(&dir) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => {
            return Err(StepFailure::validation(format!(
                "working_dir {} is not a directory",
                dir.display()
            )));
        }
        Err(e) => {
            return Err(StepFailure::validation(format!(
                "working_dir {} cannot be used: {e}",
                dir.display()
            )));
        }
    }

    Ok(Prepared {
        program,
        args,
        env,
        dir,
        stdin: step.stdin.clone(),
        cap: step.max_output_bytes.unwrap_or(default_cap),
        success_codes: if step.success_exit_codes.is_empty() {
            vec![0]
        } else {
            step.success_exit_codes.clone()
        },
        label,
        breaker_key,
    })
}

/// Spawn the process, feed it, capture it, wait for it (or kill it), classify.
pub(super) async fn run(a: &Attempt<'_>, mut p: Prepared) -> Result<StepSuccess, StepFailure> {
    let program = find_program(&p).map_err(|e| spawn_failure(&p, &e))?;
    let mut cmd = tokio::process::Command::new(program);
    cmd.args(&p.args)
        .env_clear()
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .current_dir(&p.dir)
        .stdin(if p.stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .kill_on_drop(true);

    let mut child = cmd.spawn().map_err(|e| spawn_failure(&p, &e))?;
    // The child leads its own group: its pid is the group id. Until the group has
    // been dealt with, dropping this (the attempt was cancelled) kills it.
    let mut group = GroupGuard(child.id());

    let stdin_task = match (child.stdin.take(), p.stdin.take()) {
        (Some(mut pipe), Some(text)) => Some(tokio::spawn(async move {
            // A child that exits without reading all of it is not an error here.
            let _ = pipe.write_all(text.as_bytes()).await;
            let _ = pipe.shutdown().await;
        })),
        _ => None,
    };
    let stdout = Capture::start(child.stdout.take(), p.cap);
    let stderr = Capture::start(child.stderr.take(), p.cap);

    let waited = match a.timeout {
        Some(limit) => tokio::time::timeout(limit, child.wait()).await.ok(),
        None => Some(child.wait().await),
    };

    // Timed out or exited, nothing of the group may stay behind. On timeout the
    // leader is not reaped yet, so its pid still names the group.
    if let Some(pgid) = group.0.take() {
        kill_group(pgid);
    }
    if waited.is_none() {
        let _ = child.kill().await;
    }
    if let Some(task) = stdin_task {
        task.abort();
    }
    // Both at once: a process that left the group may hold both pipes.
    let (out, err) = tokio::join!(stdout.finish(), stderr.finish());

    let status = match waited {
        None => {
            let limit = a.timeout.unwrap_or_default();
            let output = output_json(&out, &err, None, None);
            return Err(StepFailure::new(
                ErrorClass::Timeout,
                format!(
                    "{} timed out after {limit:?}; its process group was killed",
                    p.label
                ),
            )
            .with_output(output));
        }
        Some(Ok(status)) => status,
        Some(Err(e)) => {
            return Err(StepFailure::new(
                ErrorClass::Unknown,
                format!("waiting for {} failed: {e}", p.label),
            ));
        }
    };
    classify_exit(&p, status, &out, &err)
}

fn classify_exit(
    p: &Prepared,
    status: ExitStatus,
    out: &Captured,
    err: &Captured,
) -> Result<StepSuccess, StepFailure> {
    match (status.code(), status.signal()) {
        (Some(code), _) => {
            let output = output_json(out, err, Some(code), None);
            if p.success_codes.contains(&code) {
                return Ok(StepSuccess::output(output));
            }
            let (class, why) = if code == 127 {
                (ErrorClass::Dependency, " (command not found)")
            } else {
                (ErrorClass::Unknown, "")
            };
            Err(StepFailure::new(
                class,
                format!(
                    "{} exited with code {code}{why}{}",
                    p.label,
                    stderr_excerpt(err)
                ),
            )
            .with_output(output))
        }
        (None, Some(signal)) => {
            let name = signal_name(signal);
            let output = output_json(out, err, None, Some(&name));
            Err(StepFailure::new(
                ErrorClass::Unknown,
                format!("{} was killed by {name}{}", p.label, stderr_excerpt(err)),
            )
            .with_output(output))
        }
        (None, None) => Err(StepFailure::new(
            ErrorClass::Unknown,
            format!("{} ended with an unrecognised status: {status}", p.label),
        )
        .with_output(output_json(out, err, None, None))),
    }
}

fn spawn_failure(p: &Prepared, e: &std::io::Error) -> StepFailure {
    use std::io::ErrorKind;
    match e.kind() {
        ErrorKind::NotFound => StepFailure::new(
            ErrorClass::Dependency,
            format!(
                "cannot run {}: program not found (is it installed and on PATH?)",
                p.label
            ),
        ),
        ErrorKind::PermissionDenied => StepFailure::new(
            ErrorClass::Dependency,
            format!("cannot run {}: permission denied: {e}", p.label),
        ),
        ErrorKind::InvalidInput => StepFailure::validation(format!("cannot run {}: {e}", p.label)),
        _ => StepFailure::new(ErrorClass::Unknown, format!("cannot run {}: {e}", p.label)),
    }
}

fn stderr_excerpt(err: &Captured) -> String {
    let text = err.text();
    let text = text.trim();
    if text.is_empty() {
        return String::new();
    }
    // The end of stderr is where the reason usually is.
    let mut start = text.len().saturating_sub(MESSAGE_STDERR_BYTES);
    while !text.is_char_boundary(start) {
        start += 1;
    }
    let prefix = if start > 0 { "…" } else { "" };
    format!("; stderr: {prefix}{}", &text[start..])
}

/// `{stdout, stderr, exit_code, stdout_truncated?, stderr_truncated?, json?, signal?}`
fn output_json(
    out: &Captured,
    err: &Captured,
    exit_code: Option<i32>,
    signal: Option<&str>,
) -> Value {
    let stdout = out.text().into_owned();
    let mut o = Map::new();
    if !out.truncated
        && !stdout.trim().is_empty()
        && let Ok(parsed) = serde_json::from_str::<Value>(&stdout)
    {
        o.insert("json".into(), parsed);
    }
    o.insert("stdout".into(), Value::String(stdout));
    o.insert("stderr".into(), Value::String(err.text().into_owned()));
    o.insert("exit_code".into(), json!(exit_code));
    if out.truncated {
        o.insert("stdout_truncated".into(), Value::Bool(true));
    }
    if err.truncated {
        o.insert("stderr_truncated".into(), Value::Bool(true));
    }
    if let Some(signal) = signal {
        o.insert("signal".into(), Value::String(signal.to_string()));
    }
    Value::Object(o)
}

/// `signal 9 (SIGKILL)`.
fn signal_name(signal: i32) -> String {
    // Numbers that are the same on Linux, the BSDs and macOS.
    let name = match signal {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {signal}"),
    };
    format!("signal {signal} ({name})")
}

/// Kill every process of group `pgid` (a group already gone is no error).
fn kill_group(pgid: u32) {
    use rustix::io::Errno;
    use rustix::process::{Pid, Signal, kill_process_group};
    let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return;
    };
    match kill_process_group(pid, Signal::KILL) {
        Ok(()) | Err(Errno::SRCH) => {}
        Err(e) => tracing::warn!(
            pgid,
            error = %e,
            "cannot kill a shell step's process group; its processes may outlive the step"
        ),
    }
}

/// Kills the process group when dropped before it was dealt with (the attempt's
/// future was cancelled).
struct GroupGuard(Option<u32>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            kill_group(pgid);
        }
    }
}

/// The program to execute: a name without a `/` looked up in the `PATH` the
/// process gets, as `execvp` would (an empty entry is the working directory).
///
/// Done here rather than by the spawn so the spawn can be `posix_spawn` (a vfork)
/// instead of a fork that copies awl's page tables: the standard library forks
/// whenever it must search a `PATH` the child's environment changes.
fn find_program(p: &Prepared) -> std::io::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    if p.program.contains('/') {
        return Ok(PathBuf::from(&p.program));
    }
    // The last `PATH` wins, as it would in the child's environment.
    let path = p
        .env
        .iter()
        .rev()
        .find(|(name, _)| name == "PATH")
        .map_or(DEFAULT_PATH, |(_, value)| value.as_str());
    for entry in path.split(':') {
        let candidate = p.dir.join(entry).join(&p.program);
        match std::fs::metadata(&candidate) {
            Ok(meta) if meta.is_file() && meta.permissions().mode() & 0o111 != 0 => {
                return Ok(candidate);
            }
            _ => {}
        }
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::NotFound,
        format!("`{}` is in no directory of PATH ({path})", p.program),
    ))
}

/// What was kept of one output stream.
#[derive(Debug, Default, Clone, PartialEq)]
pub(super) struct Captured {
    pub(super) kept: Vec<u8>,
    pub(super) truncated: bool,
}

impl Captured {
    /// Keep what fits under `cap`, note that the rest was dropped.
    pub(super) fn push(&mut self, chunk: &[u8], cap: u64) {
        let room = usize::try_from(cap)
            .unwrap_or(usize::MAX)
            .saturating_sub(self.kept.len());
        if chunk.len() > room {
            self.kept.extend_from_slice(&chunk[..room]);
            self.truncated = true;
        } else {
            self.kept.extend_from_slice(chunk);
        }
    }

    /// What was kept, as text (invalid UTF-8 replaced by U+FFFD). When the cap cut a
    /// character in two, its first bytes are left out rather than shown as U+FFFD.
    pub(super) fn text(&self) -> Cow<'_, str> {
        let kept = if self.truncated {
            without_cut_character(&self.kept)
        } else {
            &self.kept
        };
        String::from_utf8_lossy(kept)
    }
}

/// `bytes` without the first bytes of a UTF-8 sequence that lacks its last ones.
fn without_cut_character(bytes: &[u8]) -> &[u8] {
    // The lead byte of the last sequence is at most 3 bytes before the end.
    for back in 1..=bytes.len().min(4) {
        let byte = bytes[bytes.len() - back];
        if byte & 0b1100_0000 != 0b1000_0000 {
            // Not a continuation byte: how long is its sequence?
            let length = match byte {
                0xF0.. => 4,
                0xE0.. => 3,
                0xC0.. => 2,
                _ => 1,
            };
            return if length > back {
                &bytes[..bytes.len() - back]
            } else {
                bytes
            };
        }
    }
    bytes
}

/// A stream being read into a [`Captured`] by a task of its own.
struct Capture {
    shared: Arc<Mutex<Captured>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl Capture {
    fn start(stream: Option<impl AsyncRead + Unpin + Send + 'static>, cap: u64) -> Self {
        let shared = Arc::new(Mutex::new(Captured::default()));
        let task = stream.map(|mut stream| {
            let shared = shared.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 64 * 1024];
                loop {
                    match stream.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(n) => shared
                            .lock()
                            .unwrap_or_else(|p| p.into_inner())
                            .push(&buf[..n], cap),
                    }
                }
            })
        });
        Self { shared, task }
    }

    /// Wait for the end of the stream (at most [`PIPE_GRACE`]), and take what was
    /// kept.
    async fn finish(mut self) -> Captured {
        if let Some(mut task) = self.task.take()
            && tokio::time::timeout(PIPE_GRACE, &mut task).await.is_err()
        {
            task.abort();
        }
        std::mem::take(&mut *self.shared.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// 64-bit FNV-1a: a stable fingerprint of a script for its breaker key.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests;
