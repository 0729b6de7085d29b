//! A run's protection: what the engine masks and seals before an event is recorded.
//!
//! The executor builds it from the run's definition (which inputs are secret or
//! personal), the run's opened inputs, the worker's secret env variables and awl's own
//! connection strings, and the subject's key. The engine applies it to the free text
//! of every event it decides (outputs, errors, messages, reasons): secrets are masked
//! in both the run's state and the log (a step after it sees what replay would see);
//! text holding personal data is sealed in the log only, since replay opens it again.

use serde_json::Value;

use super::mask::{MIN_MASKED_CHARS, Mask, leaves};
use super::seal::{KeyId, Kind, SubjectKey, is_sealed, seal};

/// The run's subject and the personal values sealed under its key.
#[derive(Clone, PartialEq)]
pub struct Personal {
    pub key_id: KeyId,
    pub key: SubjectKey,
    values: Vec<String>,
}

impl std::fmt::Debug for Personal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Personal({}, {} values)", self.key_id, self.values.len())
    }
}

impl Personal {
    /// `values`: the opened personal inputs (their text leaves are looked for).
    pub fn new<'v>(
        key_id: KeyId,
        key: SubjectKey,
        values: impl IntoIterator<Item = &'v Value>,
    ) -> Self {
        let mut found = Vec::new();
        for value in values {
            leaves(value, &mut found);
        }
        found.retain(|v| v.chars().count() >= MIN_MASKED_CHARS);
        found.sort();
        found.dedup();
        Self {
            key_id,
            key,
            values: found,
        }
    }

    fn holds(&self, text: &str) -> bool {
        self.values.iter().any(|v| text.contains(v.as_str()))
    }
}

/// What to mask and what to seal in one run's events.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Protection {
    pub mask: Mask,
    pub personal: Option<Personal>,
}

impl Protection {
    pub fn is_empty(&self) -> bool {
        self.mask.is_empty() && self.personal.is_none()
    }

    /// Seal `text` whole if it holds personal data.
    pub fn seal_text(&self, text: &mut String) {
        let Some(p) = &self.personal else { return };
        if !is_sealed(text) && p.holds(text) {
            let value = Value::String(std::mem::take(text));
            *text = seal(Kind::Personal, &p.key_id, &p.key, &value);
        }
    }

    /// Seal every string of `value` that holds personal data.
    pub fn seal_value(&self, value: &mut Value) {
        if self.personal.is_none() {
            return;
        }
        match value {
            Value::String(s) => self.seal_text(s),
            Value::Array(items) => items.iter_mut().for_each(|v| self.seal_value(v)),
            Value::Object(map) => map.values_mut().for_each(|v| self.seal_value(v)),
            _ => {}
        }
    }

    /// Mask, then seal: what the log keeps of a value the run did not have sealed.
    pub fn protect_value(&self, value: &mut Value) {
        self.mask.apply_to_value(value);
        self.seal_value(value);
    }

    /// Mask, then seal, a string.
    pub fn protect_text(&self, text: &mut String) {
        self.mask.apply_to(text);
        self.seal_text(text);
    }
}
