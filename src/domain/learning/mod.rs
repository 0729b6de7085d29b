//! Learning from history, as arithmetic: which tool sequences repeat, how often they
//! succeed, which of their arguments vary and where data flows between their calls.
//!
//! The log records every tool call (an agent's `task.tool_call_reported`); the learning
//! projection turns each into a [`Call`] of its session and hands it to the session's
//! [`Tail`]. The tail keeps the calls that can still share a window with a later one,
//! and says which sequences end in the new call ([`Occurrence`]): every run of 3 to
//! `max_length` consecutive calls whose first and last lie within the window. Each
//! occurrence is added to its [`Pattern`] (one per scope and tool sequence): executions
//! counted always, successes only when every call succeeded, and for successes the
//! arguments' values and the flows from one call's output into a later call's input.
//!
//! Nothing here reads a clock or a table: the projection gives the calls in log order,
//! so a rebuild from position 0 makes the same patterns.

mod flows;
mod pattern;
mod suggest;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use flows::{Flow, Sources, flows_between};
pub use pattern::{ArgStat, FlowStat, Pattern, closed};
pub use suggest::{Context, Match, match_context};

/// How sequences are found. The window and lengths shape the learning projection's
/// rows (changing them rebuilds it); thresholds are applied when proposing.
#[derive(Debug, Clone, PartialEq)]
pub struct MiningConfig {
    /// The fewest calls a sequence has (3).
    pub min_length: usize,
    /// The most calls a sequence has (8).
    pub max_length: usize,
    /// The first and last call of a sequence lie at most this far apart (5 minutes).
    pub window: Duration,
}

impl Default for MiningConfig {
    fn default() -> Self {
        Self {
            min_length: 3,
            max_length: 8,
            window: Duration::from_secs(300),
        }
    }
}

/// Outputs larger than this (as JSON text) are not kept for finding flows.
pub const MAX_OUTPUT_BYTES: usize = 4_096;

/// One tool call as the learner sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Call {
    pub tool: String,
    /// The arguments: an object (any other value is kept as `{"value": ...}`).
    #[serde(default)]
    pub args: Map<String, Value>,
    /// What it returned, when the caller said and it is small.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output: Option<Value>,
    pub success: bool,
    pub duration_ms: u64,
    /// When it ended (was reported).
    pub at: DateTime<Utc>,
}

impl Call {
    /// A call from what a caller reported: arguments made an object, a large output
    /// dropped.
    pub fn new(
        tool: impl Into<String>,
        args: Value,
        output: Option<Value>,
        success: bool,
        duration_ms: u64,
        at: DateTime<Utc>,
    ) -> Self {
        let args = match args {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => Map::from_iter([("value".to_string(), other)]),
        };
        let output = output.filter(|o| {
            !o.is_null()
                && serde_json::to_string(o).is_ok_and(|text| text.len() <= MAX_OUTPUT_BYTES)
        });
        Self {
            tool: tool.into(),
            args,
            output,
            success,
            duration_ms,
            at,
        }
    }

    /// A call a workflow step made (its start's recorded call and its outcome). A list
    /// argument is seen item by item (`command[1]`), so that the one item that varies
    /// between runs becomes a workflow input, not the whole list.
    pub fn from_step(
        tool: &str,
        inputs: Value,
        output: Option<Value>,
        success: bool,
        duration_ms: u64,
        at: DateTime<Utc>,
    ) -> Self {
        let mut call = Self::new(tool, inputs, output, success, duration_ms, at);
        call.args = flatten_lists(std::mem::take(&mut call.args));
        call
    }

    /// Its argument names, sorted: the shape of the call.
    pub fn shape(&self) -> Vec<&str> {
        self.args.keys().map(String::as_str).collect()
    }

    /// When it started, as far as its duration says.
    pub fn started_at(&self) -> DateTime<Utc> {
        self.at - chrono::Duration::milliseconds(i64::try_from(self.duration_ms).unwrap_or(0))
    }
}

fn flatten_lists(args: Map<String, Value>) -> Map<String, Value> {
    let mut out = Map::new();
    for (key, value) in args {
        match value {
            Value::Array(items) => {
                for (i, item) in items.into_iter().enumerate() {
                    out.insert(item_key(&key, i), item);
                }
            }
            other => {
                out.insert(key, other);
            }
        }
    }
    out
}

/// The argument name of item `i` of list argument `key`.
pub fn item_key(key: &str, i: usize) -> String {
    format!("{key}[{i}]")
}

/// `command[1]` as (`command`, 1).
pub fn list_item(key: &str) -> Option<(&str, usize)> {
    let (name, rest) = key.split_once('[')?;
    let index = rest.strip_suffix(']')?.parse().ok()?;
    Some((name, index))
}

/// A run of consecutive calls of one session, ending in the newest. The calls are
/// shared with the session's tail (a call ends up to six sequences at once), and so is
/// the search for the data flowing between them.
#[derive(Debug, Clone, PartialEq)]
pub struct Occurrence {
    pub calls: Vec<Arc<Call>>,
    sources: Arc<Sources>,
    /// Where `calls` starts in the run `sources` was found in.
    start: usize,
}

impl Occurrence {
    /// An occurrence of `calls` on their own.
    pub fn new(calls: Vec<Arc<Call>>) -> Self {
        Self {
            sources: Arc::new(Sources::of(&calls)),
            calls,
            start: 0,
        }
    }

    /// For each argument of each of its calls (`"INDEX.KEY"`), the flow it came from:
    /// [`flows_between`] of its calls.
    pub fn flows(&self) -> BTreeMap<String, Flow> {
        self.sources
            .within(self.start, self.start + self.calls.len())
    }

    pub fn tools(&self) -> Vec<String> {
        self.calls.iter().map(|c| c.tool.clone()).collect()
    }

    /// [`signature`] of its tools.
    pub fn signature(&self) -> String {
        let mut out = String::new();
        for (i, c) in self.calls.iter().enumerate() {
            if i > 0 {
                out.push_str(" > ");
            }
            out.push_str(&c.tool);
        }
        out
    }

    /// Every call succeeded.
    pub fn succeeded(&self) -> bool {
        self.calls.iter().all(|c| c.success)
    }

    /// From the first call's start to the last call's end, in milliseconds.
    pub fn span_ms(&self) -> u64 {
        match (self.calls.first(), self.calls.last()) {
            (Some(first), Some(last)) => {
                u64::try_from((last.at - first.started_at()).num_milliseconds()).unwrap_or(0)
            }
            _ => 0,
        }
    }
}

/// The name of a tool sequence: its tools joined by ` > `.
pub fn signature(tools: &[String]) -> String {
    tools.join(" > ")
}

/// A session's recent calls: those a later call could still share a window with, at
/// most `max_length - 1` of them before the newest.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Tail {
    pub calls: Vec<Arc<Call>>,
}

impl Tail {
    /// Add `call` and return the sequences that end in it, shortest first.
    pub fn push(&mut self, call: impl Into<Arc<Call>>, config: &MiningConfig) -> Vec<Occurrence> {
        let call = call.into();
        let window = chrono::Duration::from_std(config.window).unwrap_or(chrono::Duration::MAX);
        let earliest = call.at.checked_sub_signed(window);
        self.calls
            .retain(|c| earliest.is_none_or(|earliest| c.at >= earliest) && c.at <= call.at);
        let keep = config.max_length.saturating_sub(1);
        if self.calls.len() > keep {
            self.calls.drain(..self.calls.len() - keep);
        }
        self.calls.push(call);
        let n = self.calls.len();
        let lengths = config.min_length.max(1)..=n.min(config.max_length);
        if lengths.is_empty() {
            return Vec::new();
        }
        let sources = Arc::new(Sources::of(&self.calls));
        lengths
            .map(|len| Occurrence {
                calls: self.calls[n - len..].to_vec(),
                sources: sources.clone(),
                start: n - len,
            })
            .collect()
    }
}

/// The tools a workflow definition calls, in the order its steps are written: a
/// `tool` step's tool, a `workflow` step's `workflow:NAME`, and `shell`, `http` and
/// `database` steps by their type. Steps nested in branches and groups count in place.
pub fn tools_of(definition: &Value) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(steps) = definition.get("steps") {
        walk(steps, &mut out);
    }
    out
}

fn walk(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Array(items) => items.iter().for_each(|item| walk(item, out)),
        Value::Object(step) => {
            if let Some(label) = step_tool(step) {
                out.push(label);
            }
            // Nested steps in the order a reader meets them (a conditional's true
            // branch before its false one).
            for key in ["steps", "branches", "if_true", "if_false"] {
                if let Some(child) = step.get(key) {
                    walk(child, out);
                }
            }
        }
        _ => {}
    }
}

fn step_tool(step: &Map<String, Value>) -> Option<String> {
    if let Some(tool) = step.get("tool").and_then(Value::as_str) {
        return Some(tool.to_string());
    }
    match step.get("type").and_then(Value::as_str)? {
        kind @ ("shell" | "http" | "database") => Some(kind.to_string()),
        "workflow" => step
            .get("workflow")
            .and_then(Value::as_str)
            .map(|name| format!("workflow:{name}")),
        _ => None,
    }
}
