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
mod tests;
