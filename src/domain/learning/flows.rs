//! Data flowing from one call's output into a later call's arguments, where it can be
//! seen: an argument whose value equals a value in an earlier call's output.
//!
//! Only values that could not match by chance count: strings of at least three
//! characters and numbers other than 0 and 1. The nearest earlier call wins, and within
//! an output the first path in document order (object keys sorted, arrays by index).

use std::borrow::Borrow;
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::Call;

/// Where an argument's value came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flow {
    /// The index of the call whose output held it.
    pub from: usize,
    /// Its path in that output: keys and indexes joined by `.` (empty: the whole output).
    pub path: String,
}

/// How deep into an output values are looked for.
const MAX_DEPTH: usize = 4;
/// How many items of an array are looked at.
const MAX_ITEMS: usize = 20;

/// For each argument of each call (`"INDEX.KEY"`), the flow it came from.
pub fn flows_between<C: Borrow<Call>>(calls: &[C]) -> BTreeMap<String, Flow> {
    Sources::of(calls).within(0, calls.len())
}

/// Every flow of a run of calls with its sources found once: each argument's nearest
/// earlier call in the whole run. The flows of a window of it (`within`) are then the
/// sources that fall inside the window, since the nearest earlier call inside a window
/// is the nearest one overall unless that lies before the window. A session's newest
/// call ends up to six sequences at once; their flows share this one search.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sources {
    /// (the call's index, the argument, the flow with `from` an index in the run)
    found: Vec<(usize, String, Flow)>,
}

impl Sources {
    pub fn of<C: Borrow<Call>>(calls: &[C]) -> Self {
        let mut found = Vec::new();
        for (j, call) in calls.iter().enumerate().skip(1) {
            let call = call.borrow();
            for (key, value) in &call.args {
                if !distinctive(value) {
                    continue;
                }
                let source = (0..j).rev().find_map(|i| {
                    let output = calls[i].borrow().output.as_ref()?;
                    path_of(output, value, 0).map(|path| Flow { from: i, path })
                });
                if let Some(flow) = source {
                    found.push((j, key.clone(), flow));
                }
            }
        }
        Self { found }
    }

    /// The flows of calls `start..end`, indexes counted from `start`.
    pub fn within(&self, start: usize, end: usize) -> BTreeMap<String, Flow> {
        self.found
            .iter()
            .filter(|(j, _, flow)| *j < end && flow.from >= start)
            .map(|(j, key, flow)| {
                (
                    format!("{}.{key}", j - start),
                    Flow {
                        from: flow.from - start,
                        path: flow.path.clone(),
                    },
                )
            })
            .collect()
    }
}

/// A value too specific to be equal by chance.
fn distinctive(value: &Value) -> bool {
    match value {
        Value::String(s) => s.chars().count() >= 3,
        Value::Number(n) => n.as_f64().is_some_and(|f| f != 0.0 && f != 1.0),
        _ => false,
    }
}

fn path_of(haystack: &Value, needle: &Value, depth: usize) -> Option<String> {
    if haystack == needle {
        return Some(String::new());
    }
    if depth >= MAX_DEPTH {
        return None;
    }
    let join = |head: String, rest: String| {
        if rest.is_empty() {
            head
        } else {
            format!("{head}.{rest}")
        }
    };
    match haystack {
        Value::Object(map) => map.iter().find_map(|(k, v)| {
            if !is_plain_key(k) {
                return None;
            }
            path_of(v, needle, depth + 1).map(|rest| join(k.clone(), rest))
        }),
        Value::Array(items) => {
            items.iter().take(MAX_ITEMS).enumerate().find_map(|(i, v)| {
                path_of(v, needle, depth + 1).map(|rest| join(i.to_string(), rest))
            })
        }
        _ => None,
    }
}

/// A key a template can name in a dotted path.
fn is_plain_key(key: &str) -> bool {
    let mut chars = key.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}
