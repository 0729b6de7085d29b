//! Keeping secrets and personal data out of what awl records and shows.
//!
//! The log is append-only and read by many (views, live streams, the events API,
//! agents). Two kinds of value must not sit in it in clear:
//!
//! - **secrets** (inputs declared `secret: true`, env variables a worker is told are
//!   secret, awl's own connection strings): a secret input is stored *sealed* (it is
//!   needed again when a run is replayed) and every other place it could surface (a
//!   step's output or error, a gate's message, a task's prompt, the run's outputs, a
//!   span) gets it *masked*, replaced by [`REDACTED`], as CI systems mask their
//!   secrets in build logs;
//! - **personal data** (inputs declared `personal: true`): sealed under a key of the
//!   run's *subject* (the workflow's `subject:` template, say a customer id), and so is
//!   every later string of the run that contains it. `awl forget SUBJECT` deletes that
//!   key: the history stays as it was written, and every reader now sees [`ERASED`]
//!   (crypto-shredding), without rewriting one event.
//!
//! A sealed value is a string (`awl:sealed:v1:KIND:KEY:DATA`), so it fits every field
//! that holds text. Sealing is deterministic (the nonce is derived from the key and the
//! plaintext, as in SIV modes), which keeps the engine pure: the same decision sealed
//! twice is the same event, and two different plaintexts never share a nonce.
//!
//! This module is pure: [`mask`] (replacing known values), [`seal`] (the envelope and
//! its cipher), [`protect`] (a run's policy: what the engine masks and seals before an
//! event is recorded) and [`reveal`] (what a reader sees of a sealed value). Keys live
//! beside the log (`store::keyring`), never in it.

pub mod mask;
pub mod protect;
pub mod reveal;
pub mod seal;
#[cfg(test)]
mod tests;

pub use mask::Mask;
pub use protect::{Personal, Protection};
pub use reveal::{Keys, Reveal, key_ids, reveal, reveal_string};
pub use seal::{KeyId, Kind, SealError, SubjectKey, is_sealed, open, parse, seal};

/// What a masked secret reads as, wherever it would have appeared.
pub const REDACTED: &str = "[redacted]";
/// What personal data reads as once its subject was forgotten.
pub const ERASED: &str = "[erased]";
/// A sealed value whose key is there but which does not open (tampered with).
pub const UNREADABLE: &str = "[unreadable]";
