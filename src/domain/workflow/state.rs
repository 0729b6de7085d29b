//! The pieces of a workflow's folded state: its registered versions, the proposals
//! the learner made and how they were decided, and retirements. Read-only views; only
//! `apply` builds them.

use std::fmt;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::domain::ids::ProposalId;

use super::types::{ContentHash, Evidence, Version, VersionSource};

/// Who retired a version or a workflow (or paused a workflow), when and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retirement {
    pub by: String,
    pub reason: String,
    pub at: DateTime<Utc>,
}

impl fmt::Display for Retirement {
    /// `by alice at 2025-01-01 12:00:00 UTC: superseded`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "by {} at {}: {}", self.by, self.at, self.reason)
    }
}

/// One registered version: immutable once registered, except that it can be retired.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegisteredVersion {
    pub version: Version,
    /// The definition as JSON (the parsed workflow file).
    pub definition: Value,
    pub content_hash: ContentHash,
    pub source: VersionSource,
    /// Who submitted it (for a learned version: who approved it).
    pub registered_by: String,
    pub registered_at: DateTime<Utc>,
    pub retirement: Option<Retirement>,
}

impl RegisteredVersion {
    /// A retired version takes no new runs (runs already started finish).
    pub fn is_retired(&self) -> bool {
        self.retirement.is_some()
    }
}

/// Where a proposal is: waiting for a person, or decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ProposalStatus {
    Open,
    Approved,
    Rejected,
    Superseded,
}

impl ProposalStatus {
    pub const ALL: [ProposalStatus; 4] =
        [Self::Open, Self::Approved, Self::Rejected, Self::Superseded];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Open => "OPEN",
            Self::Approved => "APPROVED",
            Self::Rejected => "REJECTED",
            Self::Superseded => "SUPERSEDED",
        }
    }
}

impl fmt::Display for ProposalStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a person decided a proposal.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProposalDecision {
    /// It became `version`, with source learned.
    Approved {
        version: Version,
        /// Suggested to every scope.
        #[serde(default)]
        shared: bool,
        by: String,
        at: DateTime<Utc>,
    },
    Rejected {
        by: String,
        reason: String,
        at: DateTime<Utc>,
    },
    /// A newer proposal of the same scope replaced it.
    Superseded {
        by_proposal: ProposalId,
        at: DateTime<Utc>,
    },
}

impl ProposalDecision {
    pub fn status(&self) -> ProposalStatus {
        match self {
            Self::Approved { .. } => ProposalStatus::Approved,
            Self::Rejected { .. } => ProposalStatus::Rejected,
            Self::Superseded { .. } => ProposalStatus::Superseded,
        }
    }
}

impl fmt::Display for ProposalDecision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Approved {
                version,
                shared,
                by,
                at,
            } => {
                let shared = if *shared { " (shared)" } else { "" };
                write!(f, "approved as version {version}{shared} by {by} at {at}")
            }
            Self::Rejected { by, reason, at } => {
                write!(f, "rejected by {by} at {at}: {reason}")
            }
            Self::Superseded { by_proposal, at } => {
                write!(f, "superseded by proposal {by_proposal} at {at}")
            }
        }
    }
}

/// A workflow the learner proposed from history. Not runnable: approving it registers
/// a version.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Proposal {
    pub proposal_id: ProposalId,
    pub definition: Value,
    pub content_hash: ContentHash,
    /// From 0 to 1.
    pub confidence: f64,
    pub evidence: Evidence,
    /// Whose history it was learned from.
    #[serde(default)]
    pub scope: Option<String>,
    pub proposed_at: DateTime<Utc>,
    /// `None` while the proposal is open.
    pub decision: Option<ProposalDecision>,
}

impl Proposal {
    pub fn status(&self) -> ProposalStatus {
        self.decision
            .as_ref()
            .map_or(ProposalStatus::Open, ProposalDecision::status)
    }

    pub fn is_open(&self) -> bool {
        self.decision.is_none()
    }
}
