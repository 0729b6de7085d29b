//! A new event's payload as the JSON text the log stores.
//!
//! Events are written as text (Postgres' `jsonb` input, SQLite's `TEXT`), so a payload
//! held as a `serde_json::Value` until the append costs a copy of everything in it
//! (a step's whole output, say), a second walk to write it out, and a tree to free
//! after the commit. [`Payload::of_tagged`] writes a domain event straight to text
//! instead and keeps the inner object: nothing in between. A payload made from a
//! `Value` ([`Payload::from_value`]) is written out once, when it is made.
//!
//! The text is always one JSON value: it is only ever made by `serde_json`.

use std::fmt;

use serde::Serialize;
use serde_json::Value;

/// One JSON value as text, written by `serde_json`.
#[derive(Clone)]
pub struct Payload {
    json: String,
}

impl Payload {
    /// `value` written out.
    pub fn from_value(value: &Value) -> Self {
        Self {
            json: value.to_string(),
        }
    }

    /// An externally tagged event (`{"tag": {...}}`, as serde writes an enum's
    /// variant) written out, without its tag: the inner value. `None` when the event
    /// is not written as `{"tag": ...}` with exactly that tag (its caller then takes
    /// the slow way, through a `Value`, which says what is wrong).
    pub fn of_tagged<E: Serialize + ?Sized>(
        event: &E,
        tag: &str,
    ) -> Result<Option<Self>, serde_json::Error> {
        let mut json = serde_json::to_string(event)?;
        // serde_json writes `{"` then the tag (escaped) then `":`, the inner value,
        // and `}`; a tag that needs no escaping is written as it is.
        let plain = !tag.chars().any(|c| c == '"' || c == '\\' || c.is_control());
        let head = tag.len() + 4;
        let tagged = plain
            && json.len() > head
            && json.starts_with("{\"")
            && json[2..].starts_with(tag)
            && json[2 + tag.len()..].starts_with("\":")
            && json.ends_with('}');
        if !tagged {
            return Ok(None);
        }
        json.truncate(json.len() - 1);
        json.drain(..head);
        Ok(Some(Self { json }))
    }

    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.json
    }

    /// The payload read back as a `Value` (fails only past serde_json's nesting
    /// limit, which writing has none of).
    pub fn to_value(&self) -> Result<Value, serde_json::Error> {
        serde_json::from_str(&self.json)
    }
}

impl fmt::Debug for Payload {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.json)
    }
}

/// Two payloads are equal when they hold the same JSON value, whatever the order
/// of their objects' keys.
impl PartialEq for Payload {
    fn eq(&self, other: &Self) -> bool {
        self.json == other.json
            || match (self.to_value(), other.to_value()) {
                (Ok(a), Ok(b)) => a == b,
                _ => false,
            }
    }
}

impl PartialEq<Value> for Payload {
    fn eq(&self, other: &Value) -> bool {
        self.to_value().is_ok_and(|v| v == *other)
    }
}

#[cfg(test)]
mod tests {
    use serde::Serialize;
    use serde_json::json;

    use super::*;

    #[derive(Serialize)]
    enum Event {
        #[serde(rename = "thing.done")]
        Done { output: Value, n: u32 },
        #[serde(rename = "thing.bare")]
        Bare,
    }

    #[test]
    fn a_tagged_event_keeps_its_inner_object() {
        let event = Event::Done {
            output: json!({"body": "a \"quoted\" }", "list": [1, 2]}),
            n: 3,
        };
        let payload = Payload::of_tagged(&event, "thing.done").unwrap().unwrap();
        assert_eq!(
            payload.to_value().unwrap(),
            json!({"output": {"body": "a \"quoted\" }", "list": [1, 2]}, "n": 3})
        );
        assert!(payload.as_str().starts_with("{\"output\""));
    }

    #[test]
    fn another_tag_or_shape_is_not_taken_apart() {
        let event = Event::Done {
            output: Value::Null,
            n: 1,
        };
        assert!(Payload::of_tagged(&event, "thing.dont").unwrap().is_none());
        assert!(Payload::of_tagged(&event, "thing").unwrap().is_none());
        assert!(
            Payload::of_tagged(&event, "thing.\"done")
                .unwrap()
                .is_none()
        );
        // A unit variant is written as a bare string.
        assert!(
            Payload::of_tagged(&Event::Bare, "thing.bare")
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn equal_when_the_values_are_whatever_the_key_order() {
        let a = Payload::from_value(&json!({"a": 1, "b": 2}));
        let b = Payload {
            json: r#"{"b":2,"a":1}"#.into(),
        };
        assert_eq!(a, b);
        assert_eq!(a, json!({"b": 2, "a": 1}));
        assert_ne!(a, Payload::from_value(&json!({"a": 1})));
    }
}
