//! Loading old events as the current schema: upcasters.
//!
//! Events are a permanent wire format. When an event's payload shape changes, its
//! schema version goes up by one and an [`Upcaster`] is registered that turns a payload
//! of the old version into the next one. Loading applies the chain until the payload
//! is current, so code only ever sees the newest shape; the stored row is never
//! rewritten.

use serde_json::Value;

/// Turns one event type's payload from `from_version` into `from_version + 1`.
#[derive(Clone, Copy)]
pub struct Upcaster {
    pub event_type: &'static str,
    pub from_version: i32,
    pub upcast: fn(Value) -> Result<Value, String>,
}

impl std::fmt::Debug for Upcaster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Upcaster")
            .field("event_type", &self.event_type)
            .field("from_version", &self.from_version)
            .finish()
    }
}

/// Why an old payload could not be brought up to date.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cannot upcast {event_type} from schema version {from_version}: {reason}")]
pub struct UpcastError {
    pub event_type: String,
    pub from_version: i32,
    pub reason: String,
}

/// The registered upcasters, applied in chains.
#[derive(Debug, Clone, Default)]
pub struct Upcasters {
    list: Vec<Upcaster>,
}

impl Upcasters {
    pub fn new(list: Vec<Upcaster>) -> Self {
        Self { list }
    }

    /// Bring `payload` of `event_type` at `version` to the newest version known here.
    /// Returns the version reached and the payload in that shape.
    pub fn upcast(
        &self,
        event_type: &str,
        mut version: i32,
        mut payload: Value,
    ) -> Result<(i32, Value), UpcastError> {
        while let Some(step) = self
            .list
            .iter()
            .find(|u| u.event_type == event_type && u.from_version == version)
        {
            payload = (step.upcast)(payload).map_err(|reason| UpcastError {
                event_type: event_type.to_string(),
                from_version: version,
                reason,
            })?;
            version += 1;
        }
        Ok((version, payload))
    }

    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn v1_to_v2(mut v: Value) -> Result<Value, String> {
        let name = v["name"].take();
        Ok(json!({ "full_name": name }))
    }

    fn v2_to_v3(v: Value) -> Result<Value, String> {
        match v.get("full_name") {
            Some(Value::String(s)) => Ok(json!({ "full_name": s, "nickname": null })),
            _ => Err("full_name is missing".into()),
        }
    }

    fn chain() -> Upcasters {
        Upcasters::new(vec![
            Upcaster {
                event_type: "person.named",
                from_version: 1,
                upcast: v1_to_v2,
            },
            Upcaster {
                event_type: "person.named",
                from_version: 2,
                upcast: v2_to_v3,
            },
        ])
    }

    #[test]
    fn applies_the_whole_chain() {
        let (version, payload) = chain()
            .upcast("person.named", 1, json!({"name": "Ada"}))
            .unwrap();
        assert_eq!(version, 3);
        assert_eq!(payload, json!({"full_name": "Ada", "nickname": null}));
    }

    #[test]
    fn leaves_current_and_unknown_events_alone() {
        let p = json!({"x": 1});
        assert_eq!(
            chain().upcast("person.named", 3, p.clone()).unwrap(),
            (3, p.clone())
        );
        assert_eq!(chain().upcast("other", 1, p.clone()).unwrap(), (1, p));
    }

    #[test]
    fn a_failing_step_names_the_event_and_version() {
        let err = chain()
            .upcast("person.named", 2, json!({"oops": true}))
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot upcast person.named from schema version 2: full_name is missing"
        );
    }
}
