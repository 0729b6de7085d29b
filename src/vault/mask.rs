//! Masking: every occurrence of a known secret value replaced by [`REDACTED`].
//!
//! Masking works on values, not on names, so a secret is caught wherever it shows
//! up: echoed by a shell step, quoted in an HTTP error, pasted into a prompt. Values
//! shorter than [`MIN_MASKED_CHARS`] are not masked (masking `"1"` would wreck every
//! output and protect nothing); a secret that short is not a secret.

use std::borrow::Cow;

use serde_json::Value;

use super::REDACTED;

/// Shorter values are not masked.
pub const MIN_MASKED_CHARS: usize = 4;

/// A set of secret values to mask.
#[derive(Clone, Default, PartialEq)]
pub struct Mask {
    /// Longest first, so a secret that contains another is masked whole.
    values: Vec<String>,
}

/// No secrets: for callers that have none (tests, tools run outside a run).
pub static NO_SECRETS: Mask = Mask { values: Vec::new() };

impl std::fmt::Debug for Mask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Mask({} values)", self.values.len())
    }
}

impl Mask {
    pub fn new<I, S>(values: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut mask = Self::default();
        mask.extend(values);
        mask
    }

    /// Add values (and the forms they take inside JSON text).
    pub fn extend<I, S>(&mut self, values: I)
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        for value in values {
            let value = value.into();
            if value.chars().count() < MIN_MASKED_CHARS {
                continue;
            }
            // Inside a JSON document (a step's stdout, an HTTP body kept as text) a
            // value with quotes or backslashes appears escaped.
            let quoted = serde_json::to_string(&value).unwrap_or_default();
            if let Some(escaped) = quoted.get(1..quoted.len().saturating_sub(1))
                && escaped != value
            {
                self.values.push(escaped.to_string());
            }
            self.values.push(value);
        }
        self.values
            .sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
        self.values.dedup();
    }

    /// Add every text leaf of a JSON value (a secret input may be an object).
    pub fn extend_from_value(&mut self, value: &Value) {
        let mut found = Vec::new();
        leaves(value, &mut found);
        self.extend(found);
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// `text` with every secret replaced.
    pub fn apply<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in &self.values {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }

    /// Mask a string in place.
    pub fn apply_to(&self, text: &mut String) {
        if let Cow::Owned(masked) = self.apply(text) {
            *text = masked;
        }
    }

    /// Mask every string (and object key) of a JSON value in place.
    pub fn apply_to_value(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        match value {
            Value::String(s) => self.apply_to(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.apply_to_value(v)),
            Value::Object(map) => {
                let old = std::mem::take(map);
                for (key, mut v) in old {
                    self.apply_to_value(&mut v);
                    map.insert(self.apply(&key).into_owned(), v);
                }
            }
            // A number or boolean equal to a secret is masked as text would be.
            Value::Number(n) => {
                let text = n.to_string();
                if self.values.contains(&text) {
                    *value = Value::String(REDACTED.into());
                }
            }
            Value::Bool(_) | Value::Null => {}
        }
    }
}

/// The text leaves of a JSON value: strings as they are, numbers as written.
pub fn leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(s) => out.push(s.clone()),
        Value::Number(n) => out.push(n.to_string()),
        Value::Array(items) => items.iter().for_each(|v| leaves(v, out)),
        Value::Object(map) => map.values().for_each(|v| leaves(v, out)),
        Value::Bool(_) | Value::Null => {}
    }
}
