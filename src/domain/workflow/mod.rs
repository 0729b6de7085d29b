//! The `workflow` stream: one workflow name, its versions and the learner's proposals.
//!
//! A version is registered when a user submits a definition (the YAML loader does, at
//! start-up and on change), or when a person approves a workflow the learner proposed
//! from history. Versions are immutable: registering the same version with the same
//! content hash again records nothing (so the loader can register every file every time
//! it starts), and with another hash is refused. A proposal is not runnable; approving
//! it registers a version whose source is "learned".
//!
//! What runs: a version that is registered and not retired, of a workflow that is not
//! retired ([`WorkflowDefinition::runnable`]). When a run names no version,
//! [`WorkflowDefinition::latest_runnable`] picks the highest runnable user-submitted
//! version, and only when there is none the highest runnable learned one (user-submitted
//! workflows take priority over learned ones, DESIGN.md 7). Retiring stops new runs;
//! runs already started finish.
//!
//! Decisions recorded here (each has a test):
//! - Retiring is refused when already retired (a version, or the workflow): a second
//!   retirement would silently lose who retired it and why. Re-registering a retired
//!   version with the same hash is still a no-op and does not bring it back.
//! - A retired workflow is retired for good: it takes no new versions, proposals,
//!   approvals or version retirements. Open proposals can still be rejected, to clear
//!   the approval inbox.
//! - Proposing is idempotent per proposal id (same hash: nothing recorded, whether the
//!   proposal is open, approved or rejected), so a learner that re-reads history does
//!   not reopen what a person already decided.
//! - Versions are `MAJOR.MINOR.PATCH` ([`Version`]); "latest" is by precedence, not by
//!   registration order, so a back-ported 1.4.1 registered after 2.0.0 is not latest.
//!
//! Every rule lives in [`WorkflowDefinition::decide`](crate::domain::Decide::decide)
//! (`decide.rs`); `apply` only records what happened.

mod commands;
mod decide;
mod error;
mod events;
mod state;
#[cfg(test)]
mod tests;
mod types;

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::domain::ids::{ProposalId, WorkflowName};

pub use commands::{WorkflowAction, WorkflowCommand};
pub use error::{NotRunnable, WorkflowError};
pub use events::{SCHEMA_VERSION, WorkflowEvent};
pub use state::{Proposal, ProposalDecision, ProposalStatus, RegisteredVersion, Retirement};
pub use types::{
    CONTENT_HASH_LEN, ContentHash, Evidence, InvalidContentHash, InvalidVersion, Version,
    VersionSource,
};

/// One workflow: the state folded from its stream.
///
/// Fields are private so the state only changes through `apply`; read it through the
/// accessors.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct WorkflowDefinition {
    name: Option<WorkflowName>,
    /// Ordered by precedence, lowest first.
    versions: BTreeMap<Version, RegisteredVersion>,
    proposals: BTreeMap<ProposalId, Proposal>,
    retirement: Option<Retirement>,
    /// Who paused the whole workflow, while it is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    paused: Option<Retirement>,
    created_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
}

impl WorkflowDefinition {
    /// The workflow's name, once a version was registered or a workflow proposed.
    pub fn name(&self) -> Option<&WorkflowName> {
        self.name.as_ref()
    }

    /// Whether anything was recorded on this stream.
    pub fn exists(&self) -> bool {
        self.name.is_some()
    }

    /// Every registered version (retired ones too), lowest first.
    pub fn versions(&self) -> impl DoubleEndedIterator<Item = &RegisteredVersion> {
        self.versions.values()
    }

    /// One registered version: its definition, hash, source and retirement.
    pub fn version(&self, version: &Version) -> Option<&RegisteredVersion> {
        self.versions.get(version)
    }

    /// The version a new run uses when it names none: the highest runnable
    /// user-submitted version, else the highest runnable learned one. `None` when the
    /// workflow is retired or nothing is runnable.
    pub fn latest_runnable(&self) -> Option<&RegisteredVersion> {
        if self.is_retired() {
            return None;
        }
        let runnable = || self.versions.values().rev().filter(|v| !v.is_retired());
        runnable()
            .find(|v| !v.source.is_learned())
            .or_else(|| runnable().next())
    }

    /// `version`, if a new run may start it; otherwise why not.
    pub fn runnable(&self, version: &Version) -> Result<&RegisteredVersion, NotRunnable> {
        let Some(workflow) = &self.name else {
            return Err(NotRunnable::NotFound);
        };
        if let Some(retirement) = &self.retirement {
            return Err(NotRunnable::WorkflowRetired {
                workflow: workflow.clone(),
                retirement: retirement.clone(),
            });
        }
        let Some(registered) = self.versions.get(version) else {
            return Err(NotRunnable::UnknownVersion {
                workflow: workflow.clone(),
                version: *version,
            });
        };
        if let Some(retirement) = &registered.retirement {
            return Err(NotRunnable::VersionRetired {
                workflow: workflow.clone(),
                version: *version,
                retirement: retirement.clone(),
            });
        }
        Ok(registered)
    }

    /// Every proposal, decided or not, by id.
    pub fn proposals(&self) -> impl Iterator<Item = &Proposal> {
        self.proposals.values()
    }

    pub fn proposal(&self, proposal_id: &ProposalId) -> Option<&Proposal> {
        self.proposals.get(proposal_id)
    }

    /// The proposals waiting for a person, by id.
    pub fn open_proposals(&self) -> impl Iterator<Item = &Proposal> {
        self.proposals.values().filter(|p| p.is_open())
    }

    /// The whole workflow was retired: no new runs, versions or proposals.
    pub fn is_retired(&self) -> bool {
        self.retirement.is_some()
    }

    /// Who retired the workflow, when and why.
    pub fn retirement(&self) -> Option<&Retirement> {
        self.retirement.as_ref()
    }

    /// Who paused the whole workflow, when and why, while it is paused: its runs
    /// start no step and new runs start paused.
    pub fn paused(&self) -> Option<&Retirement> {
        self.paused.as_ref()
    }

    /// The time of the first event.
    pub fn created_at(&self) -> Option<DateTime<Utc>> {
        self.created_at
    }

    /// The time of the last event.
    pub fn updated_at(&self) -> Option<DateTime<Utc>> {
        self.updated_at
    }

    /// The first event names the stream's workflow; later ones were checked against it.
    fn name_from(&mut self, workflow: WorkflowName, at: DateTime<Utc>) {
        if self.name.is_none() {
            self.name = Some(workflow);
            self.created_at = Some(at);
        }
    }
}

crate::domain::impl_aggregate!(
    WorkflowDefinition,
    "workflow",
    WorkflowCommand,
    WorkflowEvent,
    WorkflowError
);

impl WorkflowDefinition {
    /// Fold one event into the state (`Aggregate::apply`): it records what happened and
    /// never fails, since `decide` already refused whatever was not allowed.
    fn apply_event(&mut self, event: WorkflowEvent) {
        self.updated_at = Some(event.at());
        match event {
            WorkflowEvent::VersionRegistered {
                workflow,
                version,
                definition,
                content_hash,
                source,
                by,
                at,
            } => {
                self.name_from(workflow, at);
                self.versions.insert(
                    version,
                    RegisteredVersion {
                        version,
                        definition,
                        content_hash,
                        source,
                        registered_by: by,
                        registered_at: at,
                        retirement: None,
                    },
                );
            }
            WorkflowEvent::Proposed {
                workflow,
                proposal_id,
                definition,
                content_hash,
                confidence,
                evidence,
                scope,
                at,
            } => {
                self.name_from(workflow, at);
                self.proposals.insert(
                    proposal_id,
                    Proposal {
                        proposal_id,
                        definition,
                        content_hash,
                        confidence,
                        evidence,
                        scope,
                        proposed_at: at,
                        decision: None,
                    },
                );
            }
            WorkflowEvent::ProposalApproved {
                proposal_id,
                version,
                shared,
                by,
                at,
            } => {
                if let Some(proposal) = self.proposals.get_mut(&proposal_id) {
                    proposal.decision = Some(ProposalDecision::Approved {
                        version,
                        shared,
                        by,
                        at,
                    });
                }
            }
            WorkflowEvent::ProposalSuperseded {
                proposal_id,
                superseded_by,
                at,
            } => {
                if let Some(proposal) = self.proposals.get_mut(&proposal_id) {
                    proposal.decision = Some(ProposalDecision::Superseded {
                        by_proposal: superseded_by,
                        at,
                    });
                }
            }
            WorkflowEvent::ProposalRejected {
                proposal_id,
                by,
                reason,
                at,
            } => {
                if let Some(proposal) = self.proposals.get_mut(&proposal_id) {
                    proposal.decision = Some(ProposalDecision::Rejected { by, reason, at });
                }
            }
            WorkflowEvent::VersionRetired {
                version,
                by,
                reason,
                at,
            } => {
                if let Some(registered) = self.versions.get_mut(&version) {
                    registered.retirement = Some(Retirement { by, reason, at });
                }
            }
            WorkflowEvent::Retired { by, reason, at } => {
                self.retirement = Some(Retirement { by, reason, at });
            }
            WorkflowEvent::Paused { by, reason, at } => {
                self.paused = Some(Retirement { by, reason, at });
            }
            WorkflowEvent::Resumed { .. } => self.paused = None,
        }
    }
}
