//! A tool sequence and what was seen of it: executions and successes, the sessions it
//! came from, its arguments (constant or varying) and its flows.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Occurrence;

/// How many sessions a pattern keeps as evidence (the first it succeeded in; the
/// latest is kept beside them).
pub const MAX_EVIDENCE: usize = 20;
/// How many distinct values of an argument are kept as examples.
const MAX_EXAMPLES: usize = 5;

/// One argument of one call of a pattern, over its successful executions.
///
/// Nothing here changes with every execution: once an argument's examples are full
/// and it is known to vary, a new success leaves it as it was. The learning
/// projection relies on that to write a pattern's details only when they change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArgStat {
    /// The value seen first.
    pub value: Value,
    /// Every execution that had the argument gave it the same value.
    pub constant: bool,
    /// Every successful execution had the argument.
    pub always: bool,
    /// A few distinct values, first seen first.
    pub examples: Vec<Value>,
}

/// A flow into one argument: from which call's output, at which path.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowStat {
    pub from: usize,
    pub path: String,
    /// Every successful execution showed this flow.
    pub steady: bool,
}

/// A tool sequence of one scope.
///
/// Its counters (executions, successes, sessions, times) change with every execution;
/// its details (`args`, `flows`, `evidence`) settle after a few, and
/// [`Pattern::add`] says when they changed.
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
    /// The first sessions it succeeded in, in order.
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

    /// Count one more execution of the sequence. True if its details (arguments,
    /// flows, evidence) changed, not only its counters.
    pub fn add(&mut self, occurrence: &Occurrence, session: &str) -> bool {
        self.executions += 1;
        if let Some(last) = occurrence.calls.last() {
            self.last_at = self.last_at.max(last.at);
            self.first_at = self.first_at.min(last.at);
        }
        if !occurrence.succeeded() || occurrence.calls.len() != self.tools.len() {
            return false;
        }
        self.successes += 1;
        self.span_ms_total = self.span_ms_total.saturating_add(occurrence.span_ms());
        if self.last_session != session {
            self.sessions += 1;
            self.last_session = session.to_string();
        }
        let mut changed = false;
        if self.evidence.len() < MAX_EVIDENCE && !self.evidence.iter().any(|s| s == session) {
            self.evidence.push(session.to_string());
            changed = true;
        }
        changed |= self.add_args(occurrence);
        changed |= self.add_flows(occurrence);
        changed
    }

    fn add_args(&mut self, occurrence: &Occurrence) -> bool {
        let first = self.successes == 1;
        let mut changed = false;
        for (stats, call) in self.args.iter_mut().zip(&occurrence.calls) {
            for (key, stat) in stats.iter_mut() {
                if stat.always && !call.args.contains_key(key) {
                    stat.always = false;
                    changed = true;
                }
            }
            for (key, value) in &call.args {
                match stats.get_mut(key) {
                    Some(stat) => {
                        if stat.constant && stat.value != *value {
                            stat.constant = false;
                            changed = true;
                        }
                        if stat.examples.len() < MAX_EXAMPLES && !stat.examples.contains(value) {
                            stat.examples.push(value.clone());
                            changed = true;
                        }
                    }
                    None => {
                        stats.insert(
                            key.clone(),
                            ArgStat {
                                value: value.clone(),
                                // An argument missing from earlier executions varies.
                                constant: first,
                                always: first,
                                examples: vec![value.clone()],
                            },
                        );
                        changed = true;
                    }
                }
            }
        }
        changed
    }

    fn add_flows(&mut self, occurrence: &Occurrence) -> bool {
        let first = self.successes == 1;
        let shown = occurrence.flows();
        let mut changed = false;
        for (arg, stat) in self.flows.iter_mut() {
            if stat.steady
                && !shown
                    .get(arg)
                    .is_some_and(|f| f.from == stat.from && f.path == stat.path)
            {
                stat.steady = false;
                changed = true;
            }
        }
        for (arg, flow) in shown {
            if let std::collections::btree_map::Entry::Vacant(slot) = self.flows.entry(arg) {
                slot.insert(FlowStat {
                    from: flow.from,
                    path: flow.path,
                    // A flow missing from earlier executions is not steady.
                    steady: first,
                });
                changed = true;
            }
        }
        changed
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
            .filter(|f| f.steady && f.from < call)
    }

    /// The sessions it succeeded in, as evidence: the first ones and the latest.
    pub fn evidence_sessions(&self) -> Vec<String> {
        let mut out = self.evidence.clone();
        if !self.last_session.is_empty() && !out.contains(&self.last_session) {
            out.push(self.last_session.clone());
        }
        out
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
