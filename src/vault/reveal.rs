//! What a reader sees of a sealed value.
//!
//! Readers differ: the executor needs the value itself to replay a run; a view (the
//! events API, a run's status, a live stream) may show personal data while its
//! subject is remembered but never a secret; a read model, which outlives any key,
//! keeps neither.

use std::collections::{BTreeSet, HashMap};

use serde_json::Value;

use super::seal::{KeyId, Kind, SubjectKey, open, parse};
use super::{ERASED, REDACTED, UNREADABLE};

/// What a read model keeps of personal data (it is never decrypted into one).
pub const PERSONAL: &str = "[personal]";

/// The keys at hand, by id.
pub type Keys = HashMap<KeyId, SubjectKey>;

/// Who is reading.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reveal {
    /// The executor: every value opened; a forgotten subject's data reads [`ERASED`].
    Plain,
    /// A person or agent: secrets [`REDACTED`], personal data opened or [`ERASED`].
    View,
    /// A read model: secrets [`REDACTED`], personal data [`PERSONAL`], nothing opened.
    Hidden,
}

/// The key ids of every sealed value in `value`.
pub fn key_ids(value: &Value, out: &mut BTreeSet<KeyId>) {
    match value {
        Value::String(s) => {
            if let Some(envelope) = parse(s) {
                out.insert(envelope.key_id);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| key_ids(v, out)),
        Value::Object(map) => map.values().for_each(|v| key_ids(v, out)),
        _ => {}
    }
}

/// Replace every sealed value in `value` by what `how` may see of it.
pub fn reveal(value: &mut Value, keys: &Keys, how: Reveal) {
    match value {
        Value::String(s) => {
            if let Some(shown) = reveal_text(s, keys, how) {
                *value = shown;
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| reveal(v, keys, how)),
        Value::Object(map) => map.values_mut().for_each(|v| reveal(v, keys, how)),
        _ => {}
    }
}

/// What `how` sees of `text`; `None` if it is not sealed.
pub fn reveal_text(text: &str, keys: &Keys, how: Reveal) -> Option<Value> {
    let envelope = parse(text)?;
    let shown = |s: &str| Some(Value::String(s.to_string()));
    match (how, envelope.kind) {
        (Reveal::Hidden, Kind::Personal) => shown(PERSONAL),
        (Reveal::Hidden | Reveal::View, Kind::Secret) => shown(REDACTED),
        (Reveal::Plain, _) | (Reveal::View, Kind::Personal) => match keys.get(&envelope.key_id) {
            None => shown(ERASED),
            Some(key) => Some(open(&envelope, key).unwrap_or_else(|_| UNREADABLE.into())),
        },
    }
}

/// Reveal a string field: an opened non-string value is written as JSON text.
pub fn reveal_string(text: &mut String, keys: &Keys, how: Reveal) {
    if let Some(shown) = reveal_text(text, keys, how) {
        *text = match shown {
            Value::String(s) => s,
            other => other.to_string(),
        };
    }
}
