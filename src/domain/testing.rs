//! What the tests of every aggregate share: a fixed clock, the fold of a stream, the
//! given / when / then table runner, and the check of the permanent event format.
//!
//! Each aggregate's tests implement [`Stream`] for its event type, which ties the event
//! to its aggregate (so the helpers below infer the aggregate from the events they are
//! given) and numbers the event's variants.

use std::collections::BTreeSet;
use std::fmt::Debug;

use chrono::{DateTime, Duration, TimeZone, Utc};
use cqrs_es::{Aggregate, DomainEvent};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::domain::Decide;

/// An event type, as the tests see it.
pub(crate) trait Stream:
    DomainEvent + Serialize + DeserializeOwned + PartialEq + Debug + Clone
{
    /// The aggregate whose stream holds these events.
    type Of: Decide<Event = Self>;

    /// How many variants the event type has.
    const VARIANTS: usize;

    /// The variant of `self`, from 0 to `VARIANTS - 1`. Written as an exhaustive match,
    /// so that a new variant does not compile until the tests know it.
    fn variant(&self) -> usize;

    /// When the event happened.
    fn time(&self) -> DateTime<Utc>;
}

/// What a command must do: emit these events, or be refused with this error.
pub(crate) type Then<E> = Result<Vec<E>, <<E as Stream>::Of as Aggregate>::Error>;

/// One row of a given / when / then table: its name, the stream so far, the command,
/// and what it must do.
pub(crate) type Case<E> = (
    String,
    Vec<E>,
    <<E as Stream>::Of as Aggregate>::Command,
    Then<E>,
);

/// `s` seconds after a fixed instant.
pub(crate) fn t(s: i64) -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2025, 1, 1, 12, 0, 0).unwrap() + Duration::seconds(s)
}

/// The state folded from `events`, as a stream is loaded.
pub(crate) fn fold<E: Stream>(events: impl IntoIterator<Item = E>) -> E::Of {
    let mut aggregate = E::Of::default();
    for event in events {
        aggregate.apply(event);
    }
    aggregate
}

/// `events` followed by `more`.
pub(crate) fn then<E>(mut events: Vec<E>, more: impl IntoIterator<Item = E>) -> Vec<E> {
    events.extend(more);
    events
}

/// Fold `given` events into a fresh aggregate and decide `when`.
pub(crate) fn given_when<A: Decide>(
    given: impl IntoIterator<Item = A::Event>,
    when: A::Command,
) -> Result<Vec<A::Event>, A::Error> {
    let mut aggregate = A::default();
    for event in given {
        aggregate.apply(event);
    }
    aggregate.decide(when)
}

pub(crate) fn case<E: Stream>(
    name: &str,
    given: Vec<E>,
    when: <E::Of as Aggregate>::Command,
    then: Then<E>,
) -> Case<E> {
    (name.to_string(), given, when, then)
}

/// Check every case, naming the one that fails, and return how many there were.
pub(crate) fn check<E: Stream>(cases: Vec<Case<E>>) -> usize
where
    <E::Of as Aggregate>::Error: PartialEq + Debug,
{
    assert!(!cases.is_empty());
    let count = cases.len();
    for (name, given, when, then) in cases {
        assert_eq!(given_when::<E::Of>(given, when), then, "case: {name}");
    }
    count
}

/// The permanent wire format of `events`, which hold an instance of every variant: each
/// event is one object `{type: payload}` whose key is its `event_type()`, a dotted,
/// snake-case name under the stream type (`task.queued`) that no other variant uses; the
/// payload is an object carrying the event's time as `at`; the schema version is
/// `version(event)`; and the JSON reads back as the same event.
pub(crate) fn assert_wire_format<E: Stream>(events: Vec<E>, version: impl Fn(&E) -> &'static str) {
    let covered: BTreeSet<usize> = events.iter().map(E::variant).collect();
    assert_eq!(
        covered,
        (0..E::VARIANTS).collect(),
        "every variant has an instance"
    );
    let prefix = format!("{}.", <E::Of as Aggregate>::TYPE);
    let mut types = BTreeSet::new();
    for event in events {
        let value = serde_json::to_value(&event).unwrap();
        let object = value.as_object().unwrap();
        assert_eq!(object.len(), 1, "{value}");
        let (tag, payload) = object.iter().next().unwrap();
        assert_eq!(tag, &event.event_type());
        let name = tag.strip_prefix(&prefix).unwrap_or_else(|| panic!("{tag}"));
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
            "{tag} is snake case"
        );
        assert!(payload.is_object(), "{tag}: the payload is an object");
        assert_eq!(
            payload.get("at"),
            Some(&serde_json::to_value(event.time()).unwrap()),
            "{tag} carries its time"
        );
        assert_eq!(event.event_version(), version(&event), "{tag}");
        assert_eq!(serde_json::from_value::<E>(value).unwrap(), event);
        types.insert((event.variant(), event.event_type()));
    }
    let names: BTreeSet<&String> = types.iter().map(|(_, name)| name).collect();
    assert_eq!(types.len(), E::VARIANTS, "one event type per variant");
    assert_eq!(names.len(), E::VARIANTS, "event types are distinct");
}
