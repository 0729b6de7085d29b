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
//!
//! The limits are enforced by the executor against counters in the database, taken
//! in the transaction that records the run's admission, so they hold across every
//! worker and server.

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
