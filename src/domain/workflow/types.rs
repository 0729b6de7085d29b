//! The values a `workflow` stream records: version numbers, content hashes, where a
//! version came from and the evidence behind a learned proposal. They are part of the
//! wire format, and the first two are checked when they are built, so a command can
//! never carry a malformed version or hash.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::domain::ids::{ProposalId, RunId};

/// A workflow version: `MAJOR.MINOR.PATCH`, three numbers without leading zeros.
///
/// Ordered by precedence (`1.10.0` > `1.9.3`), which is what "latest" means. Only the
/// strict form is accepted, so two strings with the same precedence are the same
/// string (`1.0` or `01.0.0` would not be). Pre-release and build suffixes are refused
/// for now; accepting more later keeps every stored version valid.
///
/// On the wire a string: `"1.2.0"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Version {
    major: u64,
    minor: u64,
    patch: u64,
}

impl Version {
    pub const fn new(major: u64, minor: u64, patch: u64) -> Self {
        Self {
            major,
            minor,
            patch,
        }
    }

    pub fn major(&self) -> u64 {
        self.major
    }

    pub fn minor(&self) -> u64 {
        self.minor
    }

    pub fn patch(&self) -> u64 {
        self.patch
    }
}

/// Why a string is not a [`Version`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("workflow version {value:?} is not MAJOR.MINOR.PATCH (e.g. 1.2.0): {reason}")]
pub struct InvalidVersion {
    pub value: String,
    pub reason: String,
}

impl FromStr for Version {
    type Err = InvalidVersion;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let invalid = |reason: String| InvalidVersion {
            value: s.to_string(),
            reason,
        };
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() != 3 {
            return Err(invalid(format!(
                "it has {} dot-separated part{}, not 3",
                parts.len(),
                if parts.len() == 1 { "" } else { "s" }
            )));
        }
        let mut numbers = [0u64; 3];
        for ((part, name), number) in parts
            .iter()
            .zip(["major", "minor", "patch"])
            .zip(numbers.iter_mut())
        {
            if part.is_empty() {
                return Err(invalid(format!("the {name} number is empty")));
            }
            if let Some(found) = part.chars().find(|c| !c.is_ascii_digit()) {
                return Err(invalid(format!(
                    "the {name} number {part:?} contains {found:?} (only digits are allowed)"
                )));
            }
            if part.len() > 1 && part.starts_with('0') {
                return Err(invalid(format!(
                    "the {name} number {part:?} has a leading zero"
                )));
            }
            *number = part
                .parse()
                .map_err(|_| invalid(format!("the {name} number {part:?} is too large")))?;
        }
        let [major, minor, patch] = numbers;
        Ok(Self::new(major, minor, patch))
    }
}

impl TryFrom<String> for Version {
    type Error = InvalidVersion;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl TryFrom<&str> for Version {
    type Error = InvalidVersion;
    fn try_from(value: &str) -> Result<Self, Self::Error> {
        value.parse()
    }
}

impl From<Version> for String {
    fn from(version: Version) -> String {
        version.to_string()
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

/// The SHA-256 of a definition, as 64 hexadecimal digits (computed at the edge, where
/// the file is read; the domain only compares hashes).
///
/// Upper-case digits are accepted and stored in lower case, so one hash has one
/// spelling. On the wire a string.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct ContentHash(String);

/// The length of a SHA-256 digest in hexadecimal digits.
pub const CONTENT_HASH_LEN: usize = 64;

impl ContentHash {
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Why a string is not a [`ContentHash`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("content hash {value:?} is not a SHA-256 in hexadecimal: {reason}")]
pub struct InvalidContentHash {
    pub value: String,
    pub reason: String,
}

impl TryFrom<String> for ContentHash {
    type Error = InvalidContentHash;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        let len = value.chars().count();
        let reason = if len != CONTENT_HASH_LEN {
            Some(format!("it has {len} characters, not {CONTENT_HASH_LEN}"))
        } else {
            value
                .chars()
                .find(|c| !c.is_ascii_hexdigit())
                .map(|found| format!("{found:?} is not a hexadecimal digit"))
        };
        match reason {
            Some(reason) => Err(InvalidContentHash { value, reason }),
            None => Ok(Self(value.to_ascii_lowercase())),
        }
    }
}

impl TryFrom<&str> for ContentHash {
    type Error = InvalidContentHash;
    fn try_from(value: &str) -> Result<Self, Self::Error> {
        Self::try_from(value.to_string())
    }
}

impl FromStr for ContentHash {
    type Err = InvalidContentHash;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::try_from(s)
    }
}

impl From<ContentHash> for String {
    fn from(hash: ContentHash) -> String {
        hash.0
    }
}

impl fmt::Display for ContentHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Where a registered version came from.
///
/// On the wire an object tagged by `kind`: `{"kind": "user_submitted"}` or
/// `{"kind": "learned", "proposal_id": "..."}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum VersionSource {
    /// A person submitted it (a workflow file). These take priority over learned ones.
    UserSubmitted,
    /// A person approved this learned proposal.
    Learned { proposal_id: ProposalId },
}

impl VersionSource {
    pub fn is_learned(&self) -> bool {
        matches!(self, Self::Learned { .. })
    }
}

impl fmt::Display for VersionSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::UserSubmitted => f.write_str("user-submitted"),
            Self::Learned { proposal_id } => write!(f, "learned (proposal {proposal_id})"),
        }
    }
}

/// What the learner saw that made it propose a workflow.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Evidence {
    /// Executions of the pattern that succeeded (at most `executions`).
    pub successes: u32,
    /// Executions of the pattern seen in the log (at least one).
    pub executions: u32,
    /// Runs in which the pattern was seen, as examples.
    pub example_runs: Vec<RunId>,
    /// The tool names of the pattern, in order.
    pub tool_sequence: Vec<String>,
    /// Sessions (`task:ID`, `run:ID`) in which it succeeded, as examples.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sessions: Vec<String>,
    /// How long a successful execution took by hand, on average.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_ms: Option<u64>,
}
