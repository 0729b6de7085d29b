//! Reading a run's events, whether read from the store ([`RecordedEvent`]) or printed
//! by `awl events --json` (one JSON object per event).

use awl::log::RecordedEvent;
use serde_json::Value;

/// What the tests read of a logged event.
pub trait LoggedEvent {
    fn event_type(&self) -> &str;
    fn payload(&self) -> &Value;
    fn position(&self) -> i64;
}

impl LoggedEvent for RecordedEvent {
    fn event_type(&self) -> &str {
        &self.event_type
    }

    fn payload(&self) -> &Value {
        &self.payload
    }

    fn position(&self) -> i64 {
        self.position
    }
}

/// A line of `awl events --json`.
impl LoggedEvent for Value {
    fn event_type(&self) -> &str {
        self["event_type"].as_str().unwrap_or_default()
    }

    fn payload(&self) -> &Value {
        &self["payload"]
    }

    fn position(&self) -> i64 {
        self["position"]
            .as_i64()
            .unwrap_or_else(|| panic!("an event without a position: {self}"))
    }
}

/// The payloads of the events of type `ty`, in log order.
pub fn of_type<'a, E: LoggedEvent>(
    events: &'a [E],
    ty: &'a str,
) -> impl Iterator<Item = &'a Value> + 'a {
    events
        .iter()
        .filter(move |e| e.event_type() == ty)
        .map(LoggedEvent::payload)
}

/// The payloads of the events of type `ty` about step `step`, in log order.
pub fn for_step<'a, E: LoggedEvent>(
    events: &'a [E],
    ty: &'a str,
    step: &'a str,
) -> impl Iterator<Item = &'a Value> + 'a {
    of_type(events, ty).filter(move |p| p["step_id"] == step)
}

/// The types of `events`, in order, keeping only those in `kinds`.
pub fn types_of<'a, E: LoggedEvent>(events: &'a [E], kinds: &[&str]) -> Vec<&'a str> {
    events
        .iter()
        .map(LoggedEvent::event_type)
        .filter(|t| kinds.contains(t))
        .collect()
}

/// The log position of the first event of type `ty`.
pub fn first_position<E: LoggedEvent>(events: &[E], ty: &str) -> i64 {
    events
        .iter()
        .find(|e| e.event_type() == ty)
        .unwrap_or_else(|| panic!("no {ty} event"))
        .position()
}

/// The log position of the first event of type `ty` about step `step`.
pub fn position_of<E: LoggedEvent>(events: &[E], ty: &str, step: &str) -> i64 {
    events
        .iter()
        .find(|e| e.event_type() == ty && e.payload()["step_id"] == step)
        .unwrap_or_else(|| panic!("no {ty} event for `{step}`"))
        .position()
}
