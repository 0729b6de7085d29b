//! The log's vocabulary: what an event is before and after it is stored.
//!
//! These types are shared by both stores, the cqrs-es repository, the executor, the
//! projections, the board and the interfaces. They carry no behaviour beyond
//! validation and (de)serialisation.

mod event;
mod payload;
mod upcast;

pub use event::*;
pub use payload::Payload;
pub use upcast::{UpcastError, Upcaster, Upcasters};

/// The type of an event that carries its stream's whole state (a run's continuation:
/// `run.continued`). Readers of a stream's *state* start at the last one; readers of
/// its *history* (the audit trail, replay, `awl check`) read every event.
pub const CONTINUED_EVENT_TYPE: &str = "run.continued";
