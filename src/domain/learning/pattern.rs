//! A tool sequence and what was seen of it: executions and successes, the sessions it
//! came from, its arguments (constant or varying) and its flows.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{Occurrence, flows_between};

/// How many sessions a pattern keeps as evidence.
pub const MAX_EVIDENCE: usize = 20;
/// How many distinct values of an argument are kept as examples.
const MAX_EXAMPLES: usize = 5;

/// One argument of one call of a pattern, over its successful executions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgStat {
    /// The value seen first.
    pub value: Value,
    /// Every execution that had the argument gave it the same value.
    pub constant: bool,
    /// How many successful executions had it.
    pub seen: u64,
    /// A few distinct values, first seen first.
    pub examples: Vec<Value>,
}

/// A flow into one argument and how many successful executions showed it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowStat {
    pub from: usize,
    pub path: String,
    pub seen: u64,
}

/// A tool sequence of one scope.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Pattern {
    pub tools: Vec<String>,
    /// Times the sequence was seen, whatever its calls' outcomes.
    pub executions: u64,
    /// Times every call succeeded.
    pub successes: u64,
    /// Distinct sessions it succeeded in (counted as they change).
    pub sessions: u64,
    pub last_session: String,
    pub first_at: DateTime<Utc>,
    pub last_at: DateTime<Utc>,
    /// The successful executions' spans added up, in milliseconds.
    pub span_ms_total: u64,
    /// Per call, per argument name.
    pub args: Vec<BTreeMap<String, ArgStat>>,
    /// Per argument (`"INDEX.KEY"`), the flow first seen into it.
    pub flows: BTreeMap<String, FlowStat>,
    /// The latest sessions it succeeded in, oldest first.
    pub evidence: Vec<String>,
}

impl Pattern {
    /// A pattern seen once, in `session`.
    pub fn first(occurrence: &Occurrence, session: &str) -> Self {
        // An occurrence always has calls; the epoch is only a defined default.
        let at = occurrence
            .calls
            .last()
            .map_or(DateTime::<Utc>::UNIX_EPOCH, |c| c.at);
        let mut pattern = Self {
            tools: occurrence.tools(),
            executions: 0,
            successes: 0,
            sessions: 0,
            last_session: String::new(),
            first_at: at,
            last_at: at,
            span_ms_total: 0,
            args: vec![BTreeMap::new(); occurrence.calls.len()],
            flows: BTreeMap::new(),
            evidence: Vec::new(),
        };
        pattern.add(occurrence, session);
        pattern
    }

    /// Count one more execution of the sequence.
    pub fn add(&mut self, occurrence: &Occurrence, session: &str) {
        self.executions += 1;
        if let Some(last) = occurrence.calls.last() {
            self.last_at = self.last_at.max(last.at);
            self.first_at = self.first_at.min(last.at);
        }
        if !occurrence.succeeded() || occurrence.calls.len() != self.tools.len() {
            return;
        }
        self.successes += 1;
        self.span_ms_total = self.span_ms_total.saturating_add(occurrence.span_ms());
        if self.last_session != session {
            self.sessions += 1;
            self.last_session = session.to_string();
        }
        self.evidence.retain(|s| s != session);
        self.evidence.push(session.to_string());
        if self.evidence.len() > MAX_EVIDENCE {
            self.evidence.remove(0);
        }
        self.add_args(occurrence);
        self.add_flows(occurrence);
    }

    fn add_args(&mut self, occurrence: &Occurrence) {
        let first = self.successes == 1;
        for (stats, call) in self.args.iter_mut().zip(&occurrence.calls) {
            for (key, value) in &call.args {
                match stats.get_mut(key) {
                    Some(stat) => {
                        stat.seen += 1;
                        if stat.value != *value {
                            stat.constant = false;
                        }
                        if stat.examples.len() < MAX_EXAMPLES && !stat.examples.contains(value) {
                            stat.examples.push(value.clone());
                        }
                    }
                    None => {
                        stats.insert(
                            key.clone(),
                            ArgStat {
                                value: value.clone(),
                                // An argument missing from earlier executions varies.
                                constant: first,
                                seen: 1,
                                examples: vec![value.clone()],
                            },
                        );
                    }
                }
            }
        }
    }

    fn add_flows(&mut self, occurrence: &Occurrence) {
        for (arg, flow) in flows_between(&occurrence.calls) {
            match self.flows.get_mut(&arg) {
                Some(stat) if stat.from == flow.from && stat.path == flow.path => stat.seen += 1,
                Some(_) => {}
                None => {
                    self.flows.insert(
                        arg,
                        FlowStat {
                            from: flow.from,
                            path: flow.path,
                            seen: 1,
                        },
                    );
                }
            }
        }
    }

    /// Successes over executions, from 0 to 1.
    pub fn confidence(&self) -> f64 {
        if self.executions == 0 {
            0.0
        } else {
            self.successes as f64 / self.executions as f64
        }
    }

    /// The mean time a successful execution took, by hand.
    pub fn mean_span_ms(&self) -> u64 {
        self.span_ms_total.checked_div(self.successes).unwrap_or(0)
    }

    /// An argument's flow, if every successful execution showed it.
    pub fn steady_flow(&self, call: usize, key: &str) -> Option<&FlowStat> {
        self.flows
            .get(&format!("{call}.{key}"))
            .filter(|f| f.seen == self.successes && f.from < call)
    }

    /// Whether `tools` runs inside this pattern's sequence.
    pub fn contains(&self, tools: &[String]) -> bool {
        tools.len() <= self.tools.len() && self.tools.windows(tools.len()).any(|w| w == tools)
    }
}

/// The patterns worth proposing: those with at least `min_successes` successes and
/// `min_confidence`, leaving out any that runs inside a longer one that succeeded as
/// often (the longer one says more). Ordered by confidence, then successes, then name.
pub fn closed(patterns: &[Pattern], min_successes: u64, min_confidence: f64) -> Vec<&Pattern> {
    let strong: Vec<&Pattern> = patterns
        .iter()
        .filter(|p| p.successes >= min_successes.max(1) && p.confidence() >= min_confidence)
        .collect();
    let mut chosen: Vec<&Pattern> = strong
        .iter()
        .copied()
        .filter(|p| {
            !strong.iter().any(|longer| {
                longer.tools.len() > p.tools.len()
                    && longer.successes >= p.successes
                    && longer.contains(&p.tools)
            })
        })
        .collect();
    chosen.sort_by(|a, b| {
        b.confidence()
            .total_cmp(&a.confidence())
            .then(b.successes.cmp(&a.successes))
            .then(a.tools.cmp(&b.tools))
    });
    chosen
}
