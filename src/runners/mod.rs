//! Runners: one attempt of one step, the I/O edge of the executor.
//!
//! The executor decides *what* happens to a run (from its events) and calls a runner
//! to *do* one attempt of a step: start a process, send a request, run a statement,
//! post a webhook, or one of the built-in tools. Everything that touches the outside
//! world is here, so the rest of the engine stays pure and replayable, and so the
//! security rules of that edge live in one place:
//!
//! - **Values are data.** Templates are rendered before a runner sees a step; the
//!   rendered values reach a process only as argv elements, environment variables or
//!   stdin, and a database only as bind parameters. No runner concatenates a value
//!   into shell or SQL text, so `"; rm -rf ~; echo "` is just a string.
//! - **Everything is bounded.** Process output is capped (and drained past the cap
//!   so a child never blocks), HTTP bodies are read up to the cap and no further,
//!   rows are capped, every attempt honours its timeout, and a timed-out or
//!   cancelled process is killed with its whole process group.
//! - **Every failure is classified** into an [`ErrorClass`] so the executor can pick
//!   the error handler (DESIGN §4). The classification table is in each runner's
//!   docs and tested.
//! - **A circuit breaker** per program (or script), host or connection stops
//!   hammering something that keeps failing ([`breaker`]).
//!
//! A runner returns [`StepSuccess`] or [`StepFailure`]; it never panics on anything
//! that comes from outside (processes, servers, databases, inputs).
//!
//! A `tool` step naming a tool of the registry that is neither built in nor declared
//! in its workflow (an MCP server's `SERVER__TOOL`) is performed by an
//! [`ExternalTools`] the executor is given: the tool registry (`crate::tools`)
//! implements it. The trait lives here so the executor calls the registry without
//! depending on it, the way it calls every other runner.
//!
//! | module | what it runs |
//! |---|---|
//! | `shell` | `shell` steps: a program (argv) or a script with `$1`, `$2`... |
//! | `http` | `http` steps and `notify` webhooks |
//! | `database` | `database` steps on named Postgres / SQLite connections |
//! | `builtin` | the built-in tools `noop`, `echo`, `sleep`, `fail` |
//! | [`breaker`] | the circuit breakers (on an injectable [`Monotonic`] clock) |

pub mod breaker;
mod builtin;
mod database;
mod http;
mod shell;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::domain::ids::RunId;
use crate::domain::run::{ErrorClass, StepError};
use crate::workflow::model::{DatabaseStep, HttpStep, NotifyStep, ShellStep};

pub use breaker::{BreakerConfig, BreakerOpen};

use crate::clock::{Monotonic, SystemMonotonic};

/// One attempt of one step: who is asking, and the limits that apply.
#[derive(Debug, Clone, Copy)]
pub struct Attempt<'a> {
    pub run_id: RunId,
    pub step_id: &'a str,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The same for every attempt of one step of one run: a process sees it as
    /// `AWL_IDEMPOTENCY_KEY` so it can recognise a retry of work it already did.
    pub idempotency_key: &'a str,
    /// The attempt fails with class `timeout` after this long; `None`: no limit.
    pub timeout: Option<Duration>,
    /// Where relative `working_dir`s are resolved from, and where a shell step runs
    /// without one (the executor passes the worker's own directory).
    pub base_dir: &'a Path,
    /// The run's secrets: masked in what the attempt records in spans and logs (its
    /// outcome is masked by the engine).
    pub mask: &'a crate::vault::Mask,
}

/// What a successful attempt produced.
#[derive(Debug, Clone, PartialEq)]
pub struct StepSuccess {
    /// The step's output, as later steps see it (`steps.ID.outputs`).
    pub output: Value,
    /// What the attempt cost, when the runner knows (none of the runners here do).
    pub cost_usd: Option<f64>,
    pub tokens: Option<u64>,
}

impl StepSuccess {
    pub fn output(output: Value) -> Self {
        Self {
            output,
            cost_usd: None,
            tokens: None,
        }
    }
}

/// Why an attempt failed: a class for the error handlers, a message for people, and
/// whatever output there was (a failed process's stdout and stderr, an HTTP error
/// response) so it can be inspected.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{class}: {message}")]
pub struct StepFailure {
    pub class: ErrorClass,
    pub message: String,
    pub output: Option<Value>,
}

impl StepFailure {
    pub fn new(class: ErrorClass, message: impl Into<String>) -> Self {
        Self {
            class,
            message: message.into(),
            output: None,
        }
    }

    pub fn validation(message: impl Into<String>) -> Self {
        Self::new(ErrorClass::Validation, message)
    }

    pub fn with_output(mut self, output: Value) -> Self {
        self.output = Some(output);
        self
    }

    /// The error as it is recorded in run events.
    pub fn to_step_error(&self) -> StepError {
        StepError {
            class: self.class,
            message: self.message.clone(),
        }
    }
}

/// Tools performed outside these runners, by name: the tool registry's MCP tools,
/// for the `tool` steps that call them. An implementation checks the inputs against
/// the tool's input schema before calling (a `validation` failure), keeps to the
/// attempt's timeout (the tool's own when the attempt has none), classes every
/// failure into an [`ErrorClass`] (so a workflow's error handlers act on it like on
/// any step's) and reports the tool's cost per call as the attempt's cost.
#[async_trait::async_trait]
pub trait ExternalTools: Send + Sync {
    async fn call(
        &self,
        attempt: &Attempt<'_>,
        tool: &str,
        inputs: &Map<String, Value>,
    ) -> Result<StepSuccess, StepFailure>;
}

/// What a worker without a registry says of a registry tool: another worker (one
/// given the tools directory) may perform it, so it is a `dependency` failure, which
/// handlers may retry.
pub fn no_external_tools(tool: &str) -> StepFailure {
    StepFailure::new(
        ErrorClass::Dependency,
        format!(
            "tool `{tool}` is a tool of the tool registry (not built in, not declared in the \
             workflow), and this worker was started without one: give it the tools directory \
             (`--tools-dir`, `AWL_TOOLS_DIR`) that declares it"
        ),
    )
}

/// What the runners are set up with; [`Default`] gives the documented defaults.
#[derive(Debug, Clone)]
pub struct RunnersConfig {
    /// Database connections `database` steps may name: `postgres://...` or
    /// `sqlite://...` URLs (a SQLite file is created only if its URL asks, with
    /// `?mode=rwc`).
    pub connections: BTreeMap<String, String>,
    /// The cap on stdout, stderr and HTTP bodies when a step sets none (1 MiB).
    pub max_output_bytes_default: u64,
    /// The longest the `sleep` tool may be asked to sleep (5 minutes).
    pub max_sleep: Duration,
    pub circuit_breaker: BreakerConfig,
    /// Rows kept from one `database` step (10,000); the rest are counted, not kept.
    pub max_rows: usize,
    /// Connections per named database (5).
    pub database_max_connections: u32,
    /// How long getting a database connection or opening a TCP connection for HTTP
    /// may take (10 s); the attempt's timeout still applies on top.
    pub connect_timeout: Duration,
    /// The time source of the circuit breakers (the system clock; tests inject one).
    pub clock: Arc<dyn Monotonic>,
    /// Where `notify` steps with `chat:` post (the chat file's channels); none: such a
    /// step fails with class `validation` saying so.
    pub chat: Option<ChatTarget>,
}

/// Posts a `notify` step's text to a named chat channel (awl's `chat` module does).
pub trait ChatPoster: Send + Sync {
    /// Post `text` to `channel`; where the message went.
    fn post<'a>(
        &'a self,
        channel: &'a str,
        text: &'a str,
    ) -> futures_util::future::BoxFuture<'a, Result<Value, StepFailure>>;
}

/// The chat channels `notify` steps post to.
#[derive(Clone)]
pub struct ChatTarget(pub Arc<dyn ChatPoster>);

impl std::fmt::Debug for ChatTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatTarget")
    }
}

impl Default for RunnersConfig {
    fn default() -> Self {
        Self {
            connections: BTreeMap::new(),
            max_output_bytes_default: 1024 * 1024,
            max_sleep: Duration::from_secs(300),
            circuit_breaker: BreakerConfig::default(),
            max_rows: 10_000,
            database_max_connections: 5,
            connect_timeout: Duration::from_secs(10),
            chat: None,
            clock: Arc::new(SystemMonotonic),
        }
    }
}

/// The runners, with what they share: an HTTP client, the database pools (created on
/// first use and kept), the circuit breakers and the limits. Cheap to clone; clones
/// share everything.
#[derive(Clone)]
pub struct Runners {
    inner: Arc<Inner>,
}

struct Inner {
    config: RunnersConfig,
    http: Result<http::HttpClient, String>,
    databases: database::Databases,
    breakers: breaker::Breakers,
}

impl std::fmt::Debug for Runners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runners")
            .field(
                "connections",
                &self.inner.config.connections.keys().collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

impl Runners {
    /// Set the runners up. Nothing is connected yet: database pools are created on
    /// first use. If the HTTP client cannot be built (no usable TLS setup), `http`
    /// and `notify` steps fail with class `dependency` saying why.
    pub fn new(config: RunnersConfig) -> Self {
        let http = http::client(&config);
        let databases = database::Databases::new(&config);
        let breakers = breaker::Breakers::new(config.circuit_breaker, config.clock.clone());
        Self {
            inner: Arc::new(Inner {
                config,
                http,
                databases,
                breakers,
            }),
        }
    }

    pub fn config(&self) -> &RunnersConfig {
        &self.inner.config
    }

    /// Run a `shell` step: see the `shell` module for the rules.
    pub async fn shell(
        &self,
        a: &Attempt<'_>,
        step: &ShellStep,
    ) -> Result<StepSuccess, StepFailure> {
        let prepared = shell::prepare(a, step, self.inner.config.max_output_bytes_default)?;
        let key = format!("shell:{}", prepared.breaker_key());
        self.guarded(key, shell::run(a, prepared)).await
    }

    /// Run an `http` step: see the `http` module for the rules.
    pub async fn http(&self, a: &Attempt<'_>, step: &HttpStep) -> Result<StepSuccess, StepFailure> {
        let client = self.http_client()?;
        let request = http::prepare(client, step, self.inner.config.max_output_bytes_default)?;
        let key = request.breaker_key();
        self.guarded(key, http::send(client, a, request)).await
    }

    /// Run a `database` step: see the `database` module for the rules.
    pub async fn database(
        &self,
        a: &Attempt<'_>,
        step: &DatabaseStep,
    ) -> Result<StepSuccess, StepFailure> {
        let db = self.inner.databases.get(&step.connection)?;
        let key = format!("database:{}", step.connection);
        let config = &self.inner.config;
        self.guarded(key, database::run(db, config, a, step)).await
    }

    /// Run a `notify` step: record the message and post it to its `chat` channel or
    /// its `url`.
    pub async fn notify(
        &self,
        a: &Attempt<'_>,
        step: &NotifyStep,
    ) -> Result<StepSuccess, StepFailure> {
        if let Some(channel) = &step.chat {
            return self.notify_chat(a, step, channel).await;
        }
        let Some(url) = &step.url else {
            return Ok(StepSuccess::output(http::notify_record(step, None)));
        };
        let client = self.http_client()?;
        let request = http::prepare_notify(client, step, url)?;
        let key = request.breaker_key();
        self.guarded(key, http::send_notify(client, a, step, request))
            .await
    }

    /// A `notify` step's message posted to chat channel `channel`.
    async fn notify_chat(
        &self,
        a: &Attempt<'_>,
        step: &NotifyStep,
        channel: &str,
    ) -> Result<StepSuccess, StepFailure> {
        let Some(chat) = &self.inner.config.chat else {
            return Err(StepFailure::validation(format!(
                "`chat: {channel}`: this process has no chat file (--chat-config, or \
                 ./chat.yaml)"
            )));
        };
        let text = http::notify_text(step);
        let posted = match a.timeout {
            Some(limit) => tokio::time::timeout(limit, chat.0.post(channel, &text))
                .await
                .map_err(|_| {
                    StepFailure::new(
                        ErrorClass::Timeout,
                        format!("chat channel `{channel}` did not answer within {limit:?}"),
                    )
                })?,
            None => chat.0.post(channel, &text).await,
        }?;
        let mut record = http::notify_record(step, None);
        record["delivered"] = Value::Bool(true);
        record["chat"] = posted;
        Ok(StepSuccess::output(record))
    }

    /// Run a built-in tool (`awl::workflow::BUILTIN_TOOLS`); exempt from circuit
    /// breakers.
    pub async fn builtin_tool(
        &self,
        a: &Attempt<'_>,
        tool: &str,
        inputs: &Map<String, Value>,
    ) -> Result<StepSuccess, StepFailure> {
        builtin::run(&self.inner.config, a, tool, inputs).await
    }

    /// The breaker of `key` (`shell:git`, `shell:sh script <fingerprint>`,
    /// `http:api.example.com:443`, `database:main`), for the executor's timeline and
    /// for tests.
    pub fn breaker_state(&self, key: &str) -> breaker::BreakerState {
        self.inner.breakers.state(key)
    }

    fn http_client(&self) -> Result<&http::HttpClient, StepFailure> {
        self.inner.http.as_ref().map_err(|e| {
            StepFailure::new(
                ErrorClass::Dependency,
                format!("the HTTP client could not be set up: {e}"),
            )
        })
    }

    /// Run `call` under the breaker of `key`: fail fast while it is open, and record
    /// the outcome.
    async fn guarded(
        &self,
        key: String,
        call: impl Future<Output = Result<StepSuccess, StepFailure>>,
    ) -> Result<StepSuccess, StepFailure> {
        let permit = self
            .inner
            .breakers
            .acquire(key)
            .map_err(|open| StepFailure::new(ErrorClass::Dependency, open.to_string()))?;
        let result = call.await;
        permit.record(breaker::Outcome::of(&result));
        result
    }
}

pub(crate) use crate::text::clip;

/// Standard base64 with padding (for binary column values).
pub(crate) fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_matches_rfc_4648_vectors() {
        let cases = [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ];
        for (input, expected) in cases {
            assert_eq!(base64(input.as_bytes()), expected, "{input:?}");
        }
        assert_eq!(base64(&[0xff, 0xfe, 0x00]), "//4A");
    }

    #[test]
    fn step_failure_converts_to_the_recorded_error() {
        let f = StepFailure::validation("bad").with_output(serde_json::json!({"x": 1}));
        assert_eq!(f.to_string(), "validation: bad");
        assert_eq!(
            f.to_step_error(),
            StepError {
                class: ErrorClass::Validation,
                message: "bad".into()
            }
        );
    }
}
