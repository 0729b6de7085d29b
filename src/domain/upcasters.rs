//! Every upcaster the domain registers, in one list the stores are opened with.

use crate::log::Upcasters;

/// The upcasters for all of awl's events.
pub fn all() -> Upcasters {
    Upcasters::new(vec![crate::domain::agent::REGISTERED_V1_TO_V2])
}
