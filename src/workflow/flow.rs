//! Flow control in the language: how a workflow's runs share the service with each
//! other and with the systems they call.
//!
//! - `priority`: among runs due at the same time (and runs waiting for a slot), the
//!   higher goes first; a start may give its own.
//! - `concurrency`: at most `limit` runs of the workflow on their way at once, and at
//!   most `per_key` per value of the `key` expression over the inputs (at most 2 runs
//!   per `inputs.customer`). A run over a limit is QUEUED: it holds its place and
//!   starts when a slot frees, the slots of a limit shared fairly between keys.
//! - `debounce`: a start whose `key` has the value of a start less than
//!   `window_seconds` ago joins that run instead of starting another.
//! - `rate_limits`: at most `per_second` calls a second, `burst` at once after a quiet
//!   time, for the steps that name the limit (`rate_limit:`) and every `tool` step
//!   calling one of its `tools`; with a `key`, one such budget per value. A limit's
//!   name is shared by every workflow of the store that declares it: it stands for
//!   the system being called.
//!
//! The limits are enforced by the executor against rows in the database: concurrency
//! slots taken in the transaction that records the run's admission, rate tokens
//! reserved before each attempt; so they hold across every worker and server.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The highest (and, negated, the lowest) priority.
pub const MAX_PRIORITY: i32 = 1_000;

/// How many runs may be on their way at once.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ConcurrencySpec {
    /// At most this many runs of the workflow at once; more wait, QUEUED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub limit: Option<u32>,
    /// An expression over the inputs (`inputs.customer`): runs whose key has the
    /// same value share `per_key` slots.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// With `key`: at most this many runs per value of the key at once.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub per_key: Option<u32>,
}

impl ConcurrencySpec {
    /// What is wrong with it, by field.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if self.limit == Some(0) {
            problems.push(("limit", "`limit` must be at least 1".to_string()));
        }
        if self.per_key == Some(0) {
            problems.push(("per_key", "`per_key` must be at least 1".to_string()));
        }
        match (&self.key, self.per_key) {
            (Some(_), None) => problems.push((
                "key",
                "`key` needs `per_key`: how many runs each value may have at once".to_string(),
            )),
            (None, Some(_)) => problems.push((
                "per_key",
                "`per_key` needs `key`: the expression whose values it limits".to_string(),
            )),
            _ => {}
        }
        if self.limit.is_none() && self.key.is_none() && self.per_key.is_none() {
            problems.push((
                "limit",
                "`concurrency` needs `limit`, or `key` with `per_key`".to_string(),
            ));
        }
        problems
    }
}

/// Starts that join the run of an earlier start with the same key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DebounceSpec {
    /// An expression over the inputs (`inputs.order_id`).
    pub key: String,
    /// A start within this many seconds of the first start with the same key joins
    /// its run (answering with it) instead of starting another.
    #[schemars(range(min = 1))]
    pub window_seconds: u64,
}

/// The most calls a second a rate limit may allow.
pub const MAX_RATE_PER_SECOND: f64 = 1_000_000.0;

/// How fast some steps may call what they call: a token bucket (GCRA) kept in the
/// database, so every worker and server shares it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimitSpec {
    /// The limit's name: letters, digits, `-`, `_` and `.`. Workflows that declare
    /// the same name share its budget (declare the same rate in each).
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"))]
    pub name: String,
    /// Calls a second, over time (a fraction is fine: `0.5` is one call every 2 s).
    pub per_second: f64,
    /// Calls that may go at once after a quiet time (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub burst: Option<u32>,
    /// An expression over the inputs (`inputs.customer`): each value has a budget of
    /// its own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Every `tool` step calling one of these tools takes a token of this limit
    /// (besides steps that name it with `rate_limit:`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
}

impl RateLimitSpec {
    pub fn burst(&self) -> u32 {
        self.burst.unwrap_or(1).max(1)
    }

    /// What is wrong with it, by field.
    pub fn problems(&self) -> Vec<(&'static str, String)> {
        let mut problems = Vec::new();
        if !(self.per_second.is_finite()
            && self.per_second > 0.0
            && self.per_second <= MAX_RATE_PER_SECOND)
        {
            problems.push((
                "per_second",
                format!(
                    "`per_second` must be more than 0 and at most {MAX_RATE_PER_SECOND}, not {}",
                    self.per_second
                ),
            ));
        }
        if self.burst == Some(0) {
            problems.push(("burst", "`burst` must be at least 1".to_string()));
        }
        problems
    }
}

/// The replay window of a webhook, by default: a delivery signed longer ago (or
/// further ahead) than this is refused as stale.
pub const DEFAULT_HOOK_TOLERANCE_SECONDS: u64 = 300;

/// A webhook that starts runs: `POST /api/v1/hooks/NAME`, signed as Standard
/// Webhooks sign (`webhook-id`, `webhook-timestamp`, `webhook-signature:
/// v1,BASE64(HMAC-SHA256(secret, "ID.TIMESTAMP.BODY"))`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct HookSpec {
    /// The hook's name, unique in a store: the last part of its URL.
    #[schemars(regex(pattern = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$"))]
    pub name: String,
    /// The environment variable of `awl serve` holding the signing secret (raw, or
    /// `whsec_` and base64). The secret itself never goes in a workflow file.
    pub secret_env: String,
    /// Deliveries signed more than this many seconds from now are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 86400))]
    pub tolerance_seconds: Option<u64>,
    /// The run's inputs, by name: templates over the delivery, which they see as
    /// `inputs.body` (its JSON) and `inputs.headers` (lower-case names). Absent: the
    /// body, a JSON object, is the inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<serde_json::Map<String, serde_json::Value>>,
}

impl HookSpec {
    pub fn tolerance_seconds(&self) -> u64 {
        self.tolerance_seconds
            .unwrap_or(DEFAULT_HOOK_TOLERANCE_SECONDS)
    }
}
