//! Identifiers, as newtypes so a task id can never be passed where a run id is meant.
//!
//! Run and task ids are UUID v7 (time-ordered, so streams created later sort later),
//! minted with `new()` at the edge (the CLI, the executor) and carried into the domain
//! by commands; `new()` is the only thing here that reads a clock, and `Default` does
//! not call it. Agent and workflow ids are names chosen by people, checked at the
//! boundary.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Why a string is not a valid name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IdError {
    #[error("{kind} must not be empty")]
    Empty { kind: &'static str },
    #[error("{kind} {value:?} is longer than {max} characters")]
    TooLong {
        kind: &'static str,
        value: String,
        max: usize,
    },
    #[error(
        "{kind} {value:?} may contain only letters, digits, '-', '_', '.', ':' and '/' (found {found:?})"
    )]
    BadCharacter {
        kind: &'static str,
        value: String,
        found: char,
    },
    #[error("{kind} may contain only visible ASCII characters (found {found:?})")]
    Invisible { kind: &'static str, found: char },
    #[error("{kind} {value:?} is not a UUID: {reason}")]
    NotUuid {
        kind: &'static str,
        value: String,
        reason: String,
    },
}

macro_rules! uuid_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(Uuid);

        impl $name {
            /// A new, time-ordered id (reads the clock: for the edge, not for `decide`).
            pub fn new() -> Self {
                Self(Uuid::now_v7())
            }
            pub fn from_uuid(uuid: Uuid) -> Self {
                Self(uuid)
            }
            pub fn as_uuid(&self) -> Uuid {
                self.0
            }
        }

        /// The nil id (all zeros), a placeholder that names no stream. It reads no clock,
        /// so code that must stay pure can fall back to it; fresh ids come from `new()`.
        impl Default for $name {
            fn default() -> Self {
                Self(Uuid::nil())
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Uuid::parse_str(s).map(Self).map_err(|e| IdError::NotUuid {
                    kind: $kind,
                    value: s.to_string(),
                    reason: e.to_string(),
                })
            }
        }
    };
}

macro_rules! name_id {
    ($(#[$doc:meta])* $name:ident, $kind:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;
            fn try_from(value: String) -> Result<Self, Self::Error> {
                check_name($kind, &value)?;
                Ok(Self(value))
            }
        }

        impl TryFrom<&str> for $name {
            type Error = IdError;
            fn try_from(value: &str) -> Result<Self, Self::Error> {
                Self::try_from(value.to_string())
            }
        }

        impl FromStr for $name {
            type Err = IdError;
            fn from_str(s: &str) -> Result<Self, Self::Err> {
                Self::try_from(s)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }
    };
}

/// Longest name accepted for a human-chosen id.
pub const MAX_NAME_LEN: usize = 128;

fn check_name(kind: &'static str, value: &str) -> Result<(), IdError> {
    if value.is_empty() {
        return Err(IdError::Empty { kind });
    }
    if value.chars().count() > MAX_NAME_LEN {
        return Err(IdError::TooLong {
            kind,
            value: value.to_string(),
            max: MAX_NAME_LEN,
        });
    }
    if let Some(found) = value
        .chars()
        .find(|c| !(c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | ':' | '/')))
    {
        return Err(IdError::BadCharacter {
            kind,
            value: value.to_string(),
            found,
        });
    }
    Ok(())
}

uuid_id!(
    /// One workflow run (the id of a `run` stream).
    RunId,
    "run id"
);
uuid_id!(
    /// One task on the board (the id of a `task` stream).
    TaskId,
    "task id"
);
uuid_id!(
    /// One human approval gate inside a run.
    GateId,
    "gate id"
);
uuid_id!(
    /// One question asked by an agent on a task.
    QuestionId,
    "question id"
);
uuid_id!(
    /// One learned workflow proposal inside a `workflow` stream.
    ProposalId,
    "proposal id"
);
uuid_id!(
    /// One question put to one of awl's own agents (the id of a `solve` stream).
    SolveId,
    "solve id"
);
name_id!(
    /// An agent's name (the id of an `agent` stream).
    AgentId,
    "agent id"
);
name_id!(
    /// A workflow's name (the id of a `workflow` stream); its versions live inside it.
    WorkflowName,
    "workflow name"
);
name_id!(
    /// A step's id inside a workflow definition.
    StepId,
    "step id"
);

/// A caller's idempotency key (the `Idempotency-Key` header, an MCP argument): 1 to
/// 255 visible ASCII characters. The same key from the same caller names the same
/// thing, so a request repeated after a lost answer finds what the first one made.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct IdempotencyKey(String);

/// Longest idempotency key accepted.
pub const MAX_IDEMPOTENCY_KEY_LEN: usize = 255;

impl IdempotencyKey {
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id this key names for `actor` among the ids of `namespace` (UUID v5 of
    /// both): a second request with the same key finds the first one's stream.
    pub fn derive(&self, namespace: &Uuid, actor: &str) -> Uuid {
        Uuid::new_v5(namespace, format!("{actor}\n{}", self.0).as_bytes())
    }
}

impl fmt::Display for IdempotencyKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl TryFrom<&str> for IdempotencyKey {
    type Error = IdError;
    fn try_from(value: &str) -> Result<Self, Self::Error> {
        const KIND: &str = "idempotency key";
        if value.is_empty() {
            return Err(IdError::Empty { kind: KIND });
        }
        if value.len() > MAX_IDEMPOTENCY_KEY_LEN {
            return Err(IdError::TooLong {
                kind: KIND,
                value: value.chars().take(32).collect::<String>() + "...",
                max: MAX_IDEMPOTENCY_KEY_LEN,
            });
        }
        if let Some(found) = value.chars().find(|c| !c.is_ascii_graphic() && *c != ' ') {
            return Err(IdError::Invisible { kind: KIND, found });
        }
        Ok(Self(value.to_string()))
    }
}

#[cfg(test)]
mod tests;
