//! The log's vocabulary: what an event is before and after it is stored.
//!
//! These types are shared by both stores, the cqrs-es repository, the executor, the
//! projections, the board and the interfaces. They carry no behaviour beyond
//! validation and (de)serialisation.

mod event;
mod upcast;

pub use event::*;
pub use upcast::{UpcastError, Upcaster, Upcasters};
