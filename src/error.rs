//! How every interface answers a failure the same way.
//!
//! Each error of a service or store ([`crate::board::BoardError`],
//! [`crate::runs::RunsError`], [`crate::store::StoreError`], ...) says what *kind* of failure it is and gives a stable, machine-readable
//! code. REST maps the kind to an HTTP status, MCP returns a tool error with the same
//! code, the CLI prints the message. No interface reads an error's text to decide what
//! it was: a new variant must choose its kind here, where the compiler sees it.

/// What kind of failure an error is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// The thing named does not exist (HTTP 404).
    NotFound,
    /// A value is malformed or out of range; nothing was recorded (HTTP 422).
    Invalid,
    /// The caller may not do this (HTTP 403).
    Forbidden,
    /// The request does not prove who sent it: a missing, forged or stale
    /// signature (HTTP 401).
    Unauthenticated,
    /// Not allowed in the current state; nothing was recorded (HTTP 409).
    Conflict,
    /// Not now: other writers kept winning, or the service is stopping; try again
    /// (HTTP 503).
    Unavailable,
    /// A fault of awl or of its store (HTTP 500).
    Internal,
}

/// An error that knows its kind and its stable code.
pub trait Classified: std::error::Error {
    fn kind(&self) -> ErrorKind;
    /// Stable across releases: clients branch on it (`task_not_found`,
    /// `illegal_transition`, ...).
    fn code(&self) -> &'static str;
}
